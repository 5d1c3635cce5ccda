// The private _core extension: wiring only. The typed public API is python/stroboscope/.
#include <pybind11/pybind11.h>

#include "register.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "stroboscope's C++ core (private; use the stroboscope package).";
  stroboscope::bindings::register_frame(m);
  stroboscope::bindings::register_sources(m);
  stroboscope::bindings::register_sampler(m);
  stroboscope::bindings::register_gpu(m);
  stroboscope::bindings::register_spool(m);
  stroboscope::bindings::register_events(m);
  stroboscope::bindings::register_scope_edges(m);
  stroboscope::bindings::register_stacks(m);
}
