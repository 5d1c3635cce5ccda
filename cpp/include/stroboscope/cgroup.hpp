// The "cgroup" source in three steps, one file each: parsing the cgroup files (cgroup_parse.cpp,
// declared in procfs.hpp), discovering which files apply to a process (cgroup_discover.cpp) and
// reading them every tick (cgroup.cpp).
//
// The cgroup comes from /proc/<pid>/cgroup. v2 (a "0::/path" line and <cgroup_root>/
// cgroup.controllers): cpu.max, cpu.stat usage_usec, memory.max, memory.current. v1: the "cpu" and
// "cpuacct" hierarchies (cpu.cfs_quota_us / cpu.cfs_period_us, cpuacct.usage in ns) and "memory"
// (memory.limit_in_bytes / memory.usage_in_bytes; >= 2^62 means no limit), each mounted at
// <cgroup_root>/<controller> or a combined "cpu,cpuacct" directory. Inside a container the listed
// path often does not exist under the mount (the mount is the container's own cgroup): then the
// controller's root directory is used.
//
// Usage is read from the process's own cgroup. The limit that applies is the tightest one on the
// path from that cgroup up to the root; which directory holds it is decided at discovery, and its
// file is re-read once a second (so a changed value shows within a second, a newly set ancestor
// limit does not); usage is read on every read.
#pragma once

#include <string>
#include <vector>

#include "stroboscope/source.hpp"

namespace stroboscope::cgroup {

// The control files the source reads for one process; a path is empty when that file is absent.
struct Layout {
  bool v2 = false;
  std::string cpu_limit, cpu_period;  // v2: cpu.max in cpu_limit; v1: quota and period files
  std::string cpu_usage;              // v2 cpu.stat, v1 cpuacct.usage
  std::string mem_limit, mem_usage;   // v2 memory.max, memory.current; v1 *.limit/usage_in_bytes
};

// Finds the layout for the process named by `opts` (opts.pid under opts.proc_root, hierarchies
// under opts.cgroup_root). Throws std::runtime_error when its /proc/<pid>/cgroup cannot be read or
// neither CPU nor memory accounting is found. Construction time only (allocates, stats files).
[[nodiscard]] Layout find_layout(const SourceOptions& opts);

// `leaf`, then its parents up to and including `mount`: the directories whose limits apply to a
// cgroup at `leaf`. Works on the strings alone (no file system access).
[[nodiscard]] std::vector<std::string> dirs_up(const std::string& mount, const std::string& leaf);

// What read_cpu_limit() returns when it has no limit in cores to give.
inline constexpr double kNoCpuLimit = -1;          // the cgroup has no CPU quota
inline constexpr double kCpuLimitUnreadable = -2;  // a file could not be read or parsed

// The CPU limit in cores (quota / period) from `limit` (v2 cpu.max; v1 cpu.cfs_quota_us) and,
// for v1 with a quota only, `period` (cpu.cfs_period_us). Sets `*err` when a read fails. Hot
// path: no allocation.
[[nodiscard]] double read_cpu_limit(ProcFile& limit, ProcFile& period, bool v2, int* err) noexcept;

}  // namespace stroboscope::cgroup
