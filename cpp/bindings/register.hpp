// Each area of the _core module registers itself; module.cpp only calls these.
#pragma once

#include <pybind11/pybind11.h>

namespace stroboscope::bindings {
void register_frame(pybind11::module_& m);
void register_sampler(pybind11::module_& m);
void register_sources(pybind11::module_& m);
void register_gpu(pybind11::module_& m);
}  // namespace stroboscope::bindings
