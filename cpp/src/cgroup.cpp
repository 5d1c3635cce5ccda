// Reads the cgroup of a process: the "cgroup" source (CPU quota and use in cores, memory limit and
// use in bytes, both as % of the limit), for cgroup v2 and v1.
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
// path from that cgroup up to the root; which directory holds it is decided at construction, and
// its file is re-read every tick (so a changed value shows, a newly set ancestor limit does not).
#include <sys/stat.h>

#include <cerrno>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope {
namespace procfs {

std::vector<CgroupMembership> parse_proc_cgroup(std::string_view text) {
  std::vector<CgroupMembership> out;
  while (!text.empty()) {
    std::string_view line = next_line(text);
    std::size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    std::size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view id = line.substr(0, c1);
    std::uint64_t n = 0;
    if (!next_u64(id, &n) || !id.empty() || n > 1u << 20) continue;
    out.push_back(CgroupMembership{static_cast<int>(n),
                                   std::string(line.substr(c1 + 1, c2 - c1 - 1)),
                                   std::string(line.substr(c2 + 1))});
  }
  return out;
}

const CgroupMembership* find_v1_controller(const std::vector<CgroupMembership>& lines,
                                           std::string_view controller) noexcept {
  for (const CgroupMembership& m : lines) {
    if (m.hierarchy_id == 0) continue;
    std::string_view list = m.controllers;
    while (!list.empty()) {
      std::size_t comma = list.find(',');
      if (list.substr(0, comma) == controller) return &m;
      list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
    }
  }
  return nullptr;
}

const CgroupMembership* find_v2(const std::vector<CgroupMembership>& lines) noexcept {
  for (const CgroupMembership& m : lines) {
    if (m.hierarchy_id == 0 && m.controllers.empty()) return &m;
  }
  return nullptr;
}

bool parse_cpu_max(std::string_view text, CpuMax* out) noexcept {
  CpuMax c;
  std::string_view quota = next_token(text);
  if (quota.empty()) return false;
  std::int64_t period = 100000;  // the kernel's default when only the quota is shown
  std::string_view rest = text;
  if (std::int64_t p = 0; next_i64(rest, &p)) period = p;
  if (period <= 0) return false;
  c.period_us = period;
  if (quota != "max") {
    std::int64_t q = 0;
    if (!next_i64(quota, &q) || !quota.empty()) return false;
    c.has_quota = q > 0;
    c.quota_us = q;
  }
  *out = c;
  return true;
}

bool parse_single_i64(std::string_view text, std::int64_t* out) noexcept {
  std::int64_t v = 0;
  if (!next_i64(text, &v)) return false;
  if (!text.empty() && text.front() != '\n' && !is_blank(text.front())) return false;
  *out = v;
  return true;
}

bool parse_memory_limit(std::string_view text, std::int64_t* limit) noexcept {
  skip_blanks(text);
  if (text.substr(0, 3) == "max") {
    *limit = kMissing;
    return true;
  }
  std::uint64_t v = 0;
  if (!next_u64(text, &v)) return false;
  *limit = v >= (std::uint64_t{1} << 62) ? kMissing : static_cast<std::int64_t>(v);
  return true;
}

std::int64_t find_keyed_i64(std::string_view text, std::string_view key) noexcept {
  while (!text.empty()) {
    std::string_view line = next_line(text);
    if (line.size() <= key.size() || line.substr(0, key.size()) != key ||
        !is_blank(line[key.size()])) {
      continue;
    }
    line.remove_prefix(key.size());
    std::int64_t v = 0;
    return next_i64(line, &v) ? v : kMissing;
  }
  return kMissing;
}

}  // namespace procfs

namespace {

bool is_dir(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The cgroup directory for a hierarchy: <mount><path>, or <mount> when that does not exist.
std::string leaf_dir(const std::string& mount, const std::string& path) {
  std::string d = detail::join_path(mount, path);
  while (d.size() > mount.size() && d.back() == '/') d.pop_back();
  return is_dir(d) ? d : mount;
}

// `leaf`, then its parents up to and including `mount`.
std::vector<std::string> dirs_up(const std::string& mount, const std::string& leaf) {
  std::vector<std::string> out{leaf};
  std::string d = leaf;
  while (d.size() > mount.size()) {
    std::size_t slash = d.rfind('/');
    if (slash == std::string::npos || slash < mount.size()) break;
    d.resize(slash);
    out.push_back(d.size() < mount.size() ? mount : d);
  }
  if (out.back() != mount) out.push_back(mount);
  return out;
}

// The first existing "<cgroup_root>/<name>" directory among `names`, or "".
std::string find_mount(const std::string& root, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    std::string d = detail::join_path(root, n);
    if (is_dir(d)) return d;
  }
  return {};
}

struct Layout {  // what the constructor found; file paths empty when absent
  bool v2 = false;
  std::string cpu_limit, cpu_period;  // v2: cpu.max in cpu_limit; v1: quota and period
  std::string cpu_usage;              // v2 cpu.stat, v1 cpuacct.usage
  std::string mem_limit, mem_usage;
};

double read_cpu_limit_file(ProcFile& a, ProcFile& b, bool v2, int* err) noexcept;

// Limit in cores from the files at `dir` (v2 cpu.max or v1 quota/period), or -1 for none.
double cpu_limit_at(const std::string& dir, bool v2) {
  int err = 0;
  ProcFile a(dir + (v2 ? "/cpu.max" : "/cpu.cfs_quota_us"));
  ProcFile b;
  if (!v2) b = ProcFile(dir + "/cpu.cfs_period_us");
  return read_cpu_limit_file(a, b, v2, &err);
}

std::int64_t mem_limit_at(const std::string& dir, bool v2) {
  ProcFile f(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
  int err = 0;
  std::int64_t lim = procfs::kMissing;
  if (!f.read(&err) || !procfs::parse_memory_limit(f.view(), &lim)) return procfs::kMissing;
  return lim;
}

double read_cpu_limit_file(ProcFile& a, ProcFile& b, bool v2, int* err) noexcept {
  if (!a.read(err)) return -2;
  if (v2) {
    procfs::CpuMax m;
    if (!procfs::parse_cpu_max(a.view(), &m)) return -2;
    return m.has_quota ? static_cast<double>(m.quota_us) / static_cast<double>(m.period_us) : -1;
  }
  std::int64_t quota = 0, period = 0;
  if (!procfs::parse_single_i64(a.view(), &quota)) return -2;
  if (quota <= 0) return -1;
  if (!b.read(err) || !procfs::parse_single_i64(b.view(), &period) || period <= 0) return -2;
  return static_cast<double>(quota) / static_cast<double>(period);
}

Layout find_layout(const SourceOptions& opts) {
  int pid = resolve_pid(opts);
  std::string cg_path = detail::join_path(opts.proc_root, std::to_string(pid) + "/cgroup");
  ProcFile f(cg_path);
  int err = 0;
  if (!f.is_open() || !f.read(&err)) {
    throw std::runtime_error("cannot read " + cg_path + " (the cgroup of pid " +
                             std::to_string(pid) + ")");
  }
  auto lines = procfs::parse_proc_cgroup(f.view());
  Layout l;
  const procfs::CgroupMembership* v2 = procfs::find_v2(lines);
  std::string root = opts.cgroup_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  // Pick, for each of cpu limit / memory limit, the directory with the tightest limit.
  auto pick = [&](const std::string& mount, const std::string& leaf, bool cpu, bool is_v2) {
    std::string best = leaf;
    double best_cpu = -1;
    std::int64_t best_mem = procfs::kMissing;
    for (const std::string& d : dirs_up(mount, leaf)) {
      if (cpu) {
        double c = cpu_limit_at(d, is_v2);
        if (c > 0 && (best_cpu < 0 || c < best_cpu)) best_cpu = c, best = d;
      } else {
        std::int64_t m = mem_limit_at(d, is_v2);
        if (m >= 0 && (best_mem < 0 || m < best_mem)) best_mem = m, best = d;
      }
    }
    return best;
  };
  if (v2 != nullptr && is_file(root + "/cgroup.controllers")) {
    l.v2 = true;
    std::string leaf = leaf_dir(root, v2->path);
    std::string cpu_dir = pick(root, leaf, true, true);
    std::string mem_dir = pick(root, leaf, false, true);
    if (is_file(cpu_dir + "/cpu.max")) l.cpu_limit = cpu_dir + "/cpu.max";
    if (is_file(leaf + "/cpu.stat")) l.cpu_usage = leaf + "/cpu.stat";
    if (is_file(mem_dir + "/memory.max")) l.mem_limit = mem_dir + "/memory.max";
    if (is_file(leaf + "/memory.current")) l.mem_usage = leaf + "/memory.current";
    return l;
  }
  if (const auto* cpu = procfs::find_v1_controller(lines, "cpu")) {
    std::string mount = find_mount(root, {"cpu", "cpu,cpuacct", "cpuacct,cpu"});
    if (!mount.empty()) {
      std::string dir = pick(mount, leaf_dir(mount, cpu->path), true, false);
      if (is_file(dir + "/cpu.cfs_quota_us") && is_file(dir + "/cpu.cfs_period_us")) {
        l.cpu_limit = dir + "/cpu.cfs_quota_us";
        l.cpu_period = dir + "/cpu.cfs_period_us";
      }
    }
  }
  if (const auto* acct = procfs::find_v1_controller(lines, "cpuacct")) {
    std::string mount = find_mount(root, {"cpuacct", "cpu,cpuacct", "cpuacct,cpu"});
    std::string leaf = mount.empty() ? std::string() : leaf_dir(mount, acct->path);
    if (!leaf.empty() && is_file(leaf + "/cpuacct.usage")) l.cpu_usage = leaf + "/cpuacct.usage";
  }
  if (const auto* mem = procfs::find_v1_controller(lines, "memory")) {
    std::string mount = find_mount(root, {"memory"});
    if (!mount.empty()) {
      std::string leaf = leaf_dir(mount, mem->path);
      std::string dir = pick(mount, leaf, false, false);
      if (is_file(dir + "/memory.limit_in_bytes")) l.mem_limit = dir + "/memory.limit_in_bytes";
      if (is_file(leaf + "/memory.usage_in_bytes")) l.mem_usage = leaf + "/memory.usage_in_bytes";
    }
  }
  if (l.cpu_usage.empty() && l.mem_usage.empty()) {
    throw std::runtime_error("no cgroup cpu or memory accounting found under " + root +
                             " for pid " + std::to_string(pid));
  }
  return l;
}

ProcFile open_optional(const std::string& path) {
  return path.empty() ? ProcFile() : ProcFile(path);
}

class CgroupSource final : public Source {
 public:
  explicit CgroupSource(const SourceOptions& opts) : CgroupSource(find_layout(opts)) {}

  bool has_limits() noexcept {
    int err = 0;
    if (cpu_limit_.is_open() && read_cpu_limit_file(cpu_limit_, cpu_period_, v2_, &err) > 0) {
      return true;
    }
    std::int64_t lim = procfs::kMissing;
    return mem_limit_.is_open() && mem_limit_.read(&err) &&
           procfs::parse_memory_limit(mem_limit_.view(), &lim) && lim > 0;
  }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    const char* why = nullptr;
    int why_err = 0;
    auto failed = [&](const char* w, int e) {
      if (why == nullptr) why = w, why_err = e != 0 ? e : EINVAL;
    };
    int err = 0;
    // CPU: limit (cores), usage (ns) -> cores used over the interval.
    double limit = -1;
    if (cpu_limit_.is_open()) {
      limit = read_cpu_limit_file(cpu_limit_, cpu_period_, v2_, &err);
      if (limit == -2) failed("cannot read the cgroup cpu limit", err);
      if (limit > 0) row.set_f64(0, limit);
    }
    std::int64_t usage_ns = -1;
    if (cpu_usage_.is_open()) {
      if (!cpu_usage_.read(&err)) {
        failed("cannot read the cgroup cpu usage", err);
      } else if (v2_) {
        std::int64_t us = procfs::find_keyed_i64(cpu_usage_.view(), "usage_usec");
        usage_ns = us >= 0 ? us * 1000 : -1;
      } else if (!procfs::parse_single_i64(cpu_usage_.view(), &usage_ns)) {
        usage_ns = -1;
      }
      if (usage_ns < 0) failed("unexpected content in the cgroup cpu usage", EINVAL);
    }
    if (usage_ns >= 0) {
      if (has_prev_usage_ && now_ns > prev_ns_) {
        double used = static_cast<double>(procfs::counter_delta(
                          static_cast<std::uint64_t>(prev_usage_ns_),
                          static_cast<std::uint64_t>(usage_ns))) /
                      static_cast<double>(now_ns - prev_ns_);
        row.set_f64(1, used);
        if (limit > 0) row.set_f64(2, 100.0 * used / limit);
      }
      prev_usage_ns_ = usage_ns;
      prev_ns_ = now_ns;
      has_prev_usage_ = true;
    } else {
      has_prev_usage_ = false;
    }
    // Memory: limit and usage in bytes.
    std::int64_t mem_limit = procfs::kMissing;
    if (mem_limit_.is_open()) {
      if (!mem_limit_.read(&err) || !procfs::parse_memory_limit(mem_limit_.view(), &mem_limit)) {
        failed("cannot read the cgroup memory limit", err);
        mem_limit = procfs::kMissing;
      }
      if (mem_limit > 0) row.set_i64(3, mem_limit);
    }
    if (mem_usage_.is_open()) {
      std::int64_t used = 0;
      if (mem_usage_.read(&err) && procfs::parse_single_i64(mem_usage_.view(), &used)) {
        row.set_i64(4, used);
        if (mem_limit > 0) {
          row.set_f64(5, 100.0 * static_cast<double>(used) / static_cast<double>(mem_limit));
        }
      } else {
        failed("cannot read the cgroup memory usage", err);
      }
    }
    if (why != nullptr) {
      fail(why, why_err);
    } else {
      ok();
    }
  }

 private:
  explicit CgroupSource(const Layout& l)
      : Source("cgroup"),
        v2_(l.v2),
        cpu_limit_(open_optional(l.cpu_limit)),
        cpu_period_(open_optional(l.cpu_period)),
        cpu_usage_(open_optional(l.cpu_usage)),
        mem_limit_(open_optional(l.mem_limit)),
        mem_usage_(open_optional(l.mem_usage)) {
    add_column("cgroup.cpu_limit_cores", "cores", DType::kFloat64, Kind::kGauge,
               "CPU quota of the process's cgroup in cores (quota / period); null without quota.");
    add_column("cgroup.cpu_used_cores", "cores", DType::kFloat64, Kind::kRate,
               "CPU time used by the process's cgroup per wall time, in cores.");
    add_column("cgroup.cpu_util_pct", "%", DType::kFloat64, Kind::kRate,
               "CPU used by the cgroup as a share of its quota; null without quota.");
    add_column("cgroup.mem_limit_bytes", "bytes", DType::kInt64, Kind::kGauge,
               "Memory limit of the process's cgroup; null without a limit.");
    add_column("cgroup.mem_used_bytes", "bytes", DType::kInt64, Kind::kGauge,
               "Memory charged to the process's cgroup, page cache included.");
    add_column("cgroup.mem_util_pct", "%", DType::kFloat64, Kind::kGauge,
               "Memory charged to the cgroup as a share of its limit; null without a limit.");
  }

  bool v2_;
  ProcFile cpu_limit_, cpu_period_, cpu_usage_, mem_limit_, mem_usage_;
  std::int64_t prev_usage_ns_ = 0, prev_ns_ = 0;
  bool has_prev_usage_ = false;
};

}  // namespace

std::unique_ptr<Source> make_cgroup_source(const SourceOptions& opts) {
  return std::make_unique<CgroupSource>(opts);
}

bool cgroup_limits_exist(const SourceOptions& opts) noexcept {
  try {
    CgroupSource s(opts);
    return s.has_limits();
  } catch (...) {
    return false;
  }
}

}  // namespace stroboscope
