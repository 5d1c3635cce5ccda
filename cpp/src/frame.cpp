// Frame buffers: allocation, dropping rows torn by a concurrent overwrite, the `time` column.
#include "stroboscope/frame.hpp"

#include <bit>
#include <cstring>
#include <utility>

#include "stroboscope/ring.hpp"

namespace stroboscope {
namespace {

std::uint64_t words_for(std::uint64_t rows) { return (rows + 63) / 64; }

std::int64_t count_nulls(const std::uint64_t* validity, std::uint64_t n) noexcept {
  std::uint64_t set = 0;
  const std::uint64_t full_words = n / 64;
  for (std::uint64_t w = 0; w < full_words; ++w) set += std::popcount(validity[w]);
  const std::uint64_t rest = n % 64;
  if (rest != 0) set += std::popcount(validity[full_words] & ((std::uint64_t{1} << rest) - 1));
  return static_cast<std::int64_t>(n - set);
}

}  // namespace

Frame::Frame(std::vector<FrameColumn> columns, std::int64_t length, std::uint64_t first_row,
             std::uint64_t rows_lost) noexcept
    : columns_(std::move(columns)), length_(length), first_row_(first_row), rows_lost_(rows_lost) {}

FrameBuilder::FrameBuilder(const std::vector<ColumnSpec>& metric_columns, std::uint64_t rows,
                           std::uint64_t first_row)
    : rows_(rows), first_row_(first_row) {
  columns_.reserve(metric_columns.size() + 2);
  Column time;
  time.spec = ColumnSpec{"time", "ns", DType::kInt64, Kind::kGauge,
                         "UTC time of the tick (CLOCK_MONOTONIC plus a wall-clock anchor)."};
  time.is_timestamp = true;
  columns_.push_back(std::move(time));
  for (const ColumnSpec& spec : metric_columns) {
    Column col;
    col.spec = spec;
    columns_.push_back(std::move(col));
  }
  for (Column& col : columns_) {
    // for_overwrite: the ring copy writes every cell, so zero-filling them first would be a
    // wasted pass over the largest buffer. Validity is OR-ed into, so it starts zeroed.
    col.cells = std::make_unique_for_overwrite<std::uint64_t[]>(rows == 0 ? 1 : rows);
    col.validity = std::make_unique<std::uint64_t[]>(words_for(rows) + 1);
  }
}

std::vector<ColumnDest> FrameBuilder::ring_destinations() {
  std::vector<ColumnDest> dest;
  dest.reserve(columns_.size() - 1);
  for (std::size_t c = 1; c < columns_.size(); ++c) {
    dest.push_back(ColumnDest{columns_[c].cells.get(), columns_[c].validity.get()});
  }
  return dest;
}

std::shared_ptr<Frame> FrameBuilder::finish(std::uint64_t skip,
                                            std::int64_t realtime_minus_mono_ns,
                                            std::uint64_t rows_lost) && {
  std::uint64_t n = rows_;
  if (skip > n) skip = n;
  if (skip != 0) {
    const std::uint64_t kept = n - skip;
    for (std::size_t c = 1; c < columns_.size(); ++c) {
      Column& col = columns_[c];
      std::memmove(col.cells.get(), col.cells.get() + skip, kept * sizeof(std::uint64_t));
      auto shifted = std::make_unique<std::uint64_t[]>(words_for(kept) + 1);
      copy_validity_bits(col.validity.get(), skip, kept, shifted.get(), 0);
      col.validity = std::move(shifted);
    }
    n = kept;
  }
  // time = mono_ns + anchor; mono_ns is present in every row the sampler writes.
  Column& time = columns_[0];
  const Column& mono = columns_[1];
  for (std::uint64_t i = 0; i < n; ++i) {
    time.cells[i] = mono.cells[i] + static_cast<std::uint64_t>(realtime_minus_mono_ns);
  }
  std::memcpy(time.validity.get(), mono.validity.get(), words_for(n) * sizeof(std::uint64_t));

  std::vector<FrameColumn> done;
  done.reserve(columns_.size());
  for (Column& col : columns_) {
    const std::int64_t nulls = count_nulls(col.validity.get(), n);
    done.push_back(FrameColumn{std::move(col.spec), col.is_timestamp, std::move(col.cells),
                               std::move(col.validity), nulls});
  }
  columns_.clear();
  // Not make_shared: Frame's constructor is private to this builder.
  return std::shared_ptr<Frame>(
      new Frame(std::move(done), static_cast<std::int64_t>(n), first_row_ + skip, rows_lost + skip));
}

}  // namespace stroboscope
