// Frame buffers: allocation, dropping rows torn by a concurrent overwrite, the `time` column.
#include "stroboscope/frame.hpp"

#include <bit>
#include <cstring>

#include "stroboscope/ring.hpp"

namespace stroboscope {
namespace {

std::uint64_t words_for(std::uint64_t rows) { return (rows + 63) / 64; }

void alloc_column(FrameColumn& col, std::uint64_t rows) {
  // for_overwrite: the ring copy writes every cell, so zero-filling them first would be a
  // wasted pass over the largest buffer. Validity is OR-ed into, so it starts zeroed.
  col.cells = std::make_unique_for_overwrite<std::uint64_t[]>(rows == 0 ? 1 : rows);
  col.validity = std::make_unique<std::uint64_t[]>(words_for(rows) + 1);
}

}  // namespace

Frame::Frame(const std::vector<ColumnSpec>& metric_columns, std::uint64_t rows)
    : length_(static_cast<std::int64_t>(rows)) {
  columns_.reserve(metric_columns.size() + 2);
  FrameColumn time;
  time.spec = ColumnSpec{"time", "ns", DType::kInt64, Kind::kGauge,
                         "UTC time of the tick (CLOCK_MONOTONIC plus a wall-clock anchor)."};
  time.is_timestamp = true;
  columns_.push_back(std::move(time));
  for (const ColumnSpec& spec : metric_columns) {
    FrameColumn col;
    col.spec = spec;
    columns_.push_back(std::move(col));
  }
  for (FrameColumn& col : columns_) alloc_column(col, rows);
}

void Frame::finish(std::uint64_t skip, std::int64_t realtime_minus_mono_ns) {
  const auto rows = static_cast<std::uint64_t>(length_);
  if (skip > rows) skip = rows;
  if (skip != 0) {
    const std::uint64_t kept = rows - skip;
    for (std::size_t c = 1; c < columns_.size(); ++c) {
      FrameColumn& col = columns_[c];
      std::memmove(col.cells.get(), col.cells.get() + skip, kept * sizeof(std::uint64_t));
      auto shifted = std::make_unique<std::uint64_t[]>(words_for(kept) + 1);
      copy_validity_bits(col.validity.get(), skip, kept, shifted.get(), 0);
      col.validity = std::move(shifted);
    }
    length_ = static_cast<std::int64_t>(kept);
    first_row += skip;
    rows_lost += skip;
  }
  const auto n = static_cast<std::uint64_t>(length_);
  // time = mono_ns + anchor; mono_ns is present in every row the sampler writes.
  FrameColumn& time = columns_[0];
  const FrameColumn& mono = columns_[1];
  for (std::uint64_t i = 0; i < n; ++i) {
    time.cells[i] = mono.cells[i] + static_cast<std::uint64_t>(realtime_minus_mono_ns);
  }
  std::memcpy(time.validity.get(), mono.validity.get(), words_for(n) * sizeof(std::uint64_t));
  for (FrameColumn& col : columns_) {
    std::uint64_t set = 0;
    const std::uint64_t full_words = n / 64;
    for (std::uint64_t w = 0; w < full_words; ++w) set += std::popcount(col.validity[w]);
    const std::uint64_t rest = n % 64;
    if (rest != 0) {
      set += std::popcount(col.validity[full_words] & ((std::uint64_t{1} << rest) - 1));
    }
    col.null_count = static_cast<std::int64_t>(n - set);
  }
}

}  // namespace stroboscope
