// tessera._tessera: the narrow extension under the Python package (python/tessera). It exposes
// the process (init, ranks, process sets, timeline), asynchronous collectives on tensors that
// return handles, and the core's Horovod policy: op names and refusals (Op), the
// DistributedOptimizer's bookkeeping (GradientReducer), SyncBatchNorm's math. What must be
// Python (autograd Functions, integer handles, compressor objects, pickling) is in tessera/torch.
//
// Waiting never holds the GIL: a handle's wait releases it and wakes every 50 ms to let Python
// deliver signals (Ctrl-C raises KeyboardInterrupt in the waiting thread).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "tessera/torch.h"
#include "torch/gradient_reducer.h"
#include "torch/op_policy.h"

namespace py = pybind11;

namespace tessera {
namespace python {
void bind_spatial(py::module_& m);  // spatial.cc
void bind_memory(py::module_& m);   // memory.cc
}  // namespace python
}  // namespace tessera

namespace tessera {
namespace python {
namespace {

constexpr double kSignalCheckSeconds = 0.05;

// Waits for `h` with the GIL released, checking for signals between slices. Throws
// py::error_already_set (KeyboardInterrupt) when a signal handler raised.
void wait_interruptibly(const TensorHandle& h) {
  for (;;) {
    bool done;
    {
      py::gil_scoped_release release;
      done = h.wait_for(kSignalCheckSeconds);
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    // Another rank was lost: raise it here (HorovodInternalError) rather than wait for a
    // collective that cannot finish; the liveness monitor ends the process after its window.
    const std::string lost = lost_peer_error();
    if (!lost.empty()) throw Error(lost);
  }
}

torch::Tensor wait_handle(TensorHandle& h) {
  wait_interruptibly(h);
  py::gil_scoped_release release;  // synchronize copies back (in-place calls)
  return synchronize(h);
}

ReduceOp to_op(int op) {
  TESSERA_CHECK((op >= 0 && op <= static_cast<int>(ReduceOp::kProduct)) ||
                    op == static_cast<int>(ReduceOp::kAdasum),
                "unknown reduce op ", op);
  return static_cast<ReduceOp>(op);
}

void bind_process(py::module_& m) {
  m.def(
      "init",
      [](const std::map<std::string, std::string>& settings, const std::string& config_file) {
        InitOptions o;
        o.raise_on_peer_loss = true;  // a lost rank is HorovodInternalError in the loop first
        for (const auto& kv : settings) o.settings[kv.first] = kv.second;
        o.config_file = config_file;
        py::gil_scoped_release release;
        init(o);
      },
      py::arg("settings"), py::arg("config_file"));
  m.def(
      "shutdown", [](const std::string& error) { shutdown(error); }, py::arg("error") = "",
      py::call_guard<py::gil_scoped_release>());
  m.def("is_initialized", &is_initialized);
  m.def("rank", &rank);
  m.def("size", &size);
  m.def("local_rank", &local_rank);
  m.def("local_size", &local_size);
  m.def("cross_rank", &cross_rank);
  m.def("cross_size", &cross_size);
  m.def("is_homogeneous", &is_homogeneous);
  m.def("step_done", &step_done, py::call_guard<py::gil_scoped_release>());
  m.def("elastic_job", &elastic_job);
  m.def("elastic_generation", &elastic_generation);
  m.def("elastic_dir", &elastic_dir);
  m.def("elastic_snapshot_every", &elastic_snapshot_every);
  m.def("set_progress_step", &set_progress_step);
  m.def("check_host_updates", &check_host_updates, py::call_guard<py::gil_scoped_release>());
  m.def("mark_restart_for_hosts", &mark_restart_for_hosts);
  m.def("start_timeline", [](const std::string& path) { start_timeline(path); });
  m.def("stop_timeline", [] { stop_timeline(); });
  m.def("settings", [] {
    std::map<std::string, std::string> out;
    for (const auto& kv : settings()) out[kv.first] = kv.second;
    return out;
  });
  m.def("add_process_set", &add_process_set, py::call_guard<py::gil_scoped_release>());
  m.def("remove_process_set", &remove_process_set, py::call_guard<py::gil_scoped_release>());
  m.def("process_set_rank", &process_set_rank);
  m.def("process_set_size", &process_set_size);
  m.def("in_process_set", &in_process_set);
  m.def("process_set_ranks", &process_set_ranks);
  m.def(
      "join", [](int process_set) { return join(process_set); }, py::arg("process_set"),
      py::call_guard<py::gil_scoped_release>());
}

// Horovod's naming and refusal policy of one op lives in the core (torch/op_policy.h, which
// context.h's attempt() applies to the C++ ops). Op applies it around Python's own steps of an
// op, as a `with` block: entering checks the set and takes the name (begin_op), and gives the
// Op (its name and process set); an Exception
// leaving the block refuses it, so the ranks that enqueued it fail within a cycle and the next
// automatic names still agree. `members` > 0: a group, whose members are name.0 .. name.N-1.
struct Op {
  std::string name;
  int process_set;
  size_t members;
};

void bind_policy(py::module_& m) {
  py::class_<Op>(m, "Op")
      .def(py::init([](const std::string& kind, const py::object& name, int ps, size_t members) {
             const std::string given = name.is_none() ? "" : py::str(name).cast<std::string>();
             return Op{detail::begin_op(kind, given, ps), ps, members};
           }),
           py::arg("kind"), py::arg("name"), py::arg("process_set"), py::arg("members") = 0)
      .def_readonly("name", &Op::name)
      .def_readonly("process_set", &Op::process_set)
      .def("__enter__", [](const Op& op) { return op; })
      .def("__exit__",
           [](const Op& op, const py::object& type, const py::object& value, const py::object&) {
             if (!value.is_none() && PyErr_GivenExceptionMatches(type.ptr(), PyExc_Exception)) {
               const std::string reason =
                   detail::concat(py::str(type.attr("__name__")).cast<std::string>(), ": ",
                                  py::str(value).cast<std::string>());
               detail::refuse(op.name, op.process_set, reason, op.members);
             }
             return false;
           });
}

// SyncBatchNorm's statistics, backward and running statistics (the core's, an autograd
// function of its own): y; the running statistics, where given, move in place.
void bind_sync_batch_norm(py::module_& m) {
  m.def(
      "sync_batch_norm",
      [](const torch::Tensor& x, const std::optional<torch::Tensor>& weight,
         const std::optional<torch::Tensor>& bias, double eps, const std::string& name, int ps,
         const std::optional<torch::Tensor>& running_mean,
         const std::optional<torch::Tensor>& running_var, double momentum) {
        return sync_batch_norm(x, weight.value_or(torch::Tensor()), bias.value_or(torch::Tensor()),
                               eps, name, ps, running_mean.value_or(torch::Tensor()),
                               running_var.value_or(torch::Tensor()), momentum);
      },
      py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("eps"), py::arg("name"),
      py::arg("process_set"), py::arg("running_mean"), py::arg("running_var"), py::arg("momentum"),
      py::call_guard<py::gil_scoped_release>());
}

// The DistributedOptimizer's bookkeeping (the core's, torch/gradient_reducer.h): its hooks are
// C++ hooks on the gradient accumulators, so they run without the GIL. Making one is collective
// (the ranks' parameters are compared); synchronize() waits with the GIL released and checks for
// signals every 50 ms.
void bind_reducer(py::module_& m) {
  using detail::GradientReducer;
  py::class_<GradientReducer>(m, "GradientReducer")
      .def(py::init([](std::vector<std::pair<std::string, torch::Tensor>> params, int passes,
                       std::vector<std::vector<size_t>> groups, const std::string& compression,
                       int op, double predivide, bool sparse_as_dense, int ps) {
             DistributedOptions o;
             o.backward_passes_per_step = passes;
             o.compression = parse_compression(compression);
             o.op = to_op(op);
             o.gradient_predivide_factor = predivide;
             o.sparse_as_dense = sparse_as_dense;
             o.process_set = ps;
             py::gil_scoped_release release;
             return std::make_unique<GradientReducer>(std::move(params), o, std::move(groups));
           }),
           py::arg("params"), py::arg("backward_passes_per_step"), py::arg("groups"),
           py::arg("compression"), py::arg("op"), py::arg("gradient_predivide_factor"),
           py::arg("sparse_as_dense"), py::arg("process_set"))
      .def("synchronize",
           [](GradientReducer& r) {
             py::gil_scoped_release release;
             r.synchronize([] {
               py::gil_scoped_acquire acquire;
               if (PyErr_CheckSignals() != 0) throw py::error_already_set();
             });
           })
      .def("set_backward_passes_per_step", &GradientReducer::set_backward_passes_per_step)
      .def("set_step", &GradientReducer::set_step)
      .def("in_flight", &GradientReducer::in_flight)
      .def("synchronized", &GradientReducer::synchronized)
      .def("forget_synchronized", &GradientReducer::forget_synchronized);
}

void bind_collectives(py::module_& m) {
  py::class_<TensorHandle>(m, "Handle")
      .def("poll", &TensorHandle::poll)
      .def("wait", &wait_handle)
      .def_property_readonly("name", &TensorHandle::name)
      .def_property_readonly("received_splits", &TensorHandle::received_splits);
  m.def("allreduce_async",
        [](const torch::Tensor& t, const std::string& name, int op, double pre, double post,
           int ps) { return allreduce_async(t, name, to_op(op), pre, post, ps); });
  m.def("allreduce_async_",
        [](torch::Tensor& t, const std::string& name, int op, double pre, double post, int ps) {
          return allreduce_async_(t, name, to_op(op), pre, post, ps);
        });
  m.def("grouped_allreduce_async_",
        [](std::vector<torch::Tensor> ts, const std::vector<std::string>& names, int op, double pre,
           double post,
           int ps) { return grouped_allreduce_async_(ts, names, to_op(op), pre, post, ps); });
  m.def("allgather_async", [](const torch::Tensor& t, const std::string& name, int ps) {
    return allgather_async(t, name, ps);
  });
  m.def("grouped_allgather_async", [](const std::vector<torch::Tensor>& ts, const std::string& name,
                                      int ps) { return grouped_allgather_async(ts, name, ps); });
  m.def("broadcast_async", [](const torch::Tensor& t, int root, const std::string& name, int ps) {
    return broadcast_async(t, root, name, ps);
  });
  m.def("broadcast_async_", [](torch::Tensor& t, int root, const std::string& name, int ps) {
    return broadcast_async_(t, root, name, ps);
  });
  py::class_<SparseHandle>(m, "SparseHandle").def("wait", [](SparseHandle& h) {
    wait_interruptibly(h.indices);
    wait_interruptibly(h.values);
    py::gil_scoped_release release;
    return synchronize(h);
  });
  // Objects travel pickled (Python's part) as bytes (the core's).
  m.def("broadcast_bytes", [](const py::bytes& data, int root, const std::string& name, int ps) {
    std::string in = data;
    std::string out;
    {
      py::gil_scoped_release release;
      out = broadcast_bytes(in, root, name, ps);
    }
    return py::bytes(out);
  });
  m.def("allgather_bytes", [](const py::bytes& data, const std::string& name, int ps) {
    std::string in = data;
    std::vector<std::string> out;
    {
      py::gil_scoped_release release;
      out = allgather_bytes(in, name, ps);
    }
    py::list result;
    for (const std::string& b : out) result.append(py::bytes(b));
    return result;
  });
  m.def("sparse_allreduce_async",
        [](const torch::Tensor& t, const std::string& name, int op, int ps) {
          return sparse_allreduce_async(t, name, to_op(op), ps);
        });
  m.def(
      "alltoall_async",
      [](const torch::Tensor& t, const std::string& name, int ps,
         const std::vector<int64_t>& splits) { return alltoall_async(t, name, ps, splits); },
      py::call_guard<py::gil_scoped_release>());  // exchanging the splits waits
  m.def("reducescatter_async",
        [](const torch::Tensor& t, const std::string& name, int op, int ps, double pre,
           double post) { return reducescatter_async(t, name, to_op(op), ps, pre, post); });
  m.def(
      "grouped_reducescatter_async",
      [](const std::vector<torch::Tensor>& ts, const std::string& name, int op, int ps, double pre,
         double post) { return grouped_reducescatter_async(ts, name, to_op(op), ps, pre, post); });
}

}  // namespace
}  // namespace python
}  // namespace tessera

PYBIND11_MODULE(_tessera, m) {
  m.doc() = "tessera's extension: the engine's asynchronous collectives on torch tensors";
  // Every tessera::Error (a disagreement between ranks, a timeout, a dead rank, a shutdown) is
  // TesseraError, which tessera.torch exposes as HorovodInternalError. InvalidArgument (a bad
  // argument, a duplicate name in flight, ranks that disagree on a tensor) is also a ValueError.
  static py::exception<tessera::Error> error(m, "TesseraError", PyExc_RuntimeError);
  // A raw reference, never released: the translator may run until the interpreter ends.
  static PyObject* invalid =
      PyErr_NewException("tessera._tessera.InvalidArgumentError",
                         py::make_tuple(error, py::handle(PyExc_ValueError)).ptr(), nullptr);
  m.attr("InvalidArgumentError") = py::handle(invalid);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tessera::InvalidArgument& e) {
      PyErr_SetString(invalid, e.what());
    } catch (const tessera::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });
  m.attr("ReduceOp_Average") = static_cast<int>(tessera::ReduceOp::kAverage);
  m.attr("ReduceOp_Sum") = static_cast<int>(tessera::ReduceOp::kSum);
  m.attr("ReduceOp_Min") = static_cast<int>(tessera::ReduceOp::kMin);
  m.attr("ReduceOp_Max") = static_cast<int>(tessera::ReduceOp::kMax);
  m.attr("ReduceOp_Product") = static_cast<int>(tessera::ReduceOp::kProduct);
  m.attr("ReduceOp_Adasum") = static_cast<int>(tessera::ReduceOp::kAdasum);
#ifdef TESSERA_CUDA_BUILT
  m.attr("cuda_built") = true;
  m.attr("nccl_built") = tessera::nccl_built();  // NCCL serves CUDA tensors: only with them
#else
  m.attr("cuda_built") = false;
  m.attr("nccl_built") = false;
#endif
  tessera::python::bind_process(m);
  tessera::python::bind_policy(m);
  tessera::python::bind_sync_batch_norm(m);
  tessera::python::bind_reducer(m);
  tessera::python::bind_collectives(m);
  tessera::python::bind_spatial(m);
  tessera::python::bind_memory(m);
}
