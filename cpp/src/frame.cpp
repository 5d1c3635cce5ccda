// Frame buffers: the reuse pool, the layout of one frame's buffer, the `time` column, nulls.
#include "stroboscope/frame.hpp"

#include "stroboscope/large_memory.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace stroboscope {
namespace {

constexpr std::size_t kHeaderWords = 8;  // a cache line before the data: the size, then padding
constexpr std::size_t kLineWords = 8;

std::size_t round_to_line(std::size_t words) { return (words + kLineWords - 1) / kLineWords * kLineWords; }

// A kept buffer serves a request it is not more than about twice the size of (small frames all
// share one size class): bigger ones would hold memory a smaller pattern of copies does not need.
bool fits(std::size_t size, std::size_t words) { return size >= words && size / 2 <= words + 4096; }

// Set bits of `words` in the bit range [first, first + n).
std::uint64_t count_set(const std::uint64_t* words, std::uint64_t first, std::uint64_t n) noexcept {
  std::uint64_t set = 0;
  while (n > 0) {
    const unsigned off = static_cast<unsigned>(first % 64);
    const std::uint64_t take = std::min<std::uint64_t>(n, 64 - off);
    std::uint64_t w = words[first / 64] >> off;
    if (take < 64) w &= (std::uint64_t{1} << take) - 1;
    set += static_cast<std::uint64_t>(std::popcount(w));
    first += take;
    n -= take;
  }
  return set;
}

}  // namespace

// ------------------------------------------------------------------------------- pool

FrameBufferPool::~FrameBufferPool() {
  for (auto& slot : slots_) free_buffer(slot.exchange(nullptr, std::memory_order_acquire));
}

std::size_t FrameBufferPool::size_of(const std::uint64_t* buffer) noexcept {
  return static_cast<std::size_t>(buffer[-static_cast<std::ptrdiff_t>(kHeaderWords)]);
}

void FrameBufferPool::free_buffer(std::uint64_t* buffer) noexcept {
  if (buffer != nullptr) {
    free_large(buffer - kHeaderWords, (kHeaderWords + size_of(buffer)) * sizeof(std::uint64_t));
  }
}

std::uint64_t* FrameBufferPool::take(std::size_t words) {
  std::uint64_t* found = nullptr;
  for (auto& slot : slots_) {
    // acq_rel: acquire pairs with give()'s release, after which the last frame that used the
    // buffer is gone (every read of it happened before its shared_ptr count reached zero).
    std::uint64_t* p = slot.exchange(nullptr, std::memory_order_acq_rel);
    if (p == nullptr) continue;
    if (!fits(size_of(p), words)) {
      free_buffer(p);  // sized for another pattern of copies: give the memory back
    } else if (found == nullptr) {
      found = p;
    } else {
      give(p);  // a second fitting buffer stays for the next copy
    }
  }
  if (found != nullptr) return found;
  // Room to grow: drains of about the same number of rows then share one buffer.
  const std::size_t size = round_to_line(words + words / 8);
  if (size > SIZE_MAX / sizeof(std::uint64_t) - kHeaderWords) throw std::bad_alloc();
  void* raw = allocate_large((kHeaderWords + size) * sizeof(std::uint64_t), 64);
  if (raw == nullptr) throw std::bad_alloc();
  auto* header = static_cast<std::uint64_t*>(raw);
  header[0] = size;
  return header + kHeaderWords;
}

void FrameBufferPool::give(std::uint64_t* buffer) noexcept {
  if (buffer == nullptr) return;
  for (auto& slot : slots_) {
    std::uint64_t* expected = nullptr;
    // release: the frame's reads of the buffer happen before a later take() acquires it.
    if (slot.compare_exchange_strong(expected, buffer, std::memory_order_acq_rel,
                                     std::memory_order_relaxed)) {
      return;
    }
  }
  free_buffer(buffer);  // every slot taken: keep the pool's memory bounded
}

// ------------------------------------------------------------------------------- frame

Frame::Frame(std::vector<FrameColumn> columns, std::int64_t length, std::int64_t offset,
             std::uint64_t first_row, std::uint64_t rows_lost, std::uint64_t* buffer,
             std::shared_ptr<FrameBufferPool> pool) noexcept
    : columns_(std::move(columns)),
      length_(length),
      offset_(offset),
      first_row_(first_row),
      rows_lost_(rows_lost),
      buffer_(buffer),
      pool_(std::move(pool)) {}

Frame::~Frame() {
  if (pool_ != nullptr) {
    pool_->give(buffer_);
  } else {
    FrameBufferPool::free_buffer(buffer_);
  }
}

// ------------------------------------------------------------------------------- builder

FrameBuilder::FrameBuilder(const std::vector<ColumnSpec>& metric_columns, std::uint64_t from,
                           std::uint64_t to, std::shared_ptr<FrameBufferPool> pool)
    : from_(from),
      to_(to < from ? from : to),
      base_(Ring::block_start(from)),
      rows_(Ring::copy_rows(from, to_)),
      pool_(std::move(pool)) {
  specs_.reserve(metric_columns.size() + 1);
  specs_.push_back(ColumnSpec{"time", "ns", DType::kInt64, Kind::kGauge,
                              "UTC time of the tick (CLOCK_MONOTONIC plus a wall-clock anchor)."});
  specs_.insert(specs_.end(), metric_columns.begin(), metric_columns.end());
  // One buffer: every column's cells (whole ring blocks, so each run starts on a cache line),
  // then every metric column's validity words. At least a line each: no pointer is null, even
  // for an empty frame.
  const std::size_t cells = std::max<std::size_t>(rows_, kLineWords);
  const std::size_t words = round_to_line(std::max<std::size_t>(rows_ / kBlockRows, 1));
  const std::size_t ncols = specs_.size();
  const std::size_t total = ncols * cells + (ncols - 1) * words;
  buffer_ = pool_ != nullptr ? pool_->take(total) : FrameBufferPool().take(total);
  cells_.resize(ncols);
  validity_.resize(ncols, nullptr);
  dest_.reserve(ncols - 1);
  for (std::size_t c = 0; c < ncols; ++c) cells_[c] = buffer_ + c * cells;
  for (std::size_t c = 1; c < ncols; ++c) {
    validity_[c] = buffer_ + ncols * cells + (c - 1) * words;
    dest_.push_back(ColumnDest{cells_[c], validity_[c]});
  }
}

FrameBuilder::~FrameBuilder() {
  // Not finished (the copy threw, or finish() was never called): the buffer goes back.
  if (buffer_ == nullptr) return;
  if (pool_ != nullptr) {
    pool_->give(buffer_);
  } else {
    FrameBufferPool::free_buffer(buffer_);
  }
}

std::size_t FrameBuilder::copy_bytes() const noexcept {
  return static_cast<std::size_t>(rows_) * dest_.size() * sizeof(std::uint64_t);
}

std::shared_ptr<Frame> FrameBuilder::finish(std::uint64_t first_intact,
                                            std::int64_t realtime_minus_mono_ns,
                                            std::uint64_t rows_lost) && {
  if (first_intact < from_) first_intact = from_;
  if (first_intact > to_) first_intact = to_;
  const std::uint64_t n = to_ - first_intact;
  // An empty frame points at the start of its (one-line) buffers: an offset past them would
  // name memory the frame does not hold.
  const std::uint64_t off = n == 0 ? 0 : first_intact - base_;
  // time = mono_ns + anchor, over the frame's rows only.
  std::uint64_t* time = cells_[0];
  const std::uint64_t* mono = cells_[1];
  const auto anchor = static_cast<std::uint64_t>(realtime_minus_mono_ns);
  for (std::uint64_t i = off; i < off + n; ++i) time[i] = mono[i] + anchor;

  std::vector<FrameColumn> done;
  done.reserve(specs_.size());
  for (std::size_t c = 0; c < specs_.size(); ++c) {
    FrameColumn col;
    col.spec = std::move(specs_[c]);
    col.is_timestamp = c == 0;
    col.cells = cells_[c];
    col.offset = static_cast<std::int64_t>(off);
    if (c > 0) {
      // One word per 64 cells: a column whose rows are all present keeps no bitmap at all.
      col.null_count = static_cast<std::int64_t>(n - count_set(validity_[c], off, n));
      col.validity = col.null_count == 0 ? nullptr : validity_[c];
    }
    done.push_back(std::move(col));
  }
  // `time` is present where mono_ns is: the same bitmap (read-only from here on).
  done[0].null_count = done[1].null_count;
  done[0].validity = done[1].validity;
  // Not make_shared: Frame's constructor is private to this builder. Until the Frame exists the
  // builder owns the buffer (its destructor returns it when `new` throws); from then on the
  // Frame does (a failed shared_ptr deletes it, which returns it).
  std::unique_ptr<Frame> frame(new Frame(std::move(done), static_cast<std::int64_t>(n),
                                         static_cast<std::int64_t>(off), first_intact,
                                         rows_lost + (first_intact - from_), buffer_, pool_));
  buffer_ = nullptr;
  frame->failed_reads_ = std::move(failed_reads_);
  return std::shared_ptr<Frame>(std::move(frame));
}

}  // namespace stroboscope
