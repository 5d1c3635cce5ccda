// Reads /proc/<pid>/task/*/schedstat: the opt-in "threads" source (CPU time and run-queue wait
// of each thread of one process, in nanoseconds, summarised into a fixed set of columns).
//
// schedstat holds three numbers per thread: time on a CPU (ns, se.sum_exec_runtime), time spent
// runnable but waiting for a CPU (ns, sched_info.run_delay) and the number of timeslices. The
// kernel prints them as they stand: a thread running right now has its time brought up to date
// at each scheduler tick and at each switch, so a read lags by at most one tick (1/CONFIG_HZ,
// 1-10 ms) for running threads. Hence a natural resolution of 10 ms, and the per-thread shares
// computed over windows of at least cpu_window (100 ms: at most a few % of error for a thread
// that runs throughout).
//
// Columns are fixed at construction while threads come and go, so the source reports totals and
// the kTop busiest threads of each window (their tid and CPU %), not one column per thread. The
// thread list is re-read at each read (getdents64 on a kept-open directory fd); each thread's
// file is opened, read and closed with a path built on the stack: no allocation, 3 syscalls per
// thread. Past kMaxThreads threads the rest are counted in threads.count but not read.
//
// Each thread's read is bracketed by CLOCK_MONOTONIC stamps, and its shares are its run (wait)
// time since the window opened over the span from the stamp before its read then to the stamp
// after its read now, at most 1 each: a sampler preempted before or during the listing (a
// loaded machine) cannot make a thread read above 100 %, nor shift the window it is divided by.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope {
namespace procfs {

bool parse_schedstat(std::string_view text, SchedStat* out) noexcept {
  SchedStat s;
  if (!next_u64(text, &s.run_ns) || !next_u64(text, &s.wait_ns) || !next_u64(text, &s.slices)) {
    return false;
  }
  *out = s;
  return true;
}

}  // namespace procfs

namespace {

constexpr std::size_t kMaxThreads = 1024;
constexpr std::size_t kTop = 4;

struct Dirent64 {
  std::uint64_t ino;
  std::int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

class ThreadsSource final : public Source {
 public:
  explicit ThreadsSource(const SourceOptions& opts)
      : Source("threads"),
        window_ns_(opts.cpu_window_ns),
        online_cpus_(detail::online_cpus()),
        gettime_(opts.gettime) {
    if (opts.pid < 0) {
      throw std::invalid_argument("pid must be >= 0 (0 = the calling process), got " +
                                  std::to_string(opts.pid));
    }
    std::string dir = detail::join_path(opts.proc_root, std::to_string(resolve_pid(opts))) + "/task";
    task_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (task_fd_ < 0) {
      throw std::runtime_error("cannot open " + dir + ": " + std::strerror(errno));
    }
    prev_.resize(kMaxThreads);
    cur_.resize(kMaxThreads);
    dirents_.resize(16384);
    std::size_t listed = 0;
    if (!list(&listed) || n_cur_ == 0) {
      ::close(task_fd_);
      throw std::runtime_error("no readable schedstat under " + dir +
                               " (kernel built without CONFIG_SCHED_INFO?)");
    }
    add_column("threads.count", "count", DType::kInt64, Kind::kGauge,
               "Threads of the process listed at this read.");
    add_column("threads.ran", "count", DType::kInt64, Kind::kGauge,
               "Threads whose CPU time moved during the window.");
    add_column("threads.cpu_pct", "%", DType::kFloat64, Kind::kRate,
               "CPU time of all its threads per wall time over the window (schedstat run time; "
               "threads that exit during the window are not counted); 100 per busy core. Each "
               "thread's time is divided by the span between stamps around its own two reads, "
               "so none counts above 100.");
    add_column("threads.wait_pct", "%", DType::kFloat64, Kind::kRate,
               "Time its threads spent runnable but waiting for a CPU, per wall time over the "
               "window (schedstat run delay): CPU contention; 100 = one thread always waiting.");
    for (std::size_t k = 0; k < kTop; ++k) {
      std::string p = "threads.top" + std::to_string(k);
      const std::string rank = k == 0 ? "the busiest thread" : "busiest thread number " +
                                                                  std::to_string(k + 1);
      add_column(p + ".tid", "id", DType::kInt64, Kind::kGauge,
                 "Thread id of " + rank + " of the window, by CPU time (null when fewer ran).");
      add_column(p + ".cpu_pct", "%", DType::kFloat64, Kind::kRate,
                 "CPU time of " + rank + " per wall time over the window.");
    }
    set_window(1, columns().size(), window_ns_);  // all but threads.count, once per window
  }
  ~ThreadsSource() override {
    if (task_fd_ >= 0) ::close(task_fd_);
  }

  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return 10'000'000;
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "schedstat prints each thread's run time as last accounted: a running thread is "
           "brought up to date at each scheduler tick (1/CONFIG_HZ, at most 10 ms).";
  }
  [[nodiscard]] const char* interface() const noexcept override {
    return "/proc/<pid>/task/*/schedstat";
  }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    std::size_t listed = 0;
    if (!list(&listed)) {
      fail(n_cur_ == 0 ? kReasonProcessExited : "cannot list /proc/<pid>/task", errno);
      return;
    }
    if (n_cur_ == 0) {
      fail(kReasonProcessExited, ESRCH);
      return;
    }
    row.set_i64(0, static_cast<std::int64_t>(listed));
    if (!has_base_) {
      take_base(now_ns);
      ok();
      return;
    }
    if (now_ns - base_ns_ < window_ns_) {
      ok();
      return;
    }
    // Per thread: the time since the window opened (a thread born inside it: all of its time,
    // over the span since the window's first stamp), over its own span, at most 1.
    std::array<std::pair<std::uint64_t, int>, kTop> top{};
    std::array<double, kTop> top_share{};
    double run = 0.0, wait = 0.0;
    std::int64_t ran = 0;
    for (std::size_t i = 0; i < n_cur_; ++i) {
      const Entry& c = cur_[i];
      const Entry* p = find_prev(c.tid);
      std::uint64_t d_run = procfs::counter_delta(p ? p->run_ns : 0, c.run_ns);
      std::uint64_t d_wait = procfs::counter_delta(p ? p->wait_ns : 0, c.wait_ns);
      const std::int64_t span = c.after_ns - (p ? p->before_ns : base_before_ns_);
      if (span <= 0) continue;
      const double run_share = std::min(1.0, static_cast<double>(d_run) / static_cast<double>(span));
      run += run_share;
      wait += std::min(1.0, static_cast<double>(d_wait) / static_cast<double>(span));
      if (d_run > 0) ++ran;
      if (d_run > top[kTop - 1].first) {
        top[kTop - 1] = {d_run, c.tid};
        top_share[kTop - 1] = run_share;
        for (std::size_t k = kTop - 1; k > 0 && top[k].first > top[k - 1].first; --k) {
          std::swap(top[k], top[k - 1]);
          std::swap(top_share[k], top_share[k - 1]);
        }
      }
    }
    row.set_i64(1, ran);
    row.set_f64(2, detail::cap_cpu_pct(100.0 * run, ran, online_cpus_));
    row.set_f64(3, 100.0 * wait);
    for (std::size_t k = 0; k < kTop; ++k) {
      if (top[k].first == 0) break;  // fewer threads ran: the rest stay null
      row.set_i64(4 + 2 * k, top[k].second);
      row.set_f64(5 + 2 * k, 100.0 * top_share[k]);
    }
    take_base(now_ns);
    ok();
  }

 private:
  struct Entry {
    int tid = 0;
    std::uint64_t run_ns = 0, wait_ns = 0;
    std::int64_t before_ns = 0, after_ns = 0;  // CLOCK_MONOTONIC either side of its read
  };

  std::int64_t stamp() const noexcept {
    timespec ts{};
    gettime_(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  }

  void take_base(std::int64_t now_ns) noexcept {
    std::copy(cur_.begin(), cur_.begin() + static_cast<std::ptrdiff_t>(n_cur_), prev_.begin());
    n_prev_ = n_cur_;
    base_ns_ = now_ns;
    base_before_ns_ = list_before_ns_;
    has_base_ = true;
  }

  // Both lists are in the kernel's listing order (by tid), so a moving cursor finds most.
  const Entry* find_prev(int tid) noexcept {
    for (std::size_t tries = 0; tries < n_prev_; ++tries) {
      if (cursor_ >= n_prev_) cursor_ = 0;
      const Entry& e = prev_[cursor_++];
      if (e.tid == tid) return &e;
    }
    return nullptr;
  }

  // Re-lists the threads and reads each one's schedstat into cur_. False when the listing fails.
  bool list(std::size_t* listed) noexcept {
    n_cur_ = 0;
    cursor_ = 0;
    list_before_ns_ = stamp();
    if (::lseek(task_fd_, 0, SEEK_SET) != 0) return false;
    for (bool more = true; more;) {
      long n = ::syscall(SYS_getdents64, task_fd_, dirents_.data(), dirents_.size());
      if (n < 0) return false;
      if (n == 0) return true;
      // A reply with room to spare for one more entry is the whole listing (procfs fills the
      // buffer while entries fit): saves the call that would return 0.
      more = static_cast<std::size_t>(n) + 512 > dirents_.size();
      for (long off = 0; off < n;) {
        const auto* d = reinterpret_cast<const Dirent64*>(dirents_.data() + off);
        off += d->reclen;
        int tid = 0;
        const char* p = d->name;
        if (*p < '0' || *p > '9') continue;
        for (; *p >= '0' && *p <= '9' && tid < 100'000'000; ++p) tid = tid * 10 + (*p - '0');
        if (*p != '\0') continue;
        ++*listed;
        if (n_cur_ == kMaxThreads) continue;
        char path[32];
        std::size_t len = std::strlen(d->name);
        if (len + sizeof("/schedstat") > sizeof path) continue;
        std::memcpy(path, d->name, len);
        std::memcpy(path + len, "/schedstat", sizeof("/schedstat"));
        const std::int64_t before = stamp();
        int fd = ::openat(task_fd_, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // FIFO: no wait
        if (fd < 0) continue;  // exited meanwhile
        char buf[128];
        ssize_t got = ::pread(fd, buf, sizeof buf - 1, 0);
        const std::int64_t after = stamp();
        ::close(fd);
        procfs::SchedStat s;
        if (got <= 0 || !procfs::parse_schedstat(std::string_view(buf, static_cast<std::size_t>(got)), &s)) {
          continue;
        }
        cur_[n_cur_++] = Entry{tid, s.run_ns, s.wait_ns, before, after};
      }
    }
    return true;
  }

  std::int64_t window_ns_;
  std::int64_t online_cpus_;
  int task_fd_ = -1;
  std::vector<Entry> prev_, cur_;
  std::size_t n_prev_ = 0, n_cur_ = 0, cursor_ = 0;
  std::vector<char> dirents_;
  std::int64_t base_ns_ = 0;
  std::int64_t base_before_ns_ = 0;  // the stamp before the listing that opened the window
  std::int64_t list_before_ns_ = 0;  // the stamp before the latest listing
  int (*gettime_)(clockid_t, timespec*);
  bool has_base_ = false;
};

}  // namespace

std::unique_ptr<Source> make_threads_source(const SourceOptions& opts) {
  return std::make_unique<ThreadsSource>(opts);
}

}  // namespace stroboscope
