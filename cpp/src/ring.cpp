// The columnar SPSC ring in row blocks: storage, the producer's push and the consumer's copy.
#include "stroboscope/ring.hpp"

#include "stroboscope/large_memory.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace stroboscope {
namespace {

constexpr std::size_t kAlign = 64;

// Load of a cell or validity word the producer may be writing concurrently. Acquire pairs with
// the producer's release store of that word: having read a value of row j, this thread also sees
// everything the producer did before it, including write_begin_ = j + 1 (the seqlock re-check in
// Ring::copy relies on that). On x86 an acquire load is a plain load.
inline std::uint64_t load_cell(const std::uint64_t* p) noexcept {
  return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(p))
      .load(std::memory_order_acquire);
}

// ThreadSanitizer sees only atomic accesses as synchronised: under it the copy takes the scalar
// path of atomic loads, which it checks.
#if defined(__SANITIZE_THREAD__)
#define STROBOSCOPE_RING_SCALAR_COPY 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STROBOSCOPE_RING_SCALAR_COPY 1
#endif
#endif

// One column's 64 cells of a block into `dst`, one cell at a time with atomic loads (the
// compiler does not merge or vectorise them) and cached stores, which first read every
// destination line they fill: for a copy that stays in the caches.
inline void copy_run_cached(const std::uint64_t* src, std::uint64_t* dst) noexcept {
  for (std::uint64_t i = 0; i < kBlockRows; ++i) dst[i] = load_cell(src + i);
}

// The same for a copy far larger than the caches: 16-byte loads and streaming stores (movntdq,
// collected into whole lines by the write-combining buffers, so no destination line is read).
// Twice the bytes per instruction and no line read first: a 1M-row snapshot went from 33 to
// 23 ms here (8-byte loads and movnti before). Each 16-byte load is aligned (runs start on a
// cache line) and reads each of its two cells whole, as x86 guarantees for aligned quadwords;
// on x86 every load is an acquire load in hardware, and copy_blocks' acquire fence after the
// whole copy keeps the compiler from moving its re-check above these plain loads.
inline void copy_run_streaming(const std::uint64_t* src, std::uint64_t* dst) noexcept {
#if defined(__x86_64__) && !defined(STROBOSCOPE_RING_SCALAR_COPY)
  const auto* s = reinterpret_cast<const __m128i*>(src);
  auto* d = reinterpret_cast<__m128i*>(dst);
  for (std::uint64_t i = 0; i < kBlockRows / 2; i += 4) {
    const __m128i w0 = _mm_load_si128(s + i);
    const __m128i w1 = _mm_load_si128(s + i + 1);
    const __m128i w2 = _mm_load_si128(s + i + 2);
    const __m128i w3 = _mm_load_si128(s + i + 3);
    _mm_stream_si128(d + i, w0);
    _mm_stream_si128(d + i + 1, w1);
    _mm_stream_si128(d + i + 2, w2);
    _mm_stream_si128(d + i + 3, w3);
  }
#else
  copy_run_cached(src, dst);
#endif
}

template <bool kStreaming>
inline void copy_run(const std::uint64_t* src, std::uint64_t* dst) noexcept {
  if constexpr (kStreaming) {
    copy_run_streaming(src, dst);
  } else {
    copy_run_cached(src, dst);
  }
}

}  // namespace

std::size_t Ring::storage_words(std::size_t num_columns, std::uint64_t capacity) {
  std::size_t words = 0;
  std::size_t bytes = 0;
  // block_words itself cannot wrap before the product does for any column count that fits in
  // memory; the product with the block count is what overflows for huge rings.
  if (num_columns > SIZE_MAX / (kBlockRows + kGroupColumns) ||
      __builtin_mul_overflow(block_words(num_columns), blocks(capacity), &words) ||
      __builtin_mul_overflow(words, sizeof(std::uint64_t), &bytes) || bytes > SIZE_MAX - kAlign) {
    throw std::length_error("ring size overflows: too many columns times rows");
  }
  return words;
}

Ring::Ring(std::size_t num_columns, std::uint64_t capacity)
    : num_columns_(num_columns),
      capacity_(capacity),
      slots_(blocks(capacity) * kBlockRows),
      block_mask_(blocks(capacity) - 1),
      block_words_(block_words(num_columns)),
      write_begin_(&own_counters_[0]),
      head_(&own_counters_[1]) {
  assert(capacity >= 2 && (capacity & (capacity - 1)) == 0);
  const std::size_t bytes = storage_words(num_columns, capacity) * sizeof(std::uint64_t);
  void* p = allocate_large(bytes, kAlign);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);  // touch every page now, not on the sampler's first lap
  blocks_ = static_cast<std::uint64_t*>(p);
  release_ = [p, bytes] { free_large(p, bytes); };
}

Ring::Ring(std::size_t num_columns, std::uint64_t capacity, RingStorage storage)
    : num_columns_(num_columns),
      capacity_(capacity),
      slots_(blocks(capacity) * kBlockRows),
      block_mask_(blocks(capacity) - 1),
      block_words_(block_words(num_columns)),
      blocks_(storage.blocks),
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
  return static_cast<std::size_t>(block_mask_ + 1) * block_words_ * sizeof(std::uint64_t);
}

void Ring::push(const std::uint64_t* cells, const std::uint8_t* valid) noexcept {
  const std::uint64_t j = producer_next_;
  // Announce that row j (and so the slot of row j - slots_) is about to change. Relaxed is
  // enough here: the cell stores below are releases, so they publish this store to any reader
  // that observes one of them (see load_cell).
  write_begin_->store(j + 1, std::memory_order_relaxed);

  std::uint64_t* block = block_of(j);
  const std::uint64_t r = j % kBlockRows;
  const std::uint64_t bit = std::uint64_t{1} << r;
  // Group by group: 8 cells 512 bytes apart, then the validity line just after them.
  for (std::size_t g = 0; g < num_columns_; g += kGroupColumns) {
    const std::size_t n = std::min(kGroupColumns, num_columns_ - g);
    std::uint64_t* group = block + cell_offset(g);
    for (std::size_t i = 0; i < n; ++i) {
      // Release: a reader that sees this cell's new value also sees write_begin_ = j + 1.
      std::atomic_ref<std::uint64_t>(group[i * kBlockRows + r])
          .store(cells[g + i], std::memory_order_release);
    }
    std::uint64_t* validity = group + n * kBlockRows;
    for (std::size_t i = 0; i < n; ++i) {
      std::atomic_ref<std::uint64_t> v(validity[i]);
      // Single writer: a relaxed load + release store cannot lose an update; readers see the
      // old or the new word, and a new word publishes write_begin_ like a cell does.
      const std::uint64_t old = v.load(std::memory_order_relaxed);
      v.store(valid[g + i] != 0 ? (old | bit) : (old & ~bit), std::memory_order_release);
    }
  }
  producer_next_ = j + 1;
  // Release: a consumer that acquires head_ == j + 1 sees all of row j's cells.
  head_->store(j + 1, std::memory_order_release);
}

template <bool kStreaming>
void Ring::copy_blocks(std::uint64_t from, std::uint64_t to, const ColumnDest* dest) const noexcept {
  const std::uint64_t first = block_start(from);
  const std::uint64_t nblocks = copy_rows(from, to) / kBlockRows;
  // In row order; the range wraps around the ring at most once, and a full ring's first and
  // last blocks are the same block: it is copied twice, each copy for its own rows.
  for (std::uint64_t b = 0; b < nblocks; ++b) {
    const std::uint64_t* block = block_of(first + b * kBlockRows);
    const std::size_t at = static_cast<std::size_t>(b * kBlockRows);
    // Each group's validity line lies after its cells, ahead of what the sequential reads of
    // the cells have brought in: the next block's lines are asked for early (each was a stall).
    if (b + 1 < nblocks) {
      const std::uint64_t* next = block_of(first + (b + 1) * kBlockRows);
      for (std::size_t g = 0; g < num_columns_; g += kGroupColumns) {
        __builtin_prefetch(next + validity_offset(num_columns_, g));
      }
    }
    for (std::size_t c = 0; c < num_columns_; ++c) {
      assert(!kStreaming || reinterpret_cast<std::uintptr_t>(dest[c].cells) % 16 == 0);
      copy_run<kStreaming>(block + cell_offset(c), dest[c].cells + at);
      dest[c].validity[b] = load_cell(block + validity_offset(num_columns_, c));
    }
  }
#if defined(__x86_64__)
  // Streaming stores are weakly ordered: make them visible before the copy is handed on.
  if constexpr (kStreaming) _mm_sfence();
#endif
#if !defined(STROBOSCOPE_RING_SCALAR_COPY)
  // No load of the copy above may be moved below the caller's re-check (see copy_run_streaming).
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
}

std::uint64_t Ring::copy(std::uint64_t from, std::uint64_t to, const ColumnDest* dest,
                         bool streaming) const noexcept {
  if (to <= from) return to;
  if (streaming) {
    copy_blocks<true>(from, to, dest);
  } else {
    copy_blocks<false>(from, to, dest);
  }
  // The seqlock re-check, once for the whole copy. If any cell copied above came from a row the
  // producer started after our copy began, its acquire load (load_cell; on the streaming path a
  // plain x86 load, in order with this one, and the fence at the end of copy_blocks) makes this
  // load see write_begin_ at least one past that row. write_begin_ == b means rows up to b - 1 may have
  // been written, which reuses the slots of rows up to b - 1 - slots_: those are not intact.
  const std::uint64_t begun = write_begin_->load(std::memory_order_relaxed);
  const std::uint64_t first_intact = begun > slots_ ? begun - slots_ : 0;
  return std::min(to, std::max(from, first_intact));
}

}  // namespace stroboscope
