// docs/offload.md's second example: the swap store's put / prefetch / get / release / flush.
// Exits 1 unless every key holds what was put last.
#include <cstdio>
#include <filesystem>

#include "braid/tensor/swap_store.h"

using braid::Tensor;

namespace {

void update(Tensor& s) {  // what a caller does with a tensor it got: here, doubles it
  float* p = s.data<float>();
  for (int64_t i = 0; i < s.numel(); ++i) p[i] *= 2;
}

}  // namespace

int main() {
  std::filesystem::create_directories("local_nvme");
  Tensor t = braid::Tensor::arange(0, 8, 1, braid::DType::kF32);
  // [snippet]
  braid::SwapStore store({.folder = "local_nvme", .tag = "rank3"});
  // [end snippet]
  store.put("p1", braid::Tensor::full({4}, 1.5));
  store.put("p2", braid::Tensor::full({2}, -1.0));
  store.get("p2");  // p2 in memory, as after a read
  // [snippet]
  store.put("p0", t);                 // queued write; the store holds t until it is written
  store.prefetch("p1");               // queued read, ahead of use; never waits
  braid::Tensor s = store.get("p1");  // waits for the read (deadline: options.timeout)
  update(s);                          // the caller may change it ...
  store.put("p1", s);                 // ... and put it back; memory dropped once written
  store.release("p2");                // drop an in-memory copy that was only read
  store.flush();                      // every queued write done (throws the first write error)
  // [end snippet]

  const bool ok = store.get("p0").to_vector() == t.to_vector() &&
                  store.get("p1").to_vector() == std::vector<double>(4, 3.0) &&
                  store.get("p2").to_vector() == std::vector<double>(2, -1.0);
  if (!ok) std::fprintf(stderr, "FAIL: a key of the swap store lost its value\n");
  return ok ? 0 : 1;
}
