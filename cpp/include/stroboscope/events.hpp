// The scope-events log: begin/end edges of code scopes, written from any thread, read by one
// consumer at a time, stamped on the sampler's clock (CLOCK_MONOTONIC, clock.hpp).
//
// Layout: a ring of `capacity` (a power of two) 32-byte records, event j in slot
// `j & (capacity - 1)`, plus one 64-bit state word per slot. A producer claims index j with one
// fetch_add on a shared 64-bit counter, takes the slot by moving its state word from "published
// i" (some i < j) to "writing j" with a compare-exchange, stores the four record words and then
// publishes "published j" (release). Owning the slot through the state word means two producers
// never write one slot at once, even when one of them was preempted for a whole lap of the ring:
// the later one finds the slot busy and drops its event (counted in stats().dropped) instead of
// tearing a record. A producer never waits, allocates, locks or throws (except the first push of
// a log, which maps its ring once under a mutex, and, in a shared log, a push whose 64th of the
// file was not reserved ahead of it: it reserves the blocks under a mutex, see reserved_).
//
// A claimed index that is not published yet stops a read there (the next read starts at it):
// its producer is between its fetch_add and its last store, or was preempted there. It is
// skipped as lost only when it can never come: its producer dropped it (listed in the last
// kDropMemory drops), it was claimed by a parent thread before a fork, or a later lap overwrote
// the slot. So no event is called lost because its producer was slow. (A drop that fell out of
// that memory holds reads at its index until the ring laps it: drops need a producer stalled
// for a whole lap, and 64 of them at once is not a case worth more machinery.)
//
// The reader copies a slot seqlock-style: state == "published j" (acquire), the four words
// (acquire loads), state again (acquire). A record overwritten while it was copied fails the
// second check and is counted lost, never returned torn. As in ring.hpp every shared word goes
// through std::atomic_ref / std::atomic, so the protocol is well defined and ThreadSanitizer can
// check it (it does not model fences, which is why there are none).
//
// When the ring is full the oldest records are overwritten and counted (stats().overwritten). One log
// per process (EventLog::global()) serves the Python binding; tests make their own.
//
// Shared logs (shared_events.hpp): a log made with a producer name maps its ring from a file in
// a directory (given, or $STROBOSCOPE_EVENTS_DIR read at the first event) instead of anonymous
// memory, and copies its interned strings there, so a recorder in another process reads them.
// The push is the same code. The global log is the producer "py": shared when the variable is
// set, anonymous otherwise (or when the file cannot be made). In a forked child a shared log
// leaves the parent's file alone: the child's first event maps a new file of its own. So does
// a child whose parent kept its events in memory (keep_in_memory(): an in-process recorder reads
// them there) when the variable is set: its parent's recorder reads the child's file.
//
// fork: the child keeps its copy of the log and the counters go on (indices stay monotonic in
// each process; the child's log holds the parent's events up to the fork, then its own). The
// forking thread's cached thread id is reset in the child (pthread_atfork), and slots that
// parent threads were writing at the fork (they do not exist in the child) are reusable: a
// state "writing i" with i below the claim counter at the fork counts as abandoned.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace stroboscope {

struct EventFile;  // shared_events.hpp

// kCounters, kCountersRusage: the opening thread's own counters at the edge just before it (edge
// counters, opt-in, set_counters()), written by the same thread right after its edge, so a
// reader pairs it with the latest edge of that thread before it. Its four words: thread CPU ns
// (CLOCK_THREAD_CPUTIME_ID) | minor faults + major faults << 32 | voluntary + involuntary
// context switches << 32 (getrusage(RUSAGE_THREAD), low 32 bits each; both words 0 in kind
// kCounters, which has the CPU clock only) | tid (32 bits) + depth << 32 + kind << 48. At a begin
// the counters are read after the edge is written, at an end before it (the record follows the
// edge either way): a scope's difference leaves out the log's own writes.
enum class EventKind : std::uint8_t { kBegin = 1, kEnd = 2, kCounters = 3, kCountersRusage = 4 };
// Edge-counter modes (set_counters()): bits.
inline constexpr std::uint8_t kEdgeCountersCpu = 1;
inline constexpr std::uint8_t kEdgeCountersRusage = 2;

// One event as the reader hands it out (the ring stores it packed into four 64-bit words).
struct EventRecord {
  std::int64_t mono_ns = 0;     // CLOCK_MONOTONIC ns, stamped by the producer
  std::int64_t thread_id = 0;   // OS thread id (gettid) of the producer
  std::uint64_t stack_id = 0;   // one id per independent stack (thread, asyncio task)
  std::uint32_t scope_id = 0;   // interned scope name
  std::uint32_t labels_id = 0;  // interned label set (0 = the empty string: no labels)
  std::uint16_t depth = 0;      // 0 for an outermost scope
  std::uint8_t kind = 0;        // EventKind
};

// The records of one read, column by column (what the binding exports to Arrow).
struct EventColumns {
  std::vector<std::int64_t> mono_ns;
  std::vector<std::uint8_t> kind;
  std::vector<std::int64_t> thread_id;
  std::vector<std::uint32_t> scope_id;
  std::vector<std::uint16_t> depth;
  std::vector<std::uint32_t> labels_id;
  std::vector<std::uint64_t> stack_id;
  [[nodiscard]] std::size_t size() const noexcept { return mono_ns.size(); }
  void reserve(std::size_t n);
  void append(const EventRecord& r);
};

struct EventRead {
  std::uint64_t first = 0;  // the range considered: max(asked first, oldest index still held)
  std::uint64_t next = 0;   // where the next read should start (<= the asked last)
  std::uint64_t lost = 0;   // indices in [asked first, next) not in `columns`
  EventColumns columns;
};

struct EventStats {
  std::uint64_t written = 0;      // indices claimed (the index the next event gets)
  std::uint64_t overwritten = 0;  // indices whose slot was reused (written - capacity, or 0)
  std::uint64_t dropped = 0;      // events a producer dropped because their slot was busy
  std::uint64_t capacity = 0;
  std::uint64_t bytes = 0;        // ring memory (records and state words), 0 before the first event
};

class EventLog {
 public:
  static constexpr std::uint64_t kDefaultCapacity = std::uint64_t{1} << 20;
  // How many of the latest dropped indices the reader can recognise (see read()).
  static constexpr std::size_t kDropMemory = 64;

  constexpr EventLog() noexcept = default;
  explicit EventLog(std::uint64_t capacity);  // std::invalid_argument unless a power of two >= 2
  // A shared log of `producer` (a string that outlives the log): its ring lives in a file in
  // `dir` (nullptr: $STROBOSCOPE_EVENTS_DIR at the first event; no file when unset). With
  // `fallback`, a log whose file cannot be made keeps its events in memory; without, it drops
  // them (counted).
  constexpr EventLog(const char* producer, const char* dir, bool fallback) noexcept
      : producer_(producer), dir_(dir), fallback_(fallback) {}
  EventLog(std::uint64_t capacity, const char* producer, const char* dir, bool fallback);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // The process-wide log (constant-initialised: no guard on the push path).
  [[nodiscard]] static EventLog& global() noexcept;

  // Sets the capacity; false (and nothing changes) once the ring exists (after the first push
  // or read). std::invalid_argument unless a power of two in [2, 2^32].
  bool configure(std::uint64_t capacity);

  // Producer side, any thread. Stamps mono_ns and the thread id. The first push of the log maps
  // its ring (once per process); if that fails the event is dropped and counted.
  void push(EventKind kind, std::uint32_t scope_id, std::uint16_t depth, std::uint32_t labels_id,
            std::uint64_t stack_id) noexcept;

  // Edge counters (kCounters above): 0 off (the default), kEdgeCountersCpu, or kEdgeCountersCpu |
  // kEdgeCountersRusage. Any thread, any time; edges pushed after it carry them. A shared log whose
  // ring is made while this is 0 takes $STROBOSCOPE_EDGE_COUNTERS ("cpu", "rusage"; "" or "0"
  // off; anything else is ignored: off).
  void set_counters(std::uint8_t mode) noexcept;
  [[nodiscard]] std::uint8_t counters() const noexcept {
    return counters_.load(std::memory_order_relaxed);
  }

  // Index the next event will get. Any thread.
  [[nodiscard]] std::uint64_t written() const noexcept {
    // relaxed: only a number; read() orders its own accesses through the state words.
    return claim_.load(std::memory_order_relaxed);
  }

  // Consumer side (one reader at a time; concurrent readers are safe but may each count the
  // same overwritten records). Copies events [first, min(last, written())) still held.
  // `after_copy` is a test seam: called (with `arg`) after each slot's words are copied and
  // before the state word is checked again; nullptr in production.
  [[nodiscard]] EventRead read(std::uint64_t first, std::uint64_t last,
                               void (*after_copy)(void*) = nullptr, void* arg = nullptr);

  [[nodiscard]] EventStats stats() const noexcept;
  [[nodiscard]] std::uint64_t capacity() const noexcept;

  // Maps the ring now (what the first push does); true when it lives in a file.
  bool share_now() noexcept;
  // An in-process recorder owns the events directory named in the environment and reads this
  // process's events from memory: with `on`, this process maps its ring in memory although the
  // variable is set, whenever its ring is mapped (its children, forked or spawned, still make
  // files there: the pid is kept, not a flag a child inherits). Call it before setting the
  // variable, and with false after taking it away.
  void keep_in_memory(bool on) noexcept;
  // The file the ring lives in, "" when it is not shared (or not mapped yet).
  [[nodiscard]] std::string file_path() const;

  // The string intern table: a stable id (its index) per distinct string. Mutex-protected; not
  // the hot path (callers cache ids), but a scope's label set (a new one per call of
  // `annotate("step", step=step)`) is interned on the user's thread: a text already held is
  // found without a copy (table_). Id 0 is the empty string.
  std::uint32_t intern(std::string_view text);
  [[nodiscard]] std::vector<std::string> strings(std::uint32_t first) const;
  [[nodiscard]] std::size_t num_strings() const;

  // pthread_atfork handlers of the global log (public for the registration in events_log.cpp).
  void before_fork() noexcept;
  void after_fork_parent() noexcept;
  void after_fork_child() noexcept;

 private:
  struct Slot {
    // Four record words: mono_ns | stack_id | scope_id + labels_id << 32 |
    // tid (32 bits) + depth << 32 + kind << 48.
    std::uint64_t words[4];
  };
  // The records are the shared file's layout too (shared_events.hpp: 4 u64 words each).
  static_assert(sizeof(Slot) == 32 && alignof(Slot) == 8, "an event record is 4 packed words");
  [[nodiscard]] bool ensure_ring() noexcept;
  // The push with edge counters (push() with counters_ set): the edge, then its counters record.
  void push_counted(EventKind kind, std::uint32_t scope_id, std::uint16_t depth,
                    std::uint32_t labels_id, std::uint64_t stack_id, std::uint8_t mode) noexcept;
  // Claims an index and writes one record (words[3]: tid | depth | kind); the body of push().
  void write(Slot* slots, const std::uint64_t (&words)[4]) noexcept;
  // A shared log's slow path: reserve the file's blocks of chunk `c` (see reserved_). With
  // `wait` false it gives up when another producer is reserving.
  bool reserve(std::uint64_t c, bool wait) noexcept;
  void count_drop(std::uint64_t j) noexcept;
  [[nodiscard]] bool was_dropped(std::uint64_t j) const noexcept;  // maps the ring once; false if it cannot

  // State word values: 0 = never written; (i + 1) << 1 = record i published;
  // ((i + 1) << 1) | 1 = record i being written.
  static constexpr std::uint64_t published(std::uint64_t i) noexcept { return (i + 1) << 1; }
  static constexpr std::uint64_t writing(std::uint64_t i) noexcept { return ((i + 1) << 1) | 1; }

  // The ring, mapped on first use. release store after the memory is mapped and capacity_ set;
  // acquire loads by producers and the reader see both.
  std::atomic<Slot*> slots_{nullptr};
  // One state word per slot (values below), accessed through std::atomic_ref: the mapping is
  // zero-filled memory, not constructed atomics. Set before slots_'s release store.
  std::uint64_t* states_ = nullptr;
  std::uint64_t capacity_ = kDefaultCapacity;
  // Edge counters mode (set_counters()); relaxed: a mode, ordering nothing.
  std::atomic<std::uint8_t> counters_{0};
  std::uint64_t mask_ = kDefaultCapacity - 1;
  std::size_t map_bytes_ = 0;
  mutable std::mutex create_mutex_;  // only around the one-time mapping and configure()
  // Shared logs only (else nullptr): producer name, directory (nullptr: the environment's).
  const char* producer_ = nullptr;
  const char* dir_ = nullptr;
  bool fallback_ = true;
  // The file the ring is mapped from. Set with both mutexes held, before slots_'s release store
  // (a producer that sees slots_ sees it); read by intern() under strings_mutex_.
  EventFile* file_ = nullptr;
  // The file's dropped counter (a pointer into the mapping), nullptr when not shared.
  std::uint64_t* file_dropped_ = nullptr;
  // The directory's doorbell (shared_events.hpp), nullptr when none: a begin rings it.
  char* bell_ = nullptr;
  // A shared log's file is reserved on disk (fallocate) a chunk of slots at a time, so that a
  // full filesystem drops events instead of killing the process with SIGBUS, and a process that
  // writes a few events reserves a little. Bit c set: chunk c (slots [c << chunk_shift_,
  // (c + 1) << chunk_shift_)) is reserved, or does not exist. All ones for a log in memory, so
  // the push's check is one load. A producer reserves the chunk after its own (try_lock: one
  // producer does it, the others go on), and its own only if that was not done in time.
  std::atomic<std::uint64_t> reserved_{~std::uint64_t{0}};
  std::atomic<std::uint64_t> reserve_failed_{0};  // chunks whose reservation failed: dropped
  unsigned chunk_shift_ = 0;
  std::mutex reserve_mutex_;

  // Producer-shared: the claim counter on its own cache line (every producer RMWs it).
  alignas(64) std::atomic<std::uint64_t> claim_{0};
  alignas(64) std::atomic<std::uint64_t> dropped_{0};
  // Index + 1 of the latest dropped events (0 = none), slot `drop number % kDropMemory`: a
  // reader that meets a claimed index that was never published skips it when it is listed here
  // instead of waiting for it.
  std::atomic<std::uint64_t> dropped_index_[kDropMemory] = {};
  // Claim counter when this process was forked from its parent: "writing i" with i below it was
  // left by a thread that does not exist here. Written in the child handler only.
  std::atomic<std::uint64_t> fork_floor_{0};
  // The pid whose ring stays in memory although $STROBOSCOPE_EVENTS_DIR is set (keep_in_memory),
  // 0 for none. relaxed everywhere: ensure_ring() reads it under create_mutex_, and the owner sets
  // it before putting the variable in the environment.
  std::atomic<std::int64_t> memory_pid_{0};

  // The intern table: open addressing with linear probing over (hash, id + 1) pairs (0: an
  // empty slot), at most half full, so that a lookup touches one cache line of it and compares
  // a string only when its 64-bit hash matches. A new label set per call of
  // `annotate("step", step=step)` is interned on the user's thread: a hit allocates nothing, a
  // miss copies the text once (a node-based map walked cold nodes and rehashed them: 0.6-1 us
  // a miss in a table of 4 * 10^5 strings, ~0.35 us now: bench/RESULTS.md).
  struct InternSlot {
    std::uint64_t hash = 0;
    std::uint32_t id_plus_one = 0;
  };
  mutable std::mutex strings_mutex_;
  std::vector<std::string> strings_;  // id = index; "" interned lazily as id 0
  std::vector<InternSlot> table_;     // size a power of two, or empty before the first intern()
  // Puts (hash, id) in the first empty slot from its place (strings_mutex_ held; room left).
  void place(std::uint64_t hash, std::uint32_t id) noexcept;
};

}  // namespace stroboscope
