// The scope-events log (events.hpp), its hot path: the push of an edge (an MPSC ring of 32-byte
// records with a state word per slot), the drops, the file's blocks reserved as it fills, and the
// reader. The log's making, its file, its strings and fork: events_log.cpp.
#include "stroboscope/events.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <ctime>

#include "events_internal.hpp"
#include "stroboscope/clock.hpp"
#include "stroboscope/shared_events.hpp"

namespace stroboscope {
namespace {

// The OS thread id, cached per thread (gettid is a system call). Reset to 0 in a forked child
// by the atfork handler, which runs in the only thread the child has: the one that forked.
thread_local std::int32_t t_thread_id = 0;

std::int32_t current_thread_id() noexcept {
  if (t_thread_id == 0) t_thread_id = static_cast<std::int32_t>(gettid());
  return t_thread_id;
}

}  // namespace

void forget_event_thread_id() noexcept { t_thread_id = 0; }

void EventLog::push(EventKind kind, std::uint32_t scope_id, std::uint16_t depth,
                    std::uint32_t labels_id, std::uint64_t stack_id) noexcept {
  // acquire pairs with the release in ensure_ring(): states_/mask_ are visible once this is set.
  Slot* slots = slots_.load(std::memory_order_acquire);
  if (slots == nullptr) [[unlikely]] {
    if (!ensure_ring()) {
      dropped_.fetch_add(1, std::memory_order_relaxed);  // a count, nothing to order
      return;
    }
    slots = slots_.load(std::memory_order_acquire);
  }
  // relaxed: a mode, ordering nothing. Off (the default): one load and a branch.
  if (const std::uint8_t mode = counters_.load(std::memory_order_relaxed); mode != 0)
      [[unlikely]] {
    push_counted(kind, scope_id, depth, labels_id, stack_id, mode);
    return;
  }
  const std::uint64_t tid = static_cast<std::uint32_t>(current_thread_id());
  const std::uint64_t words[4] = {
      static_cast<std::uint64_t>(mono_ns()), stack_id,
      std::uint64_t{scope_id} | (std::uint64_t{labels_id} << 32),
      tid | (std::uint64_t{depth} << 32) | (std::uint64_t{static_cast<std::uint8_t>(kind)} << 48)};
  write(slots, words);
  // An outside recorder that asked for edge rows: a scope opening asks for one.
  if (bell_ != nullptr && kind == EventKind::kBegin) [[unlikely]] ring_doorbell(bell_);
}

void EventLog::set_counters(std::uint8_t mode) noexcept {
  counters_.store(mode & (kEdgeCountersCpu | kEdgeCountersRusage), std::memory_order_relaxed);
}

void EventLog::push_counted(EventKind kind, std::uint32_t scope_id, std::uint16_t depth,
                            std::uint32_t labels_id, std::uint64_t stack_id,
                            std::uint8_t mode) noexcept {
  Slot* slots = slots_.load(std::memory_order_acquire);  // push() made the ring
  const std::uint64_t tid = static_cast<std::uint32_t>(current_thread_id());
  const std::uint64_t where = tid | (std::uint64_t{depth} << 32);
  std::uint64_t edge[4] = {
      0, stack_id, std::uint64_t{scope_id} | (std::uint64_t{labels_id} << 32),
      where | (std::uint64_t{static_cast<std::uint8_t>(kind)} << 48)};
  std::uint64_t counted[4] = {
      0, 0, 0, where | (std::uint64_t{static_cast<std::uint8_t>(EventKind::kCounters)} << 48)};
  // The thread's own counters: read after a begin is written, before an end is, so the scope's
  // difference holds its own code and not the log's.
  auto read_counters = [&]() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    counted[0] = static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u +
                 static_cast<std::uint64_t>(ts.tv_nsec);
    rusage ru{};
    if ((mode & kEdgeCountersRusage) != 0 && getrusage(RUSAGE_THREAD, &ru) == 0) {
      const auto lo = [](long v) { return static_cast<std::uint64_t>(v) & 0xFFFFFFFFu; };
      counted[1] = lo(ru.ru_minflt) | (lo(ru.ru_majflt) << 32);
      counted[2] = lo(ru.ru_nvcsw) | (lo(ru.ru_nivcsw) << 32);
      counted[3] = where | (std::uint64_t{static_cast<std::uint8_t>(EventKind::kCountersRusage)}
                            << 48);
    }
  };
  if (kind == EventKind::kEnd) read_counters();
  edge[0] = static_cast<std::uint64_t>(mono_ns());
  write(slots, edge);
  if (kind != EventKind::kEnd) read_counters();
  write(slots, counted);
  if (bell_ != nullptr && kind == EventKind::kBegin) [[unlikely]] ring_doorbell(bell_);
}

// Inlined into push(): the plain edge pays no call for it.
[[gnu::always_inline]] inline void EventLog::write(Slot* slots,
                                                   const std::uint64_t (&words)[4]) noexcept {
  // relaxed: the counter only hands out distinct indices; the slot's state word carries every
  // ordering the reader needs.
  const std::uint64_t j = claim_.fetch_add(1, std::memory_order_relaxed);
  // acquire: pairs with reserve()'s release, so the blocks are reserved before we touch them.
  const std::uint64_t have = reserved_.load(std::memory_order_acquire);
  if (have != ~std::uint64_t{0}) [[unlikely]] {  // a shared log still reserving its file
    const std::uint64_t c = (j & mask_) >> chunk_shift_;
    const std::uint64_t next =
        (((j & mask_) + (std::uint64_t{1} << chunk_shift_)) & mask_) >> chunk_shift_;
    if ((have >> c & 1) == 0 && !reserve(c, true)) {
      count_drop(j);  // its slot's blocks could not be reserved: never touched
      return;
    }
    if ((have >> next & 1) == 0) (void)reserve(next, false);
  }
  std::atomic_ref<std::uint64_t> state(states_[j & mask_]);
  // Take the slot: from "never written", "published i" (i < j), or "writing i" left by a thread
  // that does not exist in this (forked) process, to "writing j". Anything else (a producer
  // still writing an older record, or a newer one already there after we were preempted for a
  // whole lap) means the slot is not ours: the event is dropped and counted, never waited for.
  std::uint64_t s = state.load(std::memory_order_relaxed);
  for (;;) {
    const std::uint64_t held = (s >> 1) - 1;  // index in the state word (garbage for s == 0)
    bool free = s == 0 || held < j;
    if (free && (s & 1) != 0) {
      // relaxed: written once in the child's atfork handler, before any thread of the child.
      free = held < fork_floor_.load(std::memory_order_relaxed);
    }
    if (!free) {
      count_drop(j);
      return;
    }
    // acquire on success: pairs with the previous owner's release publish, so its record stores
    // happen-before ours and can never land on top of them. relaxed on failure: we only retry.
    if (state.compare_exchange_weak(s, writing(j), std::memory_order_acquire,
                                    std::memory_order_relaxed)) {
      break;
    }
  }
  Slot& slot = slots[j & mask_];
  // release stores (plain moves on x86): each orders the "writing j" state before it, so a
  // reader that loads any of these words (acquire) and then re-reads the state sees at least
  // "writing j" and discards the copy: the seqlock re-check of read().
  for (int w = 0; w < 4; ++w) {
    std::atomic_ref<std::uint64_t>(slot.words[w]).store(words[w], std::memory_order_release);
  }
  // release: the record's words happen-before this; a reader that loads "published j" (acquire)
  // sees all four.
  state.store(published(j), std::memory_order_release);
}

void EventLog::count_drop(std::uint64_t j) noexcept {
  // relaxed: a count and a hint for the reader, which re-checks the slot itself (a missed hint
  // only makes it wait for the ring to lap this index).
  const std::uint64_t k = dropped_.fetch_add(1, std::memory_order_relaxed);
  dropped_index_[k % kDropMemory].store(j + 1, std::memory_order_relaxed);
  if (file_dropped_ != nullptr) {
    // relaxed: a count for the file's reader, which orders nothing by it.
    std::atomic_ref<std::uint64_t>(*file_dropped_).fetch_add(1, std::memory_order_relaxed);
  }
}

bool EventLog::reserve(std::uint64_t c, bool wait) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << c;
  // relaxed: a failed chunk stays failed; this only saves the attempt.
  if ((reserve_failed_.load(std::memory_order_relaxed) & bit) != 0) return false;
  if (wait) {
    reserve_mutex_.lock();
  } else if (!reserve_mutex_.try_lock()) {
    return false;  // another producer is reserving: it, or a later push, does this one
  }
  bool ok = (reserved_.load(std::memory_order_relaxed) & bit) != 0;  // the mutex orders it
  if (!ok) {
    ok = reserve_event_chunk(*file_, c << chunk_shift_, std::uint64_t{1} << chunk_shift_);
    if (ok) {
      // release: the blocks are reserved before a producer that sees the bit writes there.
      reserved_.fetch_or(bit, std::memory_order_release);
    } else {
      reserve_failed_.fetch_or(bit, std::memory_order_relaxed);  // its events are dropped
    }
  }
  reserve_mutex_.unlock();
  return ok;
}

EventRead EventLog::read(std::uint64_t first, std::uint64_t last, void (*after_copy)(void*),
                         void* arg) {
  EventRead out;
  out.first = out.next = first;
  Slot* slots = slots_.load(std::memory_order_acquire);  // pairs with ensure_ring()'s release
  if (slots == nullptr) return out;                      // nothing was ever written
  const std::uint64_t claimed = claim_.load(std::memory_order_relaxed);
  last = std::min(last, claimed);
  if (first >= last) return out;
  const std::uint64_t oldest = claimed > capacity_ ? claimed - capacity_ : 0;
  const std::uint64_t start = std::max(first, oldest);
  out.first = start;
  out.columns.reserve(static_cast<std::size_t>(last - start));
  std::uint64_t j = start;
  for (; j < last; ++j) {
    std::atomic_ref<std::uint64_t> state(states_[j & mask_]);
    // acquire: pairs with the producer's release publish, so the record's words are visible.
    const std::uint64_t s1 = state.load(std::memory_order_acquire);
    if (s1 != published(j)) {
      const bool newer = s1 != 0 && (s1 >> 1) - 1 > j;
      if (newer) continue;  // overwritten before we got to it: lost
      // Claimed, not published yet: its producer is still at work (or preempted): stop, the
      // next read starts here. Unless it can never come: dropped, or claimed by a parent
      // thread before this process was forked (relaxed: see after_fork_child()).
      if (j < fork_floor_.load(std::memory_order_relaxed) || was_dropped(j)) continue;
      break;
    }
    const Slot& slot = slots[j & mask_];
    std::uint64_t w[4];
    for (int k = 0; k < 4; ++k) {
      // acquire: if this word comes from a later producer of the slot, its "writing" state
      // store happened before, and the re-check below sees it.
      w[k] = std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(slot.words[k]))
                 .load(std::memory_order_acquire);
    }
    if (after_copy != nullptr) after_copy(arg);
    // acquire keeps this load after the word loads (they are acquire too).
    if (state.load(std::memory_order_acquire) != s1) continue;  // overwritten while copied
    EventRecord r;
    r.mono_ns = static_cast<std::int64_t>(w[0]);
    r.stack_id = w[1];
    r.scope_id = static_cast<std::uint32_t>(w[2]);
    r.labels_id = static_cast<std::uint32_t>(w[2] >> 32);
    r.thread_id = static_cast<std::int32_t>(static_cast<std::uint32_t>(w[3]));
    r.depth = static_cast<std::uint16_t>(w[3] >> 32);
    r.kind = static_cast<std::uint8_t>(w[3] >> 48);
    out.columns.append(r);
  }
  out.next = j;
  out.lost = (j - first) - out.columns.size();
  return out;
}

bool EventLog::was_dropped(std::uint64_t j) const noexcept {
  for (const auto& d : dropped_index_) {
    if (d.load(std::memory_order_relaxed) == j + 1) return true;  // relaxed: a hint (push())
  }
  return false;
}

EventStats EventLog::stats() const noexcept {
  EventStats st;
  st.written = claim_.load(std::memory_order_relaxed);       // numbers only: relaxed
  st.dropped = dropped_.load(std::memory_order_relaxed);
  std::lock_guard lock(create_mutex_);
  st.capacity = capacity_;
  st.overwritten = st.written > capacity_ ? st.written - capacity_ : 0;
  st.bytes = slots_.load(std::memory_order_relaxed) != nullptr ? map_bytes_ : 0;
  return st;
}

}  // namespace stroboscope
