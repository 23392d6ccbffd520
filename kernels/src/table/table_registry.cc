// The kernel table registry: the one file that knows which device tables this program has.
// cpu and meta are always built; cuda is the component braid::kernels_cuda (built when
// BRAID_HAVE_CUDA, present when linked: a weak reference to its entry point; in libbraid.so,
// which holds no component, the plugin libbraid_kernels_cuda.so beside it, loaded on the first
// ask for cuda kernels: braid/core/plugin.h). Tables are plain static data, looked up by device
// type with no lock once found.
#include "braid/core/config.h"
#include "braid/core/error.h"
#include "braid/core/plugin.h"
#include "braid/kernels/table.h"
#include "table_support.h"

namespace braid::kernels {
struct KernelTable;
}

// The kernels_cuda component's entry point (kernels/src/cuda/table_cuda.cu); null unless the
// program links braid::kernels_cuda.
extern "C" [[gnu::weak]] const braid::kernels::KernelTable* braid_kernels_cuda_table();

namespace braid::kernels {

namespace detail {
const KernelTable& cpu_kernel_table();   // table_cpu.cc
const KernelTable& meta_kernel_table();  // table_meta.cc

bool reference_supports(Op op, DType d) {
  const bool f64 = d == DType::kF64, f32 = d == DType::kF32;
  const bool half = d == DType::kF16 || d == DType::kBF16;
  const bool flt = f64 || f32 || half;  // the float dtypes the computing kernels take
  switch (op) {
    case Op::kCast:
    case Op::kFill:
    case Op::kCopyStrided:
    case Op::kCopyToStrided:
    case Op::kEmbeddingForward:  // rows are copied as bytes
      return true;
    case Op::kBinary:
    case Op::kReduce:  // integer mean / norm are refused by the call (docs in cpu.h)
      return flt || d == DType::kI64 || d == DType::kI32;
    case Op::kAxpby:
    case Op::kScale:
    case Op::kUnary:
    case Op::kSoftmax:
    case Op::kGemm:
    case Op::kActivationBackward:
    case Op::kMaskedScale:
    case Op::kCrossEntropyForward:
    case Op::kCrossEntropyBackward:
    case Op::kAttentionForward:
    case Op::kAttentionBackward:
      return flt;
    case Op::kLayerNormForward:
    case Op::kLayerNormBackward:
    case Op::kRmsNormForward:
    case Op::kRmsNormBackward:
    case Op::kEmbeddingBackward:
      return f64 || f32;
    case Op::kOptimizerStep:
    case Op::kUnscaleCheckFinite:
    case Op::kGemm4bit:  // x's dtype (y may be any of the three as well)
    case Op::kGemm4bitNN:
      return f32 || half;
    case Op::kQuantize4bit:
    case Op::kDequantize4bit:
    case Op::kQuantizeBlockwise8bit:
    case Op::kDequantizeBlockwise8bit:
    case Op::kQuantizeInt8Rows:
    case Op::kInt8Linear:
      return f32;
    case Op::kGemmI8:
      return d == DType::kI8;
  }
  return false;
}

}  // namespace detail

namespace {

constexpr const char* kCudaEntry = "braid_kernels_cuda_table";

// Whether the cuda kernels come as a plugin: built, not linked, braid in libbraid.so.
bool cuda_is_plugin() {
  return BRAID_HAVE_CUDA && braid_kernels_cuda_table == nullptr && !shared_library_dir().empty();
}

// The cuda table: the linked component's, else the plugin's (loaded once), else null.
const KernelTable* cuda_table() {
  if (braid_kernels_cuda_table != nullptr) return braid_kernels_cuda_table();
  if (!cuda_is_plugin()) return nullptr;
  static const KernelTable* table = [] {
    const PluginLoad& load = load_component_plugin("kernels_cuda", kCudaEntry);
    if (load.entry == nullptr) return static_cast<const KernelTable*>(nullptr);
    return reinterpret_cast<const KernelTable* (*)()>(load.entry)();
  }();
  return table;
}

}  // namespace

const KernelTable& kernels_for(DeviceType type) {
  switch (type) {
    case DeviceType::kCPU:
      return detail::cpu_kernel_table();
    case DeviceType::kMeta:
      return detail::meta_kernel_table();
    case DeviceType::kCUDA:
      if (const KernelTable* table = cuda_table()) return *table;
      if (cuda_is_plugin()) {
        const PluginLoad& load = load_component_plugin("kernels_cuda", kCudaEntry);
        BRAID_FAIL(kNotSupported, "kernels_for(cuda): the cuda kernels are built but their plugin ",
                   load.path, " could not be loaded: ", load.error,
                   " (docs/layout.md, \"Components\")");
      }
      BRAID_CHECK(!BRAID_HAVE_CUDA, kNotSupported,
                  "kernels_for(cuda): the cuda kernels are built but this program does not link "
                  "their component: link braid::kernels_cuda (braid::braid links every "
                  "component; docs/layout.md, \"Components\")");
      break;
    default:
      break;
  }
  BRAID_FAIL(kNotSupported, "kernels_for(", device_type_name(type), "): this build has no ",
             device_type_name(type),
             " kernels (built: ", BRAID_HAVE_CUDA ? "cpu, meta, cuda" : "cpu, meta", ")");
}

bool has_kernels(DeviceType type) {
  return type == DeviceType::kCPU || type == DeviceType::kMeta ||
         (type == DeviceType::kCUDA && cuda_table() != nullptr);
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kCast:
      return "cast";
    case Op::kFill:
      return "fill";
    case Op::kCopyStrided:
      return "copy_strided";
    case Op::kCopyToStrided:
      return "copy_to_strided";
    case Op::kBinary:
      return "binary";
    case Op::kAxpby:
      return "axpby";
    case Op::kScale:
      return "scale";
    case Op::kUnary:
      return "unary";
    case Op::kReduce:
      return "reduce";
    case Op::kSoftmax:
      return "softmax";
    case Op::kGemm:
      return "gemm";
    case Op::kLayerNormForward:
      return "layer_norm_forward";
    case Op::kLayerNormBackward:
      return "layer_norm_backward";
    case Op::kRmsNormForward:
      return "rms_norm_forward";
    case Op::kRmsNormBackward:
      return "rms_norm_backward";
    case Op::kActivationBackward:
      return "activation_backward";
    case Op::kMaskedScale:
      return "masked_scale";
    case Op::kEmbeddingForward:
      return "embedding_forward";
    case Op::kEmbeddingBackward:
      return "embedding_backward";
    case Op::kCrossEntropyForward:
      return "cross_entropy_forward";
    case Op::kCrossEntropyBackward:
      return "cross_entropy_backward";
    case Op::kAttentionForward:
      return "causal_attention_forward";
    case Op::kAttentionBackward:
      return "causal_attention_backward";
    case Op::kOptimizerStep:
      return "optimizer_step";
    case Op::kUnscaleCheckFinite:
      return "unscale_and_check_finite";
    case Op::kQuantize4bit:
      return "quantize_4bit";
    case Op::kDequantize4bit:
      return "dequantize_4bit";
    case Op::kQuantizeBlockwise8bit:
      return "quantize_blockwise_8bit";
    case Op::kDequantizeBlockwise8bit:
      return "dequantize_blockwise_8bit";
    case Op::kQuantizeInt8Rows:
      return "quantize_int8_rows";
    case Op::kGemmI8:
      return "gemm_i8_i32";
    case Op::kInt8Linear:
      return "int8_linear";
    case Op::kGemm4bit:
      return "gemm_4bit";
    case Op::kGemm4bitNN:
      return "gemm_4bit_nn";
  }
  return "unknown op";
}

void require_support(const KernelTable& table, Op op, DType dtype) {
  BRAID_CHECK(table.supports(op, dtype), kNotSupported, op_name(op), ": dtype ", dtype,
              " is not supported on ", device_type_name(table.device));
}

}  // namespace braid::kernels
