// A single-producer / single-consumer columnar ring of 8-byte cells with a validity bit per cell.
//
// Layout: one contiguous array of `capacity` cells per column, and per column `capacity / 64`
// (rounded up) 64-bit validity words, bit `slot % 64` of word `slot / 64` (Arrow's LSB order, so
// snapshots copy words instead of bits). Capacity is a power of two; row `j` lives in slot
// `j & (capacity - 1)`.
//
// The producer (the sampler thread) never blocks: when the ring is full it overwrites the oldest
// row. The consumer copies a range of rows and then checks, seqlock-style, which of them the
// producer may have overwritten during the copy; those are dropped from the result and counted.
// All cell accesses go through std::atomic_ref so concurrent reads and writes of the same cell are
// well defined: release stores by the producer, acquire loads by the consumer (plain moves on
// x86), which is also what lets ThreadSanitizer check the protocol (it does not model fences).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace stroboscope {

// Where copied rows go: one destination array of cells per column (row 0 = the first copied
// row) and one Arrow-style validity bitmap per column (bit 0 of word 0 = the first copied row).
struct ColumnDest {
  std::uint64_t* cells;
  std::uint64_t* validity;
};

// The memory a ring lives in, when it is not the heap: the spool maps a file MAP_SHARED and lays
// the cells, the validity words and the two producer counters out in it (see spool.hpp), so every
// row pushed is in the file the moment it is written. `release` unmaps it when the ring goes.
struct RingStorage {
  std::uint64_t* cells = nullptr;     // num_columns * capacity words
  std::uint64_t* validity = nullptr;  // num_columns * words_per_column(capacity) + 1 words
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

  [[nodiscard]] static std::size_t words_per_column(std::uint64_t capacity) noexcept {
    return static_cast<std::size_t>((capacity + 63) / 64);
  }
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

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

  // Consumer side: copies rows [from, to) (to <= written(), oldest(to) <= from <= to) into `dest` (num_columns() entries, each with room for to - from rows and
  // ceil((to - from) / 64) validity words). Returns the index of the first row whose copy is
  // consistent: rows in [from, returned) were overwritten while copying and must be discarded
  // (their copies sit at the front of `dest`). The returned value is never above `to`.
  [[nodiscard]] std::uint64_t copy(std::uint64_t from, std::uint64_t to,
                                   const ColumnDest* dest) const noexcept;

  // Oldest row index still held when the write counter was `written` (pass the value the range
  // end was taken from, so the range [oldest, written) is never inverted by a later producer).
  [[nodiscard]] std::uint64_t oldest(std::uint64_t written) const noexcept {
    return written > capacity_ ? written - capacity_ : 0;
  }

 private:
  [[nodiscard]] std::uint64_t* column(std::size_t c) const noexcept {
    return cells_ + c * capacity_;
  }
  [[nodiscard]] std::uint64_t* validity(std::size_t c) const noexcept {
    return validity_ + c * words_per_column_;
  }

  std::size_t num_columns_;
  std::uint64_t capacity_;
  std::uint64_t mask_;
  std::size_t words_per_column_;
  std::uint64_t* cells_ = nullptr;     // num_columns_ * capacity_ cells
  std::uint64_t* validity_ = nullptr;  // num_columns_ * words_per_column_ words (+1 spare)
  std::function<void()> release_;      // frees or unmaps the storage

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
  alignas(64) char tail_pad_[64] = {};
};

// Copies `n` bits from `src` starting at bit `src_bit` into `dst` starting at bit 0, reading the
// source words with acquire atomic loads (the producer may be writing other bits of them).
void copy_validity_bits(const std::uint64_t* src, std::uint64_t src_bit, std::uint64_t n,
                        std::uint64_t* dst, std::uint64_t dst_bit) noexcept;

}  // namespace stroboscope
