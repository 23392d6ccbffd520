// Tensor-level quantization (braid/tensor/quant.h): argument checks, f32 staging and the
// QuantState bookkeeping around the quant ops of the kernel table (kernels_for(device):
// cpu_quant.h on cpu, kernels/src/cuda/quant.cu on cuda, shape checks on meta). The code tables
// come from cpu_quant.h (constants) and are copied to the tensor's device.
#include "braid/tensor/quant.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "braid/core/error.h"
#include "braid/kernels/table.h"
#include "braid/tensor/ops.h"
#include "dispatch.h"

namespace braid {
namespace {

namespace kc = kernels::cpu;
using kernels::Op;

bool is_float(DType t) {
  return t == DType::kF64 || t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// x as a contiguous f32 tensor on its device.
Tensor f32_dense(const Tensor& x, const char* op) {
  BRAID_CHECK(x.defined(), kInvalidArgument, op, ": undefined tensor");
  BRAID_CHECK(is_float(x.dtype()), kInvalidArgument, op, ": expected a floating tensor, got ",
              x.dtype());
  return x.to(DType::kF32).contiguous();
}

// n host floats as an f32 tensor on `device`.
Tensor copy_of(const float* p, int64_t n, Device device = kCPU) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  if (n > 0) std::memcpy(t.data_ptr(), p, static_cast<size_t>(n) * sizeof(float));
  return device == kCPU ? t : t.to(device);
}

// The table of `t`'s device for `op` (its fixed f32 operand dtype), with the one message.
const kernels::KernelTable& table_of(Op op, const Tensor& t, const char* name) {
  return detail::table_for(op, op == Op::kGemmI8 ? DType::kI8 : DType::kF32, name, t);
}

}  // namespace

std::string_view quant4_type_name(Quant4Type type) {
  return type == Quant4Type::kNf4 ? "nf4" : "fp4";
}

Quant4Type parse_quant4_type(std::string_view name) {
  if (name == "nf4") return Quant4Type::kNf4;
  if (name == "fp4") return Quant4Type::kFp4;
  BRAID_FAIL(kInvalidArgument, "bnb_4bit_quant_type '", name,
             "' is not supported (expected nf4 or fp4)");
}

int64_t QuantizedTensor4bit::nbytes() const {
  int64_t n = static_cast<int64_t>(packed.nbytes());
  for (const Tensor* t : {&state.absmax, &state.code, &state.nested_absmax, &state.nested_code}) {
    if (t->defined()) n += static_cast<int64_t>(t->nbytes());
  }
  return n;
}

int64_t QuantizedInt8::nbytes() const {
  return static_cast<int64_t>(cb.nbytes() + scb.nbytes());
}

QuantizedTensor4bit quantize_4bit(const Tensor& x, Quant4Type type, int64_t blocksize,
                                  bool double_quant) {
  const Tensor xf = f32_dense(x, "quantize_4bit");
  const Device dev = xf.device();
  const kernels::KernelTable& k = table_of(Op::kQuantize4bit, xf, "quantize_4bit");
  const int64_t n = xf.numel();
  const int64_t blocks = (n + blocksize - 1) / std::max<int64_t>(blocksize, 1);
  QuantizedTensor4bit q;
  q.packed = Tensor::empty({(n + 1) / 2, 1}, DType::kU8, dev);
  Tensor absmax = Tensor::empty({blocks}, DType::kF32, dev);
  k.quantize_4bit(kernels::stream_for(dev), type, xf.data<float>(), n, blocksize,
                  q.packed.data<uint8_t>(), absmax.data<float>());
  Quant4State& s = q.state;
  s.type = type;
  s.blocksize = blocksize;
  s.shape = x.shape();
  s.dtype = x.dtype();
  s.code = copy_of(kc::quant4_code(type), 16, dev);
  if (!double_quant || blocks == 0) {
    s.absmax = absmax;
    return q;
  }
  s.nested = true;
  s.absmax = Tensor::empty({blocks}, DType::kU8, dev);
  s.nested_absmax =
      Tensor::empty({(blocks + s.nested_blocksize - 1) / s.nested_blocksize}, DType::kF32, dev);
  s.nested_code = copy_of(kc::dynamic_code_signed(), 256, dev);
  Tensor centred = Tensor::empty({blocks}, DType::kF32, dev);
  if (dev != kMeta) {  // the mean on the host, in f64 (blocks values: 1 / 64 of the weight)
    const Tensor host = dev == kCPU ? absmax : absmax.to(kCPU);
    const float* a = host.data<float>();
    double sum = 0;
    for (int64_t i = 0; i < blocks; ++i) sum += a[i];
    s.offset = static_cast<float>(sum / static_cast<double>(blocks));
    Tensor c = Tensor::empty({blocks}, DType::kF32);
    for (int64_t i = 0; i < blocks; ++i) c.data<float>()[i] = a[i] - s.offset;
    centred = dev == kCPU ? c : c.to(dev);
  }
  k.quantize_blockwise_8bit(kernels::stream_for(dev), s.nested_code.data<float>(),
                            centred.data<float>(), blocks, s.nested_blocksize,
                            s.absmax.data<uint8_t>(), s.nested_absmax.data<float>());
  return q;
}

Tensor absmax_f32(const Quant4State& s) {
  if (!s.nested) return s.absmax.to(DType::kF32).contiguous();
  BRAID_CHECK(s.absmax.dtype() == DType::kU8, kInvalidArgument,
              "absmax_f32: a nested absmax must be u8, got ", s.absmax.dtype());
  const int64_t blocks = s.absmax.numel();
  const Tensor qa = s.absmax.contiguous();
  const Device dev = qa.device();
  const kernels::KernelTable& k = table_of(Op::kDequantizeBlockwise8bit, qa, "absmax_f32");
  Tensor out = Tensor::empty({blocks}, DType::kF32, dev);
  const Tensor na = s.nested_absmax.to(dev).to(DType::kF32).contiguous();
  const Tensor nc = s.nested_code.to(dev).to(DType::kF32).contiguous();
  BRAID_CHECK(nc.numel() == 256, kInvalidArgument, "absmax_f32: nested_quant_map has ", nc.numel(),
              " entries (expected 256)");
  k.dequantize_blockwise_8bit(kernels::stream_for(dev), nc.data<float>(), qa.data<uint8_t>(),
                              na.data<float>(), blocks, s.nested_blocksize, out.data<float>());
  if (dev == kCPU) {
    float* o = out.data<float>();
    for (int64_t i = 0; i < blocks; ++i) o[i] += s.offset;
    return out;
  }
  return add(out, Scalar(static_cast<double>(s.offset)));  // f32 + the f32 offset, one rounding
}

Tensor dequantize_4bit(const QuantizedTensor4bit& q, DType dtype) {
  BRAID_CHECK(is_float(dtype), kInvalidArgument, "dequantize_4bit: target dtype ", dtype,
              " is not floating");
  const Quant4State& s = q.state;
  const int64_t n = shape_numel(s.shape);
  BRAID_CHECK(q.packed.dtype() == DType::kU8 && q.packed.numel() == (n + 1) / 2, kInvalidArgument,
              "dequantize_4bit: packed data is ", q.packed.dtype(), " with ", q.packed.numel(),
              " bytes (expected u8 with ", (n + 1) / 2, " for shape ", shape_str(s.shape), ")");
  const Tensor absmax = absmax_f32(s);
  BRAID_CHECK(absmax.numel() == (n + s.blocksize - 1) / s.blocksize, kInvalidArgument,
              "dequantize_4bit: ", absmax.numel(), " absmax values for ", n,
              " elements in blocks of ", s.blocksize);
  const Tensor code = s.code.to(DType::kF32).contiguous();
  BRAID_CHECK(code.numel() == 16, kInvalidArgument, "dequantize_4bit: quant_map has ", code.numel(),
              " entries (expected 16)");
  const Tensor packed = q.packed.contiguous();
  const Device dev = packed.device();
  const kernels::KernelTable& k = table_of(Op::kDequantize4bit, packed, "dequantize_4bit");
  Tensor out = Tensor::empty(s.shape, DType::kF32, dev);
  k.dequantize_4bit(kernels::stream_for(dev), code.to(dev).data<float>(), packed.data<uint8_t>(),
                    absmax.to(dev).data<float>(), n, s.blocksize, out.data<float>());
  return dtype == DType::kF32 ? out : out.to(dtype);
}

QuantizedInt8 quantize_int8(const Tensor& w) {
  BRAID_CHECK(w.dim() == 2, kInvalidArgument,
              "quantize_int8: expected a 2-d weight [out, in], got shape ", shape_str(w.shape()));
  const Tensor wf = f32_dense(w, "quantize_int8");
  const Device dev = wf.device();
  const kernels::KernelTable& k = table_of(Op::kQuantizeInt8Rows, wf, "quantize_int8");
  const int64_t rows = wf.shape()[0], cols = wf.shape()[1];
  QuantizedInt8 q{Tensor::empty({rows, cols}, DType::kI8, dev),
                  Tensor::empty({rows}, DType::kF32, dev)};
  k.quantize_int8_rows(kernels::stream_for(dev), wf.data<float>(), rows, cols, 0.0f,
                       q.cb.data<int8_t>(), q.scb.data<float>(), nullptr);
  return q;
}

Tensor dequantize_int8(const QuantizedInt8& q, DType dtype) {
  const Tensor cb = q.cb.contiguous();
  const Tensor scb = q.scb.to(DType::kF32).contiguous();
  const int64_t rows = cb.shape()[0], cols = cb.shape()[1];
  Tensor out = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = scb.data<float>()[r] / 127.0f;
    for (int64_t c = 0; c < cols; ++c) {
      out.data<float>()[r * cols + c] = static_cast<float>(cb.data<int8_t>()[r * cols + c]) * s;
    }
  }
  return dtype == DType::kF32 ? out : out.to(dtype);
}

Tensor int8_linear(const Tensor& x, const QuantizedInt8& w, double threshold) {
  BRAID_CHECK(w.cb.dtype() == DType::kI8 && w.cb.dim() == 2, kInvalidArgument,
              "int8_linear: weight must be i8 [out, in], got ", w.cb.dtype(), " ",
              shape_str(w.cb.shape()));
  const int64_t out = w.cb.shape()[0], in = w.cb.shape()[1];
  BRAID_CHECK(x.dim() >= 1 && x.shape().back() == in, kInvalidArgument, "int8_linear: input shape ",
              shape_str(x.shape()), " does not end in in_features ", in);
  const Tensor xf = f32_dense(x, "int8_linear");
  const Device dev = xf.device();
  BRAID_CHECK(w.cb.device() == dev, kInvalidArgument, "int8_linear: input on ", dev, ", weight on ",
              w.cb.device());
  const kernels::KernelTable& k = table_of(Op::kInt8Linear, xf, "int8_linear");
  const int64_t m = xf.numel() / std::max<int64_t>(in, 1);
  Shape yshape = x.shape();
  yshape.back() = out;
  Tensor y = Tensor::empty(yshape, DType::kF32, dev);
  const Tensor cb = w.cb.contiguous();
  const Tensor scb = w.scb.to(DType::kF32).contiguous();
  k.int8_linear(kernels::stream_for(dev), xf.data<float>(), m, in, cb.data<int8_t>(),
                scb.data<float>(), out, static_cast<float>(threshold), y.data<float>());
  return y;
}

namespace {

// The device operands of a 4-bit weight [out, in] for the fused kernels, checked.
struct Weight4Operands {
  Tensor packed, absmax, code;
  int64_t out, in;
};

Weight4Operands weight4_operands(const QuantizedTensor4bit& q, Device dev, const char* op) {
  const Quant4State& s = q.state;
  BRAID_CHECK(s.shape.size() == 2, kInvalidArgument, op,
              ": the quantized weight must be 2-d [out, in], got ", shape_str(s.shape));
  Weight4Operands w;
  w.out = s.shape[0];
  w.in = s.shape[1];
  const int64_t n = w.out * w.in;
  w.packed = q.packed.to(dev).contiguous();
  BRAID_CHECK(w.packed.dtype() == DType::kU8 && w.packed.numel() == (n + 1) / 2, kInvalidArgument,
              op, ": packed data is ", w.packed.dtype(), " with ", w.packed.numel(),
              " bytes (expected u8 with ", (n + 1) / 2, ")");
  // The absmax in f32 (dequantized when nested: 4 bytes per block, 1 / 8 of the 4-bit size).
  w.absmax = absmax_f32(s).to(dev);
  BRAID_CHECK(w.absmax.numel() == (n + s.blocksize - 1) / s.blocksize, kInvalidArgument, op, ": ",
              w.absmax.numel(), " absmax values for ", n, " elements in blocks of ", s.blocksize);
  w.code = s.code.to(dev).to(DType::kF32).contiguous();
  BRAID_CHECK(w.code.numel() == 16, kInvalidArgument, op, ": quant_map has ", w.code.numel(),
              " entries (expected 16)");
  return w;
}

void check_compute(DType compute, const char* op) {
  BRAID_CHECK(compute == DType::kF32 || compute == DType::kBF16 || compute == DType::kF16,
              kInvalidArgument, op, ": compute dtype ", compute, " (expected f32, bf16 or f16)");
}

}  // namespace

Tensor linear_4bit_input_grad(const Tensor& dy, const QuantizedTensor4bit& q, DType compute) {
  BRAID_CHECK(dy.defined(), kInvalidArgument, "linear_4bit_input_grad: undefined gradient");
  check_compute(compute, "linear_4bit_input_grad");
  BRAID_CHECK(is_float(dy.dtype()), kInvalidArgument,
              "linear_4bit_input_grad: expected a floating gradient, got ", dy.dtype());
  const Tensor g = dy.to(compute).contiguous();
  const Device dev = g.device();
  const kernels::KernelTable& k =
      detail::table_for(Op::kGemm4bitNN, compute, "linear_4bit_input_grad", g);
  const Weight4Operands w = weight4_operands(q, dev, "linear_4bit_input_grad");
  BRAID_CHECK(dy.dim() >= 1 && dy.shape().back() == w.out, kInvalidArgument,
              "linear_4bit_input_grad: gradient shape ", shape_str(dy.shape()),
              " does not end in out_features ", w.out);
  const int64_t m = g.numel() / std::max<int64_t>(w.out, 1);
  Shape xshape = dy.shape();
  xshape.back() = w.in;
  Tensor dx = Tensor::empty(xshape, compute, dev);
  k.gemm_4bit_nn(kernels::stream_for(dev), w.code.data<float>(), w.packed.data<uint8_t>(),
                 w.absmax.data<float>(), q.state.blocksize, m, w.out, w.in, g.data_ptr(), compute,
                 dx.data_ptr(), compute);
  return dx;
}

Tensor linear_4bit(const Tensor& x, const QuantizedTensor4bit& q, DType compute) {
  BRAID_CHECK(x.defined(), kInvalidArgument, "linear_4bit: undefined input");
  BRAID_CHECK(compute == DType::kF32 || compute == DType::kBF16 || compute == DType::kF16,
              kInvalidArgument, "linear_4bit: compute dtype ", compute,
              " (expected f32, bf16 or f16)");
  const Quant4State& s = q.state;
  BRAID_CHECK(s.shape.size() == 2, kInvalidArgument,
              "linear_4bit: the quantized weight must be 2-d [out, in], got ", shape_str(s.shape));
  const int64_t out = s.shape[0], in = s.shape[1];
  BRAID_CHECK(x.dim() >= 1 && x.shape().back() == in, kInvalidArgument, "linear_4bit: input shape ",
              shape_str(x.shape()), " does not end in in_features ", in);
  BRAID_CHECK(is_float(x.dtype()), kInvalidArgument, "linear_4bit: expected a floating input, got ",
              x.dtype());
  const Tensor xc = x.to(compute).contiguous();
  const Device dev = xc.device();
  const kernels::KernelTable& k = detail::table_for(Op::kGemm4bit, compute, "linear_4bit", xc);
  const Tensor packed = q.packed.to(dev).contiguous();
  BRAID_CHECK(packed.dtype() == DType::kU8 && packed.numel() == (out * in + 1) / 2,
              kInvalidArgument, "linear_4bit: packed data is ", packed.dtype(), " with ",
              packed.numel(), " bytes (expected u8 with ", (out * in + 1) / 2, ")");
  // The absmax in f32 (dequantized when nested: 4 bytes per block, 1 / 8 of the 4-bit size).
  const Tensor absmax = absmax_f32(s).to(dev);
  BRAID_CHECK(absmax.numel() == (out * in + s.blocksize - 1) / s.blocksize, kInvalidArgument,
              "linear_4bit: ", absmax.numel(), " absmax values for ", out * in,
              " elements in blocks of ", s.blocksize);
  const Tensor code = s.code.to(dev).to(DType::kF32).contiguous();
  BRAID_CHECK(code.numel() == 16, kInvalidArgument, "linear_4bit: quant_map has ", code.numel(),
              " entries (expected 16)");
  const int64_t m = xc.numel() / in;
  Shape yshape = x.shape();
  yshape.back() = out;
  Tensor y = Tensor::empty(yshape, compute, dev);
  k.gemm_4bit(kernels::stream_for(dev), code.data<float>(), packed.data<uint8_t>(),
              absmax.data<float>(), s.blocksize, m, out, in, xc.data_ptr(), compute, y.data_ptr(),
              compute);
  return y;
}

}  // namespace braid
