// Frame: the rows of one snapshot/drain, exported through the Arrow PyCapsule interface.
#include <pybind11/pybind11.h>

#include <memory>

#include "register.hpp"
#include "stroboscope/arrow_export.hpp"
#include "stroboscope/frame.hpp"

namespace py = pybind11;

namespace stroboscope::bindings {
namespace {

// The name each Arrow struct's capsule carries, as the PyCapsule interface fixes it.
template <typename T>
constexpr const char* kCapsuleName = nullptr;
template <>
constexpr const char* kCapsuleName<ArrowSchema> = "arrow_schema";
template <>
constexpr const char* kCapsuleName<ArrowArray> = "arrow_array";
template <>
constexpr const char* kCapsuleName<ArrowArrayStream> = "arrow_array_stream";

// Capsule destructor: a consumer that imported the struct has moved it out and set release to
// null; otherwise the struct is still ours to release.
template <typename T>
void capsule_destructor(PyObject* capsule) {
  auto* s = static_cast<T*>(PyCapsule_GetPointer(capsule, kCapsuleName<T>));
  if (s == nullptr) return;
  if (s->release != nullptr) s->release(s);
  delete s;
}

// Exports `frame` into a new struct and hands it to a capsule. Until the capsule owns the struct
// the unique_ptr does: a failed export leaves it released (and it is deleted); a failed
// PyCapsule_New releases it, deletes it and raises the Python error it set.
template <typename T>
py::object export_capsule(const std::shared_ptr<Frame>& frame,
                          void (*export_fn)(const std::shared_ptr<const Frame>&, T*)) {
  auto s = std::make_unique<T>();
  export_fn(frame, s.get());
  PyObject* capsule = PyCapsule_New(s.get(), kCapsuleName<T>, capsule_destructor<T>);
  if (capsule == nullptr) {
    s->release(s.get());
    throw py::error_already_set();
  }
  (void)s.release();  // the capsule's destructor owns it now
  return py::reinterpret_steal<py::object>(capsule);
}

py::object schema_capsule(const std::shared_ptr<Frame>& frame) {
  return export_capsule<ArrowSchema>(frame, export_schema);
}

py::object array_capsule(const std::shared_ptr<Frame>& frame) {
  return export_capsule<ArrowArray>(frame, export_array);
}

py::object stream_capsule(const std::shared_ptr<Frame>& frame) {
  return export_capsule<ArrowArrayStream>(frame, export_stream);
}

}  // namespace

void register_frame(py::module_& m) {
  py::class_<Frame, std::shared_ptr<Frame>>(m, "Frame")
      .def("__len__", [](const Frame& f) { return f.length(); })
      .def_property_readonly("num_columns",
                             [](const Frame& f) { return f.columns().size(); })
      .def_property_readonly("column_names",
                             [](const Frame& f) {
                               py::list names;
                               for (const auto& c : f.columns()) names.append(c.spec.name);
                               return names;
                             })
      .def_property_readonly("first_row", &Frame::first_row)
      .def_property_readonly("rows_lost", &Frame::rows_lost)
      // [(columns, starts, complete)]: per source of a sampler's frame, its columns as
      // (name, window_ns) pairs, the mono_ns of each of its reads that failed after one that did
      // not (FailedReads), oldest first, and whether that log goes back to its first read (else
      // only to starts[0]). Empty for other frames.
      .def_property_readonly("failed_reads",
                             [](const Frame& f) {
                               py::list out;
                               const auto& cols = f.columns();
                               for (const FrameFailedReads& src : f.failed_reads()) {
                                 py::list names;
                                 for (std::size_t i = 0; i < src.columns; ++i) {
                                   const std::size_t c = src.first_column + i;
                                   if (c >= cols.size()) break;
                                   names.append(py::make_tuple(cols[c].spec.name,
                                                               cols[c].spec.window_ns));
                                 }
                                 py::list starts;
                                 for (std::int64_t t : src.failed.starts) starts.append(t);
                                 out.append(py::make_tuple(py::tuple(names), py::tuple(starts),
                                                           src.failed.complete));
                               }
                               return out;
                             })
      .def_property_readonly("edges",
                             [](const Frame& f) -> py::object {
                               const auto& cols = f.columns();
                               const std::int64_t n = f.length();
                               if (n == 0 || cols.size() < 2) return py::none();
                               auto cell = [](const FrameColumn& c, std::int64_t i) {
                                 return c.valid(i) ? py::object(py::int_(static_cast<std::int64_t>(
                                                         c.cell(i))))
                                                   : py::object(py::none());
                               };
                               return py::make_tuple(cell(cols[0], 0), cell(cols[0], n - 1),
                                                     cell(cols[1], 0));
                             })
      .def("export_schema", &schema_capsule)
      .def("export_array", &array_capsule)
      .def("export_stream", &stream_capsule);
}

}  // namespace stroboscope::bindings
