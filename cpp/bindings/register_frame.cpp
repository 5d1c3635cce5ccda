// Frame: the rows of one snapshot/drain, exported through the Arrow PyCapsule interface.
#include <pybind11/pybind11.h>

#include <memory>

#include "register.hpp"
#include "stroboscope/arrow_export.hpp"
#include "stroboscope/frame.hpp"

namespace py = pybind11;

namespace stroboscope::bindings {
namespace {

// Capsule destructors: a consumer that imported the struct has moved it out and set release to
// null; otherwise the struct is still ours to release.
void schema_capsule_destructor(PyObject* capsule) {
  auto* schema = static_cast<ArrowSchema*>(PyCapsule_GetPointer(capsule, "arrow_schema"));
  if (schema == nullptr) return;
  if (schema->release != nullptr) schema->release(schema);
  delete schema;
}

void array_capsule_destructor(PyObject* capsule) {
  auto* array = static_cast<ArrowArray*>(PyCapsule_GetPointer(capsule, "arrow_array"));
  if (array == nullptr) return;
  if (array->release != nullptr) array->release(array);
  delete array;
}

void stream_capsule_destructor(PyObject* capsule) {
  auto* stream =
      static_cast<ArrowArrayStream*>(PyCapsule_GetPointer(capsule, "arrow_array_stream"));
  if (stream == nullptr) return;
  if (stream->release != nullptr) stream->release(stream);
  delete stream;
}

py::object schema_capsule(const std::shared_ptr<Frame>& frame) {
  auto* schema = new ArrowSchema{};
  export_schema(frame, schema);
  return py::reinterpret_steal<py::object>(
      PyCapsule_New(schema, "arrow_schema", schema_capsule_destructor));
}

py::object array_capsule(const std::shared_ptr<Frame>& frame) {
  auto* array = new ArrowArray{};
  export_array(frame, array);
  return py::reinterpret_steal<py::object>(
      PyCapsule_New(array, "arrow_array", array_capsule_destructor));
}

py::object stream_capsule(const std::shared_ptr<Frame>& frame) {
  auto* stream = new ArrowArrayStream{};
  export_stream(frame, stream);
  return py::reinterpret_steal<py::object>(
      PyCapsule_New(stream, "arrow_array_stream", stream_capsule_destructor));
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
      .def_readonly("first_row", &Frame::first_row)
      .def_readonly("rows_lost", &Frame::rows_lost)
      .def("export_schema", &schema_capsule)
      .def("export_array", &array_capsule)
      .def("export_stream", &stream_capsule);
}

}  // namespace stroboscope::bindings
