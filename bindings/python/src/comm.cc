// braid.init, braid.ProcessGroup and braid.Work (docs/python.md, "Process groups"): the
// ProcessGroup front (braid/comm/process_group.h) on arrays lent through DLPack. Every
// collective runs with the GIL released (Note [GIL], module.h); with async_op=True it returns
// a Work that keeps the call's arrays alive until it is let go.
#include <pybind11/stl.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/comm/rank_info.h"
#include "braid/comm/shared_tensor.h"
#include "braid/comm/store.h"
#include "braid/core/error.h"
#include "module.h"

namespace braid::python {
namespace {

using Group = std::shared_ptr<ProcessGroup>;

// An async call's Work and the tensors it writes or reads: their producers (numpy arrays,
// torch tensors) stay alive while the Work object does.
struct PyWork {
  std::shared_ptr<Work> work;
  std::vector<Tensor> tensors;
};

CallOptions call_options(const std::optional<double>& timeout, bool async_op,
                         ReduceOp op = ReduceOp::kSum) {
  CallOptions o;
  o.op = op;
  o.timeout = timeout_arg(timeout);
  o.async = async_op ? AsyncOp::kYes : AsyncOp::kNo;
  return o;
}

// Runs `call` (which returns the call's Work) with the GIL released; None for a blocking call,
// else a braid.Work holding `tensors`.
template <typename Call>
py::object run(std::vector<Tensor> tensors, bool async_op, Call&& call) {
  std::shared_ptr<Work> work;
  {
    py::gil_scoped_release unlocked;
    work = call();
  }
  if (!async_op) return py::none();
  return py::cast(PyWork{std::move(work), std::move(tensors)});
}

// Outside any launcher (no rank variables, no MASTER_PORT) braid.init() makes a group of
// one rank on an in-memory store, so a script runs unchanged without `braid launch`.
bool single_process_environment() {
  return detect_rank_info().source == "single process" && std::getenv("MASTER_PORT") == nullptr;
}

// Note [One world group]: the job's store holds one world group (its rendezvous keys), so a
// second ProcessGroup::create from the environment would meet nobody. braid.init() therefore
// returns the world group this process already has, and refuses to make a new one once that
// was let go. Read and written with the GIL held.
struct World {
  std::weak_ptr<ProcessGroup> group;
  bool made_from_env = false;
  std::string backend;
  std::optional<std::chrono::milliseconds> timeout;
};
World g_world;

std::string timeout_str(const std::optional<std::chrono::milliseconds>& t) {
  if (!t) return "None";
  std::ostringstream out;
  out << static_cast<double>(t->count()) / 1000.0 << " s";
  return out.str();
}

Group init(const std::string& backend, const std::optional<double>& timeout) {
  const std::optional<std::chrono::milliseconds> t = timeout_arg(timeout);
  if (Group alive = g_world.group.lock()) {
    BRAID_CHECK(backend == g_world.backend && t == g_world.timeout, kInvalidArgument,
                "braid.init: this process's world group exists (backend='", g_world.backend,
                "', timeout=", timeout_str(g_world.timeout), "); called again with backend='",
                backend, "', timeout=", timeout_str(t),
                ": pass the same arguments to get it, or let it go first");
    return alive;
  }
  const bool single = single_process_environment();
  BRAID_CHECK(single || !g_world.made_from_env, kInvalidArgument,
              "braid.init: this process made the job's world group and let it go; the job's "
              "store holds one world group, so another cannot be made (keep the first)");
  ProcessGroupOptions o;
  o.backend = backend;
  o.timeout = t;
  if (single) {
    o.store = std::make_shared<InMemoryStore>();
    o.rank = 0;
    o.size = 1;
  }
  Group pg;
  {
    py::gil_scoped_release unlocked;
    pg = ProcessGroup::create(o);
  }
  pg = release_without_gil(std::move(pg));
  g_world = World{pg, !single, backend, t};
  return pg;
}

std::vector<int64_t> splits_arg(const std::optional<std::vector<int64_t>>& s) {
  return s ? *s : std::vector<int64_t>{};
}

}  // namespace

void register_comm(py::module_& m) {
  py::class_<PyWork>(m, "Work", "An async collective: wait() for it, or poll is_completed().")
      .def(
          "wait",
          [](PyWork& w, const std::optional<double>& timeout) {
            const auto t = timeout_arg(timeout).value_or(std::chrono::milliseconds(0));
            py::gil_scoped_release unlocked;
            return w.work->wait(t);
          },
          py::arg("timeout") = py::none(),
          "Blocks until the call finished: True, or the call's error raised. With a timeout "
          "(seconds), False when it passed first; the call's own deadline always applies.")
      .def(
          "is_completed", [](PyWork& w) { return w.work->test(); },
          "True once the call finished (successfully or not); never blocks.");

  py::class_<ProcessGroup, Group> pg(m, "ProcessGroup", R"(A group of ranks (braid.init()).

Collectives take any DLPack array (numpy arrays, torch CPU tensors, braid.Tensor, capsules
from torch.utils.dlpack.to_dlpack) and work in place on its memory: no copy in or out.
Arrays must be contiguous. Every call takes timeout= (seconds; default: the group's) and
async_op= (True: returns a braid.Work; the arrays stay alive until it is let go).)");
  pg.def_property_readonly("rank", &ProcessGroup::rank)
      .def_property_readonly("size", &ProcessGroup::size)
      .def_property_readonly("backend",
                             [](const ProcessGroup& g) { return std::string(g.backend().name()); })
      .def_property_readonly("global_ranks", &ProcessGroup::global_ranks,
                             "The world rank of each rank of this group.")
      .def_property_readonly(
          "timeout",
          [](const ProcessGroup& g) { return std::chrono::duration<double>(g.timeout()).count(); },
          "The group's default timeout, seconds.")
      .def(
          "new_group",
          [](ProcessGroup& g, std::vector<int> ranks, const std::string& backend) {
            Group sub;
            {
              py::gil_scoped_release unlocked;
              sub = g.new_group(std::move(ranks), backend);
            }
            return release_without_gil(std::move(sub));
          },
          py::arg("ranks"), py::arg("backend") = "",
          "A subgroup; every rank of this group calls it with the same ranks. Ranks outside "
          "get a group with rank -1 on which collectives raise InvalidArgumentError.")
      .def(
          "empty_shared",
          [](const Group& g, const Shape& shape, std::string_view dtype) {
            py::gil_scoped_release unlocked;
            return empty_shared(g, shape, dtype_arg(dtype));
          },
          py::arg("shape"), py::arg("dtype") = "f32",
          "An uninitialized braid.Tensor in the backend's shared memory (shm): collectives on "
          "such tensors skip the staging copy. Elsewhere an ordinary tensor.");

  pg.def(
        "all_reduce",
        [](ProcessGroup& g, py::handle x, std::string_view op, std::optional<double> timeout,
           bool async_op) {
          Tensor t = tensor_from_object(x, "all_reduce: x", Access::kWrite);
          const CallOptions o = call_options(timeout, async_op, reduce_op_arg(op));
          return run({t}, async_op, [&] { return g.all_reduce(t, o); });
        },
        py::arg("x"), py::arg("op") = "sum", py::kw_only(), py::arg("timeout") = py::none(),
        py::arg("async_op") = false, "x = op over ranks of x, in place on every rank.")
      .def(
          "broadcast",
          [](ProcessGroup& g, py::handle x, int root, std::optional<double> timeout,
             bool async_op) {
            Tensor t = tensor_from_object(x, "broadcast: x", Access::kWrite);
            const CallOptions o = call_options(timeout, async_op);
            return run({t}, async_op, [&] { return g.broadcast(t, root, o); });
          },
          py::arg("x"), py::arg("root"), py::kw_only(), py::arg("timeout") = py::none(),
          py::arg("async_op") = false, "Root's x to every rank's x.")
      .def(
          "reduce",
          [](ProcessGroup& g, py::handle x, int root, std::string_view op,
             std::optional<double> timeout, bool async_op) {
            Tensor t = tensor_from_object(x, "reduce: x", Access::kWrite);
            const CallOptions o = call_options(timeout, async_op, reduce_op_arg(op));
            return run({t}, async_op, [&] { return g.reduce(t, root, o); });
          },
          py::arg("x"), py::arg("root"), py::arg("op") = "sum", py::kw_only(),
          py::arg("timeout") = py::none(), py::arg("async_op") = false,
          "The reduction lands in root's x; x on the other ranks is unspecified afterwards.")
      .def(
          "all_gather_into",
          [](ProcessGroup& g, py::handle out, py::handle x, std::optional<double> timeout,
             bool async_op) {
            Tensor o_t = tensor_from_object(out, "all_gather_into: out", Access::kWrite);
            Tensor x_t = tensor_from_object(x, "all_gather_into: x", Access::kRead);
            const CallOptions o = call_options(timeout, async_op);
            return run({o_t, x_t}, async_op, [&] { return g.all_gather_into(o_t, x_t, o); });
          },
          py::arg("out"), py::arg("x"), py::kw_only(), py::arg("timeout") = py::none(),
          py::arg("async_op") = false,
          "out holds size blocks shaped like x, rank r's at block r: shape [size, *x.shape] "
          "or [size * x.shape[0], *x.shape[1:]].")
      .def(
          "reduce_scatter_from",
          [](ProcessGroup& g, py::handle out, py::handle x, std::string_view op,
             std::optional<double> timeout, bool async_op) {
            Tensor o_t = tensor_from_object(out, "reduce_scatter_from: out", Access::kWrite);
            Tensor x_t = tensor_from_object(x, "reduce_scatter_from: x", Access::kRead);
            const CallOptions o = call_options(timeout, async_op, reduce_op_arg(op));
            return run({o_t, x_t}, async_op, [&] { return g.reduce_scatter_from(o_t, x_t, o); });
          },
          py::arg("out"), py::arg("x"), py::arg("op") = "sum", py::kw_only(),
          py::arg("timeout") = py::none(), py::arg("async_op") = false,
          "x holds size blocks shaped like out; out = op over ranks of their block `rank`.")
      .def(
          "all_to_all",
          [](ProcessGroup& g, py::handle out, py::handle x,
             std::optional<std::vector<int64_t>> output_splits,
             std::optional<std::vector<int64_t>> input_splits, std::optional<double> timeout,
             bool async_op) {
            Tensor o_t = tensor_from_object(out, "all_to_all: out", Access::kWrite);
            Tensor x_t = tensor_from_object(x, "all_to_all: x", Access::kRead);
            const CallOptions o = call_options(timeout, async_op);
            if (!output_splits && !input_splits) {
              return run({o_t, x_t}, async_op, [&] { return g.all_to_all(o_t, x_t, o); });
            }
            const auto os = splits_arg(output_splits), is = splits_arg(input_splits);
            return run({o_t, x_t}, async_op, [&] { return g.all_to_all(o_t, x_t, os, is, o); });
          },
          py::arg("out"), py::arg("x"), py::arg("output_splits") = py::none(),
          py::arg("input_splits") = py::none(), py::kw_only(), py::arg("timeout") = py::none(),
          py::arg("async_op") = false,
          "Block r of x goes to rank r; block r of out comes from rank r. Equal blocks, or rows "
          "of dimension 0 split as torch's all_to_all_single (output_splits, input_splits).")
      .def(
          "barrier",
          [](ProcessGroup& g, std::optional<double> timeout, bool async_op) {
            const CallOptions o = call_options(timeout, async_op);
            return run({}, async_op, [&] { return g.barrier(o); });
          },
          py::kw_only(), py::arg("timeout") = py::none(), py::arg("async_op") = false)
      .def(
          "send",
          [](ProcessGroup& g, py::handle x, int peer, int64_t tag, std::optional<double> timeout,
             bool async_op) {
            Tensor t = tensor_from_object(x, "send: x", Access::kRead);
            const CallOptions o = call_options(timeout, async_op);
            return run({t}, async_op, [&] { return g.send(t, peer, tag, o); });
          },
          py::arg("x"), py::arg("peer"), py::arg("tag") = 0, py::kw_only(),
          py::arg("timeout") = py::none(), py::arg("async_op") = false,
          "Sends x to peer; matches the recv of the same peer pair and tag, in order.")
      .def(
          "recv",
          [](ProcessGroup& g, py::handle x, int peer, int64_t tag, std::optional<double> timeout,
             bool async_op) {
            Tensor t = tensor_from_object(x, "recv: x", Access::kWrite);
            const CallOptions o = call_options(timeout, async_op);
            return run({t}, async_op, [&] { return g.recv(t, peer, tag, o); });
          },
          py::arg("x"), py::arg("peer"), py::arg("tag") = 0, py::kw_only(),
          py::arg("timeout") = py::none(), py::arg("async_op") = false,
          "Receives into x from peer.");

  m.def("init", &init, py::arg("backend") = "auto", py::arg("timeout") = py::none(),
        R"(The world group from the launcher's environment (collective over the job).

Ranks from braid launch / torchrun variables (RANK, WORLD_SIZE, ...), mpirun, PMI launchers or
Slurm; braid's store from MASTER_ADDR, MASTER_PORT and BRAID_STORE_TOKEN, which braid launch
sets (docs/launch.md, docs/store.md). Outside any launcher the group has one rank. Called
again with the same arguments it returns the same group. backend: "auto" (shm on one node),
or a name ("shm", "ucx", "mpi", "hier", "nccl"). timeout: seconds for every call without its
own (default BRAID_TIMEOUT or 300).)");
}

}  // namespace braid::python
