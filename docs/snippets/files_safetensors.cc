// docs/files.md's example: safetensors written, mapped, sharded and read back; exits 1 unless
// every tensor comes back with its values.
#include <cstdio>

// [snippet]
#include "braid/tensor/safetensors.h"

int main() {
  braid::Tensor w = braid::Tensor::arange(0, 6, 1, braid::DType::kF32).reshape({2, 3});
  braid::Tensor b = braid::Tensor::full({3}, 0.5, braid::DType::kBF16);
  braid::save_safetensors("model.safetensors", {{"w", w}, {"b", b}}, {{"format", "pt"}});
  braid::SafetensorsFile f = braid::SafetensorsFile::open("model.safetensors");
  braid::Tensor w2 = f.get("w");  // zero-copy view into the file's mapping
  braid::NamedTensors named = {{"w", w}, {"b", b}};
  braid::save_sharded("ckpt", named, "5GB");  // shards + index, or one model.safetensors
  braid::NamedTensors all = braid::load_safetensors("ckpt");  // file, index or folder
  // [end snippet]

  bool ok = w2.to_vector() == w.to_vector() && all.size() == 2;
  for (const auto& [name, t] : all) {
    const braid::Tensor& want = name == "w" ? w : b;
    ok = ok && t.dtype() == want.dtype() && t.to_vector() == want.to_vector();
  }
  if (!ok) std::fprintf(stderr, "FAIL: a tensor did not come back as saved\n");
  return ok ? 0 : 1;
}
