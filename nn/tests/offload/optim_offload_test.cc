// Optimizer offload (nn/include/braid/nn/offload.h): kNvme gives the bits of the same
// optimizer without offload (SGD momentum, Adam, AdamW amsgrad, Lion; f32 and bf16 with
// masters; groups; skipped parameters; grad_scale), state dicts and files that match, memory
// bounded by buffer_count, migration, and errors naming DeepSpeed's options.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "braid/core/allocator.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/core/rng.h"
#include "braid/nn/optim.h"
#include "braid/tensor/ops.h"

namespace braid::nn {
namespace {

namespace fs = std::filesystem;
using kernels::OptimAlgo;
using ::testing::HasSubstr;

class OptimOffloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_offload_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "nvme");
  }
  void TearDown() override { fs::remove_all(dir_); }
  OffloadConfig nvme(int64_t buffer_count) const {
    return {
        .device = OffloadDevice::kNvme, .nvme_path = dir_ / "nvme", .buffer_count = buffer_count};
  }
  fs::path dir_;
};

std::vector<Parameter> make_params(DType dtype) {
  Generator gen(11);
  std::vector<Parameter> ps;
  for (Shape s : {Shape{17}, Shape{4, 9}, Shape{1}, Shape{33, 5}, Shape{8}, Shape{3, 3, 3}}) {
    ps.emplace_back(Tensor::randn(s, DType::kF32, &gen).to(dtype));
  }
  return ps;
}

std::vector<ParamGroup> two_groups(const std::vector<Parameter>& ps, OptimizerOptions a,
                                   OptimizerOptions b) {
  return {ParamGroup{{ps[0], ps[1], ps[2]}, a}, ParamGroup{{ps[3], ps[4], ps[5]}, b}};
}

std::unique_ptr<Optimizer> make(OptimAlgo algo, std::vector<ParamGroup> groups) {
  switch (algo) {
    case OptimAlgo::kSgd:
      return std::make_unique<SGD>(std::move(groups));
    case OptimAlgo::kAdam:
      return std::make_unique<Adam>(std::move(groups));
    case OptimAlgo::kAdamW:
      return std::make_unique<AdamW>(std::move(groups));
    case OptimAlgo::kLion:
      return std::make_unique<Lion>(std::move(groups));
  }
  return nullptr;
}

struct Case {
  const char* name;
  OptimAlgo algo;
  OptimizerOptions a, b;
};

std::vector<Case> cases() {
  return {
      {"sgd momentum",
       OptimAlgo::kSgd,
       {.lr = 0.1, .momentum = 0.9, .nesterov = true},
       {.lr = 0.05, .weight_decay = 0.01, .momentum = 0.5, .dampening = 0.1}},
      {"sgd plain", OptimAlgo::kSgd, {.lr = 0.1}, {.lr = 0.2}},  // no state (but bf16 masters)
      {"adam", OptimAlgo::kAdam, {.lr = 1e-2, .weight_decay = 0.01}, {.lr = 3e-3}},
      {"adamw amsgrad",
       OptimAlgo::kAdamW,
       {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true},
       {.lr = 2e-2, .weight_decay = 0.0, .amsgrad = true}},
      {"lion",
       OptimAlgo::kLion,
       {.lr = 1e-3, .weight_decay = 0.1, .beta2 = 0.99},
       {.lr = 2e-3, .beta2 = 0.99}},
  };
}

// Step `s` of the common schedule: gradients from a fixed seed in `dtype`; parameter 1 has
// none at step 2 (skipped); step 3 is a fused-unscale step.
void run_step(Optimizer& opt, std::vector<Parameter>& ps, int s, DType dtype) {
  Generator gen(1000 + s);
  for (Parameter& p : ps) p.grad() = Tensor::randn(p.data().shape(), DType::kF32, &gen).to(dtype);
  if (s == 2) ps[1].grad() = Tensor();
  if (s == 3) {
    for (Parameter& p : ps) {
      if (p.grad().defined()) p.grad() = mul(p.grad().to(DType::kF32), 4.0).to(dtype);
    }
    opt.step(0.25);
  } else {
    opt.step();
  }
  opt.zero_grad();
}

void expect_same_params(const std::vector<Parameter>& a, const std::vector<Parameter>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(equal(a[i].data(), b[i].data())) << "param " << i;
}

void expect_same_state(const OptimizerState& a, const OptimizerState& b) {
  EXPECT_EQ(a.json, b.json);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_TRUE(equal(a.tensors[i].second, b.tensors[i].second)) << a.tensors[i].first;
  }
}

int64_t total_bytes(const OptimizerState& st) {
  int64_t n = 0;
  for (const auto& [name, t] : st.tensors) n += static_cast<int64_t>(t.nbytes());
  return n;
}

TEST_F(OptimOffloadTest, NvmeGivesTheBitsOfNoOffload) {
  for (const Case& c : cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t buffers : {1, 2, 4, 100}) {
        SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dtype)) + " buffer_count " +
                     std::to_string(buffers));
        auto ref_ps = make_params(dtype);
        auto off_ps = make_params(dtype);
        auto ref = make(c.algo, two_groups(ref_ps, c.a, c.b));
        auto off = make(c.algo, two_groups(off_ps, c.a, c.b));
        if (dtype == DType::kBF16 && c.algo == OptimAlgo::kAdamW) {
          ref->set_rounding(kernels::Rounding::kStochastic, 42);
          off->set_rounding(kernels::Rounding::kStochastic, 42);
        }
        off->set_offload(nvme(buffers));
        for (int s = 0; s < 5; ++s) {
          run_step(*ref, ref_ps, s, dtype);
          run_step(*off, off_ps, s, dtype);
          EXPECT_EQ(off->state_bytes_in_memory(), 0);  // all of it in the files between steps
        }
        expect_same_params(ref_ps, off_ps);
        const OptimizerState want = ref->state_dict();
        expect_same_state(want, off->state_dict());
        EXPECT_EQ(off->state_bytes_on_disk(), total_bytes(want));
        if (dtype == DType::kBF16) {
          EXPECT_TRUE(equal(off->master(off_ps[3]), ref->master(ref_ps[3])));
        }
      }
    }
  }
}

TEST_F(OptimOffloadTest, CpuIsANoOpOnCpuParameters) {
  auto ref_ps = make_params(DType::kBF16);
  auto cpu_ps = make_params(DType::kBF16);
  AdamW ref(two_groups(ref_ps, {.lr = 1e-2}, {.lr = 1e-3}));
  AdamW cpu(two_groups(cpu_ps, {.lr = 1e-2}, {.lr = 1e-3}));
  cpu.set_offload({.device = OffloadDevice::kCpu});
  EXPECT_EQ(cpu.offload().device, OffloadDevice::kCpu);
  for (int s = 0; s < 3; ++s) {
    run_step(ref, ref_ps, s, DType::kBF16);
    run_step(cpu, cpu_ps, s, DType::kBF16);
  }
  expect_same_params(ref_ps, cpu_ps);
  EXPECT_EQ(cpu.state_bytes_in_memory(), total_bytes(ref.state_dict()));
  EXPECT_EQ(cpu.state_bytes_on_disk(), 0);
}

// Note [Offload window] in optim_offload.cc: at most buffer_count parameters' state is in
// memory during a step; without offload the whole state stays resident.
TEST_F(OptimOffloadTest, ResidentStateIsBoundedByBufferCount) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<Parameter> ps;
    Generator gen(3);
    for (int i = 0; i < 8; ++i) ps.emplace_back(Tensor::randn({1000}, DType::kF32, &gen).to(dtype));
    std::vector<Parameter> ref_ps;
    for (const Parameter& p : ps) ref_ps.emplace_back(p.data().clone());
    AdamW ref(ref_ps, {.lr = 1e-3, .amsgrad = true});
    AdamW off(ps, {.lr = 1e-3, .amsgrad = true});
    constexpr int64_t kBuffers = 2;
    off.set_offload(nvme(kBuffers));
    // Rows per parameter: exp_avg, exp_avg_sq, max_exp_avg_sq (+ the f32 master for bf16).
    const int64_t per_param = (dtype == DType::kBF16 ? 4 : 3) * 1000 * 4;
    Allocator& alloc = get_allocator(kCPU);
    for (int s = 0; s < 3; ++s) {
      run_step(ref, ref_ps, s, dtype);
      Generator g(1000 + s);
      for (Parameter& p : ps) p.grad() = Tensor::randn({1000}, DType::kF32, &g).to(dtype);
      if (s == 2) ps[1].grad() = Tensor();
      const size_t before = alloc.stats().current_bytes;
      alloc.reset_peak();
      off.step();
      const size_t peak = alloc.stats().peak_bytes;
      off.zero_grad();
      if (s > 0) {  // from the second step on, all state comes from the store
        EXPECT_LE(static_cast<int64_t>(peak - before), kBuffers * per_param) << "step " << s;
        EXPECT_GE(static_cast<int64_t>(peak - before), per_param) << "step " << s;
      }
      EXPECT_EQ(off.state_bytes_in_memory(), 0);
      EXPECT_EQ(off.state_bytes_on_disk(), 8 * per_param);
    }
    expect_same_params(ref_ps, ps);
    EXPECT_EQ(ref.state_bytes_in_memory(), 8 * per_param);
    EXPECT_EQ(ref.state_bytes_on_disk(), 0);
  }
}

TEST_F(OptimOffloadTest, StateDictsAndFilesMatchAcrossOffload) {
  const DType d = DType::kBF16;
  const OptimizerOptions a{.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true};
  const OptimizerOptions b{.lr = 5e-3};
  auto ref_ps = make_params(d);
  auto off_ps = make_params(d);
  AdamW ref(two_groups(ref_ps, a, b));
  AdamW off(two_groups(off_ps, a, b));
  off.set_offload(nvme(2));
  for (int s = 0; s < 2; ++s) {
    run_step(ref, ref_ps, s, d);
    run_step(off, off_ps, s, d);
  }
  // save() streams the files through maps; the result is the same file, byte for byte.
  ref.save(dir_ / "ref.safetensors");
  off.save(dir_ / "off.safetensors");
  EXPECT_EQ(read_file(dir_ / "ref.safetensors"), read_file(dir_ / "off.safetensors"));
  EXPECT_EQ(off.state_bytes_in_memory(), 0);

  // Resume in both directions and continue: the same bits everywhere.
  auto clone_params = [](const std::vector<Parameter>& ps) {
    std::vector<Parameter> out;
    for (const Parameter& p : ps) out.emplace_back(p.data().clone());
    return out;
  };
  auto ps1 = clone_params(ref_ps), ps2 = clone_params(ref_ps), ps3 = clone_params(ref_ps);
  AdamW into_off(two_groups(ps1, {}, {}));  // offloaded, loads a file saved without offload
  into_off.set_offload(nvme(1));
  into_off.load(dir_ / "ref.safetensors");
  EXPECT_EQ(into_off.state_bytes_in_memory(), 0);
  AdamW into_ref(two_groups(ps2, {}, {}));  // not offloaded, loads the offloaded one's file
  into_ref.load(dir_ / "off.safetensors");
  AdamW from_dict(two_groups(ps3, {}, {}));  // offloaded, load_state_dict from a state dict
  from_dict.set_offload(nvme(3));
  from_dict.load_state_dict(off.state_dict());
  expect_same_state(ref.state_dict(), into_off.state_dict());
  expect_same_state(ref.state_dict(), from_dict.state_dict());
  for (int s = 2; s < 5; ++s) {
    run_step(ref, ref_ps, s, d);
    run_step(into_off, ps1, s, d);
    run_step(into_ref, ps2, s, d);
    run_step(from_dict, ps3, s, d);
  }
  expect_same_params(ref_ps, ps1);
  expect_same_params(ref_ps, ps2);
  expect_same_params(ref_ps, ps3);
  expect_same_state(ref.state_dict(), into_off.state_dict());
  expect_same_state(ref.state_dict(), from_dict.state_dict());
}

TEST_F(OptimOffloadTest, ExistingStateMovesWhenOffloadChanges) {
  auto ref_ps = make_params(DType::kBF16);
  auto ps = make_params(DType::kBF16);
  const OptimizerOptions o{.lr = 1e-2, .weight_decay = 0.1};
  Lion ref(two_groups(ref_ps, o, o));
  Lion opt(two_groups(ps, o, o));
  fs::create_directories(dir_ / "other");
  std::vector<OffloadConfig> configs = {
      {}, nvme(2), {.device = OffloadDevice::kNvme, .nvme_path = dir_ / "other"}, nvme(1), {}};
  for (int s = 0; s < 5; ++s) {
    opt.set_offload(configs[s]);  // before step s: none, nvme, another folder, fewer buffers, none
    run_step(ref, ref_ps, s, DType::kBF16);
    run_step(opt, ps, s, DType::kBF16);
  }
  expect_same_params(ref_ps, ps);
  expect_same_state(ref.state_dict(), opt.state_dict());
  EXPECT_EQ(opt.state_bytes_in_memory(), total_bytes(ref.state_dict()));
  EXPECT_TRUE(fs::is_empty(dir_ / "nvme"));  // the stores went with their configs
  EXPECT_TRUE(fs::is_empty(dir_ / "other"));
}

// Options changed between steps can add state rows (amsgrad's max_exp_avg_sq): the packed
// buffer grows with the same values.
TEST_F(OptimOffloadTest, StateAddedLaterKeepsTheBits) {
  auto ref_ps = make_params(DType::kBF16);
  auto ps = make_params(DType::kBF16);
  Adam ref(two_groups(ref_ps, {.lr = 1e-2}, {.lr = 1e-2}));
  Adam off(two_groups(ps, {.lr = 1e-2}, {.lr = 1e-2}));
  off.set_offload(nvme(2));
  for (int s = 0; s < 4; ++s) {
    if (s == 2) {
      ref.param_groups()[1].options.amsgrad = true;
      off.param_groups()[1].options.amsgrad = true;
    }
    run_step(ref, ref_ps, s, DType::kBF16);
    run_step(off, ps, s, DType::kBF16);
  }
  expect_same_params(ref_ps, ps);
  expect_same_state(ref.state_dict(), off.state_dict());
}

TEST_F(OptimOffloadTest, ConfigErrorsNameDeepSpeedsOptions) {
  auto ps = make_params(DType::kF32);
  Adam opt(ps, {});
  auto message_of = [&](const OffloadConfig& c, ErrorKind kind) {
    try {
      opt.set_offload(c);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      return e.message();
    }
    ADD_FAILURE() << "no error";
    return std::string();
  };
  EXPECT_THAT(message_of({.device = OffloadDevice::kNvme}, ErrorKind::kInvalidArgument),
              HasSubstr("offload_optimizer_nvme_path"));
  const fs::path missing = dir_ / "missing";
  std::string m =
      message_of({.device = OffloadDevice::kNvme, .nvme_path = missing}, ErrorKind::kIo);
  EXPECT_THAT(m, HasSubstr("offload_optimizer_nvme_path"));
  EXPECT_THAT(m, HasSubstr(missing.string()));
  EXPECT_THAT(m, HasSubstr("No such file or directory"));
  EXPECT_THAT(message_of(nvme(0), ErrorKind::kInvalidArgument), HasSubstr("buffer_count"));
  EXPECT_EQ(opt.offload().device, OffloadDevice::kNone);  // failed calls change nothing
  // Also when offloading already: the state stays in the working store.
  opt.set_offload(nvme(2));
  run_step(opt, ps, 0, DType::kF32);
  message_of({.device = OffloadDevice::kNvme, .nvme_path = missing}, ErrorKind::kIo);
  EXPECT_EQ(opt.offload().nvme_path, dir_ / "nvme");
  EXPECT_EQ(opt.state_bytes_in_memory(), 0);
  run_step(opt, ps, 1, DType::kF32);

  EXPECT_EQ(parse_offload_device("NVMe"), OffloadDevice::kNvme);
  EXPECT_EQ(parse_offload_device("cpu"), OffloadDevice::kCpu);
  EXPECT_EQ(parse_offload_device("none"), OffloadDevice::kNone);
  try {
    parse_offload_device("disk");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr("offload_optimizer_device 'disk'"));
  }
  EXPECT_STREQ(offload_device_name(OffloadDevice::kNvme), "nvme");
}

TEST_F(OptimOffloadTest, StateFileRemovedUnderTheOptimizerIsIoNamingIt) {
  auto ps = make_params(DType::kF32);
  SGD opt(ps, {.lr = 0.1, .momentum = 0.9});
  opt.set_offload(nvme(2));
  run_step(opt, ps, 0, DType::kF32);
  std::vector<fs::path> files;
  for (const auto& folder : fs::directory_iterator(dir_ / "nvme")) {
    EXPECT_THAT(folder.path().filename().string(), HasSubstr("braid-swap-"));
    for (const auto& f : fs::directory_iterator(folder.path())) files.push_back(f.path());
  }
  ASSERT_EQ(files.size(), ps.size());  // one momentum buffer per parameter
  fs::remove(files[0]);
  try {
    run_step(opt, ps, 1, DType::kF32);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_THAT(e.message(), HasSubstr(files[0].string()));
  }
}

TEST_F(OptimOffloadTest, FilesGoWithTheOptimizer) {
  {
    auto ps = make_params(DType::kF32);
    AdamW opt(ps, {});
    opt.set_offload(nvme(4));
    run_step(opt, ps, 0, DType::kF32);
    EXPECT_FALSE(fs::is_empty(dir_ / "nvme"));
  }
  EXPECT_TRUE(fs::is_empty(dir_ / "nvme"));
}

}  // namespace
}  // namespace braid::nn
