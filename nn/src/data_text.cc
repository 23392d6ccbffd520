// TextBytesDataset and SyntheticDataset (docs/data.md, "Datasets").
#include <algorithm>
#include <fstream>
#include <iterator>
#include <system_error>

#include "braid/core/error.h"
#include "braid/nn/data_text.h"

namespace braid::nn {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> list_files(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  BRAID_CHECK(!ec && fs::exists(st), kIo, "TextBytesDataset: ", path.string(), " does not exist");
  if (!fs::is_directory(st)) return {path};
  std::vector<fs::path> files;
  auto it =
      fs::recursive_directory_iterator(path, fs::directory_options::follow_directory_symlink, ec);
  BRAID_CHECK(!ec, kIo, "TextBytesDataset: cannot list ", path.string(), ": ", ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    BRAID_CHECK(!ec, kIo, "TextBytesDataset: cannot list ", path.string(), ": ", ec.message());
    std::error_code fe;
    if (fs::is_regular_file(it->path(), fe)) files.push_back(it->path());  // symlinks followed
  }
  BRAID_CHECK(!files.empty(), kInvalidArgument, "TextBytesDataset: the folder ", path.string(),
              " holds no files");
  return files;
}

}  // namespace

TextBytesDataset::TextBytesDataset(const fs::path& path, TextBytesOptions options)
    : files_(list_files(path)), options_(options) {
  load();
}

TextBytesDataset::TextBytesDataset(std::vector<fs::path> files, TextBytesOptions options)
    : files_(std::move(files)), options_(options) {
  BRAID_CHECK(!files_.empty(), kInvalidArgument, "TextBytesDataset: no files given");
  load();
}

void TextBytesDataset::load() {
  const int64_t t = options_.context_length;
  BRAID_CHECK(t >= 1, kInvalidArgument, "TextBytesDataset: context_length ", t,
              " must be at least 1");
  if (options_.stride == 0) options_.stride = t;
  BRAID_CHECK(options_.stride >= 1, kInvalidArgument, "TextBytesDataset: stride ", options_.stride,
              " must be at least 1 (0 means context_length)");
  std::sort(files_.begin(), files_.end());
  for (size_t i = 0; i < files_.size(); ++i) {
    std::ifstream in(files_[i], std::ios::binary);
    BRAID_CHECK(in.good(), kIo, "TextBytesDataset: cannot open ", files_[i].string());
    if (i > 0) bytes_.push_back(options_.separator);
    bytes_.insert(bytes_.end(), std::istreambuf_iterator<char>(in),
                  std::istreambuf_iterator<char>());
    BRAID_CHECK(!in.bad(), kIo, "TextBytesDataset: cannot read ", files_[i].string());
  }
  const auto n = static_cast<int64_t>(bytes_.size());
  BRAID_CHECK(n > static_cast<int64_t>(files_.size()) - 1, kInvalidArgument,
              "TextBytesDataset: the corpus is empty (", files_.size(), " files, 0 bytes; first ",
              files_.front().string(), ")");
  BRAID_CHECK(n >= t + 1, kInvalidArgument, "TextBytesDataset: context_length ", t,
              " needs at least ", t + 1, " bytes, the corpus (", files_.size(), " files, first ",
              files_.front().string(), ") has ", n);
  size_ = (n - (t + 1)) / options_.stride + 1;
}

Tree TextBytesDataset::get(int64_t index) const {
  BRAID_CHECK(index >= 0 && index < size_, kOutOfRange, "TextBytesDataset: sample ", index,
              " is outside [0, ", size_, ")");
  const int64_t t = options_.context_length;
  const size_t start = static_cast<size_t>(index * options_.stride);
  Tensor input = Tensor::empty({t}, DType::kI64);
  Tensor labels = Tensor::empty({t}, DType::kI64);
  int64_t* in = input.data<int64_t>();
  int64_t* out = labels.data<int64_t>();
  for (int64_t i = 0; i < t; ++i) {
    in[i] = bytes_[start + static_cast<size_t>(i)];
    out[i] = bytes_[start + static_cast<size_t>(i) + 1];
  }
  return Tree::map({{"input_ids", input}, {"labels", labels}});
}

SyntheticDataset::SyntheticDataset(SyntheticOptions options) : options_(options) {
  BRAID_CHECK(options.size >= 0, kInvalidArgument, "SyntheticDataset: size ", options.size,
              " is negative");
  BRAID_CHECK(options.features >= 0, kInvalidArgument, "SyntheticDataset: features ",
              options.features, " is negative");
  BRAID_CHECK(options.classes >= 1, kInvalidArgument, "SyntheticDataset: classes ", options.classes,
              " must be at least 1");
}

Tree SyntheticDataset::get(int64_t index) const {
  BRAID_CHECK(index >= 0 && index < options_.size, kOutOfRange, "SyntheticDataset: sample ", index,
              " is outside [0, ", options_.size, ")");
  // Each sample owns a fixed range of the seed's Philox stream: its features (one word each,
  // rounded up to a block) and one block for the label.
  const auto words = static_cast<uint64_t>((options_.features + 3) / 4 * 4 + 4);
  Generator gen(options_.seed);
  gen.set_offset(static_cast<uint64_t>(index) * words);
  Tensor x = Tensor::empty({options_.features}, DType::kF32);
  gen.fill_uniform(x.data<float>(), options_.features);
  const int64_t y = gen.randint(0, options_.classes);
  return Tree::map({{"index", Tensor::full({}, index, DType::kI64)},
                    {"x", x},
                    {"y", Tensor::full({}, y, DType::kI64)}});
}

}  // namespace braid::nn
