// docs/accelerator.md's first example, whole: a linear regression (y = 2 x0 - 3 x1 + 0.5)
// trained through the Accelerator. ctest runs it under `braid launch --nproc-per-node 2`; it
// exits 1 unless the loss over the whole data set falls below 0.01.
#include <cstdio>
#include <memory>

#include "braid/accel/accelerator.h"
#include "braid/core/rng.h"
#include "braid/nn/layers.h"
#include "braid/nn/loss.h"

using namespace braid;

namespace {

// Sample i: x uniform in [-1, 1)^2 from a generator seeded by i, and its target y.
class LineDataset : public nn::Dataset {
 public:
  explicit LineDataset(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  Tree get(int64_t index) const override {
    Generator gen(1000 + static_cast<uint64_t>(index));
    std::vector<double> x = Tensor::rand({2}, DType::kF32, &gen).to_vector();
    x[0] = 2 * x[0] - 1;
    x[1] = 2 * x[1] - 1;
    const double y = 2 * x[0] - 3 * x[1] + 0.5;
    return Tree::map(
        {{"x", Tree(Tensor::from_vector(x, {2}))}, {"y", Tree(Tensor::from_vector({y}, {1}))}});
  }

 private:
  int64_t size_;
};

}  // namespace

int main() {
  const int64_t epochs = 30;
  auto data = std::make_shared<LineDataset>(256);
  nn::DataLoader train_loader(data, {.batch_size = 8, .shuffle = true, .seed = 1});
  // [snippet]
  braid::accel::AcceleratorConfig cfg;  // or braid::accel::load_config_file("train.yaml")
  cfg.gradient_accumulation_steps = 2;
  braid::accel::Accelerator acc(cfg);  // process group from the launcher's env
  auto model = acc.prepare_model(std::make_shared<braid::nn::Linear>(2, 1));  // ShardedModel
  braid::nn::AdamW opt(model->optimizer_parameters(), {.lr = 0.05});
  acc.prepare_optimizer(opt);  // registers it for step, zero_grad and save_state
  braid::nn::LRScheduler scheduler(opt, braid::nn::SchedulerType::kLinear,
                                   {.num_training_steps = epochs * 16 * acc.num_processes()});
  acc.prepare_scheduler(scheduler);
  braid::nn::DataLoader loader = acc.prepare_data_loader(train_loader);  // this rank's batches
  braid::nn::MSELoss mse;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (const braid::Tree& batch : loader) {
      auto scope = acc.accumulate(loader);  // sync_gradients on the window's last micro-batch
      auto autocast = acc.autocast();
      braid::Tensor y = model->forward(batch.at("x").tensor());
      mse.forward(y, batch.at("y").tensor());
      acc.backward(*model, mse.backward());  // window's gradient: mean over batches and ranks
      if (acc.sync_gradients()) {
        acc.clip_grad_norm_(*model, 1.0);
        acc.step(opt);  // GradScaler-aware; skipped on inf
        acc.scheduler_step(scheduler);
        acc.zero_grad(opt);  // else the next window adds to these gradients
      }
    }
  }
  acc.save_state("ckpt");  // model, optimizer, scheduler, scaler, RNG
  acc.end_training();
  // [end snippet]

  // The check: the loss of the trained model over the whole data set, on every rank.
  nn::Linear trained(2, 1);
  trained.load_state_dict(acc.get_state_dict(*model));
  double sum = 0;
  for (int64_t i = 0; i < data->size(); ++i) {
    Tree s = data->get(i);
    sum += mse.forward(trained.forward(s.at("x").tensor().unsqueeze(0)),
                       s.at("y").tensor().unsqueeze(0))
               .item();
  }
  const double loss = sum / static_cast<double>(data->size());
  std::printf("rank %d: loss over the data set %.6g\n", acc.process_index(), loss);
  if (!(loss < 0.01)) {
    std::fprintf(stderr, "FAIL: the loss %.6g did not fall below 0.01\n", loss);
    return 1;
  }
  return 0;
}
