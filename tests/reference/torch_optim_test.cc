// Compares braid's optimizers, GradScaler, gradient clipping and LR schedules with PyTorch
// 1.13 outputs stored in torch_optim.safetensors (see gen_torch_optim.py for the layout).
//
// Tolerances (docs/mixed-precision.md, "Checked against PyTorch"): braid rounds every f32
// operation separately, while torch's vectorized CPU kernels fuse some of them (fmadd in
// add(alpha) / addcmul), so f32 parameters may differ by a few units in the last place per
// step: |braid - torch| <= 4e-7 * |torch| + 1e-7 after five steps (1e-6 and 2e-7 after the
// scaler's 14 momentum steps). bf16 parameters are the
// master rounded to bf16, equal unless the master sits on a rounding boundary (one bf16 ulp
// allowed). Scaler decisions, unscaled gradients (a power-of-two factor), clip_grad_value_
// and the LR schedules (the same double formulas) are compared exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "braid/amp/grad_scaler.h"
#include "braid/nn/clip_grad.h"
#include "braid/nn/lr_scheduler.h"
#include "braid/nn/optim.h"
#include "braid/tensor/safetensors.h"

namespace braid {
namespace {

const char* kFile = BRAID_SOURCE_DIR "/tests/reference/torch_optim.safetensors";

using nlohmann::json;

const SafetensorsFile& file() {
  static const SafetensorsFile f = SafetensorsFile::open(kFile);
  return f;
}

json case_json(const std::string& name) {
  return json::parse(file().metadata().at("case." + name));
}

std::vector<std::string> cases_of(const std::string& kind) {
  std::vector<std::string> out;
  for (const auto& n : json::parse(file().metadata().at("cases"))) {
    if (case_json(n.get<std::string>()).at("kind") == kind) out.push_back(n.get<std::string>());
  }
  return out;
}

double num(const json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return NAN;
    return s == "inf" ? INFINITY : -INFINITY;
  }
  return j.get<double>();
}

// A fresh tensor (the file's are copy-on-write views; the optimizer writes into params).
Tensor load(const std::string& name) {
  return file().get(name).contiguous().clone();
}

struct Tol {
  double rtol, atol;
};

void expect_close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what,
                  double* worst = nullptr) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto g = got.to_vector(), w = want.to_vector();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << "[" << i << "]";
      continue;
    }
    const double err = std::fabs(g[i] - w[i]);
    if (worst && w[i] != 0) *worst = std::max(*worst, err / std::fabs(w[i]));
    if (err > tol.atol + tol.rtol * std::fabs(w[i]) && ++bad <= 3) {
      ADD_FAILURE() << what << "[" << i << "]: braid " << g[i] << ", torch " << w[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements out of tolerance";
}

std::unique_ptr<nn::Optimizer> make_optimizer(const json& c, std::vector<nn::Parameter> params) {
  nn::OptimizerOptions o;
  o.lr = c.at("lr").get<double>();
  o.weight_decay = c.at("weight_decay").get<double>();
  o.maximize = c.at("maximize").get<bool>();
  const std::string algo = c.at("algo").get<std::string>();
  if (algo == "sgd") {
    o.momentum = c.at("momentum").get<double>();
    o.dampening = c.at("dampening").get<double>();
    o.nesterov = c.at("nesterov").get<bool>();
    return std::make_unique<nn::SGD>(std::move(params), o);
  }
  o.beta1 = c.at("betas").at(0).get<double>();
  o.beta2 = c.at("betas").at(1).get<double>();
  o.eps = c.at("eps").get<double>();
  o.amsgrad = c.at("amsgrad").get<bool>();
  if (algo == "adam") return std::make_unique<nn::Adam>(std::move(params), o);
  return std::make_unique<nn::AdamW>(std::move(params), o);
}

TEST(TorchOptim, OptimizersMatchTorchStepByStep) {
  const auto names = cases_of("optim");
  ASSERT_EQ(names.size(), 13u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const json c = case_json(name);
    const int n = c.at("params").get<int>();
    const bool bf16 = c.at("param_dtype") == "bf16";
    std::vector<nn::Parameter> params;
    for (int i = 0; i < n; ++i) params.emplace_back(load(name + ".param." + std::to_string(i)));
    auto opt = make_optimizer(c, params);
    double worst = 0;
    for (int s = 1; s <= c.at("steps").get<int>(); ++s) {
      for (int i = 0; i < n; ++i) {
        params[i].grad() = load(name + ".grad." + std::to_string(s) + "." + std::to_string(i));
      }
      opt->step();
      for (int i = 0; i < n; ++i) {
        const std::string suffix = std::to_string(s) + "." + std::to_string(i);
        const Tensor want = file().get(name + ".out." + suffix);
        if (bf16) {
          expect_close(opt->master(params[i]), file().get(name + ".master." + suffix), {4e-7, 1e-7},
                       name + " master " + suffix, &worst);
          expect_close(params[i].data(), want, {8e-3, 0}, name + " param " + suffix);
        } else {
          expect_close(params[i].data(), want, {4e-7, 1e-7}, name + " param " + suffix, &worst);
        }
      }
    }
    // The state after the last step, by torch's names.
    const nn::OptimizerState st = opt->state_dict();
    for (int i = 0; i < n; ++i) {
      for (const char* k : {"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
        const std::string key = name + ".state." + std::to_string(i) + "." + k;
        if (!file().contains(key)) continue;
        const std::string ours = "state." + std::to_string(i) + "." + k;
        auto it = std::find_if(st.tensors.begin(), st.tensors.end(),
                               [&](const auto& p) { return p.first == ours; });
        ASSERT_NE(it, st.tensors.end()) << ours;
        expect_close(it->second, file().get(key), {4e-6, 1e-12}, key);
      }
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", worst);
    RecordProperty(name + "_worst_rel_err", text);
  }
}

TEST(TorchOptim, GradScalerSequenceMatchesTorch) {
  const std::string name = "grad_scaler_sgd";
  const json c = case_json(name);
  const int n = c.at("params").get<int>();
  std::vector<nn::Parameter> params;
  for (int i = 0; i < n; ++i) params.emplace_back(load(name + ".param." + std::to_string(i)));
  nn::SGD opt(params, {.lr = c.at("lr").get<double>(), .momentum = c.at("momentum").get<double>()});
  amp::GradScaler scaler({.init_scale = c.at("init_scale").get<double>(),
                          .growth_factor = c.at("growth_factor").get<double>(),
                          .backoff_factor = c.at("backoff_factor").get<double>(),
                          .growth_interval = c.at("growth_interval").get<int64_t>()});
  int skipped = 0;
  for (const json& st : c.at("steps")) {
    const int s = st.at("step").get<int>();
    SCOPED_TRACE("step " + std::to_string(s));
    EXPECT_EQ(scaler.get_scale(), num(st.at("scale_before")));
    for (int i = 0; i < n; ++i) {
      params[i].grad() = load(name + ".grad." + std::to_string(s) + "." + std::to_string(i));
    }
    const bool stepped = scaler.step(opt);
    EXPECT_EQ(!stepped, st.at("skipped").get<bool>());
    skipped += !stepped;
    for (int i = 0; i < n; ++i) {
      const std::string suffix = std::to_string(s) + "." + std::to_string(i);
      expect_close(params[i].grad(), file().get(name + ".unscaled." + suffix), {0, 0},
                   "unscaled " + suffix);
      // 14 momentum steps accumulate more rounding differences than the 5-step cases.
      expect_close(params[i].data(), file().get(name + ".out." + suffix), {1e-6, 2e-7},
                   "param " + suffix);
    }
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), num(st.at("scale_after")));
    EXPECT_EQ(scaler.growth_tracker(), st.at("growth_tracker_after").get<int64_t>());
  }
  EXPECT_EQ(skipped, 3);
  const json want = c.at("state_dict");
  const json got = json::parse(scaler.state_json());
  for (const char* k :
       {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    EXPECT_EQ(got.at(k).get<double>(), num(want.at(k))) << k;
  }
}

TEST(TorchOptim, ClipGradNormMatchesTorch) {
  const auto names = cases_of("clip_grad_norm");
  ASSERT_EQ(names.size(), 4u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const json c = case_json(name);
    std::vector<Tensor> grads;
    for (int i = 0; i < c.at("params").get<int>(); ++i)
      grads.push_back(load(name + ".grad." + std::to_string(i)));
    const double norm_type = c.at("norm_type") == "inf" ? nn::kInfNorm : 2.0;
    const double total = nn::clip_grad_norm_(grads, c.at("max_norm").get<double>(), norm_type);
    const double want = file().get(name + ".total_norm").item();
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(total));
    } else {
      EXPECT_NEAR(total, want, 2e-7 * want);  // accumulation order differs from torch's
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      expect_close(grads[i], file().get(name + ".out." + std::to_string(i)), {6e-7, 0},
                   "grad " + std::to_string(i));
    }
  }
}

TEST(TorchOptim, ClipGradValueMatchesTorchExactly) {
  const std::string name = "clip_value_0.3";
  const json c = case_json(name);
  std::vector<Tensor> grads;
  for (int i = 0; i < c.at("params").get<int>(); ++i)
    grads.push_back(load(name + ".grad." + std::to_string(i)));
  nn::clip_grad_value_(grads, c.at("clip_value").get<double>());
  for (size_t i = 0; i < grads.size(); ++i) {
    expect_close(grads[i], file().get(name + ".out." + std::to_string(i)), {0, 0}, "grad");
  }
}

TEST(TorchOptim, TransformersSchedulesMatchExactly) {
  const std::map<std::string, nn::SchedulerType> types = {
      {"get_constant_schedule", nn::SchedulerType::kConstant},
      {"get_constant_schedule_with_warmup", nn::SchedulerType::kConstantWithWarmup},
      {"get_linear_schedule_with_warmup", nn::SchedulerType::kLinear},
      {"get_cosine_schedule_with_warmup", nn::SchedulerType::kCosine},
      {"get_cosine_with_hard_restarts_schedule_with_warmup",
       nn::SchedulerType::kCosineWithRestarts},
      {"get_polynomial_decay_schedule_with_warmup", nn::SchedulerType::kPolynomial}};
  int checked = 0;
  for (const std::string& name : cases_of("lr_schedule")) {
    const json c = case_json(name);
    auto it = types.find(c.at("schedule").get<std::string>());
    if (it == types.end()) continue;  // torch's own schedulers: not braid's API
    SCOPED_TRACE(name);
    nn::ScheduleOptions o;
    if (c.contains("num_warmup_steps"))
      o.num_warmup_steps = c.at("num_warmup_steps").get<int64_t>();
    if (c.contains("num_training_steps"))
      o.num_training_steps = c.at("num_training_steps").get<int64_t>();
    if (c.contains("num_cycles")) o.num_cycles = c.at("num_cycles").get<double>();
    if (c.contains("lr_end")) o.lr_end = c.at("lr_end").get<double>();
    if (c.contains("power")) o.power = c.at("power").get<double>();
    nn::SGD opt(nn::make_parameters({Tensor::zeros({1})}), {.lr = c.at("base_lr").get<double>()});
    nn::LRScheduler sched(opt, it->second, o);
    const auto want = file().get(name + ".lr").to_vector();
    ASSERT_EQ(want.size(), c.at("scheduler_steps").get<size_t>() + 1);
    for (size_t k = 0; k < want.size(); ++k) {
      if (k > 0) sched.step();
      EXPECT_EQ(sched.get_last_lr()[0], want[k]) << "after " << k << " steps";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

}  // namespace
}  // namespace braid
