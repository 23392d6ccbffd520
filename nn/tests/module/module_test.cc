// Module / Layer structure: registration, traversal, state dicts, modes, tied parameters,
// saved activations, hooks and activation checkpointing, on small layers written here.
#include "braid/nn/module.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "braid/core/rng.h"
#include "braid/nn/layers.h"
#include "braid/tensor/ops.h"

namespace braid::nn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// y = x * w (elementwise, w of x's shape); saves x.
class Mul : public Layer {
 public:
  explicit Mul(Tensor w) : Layer("Mul") { register_parameter("w", Parameter(std::move(w))); }
  int forwards = 0;

 protected:
  Tensor forward_impl(const Tensor& x) override {
    ++forwards;
    save_for_backward(x);
    return mul(x, param("w").data());
  }
  Tensor backward_impl(const Tensor& dy) override {
    Tensor x = pop_saved<Tensor>();
    accumulate_grad(param("w"), mul(dy, x));
    return mul(dy, param("w").data());
  }
};

// y = x + noise from the default generator; keeps the noise of every call.
class Noise : public Layer {
 public:
  Noise() : Layer("Noise") {}
  std::vector<Tensor> draws;

 protected:
  Tensor forward_impl(const Tensor& x) override {
    Tensor n = Tensor::rand(x.shape());
    draws.push_back(n);
    save_for_backward(0);
    return add(x, n);
  }
  Tensor backward_impl(const Tensor& dy) override {
    pop_saved<int>();
    return dy;
  }
};

// A container: two Mul children and a buffer.
class Net : public Module {
 public:
  Net() : Module("Net") {
    a = register_module("a", std::make_shared<Mul>(Tensor::full({2}, 2.0)));
    b = register_module("b", std::make_shared<Mul>(Tensor::full({2}, 3.0)));
    register_buffer("steps", Tensor::zeros({1}));
    register_buffer("scratch", Tensor::zeros({1}), /*persistent=*/false);
  }
  std::shared_ptr<Mul> a, b;
};

std::vector<std::string> names_of(const NamedTensors& t) {
  std::vector<std::string> out;
  for (auto& [n, x] : t) out.push_back(n);
  return out;
}

TEST(Module, RegistrationRejectsBadAndDuplicateNames) {
  Net net;
  EXPECT_THAT([&] { net.register_buffer("a", Tensor::zeros({1})); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'a' is already registered")));
  EXPECT_THAT([&] { net.register_parameter("x.y", Parameter(Tensor::zeros({1}))); },
              ::testing::ThrowsMessage<Error>(HasSubstr("contain no '.'")));
  EXPECT_THAT([&] { net.param("nope"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no parameter 'nope'")));
}

TEST(Module, NamesAndTraversal) {
  Net net;
  std::vector<std::string> names;
  for (auto& [n, p] : net.named_parameters()) names.push_back(n);
  EXPECT_THAT(names, ElementsAre("a.w", "b.w"));
  EXPECT_THAT(names_of(net.state_dict()), ElementsAre("a.w", "b.w", "steps"));
  std::vector<std::string> mods;
  for (auto& [n, m] : net.named_modules()) mods.push_back(n + ":" + m->type_name());
  EXPECT_THAT(mods, ElementsAre(":Net", "a:Mul", "b:Mul"));
  EXPECT_EQ(&net.get_submodule("b"), net.b.get());
  EXPECT_EQ(net.num_parameters(), 4);
  net.b->param("w").set_requires_grad(false);
  EXPECT_EQ(net.num_parameters(/*only_trainable=*/true), 2);
}

TEST(Module, TiedParametersAppearOnceInParametersAndUnderEveryNameInTheStateDict) {
  Net net;
  net.b->set_parameter("w", net.a->param("w"));
  EXPECT_EQ(net.parameters().size(), 1u);
  EXPECT_EQ(net.num_parameters(), 2);
  EXPECT_THAT(names_of(net.state_dict()), ElementsAre("a.w", "b.w", "steps"));
  auto tied = find_tied_parameters(net);
  ASSERT_EQ(tied.size(), 1u);
  EXPECT_THAT(tied[0], ElementsAre("a.w", "b.w"));

  // Break the tie, then retie: b.w refers to a.w's handle again.
  net.b->set_parameter("w", Parameter(Tensor::zeros({2})));
  EXPECT_TRUE(find_tied_parameters(net).empty());
  retie_parameters(net, tied);
  EXPECT_TRUE(net.b->param("w").is(net.a->param("w")));
}

TEST(Module, LoadStateDictStrictReportsEveryMissingAndUnexpectedKeyAndWritesNothing) {
  Net net;
  NamedTensors sd{{"a.w", Tensor::full({2}, 7.0)}, {"extra", Tensor::zeros({1})}};
  EXPECT_THAT([&] { net.load_state_dict(sd); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("missing keys ['b.w', 'steps'], unexpected keys ['extra']")));
  EXPECT_EQ(net.a->param("w").data().to_vector(), (std::vector<double>{2, 2}));

  LoadResult r = net.load_state_dict(sd, /*strict=*/false);
  EXPECT_THAT(r.missing_keys, ElementsAre("b.w", "steps"));
  EXPECT_THAT(r.unexpected_keys, ElementsAre("extra"));
  EXPECT_EQ(net.a->param("w").data().to_vector(), (std::vector<double>{7, 7}));
}

TEST(Module, LoadStateDictChecksShapesConvertsDtypesAndAcceptsOneNameOfATiedGroup) {
  Net net;
  EXPECT_THAT(
      [&] {
        net.load_state_dict({{"a.w", Tensor::zeros({3})}}, false);
      },
      ::testing::ThrowsMessage<Error>(HasSubstr("'a.w' has shape [3], the module expects [2]")));
  net.b->set_parameter("w", net.a->param("w"));
  net.load_state_dict({{"b.w", Tensor::full({2}, 5.0, DType::kF64)}, {"steps", Tensor::ones({1})}});
  EXPECT_EQ(net.a->param("w").data().dtype(), DType::kF32);
  EXPECT_EQ(net.a->param("w").data().to_vector(), (std::vector<double>{5, 5}));
  EXPECT_EQ(net.buffer("steps").item(), 1.0);
}

TEST(Module, TrainEvalApplyAndToKeepHandles) {
  Net net;
  net.eval();
  EXPECT_FALSE(net.a->is_training());
  net.train();
  EXPECT_TRUE(net.b->is_training());
  std::vector<std::string> order;
  net.apply([&](Module& m) { order.push_back(m.type_name()); });
  EXPECT_THAT(order, ElementsAre("Mul", "Mul", "Net"));

  net.b->set_parameter("w", net.a->param("w"));
  Parameter before = net.a->param("w");
  net.to(DType::kBF16);
  EXPECT_TRUE(net.a->param("w").is(before));
  EXPECT_TRUE(net.b->param("w").is(before));
  EXPECT_EQ(before.data().dtype(), DType::kBF16);
  EXPECT_EQ(net.buffer("steps").dtype(), DType::kBF16);
  EXPECT_THAT([&] { net.to(DType::kI32); }, ::testing::Throws<Error>());
}

TEST(Module, AccumulateGradAllocatesAddsConvertsAndRespectsRequiresGrad) {
  Parameter p(Tensor::zeros({2}));
  Tensor g = Tensor::from_vector({1, 2}, {2});
  accumulate_grad(p, g);
  EXPECT_FALSE(p.grad().shares_storage(g));
  accumulate_grad(p, Tensor::from_vector({0.5, 0.5}, {2}, DType::kF64));
  EXPECT_EQ(p.grad().dtype(), DType::kF32);
  EXPECT_EQ(p.grad().to_vector(), (std::vector<double>{1.5, 2.5}));
  EXPECT_THAT([&] { accumulate_grad(p, Tensor::zeros({3})); }, ::testing::Throws<Error>());
  Parameter frozen(Tensor::zeros({2}), /*requires_grad=*/false);
  accumulate_grad(frozen, g);
  EXPECT_FALSE(frozen.grad().defined());

  Net net;
  net.a->param("w").grad() = Tensor::ones({2});
  net.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(net.a->param("w").grad().to_vector(), (std::vector<double>{0, 0}));
  net.zero_grad();
  EXPECT_FALSE(net.a->param("w").grad().defined());
}

TEST(Layer, SavedContextsAreAStackAndNoGradSavesNothing) {
  Mul m(Tensor::full({2}, 2.0));
  m.forward(Tensor::full({2}, 1.0));
  m.forward(Tensor::full({2}, 10.0));
  EXPECT_EQ(m.saved_count(), 2u);
  m.backward(Tensor::ones({2}));  // pops the second call's input: w.grad = 10
  EXPECT_EQ(m.param("w").grad().to_vector(), (std::vector<double>{10, 10}));
  m.backward(Tensor::ones({2}));
  EXPECT_EQ(m.param("w").grad().to_vector(), (std::vector<double>{11, 11}));
  EXPECT_THAT([&] { m.backward(Tensor::ones({2})); },
              ::testing::ThrowsMessage<Error>(HasSubstr("Mul: backward without a saved forward")));
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(grad_enabled());
    m.forward(Tensor::ones({2}));
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_EQ(m.saved_count(), 0u);
}

TEST(Layer, TakeAndRestoreSavedMoveAPassAside) {
  Sequential seq;
  auto m = std::make_shared<Mul>(Tensor::full({2}, 2.0));
  seq.append("m", m);
  seq.forward(Tensor::full({2}, 1.0));  // micro-batch 0
  SavedActivations mb0 = seq.take_saved();
  EXPECT_EQ(seq.saved_count(), 0u);
  seq.forward(Tensor::full({2}, 5.0));  // micro-batch 1
  SavedActivations mb1 = seq.take_saved();
  seq.restore_saved(std::move(mb0));
  seq.backward(Tensor::ones({2}));
  EXPECT_EQ(m->param("w").grad().to_vector(), (std::vector<double>{1, 1}));
  seq.restore_saved(std::move(mb1));
  seq.backward(Tensor::ones({2}));
  EXPECT_EQ(m->param("w").grad().to_vector(), (std::vector<double>{6, 6}));

  seq.forward(Tensor::ones({2}));
  SavedActivations again = seq.take_saved();
  seq.forward(Tensor::ones({2}));
  EXPECT_THAT([&] { seq.restore_saved(std::move(again)); },
              ::testing::ThrowsMessage<Error>(HasSubstr("still holds saved activations")));
}

TEST(Layer, HooksRunAroundForwardAndBackward) {
  Mul m(Tensor::ones({1}));
  std::vector<std::string> log;
  m.set_hooks(
      {[&](Module&) { log.push_back("pre_fwd"); }, [&](Module&) { log.push_back("post_fwd"); },
       [&](Module&) { log.push_back("pre_bwd"); }, [&](Module&) { log.push_back("post_bwd"); }});
  m.forward(Tensor::ones({1}));
  m.backward(Tensor::ones({1}));
  EXPECT_THAT(log, ElementsAre("pre_fwd", "post_fwd", "pre_bwd", "post_bwd"));
}

TEST(Layer, CheckpointingRecomputesWithTheSameRandomNumbersAndTheSameGradients) {
  const auto run = [](bool checkpoint, std::vector<Tensor>* draws) {
    default_generator(kCPU).manual_seed(1234);
    auto seq = std::make_shared<Sequential>();
    auto noise = std::make_shared<Noise>();
    auto m = std::make_shared<Mul>(Tensor::full({3}, 3.0));
    seq->append("noise", noise);
    seq->append("m", m);
    seq->set_checkpointing(checkpoint);
    Tensor y = seq->forward(Tensor::full({3}, 1.0));
    EXPECT_EQ(seq->saved_count(), checkpoint ? 1u : 2u);  // only the input when checkpointed
    const auto state_before_backward = default_generator(kCPU).get_state();
    seq->backward(Tensor::ones({3}));
    EXPECT_EQ(default_generator(kCPU).get_state(), state_before_backward);
    EXPECT_EQ(seq->saved_count(), 0u);
    *draws = noise->draws;
    return std::make_pair(y, m->param("w").grad());
  };
  std::vector<Tensor> plain_draws, ckpt_draws;
  auto [y0, g0] = run(false, &plain_draws);
  auto [y1, g1] = run(true, &ckpt_draws);
  EXPECT_TRUE(equal(y0, y1));
  EXPECT_TRUE(equal(g0, g1));
  ASSERT_EQ(ckpt_draws.size(), 2u);  // the forward, then the recompute
  EXPECT_TRUE(equal(ckpt_draws[0], ckpt_draws[1]));
  EXPECT_TRUE(equal(ckpt_draws[0], plain_draws[0]));
}

}  // namespace
}  // namespace braid::nn

namespace braid::nn {
namespace {

TEST(InitEmptyWeights, ParametersAreMetaInsideTheScopeAndRealAfter) {
  std::shared_ptr<Net> empty, real;
  {
    InitEmptyWeights scope;
    empty = std::make_shared<Net>();
  }
  real = std::make_shared<Net>();
  EXPECT_TRUE(empty->a->param("w").data().device().is_meta());
  EXPECT_EQ(empty->a->param("w").data().shape(), (Shape{2}));
  EXPECT_EQ(empty->num_parameters(), 4);
  EXPECT_FALSE(empty->buffer("steps").device().is_meta());  // buffers only with include_buffers
  EXPECT_EQ(real->a->param("w").data().device(), kCPU);
  {
    InitEmptyWeights scope(/*include_buffers=*/true);
    EXPECT_TRUE(std::make_shared<Net>()->buffer("steps").device().is_meta());
  }
}

}  // namespace
}  // namespace braid::nn
