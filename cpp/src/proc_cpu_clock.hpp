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
//     The thread list is re-read (getdents64 on a kept-open /proc/self/task) only when it may
//     have changed: when the directory's link count (fstat: 2 + the threads, the kernel's
//     proc_task_getattr, one cheap syscall without a listing) differs from the listing's, when a
//     thread's clock read failed (it exited: a birth and an exit within one tick keep the count),
//     or when the set of stroboscope's own threads changed. What this misses, and says: a thread
//     that exits loses its time since the previous read; a thread born since the previous read
//     is counted from this one (its first microseconds are not).
//     Past kMaxThreadClocks threads (one syscall each per read) it uses way 2.
//  2. Another process, or one with many threads: the process CPU clock (clock_getcpuclockid),
//     one syscall, ns, lagging by at most one scheduler tick per running thread.
//  3. Where neither is allowed: utime + stime of /proc/<pid>/stat (USER_HZ ticks, 10 ms).
//
// Stroboscope's own threads: the thread that reads while the sampler runs (the sampler thread;
// a tick taken inline while it is stopped runs on the caller's thread, which stays the user's)
// and the threads that registered themselves (register_own_thread: the poll threads of slow sources). In this process
// they are left out of the sum unless `include_own` (way 1: their clocks are not read; way 2:
// their clocks are subtracted from the process clock), and their CPU time is reported on its own
// (own_ns: the reading thread's CLOCK_THREAD_CPUTIME_ID plus the registered threads' clocks),
// so the monitor's cost shows beside the workload's instead of inside it. Another process has
// none of them.
//
// Every reading says the CLOCK_MONOTONIC span within which its clocks were read ([before_ns,
// after_ns]: a stamp before the first clock read, one after the last); the CPU time between two
// readings was spent between the first's before_ns and the second's after_ns (cpu_pct_between).
// With the thread clocks each thread's clock read has stamps of its own either side (one vDSO
// call each, tens of ns, beside a syscall per clock), and each thread's share is its CPU time
// over its own span, at most 1: a sampler preempted between one thread's clock and the next, or
// between the clocks and a stamp, cannot make a thread read above 100 %. (A single stamp taken
// once after all the clocks divided a longer CPU interval by a shorter wall one: 136 % rows for
// one spinning thread on a loaded 2-vCPU machine.)
#pragma once

#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace stroboscope::detail {

// One reading of a process's CPU time.
struct CpuReading {
  std::uint64_t ns = 0;         // CPU time (user + system), ns from any origin: only deltas count
  std::int64_t ran = 0;         // thread clocks: threads whose clock moved since the previous one
  std::int64_t before_ns = 0;   // CLOCK_MONOTONIC before the first clock of this reading was read
  std::int64_t after_ns = 0;    // CLOCK_MONOTONIC after the last one was read
  // Thread clocks: the sum over threads of each one's CPU time since the previous reading over
  // the span from the stamp before its previous clock read to the stamp after this one, each
  // at most 1 (1.0 = one thread busy throughout). Not set by the other ways.
  double busy_threads = 0.0;
  // CPU time of stroboscope's own threads (the reading thread and the registered ones), ns from
  // any origin, and the CLOCK_MONOTONIC stamp it was read at; own_ok false when unknown.
  std::uint64_t own_ns = 0;
  std::int64_t own_at_ns = 0;
  bool own_ok = false;
};

// CPU % (100 per busy thread) between two readings of the same clocks: the CPU time between them
// over the span from `prev.before_ns` to `now.after_ns`, which contains every clock's interval.
// It reads low by the readings' own duration over the span (one clock read, under a µs, in a
// window of cpu_window); -1 when the span is empty. (The thread clocks use busy_threads.)
[[nodiscard]] inline double cpu_pct_between(const CpuReading& prev, const CpuReading& now) noexcept {
  const std::int64_t span = now.after_ns - prev.before_ns;
  if (span <= 0) return -1.0;
  const std::uint64_t busy = now.ns >= prev.ns ? now.ns - prev.ns : 0;
  return 100.0 * static_cast<double>(busy) / static_cast<double>(span);
}

// The clock_gettime a ProcessCpuClock reads through (SourceOptions::gettime).
using GettimeFn = int (*)(clockid_t, timespec*);

class ProcessCpuClock {
 public:
  enum class Mode { kThreadClocks, kProcessClock, kNone };
  static constexpr std::size_t kMaxThreadClocks = 64;

  // `pid` the process; `task_dir` its /proc/<pid>/task (thread clocks only when `pid` is this
  // process and the procfs root is the live one); `gettime` reads CLOCK_MONOTONIC and the CPU
  // clocks. Never throws for a missing clock: mode() says.
  ProcessCpuClock(int pid, const std::string& task_dir, bool live_proc,
                  GettimeFn gettime = &::clock_gettime, bool include_own = false);
  ~ProcessCpuClock();
  ProcessCpuClock(const ProcessCpuClock&) = delete;
  ProcessCpuClock& operator=(const ProcessCpuClock&) = delete;

  [[nodiscard]] Mode mode() const noexcept { return mode_.load(std::memory_order_relaxed); }
  // The interface in use, for Source::interface().
  [[nodiscard]] const char* interface() const noexcept;

  // CPU nanoseconds used since the first read (the delta is what matters), the number of threads
  // whose clock moved since the previous read (0 when unknown) and the span of the read. False
  // when no clock works (the caller falls back to /proc/<pid>/stat ticks). `want_own`: read
  // the own threads' clocks too (own_ns; one syscall each, so the caller asks once per window);
  // the process clock of this process reads them anyway, to leave them out. Hot path: no
  // allocation.
  [[nodiscard]] bool read(CpuReading* out, bool want_own = true) noexcept;

  // Threads of the process at the latest read (thread-clock mode), own threads included.
  [[nodiscard]] std::size_t threads() const noexcept { return n_threads_; }

  // Re-lists the threads of this process (constructor, and a read that finds the list changed).
  bool rescan() noexcept;

  // A sampler's run starts (`running`: reads come from its thread, a new one per run, learned
  // at the first read) or ends (reads come from a caller's thread, tick_now or inline ticks:
  // that thread is the user's, and there is no own CPU to report).
  void set_running(bool running) noexcept {
    running_ = running;
    reader_tid_ = 0;
    rescan_due_ = true;
    own_prev_ok_ = false;
  }
  // Thread listings so far (for tests: the list is re-read only when it may have changed).
  [[nodiscard]] std::uint64_t rescans() const noexcept { return rescans_; }

 private:
  struct Thread {
    int tid = 0;
    clockid_t clock = 0;
    std::uint64_t last_ns = 0;
    std::int64_t last_before_ns = 0;  // CLOCK_MONOTONIC just before last_ns was read
    bool seen = false;  // listed by the current rescan
    bool own = false;   // the reading thread or a registered one
  };
  bool read_threads(CpuReading* out) noexcept;
  bool list_changed() noexcept;
  void read_own(CpuReading* out) noexcept;
  bool clock_ns(clockid_t clock, std::uint64_t* out) const noexcept;
  std::int64_t stamp() const noexcept;  // CLOCK_MONOTONIC ns

  // Mode is written by the sampler thread only (on a fallback) and read by stats() from any
  // thread: relaxed, an untorn value is all the reader needs.
  std::atomic<Mode> mode_{Mode::kNone};
  GettimeFn gettime_;
  clockid_t process_clock_ = 0;
  int task_fd_ = -1;
  std::array<Thread, kMaxThreadClocks> threads_{};
  std::size_t n_threads_ = 0;
  std::uint64_t total_ns_ = 0;  // thread mode: the sum of deltas so far
  bool include_own_ = false;
  bool this_process_ = false;   // pid is the reading process: own threads are in it
  bool running_ = false;        // between the sampler's on_start and on_stop
  int reader_tid_ = 0;          // the sampler thread of this run (0: not known yet, or stopped)
  bool rescan_due_ = true;      // a clock read failed or a run began: list again
  std::uint64_t own_gen_ = 0;   // own_threads_generation() at the latest rescan
  std::uint64_t rescans_ = 0;
  // Process-clock mode in this process: the own threads' CPU time summed since the first read.
  std::uint64_t own_prev_ = 0, own_total_ = 0;
  bool own_prev_ok_ = false;
  alignas(8) std::array<char, 16384> dirents_{};
};

}  // namespace stroboscope::detail
