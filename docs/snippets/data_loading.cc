// docs/data.md's example: a text data set, a loader prepared for the launcher's ranks, epochs
// and a resume mid-epoch. ctest runs it under braid launch --nproc-per-node 2; exits 1 when a
// batch or a count is not what the page says.
#include <cstdio>

// [snippet]
#include "braid/comm/process_group.h"
#include "braid/nn/data.h"
#include "braid/nn/data_text.h"

int main() {
  auto text = std::make_shared<braid::nn::TextBytesDataset>(
      "/usr/share/common-licenses", braid::nn::TextBytesOptions{.context_length = 256});
  braid::nn::DataLoader loader(text, {.batch_size = 8, .shuffle = true, .drop_last = true});
  auto pg = braid::ProcessGroup::create({});
  braid::nn::DataLoader train = braid::nn::prepare_data_loader(
      loader, *pg, {.use_seedable_sampler = true, .data_seed = 1234});
  int64_t batches = 0;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    train.set_epoch(epoch);
    for (const braid::Tree& batch : train) {  // {"input_ids": i64 [8, 256], "labels": ...}
      const braid::Tensor& ids = batch.at("input_ids").tensor();
      if (ids.shape() != braid::Shape{8, 256} || ids.dtype() != braid::DType::kI64) return 1;
      ++batches;  // train.end_of_dataloader(), train.remainder()
    }
  }
  braid::nn::DataLoader resumed = braid::nn::skip_first_batches(train, 17);  // mid-epoch
  // [end snippet]

  // Every epoch gives this rank size() batches; the resumed loader the rest of one epoch.
  int64_t rest = 0;
  for (const braid::Tree& batch : resumed) rest += batch.at("labels").tensor().size(0) / 8;
  const bool ok = train.size() > 17 && batches == 3 * train.size() && rest == train.size() - 17;
  std::printf("rank %d: %lld batches per epoch, %lld after skipping 17\n", pg->rank(),
              static_cast<long long>(train.size()), static_cast<long long>(rest));
  if (!ok) std::fprintf(stderr, "FAIL: the loader's batch counts are wrong\n");
  return ok ? 0 : 1;
}
