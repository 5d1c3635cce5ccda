// Scope events: the process-wide EventLog (events.hpp) as module-level functions, and
// EventBatch, one read's copy, exported to Arrow through pyarrow.
//
// events_begin/events_end are plain METH_FASTCALL functions rather than pybind11 ones: a push is
// ~20 ns of work and pybind11's argument dispatch would cost several times that. They keep the
// GIL (releasing and taking it back would cost more than the push).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "register.hpp"
#include "stroboscope/events.hpp"
#include "stroboscope/sampler.hpp"
#include "stroboscope/shared_events.hpp"

namespace py = pybind11;

namespace stroboscope::bindings {
namespace {

// One argument of events_begin/events_end as an unsigned integer no larger than `max`; on a
// bad value, a Python exception naming the argument and the accepted range (returns false).
bool arg_uint(PyObject* obj, const char* func, const char* name, std::uint64_t max,
              std::uint64_t* out) {
  if (!PyLong_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s(): %s must be an int, got %s", func, name,
                 Py_TYPE(obj)->tp_name);
    return false;
  }
  const unsigned long long v = PyLong_AsUnsignedLongLong(obj);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();  // negative or past 64 bits: said in our words below
    PyErr_Format(PyExc_ValueError, "%s(): %s must be in [0, %llu], got %R", func, name,
                 static_cast<unsigned long long>(max), obj);
    return false;
  }
  if (v > max) {
    PyErr_Format(PyExc_ValueError, "%s(): %s must be in [0, %llu], got %llu", func, name,
                 static_cast<unsigned long long>(max), v);
    return false;
  }
  *out = v;
  return true;
}

template <EventKind kKind>
PyObject* events_push(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  constexpr const char* func = kKind == EventKind::kBegin ? "events_begin" : "events_end";
  if (nargs != 4) {
    PyErr_Format(PyExc_TypeError,
                 "%s() takes 4 positional arguments (scope_id, depth, labels_id, stack_id), "
                 "got %zd",
                 func, nargs);
    return nullptr;
  }
  std::uint64_t scope = 0, depth = 0, labels = 0, stack = 0;
  constexpr std::uint64_t u32 = std::numeric_limits<std::uint32_t>::max();
  if (!arg_uint(args[0], func, "scope_id", u32, &scope) ||
      !arg_uint(args[1], func, "depth", std::numeric_limits<std::uint16_t>::max(), &depth) ||
      !arg_uint(args[2], func, "labels_id", u32, &labels) ||
      !arg_uint(args[3], func, "stack_id", std::numeric_limits<std::uint64_t>::max(), &stack)) {
    return nullptr;
  }
  EventLog::global().push(kKind, static_cast<std::uint32_t>(scope),
                          static_cast<std::uint16_t>(depth), static_cast<std::uint32_t>(labels),
                          stack);
  Py_RETURN_NONE;
}

PyMethodDef g_begin_def = {
    "events_begin", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                        &events_push<EventKind::kBegin>)),
    METH_FASTCALL,
    "events_begin(scope_id, depth, labels_id, stack_id)\n--\n\n"
    "Record a scope's begin: stamps CLOCK_MONOTONIC ns and the OS thread id."};
PyMethodDef g_end_def = {
    "events_end", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(
                      &events_push<EventKind::kEnd>)),
    METH_FASTCALL,
    "events_end(scope_id, depth, labels_id, stack_id)\n--\n\n"
    "Record a scope's end: stamps CLOCK_MONOTONIC ns and the OS thread id."};

// A numpy view of one column; the array keeps the batch (its owner) alive.
template <typename T>
py::array column_view(const std::vector<T>& v, const std::shared_ptr<EventRead>& owner) {
  if (v.empty()) return py::array_t<T>(0);
  auto* keep = new std::shared_ptr<EventRead>(owner);
  py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<EventRead>*>(p); });
  return py::array_t<T>(static_cast<py::ssize_t>(v.size()), v.data(), base);
}

// One column over the batch's numpy view, without a copy. Array.from_buffers, not pa.array():
// pa.array() asks whether its input is a pandas object, which imports pandas (about 40 MiB of a
// recorder that never uses it: bench/bench_recorder_rss.py). The vector's type is the column's.
py::object arrow_column(const py::module_& pa, const char* type, const py::array& values) {
  return pa.attr("Array").attr("from_buffers")(
      pa.attr(type)(), values.size(), py::make_tuple(py::none(), pa.attr("py_buffer")(values)));
}

// One record batch in the contract's schema, its buffers shared with the batch.
py::object record_batch(const std::shared_ptr<EventRead>& b) {
  py::module_ pa = py::module_::import("pyarrow");
  const auto& c = b->columns;
  py::list arrays;
  arrays.append(arrow_column(pa, "int64", column_view(c.mono_ns, b)));
  arrays.append(arrow_column(pa, "uint8", column_view(c.kind, b)));
  arrays.append(arrow_column(pa, "int64", column_view(c.thread_id, b)));
  arrays.append(arrow_column(pa, "uint32", column_view(c.scope_id, b)));
  arrays.append(arrow_column(pa, "uint16", column_view(c.depth, b)));
  arrays.append(arrow_column(pa, "uint32", column_view(c.labels_id, b)));
  arrays.append(arrow_column(pa, "uint64", column_view(c.stack_id, b)));
  py::list names;
  for (const char* n :
       {"mono_ns", "kind", "thread_id", "scope_id", "depth", "labels_id", "stack_id"}) {
    names.append(n);
  }
  return pa.attr("RecordBatch").attr("from_arrays")(arrays, py::arg("names") = names);
}

// `first` of events_read as an index in [0, written], compared as Python ints (so 2**70 gets
// the same clear error as any other index past the end).
std::uint64_t first_arg(const py::int_& v, std::uint64_t written) {
  if (PyObject_RichCompareBool(v.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
    throw py::value_error("events_read(): first must be >= 0, got " +
                          py::str(v).cast<std::string>());
  }
  if (PyObject_RichCompareBool(v.ptr(), py::int_(written).ptr(), Py_GT) == 1) {
    throw py::value_error("events_read(): first must be <= events_written() = " +
                          std::to_string(written) + ", got " + py::str(v).cast<std::string>());
  }
  return v.cast<std::uint64_t>();
}

}  // namespace

void register_events(py::module_& m) {
  using Batch = std::shared_ptr<EventRead>;
  py::class_<EventRead, Batch>(m, "EventBatch")
      .def("__len__", [](const EventRead& b) { return b.columns.size(); })
      .def_property_readonly("first", [](const EventRead& b) { return b.first; })
      .def_property_readonly("next", [](const EventRead& b) { return b.next; })
      .def_property_readonly("lost", [](const EventRead& b) { return b.lost; })
      .def("to_arrow",
           [](const Batch& b) {
             return py::module_::import("pyarrow").attr("Table").attr("from_batches")(
                 py::make_tuple(record_batch(b)));
           })
      .def("__arrow_c_array__",
           [](const Batch& b, const py::object& requested_schema) {
             return record_batch(b).attr("__arrow_c_array__")(requested_schema);
           },
           py::arg("requested_schema") = py::none())
      .def("__arrow_c_stream__",
           [](const Batch& b, const py::object& requested_schema) {
             py::object table = py::module_::import("pyarrow").attr("Table").attr(
                 "from_batches")(py::make_tuple(record_batch(b)));
             return table.attr("__arrow_c_stream__")(requested_schema);
           },
           py::arg("requested_schema") = py::none());

  const py::object module_name = m.attr("__name__");
  m.add_object("events_begin", py::reinterpret_steal<py::object>(
                                   PyCFunction_NewEx(&g_begin_def, nullptr, module_name.ptr())));
  m.add_object("events_end", py::reinterpret_steal<py::object>(
                                 PyCFunction_NewEx(&g_end_def, nullptr, module_name.ptr())));

  m.def(
      "events_intern",
      [](const py::object& text) {
        if (!PyUnicode_Check(text.ptr())) {
          throw py::type_error(std::string("events_intern(): text must be a str, got ") +
                               Py_TYPE(text.ptr())->tp_name);
        }
        Py_ssize_t n = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(text.ptr(), &n);  // ValueError on surrogates
        if (utf8 == nullptr) throw py::error_already_set();
        return EventLog::global().intern(std::string_view(utf8, static_cast<std::size_t>(n)));
      },
      py::arg("text"), "A stable small id for `text` (id 0 is the empty string).");
  m.def(
      "events_strings",
      [](const py::int_& first) {
        if (PyObject_RichCompareBool(first.ptr(), py::int_(0).ptr(), Py_LT) == 1) {
          throw py::value_error("events_strings(): first must be >= 0, got " +
                                py::str(first).cast<std::string>());
        }
        const auto big = py::int_(std::numeric_limits<std::uint32_t>::max());
        if (PyObject_RichCompareBool(first.ptr(), big.ptr(), Py_GT) == 1) return py::list();
        py::list out;
        for (const auto& s : EventLog::global().strings(first.cast<std::uint32_t>())) {
          out.append(py::str(s));
        }
        return out;
      },
      py::arg("first") = 0, "The interned strings from id `first` on (id = index).");
  m.def(
      "events_written", [] { return EventLog::global().written(); },
      "Index the next event will get (the count of events ever recorded in this process).");
  m.def(
      "events_read",
      [](const py::int_& first, const py::object& last) {
        const std::uint64_t from = first_arg(first, EventLog::global().written());
        std::uint64_t to = std::numeric_limits<std::uint64_t>::max();
        if (!last.is_none()) {
          if (!PyLong_Check(last.ptr())) {
            throw py::type_error(std::string("events_read(): last must be an int or None, got ") +
                                 Py_TYPE(last.ptr())->tp_name);
          }
          const py::int_ last_int = py::reinterpret_borrow<py::int_>(last);
          if (PyObject_RichCompareBool(last_int.ptr(), first.ptr(), Py_LT) == 1) {
            throw py::value_error("events_read(): last must be >= first = " +
                                  std::to_string(from) + ", got " +
                                  py::str(last).cast<std::string>());
          }
          const auto big = py::int_(std::numeric_limits<std::uint64_t>::max());
          if (PyObject_RichCompareBool(last_int.ptr(), big.ptr(), Py_LT) == 1) {
            to = last_int.cast<std::uint64_t>();
          }
        }
        auto batch = std::make_shared<EventRead>();
        {
          // releasing gil here is safe, we don't manipulate refcounts
          py::gil_scoped_release release;
          *batch = EventLog::global().read(from, to);
        }
        return batch;
      },
      py::arg("first"), py::arg("last") = py::none(),
      "A copy of events [first, last) still held (last: None = all written).");
  m.def(
      "events_configure",
      [](const py::int_& capacity) {
        const auto big = py::int_(std::uint64_t{1} << 32);
        std::uint64_t c = 0;
        if (PyObject_RichCompareBool(capacity.ptr(), py::int_(2).ptr(), Py_GE) == 1 &&
            PyObject_RichCompareBool(capacity.ptr(), big.ptr(), Py_LE) == 1) {
          c = capacity.cast<std::uint64_t>();
        }
        if (c == 0 || (c & (c - 1)) != 0) {
          throw py::value_error(
              "events_configure(): capacity must be a power of two in [2, 2**32], got " +
              py::str(capacity).cast<std::string>());
        }
        if (!EventLog::global().configure(c)) {
          throw std::runtime_error(
              "events_configure(): the events ring already exists (an event was recorded); "
              "configure it before the first event");
        }
      },
      py::arg("capacity"), "Set the events ring's capacity (before the first event only).");
  m.def(
      "events_counters",
      [](const py::object& mode) -> std::string {
        if (!mode.is_none()) {
          if (!py::isinstance<py::str>(mode)) {
            throw py::type_error(std::string("events_counters(): mode must be None or a str, got ") +
                                 Py_TYPE(mode.ptr())->tp_name);
          }
          const auto m = mode.cast<std::string>();
          std::uint8_t bits = 0;
          if (m == "cpu") {
            bits = kEdgeCountersCpu;
          } else if (m == "rusage") {
            bits = kEdgeCountersCpu | kEdgeCountersRusage;
          } else if (m != "off") {
            throw py::value_error("events_counters(): mode must be 'off', 'cpu' or 'rusage', got " +
                                  py::repr(mode).cast<std::string>());
          }
          EventLog::global().set_counters(bits);
        }
        const std::uint8_t now = EventLog::global().counters();
        return now == 0 ? "off" : (now & kEdgeCountersRusage) != 0 ? "rusage" : "cpu";
      },
      py::arg("mode") = py::none(),
      "Edge counters: each edge is followed by a record of its thread's own CPU clock ('cpu') "
      "and its getrusage(RUSAGE_THREAD) faults and context switches ('rusage'); 'off' stops "
      "them. Returns the mode now (None: only asks).");
  m.def(
      "events_shared_path",
      []() -> py::object {
        std::string path = EventLog::global().file_path();
        if (path.empty()) return py::none();
        return py::str(path);
      },
      "The file this process's events go to ($STROBOSCOPE_EVENTS_DIR), None when they stay in "
      "memory (or before the first event).");
  m.def(
      "events_keep_in_memory",
      [](bool on) { EventLog::global().keep_in_memory(on); },
      py::arg("on"),
      "With on, this process's events stay in memory although STROBOSCOPE_EVENTS_DIR is set (an "
      "in-process recorder owns that directory; its children write their files there).");
  py::class_<EventsDoorbell>(m, "EventsDoorbell")
      .def(py::init([](const std::string& dir, Sampler& sampler) {
             Sampler* s = &sampler;  // kept alive by keep_alive below
             try {
               return std::make_unique<EventsDoorbell>(dir, [s] { s->request_tick(); });
             } catch (const std::system_error& e) {
               // An OSError of the errno's subclass (FileNotFoundError, FileExistsError, ...).
               py::object err = py::module_::import("builtins").attr("OSError")(
                   e.code().value(), std::string(e.what()));
               PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
               throw py::error_already_set();
             }
           }),
           py::arg("dir"), py::arg("sampler"), py::keep_alive<1, 3>(),
           "Makes DIR/doorbell and asks `sampler` for a row whenever a process writing shared "
           "events into DIR opens a scope (processes started after this).")
      .def(
          "close",
          [](EventsDoorbell& d) {
            // releasing gil here is safe, we don't manipulate refcounts
            py::gil_scoped_release release;
            d.stop();
          },
          "Stops the waiter thread (the file stays).")
      .def_property_readonly("wakes", &EventsDoorbell::wakes,
                             "How many times a scope opening woke the waiter.")
      .def_property_readonly("path", &EventsDoorbell::path);
  m.def("events_stats", [] {
    const EventStats st = EventLog::global().stats();
    py::dict d;
    d["written"] = st.written;
    d["overwritten"] = st.overwritten;
    d["dropped"] = st.dropped;
    d["lost"] = st.overwritten + st.dropped;
    d["capacity"] = st.capacity;
    d["bytes"] = st.bytes;
    return d;
  });
}

}  // namespace stroboscope::bindings
