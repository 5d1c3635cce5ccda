// The scope-events log (events.hpp): an MPSC ring of 32-byte records with a state word per slot.
#include "stroboscope/events.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <stdexcept>

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

// The edge-counters mode $STROBOSCOPE_EDGE_COUNTERS names (0 for off or anything unknown).
std::uint8_t counters_from_env() noexcept {
  const char* v = std::getenv(kEdgeCountersEnv);
  if (v == nullptr) return 0;
  if (std::strcmp(v, "cpu") == 0) return kEdgeCountersCpu;
  if (std::strcmp(v, "rusage") == 0) return kEdgeCountersCpu | kEdgeCountersRusage;
  return 0;
}

bool valid_capacity(std::uint64_t c) noexcept {
  return c >= 2 && c <= (std::uint64_t{1} << 32) && (c & (c - 1)) == 0;
}

// The process-wide log, constant-initialised (no static-init order, no guard on the push path)
// and never destroyed: threads may push while the process exits, after static destructors run.
union GlobalLog {
  // Producer "py", shared through $STROBOSCOPE_EVENTS_DIR when set, in memory otherwise.
  constexpr GlobalLog() : log("py", nullptr, true) {}
  ~GlobalLog() {}
  EventLog log;
};
constinit GlobalLog g_global;

void atfork_prepare() { g_global.log.before_fork(); }
void atfork_parent() { g_global.log.after_fork_parent(); }
void atfork_child() { g_global.log.after_fork_child(); }
[[maybe_unused]] const int g_atfork_registered =
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);

}  // namespace

void EventColumns::reserve(std::size_t n) {
  mono_ns.reserve(n);
  kind.reserve(n);
  thread_id.reserve(n);
  scope_id.reserve(n);
  depth.reserve(n);
  labels_id.reserve(n);
  stack_id.reserve(n);
}

void EventColumns::append(const EventRecord& r) {
  mono_ns.push_back(r.mono_ns);
  kind.push_back(r.kind);
  thread_id.push_back(r.thread_id);
  scope_id.push_back(r.scope_id);
  depth.push_back(r.depth);
  labels_id.push_back(r.labels_id);
  stack_id.push_back(r.stack_id);
}

EventLog& EventLog::global() noexcept { return g_global.log; }

EventLog::EventLog(std::uint64_t capacity) {
  if (!valid_capacity(capacity)) {
    throw std::invalid_argument("events capacity must be a power of two in [2, 2**32]");
  }
  capacity_ = capacity;
  mask_ = capacity - 1;
}

EventLog::EventLog(std::uint64_t capacity, const char* producer, const char* dir, bool fallback)
    : EventLog(capacity) {
  producer_ = producer;
  dir_ = dir;
  fallback_ = fallback;
}

EventLog::~EventLog() {
  Slot* slots = slots_.load(std::memory_order_relaxed);  // no producer may outlive the log
  if (file_ != nullptr) {
    close_event_file(file_);
  } else if (slots != nullptr) {
    munmap(slots, map_bytes_);
  }
}

bool EventLog::configure(std::uint64_t capacity) {
  if (!valid_capacity(capacity)) {
    throw std::invalid_argument("events capacity must be a power of two in [2, 2**32]");
  }
  std::lock_guard lock(create_mutex_);
  // relaxed: the mutex orders this against ensure_ring(), the only writer of slots_.
  if (slots_.load(std::memory_order_relaxed) != nullptr) return false;
  capacity_ = capacity;
  mask_ = capacity - 1;
  return true;
}

std::uint64_t EventLog::capacity() const noexcept {
  std::lock_guard lock(create_mutex_);
  return capacity_;
}

bool EventLog::ensure_ring() noexcept {
  // strings_mutex_ first (the order before_fork() takes them in): a shared file starts with a
  // copy of the strings interned so far, and intern() appends to it from then on.
  std::lock_guard strings_lock(strings_mutex_);
  std::lock_guard lock(create_mutex_);
  if (slots_.load(std::memory_order_relaxed) != nullptr) return true;  // mutex orders it
  void* p = nullptr;
  std::size_t bytes = static_cast<std::size_t>(capacity_) * (sizeof(Slot) + 8);
  if (producer_ != nullptr) {
    const char* dir = dir_ != nullptr ? dir_ : std::getenv(kEventsDirEnv);
    // relaxed: see memory_pid_. The recorder in this process reads its events from memory.
    const bool keep = memory_pid_.load(std::memory_order_relaxed) == getpid();
    if (dir != nullptr && *dir != '\0' && !keep) {
      // relaxed: a mode; a set_counters() racing with the first event wins or loses, both fine.
      if (counters_.load(std::memory_order_relaxed) == 0) {
        counters_.store(counters_from_env(), std::memory_order_relaxed);
      }
      // A recorder may size its command's rings: $STROBOSCOPE_EVENTS_CAPACITY (records, a power
      // of two in [2, 2**32]; anything else is ignored). Before any event: nothing uses mask_.
      if (const char* cap = std::getenv(kEventsCapacityEnv); cap != nullptr) {
        char* end = nullptr;
        const unsigned long long c = std::strtoull(cap, &end, 10);
        if (end != cap && *end == '\0' && valid_capacity(c)) {
          capacity_ = c;
          mask_ = c - 1;
          bytes = static_cast<std::size_t>(capacity_) * (sizeof(Slot) + 8);
        }
      }
      // relaxed: fork_floor_ is written only in the child's atfork handler, before any thread.
      file_ = open_event_file(dir, producer_, capacity_,
                              fork_floor_.load(std::memory_order_relaxed), strings_);
    }
    if (file_ != nullptr) {
      // 64 chunks (fewer for a tiny ring); the first one this file writes, and the next, now.
      const auto log2 = static_cast<unsigned>(__builtin_ctzll(capacity_));
      const unsigned chunks_log2 = log2 >= 6 ? 6 : log2;
      chunk_shift_ = log2 - chunks_log2;
      const std::uint64_t chunks = std::uint64_t{1} << chunks_log2;
      const std::uint64_t first =
          (fork_floor_.load(std::memory_order_relaxed) & mask_) >> chunk_shift_;
      std::uint64_t have = chunks == 64 ? 0 : ~((std::uint64_t{1} << chunks) - 1);
      for (const std::uint64_t c : {first, (first + 1) & (chunks - 1)}) {
        if (reserve_event_chunk(*file_, c << chunk_shift_, std::uint64_t{1} << chunk_shift_)) {
          have |= std::uint64_t{1} << c;
        }
      }
      if ((have >> first & 1) == 0) {  // not even one chunk: no room for this file
        close_event_file(file_);
        file_ = nullptr;
      } else {
        // relaxed: published by slots_'s release store below.
        reserved_.store(have, std::memory_order_relaxed);
        reserve_failed_.store(0, std::memory_order_relaxed);
        p = file_->slots();
        states_ = file_->states();
        file_dropped_ = file_->word(sev::kOffDropped);
        bell_ = file_->bell;
      }
    }
    if (file_ == nullptr && !fallback_) return false;
  }
  if (p == nullptr) {
    // Anonymous memory: zero-filled (every state word "never written") and only the pages that
    // events reach become resident, so a 1 Mi-event ring costs little until it is used.
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    states_ = reinterpret_cast<std::uint64_t*>(static_cast<char*>(p) + capacity_ * sizeof(Slot));
  }
  map_bytes_ = bytes;
  // release: a thread that loads this pointer (acquire) also sees states_, capacity_, mask_,
  // file_ and file_dropped_.
  slots_.store(static_cast<Slot*>(p), std::memory_order_release);
  return true;
}

bool EventLog::share_now() noexcept {
  if (slots_.load(std::memory_order_acquire) == nullptr && !ensure_ring()) return false;
  std::lock_guard lock(create_mutex_);
  return file_ != nullptr;
}

void EventLog::keep_in_memory(bool on) noexcept {
  // relaxed: see memory_pid_.
  memory_pid_.store(on ? getpid() : 0, std::memory_order_relaxed);
}

std::string EventLog::file_path() const {
  std::lock_guard lock(create_mutex_);
  return file_ != nullptr ? file_->path : std::string();
}

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

namespace {
constexpr std::uint32_t kMaxStrings = std::numeric_limits<std::uint32_t>::max();
}  // namespace

std::uint32_t EventLog::intern(std::string_view text) {
  std::lock_guard lock(strings_mutex_);
  if (!ids_) {
    ids_ = std::make_unique<std::unordered_map<std::string, std::uint32_t>>();
    strings_.emplace_back();
    ids_->emplace(std::string(), 0);
  }
  const std::string key(text);
  if (auto it = ids_->find(key); it != ids_->end()) return it->second;
  if (strings_.size() >= kMaxStrings) throw std::length_error("event string table is full");
  const auto id = static_cast<std::uint32_t>(strings_.size());
  strings_.push_back(key);
  try {
    ids_->emplace(key, id);
  } catch (...) {
    strings_.pop_back();
    throw;
  }
  // A shared log's file gets it too (file_ is set under this mutex); a full area is counted.
  if (file_ != nullptr) (void)append_event_string(*file_, key);
  return id;
}

std::vector<std::string> EventLog::strings(std::uint32_t first) const {
  std::lock_guard lock(strings_mutex_);
  if (strings_.empty()) {  // nothing interned yet: the table is just "" (id 0)
    if (first == 0) return {std::string()};
    return {};
  }
  if (first >= strings_.size()) return {};
  return {strings_.begin() + first, strings_.end()};
}

std::size_t EventLog::num_strings() const {
  std::lock_guard lock(strings_mutex_);
  return std::max<std::size_t>(strings_.size(), 1);  // "" is id 0 from the start
}

void EventLog::before_fork() noexcept {
  // No thread may hold these across the fork: the child would inherit them locked forever.
  strings_mutex_.lock();
  create_mutex_.lock();
  reserve_mutex_.lock();
}

void EventLog::after_fork_parent() noexcept {
  reserve_mutex_.unlock();
  create_mutex_.unlock();
  strings_mutex_.unlock();
}

void EventLog::after_fork_child() noexcept {
  if (file_ != nullptr) {
    // The parent's file is the parent's: this process maps one of its own at its first event
    // (its pid, the strings interned so far). Only this thread exists: nothing else uses it.
    close_event_file(file_);
    file_ = nullptr;
    file_dropped_ = nullptr;
    bell_ = nullptr;
    states_ = nullptr;
    slots_.store(nullptr, std::memory_order_relaxed);  // no other thread to order against
    reserved_.store(~std::uint64_t{0}, std::memory_order_relaxed);
  } else if (Slot* slots = slots_.load(std::memory_order_relaxed);
             slots != nullptr && producer_ != nullptr && dir_ == nullptr) {
    // The parent kept its events in memory (no variable then, or its own recorder reads them
    // there: keep_in_memory()). With the variable set, a recorder reads this child's file:
    // the first event maps one (getenv allocates nothing; munmap is a system call).
    if (const char* dir = std::getenv(kEventsDirEnv); dir != nullptr && *dir != '\0') {
      munmap(slots, map_bytes_);
      states_ = nullptr;
      slots_.store(nullptr, std::memory_order_relaxed);  // no other thread to order against
    }
  }
  reserve_mutex_.unlock();
  create_mutex_.unlock();
  strings_mutex_.unlock();
  // Only the forking thread exists here. Its cached id is the parent thread's: forget it.
  t_thread_id = 0;
  // relaxed: no other thread exists yet; threads started later see it through pthread_create.
  fork_floor_.store(claim_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace stroboscope
