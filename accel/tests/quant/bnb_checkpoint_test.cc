// Checkpoints written by bitsandbytes and transformers themselves, loaded by braid (issue 34).
// tests/reference/bnb_checkpoints/<model>-<format> (gen_bnb_checkpoint.py: from_pretrained with
// a BitsAndBytesConfig on the CPU, then save_pretrained) hold the tiny GPT-2 and Llama of
// tests/reference/hf_quant in LLM.int8, NF4, NF4 with double quantization and FP4, with the
// greedy tokens and logits transformers + bitsandbytes computed. Checked here: every tensor of
// each file against what braid's own quantizer makes of the f32 checkpoint (equal bytes, or a
// difference of the kinds docs/quantization.md names, counted and bounded), and braid's tokens
// and logits from the file against bitsandbytes'.
//
// With BRAID_BNB_EXPORT=<folder> the test also writes braid's own quantized files there, for
// `gen_bnb_checkpoint.py load-braid <folder>` (the other direction; not run by CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "braid/accel/quantization.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/nn/models.h"
#include "braid/tensor/ops.h"

namespace braid::accel {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kF32Root = BRAID_SOURCE_DIR "/tests/reference/hf_quant";
const fs::path kBnbRoot = BRAID_SOURCE_DIR "/tests/reference/bnb_checkpoints";
constexpr const char* kFormats[] = {"int8", "nf4", "nf4-dq", "fp4"};

std::shared_ptr<nn::CausalLM> meta_model(const fs::path& folder) {
  nn::InitEmptyWeights empty;
  auto m = nn::causal_lm_from_hf_config(read_file(folder / "config.json"));
  m->eval();
  return m;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return {p, p + c.nbytes()};
}

std::vector<float> floats(const Tensor& t) {
  const Tensor c = t.to(DType::kF32).contiguous();
  return {c.data<float>(), c.data<float>() + c.numel()};
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const auto x = floats(a), y = floats(b);
  double m = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    m = std::max(m, std::abs(double(x[i]) - y[i]));
    scale = std::max(scale, std::abs(double(y[i])));
  }
  return m / scale;
}

// What the differences between bitsandbytes' file and braid's quantization of the same f32
// weights came to, per kind (docs/quantization.md, "What is verified against what").
struct Tally {
  int64_t tensors = 0, equal_tensors = 0;
  int64_t codes4 = 0, ties4 = 0, zero_codes4 = 0;  // 4-bit codes; differing ones by kind
  int64_t nested_codes = 0, nested_near_midpoint = 0, offsets_one_ulp_off = 0;
  int64_t table_entries_off = 0;
  int64_t int8_codes = 0, int8_off_by_one = 0, int8_scale_ties = 0;
};

// The f32 weight of quantized layer `mod` as braid quantizes it: [out, in] (GPT-2's Conv1D
// weight is stored [in, out] in the f32 checkpoint and transposed first, as transformers does).
Tensor weight_out_in(const SafetensorsFile& f32, const std::string& mod, nn::Module& model) {
  const Tensor w = f32.get(mod + ".weight").to(DType::kF32);
  const auto* l4 = dynamic_cast<nn::Linear4bit*>(&model.get_submodule(mod));
  const auto* l8 = dynamic_cast<nn::Linear8bitLt*>(&model.get_submodule(mod));
  const nn::WeightLayout layout = l4 ? l4->checkpoint_layout() : l8->checkpoint_layout();
  return (layout == nn::WeightLayout::kInOut ? w.t() : w).contiguous();
}

// 4-bit codes: bitsandbytes' CPU quantizer (torch.bucketize over the midpoints of the code
// table) and braid's comparison trees agree except (a) a value exactly on a midpoint, where the
// two rules may pick different sides, and (b) FP4's two zero codes (0b0000, 0b1000; both +0).
// Each differing code must be one of these.
void check_4bit_codes(const std::string& name, const Tensor& w, const Tensor& theirs,
                      const Tensor& ours, const Tensor& code_table, int64_t blocksize,
                      Tally& tally) {
  const auto x = floats(w);
  const auto code = floats(code_table);
  const auto a = bytes_of(theirs), b = bytes_of(ours);
  ASSERT_EQ(a.size(), b.size()) << name;
  for (size_t i = 0; i < x.size(); ++i) {
    const int shift = i % 2 ? 0 : 4;
    const int p = (a[i / 2] >> shift) & 15, q = (b[i / 2] >> shift) & 15;
    if (p == q) continue;
    if (code[p] == code[q]) {
      ++tally.zero_codes4;
      continue;
    }
    const size_t block = i / blocksize;
    float absmax = 0;
    for (size_t j = block * blocksize; j < std::min(x.size(), (block + 1) * blocksize); ++j) {
      absmax = std::max(absmax, std::abs(x[j]));
    }
    const float scaled = x[i] * (1.0f / absmax);
    const float mid = (code[p] + code[q]) / 2.0f;
    EXPECT_EQ(scaled, mid) << name << " element " << i << ": bitsandbytes code " << p << ", braid "
                           << q << " for " << x[i] << " / " << absmax;
    ++tally.ties4;
  }
}

// Double quantization. bitsandbytes takes offset = absmax.mean() in torch's f32 (braid sums in
// f64 and rounds once: the two differ by at most one ulp), builds the 8-bit code with torch's
// linspace (whose vectorized f32 steps, base + step * lane, differ from braid's table, ATen's
// scalar formula, by up to two ulps in some entries), and quantizes (absmax - offset) /
// nested_absmax with its CPU library, which takes the farther of two neighbours within about 2e-5
// of a midpoint. So: the code tables within two ulps per entry, the offsets within one ulp,
// nested_absmax within the offsets' difference plus one ulp, and each differing absmax code a
// neighbour of braid's with the value within 2e-5 of the midpoint between the two.
float ulp(float v) {
  return std::nextafter(std::abs(v), INFINITY) - std::abs(v);
}

void check_nested(const std::string& weight, const SafetensorsFile& theirs,
                  const std::map<std::string, Tensor>& ours, const std::vector<float>& w,
                  const std::string& state_key, Tally& tally) {
  SCOPED_TRACE(weight + " (double quantization)");
  const std::vector<uint8_t> their_json = bytes_of(theirs.get(state_key)),
                             our_json = bytes_of(ours.at(state_key));
  const json st = json::parse(their_json), ost = json::parse(our_json);
  const auto prefix = [](const std::vector<uint8_t>& j) {
    const std::string text(j.begin(), j.end());
    return text.substr(0, text.find("\"nested_offset\": "));
  };
  EXPECT_EQ(prefix(their_json), prefix(our_json)) << "every quant_state field but the offset";
  const float offset = st.at("nested_offset").get<float>();
  const float our_offset = ost.at("nested_offset").get<float>();
  EXPECT_LE(std::abs(offset - our_offset), ulp(our_offset));
  tally.offsets_one_ulp_off += offset != our_offset;

  const float nested = theirs.get(weight + ".nested_absmax").item<float>();
  const float our_nested = ours.at(weight + ".nested_absmax").item<float>();
  EXPECT_LE(std::abs(nested - our_nested), std::abs(offset - our_offset) + ulp(our_nested));

  const auto code = floats(theirs.get(weight + ".nested_quant_map"));
  const auto our_code = floats(ours.at(weight + ".nested_quant_map"));
  ASSERT_EQ(code.size(), our_code.size());
  tally.table_entries_off = 0;
  for (size_t i = 0; i < code.size(); ++i) {
    EXPECT_LE(std::abs(code[i] - our_code[i]), 2 * ulp(our_code[i])) << "code " << i;
    tally.table_entries_off += code[i] != our_code[i];
  }

  const int64_t blocksize = st.at("blocksize").get<int64_t>();
  std::vector<float> absmax((w.size() + blocksize - 1) / blocksize, 0.0f);
  for (size_t i = 0; i < w.size(); ++i) {
    absmax[i / blocksize] = std::max(absmax[i / blocksize], std::abs(w[i]));
  }
  const auto a = bytes_of(theirs.get(weight + ".absmax")),
             b = bytes_of(ours.at(weight + ".absmax"));
  ASSERT_EQ(a.size(), absmax.size());
  for (size_t i = 0; i < absmax.size(); ++i) {
    if (a[i] == b[i]) continue;
    const float scaled = (absmax[i] - offset) * (1.0f / nested);
    const float mid = (code[a[i]] + code[b[i]]) / 2.0f;
    EXPECT_EQ(std::abs(int(a[i]) - int(b[i])), 1) << "block " << i;
    EXPECT_LT(std::abs(scaled - mid), 2e-5) << "block " << i;
    ++tally.nested_near_midpoint;
  }
}

// Compares every tensor of bitsandbytes' file with braid's quantized_state_dict of the model
// braid quantized from the f32 checkpoint.
void check_tensors(const std::string& model_name, const std::string& fmt,
                   const SafetensorsFile& theirs, nn::Module& mine, const SafetensorsFile& f32,
                   Tally& tally) {
  std::map<std::string, Tensor> ours;
  for (auto& [name, t] : quantized_state_dict(mine)) ours[name] = t;
  std::set<std::string> their_names;
  for (const std::string& n : theirs.names()) their_names.insert(n);
  std::set<std::string> our_names;
  for (auto& [n, t] : ours) our_names.insert(n);
  ASSERT_EQ(their_names, our_names) << model_name << "-" << fmt;
  std::set<std::string> nested_checked;  // weights whose double quantization differed

  for (const std::string& name : theirs.names()) {
    SCOPED_TRACE(name);
    const Tensor t = theirs.get(name), o = ours.at(name);
    ASSERT_EQ(t.dtype(), o.dtype());
    // (A quant_state's length follows the printed offset.)
    if (name.find(".quant_state.") == std::string::npos) {
      ASSERT_EQ(t.shape(), o.shape());
    }
    ++tally.tensors;
    // The quantized layer the tensor belongs to, if any: "<mod>.weight[.<state>]", "<mod>.SCB".
    std::string mod;
    for (auto& [path, m] : mine.named_modules()) {
      const bool quantized = dynamic_cast<nn::Linear4bit*>(m) || dynamic_cast<nn::Linear8bitLt*>(m);
      if (quantized && (name.starts_with(path + ".weight") || name == path + ".SCB")) mod = path;
    }
    const std::string weight = mod + ".weight";
    if (!mod.empty() && fmt != "int8" && name == weight) tally.codes4 += 2 * t.numel();
    if (!mod.empty() && fmt == "nf4-dq" && name == weight + ".absmax") {
      tally.nested_codes += t.numel();
    }
    if (bytes_of(t) == bytes_of(o)) {
      ++tally.equal_tensors;
      continue;
    }
    ASSERT_FALSE(mod.empty()) << "differs from braid's and is not a quantized layer's";
    if (fmt == "int8") {
      // Checked by check_int8 against braid's quantizer of the f16-rounded weight.
      EXPECT_TRUE(name == weight || name == mod + ".SCB") << "differs";
      continue;
    }
    const std::string state_key = weight + ".quant_state.bitsandbytes__" +
                                  (fmt == "fp4" ? std::string("fp4") : std::string("nf4"));
    if (name == weight) {
      const json st = json::parse(bytes_of(theirs.get(state_key)));
      check_4bit_codes(name, weight_out_in(f32, mod, mine), t, o, theirs.get(weight + ".quant_map"),
                       st.at("blocksize").get<int64_t>(), tally);
    } else if (fmt == "nf4-dq" &&
               (name == weight + ".absmax" || name == weight + ".nested_absmax" ||
                name == weight + ".nested_quant_map" || name == state_key)) {
      if (!nested_checked.insert(weight).second) continue;
      check_nested(weight, theirs, ours, floats(weight_out_in(f32, mod, mine)), state_key, tally);
    } else {
      ADD_FAILURE() << "differs from braid's (" << t.to_string() << " vs " << o.to_string() << ")";
    }
  }
}

// LLM.int8: bitsandbytes rounds the weight to f16 before quantizing it (Int8Params._quantize:
// .to(float16), then int8_vectorwise_quant), and its scale 127.0 / SCB is torch's
// reciprocal(SCB) * 127. Its SCB is braid's quantize_int8 of the f16-rounded weight bit for bit,
// its CB the same except where the two scales put a product on the other side of n + 0.5.
// Against braid's quantization of the f32 weight: SCB within the f16 rounding of the absmax
// (2^-11 relative), CB within one step.
void check_int8(const std::string& model_name, const SafetensorsFile& theirs, nn::Module& mine,
                const SafetensorsFile& f32, Tally& tally) {
  for (auto& [path, m] : mine.named_modules()) {
    auto* l8 = dynamic_cast<nn::Linear8bitLt*>(m);
    if (!l8) continue;
    SCOPED_TRACE(model_name + " " + path);
    const Tensor w = weight_out_in(f32, path, mine);
    const QuantizedInt8 half = quantize_int8(w.to(DType::kF16).to(DType::kF32));
    // CB: round(w16 * (127 * (1 / SCB))), bitsandbytes' rule exactly; braid's 127 / SCB may
    // differ from it in the last bit, which moves a product lying within an ulp of n + 0.5.
    const auto cb = bytes_of(theirs.get(path + ".weight")), cb16 = bytes_of(half.cb);
    const auto w16 = floats(w.to(DType::kF16)), scb = floats(half.scb);
    const int64_t cols = w.shape()[1];
    for (size_t i = 0; i < cb.size(); ++i) {
      const float their_scale = 127.0f * (1.0f / scb[i / cols]);
      ASSERT_EQ(int8_t(cb[i]), int8_t(std::nearbyint(w16[i] * their_scale))) << "element " << i;
      if (cb[i] == cb16[i]) continue;
      const float p = w16[i] * (127.0f / scb[i / cols]);
      EXPECT_LE(std::abs(std::abs(p - std::trunc(p)) - 0.5f), 2 * ulp(p)) << "element " << i;
      ++tally.int8_scale_ties;
    }
    EXPECT_EQ(bytes_of(theirs.get(path + ".SCB")), bytes_of(half.scb));
    EXPECT_EQ(theirs.get(path + ".weight_format").item(), 0.0);
    const auto ours = bytes_of(l8->quantized().cb);
    for (size_t i = 0; i < cb.size(); ++i) {
      ++tally.int8_codes;
      const int d = int(int8_t(cb[i])) - int(int8_t(ours[i]));
      EXPECT_LE(std::abs(d), 1) << "element " << i;
      tally.int8_off_by_one += d != 0;
    }
    const auto s = floats(theirs.get(path + ".SCB")), so = floats(l8->quantized().scb);
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_LE(std::abs(s[i] - so[i]), so[i] * std::ldexp(1.0, -11)) << "row " << i;
    }
  }
}

std::vector<double> ints(const json& j) {
  return j.get<std::vector<double>>();
}

void check_model(const std::string& model_name) {
  const fs::path f32_folder = kF32Root / model_name;
  const SafetensorsFile f32 = SafetensorsFile::open(f32_folder / "model.safetensors");
  for (const char* fmt : kFormats) {
    const std::string case_name = model_name + "-" + fmt;
    SCOPED_TRACE(case_name);
    const fs::path folder = kBnbRoot / case_name;
    const BnbQuantizationConfig q = bnb_config_from_hf_config(read_file(folder / "config.json"));
    const json gen = json::parse(read_file(folder / "generation.json"));
    const SafetensorsFile logits = SafetensorsFile::open(folder / "logits.safetensors");
    const SafetensorsFile theirs = SafetensorsFile::open(folder / "model.safetensors");
    const bool four_bit = q.load_in_4bit;

    // braid's own quantization of the f32 checkpoint.
    auto mine = meta_model(f32_folder);
    {
      const LoadAndQuantizeResult r = load_and_quantize_model(*mine, q, f32_folder);
      ASSERT_TRUE(r.missing_keys.empty()) << r.missing_keys.front();
    }
    Tally tally;
    check_tensors(model_name, fmt, theirs, *mine, f32, tally);
    if (!four_bit) check_int8(model_name, theirs, *mine, f32, tally);
    std::printf(
        "[ measured ] %s: %lld of %lld tensors byte-equal to braid's quantization of the f32 "
        "file; differing 4-bit codes: %lld midpoint ties, %lld FP4 zero codes (of %lld); double "
        "quantization: %lld offsets one ulp off, %lld of 256 code-table entries off by 1-2 ulps, "
        "%lld absmax codes near a midpoint (of %lld); int8: %lld codes one step off braid's of the "
        "f32 weight (of %lld), %lld off braid's of the f16-rounded weight\n",
        case_name.c_str(), (long long)tally.equal_tensors, (long long)tally.tensors,
        (long long)tally.ties4, (long long)tally.zero_codes4, (long long)tally.codes4,
        (long long)tally.offsets_one_ulp_off, (long long)tally.table_entries_off,
        (long long)tally.nested_near_midpoint, (long long)tally.nested_codes,
        (long long)tally.int8_off_by_one, (long long)tally.int8_codes,
        (long long)tally.int8_scale_ties);

    // bitsandbytes' file loaded by braid.
    auto m = meta_model(folder);
    const LoadAndQuantizeResult r = load_and_quantize_model(*m, q, folder);
    EXPECT_TRUE(r.missing_keys.empty()) << r.missing_keys.front();
    EXPECT_TRUE(r.unexpected_keys.empty()) << r.unexpected_keys.front();
    EXPECT_FALSE(r.quantized_modules.empty());
    const auto prompt_v = ints(gen.at("prompt"));
    const Tensor prompt = Tensor::from_vector(prompt_v, {1, int64_t(prompt_v.size())}, DType::kI64);
    const auto want_f32 = ints(gen.at("tokens_f32"));
    const Tensor tokens_f32 =
        Tensor::from_vector(want_f32, {1, int64_t(want_f32.size())}, DType::kI64);
    Generator g(0);
    const auto got =
        m->generate(prompt, int64_t(want_f32.size() - prompt_v.size()), 0.0, 0, g).to_vector();
    EXPECT_EQ(got, ints(gen.at("tokens"))) << "transformers + bitsandbytes' tokens";
    if (four_bit) {
      EXPECT_EQ(got, ints(gen.at("tokens_dequant")));
    }
    nn::NoGradGuard no_grad;
    const Tensor braid_logits = m->forward(tokens_f32);
    // 4-bit: against bitsandbytes' dequantizing path (f32 weights code * absmax, f32 GEMM) only
    // the summation order differs; its default path on an AVX512-BF16 CPU rounds the input and
    // the absmax to bf16. LLM.int8: bitsandbytes rounds each activation to f16 before its row
    // quantization (MatMul8bitLt), braid quantizes the f32 activation.
    const double err = max_rel_diff(braid_logits, logits.get("logits"));
    double err_dequant = 0;
    if (four_bit) {
      err_dequant = max_rel_diff(braid_logits, logits.get("logits_dequant"));
      EXPECT_LT(err_dequant, 1e-5) << "against bitsandbytes' dequantize_4bit + linear";
      EXPECT_LT(err, 0.01) << "against bitsandbytes' bf16 CPU kernel";
    } else {
      EXPECT_LT(err, 0.01) << "against bitsandbytes' LLM.int8 with f16 activations";
    }
    char dequant[96] = "";
    if (four_bit) {
      std::snprintf(dequant, sizeof(dequant), "; %.2e against dequantize_4bit + linear",
                    err_dequant);
    }
    std::printf(
        "[ measured ] %s: max |braid logit - bitsandbytes'| / max |logit| = %.2e (its default "
        "cpu path: %s)%s\n",
        case_name.c_str(), err, gen.at("cpu_path").get<std::string>().c_str(), dequant);
    // Where every byte agreed, braid computes the same bits from either file.
    if (tally.equal_tensors == tally.tensors) {
      EXPECT_TRUE(equal(braid_logits, mine->forward(tokens_f32)));
    }

    if (const char* out = std::getenv("BRAID_BNB_EXPORT")) {
      const fs::path dir = fs::path(out) / case_name;
      fs::create_directories(dir);
      save_quantized_model(*mine, dir / "model.safetensors");
      for (const char* f : {"config.json", "generation_config.json"}) {
        fs::copy_file(folder / f, dir / f, fs::copy_options::overwrite_existing);
      }
    }
  }
}

TEST(BnbCheckpoint, ConfigFromTransformersConfigJson) {
  for (const char* model : {"gpt2", "llama"}) {
    for (const char* fmt : kFormats) {
      const std::string f(fmt);
      const BnbQuantizationConfig q = bnb_config_from_hf_config(
          read_file(kBnbRoot / (std::string(model) + "-" + f) / "config.json"));
      EXPECT_EQ(q.load_in_8bit, f == "int8") << f;
      EXPECT_EQ(q.load_in_4bit, f != "int8") << f;
      EXPECT_EQ(q.llm_int8_threshold, 6.0);
      EXPECT_FALSE(q.skip_modules.has_value());
      if (f != "int8") {
        EXPECT_EQ(q.bnb_4bit_quant_type, f == "fp4" ? "fp4" : "nf4");
        EXPECT_EQ(q.bnb_4bit_use_double_quant, f == "nf4-dq");
        EXPECT_EQ(q.bnb_4bit_compute_dtype, "fp32");
      }
    }
  }
  EXPECT_THROW(bnb_config_from_hf_config(read_file(kF32Root / "gpt2" / "config.json")), Error);
  EXPECT_THROW(
      bnb_config_from_hf_config(R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})"),
      Error);
  EXPECT_THROW(bnb_config_from_hf_config(R"({"quantization_config": {"quant_method":
      "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_storage": "bfloat16"}})"),
               Error);
  const BnbQuantizationConfig bf = bnb_config_from_hf_config(R"({"quantization_config":
      {"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_compute_dtype":
      "bfloat16", "llm_int8_skip_modules": ["lm_head", "wte"]}})");
  EXPECT_EQ(bf.bnb_4bit_compute_dtype, "bf16");
  EXPECT_EQ(bf.skip_modules, (std::vector<std::string>{"lm_head", "wte"}));
}

TEST(BnbCheckpoint, Gpt2WrittenByBitsandbytes) {
  check_model("gpt2");
}

TEST(BnbCheckpoint, LlamaWrittenByBitsandbytes) {
  check_model("llama");
}

}  // namespace
}  // namespace braid::accel
