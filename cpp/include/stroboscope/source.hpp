// The source interface: what every data source (a /proc file, a syscall, a library) implements.
//
// A source declares its columns at construction, owns its kept-open file descriptors and its
// previous reading, and on `read()` fills its slice of the row being built. `read()` runs on the
// sampler thread: it must not allocate, throw or log. A failure becomes null cells plus a reason
// (a static string) and an errno the Python side can read.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <time.h>

#include "stroboscope/column.hpp"

namespace stroboscope {

// A view on one source's slice of the row the sampler is building. Cells are 8 bytes; a cell not
// set during `read()` stays null (the sampler clears the row before each tick).
class RowWriter {
 public:
  RowWriter(std::uint64_t* cells, std::uint8_t* valid, std::size_t n) noexcept
      : cells_(cells), valid_(valid), n_(n) {}

  void set_f64(std::size_t i, double v) noexcept {
    if (i >= n_) return;
    std::memcpy(&cells_[i], &v, sizeof v);
    valid_[i] = 1;
  }
  void set_i64(std::size_t i, std::int64_t v) noexcept {
    if (i >= n_) return;
    std::memcpy(&cells_[i], &v, sizeof v);
    valid_[i] = 1;
  }
  void set_null(std::size_t i) noexcept {
    if (i < n_) valid_[i] = 0;
  }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }

 private:
  std::uint64_t* cells_;
  std::uint8_t* valid_;
  std::size_t n_;
};

// Where sources read from. Tests point the roots at recorded trees under tests/data/.
struct SourceOptions {
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  std::string cgroup_root = "/sys/fs/cgroup";
  int pid = 0;                              // 0: the calling process
  std::vector<std::string> disk_paths{"/"};  // statvfs targets of the "disk" source
  std::vector<unsigned> gpu_devices;          // NVML indices for the "gpu" source; empty = all
  std::vector<std::string> gpu_labels;        // column labels for those devices (gpu.{label}.*)
  // CPU % from /proc tick counters (USER_HZ, 10 ms resolution) is computed over windows of at
  // least this long; reads in between leave the cells null instead of reporting 0 % or 500 %.
  std::int64_t cpu_window_ns = 100'000'000;
  // Byte rates (net.*_per_s, disk.*_per_s) likewise, over windows of at least this long.
  std::int64_t rate_window_ns = 100'000'000;
  bool net_include_loopback = false;  // the "network" source counts lo too (psutil's default)
  // proc.cpu_pct of this process counts stroboscope's own threads too (the sampler thread and
  // the poll threads); by default they are left out and shown as proc.self_cpu_pct.
  bool include_own_threads = false;
  // The clock_gettime sources stamp their reads with (CLOCK_MONOTONIC) and read thread CPU clocks
  // through; C++ tests put a scripted one here to replay a preempted sampler. Never null.
  int (*gettime)(clockid_t, timespec*) = &::clock_gettime;
};

// The sampler's grid of deadlines for one run, handed to sources before it starts: tick k
// (k >= first_tick) is due at origin_ns + (k - first_tick) * interval_ns. Written before the
// sources' threads are created, so those threads may read it without synchronisation.
struct TickSchedule {
  std::int64_t origin_ns = 0;
  std::uint64_t first_tick = 0;
  std::int64_t interval_ns = 0;
};

class Source {
 public:
  explicit Source(std::string name) : name_(std::move(name)) {}
  virtual ~Source() = default;
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const std::vector<ColumnSpec>& columns() const noexcept { return columns_; }

  // Fill this source's cells for the tick taken at `now_ns` (CLOCK_MONOTONIC). Hot path: no
  // allocation, no exception, no logging. Call `ok()` or `fail()` exactly once per read.
  virtual void read(RowWriter row, std::int64_t now_ns) noexcept = 0;

  // A slow source (a library call of tens to hundreds of µs, like NVML) says so: the sampler then
  // polls it on a thread of its own (PolledSource) so it never makes a /proc tick late.
  [[nodiscard]] virtual bool slow() const noexcept { return false; }

  // How often the kernel value this source reads can change, in nanoseconds: the sampler's
  // Python layer reads the source no faster than this by default (every = ceil(resolution /
  // interval)), while the base tick stays as fast as asked. 0: the value can change on any event
  // (a packet, a page fault, a finished request), so every tick may carry something new.
  // The reason (a static string, shown in docs/metrics.md) cites the kernel fact behind it.
  [[nodiscard]] virtual std::int64_t natural_resolution_ns() const noexcept { return 0; }
  [[nodiscard]] virtual const char* resolution_reason() const noexcept {
    return "not declared: read on every tick";
  }

  // The kernel interface the source reads, chosen at construction ("clock_getcpuclockid",
  // "/proc/<pid>/stat", "rtnetlink", "/proc/net/dev", ...): where a faster exact interface is
  // missing the source falls back to a text file and says so here. A static string.
  [[nodiscard]] virtual const char* interface() const noexcept { return ""; }

  // Lifecycle hooks, called by the sampler off the hot path: when it starts, after it stopped,
  // and in the child after a fork (where no thread of the parent exists).
  virtual void on_start() {}
  // Called just before on_start() with the grid the sampler's ticks will follow, for a source
  // that wants its own thread to land just before a tick (PolledSource). `schedule` outlives the
  // run.
  virtual void follow_schedule(const TickSchedule* /*schedule*/) noexcept {}
  virtual void on_stop() noexcept {}
  virtual void forget_threads_after_fork() noexcept {}

  // Why the latest read left cells null, or nullptr when it succeeded. Reads from any thread.
  [[nodiscard]] const char* reason() const noexcept {
    // acquire pairs with the release in fail()/ok(): the errno stored before it is visible.
    return reason_.load(std::memory_order_acquire);
  }
  [[nodiscard]] int error_number() const noexcept {
    return errno_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t failures() const noexcept {
    return failures_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t reads() const noexcept {
    return reads_.load(std::memory_order_relaxed);
  }
  // Things the source found but does not follow at its latest read (proc_tree: descendants past
  // its cap or without a descriptor); 0 for sources that follow everything they find.
  [[nodiscard]] std::uint64_t not_followed() const noexcept {
    return not_followed_.load(std::memory_order_relaxed);
  }

 protected:
  void add_column(std::string name, std::string unit, DType dtype, Kind kind, std::string help) {
    columns_.push_back(ColumnSpec{std::move(name), std::move(unit), dtype, kind, std::move(help)});
  }
  // Columns [first, last) get a value once per window of at least `window_ns` (ColumnSpec).
  void set_window(std::size_t first, std::size_t last, std::int64_t window_ns) {
    for (std::size_t i = first; i < last && i < columns_.size(); ++i) {
      columns_[i].window_ns = window_ns;
    }
  }

  // Record a successful read. Counters have a single writer (the sampler thread), so a relaxed
  // load + store is enough; readers on other threads only need an untorn value.
  void ok() noexcept {
    reads_.store(reads_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    reason_.store(nullptr, std::memory_order_release);
  }
  // Single writer (the sampler thread); readers only need an untorn value: relaxed.
  void set_not_followed(std::uint64_t n) noexcept {
    not_followed_.store(n, std::memory_order_relaxed);
  }
  // Record a failed read: `why` must be a string literal (no allocation on the hot path).
  void fail(const char* why, int err = 0) noexcept {
    reads_.store(reads_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    failures_.store(failures_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    errno_.store(err, std::memory_order_relaxed);
    reason_.store(why, std::memory_order_release);
  }

 private:
  std::string name_;
  std::vector<ColumnSpec> columns_;
  std::atomic<const char*> reason_{nullptr};
  std::atomic<int> errno_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::atomic<std::uint64_t> reads_{0};
  std::atomic<std::uint64_t> not_followed_{0};
};

// Opens `path` read-only for a source: O_NONBLOCK (a FIFO is never waited on), then fstat; anything
// but a regular file is closed and refused with errno EINVAL. Returns the fd (blocking again) or -1
// with errno set. /proc, /sys and cgroup files are regular files. Construction time only.
[[nodiscard]] int open_regular_file(const char* path) noexcept;

// Why a path the user gave cannot be opened as a file ("a FIFO, not a regular file"), or "" when it
// is a regular file or does not exist (the caller's own error then says so). Follows symlinks.
[[nodiscard]] std::string not_regular_reason(const std::string& path);

// A file kept open for the life of a source and re-read with pread(fd, buf, n, 0): /proc files
// regenerate their content on every read at offset 0, so no seek and no reopen is needed. The
// buffer is sized at construction (twice the first read, at least 4 KiB) so reads never allocate.
class ProcFile {
 public:
  ProcFile() = default;
  // Opens `path` (open_regular_file); on failure `is_open()` is false and `open_errno()` says why
  // (EINVAL: not a regular file); no throw.
  explicit ProcFile(const std::string& path, std::size_t min_capacity = 4096);
  ~ProcFile();
  ProcFile(ProcFile&& other) noexcept;
  ProcFile& operator=(ProcFile&& other) noexcept;
  ProcFile(const ProcFile&) = delete;
  ProcFile& operator=(const ProcFile&) = delete;

  [[nodiscard]] bool is_open() const noexcept { return fd_ >= 0; }
  [[nodiscard]] int open_errno() const noexcept { return open_errno_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

  // Reads the whole file (up to the buffer's capacity) into the buffer. Returns false and sets
  // `*err` on failure. `truncated()` is true when the content filled the buffer entirely.
  [[nodiscard]] bool read(int* err) noexcept;
  [[nodiscard]] std::string_view view() const noexcept {
    return std::string_view(buf_.data(), len_);
  }
  [[nodiscard]] bool truncated() const noexcept { return len_ == buf_.size(); }

 private:
  std::string path_;
  std::vector<char> buf_;
  std::size_t len_ = 0;
  int fd_ = -1;
  int open_errno_ = 0;
};

}  // namespace stroboscope
