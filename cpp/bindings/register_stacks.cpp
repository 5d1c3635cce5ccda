// _core.StackSampler: every Python thread's stack of a process (or a process tree), read from
// outside by the core (py_stacks.hpp) with the layout of this build's Python (py_stacks_layout.c).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "register.hpp"
#include "stroboscope/py_stacks.hpp"

extern "C" void stroboscope_fill_py_layout(StroboscopePyLayout* out);

namespace py = pybind11;
using stroboscope::py_stacks::StackFrameRow;
using stroboscope::py_stacks::StackSample;
using stroboscope::py_stacks::StackSampler;

namespace stroboscope::bindings {
namespace {

StroboscopePyLayout layout() {
  StroboscopePyLayout l{};
  stroboscope_fill_py_layout(&l);
  return l;
}

std::string version_text(std::uint32_t hex) {
  return std::to_string(hex >> 24) + "." + std::to_string((hex >> 16) & 0xFF);
}

template <typename T>
py::array_t<T> column(const std::vector<StackSample>& s, T StackSample::*field) {
  py::array_t<T> a(static_cast<py::ssize_t>(s.size()));
  T* out = a.mutable_data();
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = s[i].*field;
  return a;
}

template <typename T>
py::array_t<T> column(const std::vector<StackFrameRow>& s, T StackFrameRow::*field) {
  py::array_t<T> a(static_cast<py::ssize_t>(s.size()));
  T* out = a.mutable_data();
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = s[i].*field;
  return a;
}

// What a drain hands Python: the new samples, then the strings and stack frames published up to
// then (a sample always names a stack already published when it was pushed).
py::dict drain(StackSampler& s, std::size_t strings_from, std::size_t stacks_from) {
  std::vector<StackSample> samples;
  std::vector<std::string> strings;
  std::vector<StackFrameRow> rows;
  std::size_t stacks_now = 0;
  {
    // releasing gil here is safe, we don't manipulate refcounts
    py::gil_scoped_release release;
    StackSample buf[4096];
    for (;;) {
      const std::size_t n = s.drain(buf, sizeof buf / sizeof buf[0]);
      samples.insert(samples.end(), buf, buf + n);
      if (n < sizeof buf / sizeof buf[0]) break;
    }
    s.published(strings_from, stacks_from, &strings, &rows, &stacks_now);
  }
  py::dict d;
  d["mono_ns"] = column(samples, &StackSample::mono_ns);
  d["cpu_ns"] = column(samples, &StackSample::cpu_ns);
  d["pid"] = column(samples, &StackSample::pid);
  d["tid"] = column(samples, &StackSample::tid);
  d["stack_id"] = column(samples, &StackSample::stack_id);
  d["thread"] = column(samples, &StackSample::thread_name);
  py::list names;
  for (const std::string& x : strings) {
    names.append(py::reinterpret_steal<py::object>(
        PyUnicode_DecodeUTF8(x.data(), static_cast<py::ssize_t>(x.size()), "replace")));
  }
  d["strings"] = names;
  d["frame_stack_id"] = column(rows, &StackFrameRow::stack_id);
  d["frame_depth"] = column(rows, &StackFrameRow::depth);
  d["frame_function"] = column(rows, &StackFrameRow::function);
  d["frame_file"] = column(rows, &StackFrameRow::file);
  d["frame_line"] = column(rows, &StackFrameRow::line);
  d["stacks"] = stacks_now;
  return d;
}

}  // namespace

void register_stacks(py::module_& m) {
  m.def(
      "py_stacks_support",
      [] {
        const StroboscopePyLayout l = layout();
        py::dict d;
        d["supported"] = l.supported != 0;
        d["version"] = version_text(l.version_hex);
        return d;
      },
      "Whether this build can read Python stacks, and the CPython version it was built for.");

  py::class_<StackSampler>(m, "StackSampler")
      .def(py::init([](int pid, bool tree, std::int64_t interval_ns, std::size_t capacity,
                       const std::string& proc_root) {
             const StroboscopePyLayout l = layout();
             if (l.supported == 0) {
               throw py::value_error("stacks need CPython 3.11 or 3.12; this is " +
                                     version_text(l.version_hex));
             }
             return std::make_unique<StackSampler>(l, pid, tree, interval_ns, capacity, proc_root);
           }),
           py::arg("pid"), py::arg("tree"), py::arg("interval_ns"), py::arg("capacity"),
           py::arg("proc_root") = "/proc")
      .def("start", &StackSampler::start)
      .def(
          "stop",
          [](StackSampler& s) {
            // releasing gil here is safe, we don't manipulate refcounts
            py::gil_scoped_release release;
            s.stop();
          })
      .def(
          "sample_once",
          [](StackSampler& s) {
            // releasing gil here is safe, we don't manipulate refcounts
            py::gil_scoped_release release;
            s.sample_once();
          })
      .def_property_readonly("running", &StackSampler::running)
      .def("drain", &drain, py::arg("strings_from"), py::arg("stacks_from"))
      .def("forget_thread_after_fork", &StackSampler::forget_thread_after_fork)
      .def("skip_thread", &StackSampler::skip_thread, py::arg("tid"))
      .def("unskip_thread", &StackSampler::unskip_thread, py::arg("tid"))
      .def("stats", [](const StackSampler& s) {
        const auto st = s.stats();
        py::dict d;
        d["ticks"] = st.ticks;
        d["missed_ticks"] = st.missed_ticks;
        d["samples"] = st.samples;
        d["threads_read"] = st.threads_read;
        d["reads_failed"] = st.reads_failed;
        d["extra_frame_reads"] = st.extra_frame_reads;
        d["truncated"] = st.truncated;
        d["torn"] = st.torn;
        d["threads_capped"] = st.threads_capped;
        d["processes_capped"] = st.processes_capped;
        d["dropped"] = st.dropped;
        d["stacks"] = st.stacks;
        d["frames"] = st.frames;
        d["processes"] = st.processes;
        d["busy_ns"] = st.busy_ns;
        d["thread_cpu_ns"] = st.thread_cpu_ns;
        d["skipped"] = st.skipped;
        return d;
      });
}

}  // namespace stroboscope::bindings
