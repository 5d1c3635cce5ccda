// Every Python thread's stack of another (or this) process, read from outside on CLOCK_MONOTONIC.
//
// The reader never pauses the target: it copies the interpreter's state with process_vm_readv
// (a stale or bad pointer gives EFAULT, never a crash; a process that exits gives ESRCH) and walks
// the copies. It finds `_PyRuntime` in the ELF symbol tables of the target's libpython or
// executable (plus the load bias from /proc/PID/maps), checks `Py_Version` against the layout it
// was given, and walks runtime -> interpreters -> thread states -> frames -> code objects ->
// str objects. The layout (StroboscopePyLayout) comes from the bindings, taken from the running
// Python's own headers: nothing here includes Python.
//
// Cost per round, per process: one read of the runtime and one of the interpreter; one batched
// read of all thread states (the previous round's list, kept while each `next` still matches);
// one batched read of every thread's current frame pointer and data-stack chunk (frames are
// walked inside those copies; an older chunk of a deep stack is copied whole when reached, a
// frame in no chunk, such as a generator's, is one more read, and then the frame pointer is read
// again to drop a stack the thread left meanwhile); and one batched read (many iovecs) of the
// code objects of the round, which validates the code cache. Strings are read only for a code
// object not seen before. Plus one pread of each thread's schedstat (another process's CPU time).
// Frames and stacks are interned: a stack is a root-first sequence of frame ids, and a sample
// names its stack by id. Allocation happens only when something new is seen (a process, a
// thread, a code object, a string, a stack); the steady state allocates nothing.
//
// The target's memory and files are input, not trusted (a buggy or hostile command can craft a
// fake interpreter, or map a crafted libpython*.so). Every pointer is followed only through
// process_vm_readv (a bad one is EFAULT, counted in reads_failed), and every walk is bounded:
// a thread list that loops is dropped (torn) and one longer than kMaxThreads is cut
// (threads_capped); a frame chain that loops is dropped (torn), one deeper than kMaxDepth keeps
// its leaf side (truncated); a frame is taken from a copied chunk only when wholly inside it
// (no address wrap); a chunk's size field is capped at kChunkCopy bytes of copy; a name is read
// and kept up to 1 KiB of UTF-8 whatever length its object claims; at most 16 interpreters and
// kMaxProcesses processes (processes_capped). The ELF reader caps sections (4,096), tables
// (64 MiB, probed at their last byte before anything is allocated) and symbol tables searched
// (4). Not bounded yet: the code objects and strings interned over a long run, when a hostile
// process shows new ones every round.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "stroboscope/py_stacks_layout.h"

namespace stroboscope::py_stacks {

// -- ELF symbols (py_stacks_elf.cpp) ------------------------------------------------------------

// Reads `n` bytes at file offset `off` into `buf`; false when it cannot.
using ReadAt = std::function<bool(std::uint64_t off, void* buf, std::size_t n)>;

struct ElfImage {
  bool ok = false;               // an ELF64 file of this machine's byte order
  bool shared = false;           // ET_DYN (loaded at a bias) rather than ET_EXEC
  std::uint64_t first_vaddr = 0; // page-aligned p_vaddr of the first PT_LOAD segment
};

// Looks `names` up in .dynsym, then .symtab (defined symbols only); values[i] = st_value or 0
// when not found. Returns what the headers say about the image.
ElfImage elf_find_symbols(const ReadAt& read, const char* const* names, std::size_t n,
                          std::uint64_t* values);

// One line of /proc/PID/maps.
struct Mapping {
  std::uint64_t start = 0, end = 0, offset = 0;
  std::string path;
};
// Parses /proc/PID/maps text; lines without a path are kept with an empty one.
std::vector<Mapping> parse_maps(std::string_view text);

// Where `_PyRuntime` and `Py_Version` of process `pid` are (0 when not found), from its
// libpython*.so mapping or its executable. `why` says what was missing.
struct RuntimeAddress {
  std::uint64_t runtime = 0;
  std::uint64_t version = 0;
  std::string image;  // the file they were found in
  std::string why;
};
// What an ELF file's symbols said, by file identity (path, device, inode, mtime): processes of
// one tree share their libpython, whose symbol tables are read once.
struct ElfLookup {
  ElfImage image;
  std::uint64_t values[2] = {0, 0};
};
using ElfCache = std::unordered_map<std::string, ElfLookup>;
RuntimeAddress find_runtime(int pid, const char* proc_root = "/proc", ElfCache* cache = nullptr);

// -- str objects (py_stacks_unicode.cpp) --------------------------------------------------------

// Decodes a compact str object whose first `avail` bytes are in `obj` into UTF-8 (invalid code
// points become U+FFFD), at most `cap` bytes of output (a longer string is cut at a whole
// character). Returns the output length; -1 when it is not a compact str; -2 when more bytes are
// needed (`*need` = the bytes that hold its first min(length, cap) code points, the most the
// output can use: at most the header + 4 * cap, whatever length the object claims).
long unicode_utf8(const std::uint8_t* obj, std::size_t avail, const StroboscopePyLayout& layout,
                  char* out, std::size_t cap, std::size_t* need) noexcept;

// -- the sampler (py_stacks_sampler.cpp) --------------------------------------------------------

struct StackSample {
  std::int64_t mono_ns;  // CLOCK_MONOTONIC of the read
  std::int64_t cpu_ns;   // the thread's CPU time since its previous sample; -1: none yet
  std::int32_t pid;
  std::int32_t tid;
  std::int32_t stack_id;
  std::int32_t thread_name;  // a string id; -1: unknown
};

// One frame of one new stack, root first (depth 0).
struct StackFrameRow {
  std::int32_t stack_id;
  std::int32_t depth;
  std::int32_t function;  // string ids
  std::int32_t file;
  std::int32_t line;
};

struct StackStats {
  std::uint64_t ticks = 0;            // sampling rounds taken
  std::uint64_t missed_ticks = 0;     // deadlines skipped because a round ran late
  std::uint64_t samples = 0;          // thread stacks recorded
  std::uint64_t threads_read = 0;     // thread states read (a sample per thread read)
  std::uint64_t reads_failed = 0;     // process_vm_readv that failed (EFAULT, ESRCH, EPERM)
  std::uint64_t extra_frame_reads = 0;  // frames outside the copied chunk (generators, deep)
  std::uint64_t truncated = 0;        // stacks deeper than kMaxDepth (root side cut)
  std::uint64_t torn = 0;             // stacks dropped: the thread moved on while read, or a
                                      // frame chain / thread list that loops (hostile memory)
  std::uint64_t threads_capped = 0;   // thread lists cut at kMaxThreads (the rest not read)
  std::uint64_t processes_capped = 0; // processes of a tree left out at kMaxProcesses
  std::uint64_t dropped = 0;          // samples lost to a full buffer (not drained in time)
  std::uint64_t stacks = 0;           // distinct stacks interned
  std::uint64_t frames = 0;           // distinct frames interned
  std::uint64_t processes = 0;        // processes read now
  std::int64_t busy_ns = 0;           // wall time spent in rounds
  std::int64_t thread_cpu_ns = 0;     // this sampler thread's own CPU time
  std::vector<std::pair<int, std::string>> skipped;  // (pid, why) of processes not read
};

class StackSampler {
 public:
  static constexpr std::size_t kMaxDepth = 1024;      // frames per stack (the leaf side kept)
  static constexpr std::size_t kMaxThreads = 1024;    // thread states per process per sample
  static constexpr std::size_t kMaxProcesses = 256;   // processes of a tree
  static constexpr std::size_t kChunkCopy = 256 * 1024;  // bytes of a data-stack chunk copied
  // Full rescans of the process tree (all of /proc): every 50 times the latest scan's cost,
  // within these bounds (only the root when not following a tree). New processes are found
  // sooner: every 10 ms the pids created since are looked at (the latest in /proc/loadavg).
  static constexpr std::int64_t kMinScanNs = 250'000'000;
  static constexpr std::int64_t kMaxScanNs = 2'000'000'000;

  // `root_pid` 0 = this process; `tree` also follows its descendants. `capacity` samples are
  // buffered between drains (rounded up to a power of two).
  StackSampler(const StroboscopePyLayout& layout, int root_pid, bool tree, std::int64_t interval_ns,
               std::size_t capacity, std::string proc_root = "/proc");
  ~StackSampler();
  StackSampler(const StackSampler&) = delete;
  StackSampler& operator=(const StackSampler&) = delete;

  void start();
  void stop() noexcept;
  [[nodiscard]] bool running() const noexcept { return thread_.joinable(); }
  // One round on the caller's thread (tests; the sampler must not be running).
  void sample_once();

  // Copies up to `max` buffered samples into `out`; returns how many.
  std::size_t drain(StackSample* out, std::size_t max) noexcept;
  // Strings and stack frames published since the given counts (call after drain: every sample
  // drained names a stack already published).
  void published(std::size_t strings_from, std::size_t stacks_from, std::vector<std::string>* strings,
                 std::vector<StackFrameRow>* rows, std::size_t* stacks_now);
  [[nodiscard]] StackStats stats() const;
  void forget_thread_after_fork() noexcept;
  // Threads of this process left out of the samples (the caller's own threads), from the next
  // round on; any thread, at any time. skip_thread is false when kMaxSkipped are already left
  // out (the thread is then read as any other); unskip_thread of a thread not left out is a
  // no-op.
  static constexpr std::size_t kMaxSkipped = 64;
  bool skip_thread(int tid) noexcept;
  void unskip_thread(int tid) noexcept;

  struct Impl;

 private:
  void loop() noexcept;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace stroboscope::py_stacks
