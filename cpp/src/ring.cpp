// The columnar SPSC ring: storage, the producer's push and the consumer's consistent copy.
#include "stroboscope/ring.hpp"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <new>
#include <stdexcept>

namespace stroboscope {
namespace {

constexpr std::size_t kAlign = 64;

// n words times `count` (columns), zeroed and 64-byte aligned. A size that does not fit in
// size_t throws std::length_error: a wrapped product would allocate a few bytes for a huge ring.
std::uint64_t* alloc_words(std::size_t n, std::size_t count = 1) {
  std::size_t words = 0;
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(n, count, &words) ||
      __builtin_mul_overflow(words, sizeof(std::uint64_t), &bytes) ||
      bytes > SIZE_MAX - kAlign) {
    throw std::length_error("ring size overflows: too many columns times rows");
  }
  bytes = ((bytes + kAlign - 1) / kAlign) * kAlign;
  void* p = std::aligned_alloc(kAlign, bytes == 0 ? kAlign : bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);  // touch every page now, not on the sampler's first lap
  return static_cast<std::uint64_t*>(p);
}

// Load of a cell or validity word the producer may be writing concurrently. Acquire pairs with
// the producer's release store of that word: having read a value of row j, this thread also sees
// everything the producer did before it, including write_begin_ = j + 1 (the seqlock re-check in
// Ring::copy relies on that). On x86 an acquire load is a plain load.
inline std::uint64_t load_cell(const std::uint64_t* p) noexcept {
  return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(p))
      .load(std::memory_order_acquire);
}

// Up to 64 bits of `src` starting at bit `bit` (bits past the end read as whatever the next word
// holds; callers mask).
inline std::uint64_t read_bits64(const std::uint64_t* src, std::uint64_t bit) noexcept {
  const std::uint64_t w = bit >> 6;
  const unsigned off = static_cast<unsigned>(bit & 63);
  std::uint64_t v = load_cell(src + w) >> off;
  if (off != 0) v |= load_cell(src + w + 1) << (64 - off);
  return v;
}

}  // namespace

Ring::Ring(std::size_t num_columns, std::uint64_t capacity)
    : num_columns_(num_columns),
      capacity_(capacity),
      mask_(capacity - 1),
      words_per_column_(words_per_column(capacity)),
      write_begin_(&own_counters_[0]),
      head_(&own_counters_[1]) {
  assert(capacity >= 2 && (capacity & (capacity - 1)) == 0);
  cells_ = alloc_words(capacity_, num_columns_);
  // One spare word at the end so read_bits64 may look one word past a column's last word.
  try {
    validity_ = alloc_words(num_columns_ * words_per_column_ + 1);  // < cells: cannot overflow
  } catch (...) {
    std::free(cells_);  // the destructor does not run for a constructor that throws
    throw;
  }
  release_ = [cells = cells_, validity = validity_] {
    std::free(cells);
    std::free(validity);
  };
}

Ring::Ring(std::size_t num_columns, std::uint64_t capacity, RingStorage storage)
    : num_columns_(num_columns),
      capacity_(capacity),
      mask_(capacity - 1),
      words_per_column_(words_per_column(capacity)),
      cells_(storage.cells),
      validity_(storage.validity),
      release_(std::move(storage.release)),
      write_begin_(storage.write_begin),
      head_(storage.head) {
  assert(capacity >= 2 && (capacity & (capacity - 1)) == 0);
  // Fresh storage holds zeros; counters found in it are continued from its last complete row.
  producer_next_ = head_->load(std::memory_order_relaxed);
  write_begin_->store(producer_next_, std::memory_order_relaxed);
}

Ring::~Ring() {
  if (release_) release_();
}

std::size_t Ring::memory_bytes() const noexcept {
  return (num_columns_ * capacity_ + num_columns_ * words_per_column_) * sizeof(std::uint64_t);
}

void Ring::push(const std::uint64_t* cells, const std::uint8_t* valid) noexcept {
  const std::uint64_t j = producer_next_;
  const std::uint64_t slot = j & mask_;
  // Announce that row j (and so the slot of row j - capacity) is about to change. Relaxed is
  // enough here: the cell stores below are releases, so they publish this store to any reader
  // that observes one of them (see load_cell).
  write_begin_->store(j + 1, std::memory_order_relaxed);

  const std::uint64_t word = slot >> 6;
  const std::uint64_t bit = std::uint64_t{1} << (slot & 63);
  for (std::size_t c = 0; c < num_columns_; ++c) {
    // Release: a reader that sees this cell's new value also sees write_begin_ = j + 1.
    std::atomic_ref<std::uint64_t>(column(c)[slot]).store(cells[c], std::memory_order_release);
    std::atomic_ref<std::uint64_t> v(validity(c)[word]);
    // Single writer: a relaxed load + release store cannot lose an update; readers see the old
    // or the new word, and a new word publishes write_begin_ like a cell does.
    const std::uint64_t old = v.load(std::memory_order_relaxed);
    v.store(valid[c] != 0 ? (old | bit) : (old & ~bit), std::memory_order_release);
  }
  producer_next_ = j + 1;
  // Release: a consumer that acquires head_ == j + 1 sees all of row j's cells.
  head_->store(j + 1, std::memory_order_release);
}

std::uint64_t Ring::copy(std::uint64_t from, std::uint64_t to,
                         const ColumnDest* dest) const noexcept {
  if (to <= from) return to;
  const std::uint64_t n = to - from;
  // Copy in at most two contiguous pieces per column (the range may wrap around the end).
  const std::uint64_t first_slot = from & mask_;
  const std::uint64_t piece1 = std::min<std::uint64_t>(n, capacity_ - first_slot);
  const std::uint64_t piece2 = n - piece1;
  for (std::size_t c = 0; c < num_columns_; ++c) {
    const std::uint64_t* src = column(c);
    std::uint64_t* dst = dest[c].cells;
    for (std::uint64_t i = 0; i < piece1; ++i) dst[i] = load_cell(src + first_slot + i);
    for (std::uint64_t i = 0; i < piece2; ++i) dst[piece1 + i] = load_cell(src + i);
    copy_validity_bits(validity(c), first_slot, piece1, dest[c].validity, 0);
    if (piece2 != 0) copy_validity_bits(validity(c), 0, piece2, dest[c].validity, piece1);
  }
  // The seqlock re-check. If any cell copied above came from a row the producer started after
  // our copy began, its acquire load (load_cell) makes this load see write_begin_ at least one
  // past that row. write_begin_ == b means rows up to b - 1 may have been written, which reuses
  // the slots of rows up to b - 1 - capacity: those copies are discarded.
  const std::uint64_t begun = write_begin_->load(std::memory_order_relaxed);
  const std::uint64_t first_intact = begun > capacity_ ? begun - capacity_ : 0;
  return std::min(to, std::max(from, first_intact));
}

void copy_validity_bits(const std::uint64_t* src, std::uint64_t src_bit, std::uint64_t n,
                        std::uint64_t* dst, std::uint64_t dst_bit) noexcept {
  // dst bits in [dst_bit, dst_bit + n) must be zero on entry; they are OR-ed in.
  while (n > 0) {
    const unsigned dst_off = static_cast<unsigned>(dst_bit & 63);
    const std::uint64_t take = std::min<std::uint64_t>(n, 64 - dst_off);
    std::uint64_t bits = read_bits64(src, src_bit);
    if (take < 64) bits &= (std::uint64_t{1} << take) - 1;
    dst[dst_bit >> 6] |= bits << dst_off;
    src_bit += take;
    dst_bit += take;
    n -= take;
  }
}

}  // namespace stroboscope
