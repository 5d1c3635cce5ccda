// A Frame: rows copied out of the ring into one buffer it owns, ready to be exported as Arrow.
//
// Column 0 is `time` (timestamp[ns, UTC] = mono_ns + the sampler's clock anchor), column 1 is
// `mono_ns` (CLOCK_MONOTONIC ns of the tick, the same clock as time.monotonic_ns()), then one
// column per metric. Each column is a contiguous array of 8-byte cells plus an Arrow validity
// bitmap (LSB order) over the same rows, both starting at the ring block that held the frame's
// first row: row i of the frame is cell offset() + i (the Arrow offset of every exported column),
// so rows the ring copy had to drop are skipped, never moved. A column with no null in the frame
// has no bitmap (null_count == 0, validity == nullptr, as Arrow allows). A FrameBuilder fills the
// buffer; once built a Frame is immutable (const access only) and shared by every exported Arrow
// struct that points into it (a shared_ptr held in the struct's private data). When the last
// owner drops it, its buffer goes back to the FrameBufferPool it came from, for the next copy.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stroboscope/column.hpp"
#include "stroboscope/failed_reads.hpp"
#include "stroboscope/ring.hpp"

namespace stroboscope {

// Frame buffers kept for reuse, so a copy writes into pages already mapped and touched instead
// of faulting in fresh ones (a 1M-row snapshot's 200 MiB cost more in first-touch page faults
// than in copying). A buffer comes back only when the frame that used it is destroyed, that is
// when no Arrow consumer holds any of its columns any more. Keeps at most kKeep buffers; any
// thread may give or take (lock-free slots: a fork in the middle leaves nothing locked).
class FrameBufferPool {
 public:
  static constexpr std::size_t kKeep = 2;
  FrameBufferPool() = default;
  FrameBufferPool(const FrameBufferPool&) = delete;
  FrameBufferPool& operator=(const FrameBufferPool&) = delete;
  ~FrameBufferPool();

  // 64-byte aligned room for at least `words` words (content unspecified), kept or new. Throws
  // std::bad_alloc.
  [[nodiscard]] std::uint64_t* take(std::size_t words);
  // Returns a buffer from take(); when every slot is full, the displaced buffer is freed.
  void give(std::uint64_t* buffer) noexcept;
  // Words of a buffer from take().
  [[nodiscard]] static std::size_t size_of(const std::uint64_t* buffer) noexcept;
  static void free_buffer(std::uint64_t* buffer) noexcept;

 private:
  std::atomic<std::uint64_t*> slots_[kKeep] = {};
};

// One source's columns in a frame, and when its reads began to fail (FailedReads).
struct FrameFailedReads {
  std::size_t first_column = 0;  // frame column index (0 is `time`, 1 is `mono_ns`)
  std::size_t columns = 0;
  FailedReadStarts failed;
};

struct FrameColumn {
  ColumnSpec spec;
  bool is_timestamp = false;                  // the `time` column: timestamp[ns, UTC]
  const std::uint64_t* cells = nullptr;       // offset + length cells
  const std::uint64_t* validity = nullptr;    // bits [offset, offset + length); null: no nulls
  std::int64_t null_count = 0;
  std::int64_t offset = 0;                    // the frame's offset()

  // Cell and presence of row i of the frame.
  [[nodiscard]] std::uint64_t cell(std::int64_t i) const noexcept { return cells[offset + i]; }
  [[nodiscard]] bool valid(std::int64_t i) const noexcept {
    if (validity == nullptr) return true;
    const std::int64_t bit = offset + i;
    return ((validity[bit / 64] >> (bit % 64)) & 1U) != 0;
  }
};

class Frame {
 public:
  // Shared (through shared_ptr), never copied or moved: a built frame stays as it was built.
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;
  ~Frame();

  [[nodiscard]] std::int64_t length() const noexcept { return length_; }
  // Cells before row 0 in every column's buffers (the Arrow offset).
  [[nodiscard]] std::int64_t offset() const noexcept { return offset_; }
  [[nodiscard]] const std::vector<FrameColumn>& columns() const noexcept { return columns_; }
  // Ring index of row 0 of this frame.
  [[nodiscard]] std::uint64_t first_row() const noexcept { return first_row_; }
  // Rows that were wanted but overwritten before they were copied.
  [[nodiscard]] std::uint64_t rows_lost() const noexcept { return rows_lost_; }
  // Per source of a sampler's frame, when its reads began to fail (copied when the frame was
  // made); empty for frames built without (FrameBuilder::set_failed_reads).
  [[nodiscard]] const std::vector<FrameFailedReads>& failed_reads() const noexcept {
    return failed_reads_;
  }

 private:
  friend class FrameBuilder;
  Frame(std::vector<FrameColumn> columns, std::int64_t length, std::int64_t offset,
        std::uint64_t first_row, std::uint64_t rows_lost, std::uint64_t* buffer,
        std::shared_ptr<FrameBufferPool> pool) noexcept;

  std::vector<FrameColumn> columns_;
  std::int64_t length_;
  std::int64_t offset_;
  std::uint64_t first_row_;
  std::uint64_t rows_lost_;
  std::uint64_t* buffer_;                  // every column's cells and validity
  std::shared_ptr<FrameBufferPool> pool_;  // where buffer_ goes back (null: freed)
  std::vector<FrameFailedReads> failed_reads_;
};

// Builds one Frame from a ring copy of rows [from, to): takes a buffer from `pool` (or allocates
// one when `pool` is null) with room for the whole ring blocks Ring::copy() writes, says where
// the copy goes, then finish() turns the buffer into the immutable Frame. Used by the sampler's
// snapshot/drain.
class FrameBuilder {
 public:
  FrameBuilder(const std::vector<ColumnSpec>& metric_columns, std::uint64_t from,
               std::uint64_t to, std::shared_ptr<FrameBufferPool> pool = nullptr);
  FrameBuilder(const FrameBuilder&) = delete;
  FrameBuilder& operator=(const FrameBuilder&) = delete;
  ~FrameBuilder();

  // Where Ring::copy(from, to, ...) writes each metric column (0 = mono_ns): the frame's
  // columns 1, 2, ...
  [[nodiscard]] const std::vector<ColumnDest>& ring_destinations() const noexcept {
    return dest_;
  }
  // The frame's sources' failed-read logs, handed to the Frame by finish().
  void set_failed_reads(std::vector<FrameFailedReads> logs) noexcept {
    failed_reads_ = std::move(logs);
  }
  // Bytes the ring copy writes (to choose streaming stores for large copies).
  [[nodiscard]] std::size_t copy_bytes() const noexcept;

  // Finishes the frame after the ring copy returned `first_intact`: rows [from, first_intact)
  // were overwritten while copying and are left out (counted in rows_lost, with the `rows_lost`
  // rows wanted before `from` that were already gone), `time` is filled from `mono_ns` and the
  // anchor, nulls are counted. Leaves the builder empty.
  [[nodiscard]] std::shared_ptr<Frame> finish(std::uint64_t first_intact,
                                              std::int64_t realtime_minus_mono_ns,
                                              std::uint64_t rows_lost = 0) &&;

 private:
  std::vector<ColumnSpec> specs_;  // time, then the metric columns
  std::uint64_t from_;
  std::uint64_t to_;
  std::uint64_t base_;  // Ring::block_start(from): the row of cell 0
  std::uint64_t rows_;  // cells per column: Ring::copy_rows(from, to)
  std::shared_ptr<FrameBufferPool> pool_;
  std::uint64_t* buffer_ = nullptr;
  std::vector<std::uint64_t*> cells_;     // per frame column
  std::vector<std::uint64_t*> validity_;  // per frame column (time: unused, it shares mono's)
  std::vector<ColumnDest> dest_;
  std::vector<FrameFailedReads> failed_reads_;
};

}  // namespace stroboscope
