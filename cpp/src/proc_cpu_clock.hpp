// The CPU time of one process in nanoseconds, from the kernel's CPU clocks: the "process"
// source's proc.cpu_pct (proc_pid.cpp). Internal to cpp/src.
//
// Three ways, best first, chosen at construction:
//  1. The process is this one: the sum of each thread's CPU clock (clock_gettime on the clockid
//     of a thread, found in /proc/self/task). A thread clock read calls the kernel's
//     task_sched_runtime(), which brings a thread running on another CPU up to date first, so
//     the sum is exact to the read (ns). The process clock alone is not: the kernel only updates
//     the calling thread before summing, so a spinning thread on another CPU lags by up to one
//     scheduler tick (1/CONFIG_HZ, 4 ms at HZ=250) and 1 ms rows read 0 %, 0 %, 0 %, 400 %.
//     The thread list is re-read at every read (getdents64 on a kept-open /proc/self/task, about
//     the cost of one small /proc read). What this misses, and says: a thread that exits loses
//     its time since the previous read; a thread born since the previous read is counted from
//     this one (its first microseconds are not).
//     Past kMaxThreadClocks threads (one syscall each per read) it uses way 2.
//  2. Another process, or one with many threads: the process CPU clock (clock_getcpuclockid),
//     one syscall, ns, lagging by at most one scheduler tick per running thread.
//  3. Where neither is allowed: utime + stime of /proc/<pid>/stat (USER_HZ ticks, 10 ms).
#pragma once

#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace stroboscope::detail {

class ProcessCpuClock {
 public:
  enum class Mode { kThreadClocks, kProcessClock, kNone };
  static constexpr std::size_t kMaxThreadClocks = 64;

  // `pid` the process; `task_dir` its /proc/<pid>/task (thread clocks only when `pid` is this
  // process and the procfs root is the live one). Never throws for a missing clock: mode() says.
  ProcessCpuClock(int pid, const std::string& task_dir, bool live_proc);
  ~ProcessCpuClock();
  ProcessCpuClock(const ProcessCpuClock&) = delete;
  ProcessCpuClock& operator=(const ProcessCpuClock&) = delete;

  [[nodiscard]] Mode mode() const noexcept { return mode_.load(std::memory_order_relaxed); }
  // The interface in use, for Source::interface().
  [[nodiscard]] const char* interface() const noexcept;

  // CPU nanoseconds used since the first read (the delta is what matters), and in *ran the
  // number of threads whose clock moved since the previous read (0 when unknown). False when
  // no clock works (the caller falls back to /proc/<pid>/stat ticks). Hot path: no allocation.
  [[nodiscard]] bool read(std::uint64_t* cpu_ns, std::int64_t* ran) noexcept;

  // Threads listed by the latest read (thread-clock mode).
  [[nodiscard]] std::size_t threads() const noexcept { return n_threads_; }

  // Re-lists the threads of this process (constructor, and each read).
  bool rescan() noexcept;

 private:
  struct Thread {
    int tid = 0;
    clockid_t clock = 0;
    std::uint64_t last_ns = 0;
    bool seen = false;  // listed by the current rescan
  };
  bool read_threads(std::uint64_t* cpu_ns, std::int64_t* ran) noexcept;

  // Mode is written by the sampler thread only (on a fallback) and read by stats() from any
  // thread: relaxed, an untorn value is all the reader needs.
  std::atomic<Mode> mode_{Mode::kNone};
  clockid_t process_clock_ = 0;
  int task_fd_ = -1;
  std::array<Thread, kMaxThreadClocks> threads_{};
  std::size_t n_threads_ = 0;
  std::uint64_t total_ns_ = 0;  // thread mode: the sum of deltas so far
  alignas(8) std::array<char, 16384> dirents_{};
};

}  // namespace stroboscope::detail
