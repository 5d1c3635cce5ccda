// Each area of the _core module registers itself; module.cpp only calls these.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "stroboscope/column.hpp"
#include "stroboscope/source.hpp"

namespace stroboscope::bindings {
// A source built once (_core.build_source): asked about itself, then handed to one Sampler,
// which takes it (source is null from then on).
struct BuiltSource {
  std::unique_ptr<Source> source;
};

// {"name", "unit", "dtype", "kind", "help"} of one column, as Python sees a schema entry.
pybind11::dict column_dict(const ColumnSpec& c);

void register_frame(pybind11::module_& m);
void register_sampler(pybind11::module_& m);
void register_sources(pybind11::module_& m);
void register_gpu(pybind11::module_& m);
void register_spool(pybind11::module_& m);
void register_events(pybind11::module_& m);
void register_scope_edges(pybind11::module_& m);
void register_stacks(pybind11::module_& m);
}  // namespace stroboscope::bindings
