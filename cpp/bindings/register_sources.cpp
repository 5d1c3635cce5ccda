// The source registry: names, defaults, availability (for Sampler validation and `info`).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "options.hpp"
#include "register.hpp"
#include "stroboscope/registry.hpp"

namespace py = pybind11;

namespace stroboscope::bindings {

void register_sources(py::module_& m) {
  m.def("source_names", &source_names, "Every source name this build knows.");
  m.def(
      "describe_sources",
      [](std::string proc_root, std::string sys_root, std::string cgroup_root, int pid,
         std::vector<std::string> disk_paths) {
        py::list out;
        const auto infos = describe_sources(
            make_options(std::move(proc_root), std::move(sys_root), std::move(cgroup_root), pid,
                         std::move(disk_paths)));
        for (const SourceInfo& info : infos) {
          py::dict d;
          d["name"] = info.name;
          d["help"] = info.help;
          d["default"] = info.is_default;
          d["available"] = info.available;
          d["reason"] = info.reason;
          out.append(d);
        }
        return out;
      },
      py::arg("proc_root"), py::arg("sys_root"), py::arg("cgroup_root"), py::arg("pid"),
      py::arg("disk_paths"));
  m.def(
      "default_source_names",
      [](std::string proc_root, std::string sys_root, std::string cgroup_root, int pid,
         std::vector<std::string> disk_paths) {
        return default_source_names(make_options(std::move(proc_root), std::move(sys_root),
                                                 std::move(cgroup_root), pid,
                                                 std::move(disk_paths)));
      },
      py::arg("proc_root"), py::arg("sys_root"), py::arg("cgroup_root"), py::arg("pid"),
      py::arg("disk_paths"));
}

}  // namespace stroboscope::bindings
