// Shared events: scope edges that a process writes into a file an outside recorder reads.
//
// A recorder that runs a command makes a private directory and names it in the command's
// environment ($STROBOSCOPE_EVENTS_DIR). Every process with that variable writes its edges into
// its own files there, one per (process, producer): `<dir>/<pid>.<producer>.sev`, or
// `<pid>.<producer>.<n>.sev` (n = 1, 2, ...) when that name is taken (a pid reused after its
// process ended, or an exec'd child of a process that already wrote). Producer "py" is the
// Python extension's events log (EventLog::global(), what stroboscope.annotate writes), "nvtx"
// the NVTX injection library. The writer is the EventLog of events.hpp with its ring mapped
// from the file (MAP_SHARED) instead of anonymous memory: the same lock-free push, so a reader
// of the file, even after the process was SIGKILLed, finds every record that was published.
//
// File layout (little-endian; version 2: version 1 plus records of kinds 3 and 4, edge counters). All offsets from the start of the file:
//
//   header, kHeaderBytes (4096) bytes:
//     0   magic "STRBSEV1" (8 bytes; written last, so a file with the magic has a whole header)
//     8   u32 version (2)                 12  u32 header_bytes (4096)
//     16  i64 pid                         24  i64 parent pid (getppid() at creation)
//     32  u64 capacity (records, a power of two)
//     40  u64 slots offset (4096)         48  u64 states offset (slots + capacity * 32)
//     56  u64 strings offset (states + capacity * 8)
//     64  u64 strings capacity (bytes)
//     72  u64 first index: the log index this file starts at (the log's claim counter when a
//         forked child made it; 0 otherwise). Indices below it belong to the parent's file.
//     80  i64 created, CLOCK_MONOTONIC ns     88  u32 record bytes (32)   92  u32 flags (0)
//     96  producer name, NUL-padded (32 bytes)
//     128 u64 strings used (bytes of whole entries; release-stored after the entry's bytes)
//     136 u64 strings count (entries; id = position, id 0 is "")
//     144 u64 strings missing (interned after the area filled up: not in the file)
//     192 u64 dropped (events a producer dropped because their slot was busy)
//   slots: capacity records of 4 u64 words, record i in slot i & (capacity - 1):
//     mono_ns | stack_id | scope_id + labels_id << 32 | tid (u32) + depth << 32 + kind << 48;
//     kind 1 begin, 2 end, 3 or 4 the counters of the latest edge of the same thread before it
//     (events.hpp: thread CPU ns | minflt + majflt << 32 | nvcsw + nivcsw << 32 | tid + depth
//     << 32 + kind << 48; kind 3 has the CPU clock only, 4 also getrusage(RUSAGE_THREAD))
//   states: capacity u64 words, one per slot: 0 never written, (i + 1) << 1 record i published,
//     ((i + 1) << 1) | 1 record i being written (a reader skips it: its writer was killed there
//     or is still at work).
//   strings: entries of a u32 byte length and the UTF-8 bytes, back to back.
//
// The file is sized at creation and its blocks are reserved (fallocate) as it fills: the header
// and the first chunk of the strings at creation, the ring a 64th at a time (the chunk after the
// one a producer writes in, by whichever producer gets there first), the strings 64 KiB at a
// time. So a process that writes a few events takes a few pages, and a full filesystem drops
// events (counted) instead of killing the process with SIGBUS on a later push. A file whose
// first chunk cannot be reserved is not used: the log keeps its events in memory (the "py" log)
// or drops them (counted).
//
// The doorbell (edge rows across processes): a recorder that wants a row when a scope opens
// makes `<dir>/doorbell` (EventsDoorbell, before it starts the command): 4096 bytes, magic
// "STRBBELL" at 0, a u32 futex word at 64 (bumped per wake), a u32 flag at 128 that the
// recorder's waiter raises before it asks for a row. A process maps it when it makes its events
// file; a begin that finds the flag up takes it down, bumps the word and wakes the waiter
// (FUTEX_WAKE, not private: the word is shared between processes); every other begin only loads
// the flag. So the command makes one system call per sleep of the waiter, and every begin has a
// row asked after it (the protocol: shared_events_doorbell.cpp).
//
// Beside a file, a recorder's drain writes `<file>.drained` (the records it took) and
// `<file>.header` (the header as it first read it); a process that could not make its file
// leaves `<file>.failed` (kFailedSuffix). A process writes only into a directory owned by its
// effective user that no other user may write into.
//
// The Python reader is stroboscope/formats/shared_events.py (its docstring repeats this layout).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <string_view>
#include <vector>

#include "stroboscope/events.hpp"

namespace stroboscope {

// The environment variable naming the directory (its one spelling in C++), and the one that sizes
// the rings of the shared logs of a process (records, a power of two; default: the log's own,
// 2**20 unless configured).
inline constexpr const char* kEventsDirEnv = "STROBOSCOPE_EVENTS_DIR";
inline constexpr const char* kEventsCapacityEnv = "STROBOSCOPE_EVENTS_CAPACITY";
// Edge counters for a recorded command's logs (EventLog::set_counters): "cpu" or "rusage".
inline constexpr const char* kEdgeCountersEnv = "STROBOSCOPE_EDGE_COUNTERS";

namespace sev {
inline constexpr char kMagic[8] = {'S', 'T', 'R', 'B', 'S', 'E', 'V', '1'};
inline constexpr std::uint32_t kVersion = 2;
inline constexpr std::size_t kHeaderBytes = 4096;
inline constexpr std::size_t kRecordBytes = 32;
inline constexpr std::size_t kProducerBytes = 32;
// The strings area (reserved on disk): room for tens of thousands of names and label sets.
inline constexpr std::uint64_t kStringsBytes = std::uint64_t{4} << 20;
// The largest ring of an events file (records): a 640 MiB file, whose 128 MiB of states a
// recorder's drain reads at every poll. A reader refuses a header that claims more (or a larger
// strings area): no writer made it. $STROBOSCOPE_EVENTS_CAPACITY beyond it is ignored.
inline constexpr std::uint64_t kMaxCapacity = std::uint64_t{1} << 24;
// A process that could not make its events file (no space, a file-size limit) leaves an empty
// `<its file's name>.failed` there instead, so its recorder counts it: its scopes were not
// written there (the "py" log keeps them in memory, the others drop them).
inline constexpr const char* kFailedSuffix = ".failed";
// Header fields (byte offsets, see above).
inline constexpr std::size_t kOffVersion = 8;
inline constexpr std::size_t kOffHeaderBytes = 12;
inline constexpr std::size_t kOffPid = 16;
inline constexpr std::size_t kOffParentPid = 24;
inline constexpr std::size_t kOffCapacity = 32;
inline constexpr std::size_t kOffSlots = 40;
inline constexpr std::size_t kOffStates = 48;
inline constexpr std::size_t kOffStrings = 56;
inline constexpr std::size_t kOffStringsCapacity = 64;
inline constexpr std::size_t kOffFirstIndex = 72;
inline constexpr std::size_t kOffCreatedNs = 80;
inline constexpr std::size_t kOffRecordBytes = 88;
inline constexpr std::size_t kOffFlags = 92;
inline constexpr std::size_t kOffProducer = 96;
inline constexpr std::size_t kOffStringsUsed = 128;
inline constexpr std::size_t kOffStringsCount = 136;
inline constexpr std::size_t kOffStringsMissing = 144;
inline constexpr std::size_t kOffDropped = 192;
// The doorbell file.
inline constexpr const char* kDoorbellName = "doorbell";
inline constexpr char kBellMagic[8] = {'S', 'T', 'R', 'B', 'B', 'E', 'L', 'L'};
inline constexpr std::size_t kBellBytes = 4096;
inline constexpr std::size_t kOffBellRings = 64;
inline constexpr std::size_t kOffBellWaiting = 128;
}  // namespace sev

// A producer's side of the doorbell, called after a begin is written: wakes the recorder's
// waiter when its flag is up (one load otherwise). `bell` is the mapped doorbell file.
void ring_doorbell(char* bell) noexcept;

// The mapping of one events file (made by open_event_file, owned by its EventLog).
struct EventFile {
  int fd = -1;
  char* base = nullptr;  // the whole file, MAP_SHARED
  std::size_t bytes = 0;
  std::uint64_t capacity = 0;
  std::string path;
  bool strings_full = false;  // an entry did not fit: later ones are counted missing, not written
  std::uint64_t strings_reserved = 0;  // bytes of the strings area reserved on disk
  char* bell = nullptr;  // the directory's doorbell, mapped (kBellBytes), nullptr when none
  [[nodiscard]] void* slots() const noexcept { return base + sev::kHeaderBytes; }
  [[nodiscard]] std::uint64_t* states() const noexcept {
    return reinterpret_cast<std::uint64_t*>(base + sev::kHeaderBytes +
                                            capacity * sev::kRecordBytes);
  }
  [[nodiscard]] std::uint64_t* word(std::size_t offset) const noexcept {
    return reinterpret_cast<std::uint64_t*>(base + offset);
  }
};

// Makes `<dir>/<pid>.<producer>[.<n>].sev` (0600, O_EXCL, O_NOFOLLOW), reserves and maps it,
// writes the header and `strings` (ids 0.. in order; strings[0] must be "" or strings empty).
// nullptr when it cannot: no such directory; a directory that is not this user's, or that
// others may write into (its events would go where another user reads or replaces them: said
// once on stderr); a capacity beyond kMaxCapacity; a full disk (then the file is left empty
// as `<name>.failed`, see kFailedSuffix). Not the hot path.
[[nodiscard]] EventFile* open_event_file(const char* dir, const char* producer,
                                         std::uint64_t capacity, std::uint64_t first_index,
                                         const std::vector<std::string>& strings) noexcept;
// Reserves the blocks of slots [first, first + count) and of their state words. True when they
// are (or the filesystem cannot say: no fallocate there).
bool reserve_event_chunk(const EventFile& file, std::uint64_t first, std::uint64_t count) noexcept;
// Unmaps and closes (the file stays for its reader).
void close_event_file(EventFile* file) noexcept;
// Appends one interned string (the next id). False, and counted missing, when it does not fit.
bool append_event_string(EventFile& file, std::string_view text) noexcept;

// A process's writer for one producer, for code that is not the Python extension (the NVTX
// injection library). Producers are named by short lowercase names ("py", "nvtx").
class SharedEvents {
 public:
  // The process's writer for `producer`, made on first use from $STROBOSCOPE_EVENTS_DIR:
  // nullptr when the variable is unset or empty, the name is not [a-z0-9_-]{1,16}, or the file
  // cannot be made. Thread-safe. Fork-aware: a forked child's first push makes the child's own
  // file (the interned ids it inherited are copied into it). "py" is the extension's log.
  [[nodiscard]] static SharedEvents* process(const char* producer) noexcept;

  // A stable id for `text` (mutex; callers cache ids). Id 0 is "".
  std::uint32_t intern(std::string_view text) { return log_->intern(text); }

  // Lock-free: stamps CLOCK_MONOTONIC and gettid (EventLog::push).
  void push(EventKind kind, std::uint32_t scope_id, std::uint16_t depth, std::uint32_t labels_id,
            std::uint64_t stack_id) noexcept {
    log_->push(kind, scope_id, depth, labels_id, stack_id);
  }

  // A mark (an instant): a begin and an end of `scope_id` at one depth, back to back.
  void mark(std::uint32_t scope_id, std::uint16_t depth, std::uint32_t labels_id,
            std::uint64_t stack_id) noexcept {
    log_->push(EventKind::kBegin, scope_id, depth, labels_id, stack_id);
    log_->push(EventKind::kEnd, scope_id, depth, labels_id, stack_id);
  }

  [[nodiscard]] EventLog& log() noexcept { return *log_; }

 private:
  explicit SharedEvents(EventLog* log) noexcept : log_(log) {}
  EventLog* log_;
};

// The recorder's side of the doorbell: makes `<dir>/doorbell` (0600, O_EXCL, O_NOFOLLOW) and
// runs a thread that calls `on_ring` (e.g. Sampler::request_tick) when a process of the command
// opens a scope. Processes that made their events file before the doorbell existed never ring.
class EventsDoorbell {
 public:
  // std::system_error when the file cannot be made.
  EventsDoorbell(const std::string& dir, std::function<void()> on_ring);
  ~EventsDoorbell();  // stops the thread; the file stays (the directory is the recorder's)
  EventsDoorbell(const EventsDoorbell&) = delete;
  EventsDoorbell& operator=(const EventsDoorbell&) = delete;
  void stop() noexcept;
  [[nodiscard]] std::uint64_t wakes() const noexcept {
    return wakes_.load(std::memory_order_relaxed);  // a statistic
  }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  void run() noexcept;
  std::string path_;
  char* bell_ = nullptr;
  int fd_ = -1;
  std::function<void()> on_ring_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> wakes_{0};
  std::thread thread_;
};

}  // namespace stroboscope
