// Exports a Frame through the Arrow C data interface, without copying its buffers.
//
// The frame is a struct array (one child per column) / a stream of one record batch. Every
// exported struct holds a shared_ptr to the frame in its private data, and its `release` frees
// exactly what that struct allocated, then drops the reference: the frame lives until the last
// consumer (pyarrow, polars, DuckDB...) releases the last struct pointing into it.
// Field metadata carries each column's "unit", "kind" and "help".
//
// `out` may hold garbage on entry. On failure (std::bad_alloc) every function leaves `out`
// released (release == nullptr) with nothing it allocated left behind, and rethrows; the stream's
// get_schema/get_next callbacks return ENOMEM instead and say why in get_last_error.
#pragma once

#include <memory>

#include "stroboscope/arrow_c.h"
#include "stroboscope/frame.hpp"

namespace stroboscope {

void export_schema(const std::shared_ptr<const Frame>& frame, ArrowSchema* out);
void export_array(const std::shared_ptr<const Frame>& frame, ArrowArray* out);
void export_stream(const std::shared_ptr<const Frame>& frame, ArrowArrayStream* out);

}  // namespace stroboscope
