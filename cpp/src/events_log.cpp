// The scope-events log (events.hpp), everything but the hot path: the process's log, the ring
// mapped once (anonymous memory, or an events file of shared_events.hpp), the interned strings,
// and fork. The push and the reader: events.cpp.
#include "stroboscope/events.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>

#include "events_internal.hpp"
#include "stroboscope/shared_events.hpp"

namespace stroboscope {
namespace {

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
      // of two in [2, sev::kMaxCapacity]; anything else is ignored). A file's ring is never
      // larger than that (a larger configure() is brought down to it: its readers refuse more).
      // Before any event: nothing uses mask_.
      if (const char* cap = std::getenv(kEventsCapacityEnv); cap != nullptr) {
        char* end = nullptr;
        const unsigned long long c = std::strtoull(cap, &end, 10);
        if (end != cap && *end == '\0' && valid_capacity(c) && c <= sev::kMaxCapacity) {
          capacity_ = c;
          mask_ = c - 1;
        }
      }
      if (capacity_ > sev::kMaxCapacity) {
        capacity_ = sev::kMaxCapacity;
        mask_ = capacity_ - 1;
      }
      bytes = static_cast<std::size_t>(capacity_) * (sizeof(Slot) + 8);
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

namespace {
constexpr std::uint32_t kMaxStrings = std::numeric_limits<std::uint32_t>::max();
}  // namespace

std::uint32_t EventLog::intern(std::string_view text) {
  const std::uint64_t hash = std::hash<std::string_view>{}(text);
  std::lock_guard lock(strings_mutex_);
  if (table_.empty()) {
    table_.resize(std::size_t{1} << 10);
    strings_.emplace_back();
    place(std::hash<std::string_view>{}(std::string_view()), 0);
  }
  const std::size_t mask = table_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    const InternSlot& slot = table_[i];
    if (slot.id_plus_one == 0) break;  // not held: a miss
    if (slot.hash == hash && strings_[slot.id_plus_one - 1] == text) return slot.id_plus_one - 1;
  }
  if (strings_.size() >= kMaxStrings) throw std::length_error("event string table is full");
  const auto id = static_cast<std::uint32_t>(strings_.size());
  if ((strings_.size() + 1) * 2 > table_.size()) {  // keep it at most half full
    std::vector<InternSlot> grown(table_.size() * 2);  // bad_alloc: nothing changed yet
    table_.swap(grown);
    for (const InternSlot& slot : grown) {
      if (slot.id_plus_one != 0) place(slot.hash, slot.id_plus_one - 1);
    }
  }
  strings_.emplace_back(text);  // bad_alloc: the table does not name it yet
  place(hash, id);
  // A shared log's file gets it too (file_ is set under this mutex); a full area is counted.
  if (file_ != nullptr) (void)append_event_string(*file_, text);
  return id;
}

void EventLog::place(std::uint64_t hash, std::uint32_t id) noexcept {
  const std::size_t mask = table_.size() - 1;
  std::size_t i = hash & mask;
  while (table_[i].id_plus_one != 0) i = (i + 1) & mask;
  table_[i] = InternSlot{hash, id + 1};
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
  forget_event_thread_id();
  // relaxed: no other thread exists yet; threads started later see it through pthread_create.
  fork_floor_.store(claim_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace stroboscope
