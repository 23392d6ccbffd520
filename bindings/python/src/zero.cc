// braid.FlatParameters and braid.AdamW (docs/python.md, "ZeRO for torch and other
// frameworks"): shard::FlatParameters (braid/shard/flat_params.h) for a framework whose own
// autograd computes the gradients: braid keeps the f32 masters sharded over the ranks,
// gathers each unit's parameters for the framework to compute with (as braid.Tensor views
// the framework wraps through DLPack), reduces the gradients it is handed in a fixed order
// and steps AdamW on its shards. Collectives and the step run with the GIL released.
#include <pybind11/stl.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/error.h"
#include "braid/nn/optim.h"
#include "braid/shard/flat_params.h"
#include "module.h"

namespace braid::python {
namespace {

// FlatParameters plus the optimizer AdamW attached to it, whose state its checkpoints carry.
// The AdamW holds this state (it steps its shards); this holds the optimizer only weakly.
struct FlatState {
  std::unique_ptr<shard::FlatParameters> fp;
  std::weak_ptr<nn::AdamW> optimizer;

  shard::FlatParameters& get() {
    BRAID_ASSERT(fp != nullptr);
    return *fp;
  }
};
using Flat = std::shared_ptr<FlatState>;

struct PyAdamW {
  Flat flat;
  std::shared_ptr<nn::AdamW> opt;
};

std::string str_of(py::handle h) {
  return py::str(h).cast<std::string>();
}

// units: [(unit_name, [(param_name, array), ...]), ...]
std::vector<shard::FlatUnitSpec> unit_specs(const py::sequence& units) {
  std::vector<shard::FlatUnitSpec> specs;
  specs.reserve(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    py::sequence unit = units[u];
    BRAID_CHECK(unit.size() == 2, kInvalidArgument, "FlatParameters: units[", u, "] has ",
                unit.size(), " items; expected (unit_name, [(param_name, array), ...])");
    shard::FlatUnitSpec spec;
    spec.name = str_of(unit[0]);
    py::sequence params = unit[1];
    for (size_t i = 0; i < params.size(); ++i) {
      py::sequence p = params[i];
      BRAID_CHECK(p.size() == 2, kInvalidArgument, "FlatParameters: unit '", spec.name,
                  "' parameter ", i, " has ", p.size(), " items; expected (param_name, array)");
      const std::string name = str_of(p[0]);
      const std::string what = "FlatParameters: " + spec.name + "." + name;
      spec.params.push_back({name, tensor_from_object(p[1], what.c_str(), Access::kRead), {}});
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

size_t unit_index(FlatState& s, int64_t unit) {
  const size_t n = s.get().num_units();
  BRAID_CHECK(unit >= 0 && static_cast<size_t>(unit) < n, kOutOfRange, "FlatParameters: unit ",
              unit, " is outside [0, ", n, ")");
  return static_cast<size_t>(unit);
}

py::dict tensor_dict(NamedTensors tensors) {
  py::dict out;
  for (auto& [name, t] : tensors) out[py::str(name)] = py::cast(std::move(t));
  return out;
}

// Runs fn(fp) with the GIL released.
template <typename Fn>
auto unlocked(FlatState& s, Fn&& fn) {
  shard::FlatParameters& fp = s.get();
  py::gil_scoped_release release;
  return fn(fp);
}

Flat make_flat(const py::sequence& units, const std::shared_ptr<ProcessGroup>& pg, int stage,
               std::string_view param_dtype, std::string_view reduce_dtype,
               bool reshard_after_forward, std::optional<bool> overlap, bool sync_module_states) {
  BRAID_CHECK(pg != nullptr, kInvalidArgument, "FlatParameters: pg is None");
  shard::ShardingOptions o;
  o.stage = shard::zero_stage_from_int(stage);
  o.precision.param_dtype = dtype_arg(param_dtype);
  o.precision.reduce_dtype = dtype_arg(reduce_dtype);
  o.reshard_after_forward = reshard_after_forward;
  o.overlap = overlap;
  o.sync_module_states = sync_module_states;
  std::vector<shard::FlatUnitSpec> specs = unit_specs(units);
  auto state = std::make_shared<FlatState>();
  {
    py::gil_scoped_release release;
    state->fp = std::make_unique<shard::FlatParameters>(std::move(specs), pg, o);
  }
  return release_without_gil(std::move(state));
}

}  // namespace

void register_zero(py::module_& m) {
  py::class_<FlatState, Flat>(m, "FlatParameters", R"(ZeRO for a framework with its own autograd.

units: [(unit_name, [(param_name, array), ...]), ...], the same on every rank, each array
f32 (the initial values, copied; rank 0's go to every rank with sync_module_states). One
micro-batch: begin_forward(); per unit gather(u), compute with param(u, i), release(u);
end_forward(); begin_backward(); per unit in backward order gather(u), its gradients,
reduce_gradients(u, grads); end_backward(). Then finish_gradients(1 / global_micro_batches)
and AdamW.step(). Collective over pg: every rank makes the same calls.)")
      .def(py::init(&make_flat), py::arg("units"), py::arg("pg"), py::arg("stage") = 3,
           py::arg("param_dtype") = "f32", py::arg("reduce_dtype") = "f32",
           py::arg("reshard_after_forward") = true, py::arg("overlap") = py::none(),
           py::arg("sync_module_states") = true)
      .def_property_readonly("num_units", [](FlatState& s) { return s.get().num_units(); })
      .def("unit_name", [](FlatState& s, int64_t u) { return s.get().unit_name(unit_index(s, u)); })
      .def("num_params",
           [](FlatState& s, int64_t u) { return s.get().num_params(unit_index(s, u)); })
      .def("param_name", [](FlatState& s, int64_t u,
                            size_t i) { return s.get().param_name(unit_index(s, u), i); })
      .def("param_shape",
           [](FlatState& s, int64_t u, size_t i) {
             const Shape& shape = s.get().param_shape(unit_index(s, u), i);
             return py::tuple(py::cast(shape));
           })
      .def("begin_forward", [](FlatState& s) { s.get().begin_forward(); })
      .def("end_forward", [](FlatState& s) { s.get().end_forward(); })
      .def("begin_backward", [](FlatState& s) { s.get().begin_backward(); })
      .def("end_backward", [](FlatState& s) { s.get().end_backward(); })
      .def(
          "gather",
          [](FlatState& s, int64_t u) {
            const size_t unit = unit_index(s, u);
            unlocked(s, [&](shard::FlatParameters& fp) { fp.gather(unit); });
          },
          py::arg("unit"), "Makes the unit's full parameters available (stage 3: all_gather).")
      .def(
          "param",
          [](FlatState& s, int64_t u, size_t i) { return s.get().param(unit_index(s, u), i); },
          py::arg("unit"), py::arg("i"),
          "Parameter i of a gathered unit: a braid.Tensor (param_dtype) viewing braid's buffer; "
          "at stage 3 ask again after each gather.")
      .def(
          "release",
          [](FlatState& s, int64_t u) {
            const size_t unit = unit_index(s, u);
            unlocked(s, [&](shard::FlatParameters& fp) { fp.release(unit); });
          },
          py::arg("unit"), "Forward only: the unit may be freed (stage 3).")
      .def(
          "reduce_gradients",
          [](FlatState& s, int64_t u, const py::sequence& grads) {
            const size_t unit = unit_index(s, u);
            std::vector<Tensor> g;
            g.reserve(grads.size());
            for (size_t i = 0; i < grads.size(); ++i) {
              const std::string what = "reduce_gradients: grads[" + std::to_string(i) + "]";
              g.push_back(grads[i].is_none()
                              ? Tensor()
                              : tensor_from_object(grads[i], what.c_str(), Access::kRead));
            }
            unlocked(s, [&](shard::FlatParameters& fp) { fp.reduce_gradients(unit, g); });
          },
          py::arg("unit"), py::arg("grads"),
          "Backward only: this micro-batch's gradient of each of the unit's parameters, in "
          "order (f32 / bf16 / f16 arrays; None is zero), read before it returns.")
      .def(
          "finish_gradients",
          [](FlatState& s, double scale) {
            unlocked(s, [&](shard::FlatParameters& fp) { fp.sharded().finish_gradients(scale); });
          },
          py::arg("scale"), "Ends the step's accumulation: the reduced gradient times scale.")
      .def(
          "clip_grad_norm_",
          [](FlatState& s, double max_norm) {
            return unlocked(s, [&](shard::FlatParameters& fp) {
              return fp.sharded().clip_grad_norm_(max_norm);
            });
          },
          py::arg("max_norm"), "Clips the global gradient 2-norm; returns it before clipping.")
      .def(
          "set_gradient_sync",
          [](FlatState& s, bool sync) { s.get().sharded().set_gradient_sync(sync); },
          py::arg("sync"), "no_sync: False keeps gradients local until the next synced backward.")
      .def(
          "full_state_dict",
          [](FlatState& s) {
            return tensor_dict(unlocked(
                s, [](shard::FlatParameters& fp) { return fp.sharded().full_state_dict(); }));
          },
          "Every parameter whole, {'<unit>.<param>': braid.Tensor} (collective at stage 3).")
      .def(
          "save_checkpoint",
          [](FlatState& s, const std::string& folder) {
            std::shared_ptr<nn::AdamW> opt = s.optimizer.lock();
            unlocked(s, [&](shard::FlatParameters& fp) {
              fp.sharded().save_checkpoint(folder, opt.get());
            });
          },
          py::arg("folder"),
          "Sharded checkpoint of the parameters and the attached AdamW's state (collective; "
          "loads at any world size and stage).")
      .def(
          "load_checkpoint",
          [](FlatState& s, const std::string& folder) {
            std::shared_ptr<nn::AdamW> opt = s.optimizer.lock();
            unlocked(s, [&](shard::FlatParameters& fp) {
              fp.sharded().load_checkpoint(folder, opt.get());
            });
          },
          py::arg("folder"), "Loads such a checkpoint (and the attached AdamW's state).");

  py::class_<PyAdamW>(m, "AdamW", R"(AdamW over a FlatParameters' shards (torch's semantics).

step() runs the optimizer step on this rank's shards, zeroes the gradients and (stages 1-2)
gathers the updated parameters. Attaching it to fp makes fp's checkpoints carry its state.)")
      .def(py::init([](const Flat& flat, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay) {
             BRAID_CHECK(flat != nullptr, kInvalidArgument, "AdamW: fp is None");
             nn::OptimizerOptions o;
             o.lr = lr;
             o.beta1 = betas.first;
             o.beta2 = betas.second;
             o.eps = eps;
             o.weight_decay = weight_decay;
             auto opt =
                 std::make_shared<nn::AdamW>(flat->get().sharded().optimizer_parameters(), o);
             flat->optimizer = opt;
             return PyAdamW{flat, std::move(opt)};
           }),
           py::arg("fp"), py::arg("lr") = 1e-3,
           py::arg("betas") = std::pair<double, double>(0.9, 0.999), py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0)
      .def("step",
           [](PyAdamW& a) {
             shard::FlatParameters& fp = a.flat->get();
             py::gil_scoped_release release;
             a.opt->step();
             a.opt->zero_grad();  // stage 0 steps the parameters themselves: drop their grads
             fp.sharded().after_step();
           })
      .def_property(
          "lr", [](const PyAdamW& a) { return a.opt->param_groups().at(0).options.lr; },
          [](PyAdamW& a, double lr) {
            for (nn::ParamGroup& g : a.opt->param_groups()) g.options.lr = lr;
          },
          "The learning rate (set it each step for a schedule).");
}

}  // namespace braid::python
