// Discovers the cgroup files of a process: its membership lines, the mounted v2 or v1
// hierarchies, and on the path up from its cgroup the directories holding the tightest CPU and
// memory limits (see cgroup.hpp). Construction time only.
#include <sys/stat.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "stroboscope/cgroup.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope::cgroup {
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

// The first existing "<cgroup_root>/<name>" directory among `names`, or "".
std::string find_mount(const std::string& root, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    std::string d = detail::join_path(root, n);
    if (is_dir(d)) return d;
  }
  return {};
}

// Limit in cores from the files at `dir` (v2 cpu.max or v1 quota/period), or below 0 for none.
double cpu_limit_at(const std::string& dir, bool v2) {
  int err = 0;
  ProcFile a(dir + (v2 ? "/cpu.max" : "/cpu.cfs_quota_us"));
  ProcFile b;
  if (!v2) b = ProcFile(dir + "/cpu.cfs_period_us");
  return read_cpu_limit(a, b, v2, &err);
}

std::int64_t mem_limit_at(const std::string& dir, bool v2) {
  ProcFile f(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
  int err = 0;
  std::int64_t lim = procfs::kMissing;
  if (!f.read(&err) || !procfs::parse_memory_limit(f.view(), &lim)) return procfs::kMissing;
  return lim;
}

}  // namespace

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

}  // namespace stroboscope::cgroup
