// The reducing collectives of the conformance grid: all_reduce, reduce and reduce_scatter with
// every op the dtype allows, in each placement the front offers (tensor calls, list and
// one-buffer forms, raw descriptors for out-of-place), and the ops a dtype does not allow,
// which must raise kNotSupported and leave the group usable.
#include "suite.h"

namespace braid::conformance::detail {
namespace {

CallOptions reduce_options(ReduceOp op, int rank) {
  CallOptions o;
  o.op = op;
  o.premul_factor = premul_factor(rank);
  return o;
}

CollectiveDesc raw_desc(CollectiveKind kind, DType dtype, int64_t count, const void* send,
                        void* recv, ReduceOp op, int rank) {
  CollectiveDesc d;
  d.kind = kind;
  d.dtype = dtype;
  d.count = count;
  d.send = send;
  d.recv = recv;
  d.op = op;
  d.premul_factor = premul_factor(rank);
  return d;
}

Values values_for(ReduceOp op) {
  return op == ReduceOp::kProd ? Values::kProduct : Values::kGeneral;
}

}  // namespace

void GroupRun::all_reduce(DType dtype, int64_t count) {
  for (ReduceOp op : ops(dtype, count)) {
    const Source s = source(dtype, values_for(op));
    const Bytes want = reduce_reference(s, op, 0, count);
    Case c{"all_reduce", "tensor, in-place", dtype, count, op};
    Tensor t = input_tensor(s, me_, 0, {count});
    call(c, [&] { pg_.all_reduce(t, reduce_options(op, me_)); });
    expect(c, t.data_ptr(), want);
    if (large(count)) continue;  // one placement at large counts

    c.form = "raw, out-of-place";
    Tensor in = input_tensor(s, me_, 0, {count});
    Tensor out = sentinel_tensor(dtype, {count});
    call(c, [&] {
      pg_.run(raw_desc(CollectiveKind::kAllReduce, dtype, count, in.data_ptr(), out.data_ptr(), op,
                       me_));
    });
    expect(c, out.data_ptr(), want);
    expect_unchanged(c, in.data_ptr(), s, 0, count);
  }
}

void GroupRun::reduce(DType dtype, int64_t count) {
  const std::vector<int> all_roots = roots(count);
  for (int root : all_roots) {
    // Every op from the last root; sum from the others.
    const std::vector<ReduceOp> root_ops =
        root == all_roots.back() ? ops(dtype, count) : std::vector<ReduceOp>{ReduceOp::kSum};
    for (ReduceOp op : root_ops) {
      const Source s = source(dtype, values_for(op));
      const Bytes want = me_ == root ? reduce_reference(s, op, 0, count) : Bytes{};
      Case c{"reduce", "tensor, in-place", dtype, count, op, root};
      Tensor t = input_tensor(s, me_, 0, {count});
      call(c, [&] { pg_.reduce(t, root, reduce_options(op, me_)); });
      if (me_ == root) expect(c, t.data_ptr(), want);
      if (large(count)) continue;

      // Only the root names a recv buffer: the others pass null, as the descriptor allows.
      c.form = "raw, out-of-place";
      Tensor in = input_tensor(s, me_, 0, {count});
      Tensor out = sentinel_tensor(dtype, {count});
      CollectiveDesc d = raw_desc(CollectiveKind::kReduce, dtype, count, in.data_ptr(),
                                  me_ == root ? out.data_ptr() : nullptr, op, me_);
      d.root = root;
      call(c, [&] { pg_.run(d); });
      if (me_ == root) expect(c, out.data_ptr(), want);
      expect_unchanged(c, in.data_ptr(), s, 0, count);
    }
  }
}

void GroupRun::reduce_scatter(DType dtype, int64_t count) {
  for (ReduceOp op : ops(dtype, count)) {
    const Source s = source(dtype, values_for(op));
    const Bytes want = reduce_reference(s, op, me_ * count, count);
    const CallOptions o = reduce_options(op, me_);

    Case c{"reduce_scatter", "one buffer [size, count], out-of-place", dtype, count, op};
    Tensor in = input_tensor(s, me_, 0, {n_, count});
    Tensor out = sentinel_tensor(dtype, {count});
    call(c, [&] { pg_.reduce_scatter_from(out, in, o); });
    expect(c, out.data_ptr(), want);
    expect_unchanged(c, in.data_ptr(), s, 0, n_ * count);
    if (large(count)) continue;

    c.form = "list, async";
    std::vector<Tensor> inputs;
    for (int r = 0; r < n_; ++r) inputs.push_back(input_tensor(s, me_, r * count, {count}));
    Tensor out2 = sentinel_tensor(dtype, {count});
    call(c, [&] {
      CallOptions async = o;
      async.async = AsyncOp::kYes;
      pg_.reduce_scatter(out2, inputs, async)->wait();
    });
    expect(c, out2.data_ptr(), want);

    c.form = "one buffer, in-place (output is this rank's block of the input)";
    Tensor buf = input_tensor(s, me_, 0, {n_ * count});
    Tensor block = buf.narrow(0, me_ * count, count);
    call(c, [&] { pg_.reduce_scatter_from(block, buf, o); });
    expect(c, block.data_ptr(), want);
  }
}

void GroupRun::unsupported_ops(DType dtype) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                      ReduceOp::kAvg, ReduceOp::kPremulSum}) {
    if (op_allowed(op, dtype)) continue;
    const Source s = source(dtype);
    const CallOptions o = reduce_options(op, me_);
    const std::string names(reduce_op_name(op));
    Case c{"all_reduce", "op the dtype does not allow", dtype, 3, op};
    Tensor t = input_tensor(s, me_, 0, {3});
    expect_error(c, ErrorKind::kNotSupported, names, [&] { pg_.all_reduce(t, o); });
    c.collective = "reduce";
    c.root = n_ - 1;
    expect_error(c, ErrorKind::kNotSupported, names, [&] { pg_.reduce(t, n_ - 1, o); });
    c.collective = "reduce_scatter";
    c.root = -1;
    Tensor in = input_tensor(s, me_, 0, {n_ * 3});
    Tensor out = sentinel_tensor(dtype, {3});
    expect_error(c, ErrorKind::kNotSupported, names, [&] { pg_.reduce_scatter_from(out, in, o); });
  }
  // The group is still usable: a sum right after gives the reference.
  const Source s = source(dtype);
  Case c{"all_reduce", "sum after a refused op", dtype, 3, ReduceOp::kSum};
  Tensor t = input_tensor(s, me_, 0, {3});
  call(c, [&] { pg_.all_reduce(t); });
  expect(c, t.data_ptr(), reduce_reference(s, ReduceOp::kSum, 0, 3));
}

}  // namespace braid::conformance::detail
