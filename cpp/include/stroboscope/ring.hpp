// A single-producer / single-consumer columnar ring of 8-byte cells with a validity bit per cell.
//
// Layout: row blocks. The ring is `blocks()` blocks of kBlockRows (64) rows. Inside a block the
// columns go in groups of 8: each column of the group as 64 contiguous cells (512 bytes, eight
// cache lines), then the group's validity words, one per column (bit r of column c's word = cell
// (c, r) present: exactly Arrow's LSB bitmap for those 64 rows), padded to a cache line:
//
//   block: [col 0: 64 cells]...[col 7: 64 cells][8 validity words][col 8: 64 cells]...
//          ...[col C-1: 64 cells][validity words of the last group][pad to a cache line]
//
// Row j lives in block (j / 64) % blocks(), at row j % 64 of it. A push therefore stays inside
// one block (C * 520 bytes: a few pages, and the same pages for 64 pushes in a row) instead of
// touching one page per column; a copy moves whole 512-byte runs per column. The validity line
// after every 8 columns is also what spreads a row's cells over every set of the L1 cache: with
// runs exactly 512 bytes apart, a row's cells would fall into 8 of its 64 sets and evict one
// another at a hundred columns and more. Capacity (rows kept) is a power of two; a ring of fewer
// than 64 rows still has one whole block and keeps only its newest `capacity` rows.
//
// The producer (the sampler thread) never blocks: when the ring is full it overwrites the oldest
// row. The consumer copies whole blocks and then checks, seqlock-style, which of the rows it
// wanted the producer may have overwritten during the copy; those are reported so the caller can
// leave them out (an Arrow offset, not a memmove). The producer's stores go through
// std::atomic_ref (release), and so do the consumer's loads (acquire; plain moves on x86), which
// is what lets ThreadSanitizer check the protocol (it does not model fences) - except a copy far
// larger than the caches on x86 outside ThreadSanitizer, which moves 16 bytes a load and relies
// on x86 keeping loads in order plus a compiler barrier before the re-check (ring.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace stroboscope {

inline constexpr std::uint64_t kBlockRows = 64;

// Where a block copy goes, for one column: room for Ring::copy_rows(from, to) cells and
// Ring::copy_rows(from, to) / 64 validity words. Cell i (bit i % 64 of word i / 64) is ring row
// Ring::block_start(from) + i.
struct ColumnDest {
  std::uint64_t* cells;
  std::uint64_t* validity;
};

// The memory a ring lives in, when it is not the heap: the spool maps a file MAP_SHARED and lays
// the blocks and the two producer counters out in it (see spool.hpp), so every row pushed is in
// the file the moment it is written. `release` unmaps it when the ring goes.
struct RingStorage {
  std::uint64_t* blocks = nullptr;  // Ring::storage_words(columns, capacity) words, 64-aligned
  std::atomic<std::uint64_t>* write_begin = nullptr;
  std::atomic<std::uint64_t>* head = nullptr;
  std::function<void()> release;
};

class Ring {
 public:
  // `capacity` must be a power of two >= 2 (checked by the caller; asserted here).
  Ring(std::size_t num_columns, std::uint64_t capacity);
  // A ring in caller-provided memory (zeroed, or holding a previous run's rows and counters).
  Ring(std::size_t num_columns, std::uint64_t capacity, RingStorage storage);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Blocks of a ring of `capacity` rows (at least one).
  [[nodiscard]] static std::uint64_t blocks(std::uint64_t capacity) noexcept {
    return capacity < kBlockRows ? 1 : capacity / kBlockRows;
  }
  // Columns per group, and the offsets (in words, from the block's start) of column c's first
  // cell and of its validity word in a ring of `num_columns` columns.
  static constexpr std::size_t kGroupColumns = 8;
  [[nodiscard]] static std::size_t cell_offset(std::size_t c) noexcept {
    return c / kGroupColumns * kGroupWords + c % kGroupColumns * kBlockRows;
  }
  [[nodiscard]] static std::size_t validity_offset(std::size_t num_columns,
                                                   std::size_t c) noexcept {
    const std::size_t group = c / kGroupColumns * kGroupColumns;
    const std::size_t in_group = std::min(kGroupColumns, num_columns - group);
    return group / kGroupColumns * kGroupWords + in_group * kBlockRows + c % kGroupColumns;
  }
  // 8-byte words of one block: the cells, and a cache line of validity words per group.
  [[nodiscard]] static std::size_t block_words(std::size_t num_columns) noexcept {
    return num_columns * kBlockRows + (num_columns + kGroupColumns - 1) / kGroupColumns * 8;
  }
  // 8-byte words of the whole ring; throws std::length_error when that does not fit in size_t
  // (a wrapped product would allocate or map a few bytes for a huge ring).
  [[nodiscard]] static std::size_t storage_words(std::size_t num_columns, std::uint64_t capacity);

  // First row of the block holding row `row`.
  [[nodiscard]] static std::uint64_t block_start(std::uint64_t row) noexcept {
    return row & ~(kBlockRows - 1);
  }
  // Cells per column that copy(from, to) writes: whole blocks from block_start(from) on.
  [[nodiscard]] static std::uint64_t copy_rows(std::uint64_t from, std::uint64_t to) noexcept {
    if (to <= from) return 0;
    return block_start(to + kBlockRows - 1) - block_start(from);
  }

  [[nodiscard]] std::size_t num_columns() const noexcept { return num_columns_; }
  [[nodiscard]] std::uint64_t capacity() const noexcept { return capacity_; }
  // Bytes of cell and validity storage (what stats() reports as the ring's memory).
  [[nodiscard]] std::size_t memory_bytes() const noexcept;

  // Producer side: appends one row. `cells` and `valid` hold num_columns() entries each
  // (valid[i] != 0 means cell i is present). Never blocks, never allocates.
  void push(const std::uint64_t* cells, const std::uint8_t* valid) noexcept;

  // Rows ever written (the index the next row will get). Any thread.
  [[nodiscard]] std::uint64_t written() const noexcept {
    // acquire pairs with the release store in push(): rows below the returned index are
    // completely written and their cells visible to this thread.
    return head_->load(std::memory_order_acquire);
  }
  // Rows that no longer exist because the producer reused their slots.
  [[nodiscard]] std::uint64_t overwritten() const noexcept {
    return oldest(written());
  }

  // Consumer side: copies every block holding a row of [from, to) (to <= written(),
  // oldest(to) <= from <= to) into `dest` (num_columns() entries), whole: cell i of a column is
  // ring row block_start(from) + i, for copy_rows(from, to) cells, and validity word k holds the
  // bits of rows block_start(from) + 64k ... + 63. Returns the index of the first row whose copy
  // is consistent: rows in [from, returned) were overwritten while copying and must be left out,
  // like the rows of the first and last blocks outside [from, to). Never above `to`.
  // `streaming` writes `dest` with non-temporal stores (x86): for copies much larger than the
  // caches, it saves reading every destination line before writing it. Its cells must then be
  // 16-byte aligned (the copy moves 16 bytes at a time).
  [[nodiscard]] std::uint64_t copy(std::uint64_t from, std::uint64_t to, const ColumnDest* dest,
                                   bool streaming = false) const noexcept;

  // Oldest row index still held when the write counter was `written` (pass the value the range
  // end was taken from, so the range [oldest, written) is never inverted by a later producer).
  [[nodiscard]] std::uint64_t oldest(std::uint64_t written) const noexcept {
    return written > capacity_ ? written - capacity_ : 0;
  }

 private:
  [[nodiscard]] std::uint64_t* block_of(std::uint64_t row) const noexcept {
    return blocks_ + static_cast<std::size_t>((row / kBlockRows) & block_mask_) * block_words_;
  }

  static constexpr std::size_t kGroupWords = kGroupColumns * kBlockRows + kGroupColumns;

  // The layout above, pinned. A validity word holds the bits of one block's rows, which is
  // exactly one Arrow bitmap word; a column's run and a group (its runs and its validity words)
  // are whole cache lines, so every run starts on a line; and a group's validity words fill one
  // line.
  static_assert(kBlockRows == 64, "one 64-bit validity word per column per block");
  static_assert(kBlockRows * sizeof(std::uint64_t) % 64 == 0, "a column's run is whole lines");
  static_assert(kGroupColumns * sizeof(std::uint64_t) == 64, "a group's validity words: a line");
  static_assert(kGroupWords * sizeof(std::uint64_t) % 64 == 0, "a group is whole cache lines");

  template <bool kStreaming>
  void copy_blocks(std::uint64_t from, std::uint64_t to, const ColumnDest* dest) const noexcept;

  std::size_t num_columns_;
  std::uint64_t capacity_;
  std::uint64_t slots_;       // rows the blocks hold: max(capacity, 64)
  std::uint64_t block_mask_;  // blocks(capacity) - 1 (a power of two)
  std::size_t block_words_;
  std::uint64_t* blocks_ = nullptr;
  std::function<void()> release_;  // frees or unmaps the storage

  // The producer-owned counters. write_begin_ = j + 1 is stored before row j's cells are
  // written (release stores), head_ = j + 1 (release) after. A reader that saw any cell of row j
  // (acquire load) therefore sees write_begin_ >= j + 1 afterwards: that is the seqlock
  // re-check. They point at own_counters_ (heap rings) or into the spool file's header.
  std::atomic<std::uint64_t>* write_begin_;
  std::atomic<std::uint64_t>* head_;
  // Only the producer reads this; a plain copy of *head_ saves an atomic load per push.
  std::uint64_t producer_next_ = 0;
  // Heap rings keep their counters here, on a cache line of their own, away from the consumer.
  alignas(64) std::atomic<std::uint64_t> own_counters_[2] = {};
  // Keeps whatever follows the ring off the counters' line.
  [[maybe_unused]] alignas(64) char tail_pad_[64] = {};
};

// The two producer counters may live in a mapped file (the spool's header, RingStorage): as
// plain 8-byte words that every process maps alike, never a lock.
static_assert(sizeof(std::atomic<std::uint64_t>) == sizeof(std::uint64_t) &&
                  std::atomic<std::uint64_t>::is_always_lock_free,
              "the ring's counters are lock-free 8-byte words, in memory or in a mapped file");

}  // namespace stroboscope
