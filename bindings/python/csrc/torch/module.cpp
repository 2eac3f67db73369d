// ds4tp.torch._c10d: the backend's process group as a Python type derived
// from torch.distributed's ProcessGroup, so torch's own functions take it.
// Bring-up (store, rendezvous) is driven from Python: ds4tp/torch/_rendezvous.py.
#include <torch/csrc/utils/pybind.h>

#include <ds4tp/ds4tp.h>

#include "process_group.hpp"

namespace py = pybind11;
using ds4tp_torch::Config;
using ds4tp_torch::ProcessGroupDs4tp;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "libds4tp as a torch.distributed backend (import ds4tp.torch to register it)";
  // The base type must be known to pybind11 before a type derives from it.
  py::module_::import("torch.distributed");

  py::class_<Config>(m, "Config")
      .def(py::init<>())
      .def_readwrite("host", &Config::host)
      .def_readwrite("port", &Config::port)
      .def_readwrite("transport", &Config::transport)
      .def_readwrite("connect_timeout_ms", &Config::connect_timeout_ms)
      .def_readwrite("op_timeout_ms", &Config::op_timeout_ms)
      .def_readwrite("peer_silence_ms", &Config::peer_silence_ms)
      .def_readwrite("chunk_bytes", &Config::chunk_bytes)
      .def_readwrite("spin_us", &Config::spin_us)
      .def_readwrite("yield_us", &Config::yield_us);

  py::class_<ProcessGroupDs4tp, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupDs4tp>>(
      m, "ProcessGroupDs4tp")
      .def(py::init<int, int, const Config &>(), py::arg("rank"), py::arg("size"),
           py::arg("config"), py::call_guard<py::gil_scoped_release>())
      .def("_connect", &ProcessGroupDs4tp::connect, py::call_guard<py::gil_scoped_release>())
      .def("_mark_failed", &ProcessGroupDs4tp::mark_failed)
      .def_property_readonly("rendezvous_port", &ProcessGroupDs4tp::rendezvous_port)
      .def_property_readonly("transport", [](const ProcessGroupDs4tp &pg) {
        return std::string(ds4tp_transport_name(pg.transport()));
      })
      .def("plan", &ProcessGroupDs4tp::plan);

  m.def("library_version", [] { return std::string(ds4tp_version_string()); });
}
