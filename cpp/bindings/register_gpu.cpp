// Driver-resolution GPU samples (the long-form frame of issue "GPU"): recorder lifecycle and rows.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <vector>

#include "register.hpp"
#include "stroboscope/gpu_samples.hpp"

namespace py = pybind11;

namespace stroboscope::bindings {
namespace {

template <typename T>
py::array_t<T> to_array(std::vector<T>&& v) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(static_cast<py::ssize_t>(owned->size()), owned->data(), free_when_done);
}

py::dict rows_dict(GpuSampleRows rows) {
  py::dict d;
  d["mono_ns"] = to_array(std::move(rows.mono_ns));
  d["time_ns"] = to_array(std::move(rows.time_ns));
  d["gpu"] = to_array(std::move(rows.gpu));
  d["kind"] = to_array(std::move(rows.kind));
  d["value"] = to_array(std::move(rows.value));
  d["dropped"] = rows.dropped;
  return d;
}

// Joins a thread on destruction: without the GIL, as every other join.
struct ReleaseGilDeleter {
  void operator()(GpuSampleRecorder* r) const {
    // releasing gil here is safe, we don't manipulate refcounts
    py::gil_scoped_release release;
    delete r;
  }
};

}  // namespace

void register_gpu(py::module_& m) {
  py::list kinds;
  for (int k = 0; k <= static_cast<int>(NvmlSampleKind::kMemClockMhz); ++k) {
    kinds.append(nvml_sample_kind_name(static_cast<NvmlSampleKind>(k)));
  }
  m.attr("GPU_SAMPLE_KINDS") = kinds;
  // releasing gil here is safe, we don't manipulate refcounts
  using release_gil = py::call_guard<py::gil_scoped_release>;
  py::class_<GpuSampleRecorder, std::unique_ptr<GpuSampleRecorder, ReleaseGilDeleter>>(
      m, "GpuSampleRecorder")
      .def(py::init([](std::vector<unsigned> devices, std::int64_t poll_interval_ns,
                       std::size_t max_rows) {
             // releasing gil here is safe, we don't manipulate refcounts
             py::gil_scoped_release release;
             return std::unique_ptr<GpuSampleRecorder, ReleaseGilDeleter>(
                 new GpuSampleRecorder(std::move(devices), poll_interval_ns, max_rows));
           }),
           py::arg("devices"), py::arg("poll_interval_ns"), py::arg("max_rows"))
      .def("start", &GpuSampleRecorder::start, release_gil())
      .def("stop", &GpuSampleRecorder::stop, release_gil())
      .def("poll_now", &GpuSampleRecorder::poll_now, release_gil())
      .def("forget_thread_after_fork", &GpuSampleRecorder::forget_thread_after_fork)
      .def_property_readonly("devices", &GpuSampleRecorder::devices)
      .def("take",
           [](GpuSampleRecorder& r) {
             GpuSampleRows rows;
             {
               // releasing gil here is safe, we don't manipulate refcounts
               py::gil_scoped_release release;
               rows = r.take();
             }
             return rows_dict(std::move(rows));
           })
      .def("peek", [](const GpuSampleRecorder& r) {
        GpuSampleRows rows;
        {
          // releasing gil here is safe, we don't manipulate refcounts
          py::gil_scoped_release release;
          rows = r.peek();
        }
        return rows_dict(std::move(rows));
      });
}

}  // namespace stroboscope::bindings
