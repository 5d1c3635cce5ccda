// Reads /proc/<pid>/{stat,statm,status,io}: the "process" source (CPU %, resident memory, threads,
// disk bytes and context switches of one process).
//
// The pid is fixed at construction (0 means getpid() then, not "self", so a forked child keeps
// watching the process it was told about). The fds stay open: once the process is reaped the
// kernel answers ESRCH on them, even if the pid number is reused. A zombie, a process inside
// do_exit() (procfs::pid_gone: its statm already reads zeros), an ESRCH or an empty read all
// mean "process exited": every cell null, reason kReasonProcessExited, errno ESRCH; the
// source stays in place (other sources keep sampling) and keeps reporting that.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "proc_cpu_clock.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

// The parsers of these files are in proc_pid_parse.cpp.
namespace stroboscope {

int resolve_pid(const SourceOptions& opts) noexcept {
  return opts.pid != 0 ? opts.pid : static_cast<int>(::getpid());
}

namespace {

// A counter "since the first reading" that survives a value going backwards (counts as reset).
struct SinceStart {
  std::uint64_t prev = 0, total = 0;
  bool has_prev = false;
  std::int64_t update(std::uint64_t cur) noexcept {
    if (has_prev) total += procfs::counter_delta(prev, cur);
    prev = cur;
    has_prev = true;
    return static_cast<std::int64_t>(total);
  }
};

// "process" reads stat and statm (CPU %, RSS, memory %, threads: the seed set); "process_io"
// reads status and io (I/O bytes and context switches), an opt-in source of its own so the
// default tick does not pay for two more files (about a quarter of its cost).
class ProcessSource final : public Source {
 public:
  ProcessSource(const SourceOptions& opts, bool io_part)
      : Source(io_part ? "process_io" : "process"),
        io_part_(io_part),
        cpu_window_ns_(opts.cpu_window_ns) {
    if (opts.pid < 0) {
      throw std::invalid_argument("pid must be >= 0 (0 = the calling process), got " +
                                  std::to_string(opts.pid));
    }
    pid_ = resolve_pid(opts);
    std::string ps = std::to_string(pid_);
    std::string dir = detail::join_path(opts.proc_root, ps);
    if (::access(dir.c_str(), F_OK) != 0) {
      throw std::runtime_error("pid " + ps + " does not exist (no " + dir + ")");
    }
    stat_ = detail::open_required(dir + "/stat", "process times");
    if (io_part_) {
      status_ = detail::open_required(dir + "/status", "process context switches");
      io_ = ProcFile(dir + "/io");  // optional: EACCES for another user's process
    } else {
      statm_ = detail::open_required(dir + "/statm", "process memory");
    }
    int err = 0;
    procfs::PidStat st;
    if (!stat_.read(&err) || !procfs::parse_pid_stat(stat_.view(), &st)) {
      throw std::runtime_error("cannot read " + stat_.path() + ": " +
                               (err != 0 ? std::strerror(err) : "unexpected content"));
    }
    if (procfs::pid_gone(st)) {
      throw std::runtime_error("pid " + ps + " has already exited (zombie)");
    }
    io_readable_ = io_part_ && io_.read(&err) && procfs::parse_pid_io(io_.view()).read_bytes >= 0;
    ProcFile meminfo(detail::join_path(opts.proc_root, "meminfo"));
    if (meminfo.read(&err)) mem_total_ = procfs::parse_meminfo(meminfo.view()).total;
    long tck = ::sysconf(_SC_CLK_TCK);
    clk_tck_ = tck > 0 ? static_cast<double>(tck) : 100.0;
    long page = ::sysconf(_SC_PAGESIZE);
    page_size_ = page > 0 ? page : 4096;
    online_cpus_ = detail::online_cpus();
    if (!io_part_) {
      // Thread and process CPU clocks only describe the live system, not a recorded tree.
      clock_ = std::make_unique<detail::ProcessCpuClock>(
          pid_, dir + "/task", opts.proc_root == "/proc", opts.gettime, opts.include_own_threads);
    }

    if (io_part_) {
      add_io_columns();
      return;
    }
    add_column("proc.cpu_pct", "%", DType::kFloat64, Kind::kRate,
               "CPU time (user + system) of the process per wall time; 100 per busy core. "
               "For this process: on every read, the sum over its threads of each one's CPU "
               "clock (ns) since the previous read over the span between monotonic stamps "
               "taken either side of its two clock reads, so a preempted sampler cannot push a "
               "thread past 100. Otherwise the process CPU clock (ns; a running thread lags by "
               "up to one scheduler tick) or /proc/<pid>/stat (USER_HZ ticks), over windows of "
               "at least cpu_window. Never above 100 x the threads that ran nor 100 x online "
               "CPUs. Null once the process is a zombie or inside its exit (its memory gone). "
               "In this process, stroboscope's own threads (the sampler thread and the poll "
               "threads of slow sources) are left out unless include_own_threads: their CPU "
               "is proc.self_cpu_pct. Another process has none of them (a recorder's CPU is its "
               "own process's).");
    add_column("proc.rss_bytes", "bytes", DType::kInt64, Kind::kGauge,
               "Resident set size of the process (null, not 0, once it is exiting).");
    add_column("proc.mem_pct", "%", DType::kFloat64, Kind::kGauge,
               "Resident set size of the process as a share of physical memory.");
    add_column("proc.threads", "count", DType::kInt64, Kind::kGauge,
               "Threads in the process (stroboscope's own included).");
    add_column("proc.self_cpu_pct", "%", DType::kFloat64, Kind::kRate,
               "CPU time of stroboscope's own threads in the sampling process (the sampler "
               "thread's CPU clock, plus the poll threads' where slow sources have them) per "
               "wall time, over windows of at least cpu_window (with the thread clocks, their "
               "clocks are read once per window: a system call each, which every tick would "
               "add to the cost it measures; the cost of each tick is in stats()); 100 per "
               "busy core: the monitor's own cost, beside the workload's proc.cpu_pct. Null "
               "where the process CPU clocks are not used (a recorded /proc tree).");
    // Thread clocks: a value on every read; the coarser clocks: one per cpu_window.
    if (clock_->mode() != detail::ProcessCpuClock::Mode::kThreadClocks) {
      set_window(0, 1, cpu_window_ns_);
    }
    set_window(kSelfCpuColumn, kSelfCpuColumn + 1, cpu_window_ns_);
  }

  // RSS changes on every page fault and the CPU clocks count nanoseconds: nothing to wait for.
  // Through the /proc/<pid>/stat fallback CPU time moves in USER_HZ ticks (sysconf(_SC_CLK_TCK),
  // 100/s on every mainstream kernel), but RSS still changes at any time: still every tick.
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override { return 0; }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return io_part_ ? "I/O bytes are counted per request and context switches per switch: "
                      "they can change on any tick."
                    : "RSS changes on any page fault and the CPU clocks count nanoseconds "
                      "(thread clocks are brought up to date at each read by the kernel's "
                      "task_sched_runtime): every tick. Except proc.self_cpu_pct, the "
                      "monitor's own share: one value per cpu_window (cpu_window=0: every "
                      "tick), since its clocks cost a system call each of the cost they "
                      "measure, and the cost of each tick is in stats().";
  }
  // A run has a sampler thread of its own (found at its first read); ticks taken while stopped
  // run on the caller's thread, the user's. proc.self_cpu_pct starts a new baseline each run.
  void on_start() override {
    if (clock_) clock_->set_running(true);
    has_own_prev_ = false;
  }
  void on_stop() noexcept override {
    if (clock_) clock_->set_running(false);
  }

  [[nodiscard]] const char* interface() const noexcept override {
    if (io_part_) return "/proc/<pid>/io + /proc/<pid>/status";
    return clock_ ? clock_->interface() : "/proc/<pid>/stat";
  }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    if (exited_) {
      fail(kReasonProcessExited, ESRCH);
      return;
    }
    if (io_part_) {
      read_io(row);
    } else {
      read_core(row, now_ns);
    }
  }

 private:
  void add_io_columns() {
    add_column("proc.read_bytes", "bytes", DType::kInt64, Kind::kCounter,
               "Bytes the process caused to be read from storage since the first reading "
               "(null when /proc/<pid>/io is not readable).");
    add_column("proc.write_bytes", "bytes", DType::kInt64, Kind::kCounter,
               "Bytes the process caused to be written to storage since the first reading "
               "(null when /proc/<pid>/io is not readable).");
    add_column("proc.ctx_voluntary", "count", DType::kInt64, Kind::kCounter,
               "Voluntary context switches of the process since the first reading.");
    add_column("proc.ctx_involuntary", "count", DType::kInt64, Kind::kCounter,
               "Involuntary context switches of the process since the first reading.");
  }

  void read_core(RowWriter& row, std::int64_t now_ns) noexcept {
    int err = 0;
    procfs::PidStat st;
    using Mode = detail::ProcessCpuClock::Mode;
    // The CPU time is per the moment the clocks were read, which can be well after the tick's
    // time when the sampler thread was preempted in between (a busy machine): the reading carries
    // the span of its own reads (see cpu_pct_between), not the tick's time.
    detail::CpuReading cpu;
    Mode mode = Mode::kNone;
    // The own threads' clocks once per cpu_window (proc.self_cpu_pct), not on every read.
    // Windows in tick times, as the other windowed columns' (the stamp of the read lies a few
    // µs after its tick: against it, a window would close one tick late).
    const bool want_own = !has_own_prev_ || now_ns - own_prev_tick_ns_ >= cpu_window_ns_;
    if (clock_ && clock_->read(&cpu, want_own)) mode = clock_->mode();
    if (want_own) {
      write_own(row, cpu);
      own_prev_tick_ns_ = now_ns;
    }
    // statm before stat: a process inside do_exit() reads zeros in statm once its address space
    // is gone, and a stat read after that always shows it exiting (procfs::pid_gone).
    procfs::PidStatm sm;
    if (!statm_.read(&err)) {
      if (err == ESRCH) return mark_exited(row);
      fail("cannot read /proc/<pid>/statm", err);
      return;
    }
    if (statm_.view().empty()) return mark_exited(row);
    bool have_statm = procfs::parse_pid_statm(statm_.view(), &sm);

    if (mode == Mode::kThreadClocks) {
      // Watching this very process through its thread clocks: /proc/self/stat would only add
      // the thread count (the clock's listing, taken at this read, has it) and an exit that
      // cannot happen while this code runs. One file fewer per tick.
      st.num_threads = static_cast<std::int64_t>(clock_->threads());
    } else if (!read_stat(row, &st)) {
      return;
    }

    if (mode == Mode::kNone) {
      cpu.ns = static_cast<std::uint64_t>(static_cast<double>(st.utime + st.stime) * 1e9 / clk_tck_);
      cpu.before_ns = cpu.after_ns = now_ns;
    }
    write_cpu(row, st, mode, cpu);
    // Resident pages × page size; a product that does not fit in int64 leaves both cells null.
    std::int64_t rss = 0;
    bool rss_fits = have_statm && procfs::to_i64(sm.resident_pages, &rss) &&
                    procfs::checked_mul(rss, page_size_, &rss);
    if (rss_fits) {
      row.set_i64(1, rss);
      if (mem_total_ > 0) {
        row.set_f64(2, 100.0 * static_cast<double>(rss) / static_cast<double>(mem_total_));
      }
    }
    row.set_i64(3, st.num_threads);
    if (!have_statm) {
      fail("unexpected content in /proc/<pid>/statm", EINVAL);
    } else if (!rss_fits) {
      fail("value out of range in /proc/<pid>/statm", ERANGE);
    } else {
      ok();
    }
  }

  // proc.cpu_pct. With the thread clocks (exact at each read) on every read; with the process
  // clock (a running thread lags up to one scheduler tick) or USER_HZ ticks (10 ms steps) over
  // windows of at least cpu_window_ns: before that the cell stays null and the baseline is kept.
  // Reads and parses /proc/<pid>/stat; false (cells and reason set) when the row stops here.
  bool read_stat(RowWriter& row, procfs::PidStat* st) noexcept {
    int err = 0;
    if (!stat_.read(&err)) {
      if (err == ESRCH) {
        mark_exited(row);
      } else {
        fail("cannot read /proc/<pid>/stat", err);
      }
      return false;
    }
    if (stat_.view().empty()) {
      mark_exited(row);
      return false;
    }
    if (!procfs::parse_pid_stat(stat_.view(), st)) {
      fail("unexpected content in /proc/<pid>/stat", EINVAL);
      return false;
    }
    if (procfs::pid_gone(*st)) {  // a zombie, or inside do_exit() with its memory gone
      mark_exited(row);
      return false;
    }
    return true;
  }

  void write_cpu(RowWriter& row, const procfs::PidStat& st, detail::ProcessCpuClock::Mode mode,
                 const detail::CpuReading& cpu) noexcept {
    using Mode = detail::ProcessCpuClock::Mode;
    if (mode != prev_mode_) has_prev_ = false;  // a new clock: a new baseline
    prev_mode_ = mode;
    const bool exact = mode == Mode::kThreadClocks;
    window_threads_ = exact ? window_threads_ + cpu.ran : std::max(window_threads_, st.num_threads);
    if (has_prev_ && cpu.after_ns - prev_.before_ns < (exact ? 0 : cpu_window_ns_)) return;
    if (has_prev_) {
      const double pct = exact ? 100.0 * cpu.busy_threads : detail::cpu_pct_between(prev_, cpu);
      // Thread clocks: each thread's share is at most 1, so the threads that ran bound the row.
      // The coarser clocks (whole ticks, a running thread that lags) are capped by the most
      // threads seen in the window.
      if (pct >= 0.0) row.set_f64(0, detail::cap_cpu_pct(pct, window_threads_, online_cpus_));
    }
    prev_ = cpu;
    has_prev_ = true;
    window_threads_ = exact ? 0 : st.num_threads;  // the next window starts here
  }

  // proc.self_cpu_pct: the own threads' CPU time since their previous read (a window before)
  // over the wall time between.
  void write_own(RowWriter& row, const detail::CpuReading& cpu) noexcept {
    if (!cpu.own_ok) {
      has_own_prev_ = false;
      return;
    }
    if (has_own_prev_ && cpu.own_at_ns > own_prev_at_ && cpu.own_ns >= own_prev_ns_) {
      const double pct = 100.0 * static_cast<double>(cpu.own_ns - own_prev_ns_) /
                         static_cast<double>(cpu.own_at_ns - own_prev_at_);
      row.set_f64(kSelfCpuColumn, pct);
    }
    own_prev_ns_ = cpu.own_ns;
    own_prev_at_ = cpu.own_at_ns;
    has_own_prev_ = true;
  }

  void read_io(RowWriter& row) noexcept {
    int err = 0;
    const char* why = nullptr;
    int why_err = 0;
    if (io_readable_) {
      if (io_.read(&err) && !io_.view().empty()) {
        procfs::PidIo io = procfs::parse_pid_io(io_.view());
        if (io.read_bytes >= 0) {
          row.set_i64(0, read_.update(static_cast<std::uint64_t>(io.read_bytes)));
        }
        if (io.write_bytes >= 0) {
          row.set_i64(1, write_.update(static_cast<std::uint64_t>(io.write_bytes)));
        }
      } else if (err == ESRCH || io_.view().empty()) {
        return mark_exited(row);
      } else {
        why = "cannot read /proc/<pid>/io";
        why_err = err;
      }
    }
    if (status_.read(&err) && !status_.view().empty()) {
      procfs::PidStatus s = procfs::parse_pid_status(status_.view());
      if (s.voluntary_ctxt >= 0) {
        row.set_i64(2, vol_.update(static_cast<std::uint64_t>(s.voluntary_ctxt)));
      }
      if (s.nonvoluntary_ctxt >= 0) {
        row.set_i64(3, invol_.update(static_cast<std::uint64_t>(s.nonvoluntary_ctxt)));
      }
    } else if (err == ESRCH || status_.view().empty()) {
      return mark_exited(row);
    } else if (why == nullptr) {
      why = "cannot read /proc/<pid>/status";
      why_err = err;
    }
    if (why != nullptr) {
      fail(why, why_err);
    } else {
      ok();
    }
  }

  // Nulls every cell (some may already be set this tick) and records the exit for good.
  void mark_exited(RowWriter& row) noexcept {
    for (std::size_t i = 0; i < row.size(); ++i) row.set_null(i);
    exited_ = true;
    fail(kReasonProcessExited, ESRCH);
  }

  static constexpr std::size_t kSelfCpuColumn = 4;
  bool io_part_;
  bool has_own_prev_ = false;
  std::uint64_t own_prev_ns_ = 0;
  std::int64_t own_prev_at_ = 0;
  std::int64_t own_prev_tick_ns_ = 0;  // the tick of the latest read of the own clocks
  int pid_ = 0;
  ProcFile stat_, statm_, status_, io_;
  bool io_readable_ = false;
  std::int64_t mem_total_ = 0;
  double clk_tck_ = 100.0;
  std::int64_t page_size_ = 4096;
  std::unique_ptr<detail::ProcessCpuClock> clock_;  // "process" only
  detail::ProcessCpuClock::Mode prev_mode_ = detail::ProcessCpuClock::Mode::kNone;
  detail::CpuReading prev_;          // the reading the current CPU window starts from
  std::int64_t window_threads_ = 0;  // threads that ran (thread clocks) or most seen, this window
  std::int64_t online_cpus_ = 0;     // 0: unknown, no cap by CPUs
  bool has_prev_ = false;
  std::int64_t cpu_window_ns_;
  bool exited_ = false;
  SinceStart read_, write_, vol_, invol_;
};

}  // namespace

std::unique_ptr<Source> make_process_source(const SourceOptions& opts) {
  return std::make_unique<ProcessSource>(opts, false);
}

std::unique_ptr<Source> make_process_io_source(const SourceOptions& opts) {
  return std::make_unique<ProcessSource>(opts, true);
}

}  // namespace stroboscope
