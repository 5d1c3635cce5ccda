// The "proc_tree" source's class, shared by its tick side (here, inline) and its scan side
// (proc_tree_scan.cpp); proc_tree.cpp makes it. What it reads and why: see proc_tree.cpp.
#pragma once

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <stdexcept>
#include <string>
#include <vector>

#include "proc_tree_member.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope::proc_tree {

constexpr std::size_t kMaxScan = 1 << 16;       // processes listed per rescan
constexpr std::int64_t kRescanNs = 1000000000;  // once per second
constexpr std::size_t kDentsBytes = 64 * 1024;
constexpr std::size_t kStatBytes = 4096;  // a stat line is a few hundred bytes

class ProcTreeSource final : public Source {
 public:
  explicit ProcTreeSource(const SourceOptions& opts)
      : Source("proc_tree"), cpu_window_ns_(opts.cpu_window_ns) {
    if (opts.pid < 0) {
      throw std::invalid_argument("pid must be >= 0 (0 = the calling process), got " +
                                  std::to_string(opts.pid));
    }
    int pid = resolve_pid(opts);
    dir_fd_ = ::open(opts.proc_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0) {
      throw std::runtime_error("cannot open " + opts.proc_root + ": " + std::strerror(errno));
    }
    std::string dir = detail::join_path(opts.proc_root, std::to_string(pid));
    if (::access(dir.c_str(), F_OK) != 0) {
      ::close(dir_fd_);
      throw std::runtime_error("pid " + std::to_string(pid) + " does not exist (no " + dir + ")");
    }
    int err = 0;
    std::int64_t pid_max = 0;
    ProcFile pm(detail::join_path(opts.proc_root, "sys/kernel/pid_max"));
    if (!pm.read(&err) || !procfs::parse_single_i64(pm.view(), &pid_max) || pid_max <= 0 ||
        pid_max > (1 << 22)) {
      pid_max = 1 << 22;  // PID_MAX_LIMIT on 64-bit
    }
    mark_.assign(static_cast<std::size_t>(pid_max) / 64 + 1, 0);
    marked_.resize(kMaxScan);
    scan_pid_.resize(kMaxScan);
    scan_ppid_.resize(kMaxScan);
    scan_start_.resize(kMaxScan);
    members_.resize(kMaxMembers);
    next_.resize(kMaxMembers);
    scan_.resize(kMaxMembers);
    known_.resize(kMaxMembers);
    dents_.resize(kDentsBytes);
    stat_buf_.resize(kStatBytes);
    long tck = ::sysconf(_SC_CLK_TCK);
    clk_tck_ = tck > 0 ? static_cast<double>(tck) : 100.0;
    long page = ::sysconf(_SC_PAGESIZE);
    page_size_ = page > 0 ? page : 4096;
    online_cpus_ = detail::online_cpus();

    root_.pid = pid;
    root_.stat_fd = open_pid_file(dir_fd_, pid, "stat");
    root_.statm_fd = open_pid_file(dir_fd_, pid, "statm");
    if (root_.stat_fd < 0 || root_.statm_fd < 0) {
      int e = errno;
      close_member(root_);
      ::close(dir_fd_);
      throw std::runtime_error("cannot open " + dir + "/stat and statm: " + std::strerror(e));
    }
    root_.alive = true;
    scan();  // so the first tick does not pay for it
    adopt_scan();

    add_column("proc.tree.cpu_pct", "%", DType::kFloat64, Kind::kRate,
               "CPU time of the process and its descendants per wall time; 100 per busy core. "
               "Capped at 100 x their threads and at 100 x online CPUs (whole USER_HZ ticks over "
               "a short window can exceed what the threads could use).");
    set_window(0, 1, cpu_window_ns_);
    add_column("proc.tree.rss_bytes", "bytes", DType::kInt64, Kind::kGauge,
               "Resident set size summed over the process and its descendants.");
    add_column("proc.tree.threads", "count", DType::kInt64, Kind::kGauge,
               "Threads in the process and its descendants.");
    add_column("proc.tree.count", "count", DType::kInt64, Kind::kGauge,
               "Processes followed: the process itself plus the descendants found by the last "
               "scan.");
    add_column("proc.tree.untracked", "count", DType::kInt64, Kind::kGauge,
               "Descendants found but not followed: beyond 1024 processes, or whose /proc files "
               "could not be opened for want of file descriptors this tick.");
  }

  ~ProcTreeSource() override {
    on_stop();
    close_member(root_);
    for (std::size_t i = 0; i < n_members_; ++i) close_member(members_[i]);
    // A scan handed over but never adopted still owns the descriptors it opened.
    if (scan_ready_.load(std::memory_order_acquire)) {
      for (std::size_t i = 0; i < n_scan_; ++i) close_member(scan_[i]);
    }
    if (dir_fd_ >= 0) ::close(dir_fd_);
  }

  void on_start() override {
    if (scan_thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(scan_mutex_);
      scan_stop_ = false;
    }
    // Set before the sampler thread exists and cleared after it was joined (on_stop): a plain
    // bool whose writes reach that thread through its creation and join.
    scanner_on_ = true;
    scan_thread_ = std::thread([this] { scan_loop(); });
  }

  void on_stop() noexcept override {
    {
      std::lock_guard<std::mutex> lock(scan_mutex_);
      scan_stop_ = true;
    }
    scan_wake_.notify_all();
    if (scan_thread_.joinable()) scan_thread_.join();
    scanner_on_ = false;
  }

  void forget_threads_after_fork() noexcept override {
    // The parent's scan thread does not exist in the child; it may have held the mutex.
    new (&scan_thread_) std::thread();
    new (&scan_mutex_) std::mutex();
    new (&scan_wake_) std::condition_variable();
    scanner_on_ = false;
  }

  // CPU time comes from each member's stat in USER_HZ ticks, as /proc/<pid>/stat has no finer
  // clock for another process's whole tree; reading every member's two files per millisecond
  // would buy RSS changes at the price of N reads per tick. So: the CPU's resolution.
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return detail::user_hz_ns();
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "each member's CPU time is counted in USER_HZ ticks in /proc/<pid>/stat (10 ms at "
           "USER_HZ = 100), and the tree's RSS is a sum of one statm read per member: read at the "
           "CPU's resolution; the member list is rescanned once a second on a thread of its own.";
  }
  [[nodiscard]] const char* interface() const noexcept override {
    return "/proc/<pid>/stat + statm of each member (members from a rescan of /proc/*/stat)";
  }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    if (!root_.alive) {
      fail(kReasonProcessExited, ESRCH);
      return;
    }
    // acquire pairs with the scan thread's release: the list it wrote is complete.
    if (scan_ready_.load(std::memory_order_acquire)) adopt_scan();
    if (!scanner_on_) {
      if (!scan_time_set_) {
        last_scan_ns_ = now_ns;  // the constructor's scan counts as this tick's
        scan_time_set_ = true;
      } else if (now_ns - last_scan_ns_ >= kRescanNs) {
        scan();  // no scan thread: this thread scans (tick_now, direct reads)
        adopt_scan();
        last_scan_ns_ = now_ns;
      }
    }
    std::uint64_t d_ticks = 0;
    std::int64_t count = 0;
    Sums sums;
    if (sample(root_, &d_ticks, &sums) != Sampled::kOk) {
      close_member(root_);
      fail(kReasonProcessExited, ESRCH);
      return;
    }
    ++count;
    std::int64_t no_fd = 0;
    for (std::size_t i = 0; i < n_members_; ++i) {
      Member& m = members_[i];
      if (!m.alive) continue;
      switch (sample(m, &d_ticks, &sums)) {
        case Sampled::kOk:
          ++count;
          break;
        case Sampled::kNoFd:
          ++no_fd;  // still there, not read this tick
          break;
        case Sampled::kGone:
          close_member(m);  // exited: drops out until the next scan
          break;
      }
    }
    const std::int64_t not_followed = untracked_ + no_fd;
    set_not_followed(static_cast<std::uint64_t>(not_followed));
    // Tick counters (10 ms): accumulate until the window reaches cpu_window_ns, then emit.
    window_ticks_ += d_ticks;
    // Threads bound the CPU % (unknown when their sum overflowed: then only the CPUs do).
    const std::int64_t threads_now = sums.threads_fit ? sums.threads : 0;
    window_threads_ = sums.threads_fit && window_threads_ >= 0
                          ? std::max(window_threads_, threads_now)
                          : -1;
    if (!has_prev_ || now_ns - prev_ns_ >= cpu_window_ns_) {
      double dt = detail::seconds_between(prev_ns_, now_ns);
      if (has_prev_ && dt > 0) {
        double pct = 100.0 * static_cast<double>(window_ticks_) / clk_tck_ / dt;
        row.set_f64(0, detail::cap_cpu_pct(pct, window_threads_, online_cpus_));
      }
      window_ticks_ = 0;
      window_threads_ = sums.threads_fit ? threads_now : -1;
      prev_ns_ = now_ns;
      has_prev_ = true;
    }
    std::int64_t rss_bytes = 0;
    bool rss_fits = sums.rss_fits && procfs::checked_mul(sums.rss_pages, page_size_, &rss_bytes);
    if (rss_fits) row.set_i64(1, rss_bytes);
    if (sums.threads_fit) row.set_i64(2, sums.threads);
    row.set_i64(3, count);
    row.set_i64(4, not_followed);
    if (!rss_fits || !sums.threads_fit) {
      fail("value out of range in /proc/<pid>/stat or statm", ERANGE);
    } else {
      ok();
    }
  }

 private:
  // Sums over the members; a sum that leaves int64 stops there and its cell is null.
  struct Sums {
    std::int64_t rss_pages = 0, threads = 0;
    bool rss_fits = true, threads_fit = true;
  };

  // Reads `leaf` of a member into stat_buf_: through its kept fd, or opened for this read only.
  // Returns the byte count, 0 when the process is gone, -1 when no descriptor was available.
  ssize_t read_member_file(const Member& m, int kept_fd, const char* leaf) noexcept {
    int fd = kept_fd;
    if (fd < 0) {
      fd = open_pid_file(dir_fd_, m.pid, leaf);
      if (fd < 0) return out_of_fds(errno) ? -1 : 0;
    }
    ssize_t n = pread_all(fd, stat_buf_.data(), stat_buf_.size());
    if (kept_fd < 0) ::close(fd);
    return n < 0 ? 0 : n;  // ESRCH and friends: the process is gone
  }

  // Reads one member: kGone when it has exited (or its pid now names another process), kNoFd
  // when its files could not be opened for want of descriptors.
  Sampled sample(Member& m, std::uint64_t* d_ticks, Sums* sums) noexcept {
    ssize_t n = read_member_file(m, m.stat_fd, "stat");
    if (n < 0) return Sampled::kNoFd;
    procfs::PidStat st;
    if (n == 0 ||
        !procfs::parse_pid_stat({stat_buf_.data(), static_cast<std::size_t>(n)}, &st) ||
        procfs::pid_gone(st)) {
      return Sampled::kGone;
    }
    if (m.starttime != 0 && st.starttime != m.starttime) return Sampled::kGone;
    // statm before anything is counted, so a member that cannot be read whole adds nothing.
    n = read_member_file(m, m.statm_fd, "statm");
    if (n < 0) return Sampled::kNoFd;
    if (n == 0) return Sampled::kGone;
    procfs::PidStatm sm;
    const bool have_statm =
        procfs::parse_pid_statm({stat_buf_.data(), static_cast<std::size_t>(n)}, &sm);
    m.starttime = st.starttime;
    std::uint64_t ticks = st.utime + st.stime;
    if (m.has_prev) *d_ticks += procfs::counter_delta(m.prev_ticks, ticks);
    m.prev_ticks = ticks;
    m.has_prev = true;
    sums->threads_fit = sums->threads_fit &&
                        procfs::checked_add(sums->threads, st.num_threads, &sums->threads);
    if (have_statm) {
      std::int64_t pages = 0;
      sums->rss_fits = sums->rss_fits && procfs::to_i64(sm.resident_pages, &pages) &&
                       procfs::checked_add(sums->rss_pages, pages, &sums->rss_pages);
    }
    return Sampled::kOk;
  }

  // The scan side (proc_tree_scan.cpp): the membership rescan and its hand-over to the tick.
  bool marked(std::int64_t pid) const noexcept;
  bool mark(std::int64_t pid) noexcept;
  void scan_loop() noexcept;
  void scan() noexcept;
  void adopt_scan() noexcept;

  int dir_fd_ = -1;
  Member root_;
  std::vector<Member> members_, next_;  // descendants, sorted by pid; capacity kMaxMembers
  std::size_t n_members_ = 0;
  // The handover: scan_ (n_scan_, scan_untracked_) is written by the scanning thread while
  // scan_ready_ is false and adopted by the reading thread while it is true; known_ (n_known_),
  // what the reading thread followed at its latest adoption, is written by the reader then.
  std::vector<Member> scan_;
  std::size_t n_scan_ = 0;
  std::int64_t scan_untracked_ = 0;
  std::vector<Known> known_;
  std::size_t n_known_ = 0;
  std::atomic<bool> scan_ready_{false};
  std::thread scan_thread_;
  std::mutex scan_mutex_;  // guards scan_stop_ (the scan thread's sleep); never on the tick
  std::condition_variable scan_wake_;
  bool scan_stop_ = false;
  bool scanner_on_ = false;  // a scan thread runs (see on_start)
  std::vector<std::uint64_t> mark_;  // one bit per pid: in the tree
  std::vector<int> marked_;          // the set bits, to clear them cheaply
  std::size_t n_marked_ = 0;
  std::vector<int> scan_pid_, scan_ppid_;
  std::vector<std::uint64_t> scan_start_;
  std::vector<char> dents_, stat_buf_;
  std::int64_t untracked_ = 0;
  double clk_tck_ = 100.0;
  std::int64_t page_size_ = 4096;
  std::int64_t last_scan_ns_ = 0, prev_ns_ = 0;
  std::int64_t cpu_window_ns_;
  std::uint64_t window_ticks_ = 0;
  std::int64_t window_threads_ = 0;  // most threads summed in this CPU window; -1: unknown
  std::int64_t online_cpus_ = 0;     // 0: unknown, no cap by CPUs
  bool scan_time_set_ = false, has_prev_ = false;
};


}  // namespace stroboscope::proc_tree
