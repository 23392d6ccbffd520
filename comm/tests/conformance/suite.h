// The conformance grid on one group (internal to comm/tests/conformance/). GroupRun holds the
// group, the selected dtypes and counts, and the helpers every collective's cases share:
// fresh inputs per case, the exact comparison, and the handling of calls that throw. The
// cases themselves live in reducing.cc (all_reduce, reduce, reduce_scatter, unsupported ops)
// and moving.cc (everything that moves data without reducing it).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/core/error.h"
#include "conformance.h"
#include "reference.h"

namespace braid::conformance::detail {

// Counts above this run a thinner grid (docs/comm.md, "Conformance suite"): on the world group
// only, in the dtypes of kLargeDtypes (all_reduce: every dtype), sum only, the last rank as the
// only root, one placement per collective.
inline constexpr int64_t kLargeCount = 65536;

// What one case is, for its failure line.
struct Case {
  Case(std::string_view collective, std::string form, DType dtype, int64_t count,
       std::optional<ReduceOp> op = std::nullopt, int root = -1)
      : collective(collective),
        form(std::move(form)),
        dtype(dtype),
        count(count),
        op(op),
        root(root) {}
  std::string_view collective;
  std::string form;  // "tensor, in-place", "list", "raw, out-of-place", ...
  DType dtype = DType::kF32;
  int64_t count = 0;
  std::optional<ReduceOp> op;
  int root = -1;
};

// Thrown after an unexpected error was recorded: this rank's run ends there.
struct Stop {};

class GroupRun {
 public:
  // `large_counts`: whether counts above kLargeCount run on this group (the world only).
  GroupRun(ProcessGroup& pg, std::string label, const Options& options, uint64_t salt,
           bool large_counts, std::vector<std::string>& failures);

  void run();  // the whole grid on this group

  // ---- shared by the cases ----
  int rank() const { return me_; }
  int size() const { return n_; }
  ProcessGroup& pg() { return pg_; }
  // A fresh input source for the next case (the same on every rank of the group).
  Source source(DType dtype, Values values = Values::kGeneral);
  bool large(int64_t count) const { return count > kLargeCount; }
  std::vector<int> roots(int64_t count) const;
  std::vector<ReduceOp> ops(DType dtype, int64_t count) const;  // allowed ones only
  bool supports(CollectiveKind kind) const;

  // Runs `call`; an exception is recorded as this case's failure and ends the run (Stop).
  void call(const Case& c, const std::function<void()>& call);
  // Runs `call`, which must throw `kind` with a message containing `names`.
  void expect_error(const Case& c, ErrorKind kind, std::string_view names,
                    const std::function<void()>& call);
  // Records a failure when `got` differs from `want` (want.size() / dtype size elements).
  void expect(const Case& c, const void* got, const Bytes& want, std::string_view where = {});
  // An out-of-place input must come back as it went in.
  void expect_unchanged(const Case& c, const void* input, const Source& s, int64_t begin,
                        int64_t count);
  void fail(const Case& c, const std::string& what);

  // ---- the cases (reducing.cc) ----
  void all_reduce(DType dtype, int64_t count);
  void reduce(DType dtype, int64_t count);
  void reduce_scatter(DType dtype, int64_t count);
  void unsupported_ops(DType dtype);
  // ---- (moving.cc) ----
  void broadcast(DType dtype, int64_t count);
  void all_gather(DType dtype, int64_t count);
  void all_to_all(DType dtype, int64_t count);
  void all_to_all_v(DType dtype, int64_t count);
  void gather(DType dtype, int64_t count);
  void scatter(DType dtype, int64_t count);
  void send_recv(DType dtype, int64_t count);
  void barrier();
  void async_queue();

 private:
  bool wants(std::string_view collective) const;
  bool selected(CollectiveKind kind, DType dtype, int64_t count) const;
  std::string describe(const Case& c) const;

  ProcessGroup& pg_;
  std::string label_;
  const Options& options_;
  std::vector<DType> dtypes_;
  uint64_t salt_;
  bool large_counts_;
  uint64_t cases_ = 0;
  int me_, n_;
  std::vector<std::string>& failures_;
};

// ---- tensors for the cases ----

// A 1-d (or `shape`) tensor holding elements [begin, begin + numel) of `rank`'s input.
Tensor input_tensor(const Source& s, int rank, int64_t begin, Shape shape);
// A tensor whose every byte is 0xA5, so an element the backend never wrote is caught.
Tensor sentinel_tensor(DType dtype, Shape shape);
// An element count as a call's byte offset.
inline size_t bytes_of(DType dtype, int64_t count) {
  return static_cast<size_t>(count) * dtype_size(dtype);
}

}  // namespace braid::conformance::detail
