// Parsers for the Linux files the sources read: /proc/stat, /proc/meminfo, /proc/net/dev,
// /proc/diskstats, /proc/loadavg, /proc/pressure/*, /proc/<pid>/{stat,statm,status,io,cgroup}
// and cgroup v1/v2 control files.
//
// Every parser takes the file's bytes (never a path) and returns plain values, so tests and
// fuzzers can call them on recorded input. Parsers used on the sampler thread are noexcept and
// never allocate: they write into caller-provided fixed arrays and return views into the input.
// Only the cgroup membership parser (used at construction) allocates.
//
// Conventions: an int64 field that a key/value file did not contain is `kMissing` (-1). Byte
// values are converted to bytes (meminfo's kB × 1024); everything else is in the file's unit.
//
// Overflow: the files are not trusted to hold sane numbers. A value that does not fit once scaled
// or summed (a kB count × 1024, pages × page size, a sum over processes) is never wrapped or
// saturated: the caller leaves that cell null with a reason and errno ERANGE. Use checked_add and
// checked_mul below for every int64 sum or product of values read from a file.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stroboscope::procfs {

inline constexpr std::int64_t kMissing = -1;

// Capacity of the fixed name fields (interface and block device names), including the NUL.
// Linux limits interface names to 15 bytes and disk names to 31; longer lines are skipped.
inline constexpr std::size_t kNameMax = 64;

// ---- checked int64 arithmetic: false when the exact result does not fit (then *out is unspecified)

[[nodiscard]] inline bool checked_add(std::int64_t a, std::int64_t b, std::int64_t* out) noexcept {
  return !__builtin_add_overflow(a, b, out);
}
[[nodiscard]] inline bool checked_mul(std::int64_t a, std::int64_t b, std::int64_t* out) noexcept {
  return !__builtin_mul_overflow(a, b, out);
}
// An unsigned count from a file (pages, ticks) as int64; false when it is 2^63 or more.
[[nodiscard]] inline bool to_i64(std::uint64_t v, std::int64_t* out) noexcept {
  if (v > static_cast<std::uint64_t>(INT64_MAX)) return false;
  *out = static_cast<std::int64_t>(v);
  return true;
}

// ---- scanning helpers: advance a view over the buffer, never allocate ---------------------------

[[nodiscard]] inline bool is_blank(char c) noexcept { return c == ' ' || c == '\t'; }

inline void skip_blanks(std::string_view& s) noexcept {
  std::size_t i = 0;
  while (i < s.size() && is_blank(s[i])) ++i;
  s.remove_prefix(i);
}

// Skips blanks, parses an unsigned decimal and advances past it. False (s unchanged past the
// blanks) when no number is there or it overflows 64 bits.
[[nodiscard]] inline bool next_u64(std::string_view& s, std::uint64_t* out) noexcept {
  skip_blanks(s);
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{}) return false;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  *out = v;
  return true;
}

[[nodiscard]] inline bool next_i64(std::string_view& s, std::int64_t* out) noexcept {
  skip_blanks(s);
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{}) return false;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  *out = v;
  return true;
}

[[nodiscard]] inline bool next_f64(std::string_view& s, double* out) noexcept {
  skip_blanks(s);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{}) return false;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  *out = v;
  return true;
}

// The next blank-delimited token on the current line (empty at the end of the line).
[[nodiscard]] inline std::string_view next_token(std::string_view& s) noexcept {
  skip_blanks(s);
  std::size_t i = 0;
  while (i < s.size() && !is_blank(s[i]) && s[i] != '\n') ++i;
  std::string_view tok = s.substr(0, i);
  s.remove_prefix(i);
  return tok;
}

// The next line without its '\n'; advances past the '\n'.
[[nodiscard]] inline std::string_view next_line(std::string_view& s) noexcept {
  std::size_t nl = s.find('\n');
  std::string_view line = s.substr(0, nl);
  s.remove_prefix(nl == std::string_view::npos ? s.size() : nl + 1);
  return line;
}

// `s` cut after its last '\n': drops a partial last line (a read that filled the buffer).
[[nodiscard]] inline std::string_view complete_lines(std::string_view s) noexcept {
  std::size_t nl = s.rfind('\n');
  return nl == std::string_view::npos ? std::string_view{} : s.substr(0, nl + 1);
}

// Copies `name` into a fixed field; false when it does not fit or holds a NUL byte (cut short as a
// C string it could pass for another name): the caller skips the line.
[[nodiscard]] inline bool copy_name(std::string_view name, char (&dst)[kNameMax]) noexcept {
  if (name.empty() || name.size() >= kNameMax || name.find('\0') != std::string_view::npos) {
    return false;
  }
  name.copy(dst, name.size());
  dst[name.size()] = '\0';
  return true;
}

// A counter that went backwards was reset (device re-created, counter wrapped): the whole new
// value accrued since the reset. Never negative, never huge.
[[nodiscard]] inline std::uint64_t counter_delta(std::uint64_t prev, std::uint64_t cur) noexcept {
  return cur >= prev ? cur - prev : cur;
}

// ---- /proc/stat ---------------------------------------------------------------------------------

// Jiffies (USER_HZ ticks) of one "cpu" line. Fields an old kernel does not print stay 0.
struct CpuTimes {
  std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                steal = 0, guest = 0, guest_nice = 0;
  int n_fields = 0;  // how many numbers the line had
};

// All time (guest and guest_nice are already counted in user and nice, so they are left out).
[[nodiscard]] inline std::uint64_t cpu_total(const CpuTimes& t) noexcept {
  return t.user + t.nice + t.system + t.idle + t.iowait + t.irq + t.softirq + t.steal;
}
// Time not idle and not waiting for I/O.
[[nodiscard]] inline std::uint64_t cpu_busy(const CpuTimes& t) noexcept {
  return cpu_total(t) - t.idle - t.iowait;
}
// cpu_total without wrapping: false when the sum of the fields leaves 64 bits (only garbage
// counters get there; then cpu_total and cpu_busy would be silently wrong).
[[nodiscard]] inline bool cpu_total_fits(const CpuTimes& t, std::uint64_t* total) noexcept {
  std::uint64_t s = 0;
  for (std::uint64_t v : {t.user, t.nice, t.system, t.idle, t.iowait, t.irq, t.softirq, t.steal}) {
    if (__builtin_add_overflow(s, v, &s)) return false;
  }
  *total = s;
  return true;
}

struct CoreTimes {
  int id = -1;  // N of the "cpuN" line
  CpuTimes times;
};

struct StatCpus {
  bool has_total = false;    // the aggregate "cpu " line was found
  CpuTimes total;
  std::size_t n_cores = 0;       // per-core lines written to the output span
  std::size_t n_cores_seen = 0;  // per-core lines in the text (> n_cores when the span was short)
};

// Parses the "cpu" and "cpuN" lines at the top of /proc/stat. Offline cores have no line.
[[nodiscard]] StatCpus parse_stat_cpus(std::string_view text, std::span<CoreTimes> cores) noexcept;

// ---- /proc/meminfo ------------------------------------------------------------------------------

struct MemInfo {  // bytes; kMissing when the key is absent
  std::int64_t total = kMissing, free = kMissing, available = kMissing, buffers = kMissing,
               cached = kMissing, swap_total = kMissing, swap_free = kMissing;
};

[[nodiscard]] MemInfo parse_meminfo(std::string_view text) noexcept;

// MemAvailable, or MemFree + Buffers + Cached on kernels before 3.14; kMissing if neither works.
// When the sum does not fit in int64, kMissing too and *out_of_range (optional) is set to true.
[[nodiscard]] std::int64_t mem_available_or_estimate(const MemInfo& m,
                                                     bool* out_of_range = nullptr) noexcept;

// ---- /proc/net/dev ------------------------------------------------------------------------------

struct NetDevCounters {
  char name[kNameMax] = {};
  std::uint64_t rx_bytes = 0, rx_packets = 0, tx_bytes = 0, tx_packets = 0;
};

// Interface lines in file order ("  eth0: 1 2 ..." or "eth0:1 2 ..." with the number glued to the
// colon). Returns how many were written; `*seen` (optional) gets how many the text had.
[[nodiscard]] std::size_t parse_net_dev(std::string_view text, std::span<NetDevCounters> out,
                                        std::size_t* seen = nullptr) noexcept;

// ---- /proc/diskstats ----------------------------------------------------------------------------

struct DiskStatLine {
  std::uint32_t major = 0, minor = 0;
  char name[kNameMax] = {};
  std::uint64_t read_sectors = 0, write_sectors = 0;  // always 512-byte units
  int n_stats = 0;  // numbers after the name: 4 (2.4/2.6 partition), 11, 15 (4.18+), 17 (5.5+)
};

// Lines in file order; lines that are neither the 4-stat nor the >= 11-stat layout are skipped.
[[nodiscard]] std::size_t parse_diskstats(std::string_view text, std::span<DiskStatLine> out,
                                          std::size_t* seen = nullptr) noexcept;

// One /sys/block/<dev>/stat (the numbers of a /proc/diskstats line after the name; at least 11).
[[nodiscard]] bool parse_block_stat(std::string_view text, DiskStatLine* out) noexcept;

// The kernel names a partition "<disk><N>", or "<disk>p<N>" when the disk name ends in a digit
// (nvme0n1p1, mmcblk0p2, loop0p1). True when `name` is such a partition of `disk`.
[[nodiscard]] bool is_partition_name_of(std::string_view name, std::string_view disk) noexcept;

// ---- /proc/loadavg ------------------------------------------------------------------------------

struct LoadAvg {
  double avg1 = 0, avg5 = 0, avg15 = 0;
  std::int64_t running = 0, total = 0, last_pid = 0;
};

[[nodiscard]] bool parse_loadavg(std::string_view text, LoadAvg* out) noexcept;

// ---- /proc/pressure/{cpu,memory,io} and cgroup v2 *.pressure ------------------------------------

struct PressureTotals {
  bool has_some = false, has_full = false;
  std::uint64_t some_total_us = 0, full_total_us = 0;  // "total=" stall time, microseconds
};

[[nodiscard]] PressureTotals parse_pressure(std::string_view text) noexcept;

// ---- /proc/<pid>/stat, statm, status, io --------------------------------------------------------

struct PidStat {
  std::string_view comm;  // between the first '(' and the last ')': may hold spaces and parens
  char state = '?';
  std::int64_t ppid = 0;
  std::uint64_t flags = 0;  // the task's PF_* flags (field 9)
  std::uint64_t utime = 0, stime = 0;  // clock ticks (USER_HZ)
  std::int64_t num_threads = 0;
  std::uint64_t starttime = 0;  // clock ticks after boot: with the pid, identifies a process
  std::int64_t rss_pages = 0;
};

// Fields are located after the LAST ')' so a comm like "a) b (c" cannot shift them.
[[nodiscard]] bool parse_pid_stat(std::string_view text, PidStat* out) noexcept;

// True once the process is gone in all but name: a zombie ('Z'), dead ('X'), or inside do_exit()
// (PF_EXITING, 0x4, set by exit_signals() before exit_mm() drops the address space, so from then
// on its statm and the memory fields of its stat read 0 while the state is still 'R'). Read
// statm before stat: zeros in statm then always come with one of these in stat.
[[nodiscard]] inline bool pid_gone(const PidStat& s) noexcept {
  constexpr std::uint64_t kPfExiting = 0x4;  // include/linux/sched.h
  return s.state == 'Z' || s.state == 'X' || (s.flags & kPfExiting) != 0;
}

struct PidStatm {
  std::uint64_t size_pages = 0, resident_pages = 0, shared_pages = 0;
};

[[nodiscard]] bool parse_pid_statm(std::string_view text, PidStatm* out) noexcept;

struct PidStatus {  // kMissing when absent
  std::int64_t ppid = kMissing, threads = kMissing, voluntary_ctxt = kMissing,
               nonvoluntary_ctxt = kMissing;
};

[[nodiscard]] PidStatus parse_pid_status(std::string_view text) noexcept;

struct PidIo {  // bytes; kMissing when absent
  std::int64_t rchar = kMissing, wchar = kMissing, read_bytes = kMissing, write_bytes = kMissing;
};

[[nodiscard]] PidIo parse_pid_io(std::string_view text) noexcept;

// ---- /proc/<pid>/task/<tid>/schedstat ------------------------------------------------------------

struct SchedStat {
  std::uint64_t run_ns = 0;   // time on a CPU (se.sum_exec_runtime)
  std::uint64_t wait_ns = 0;  // time runnable, waiting for a CPU (sched_info.run_delay)
  std::uint64_t slices = 0;   // timeslices run (sched_info.pcount)
};

[[nodiscard]] bool parse_schedstat(std::string_view text, SchedStat* out) noexcept;

// ---- cgroups ------------------------------------------------------------------------------------

// One line of /proc/<pid>/cgroup: "hierarchy-id:controller-list:path". Construction time only.
struct CgroupMembership {
  int hierarchy_id = -1;
  std::string controllers;  // "cpu,cpuacct", "memory", "name=systemd", "" for the v2 line
  std::string path;         // "/docker/abc", "/" ...
};

[[nodiscard]] std::vector<CgroupMembership> parse_proc_cgroup(std::string_view text);

// The v1 path for `controller` ("memory", "cpu", "cpuacct"), or nullptr when not listed.
[[nodiscard]] const CgroupMembership* find_v1_controller(
    const std::vector<CgroupMembership>& lines, std::string_view controller) noexcept;
// The v2 line ("0::/path"), or nullptr.
[[nodiscard]] const CgroupMembership* find_v2(const std::vector<CgroupMembership>& lines) noexcept;

// cgroup v2 cpu.max: "max 100000" (no quota) or "150000 100000".
struct CpuMax {
  bool has_quota = false;
  std::int64_t quota_us = 0, period_us = 0;
};
[[nodiscard]] bool parse_cpu_max(std::string_view text, CpuMax* out) noexcept;

// A file holding one integer ("123\n"), as in memory.current or cpuacct.usage.
[[nodiscard]] bool parse_single_i64(std::string_view text, std::int64_t* out) noexcept;

// cgroup v2 memory.max / v1 memory.limit_in_bytes: sets *limit to the byte limit or kMissing when
// there is none ("max" in v2; in v1 any value >= 2^62, which covers the page-rounded LONG_MAX).
[[nodiscard]] bool parse_memory_limit(std::string_view text, std::int64_t* limit) noexcept;

// The value of the line "key <number>" in a flat keyed file (cpu.stat's usage_usec,
// memory.stat ...), or kMissing.
[[nodiscard]] std::int64_t find_keyed_i64(std::string_view text, std::string_view key) noexcept;

}  // namespace stroboscope::procfs
