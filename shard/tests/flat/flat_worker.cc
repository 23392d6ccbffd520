// A framework with its own autograd, sharded by FlatParameters (flat_params.h): a 3-layer
// tanh MLP whose forward and backward are written here by hand on raw float arrays (nothing
// of braid's nn runs them), trained under `braid launch` so run_flat_equivalence.sh can
// compare world sizes, ZeRO stages and resumes bit for bit.
//
//   flat_worker train <stage 0-3|plain> <G> <steps> <out.safetensors> [--no-overlap]
//               [--save-at K DIR] [--resume DIR --start K] [--bf16-grads]
//   flat_worker compare <a.safetensors> <b.safetensors>      (exact)
//
// Global batch: G micro-batches of 4 rows, a pure function of (step, micro-batch index); rank
// r runs micro-batches r, r + W, ... "plain" is one process without braid's sharding:
// the G gradients summed in order, scaled, and the same AdamW over whole parameters.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/nn/optim.h"
#include "braid/shard/flat_params.h"
#include "braid/tensor/ops.h"
#include "braid/tensor/safetensors.h"

namespace {

using namespace braid;

constexpr int64_t kIn = 6, kHidden = 10, kOut = 3, kRows = 4;

// The framework's layers: y = x W + b (W [in, out]), tanh after all but the last.
struct LayerDef {
  const char* unit;
  const char* weight;
  const char* bias;
  int64_t in, out;
  bool tanh;
};
const LayerDef kLayers[] = {{"mlp.0", "weight", "bias", kIn, kHidden, true},
                            {"mlp.1", "weight", "bias", kHidden, kHidden, true},
                            {"head", "proj.weight", "proj.bias", kHidden, kOut, false}};
constexpr size_t kNumLayers = 3;

std::vector<shard::FlatUnitSpec> unit_specs() {
  Generator gen(7);
  std::vector<shard::FlatUnitSpec> units;
  for (const auto& l : kLayers) {
    Tensor w = Tensor::randn({l.in, l.out}, DType::kF32, &gen);
    w = scale(w, 1.0 / std::sqrt(static_cast<double>(l.in)));
    Tensor b = scale(Tensor::randn({l.out}, DType::kF32, &gen), 0.1);
    units.push_back({l.unit, {{l.weight, w, {}}, {l.bias, b, {}}}});
  }
  return units;
}

// Micro-batch m of step s: inputs [kRows, kIn] and targets [kRows, kOut].
std::pair<std::vector<float>, std::vector<float>> micro_batch(int64_t step, int64_t m) {
  Generator gen(1000003 * static_cast<uint64_t>(step) + static_cast<uint64_t>(m) + 11);
  Tensor x = Tensor::randn({kRows, kIn}, DType::kF32, &gen);
  std::vector<float> xs(x.data<float>(), x.data<float>() + x.numel());
  std::vector<float> ts(static_cast<size_t>(kRows * kOut));
  for (int64_t r = 0; r < kRows; ++r) {  // a smooth target the MLP can learn
    for (int64_t o = 0; o < kOut; ++o) {
      float v = 0;
      for (int64_t i = 0; i < kIn; ++i) {
        v += xs[static_cast<size_t>(r * kIn + i)] * static_cast<float>((i + o) % 3 - 1) * 0.5f;
      }
      ts[static_cast<size_t>(r * kOut + o)] = std::sin(v);
    }
  }
  return {xs, ts};
}

// The framework's autograd: activations kept from the forward, gradients by hand.
struct Tape {
  std::vector<std::vector<float>> acts;  // acts[l]: input of layer l; acts[kNumLayers]: output
};

std::vector<float> layer_forward(const LayerDef& l, const float* w, const float* b,
                                 const std::vector<float>& x) {
  std::vector<float> y(static_cast<size_t>(kRows * l.out));
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < l.out; ++o) {
      float v = b[o];
      for (int64_t i = 0; i < l.in; ++i)
        v += x[static_cast<size_t>(r * l.in + i)] * w[i * l.out + o];
      y[static_cast<size_t>(r * l.out + o)] = l.tanh ? std::tanh(v) : v;
    }
  }
  return y;
}

// dy: gradient at the layer's output (after tanh); returns dx; fills dw, db.
std::vector<float> layer_backward(const LayerDef& l, const float* w, const std::vector<float>& x,
                                  const std::vector<float>& y, std::vector<float> dy,
                                  std::vector<float>& dw, std::vector<float>& db) {
  if (l.tanh) {
    for (size_t k = 0; k < dy.size(); ++k) dy[k] *= 1.0f - y[k] * y[k];
  }
  dw.assign(static_cast<size_t>(l.in * l.out), 0.0f);
  db.assign(static_cast<size_t>(l.out), 0.0f);
  std::vector<float> dx(static_cast<size_t>(kRows * l.in), 0.0f);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < l.out; ++o) {
      const float g = dy[static_cast<size_t>(r * l.out + o)];
      db[static_cast<size_t>(o)] += g;
      for (int64_t i = 0; i < l.in; ++i) {
        dw[static_cast<size_t>(i * l.out + o)] += x[static_cast<size_t>(r * l.in + i)] * g;
        dx[static_cast<size_t>(r * l.in + i)] += w[i * l.out + o] * g;
      }
    }
  }
  return dx;
}

// Mean squared error and its gradient.
double mse(const std::vector<float>& y, const std::vector<float>& t, std::vector<float>& dy) {
  double loss = 0;
  dy.resize(y.size());
  for (size_t k = 0; k < y.size(); ++k) {
    const float d = y[k] - t[k];
    loss += static_cast<double>(d) * d;
    dy[k] = 2.0f * d / static_cast<float>(y.size());
  }
  return loss / static_cast<double>(y.size());
}

Tensor as_tensor(const std::vector<float>& v, Shape shape) {
  return Tensor::from_blob(const_cast<float*>(v.data()), std::move(shape), DType::kF32);
}

struct Opts {
  std::string stage;
  int64_t G = 4, steps = 3;
  std::string out;
  bool overlap = true, bf16_grads = false;
  int64_t save_at = -1, start = 0;
  std::string save_dir, resume_dir;
};

const nn::OptimizerOptions kAdam{.lr = 1e-2, .weight_decay = 0.01};

int plain(const Opts& o) {
  auto specs = unit_specs();
  std::vector<nn::Parameter> params;
  for (auto& u : specs) {
    for (auto& p : u.params) params.emplace_back(p.initial.clone());
  }
  nn::AdamW opt(params, kAdam);
  for (int64_t s = 0; s < o.steps; ++s) {
    std::vector<Tensor> acc(params.size());
    double loss = 0;
    for (int64_t m = 0; m < o.G; ++m) {
      auto [x, t] = micro_batch(s, m);
      Tape tape;
      tape.acts.push_back(x);
      for (size_t l = 0; l < kNumLayers; ++l) {
        tape.acts.push_back(layer_forward(kLayers[l], params[2 * l].data().data<float>(),
                                          params[2 * l + 1].data().data<float>(), tape.acts[l]));
      }
      std::vector<float> dy;
      loss += mse(tape.acts.back(), t, dy);
      for (size_t l = kNumLayers; l-- > 0;) {
        std::vector<float> dw, db;
        dy = layer_backward(kLayers[l], params[2 * l].data().data<float>(), tape.acts[l],
                            tape.acts[l + 1], dy, dw, db);
        const Tensor g[2] = {as_tensor(dw, {kLayers[l].in, kLayers[l].out}),
                             as_tensor(db, {kLayers[l].out})};
        for (size_t k = 0; k < 2; ++k) {
          Tensor gk = o.bf16_grads ? g[k].to(DType::kBF16).to(DType::kF32) : g[k];
          Tensor& a = acc[2 * l + k];
          a = a.defined() ? a + gk : gk.clone();
        }
      }
    }
    for (size_t k = 0; k < params.size(); ++k) params[k].grad() = scale(acc[k], 1.0 / double(o.G));
    opt.step();
    opt.zero_grad();
    std::printf("step %lld loss %.6f\n", static_cast<long long>(s), loss / double(o.G));
  }
  NamedTensors out;
  size_t k = 0;
  for (auto& u : specs) {
    for (auto& p : u.params) out.emplace_back(u.name + "." + p.name, params[k++].data());
  }
  save_safetensors(o.out, out);
  return 0;
}

int train(const Opts& o) {
  auto pg = ProcessGroup::create({});
  const int W = pg->size(), rank = pg->rank();
  BRAID_CHECK(o.G % W == 0, kInvalidArgument, "G = ", o.G, " must be a multiple of W = ", W);
  shard::ShardingOptions so;
  so.stage = shard::zero_stage_from_int(std::stoll(o.stage));
  so.overlap = o.overlap;
  shard::FlatParameters fp(unit_specs(), pg, so);
  nn::AdamW opt(fp.sharded().optimizer_parameters(), kAdam);
  if (!o.resume_dir.empty()) fp.sharded().load_checkpoint(o.resume_dir, &opt);

  for (int64_t s = o.start; s < o.steps; ++s) {
    double loss = 0;
    for (int64_t j = 0; j < o.G / W; ++j) {
      auto [x, t] = micro_batch(s, j * W + rank);
      Tape tape;
      tape.acts.push_back(x);
      fp.begin_forward();
      for (size_t l = 0; l < kNumLayers; ++l) {
        fp.gather(l);
        tape.acts.push_back(layer_forward(kLayers[l], fp.param(l, 0).data<float>(),
                                          fp.param(l, 1).data<float>(), tape.acts[l]));
        fp.release(l);
      }
      fp.end_forward();
      std::vector<float> dy;
      loss += mse(tape.acts.back(), t, dy);
      fp.begin_backward();
      for (size_t l = kNumLayers; l-- > 0;) {
        fp.gather(l);
        std::vector<float> dw, db;
        dy = layer_backward(kLayers[l], fp.param(l, 0).data<float>(), tape.acts[l],
                            tape.acts[l + 1], dy, dw, db);
        std::vector<Tensor> g = {as_tensor(dw, {kLayers[l].in, kLayers[l].out}),
                                 as_tensor(db, {kLayers[l].out})};
        if (o.bf16_grads) {
          for (auto& gk : g) gk = gk.to(DType::kBF16);
        }
        fp.reduce_gradients(l, g);
      }
      fp.end_backward();
    }
    fp.sharded().finish_gradients(1.0 / double(o.G));
    opt.step();
    opt.zero_grad();  // stage 0 steps the parameters themselves: their gradients must go
    fp.sharded().after_step();
    Tensor total = Tensor::from_vector({loss}, {1}, DType::kF64);
    pg->all_reduce(total);
    if (rank == 0) {
      std::printf("step %lld loss %.6f\n", static_cast<long long>(s),
                  total.to_vector()[0] / double(o.G));
    }
    if (s + 1 == o.save_at) fp.sharded().save_checkpoint(o.save_dir, &opt);
  }
  NamedTensors full = fp.sharded().full_state_dict();
  if (rank == 0) save_safetensors(o.out, full);
  return 0;
}

int compare(const std::string& a, const std::string& b) {
  std::map<std::string, Tensor> A, B;
  for (auto& [n, t] : load_safetensors(a)) A[n] = t;
  for (auto& [n, t] : load_safetensors(b)) B[n] = t;
  BRAID_CHECK(A.size() == B.size() && !A.empty(), kInvalidArgument, a, " has ", A.size(),
              " tensors, ", b, " has ", B.size());
  for (auto& [n, t] : A) {
    auto it = B.find(n);
    BRAID_CHECK(it != B.end(), kInvalidArgument, b, " lacks ", n);
    BRAID_CHECK(t.nbytes() == it->second.nbytes() &&
                    std::memcmp(t.data_ptr(), it->second.data_ptr(), t.nbytes()) == 0,
                kInvalidArgument, n, " differs between ", a, " and ", b,
                " (expected the same bits)");
  }
  std::printf("%s and %s agree bit for bit\n", a.c_str(), b.c_str());
  return 0;
}

int run(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "compare" && argc == 4) return compare(argv[2], argv[3]);
  BRAID_CHECK(cmd == "train" && argc >= 6, kInvalidArgument,
              "usage: flat_worker train <0-3|plain> <G> <steps> <out> [options] | compare A B");
  Opts o;
  o.stage = argv[2];
  o.G = std::stoll(argv[3]);
  o.steps = std::stoll(argv[4]);
  o.out = argv[5];
  for (int i = 6; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-overlap") {
      o.overlap = false;
    } else if (a == "--bf16-grads") {
      o.bf16_grads = true;
    } else if (a == "--save-at" && i + 2 < argc) {
      o.save_at = std::stoll(argv[++i]);
      o.save_dir = argv[++i];
    } else if (a == "--resume" && i + 1 < argc) {
      o.resume_dir = argv[++i];
    } else if (a == "--start" && i + 1 < argc) {
      o.start = std::stoll(argv[++i]);
    } else {
      BRAID_CHECK(false, kInvalidArgument, "flat_worker: unknown option '", a, "'");
    }
  }
  return o.stage == "plain" ? plain(o) : train(o);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flat_worker: %s\n", e.what());
    return 1;
  }
}
