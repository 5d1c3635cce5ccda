// A Frame: rows copied out of the ring into buffers it owns, ready to be exported as Arrow.
//
// Column 0 is `time` (timestamp[ns, UTC] = mono_ns + the sampler's clock anchor), column 1 is
// `mono_ns` (CLOCK_MONOTONIC ns of the tick, the same clock as time.monotonic_ns()), then one
// column per metric. Each column is one contiguous array of 8-byte cells plus an Arrow validity
// bitmap (LSB order). A FrameBuilder fills the buffers; once built a Frame is immutable (const
// access only) and shared by every exported Arrow struct that points into it (a shared_ptr held
// in the struct's private data).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stroboscope/column.hpp"
#include "stroboscope/ring.hpp"

namespace stroboscope {

struct FrameColumn {
  ColumnSpec spec;
  bool is_timestamp = false;                        // the `time` column: timestamp[ns, UTC]
  std::unique_ptr<const std::uint64_t[]> cells;     // length() cells
  std::unique_ptr<const std::uint64_t[]> validity;  // ceil(length() / 64) words
  std::int64_t null_count = 0;
};

class Frame {
 public:
  // Shared (through shared_ptr), never copied or moved: a built frame stays as it was built.
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;

  [[nodiscard]] std::int64_t length() const noexcept { return length_; }
  [[nodiscard]] const std::vector<FrameColumn>& columns() const noexcept { return columns_; }
  // Ring index of row 0 of this frame.
  [[nodiscard]] std::uint64_t first_row() const noexcept { return first_row_; }
  // Rows that were wanted but overwritten before they were copied.
  [[nodiscard]] std::uint64_t rows_lost() const noexcept { return rows_lost_; }

 private:
  friend class FrameBuilder;
  Frame(std::vector<FrameColumn> columns, std::int64_t length, std::uint64_t first_row,
        std::uint64_t rows_lost) noexcept;

  std::vector<FrameColumn> columns_;
  std::int64_t length_;
  std::uint64_t first_row_;
  std::uint64_t rows_lost_;
};

// Builds one Frame from a ring copy: allocates buffers for `rows` rows of `metric_columns` (the
// ring's columns, mono_ns first) starting at ring index `first_row`, says where the ring copy
// writes, then finish() turns the buffers into the immutable Frame. Used by the sampler's
// snapshot/drain.
class FrameBuilder {
 public:
  // Cells are left uninitialised (the ring copy writes every one), validity zeroed.
  FrameBuilder(const std::vector<ColumnSpec>& metric_columns, std::uint64_t rows,
               std::uint64_t first_row);

  // Where Ring::copy() writes each metric column (0 = mono_ns): the frame's columns 1, 2, ...
  [[nodiscard]] std::vector<ColumnDest> ring_destinations();

  // Finishes the frame after the ring copy: drops `skip` leading rows that were overwritten
  // while copying, fills `time` from `mono_ns` and the anchor, and counts nulls. `rows_lost`
  // counts the rows wanted before `first_row` that were already gone; the `skip` rows are added
  // to it. Leaves the builder empty.
  [[nodiscard]] std::shared_ptr<Frame> finish(std::uint64_t skip,
                                              std::int64_t realtime_minus_mono_ns,
                                              std::uint64_t rows_lost = 0) &&;

 private:
  struct Column {
    ColumnSpec spec;
    bool is_timestamp = false;
    std::unique_ptr<std::uint64_t[]> cells;
    std::unique_ptr<std::uint64_t[]> validity;
  };

  std::vector<Column> columns_;
  std::uint64_t rows_;
  std::uint64_t first_row_;
};

}  // namespace stroboscope
