// The public collectives of ProcessGroup: each checks its arguments (docs/comm.md, "Argument
// checks"), packs one CollectiveDesc and hands it to Impl::submit. List forms stage through one
// contiguous buffer, because a backend sees a single buffer per side.
#include <numeric>
#include <sstream>

#include "braid/core/error.h"
#include "process_group_impl.h"

namespace braid {
namespace {

using Kind = CollectiveKind;

// A tensor the backend reads or writes through its pointer.
void check_buffer(const Tensor& t, std::string_view op, std::string_view name) {
  BRAID_CHECK(t.defined(), kInvalidArgument, op, ": ", name, " is an undefined tensor");
  BRAID_CHECK(t.is_contiguous(), kInvalidArgument, op, ": ", name, " (shape ", shape_str(t.shape()),
              ") must be contiguous; call .contiguous() first");
}

// `t` must match `ref` in dtype, device and (unless shape is false) shape.
void check_like(const Tensor& t, const Tensor& ref, std::string_view op, std::string_view name,
                std::string_view ref_name, bool shape = true) {
  BRAID_CHECK(t.defined(), kInvalidArgument, op, ": ", name, " is an undefined tensor");
  BRAID_CHECK(t.dtype() == ref.dtype(), kInvalidArgument, op, ": ", name, " has dtype ",
              dtype_name(t.dtype()), ", expected ", dtype_name(ref.dtype()), " like ", ref_name);
  BRAID_CHECK(t.device() == ref.device(), kInvalidArgument, op, ": ", name, " is on ",
              t.device().str(), ", expected ", ref.device().str(), " like ", ref_name);
  BRAID_CHECK(!shape || t.shape() == ref.shape(), kInvalidArgument, op, ": ", name, " has shape ",
              shape_str(t.shape()), ", expected ", shape_str(ref.shape()), " like ", ref_name);
}

void check_rank_arg(int value, int size, std::string_view op, std::string_view name) {
  BRAID_CHECK(value >= 0 && value < size, kOutOfRange, op, ": ", name, " ", value,
              " is outside the group's ranks [0, ", size, ")");
}

void check_list_size(size_t n, int size, std::string_view op, std::string_view name) {
  BRAID_CHECK(n == static_cast<size_t>(size), kInvalidArgument, op, ": ", name, " holds ", n,
              " tensors, expected one per rank: ", size);
}

// `big` must hold size() blocks shaped like `block`: [size, *block] or, for block.dim() >= 1,
// [size * block[0], *block[1:]].
void check_blocks(const Tensor& big, const Tensor& block, int size, std::string_view op,
                  std::string_view big_name, std::string_view block_name) {
  Shape stacked = {size};
  stacked.insert(stacked.end(), block.shape().begin(), block.shape().end());
  Shape concatenated = block.shape();
  if (!concatenated.empty()) concatenated[0] *= size;
  const bool ok = big.shape() == stacked || (block.dim() >= 1 && big.shape() == concatenated);
  BRAID_CHECK(ok, kInvalidArgument, op, ": ", big_name, " has shape ", shape_str(big.shape()),
              ", expected ", size, " x ", block_name, " ", shape_str(block.shape()), ": ",
              shape_str(stacked),
              block.dim() >= 1 ? " or " + shape_str(concatenated) : std::string());
}

CallRecord record(const CollectiveDesc& d, const Shape* shape, const Tensor* a = nullptr,
                  const Tensor* b = nullptr) {
  return {shape, d.kind != Kind::kSend && d.kind != Kind::kRecv, {a, b}};
}

CollectiveDesc desc_for(Kind kind, const Tensor& t, const CallOptions& o) {
  CollectiveDesc d;
  d.kind = kind;
  d.dtype = t.dtype();
  d.device = t.device();
  d.op = o.op;
  d.premul_factor = o.premul_factor;
  d.stream = o.stream;
  return d;
}

// A contiguous 1-d staging buffer of `blocks` blocks shaped like `like`.
Tensor staging_for(const Tensor& like, int blocks) {
  return Tensor::empty({blocks * like.numel()}, like.dtype(), like.device());
}

Tensor block_of(const Tensor& staging, int r, const Tensor& like) {
  return staging.narrow(0, r * like.numel(), like.numel()).view(like.shape());
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::all_reduce(Tensor& tensor, const CallOptions& o) {
  constexpr std::string_view op = "all_reduce";
  impl_->require_member(op);
  check_buffer(tensor, op, "tensor");
  CollectiveDesc d = desc_for(Kind::kAllReduce, tensor, o);
  d.send = d.recv = tensor.data_ptr();
  d.count = tensor.numel();
  return impl_->submit(d, o, record(d, &tensor.shape(), &tensor));
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor& tensor, int root, const CallOptions& o) {
  constexpr std::string_view op = "broadcast";
  impl_->require_member(op);
  check_buffer(tensor, op, "tensor");
  check_rank_arg(root, size(), op, "root");
  CollectiveDesc d = desc_for(Kind::kBroadcast, tensor, o);
  d.send = d.recv = tensor.data_ptr();
  d.count = tensor.numel();
  d.root = root;
  return impl_->submit(d, o, record(d, &tensor.shape(), &tensor));
}

std::shared_ptr<Work> ProcessGroup::reduce(Tensor& tensor, int root, const CallOptions& o) {
  constexpr std::string_view op = "reduce";
  impl_->require_member(op);
  check_buffer(tensor, op, "tensor");
  check_rank_arg(root, size(), op, "root");
  CollectiveDesc d = desc_for(Kind::kReduce, tensor, o);
  d.send = d.recv = tensor.data_ptr();
  d.count = tensor.numel();
  d.root = root;
  return impl_->submit(d, o, record(d, &tensor.shape(), &tensor));
}

std::shared_ptr<Work> ProcessGroup::all_gather(std::vector<Tensor>& outputs, const Tensor& input,
                                               const CallOptions& o) {
  constexpr std::string_view op = "all_gather";
  impl_->require_member(op);
  check_buffer(input, op, "input");
  check_list_size(outputs.size(), size(), op, "outputs");
  for (size_t r = 0; r < outputs.size(); ++r) {
    check_like(outputs[r], input, op, "outputs[" + std::to_string(r) + "]", "input");
  }
  Tensor staging = staging_for(input, size());
  CollectiveDesc d = desc_for(Kind::kAllGather, input, o);
  d.send = input.data_ptr();
  d.recv = staging.data_ptr();
  d.count = input.numel();
  auto copy_out = [outputs, staging, input] {
    for (size_t r = 0; r < outputs.size(); ++r) {
      Tensor out = outputs[r];
      out.copy_(block_of(staging, static_cast<int>(r), input));
    }
  };
  return impl_->submit(d, o, record(d, &input.shape(), &input), copy_out);
}

std::shared_ptr<Work> ProcessGroup::all_gather_into(Tensor& output, const Tensor& input,
                                                    const CallOptions& o) {
  constexpr std::string_view op = "all_gather_into";
  impl_->require_member(op);
  check_buffer(input, op, "input");
  check_buffer(output, op, "output");
  check_like(output, input, op, "output", "input", /*shape=*/false);
  check_blocks(output, input, size(), op, "output", "input");
  CollectiveDesc d = desc_for(Kind::kAllGather, input, o);
  d.send = input.data_ptr();
  d.recv = output.data_ptr();
  d.count = input.numel();
  return impl_->submit(d, o, record(d, &input.shape(), &input, &output));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor& output,
                                                   const std::vector<Tensor>& inputs,
                                                   const CallOptions& o) {
  constexpr std::string_view op = "reduce_scatter";
  impl_->require_member(op);
  check_buffer(output, op, "output");
  check_list_size(inputs.size(), size(), op, "inputs");
  for (size_t r = 0; r < inputs.size(); ++r) {
    check_like(inputs[r], output, op, "inputs[" + std::to_string(r) + "]", "output");
  }
  Tensor staging = staging_for(output, size());
  for (int r = 0; r < size(); ++r) block_of(staging, r, output).copy_(inputs[r]);
  CollectiveDesc d = desc_for(Kind::kReduceScatter, output, o);
  d.send = staging.data_ptr();
  d.recv = output.data_ptr();
  d.count = output.numel();
  auto keep_alive = [staging] {};
  return impl_->submit(d, o, record(d, &output.shape(), &output), keep_alive);
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_from(Tensor& output, const Tensor& input,
                                                        const CallOptions& o) {
  constexpr std::string_view op = "reduce_scatter_from";
  impl_->require_member(op);
  check_buffer(input, op, "input");
  check_buffer(output, op, "output");
  check_like(input, output, op, "input", "output", /*shape=*/false);
  check_blocks(input, output, size(), op, "input", "output");
  CollectiveDesc d = desc_for(Kind::kReduceScatter, output, o);
  d.send = input.data_ptr();
  d.recv = output.data_ptr();
  d.count = output.numel();
  return impl_->submit(d, o, record(d, &output.shape(), &input, &output));
}

std::shared_ptr<Work> ProcessGroup::all_to_all(Tensor& output, const Tensor& input,
                                               const CallOptions& o) {
  constexpr std::string_view op = "all_to_all";
  impl_->require_member(op);
  check_buffer(input, op, "input");
  check_buffer(output, op, "output");
  check_like(output, input, op, "output", "input", /*shape=*/false);
  BRAID_CHECK(output.numel() == input.numel(), kInvalidArgument, op, ": output has ",
              output.numel(), " elements, expected ", input.numel(), " like input");
  BRAID_CHECK(input.numel() % size() == 0, kInvalidArgument, op, ": input's ", input.numel(),
              " elements do not split into ", size(), " equal parts");
  CollectiveDesc d = desc_for(Kind::kAllToAll, input, o);
  d.send = input.data_ptr();
  d.recv = output.data_ptr();
  d.count = input.numel() / size();
  return impl_->submit(d, o, record(d, &input.shape(), &input, &output));
}

namespace {

// Rows per rank along dimension 0: `splits`, or equal splits when empty.
std::vector<int64_t> resolve_splits(const std::vector<int64_t>& splits, const Tensor& t, int size,
                                    std::string_view op, std::string_view name) {
  const int64_t rows = t.size(0);
  if (splits.empty()) {
    BRAID_CHECK(rows % size == 0, kInvalidArgument, op, ": ", name, " is empty, so dimension 0 (",
                rows, " rows) must split equally into ", size, " ranks");
    return std::vector<int64_t>(size, rows / size);
  }
  check_list_size(splits.size(), size, op, name);
  for (size_t r = 0; r < splits.size(); ++r) {
    BRAID_CHECK(splits[r] >= 0, kInvalidArgument, op, ": ", name, "[", r, "] = ", splits[r],
                " is negative");
  }
  const int64_t total = std::accumulate(splits.begin(), splits.end(), int64_t{0});
  BRAID_CHECK(total == rows, kInvalidArgument, op, ": ", name, " sum to ", total,
              " rows, expected dimension 0 of the tensor: ", rows);
  return splits;
}

void counts_and_offsets(const std::vector<int64_t>& splits, int64_t row,
                        std::vector<int64_t>& counts, std::vector<int64_t>& offsets) {
  int64_t offset = 0;
  for (int64_t s : splits) {
    counts.push_back(s * row);
    offsets.push_back(offset);
    offset += s * row;
  }
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::all_to_all(Tensor& output, const Tensor& input,
                                               const std::vector<int64_t>& output_splits,
                                               const std::vector<int64_t>& input_splits,
                                               const CallOptions& o) {
  constexpr std::string_view op = "all_to_all (splits)";
  impl_->require_member(op);
  check_buffer(input, op, "input");
  check_buffer(output, op, "output");
  check_like(output, input, op, "output", "input", /*shape=*/false);
  BRAID_CHECK(input.dim() >= 1 && output.dim() >= 1, kInvalidArgument, op,
              ": input and output need a dimension 0 to split, got shapes ",
              shape_str(input.shape()), " and ", shape_str(output.shape()));
  const Shape in_rest(input.shape().begin() + 1, input.shape().end());
  const Shape out_rest(output.shape().begin() + 1, output.shape().end());
  BRAID_CHECK(in_rest == out_rest, kInvalidArgument, op, ": output shape ",
              shape_str(output.shape()), " and input shape ", shape_str(input.shape()),
              " must agree beyond dimension 0");
  auto in_splits = resolve_splits(input_splits, input, size(), op, "input_splits");
  auto out_splits = resolve_splits(output_splits, output, size(), op, "output_splits");
  const int64_t row = shape_numel(in_rest);
  CollectiveDesc d = desc_for(Kind::kAllToAllV, input, o);
  d.send = input.data_ptr();
  d.recv = output.data_ptr();
  d.count = row;  // the same on every rank, unlike the splits
  counts_and_offsets(in_splits, row, d.send_counts, d.send_offsets);
  counts_and_offsets(out_splits, row, d.recv_counts, d.recv_offsets);
  return impl_->submit(d, o, record(d, &in_rest, &input, &output));
}

std::shared_ptr<Work> ProcessGroup::gather(std::vector<Tensor>& outputs, const Tensor& input,
                                           int root, const CallOptions& o) {
  constexpr std::string_view op = "gather";
  impl_->require_member(op);
  check_buffer(input, op, "input");
  check_rank_arg(root, size(), op, "root");
  CollectiveDesc d = desc_for(Kind::kGather, input, o);
  d.send = input.data_ptr();
  d.count = input.numel();
  d.root = root;
  if (rank() != root) return impl_->submit(d, o, record(d, &input.shape(), &input));
  check_list_size(outputs.size(), size(), op, "outputs (on the root)");
  for (size_t r = 0; r < outputs.size(); ++r) {
    check_like(outputs[r], input, op, "outputs[" + std::to_string(r) + "]", "input");
  }
  Tensor staging = staging_for(input, size());
  d.recv = staging.data_ptr();
  auto copy_out = [outputs, staging, input] {
    for (size_t r = 0; r < outputs.size(); ++r) {
      Tensor out = outputs[r];
      out.copy_(block_of(staging, static_cast<int>(r), input));
    }
  };
  return impl_->submit(d, o, record(d, &input.shape(), &input), copy_out);
}

std::shared_ptr<Work> ProcessGroup::scatter(Tensor& output, const std::vector<Tensor>& inputs,
                                            int root, const CallOptions& o) {
  constexpr std::string_view op = "scatter";
  impl_->require_member(op);
  check_buffer(output, op, "output");
  check_rank_arg(root, size(), op, "root");
  CollectiveDesc d = desc_for(Kind::kScatter, output, o);
  d.recv = output.data_ptr();
  d.count = output.numel();
  d.root = root;
  if (rank() != root) return impl_->submit(d, o, record(d, &output.shape(), &output));
  check_list_size(inputs.size(), size(), op, "inputs (on the root)");
  for (size_t r = 0; r < inputs.size(); ++r) {
    check_like(inputs[r], output, op, "inputs[" + std::to_string(r) + "]", "output");
  }
  Tensor staging = staging_for(output, size());
  for (int r = 0; r < size(); ++r) block_of(staging, r, output).copy_(inputs[r]);
  d.send = staging.data_ptr();
  auto keep_alive = [staging] {};
  return impl_->submit(d, o, record(d, &output.shape(), &output), keep_alive);
}

std::shared_ptr<Work> ProcessGroup::barrier(const CallOptions& o) {
  impl_->require_member("barrier");
  CollectiveDesc d;
  d.kind = Kind::kBarrier;
  d.dtype = DType::kU8;
  d.stream = o.stream;
  return impl_->submit(d, o, record(d, nullptr));
}

std::shared_ptr<Work> ProcessGroup::send(const Tensor& tensor, int peer, int64_t tag,
                                         const CallOptions& o) {
  constexpr std::string_view op = "send";
  impl_->require_member(op);
  check_buffer(tensor, op, "tensor");
  check_rank_arg(peer, size(), op, "peer");
  BRAID_CHECK(peer != rank(), kInvalidArgument, op, ": peer ", peer, " is this rank itself");
  CollectiveDesc d = desc_for(Kind::kSend, tensor, o);
  d.send = tensor.data_ptr();
  d.count = tensor.numel();
  d.peer = peer;
  d.tag = tag;
  return impl_->submit(d, o, record(d, &tensor.shape(), &tensor));
}

std::shared_ptr<Work> ProcessGroup::recv(Tensor& tensor, int peer, int64_t tag,
                                         const CallOptions& o) {
  constexpr std::string_view op = "recv";
  impl_->require_member(op);
  check_buffer(tensor, op, "tensor");
  check_rank_arg(peer, size(), op, "peer");
  BRAID_CHECK(peer != rank(), kInvalidArgument, op, ": peer ", peer, " is this rank itself");
  CollectiveDesc d = desc_for(Kind::kRecv, tensor, o);
  d.recv = tensor.data_ptr();
  d.count = tensor.numel();
  d.peer = peer;
  d.tag = tag;
  return impl_->submit(d, o, record(d, &tensor.shape(), &tensor));
}

namespace {

bool needs_send(const CollectiveDesc& d, int rank) {
  switch (d.kind) {
    case Kind::kBroadcast:
    case Kind::kScatter:
      return rank == d.root;
    case Kind::kRecv:
    case Kind::kBarrier:
      return false;
    default:
      return true;
  }
}

bool needs_recv(const CollectiveDesc& d, int rank) {
  switch (d.kind) {
    case Kind::kReduce:
    case Kind::kGather:
      return rank == d.root;
    case Kind::kSend:
    case Kind::kBarrier:
      return false;
    default:
      return true;
  }
}

void check_v_vector(const std::vector<int64_t>& v, int size, std::string_view name) {
  check_list_size(v.size(), size, "run(all_to_all_v)", name);
  for (size_t r = 0; r < v.size(); ++r) {
    BRAID_CHECK(v[r] >= 0, kInvalidArgument, "run(all_to_all_v): ", name, "[", r, "] = ", v[r],
                " is negative");
  }
}

}  // namespace

std::string call_text(const CollectiveDesc& d, const CallRecord& rec) {
  std::ostringstream out;
  out << collective_name(d.kind);
  if (d.kind != Kind::kBarrier) out << " dtype=" << dtype_name(d.dtype) << " count=" << d.count;
  if (is_reduction(d.kind)) {
    out << " op=" << reduce_op_name(d.op);
    if (d.op == ReduceOp::kPremulSum) out << '(' << d.premul_factor << ')';
  }
  if (is_rooted(d.kind)) out << " root=" << d.root;
  if (rec.shape) out << " shape=" << shape_str(*rec.shape);
  return out.str();
}

std::shared_ptr<Work> ProcessGroup::run(CollectiveDesc desc, const CallOptions& o) {
  // "run(all_reduce)": built by the checks' messages only, a string per call would cost more
  // than a small collective.
  struct OpName {
    Kind kind;
    operator std::string() const { return "run(" + std::string(collective_name(kind)) + ")"; }
  } op{desc.kind};
  if (!impl_->member()) impl_->require_member(std::string(op));
  BRAID_CHECK(desc.count >= 0, kInvalidArgument, std::string(op), ": count ", desc.count,
              " is negative (counts are elements)");
  auto in_group = [&](int r) { return r >= 0 && r < size(); };
  if (is_rooted(desc.kind) && !in_group(desc.root)) {
    check_rank_arg(desc.root, size(), std::string(op), "root");
  }
  if (desc.kind == Kind::kSend || desc.kind == Kind::kRecv) {
    if (!in_group(desc.peer)) check_rank_arg(desc.peer, size(), std::string(op), "peer");
    BRAID_CHECK(desc.peer != rank(), kInvalidArgument, std::string(op), ": peer ", desc.peer,
                " is this rank itself");
  }
  if (desc.kind == Kind::kAllToAllV) {
    check_v_vector(desc.send_counts, size(), "send_counts");
    check_v_vector(desc.send_offsets, size(), "send_offsets");
    check_v_vector(desc.recv_counts, size(), "recv_counts");
    check_v_vector(desc.recv_offsets, size(), "recv_offsets");
  }
  const bool has_data = desc.kind == Kind::kAllToAllV || desc.count > 0;
  if (has_data) {
    BRAID_CHECK(!needs_send(desc, rank()) || desc.send != nullptr, kInvalidArgument,
                std::string(op), ": send buffer is null with count ", desc.count);
    BRAID_CHECK(!needs_recv(desc, rank()) || desc.recv != nullptr, kInvalidArgument,
                std::string(op), ": recv buffer is null with count ", desc.count);
  }
  // Likewise the stream: the options' when they name one, else the descriptor's.
  if (o.stream.handle != nullptr) desc.stream = o.stream;
  const CallRecord rec = record(desc, nullptr);
  // A timeout already in the descriptor counts as the call's own unless the options give one
  // (the options are copied only then: a copy per call was measurable at 16 bytes).
  if (!o.timeout && desc.timeout.count() > 0) {
    CallOptions resolved = o;
    resolved.timeout = desc.timeout;
    return impl_->submit(desc, resolved, rec);
  }
  return impl_->submit(desc, o, rec);
}

}  // namespace braid
