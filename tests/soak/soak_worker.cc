// One rank of a kill-soak job (docs/faults.md, "Kill soak"), started by `braid launch` or
// mpirun. It creates the world ProcessGroup (backend: BRAID_BACKEND, else chosen from the
// layout) and runs every collective in a loop, each result checked:
//
//   soak_worker SEED ITERATIONS
//
// Every rank draws the same sequence of (collective, size) pairs from SEED, so the calls
// match across ranks; the kill-soak driver (kill_soak.sh) SIGKILLs or SIGSTOPs one rank from
// outside at a random moment and checks what the others report.
//
// Output (relayed with a [rank N] prefix under braid launch): "job <prefix> pid <pid>" first
// (the driver's handle on /dev/shm and on the process), "ready" once the group exists, then
// "iteration <i>" every 64 iterations; "done" after the last. A braid error prints
// "error: <what()>" on stderr and exits 3; a wrong result prints "wrong result: ..." and exits
// 4; usage errors exit 2.
//
// SIGTERM is caught (it only sets a flag), as in collective_worker.cc: when one rank fails the
// launcher SIGTERMs the others, and each survivor must still report its own error.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "braid/comm/object.h"
#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "braid/tensor/tensor.h"
#include "braid/tensor/tree.h"

namespace braid {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitBraidError = 3;
constexpr int kExitWrongResult = 4;

// 0 and 1 (edge cases), odd counts, and 2^18 floats (1 MiB: above shm's one-shot threshold,
// so the striped paths run too).
constexpr int64_t kCounts[] = {0, 1, 7, 255, 1000, 4099, 70001, int64_t{1} << 18};

volatile sig_atomic_t g_terminate_requested = 0;
void on_sigterm(int) {
  g_terminate_requested = 1;
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

[[noreturn]] void wrong(const std::string& what) {
  std::fprintf(stderr, "wrong result: %s\n", what.c_str());
  std::fflush(stderr);
  std::exit(kExitWrongResult);
}

// Small integers as floats: every sum below is exact in any order.
Tensor filled(int64_t count, float base, int mod) {
  Tensor t = Tensor::empty({count});
  float* p = t.data<float>();
  for (int64_t i = 0; i < count; ++i) p[i] = base + float(i % mod);
  return t;
}

void expect(const Tensor& t, float base, int mod, const std::string& what) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (p[i] != base + float(i % mod)) {
      wrong(what + " element " + std::to_string(i) + " = " + std::to_string(p[i]) + ", expected " +
            std::to_string(base + float(i % mod)));
    }
  }
}

class Soak {
 public:
  explicit Soak(std::shared_ptr<ProcessGroup> pg)
      : pg_(std::move(pg)), me_(pg_->rank()), n_(pg_->size()) {}

  // One call of collective `op` (0 .. kOps - 1) with `count` elements per rank (per block).
  void run(int op, int64_t count, int root) {
    switch (op) {
      case 0:
        all_reduce(count);
        break;
      case 1:
        broadcast(count, root);
        break;
      case 2:
        reduce(count, root);
        break;
      case 3:
        all_gather(count);
        break;
      case 4:
        reduce_scatter(count);
        break;
      case 5:
        all_to_all(count);
        break;
      case 6:
        all_to_all_v(count);
        break;
      case 7:
        gather(count, root);
        break;
      case 8:
        scatter(count, root);
        break;
      case 9:
        pg_->barrier();
        break;
      case 10:
        send_recv(count);
        break;
      case 11:
        objects(count, root);
        break;
      default:
        wrong("unknown op " + std::to_string(op));
    }
  }
  static constexpr int kOps = 12;
  int size() const { return n_; }

 private:
  float rank_sum() const { return float(n_ * (n_ + 1) / 2); }  // sum of r + 1

  void all_reduce(int64_t count) {
    Tensor t = filled(count, float(me_ + 1), 7);
    pg_->all_reduce(t);
    // sum over r of (r + 1 + i % 7) = n (n + 1) / 2 + n (i % 7): check as base + (n i%7).
    const float* p = t.data<float>();
    for (int64_t i = 0; i < count; ++i) {
      if (p[i] != rank_sum() + float(n_ * (i % 7)))
        wrong("all_reduce element " + std::to_string(i));
    }
  }

  void broadcast(int64_t count, int root) {
    Tensor t = me_ == root ? filled(count, float(root + 1), 13) : Tensor::zeros({count});
    pg_->broadcast(t, root);
    expect(t, float(root + 1), 13, "broadcast");
  }

  void reduce(int64_t count, int root) {
    Tensor t = filled(count, float(me_ + 1), 1);
    pg_->reduce(t, root);
    if (me_ == root) expect(t, rank_sum(), 1, "reduce");
  }

  void all_gather(int64_t count) {
    Tensor in = filled(count, float(me_ + 1), 11);
    Tensor out = Tensor::zeros({n_ * count});
    pg_->all_gather_into(out, in);
    for (int r = 0; r < n_; ++r) {
      expect(out.slice(0, r * count, (r + 1) * count).contiguous(), float(r + 1), 11,
             "all_gather block " + std::to_string(r));
    }
  }

  void reduce_scatter(int64_t count) {
    // Block b of rank r holds r + b: the sum of block me over ranks is n (n - 1) / 2 + n me.
    Tensor in = Tensor::empty({n_ * count});
    for (int b = 0; b < n_; ++b) {
      in.slice(0, b * count, (b + 1) * count).copy_(filled(count, float(me_ + b), 1));
    }
    Tensor out = Tensor::zeros({count});
    pg_->reduce_scatter_from(out, in);
    expect(out, float(n_ * (n_ - 1) / 2 + n_ * me_), 1, "reduce_scatter");
  }

  void all_to_all(int64_t count) {
    // Block b of rank r (for rank b) holds 100 r + b; block s received here: 100 s + me.
    Tensor in = Tensor::empty({n_ * count});
    for (int b = 0; b < n_; ++b) {
      in.slice(0, b * count, (b + 1) * count).copy_(filled(count, float(100 * me_ + b), 3));
    }
    Tensor out = Tensor::zeros({n_ * count});
    pg_->all_to_all(out, in);
    for (int s = 0; s < n_; ++s) {
      expect(out.slice(0, s * count, (s + 1) * count).contiguous(), float(100 * s + me_), 3,
             "all_to_all block " + std::to_string(s));
    }
  }

  // Rank r sends (count + r + d) % (count + 1) elements to rank d.
  int64_t split(int64_t count, int from, int to) const { return (count + from + to) % (count + 1); }

  void all_to_all_v(int64_t count) {
    std::vector<int64_t> in_splits(n_), out_splits(n_);
    int64_t in_total = 0, out_total = 0;
    for (int r = 0; r < n_; ++r) {
      in_splits[r] = split(count, me_, r);
      out_splits[r] = split(count, r, me_);
      in_total += in_splits[r];
      out_total += out_splits[r];
    }
    Tensor in = Tensor::empty({in_total});
    int64_t at = 0;
    for (int d = 0; d < n_; ++d) {
      in.slice(0, at, at + in_splits[d]).copy_(filled(in_splits[d], float(100 * me_ + d), 5));
      at += in_splits[d];
    }
    Tensor out = Tensor::zeros({out_total});
    pg_->all_to_all(out, in, out_splits, in_splits);
    at = 0;
    for (int s = 0; s < n_; ++s) {
      expect(out.slice(0, at, at + out_splits[s]).contiguous(), float(100 * s + me_), 5,
             "all_to_all_v block " + std::to_string(s));
      at += out_splits[s];
    }
  }

  void gather(int64_t count, int root) {
    std::vector<Tensor> outs;
    if (me_ == root) {
      for (int r = 0; r < n_; ++r) outs.push_back(Tensor::zeros({count}));
    }
    pg_->gather(outs, filled(count, float(me_ + 1), 11), root);
    for (size_t r = 0; r < outs.size(); ++r) {
      expect(outs[r], float(r + 1), 11, "gather block " + std::to_string(r));
    }
  }

  void scatter(int64_t count, int root) {
    std::vector<Tensor> ins;
    if (me_ == root) {
      for (int b = 0; b < n_; ++b) ins.push_back(filled(count, float(10 * b + root), 9));
    }
    Tensor out = Tensor::zeros({count});
    pg_->scatter(out, ins, root);
    expect(out, float(10 * me_ + root), 9, "scatter");
  }

  // Pairs (0, 1), (2, 3), ...: the lower rank sends first, the higher receives first; a last
  // rank without a partner (odd n) sits this one out.
  void send_recv(int64_t count) {
    const int partner = me_ ^ 1;
    if (partner >= n_) return;
    Tensor out = filled(count, float(me_ + 1), 17);
    Tensor in = Tensor::zeros({count});
    if (me_ < partner) {
      pg_->send(out, partner, 5);
      pg_->recv(in, partner, 5);
    } else {
      pg_->recv(in, partner, 5);
      pg_->send(out, partner, 5);
    }
    expect(in, float(partner + 1), 17, "recv");
  }

  void objects(int64_t count, int root) {
    const Tree mine =
        Tree::map({{"rank", Tree(me_)},
                   {"count", Tree(count)},
                   {"text", Tree(std::string(size_t(count % 300), char('a' + me_)))}});
    const std::vector<Tree> all = all_gather_object(*pg_, mine);
    if (int(all.size()) != n_) wrong("all_gather_object size");
    for (int r = 0; r < n_; ++r) {
      if (all[r].at("rank").as_int() != r ||
          all[r].at("text").as_string().size() != size_t(count % 300)) {
        wrong("all_gather_object entry " + std::to_string(r));
      }
    }
    std::vector<Tree> list;
    if (me_ == root) list = {Tree(int64_t{root}), Tree(std::string("from root"))};
    broadcast_object_list(*pg_, list, root);
    if (list.size() != 2 || list[0].as_int() != root) wrong("broadcast_object_list");
    const std::vector<Tree> got = gather_object(*pg_, mine, root);
    if (me_ == root) {
      for (int r = 0; r < n_; ++r) {
        if (got.at(r).at("rank").as_int() != r) wrong("gather_object entry " + std::to_string(r));
      }
    }
  }

  std::shared_ptr<ProcessGroup> pg_;
  int me_;
  int n_;
};

int run(uint64_t seed, int64_t iterations) {
  Soak soak(ProcessGroup::create(ProcessGroupOptions{}));
  say("ready");
  std::mt19937_64 rng(seed);
  const int n = int(std::size(kCounts));
  for (int64_t it = 1; it <= iterations; ++it) {
    const int op = int(rng() % Soak::kOps);
    const int64_t count = kCounts[rng() % n];
    const int root = int(rng() % uint64_t(soak.size()));
    soak.run(op, count, root);
    if (it % 64 == 0) say("iteration " + std::to_string(it));
  }
  say("done");
  return 0;
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: soak_worker SEED ITERATIONS\n");
    return braid::kExitUsage;
  }
  struct sigaction sa {};
  sa.sa_handler = braid::on_sigterm;
  sigaction(SIGTERM, &sa, nullptr);
  const char* token = std::getenv("BRAID_STORE_TOKEN");
  std::printf("job %.12s pid %d\n", token ? token : "none", int(getpid()));
  std::fflush(stdout);
  try {
    return braid::run(std::strtoull(argv[1], nullptr, 10), std::atoll(argv[2]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::fflush(stderr);
    return braid::kExitBraidError;
  }
}
