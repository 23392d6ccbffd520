// The C ABI's ZeRO functions (braid.h, "ZeRO for frameworks with their own autograd"): a
// registration phase collecting units, then shard::FlatParameters and an AdamW on its shards.
#include <memory>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/nn/optim.h"
#include "braid/shard/flat_params.h"
#include "c_api_internal.h"

struct braidZero {
  std::shared_ptr<braid::ProcessGroup> pg;
  braid::shard::ShardingOptions options;
  std::vector<braid::shard::FlatUnitSpec> units;  // until braidZeroFinalize
  std::unique_ptr<braid::shard::FlatParameters> fp;
  std::unique_ptr<braid::nn::AdamW> opt;
};

namespace braid::capi {
namespace {

DType zero_dtype(braidDataType_t dt, const char* what) {
  const DType d = dtype_of(dt, what);
  BRAID_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16, kInvalidArgument, what,
              " must be braidFloat32, braidBfloat16 or braidFloat16, got ", dtype_name(d));
  return d;
}

shard::FlatParameters& ready(braidZero_t z, const char* fn) {
  require(z, "zero");
  BRAID_CHECK(z->fp != nullptr, kInvalidArgument, fn,
              " needs a finalized braidZero_t: call braidZeroFinalize after the last "
              "braidZeroAddUnit");
  return *z->fp;
}

size_t unit_index(braidZero_t z, int unit) {
  BRAID_CHECK(unit >= 0 && static_cast<size_t>(unit) < z->fp->num_units(), kOutOfRange, "unit ",
              unit, " does not exist; there are ", z->fp->num_units(), " units");
  return static_cast<size_t>(unit);
}

}  // namespace
}  // namespace braid::capi

using namespace braid;
using namespace braid::capi;

extern "C" {

BRAID_API braidResult_t braidZeroCreate(braidComm_t comm, const braidZeroConfig_t* config,
                                        braidZero_t* zero) {
  return guard("braidZeroCreate", [&] {
    require(comm, "comm");
    require(zero, "zero");
    *zero = nullptr;
    braidZeroConfig_t c = BRAID_ZERO_CONFIG_INITIALIZER;
    if (config != nullptr) {
      BRAID_CHECK(config->size == sizeof(braidZeroConfig_t), kInvalidArgument,
                  "config->size must be sizeof(braidZeroConfig_t) = ", sizeof(braidZeroConfig_t),
                  ", got ", config->size, " (start from BRAID_ZERO_CONFIG_INITIALIZER)");
      c = *config;
    }
    auto z = std::make_unique<braidZero>();
    z->pg = comm->pg;
    z->options.stage = shard::zero_stage_from_int(c.stage);
    z->options.precision.param_dtype = zero_dtype(c.param_dtype, "config->param_dtype");
    z->options.precision.reduce_dtype = zero_dtype(c.reduce_dtype, "config->reduce_dtype");
    z->options.reshard_after_forward = c.reshard_after_forward != 0;
    z->options.sync_module_states = c.sync_module_states != 0;
    BRAID_CHECK(c.overlap >= -1 && c.overlap <= 1, kInvalidArgument,
                "config->overlap must be -1 (auto), 0 or 1, got ", c.overlap);
    if (c.overlap >= 0) z->options.overlap = c.overlap == 1;
    z->options.forward_prefetch = z->options.backward_prefetch = c.prefetch != 0;
    *zero = z.release();
  });
}

BRAID_API braidResult_t braidZeroAddUnit(braidZero_t zero, const char* unit_name, size_t n,
                                         const char* const* param_names,
                                         const DLTensor* const* initial_values, int* unit) {
  return guard("braidZeroAddUnit", [&] {
    require(zero, "zero");
    require(unit_name, "unit_name");
    require(unit, "unit");
    BRAID_CHECK(zero->fp == nullptr, kInvalidArgument, "unit '", unit_name,
                "' comes after braidZeroFinalize; units are registered before it");
    BRAID_CHECK(n > 0, kInvalidArgument, "unit '", unit_name, "' has no parameters (n = 0)");
    require(param_names, "param_names");
    require(initial_values, "initial_values");
    shard::FlatUnitSpec spec{unit_name, {}};
    for (size_t i = 0; i < n; ++i) {
      const std::string what = "initial_values[" + std::to_string(i) + "]";
      require(param_names[i], ("param_names[" + std::to_string(i) + "]").c_str());
      Tensor t = tensor_from_dlpack(initial_values[i], what.c_str());
      BRAID_CHECK(t.dtype() == DType::kF32 && t.device() == kCPU, kInvalidArgument, what,
                  " (parameter '", param_names[i], "' of unit '", unit_name,
                  "') must be f32 host memory, got ", dtype_name(t.dtype()), " on ",
                  t.device().str());
      spec.params.push_back({param_names[i], t.clone(), {}});  // copied now: borrowed memory
    }
    zero->units.push_back(std::move(spec));
    *unit = static_cast<int>(zero->units.size() - 1);
  });
}

BRAID_API braidResult_t braidZeroFinalize(braidZero_t zero, double lr, double beta1, double beta2,
                                          double eps, double weight_decay) {
  return guard("braidZeroFinalize", [&] {
    require(zero, "zero");
    BRAID_CHECK(zero->fp == nullptr, kInvalidArgument, "braidZeroFinalize was already called");
    zero->fp =
        std::make_unique<shard::FlatParameters>(std::move(zero->units), zero->pg, zero->options);
    zero->units.clear();
    nn::OptimizerOptions o;
    o.lr = lr;
    o.beta1 = beta1;
    o.beta2 = beta2;
    o.eps = eps;
    o.weight_decay = weight_decay;
    zero->opt = std::make_unique<nn::AdamW>(zero->fp->sharded().optimizer_parameters(), o);
  });
}

BRAID_API braidResult_t braidZeroNumUnits(braidZero_t zero, int* count) {
  return guard("braidZeroNumUnits", [&] {
    require(count, "count");
    *count = static_cast<int>(ready(zero, "braidZeroNumUnits").num_units());
  });
}

BRAID_API braidResult_t braidZeroBeginForward(braidZero_t zero) {
  return guard("braidZeroBeginForward",
               [&] { ready(zero, "braidZeroBeginForward").begin_forward(); });
}
BRAID_API braidResult_t braidZeroEndForward(braidZero_t zero) {
  return guard("braidZeroEndForward", [&] { ready(zero, "braidZeroEndForward").end_forward(); });
}
BRAID_API braidResult_t braidZeroBeginBackward(braidZero_t zero) {
  return guard("braidZeroBeginBackward",
               [&] { ready(zero, "braidZeroBeginBackward").begin_backward(); });
}
BRAID_API braidResult_t braidZeroEndBackward(braidZero_t zero) {
  return guard("braidZeroEndBackward", [&] { ready(zero, "braidZeroEndBackward").end_backward(); });
}

BRAID_API braidResult_t braidZeroGather(braidZero_t zero, int unit) {
  return guard("braidZeroGather", [&] {
    auto& fp = ready(zero, "braidZeroGather");
    fp.gather(unit_index(zero, unit));
  });
}

BRAID_API braidResult_t braidZeroParam(braidZero_t zero, int unit, size_t i,
                                       DLManagedTensor** tensor) {
  return guard("braidZeroParam", [&] {
    require(tensor, "tensor");
    *tensor = nullptr;
    auto& fp = ready(zero, "braidZeroParam");
    *tensor = to_dlpack(fp.param(unit_index(zero, unit), i));
  });
}

BRAID_API braidResult_t braidZeroRelease(braidZero_t zero, int unit) {
  return guard("braidZeroRelease", [&] {
    auto& fp = ready(zero, "braidZeroRelease");
    fp.release(unit_index(zero, unit));
  });
}

BRAID_API braidResult_t braidZeroReduceGradients(braidZero_t zero, int unit, size_t n,
                                                 const DLTensor* const* grads) {
  return guard("braidZeroReduceGradients", [&] {
    auto& fp = ready(zero, "braidZeroReduceGradients");
    const size_t u = unit_index(zero, unit);
    BRAID_CHECK(n == 0 || grads != nullptr, kInvalidArgument, "grads is NULL with n = ", n);
    std::vector<Tensor> g(n);
    for (size_t i = 0; i < n; ++i) {
      if (grads[i] == nullptr) continue;  // zero
      const std::string what = "grads[" + std::to_string(i) + "]";
      g[i] = tensor_from_dlpack(grads[i], what.c_str());
    }
    fp.reduce_gradients(u, g);
  });
}

BRAID_API braidResult_t braidZeroFinishGradients(braidZero_t zero, double scale) {
  return guard("braidZeroFinishGradients",
               [&] { ready(zero, "braidZeroFinishGradients").sharded().finish_gradients(scale); });
}

BRAID_API braidResult_t braidZeroClipGradNorm(braidZero_t zero, double max_norm, double* norm) {
  return guard("braidZeroClipGradNorm", [&] {
    const double total = ready(zero, "braidZeroClipGradNorm").sharded().clip_grad_norm_(max_norm);
    if (norm != nullptr) *norm = total;
  });
}

BRAID_API braidResult_t braidZeroSetLearningRate(braidZero_t zero, double lr) {
  return guard("braidZeroSetLearningRate", [&] {
    ready(zero, "braidZeroSetLearningRate");
    BRAID_CHECK(lr >= 0, kInvalidArgument, "lr must be >= 0, got ", lr);
    for (auto& g : zero->opt->param_groups()) g.options.lr = lr;
  });
}

BRAID_API braidResult_t braidZeroStep(braidZero_t zero) {
  return guard("braidZeroStep", [&] {
    auto& fp = ready(zero, "braidZeroStep");
    zero->opt->step();
    zero->opt->zero_grad();
    fp.sharded().after_step();
  });
}

BRAID_API braidResult_t braidZeroFullStateDict(braidZero_t zero, braidTensorList_t* list) {
  return guard("braidZeroFullStateDict", [&] {
    require(list, "list");
    *list = nullptr;
    auto out = std::make_unique<braidTensorList>();
    out->tensors = ready(zero, "braidZeroFullStateDict").sharded().full_state_dict();
    *list = out.release();
  });
}

BRAID_API braidResult_t braidZeroSaveCheckpoint(braidZero_t zero, const char* folder) {
  return guard("braidZeroSaveCheckpoint", [&] {
    require(folder, "folder");
    ready(zero, "braidZeroSaveCheckpoint").sharded().save_checkpoint(folder, zero->opt.get());
  });
}

BRAID_API braidResult_t braidZeroLoadCheckpoint(braidZero_t zero, const char* folder) {
  return guard("braidZeroLoadCheckpoint", [&] {
    require(folder, "folder");
    ready(zero, "braidZeroLoadCheckpoint").sharded().load_checkpoint(folder, zero->opt.get());
  });
}

BRAID_API braidResult_t braidZeroDestroy(braidZero_t zero) {
  return guard("braidZeroDestroy", [&] {
    if (zero == nullptr) return;  // as free(NULL), like the other destroy calls
    std::unique_ptr<braidZero> owned(zero);
    owned->opt.reset();
    owned->fp.reset();
  });
}

}  // extern "C"
