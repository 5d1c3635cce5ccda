// Source options and the source registry: names, defaults, availability, columns, GPU status.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "register.hpp"
#include "stroboscope/nvml.hpp"
#include "stroboscope/registry.hpp"

namespace py = pybind11;

namespace stroboscope::bindings {
namespace {

py::dict gpu_status_dict() {
  NvmlStatus st;
  {
    // releasing gil here is safe, we don't manipulate refcounts
    py::gil_scoped_release release;
    st = nvml_status();
  }
  py::dict d;
  d["library_path"] = st.library_path;
  d["loaded"] = st.loaded;
  d["reason"] = st.reason;
  d["init_error"] = st.init_error;
  d["driver_version"] = st.driver_version;
  d["nvml_version"] = st.nvml_version;
  d["device_count"] = st.device_count;
  d["notes"] = st.notes;
  py::list symbols;
  for (const NvmlSymbol& s : st.symbols) {
    symbols.append(py::dict(py::arg("wanted") = s.wanted, py::arg("resolved") = s.resolved,
                            py::arg("required") = s.required));
  }
  d["symbols"] = symbols;
  py::list devices;
  for (const NvmlDeviceStatus& dev : st.devices) {
    py::dict dd;
    dd["index"] = dev.index;
    dd["name"] = dev.name;
    dd["uuid"] = dev.uuid;
    dd["mig_enabled"] = dev.mig_enabled;
    py::list mig;
    for (const NvmlMigInstance& m : dev.mig_instances) {
      mig.append(py::dict(py::arg("index") = m.index, py::arg("uuid") = m.uuid));
    }
    dd["mig_instances"] = mig;
    dd["error"] = dev.error;
    py::dict unavailable;
    for (const NvmlUnavailable& u : dev.unavailable) unavailable[py::str(u.metric)] = u.reason;
    dd["unavailable"] = unavailable;
    py::list held_back;
    for (const NvmlHeldBack& h : dev.held_back) {
      held_back.append(py::dict(py::arg("call") = h.call,
                                py::arg("cost_us") = static_cast<double>(h.cost_ns) / 1e3,
                                py::arg("every_ms") = static_cast<double>(h.every_ns) / 1e6));
    }
    dd["held_back"] = held_back;
    devices.append(dd);
  }
  d["devices"] = devices;
  d["text"] = format_nvml_status(st);
  return d;
}

// What a built source says of itself: its columns, the windows of the columns written once per
// window, the interface it chose, its natural resolution and why.
py::dict details_dict(const Source& source, const std::string& name) {
  SourceInfo info{name, {}, false, true, {}, {}, 0, {}};
  {
    // releasing gil here is safe, we don't manipulate refcounts
    py::gil_scoped_release release;
    describe_built(source, &info);
  }
  py::list columns;
  for (const ColumnSpec& c : source.columns()) columns.append(column_dict(c));
  py::dict d;
  d["columns"] = columns;
  py::dict windows;  // columns written once per window of at least this many ns
  for (const ColumnSpec& c : source.columns()) {
    if (c.window_ns > 0) windows[py::str(c.name)] = c.window_ns;
  }
  d["windows_ns"] = windows;
  d["interface"] = info.interface;
  d["resolution_ns"] = info.resolution_ns;
  d["resolution_reason"] = info.resolution_reason;
  return d;
}

std::unique_ptr<Source> build(const std::string& name, const SourceOptions& opts) {
  // releasing gil here is safe, we don't manipulate refcounts
  py::gil_scoped_release release;
  return make_source(name, opts);
}

}  // namespace

void register_sources(py::module_& m) {
  py::class_<SourceOptions>(m, "SourceOptions")
      .def(py::init<>())
      .def_readwrite("proc_root", &SourceOptions::proc_root)
      .def_readwrite("sys_root", &SourceOptions::sys_root)
      .def_readwrite("cgroup_root", &SourceOptions::cgroup_root)
      .def_readwrite("pid", &SourceOptions::pid)
      .def_readwrite("disk_paths", &SourceOptions::disk_paths)
      .def_readwrite("gpu_devices", &SourceOptions::gpu_devices)
      .def_readwrite("gpu_labels", &SourceOptions::gpu_labels)
      .def_readwrite("cpu_window_ns", &SourceOptions::cpu_window_ns)
      .def_readwrite("rate_window_ns", &SourceOptions::rate_window_ns)
      .def_readwrite("net_include_loopback", &SourceOptions::net_include_loopback)
      .def_readwrite("include_own_threads", &SourceOptions::include_own_threads);

  m.def("source_names", &source_names, "Every source name this build knows.");
  // Building or probing the gpu source may dlopen NVML and call nvmlInit (seconds on some
  // machines): the three calls below run without the GIL.
  m.def("describe_sources", [](const SourceOptions& opts) {
    std::vector<SourceInfo> infos;
    {
      // releasing gil here is safe, we don't manipulate refcounts
      py::gil_scoped_release release;
      infos = describe_sources(opts);
    }
    py::list out;
    for (const SourceInfo& info : infos) {
      py::dict d;
      d["name"] = info.name;
      d["help"] = info.help;
      d["default"] = info.is_default;
      d["available"] = info.available;
      d["reason"] = info.reason;
      d["interface"] = info.interface;
      d["resolution_ns"] = info.resolution_ns;
      d["resolution_reason"] = info.resolution_reason;
      out.append(d);
    }
    return out;
  });
  m.def("default_source_names", &default_source_names,
        py::call_guard<py::gil_scoped_release>());
  m.def("source_columns", [](const std::string& name, const SourceOptions& opts) {
    std::unique_ptr<Source> source;  // outlives the loop below
    {
      // releasing gil here is safe, we don't manipulate refcounts
      py::gil_scoped_release release;
      source = make_source(name, opts);
    }
    py::list out;
    for (const ColumnSpec& c : source->columns()) out.append(column_dict(c));
    return out;
  });
  // One source built here: its columns and what it says about itself (the interface it chose,
  // its natural resolution and why), for the Sampler's defaults and stats().
  m.def("source_details", [](const std::string& name, const SourceOptions& opts) {
    const std::unique_ptr<Source> source = build(name, opts);
    return details_dict(*source, name);
  });
  // A source built once: asked about itself (details), then handed to the Sampler that reads
  // it, which takes it: each source is built (files opened, NVML initialised) once.
  py::class_<BuiltSource, std::shared_ptr<BuiltSource>>(m, "BuiltSource")
      .def_property_readonly("name",
                             [](const BuiltSource& b) -> py::object {
                               if (!b.source) return py::none();
                               return py::str(b.source->name());
                             })
      .def_property_readonly("taken", [](const BuiltSource& b) { return !b.source; })
      .def("details", [](const BuiltSource& b) {
        if (!b.source) throw py::value_error("this source was taken by a Sampler");
        return details_dict(*b.source, b.source->name());
      });
  m.def("build_source", [](const std::string& name, const SourceOptions& opts) {
    return std::make_shared<BuiltSource>(BuiltSource{build(name, opts)});
  });
  m.def("gpu_status", &gpu_status_dict);
  m.def("nvml_index_of_uuid", [](const std::string& uuid) -> py::object {
    std::optional<unsigned> idx;
    {
      // releasing gil here is safe, we don't manipulate refcounts
      py::gil_scoped_release release;
      idx = nvml_index_of_uuid(uuid);
    }
    return idx ? py::object(py::int_(*idx)) : py::object(py::none());
  });
}

}  // namespace stroboscope::bindings
