// A Frame: rows copied out of the ring into buffers it owns, ready to be exported as Arrow.
//
// Column 0 is `time` (timestamp[ns, UTC] = mono_ns + the sampler's clock anchor), column 1 is
// `mono_ns` (CLOCK_MONOTONIC ns of the tick, the same clock as time.monotonic_ns()), then one
// column per metric. Each column is one contiguous array of 8-byte cells plus an Arrow validity
// bitmap (LSB order). Frames are immutable once built and shared by every exported Arrow struct
// that points into them (a shared_ptr held in the struct's private data).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stroboscope/column.hpp"

namespace stroboscope {

struct FrameColumn {
  ColumnSpec spec;
  bool is_timestamp = false;                  // the `time` column: timestamp[ns, UTC]
  std::unique_ptr<std::uint64_t[]> cells;     // length() cells
  std::unique_ptr<std::uint64_t[]> validity;  // ceil(length() / 64) words
  std::int64_t null_count = 0;
};

class Frame {
 public:
  // Allocates buffers for `rows` rows of these columns (cells left uninitialised, validity
  // zeroed). Used by the sampler's snapshot/drain.
  Frame(const std::vector<ColumnSpec>& metric_columns, std::uint64_t rows);

  [[nodiscard]] std::int64_t length() const noexcept { return length_; }
  [[nodiscard]] std::vector<FrameColumn>& columns() noexcept { return columns_; }
  [[nodiscard]] const std::vector<FrameColumn>& columns() const noexcept { return columns_; }

  // Finishes a frame after the ring copy: drops `skip` leading rows that were overwritten while
  // copying, fills `time` from `mono_ns` and the anchor, and counts nulls.
  void finish(std::uint64_t skip, std::int64_t realtime_minus_mono_ns);

  std::uint64_t first_row = 0;   // ring index of row 0 of this frame
  std::uint64_t rows_lost = 0;   // rows that were wanted but overwritten before they were copied

 private:
  std::int64_t length_;
  std::vector<FrameColumn> columns_;
};

}  // namespace stroboscope
