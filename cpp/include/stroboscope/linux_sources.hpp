// Constructors of the Linux data sources, one per file in cpp/src (proc_stat.cpp, ...). The
// registry maps names to these; tests may call them directly. Each throws std::runtime_error with a
// readable reason when the source cannot work on this machine (or on this recorded tree).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "stroboscope/source.hpp"

namespace stroboscope {

// The reason a "process"/"proc_tree" read gives once the monitored process is gone (errno ESRCH).
// Compare by content (std::strcmp) or by pointer: both work.
inline constexpr const char kReasonProcessExited[] = "process exited";

// One per source, defined in the file named after what it reads: proc_stat.cpp (cpu, cpu_cores),
// proc_meminfo.cpp, proc_net_dev.cpp, disk_usage.cpp, proc_diskstats.cpp, proc_pid.cpp,
// proc_tree.cpp, proc_loadavg.cpp, proc_pressure.cpp, cgroup.cpp.
[[nodiscard]] std::unique_ptr<Source> make_cpu_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_cpu_cores_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_memory_source(const SourceOptions& opts);
// "network": rtnetlink (net_netlink.cpp) on the live system, /proc/net/dev where that fails or
// the procfs root is a recorded tree.
[[nodiscard]] std::unique_ptr<Source> make_network_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_netlink_network_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_disk_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_diskio_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_process_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_process_io_source(const SourceOptions& opts);
// "threads" (opt-in): proc_task_schedstat.cpp.
[[nodiscard]] std::unique_ptr<Source> make_threads_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_proc_tree_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_load_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_pressure_source(const SourceOptions& opts);
[[nodiscard]] std::unique_ptr<Source> make_cgroup_source(const SourceOptions& opts);

// True when the process named by `opts` runs under a cgroup CPU quota or memory limit (its own
// cgroup or an ancestor's). False when there is none or the cgroup files cannot be read.
[[nodiscard]] bool cgroup_limits_exist(const SourceOptions& opts) noexcept;

// The column prefix the "disk" source uses for `path`: "disk." for "/", otherwise "disk.<path>."
// with leading/trailing '/' stripped, letters lower-cased, '/' and any other character outside
// [a-z0-9_] replaced by '_': "/data/x" -> "disk.data_x.",
// "/mnt/Scratch-1" -> "disk.mnt_scratch_1.".
[[nodiscard]] std::string disk_column_prefix(std::string_view path);

// The pid a process-scoped source monitors: opts.pid, or getpid() when it is 0 (resolved once, at
// construction, so a forked child keeps monitoring the process it was told about).
[[nodiscard]] int resolve_pid(const SourceOptions& opts) noexcept;

// Stroboscope's own threads in this process besides the sampler thread (which the "process"
// source knows as the thread that reads it while the sampler runs): a poll thread registers
// itself when it starts and unregisters before it ends, so that proc.cpu_pct leaves it out
// (unless include_own_threads) and proc.self_cpu_pct counts it. At most 64 at a time; past that
// a thread is not registered and counts as the user's. Lock-free; the calling thread is the one
// (un)registered.
void register_own_thread() noexcept;
void unregister_own_thread() noexcept;

namespace detail {

// Whether `tid` is registered (register_own_thread), and a number that changes at each
// registration or unregistration (a reader re-lists its threads when it moved).
[[nodiscard]] bool is_own_thread(int tid) noexcept;
[[nodiscard]] std::uint64_t own_threads_generation() noexcept;

// "<root>/<rel>" with exactly one '/' between them.
[[nodiscard]] std::string join_path(std::string_view root, std::string_view rel);

// Opens a file a source cannot work without; throws std::runtime_error naming the file, what it
// is for and the system's reason ("cannot open /proc/stat (cpu times): No such file or directory").
[[nodiscard]] ProcFile open_required(const std::string& path, const char* what,
                                     std::size_t min_capacity = 4096);

// Seconds between two CLOCK_MONOTONIC tick times, or 0 when `now_ns` is not after `prev_ns`.
[[nodiscard]] inline double seconds_between(std::int64_t prev_ns, std::int64_t now_ns) noexcept {
  return now_ns > prev_ns ? static_cast<double>(now_ns - prev_ns) * 1e-9 : 0.0;
}

// CPUs online now (sysconf), or 0 when unknown. Read at construction, never on the hot path.
[[nodiscard]] std::int64_t online_cpus() noexcept;

// One USER_HZ tick in nanoseconds (1e9 / sysconf(_SC_CLK_TCK); 10 ms when unknown).
[[nodiscard]] std::int64_t user_hz_ns() noexcept;

// A CPU % from USER_HZ tick counters, capped at what `threads` threads on `cpus` CPUs could have
// used (100 each): whole ticks over a short window overshoot (11 ticks in 0.1 s reads 110 % for
// one thread). A bound <= 0 means unknown and does not cap.
[[nodiscard]] inline double cap_cpu_pct(double pct, std::int64_t threads,
                                        std::int64_t cpus) noexcept {
  if (threads > 0 && pct > 100.0 * static_cast<double>(threads)) {
    pct = 100.0 * static_cast<double>(threads);
  }
  if (cpus > 0 && pct > 100.0 * static_cast<double>(cpus)) pct = 100.0 * static_cast<double>(cpus);
  return pct;
}

// How often the byte-counter sources ("network", "diskio") are read by default: once per rate
// window, plus a twentieth so that the jitter of the ticks never leaves a window a hair short
// (which would null its rate and close it one read later). Their rates are taken over windows of
// at least rate_window anyway, so each rate keeps its value; the since-start byte totals are exact
// at each read and carry one value per window instead of one per tick. 0 (rate_window 0): every
// tick. `sources={name: interval}` still reads them at any rate.
[[nodiscard]] inline std::int64_t byte_counter_read_every_ns(std::int64_t rate_window_ns) noexcept {
  return rate_window_ns > 0 ? rate_window_ns + rate_window_ns / 20 : 0;
}
inline constexpr const char kByteCounterResolutionReason[] =
    "read once per rate_window + 5 % (105 ms by default; jitter never leaves a window short): "
    "the byte rates are taken over windows of at least rate_window anyway, so no rate is lost; "
    "the byte totals are exact at each read, one per window instead of one per tick. "
    "sources={name: None} reads them every tick; so does rate_window=0.";

// A per-second rate of a since-start byte total over windows of at least `window_ns`. Kernel
// byte counters advance in bursts (a disk request completes, a NIC interrupt fires), so a rate
// over one 1 ms tick reads "0" or "2 GiB/s"; before the window has elapsed the baseline is kept
// and the cell stays null. A window of 0 gives a rate on every read after the first.
class WindowedRate {
 public:
  explicit WindowedRate(std::int64_t window_ns) noexcept : window_ns_(window_ns) {}

  // True, with *rate set, when a window closes at `now_ns`.
  bool update(std::uint64_t total, std::int64_t now_ns, double* rate) noexcept {
    if (!started_) {
      started_ = true;
      base_total_ = total;
      base_ns_ = now_ns;
      return false;
    }
    if (now_ns - base_ns_ < window_ns_ || now_ns <= base_ns_) return false;
    *rate = static_cast<double>(total - base_total_) / seconds_between(base_ns_, now_ns);
    base_total_ = total;
    base_ns_ = now_ns;
    return true;
  }

 private:
  std::int64_t window_ns_;
  std::int64_t base_ns_ = 0;
  std::uint64_t base_total_ = 0;
  bool started_ = false;
};

}  // namespace detail

}  // namespace stroboscope
