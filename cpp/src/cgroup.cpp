// Reads the cgroup of a process: the "cgroup" source (CPU quota and use in cores, memory limit
// and use in bytes, both as % of the limit), for cgroup v2 and v1. Which files it reads was
// decided by discovery (cgroup_discover.cpp); see cgroup.hpp for the rules.
//
// Usage is read on every read: the kernel keeps it exactly (CPU time in ns, or µs in v2's
// cpu.stat; charged memory in pages), so it can change between any two reads. Limits are set by
// an administrator or a container runtime and change rarely: they are re-read at most once per
// kLimitsEveryNs (by the tick time), their cells filled on the rows that re-read them and null in
// between, while the % columns use the latest limit read.
#include <cerrno>
#include <memory>
#include <string>

#include "stroboscope/cgroup.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope {
namespace cgroup {

double read_cpu_limit(ProcFile& limit, ProcFile& period, bool v2, int* err) noexcept {
  if (!limit.read(err)) return kCpuLimitUnreadable;
  if (v2) {
    procfs::CpuMax m;
    if (!procfs::parse_cpu_max(limit.view(), &m)) return kCpuLimitUnreadable;
    return m.has_quota ? static_cast<double>(m.quota_us) / static_cast<double>(m.period_us)
                       : kNoCpuLimit;
  }
  std::int64_t quota = 0, period_us = 0;
  if (!procfs::parse_single_i64(limit.view(), &quota)) return kCpuLimitUnreadable;
  if (quota <= 0) return kNoCpuLimit;
  if (!period.read(err) || !procfs::parse_single_i64(period.view(), &period_us) ||
      period_us <= 0) {
    return kCpuLimitUnreadable;
  }
  return static_cast<double>(quota) / static_cast<double>(period_us);
}

}  // namespace cgroup

namespace {

constexpr std::int64_t kLimitsEveryNs = 1'000'000'000;  // limits re-read once per second

ProcFile open_optional(const std::string& path) {
  return path.empty() ? ProcFile() : ProcFile(path);
}

class CgroupSource final : public Source {
 public:
  explicit CgroupSource(const SourceOptions& opts)
      : CgroupSource(cgroup::find_layout(opts)) {}

  bool has_limits() noexcept {
    int err = 0;
    if (cpu_limit_.is_open() && cgroup::read_cpu_limit(cpu_limit_, cpu_period_, v2_, &err) > 0) {
      return true;
    }
    std::int64_t lim = procfs::kMissing;
    return mem_limit_.is_open() && mem_limit_.read(&err) &&
           procfs::parse_memory_limit(mem_limit_.view(), &lim) && lim > 0;
  }

  // Usage can change on any tick; the limits are re-read at kLimitsEveryNs whatever the rate.
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override { return 0; }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "CPU usage is flushed from the per-CPU counters at each read (cgroup v2 cpu.stat via "
           "rstat; v1 cpuacct.usage sums them), memory is charged page by page (in per-CPU "
           "batches of at most 64 pages): every tick; the limits, which only an administrator "
           "changes, are re-read once a second.";
  }
  [[nodiscard]] const char* interface() const noexcept override {
    return v2_ ? "cgroup v2: cpu.max, cpu.stat, memory.max, memory.current"
               : "cgroup v1: cpu.cfs_quota_us/period_us, cpuacct.usage, memory.limit/usage_in_bytes";
  }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    const char* why = nullptr;
    int why_err = 0;
    auto failed = [&](const char* w, int e) {
      if (why == nullptr) why = w, why_err = e != 0 ? e : EINVAL;
    };
    int err = 0;
    const bool limits_due = !limits_read_ || now_ns - limits_ns_ >= kLimitsEveryNs;
    if (limits_due) {
      read_limits(&err);
      limits_ns_ = now_ns;
      limits_read_ = true;
    }
    // A limit that could not be read says so on every read until it is read again.
    if (limit_why_ != nullptr) failed(limit_why_, limit_err_);
    // CPU: limit (cores), usage (ns) -> cores used over the interval.
    const double limit = cpu_limit_cores_;
    if (limits_due && limit > 0) row.set_f64(0, limit);
    std::int64_t usage_ns = -1;
    if (cpu_usage_.is_open()) {
      if (!cpu_usage_.read(&err)) {
        failed("cannot read the cgroup cpu usage", err);
      } else if (v2_) {
        std::int64_t us = procfs::find_keyed_i64(cpu_usage_.view(), "usage_usec");
        if (us >= 0 && !procfs::checked_mul(us, 1000, &usage_ns)) {
          // Over 292 years of CPU time: not a real reading; the cells stay null.
          usage_ns = -1;
          failed("cgroup cpu usage out of range", ERANGE);
        } else if (us < 0) {
          usage_ns = -1;
        }
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
    const std::int64_t mem_limit = mem_limit_bytes_;
    if (limits_due && mem_limit > 0) row.set_i64(3, mem_limit);
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
  // Re-reads both limits into the cached values; a failure is kept in limit_why_/limit_err_.
  void read_limits(int* err) noexcept {
    limit_why_ = nullptr;
    limit_err_ = 0;
    cpu_limit_cores_ = cgroup::kNoCpuLimit;
    if (cpu_limit_.is_open()) {
      cpu_limit_cores_ = cgroup::read_cpu_limit(cpu_limit_, cpu_period_, v2_, err);
      if (cpu_limit_cores_ == cgroup::kCpuLimitUnreadable) {
        limit_why_ = "cannot read the cgroup cpu limit";
        limit_err_ = *err != 0 ? *err : EINVAL;
      }
    }
    mem_limit_bytes_ = procfs::kMissing;
    if (mem_limit_.is_open()) {
      if (!mem_limit_.read(err) ||
          !procfs::parse_memory_limit(mem_limit_.view(), &mem_limit_bytes_)) {
        mem_limit_bytes_ = procfs::kMissing;
        if (limit_why_ == nullptr) {
          limit_why_ = "cannot read the cgroup memory limit";
          limit_err_ = *err != 0 ? *err : EINVAL;
        }
      }
    }
  }

  explicit CgroupSource(const cgroup::Layout& l)
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
  // The limits as last read (at most once per kLimitsEveryNs), and why that read failed.
  double cpu_limit_cores_ = cgroup::kNoCpuLimit;
  std::int64_t mem_limit_bytes_ = procfs::kMissing;
  const char* limit_why_ = nullptr;
  int limit_err_ = 0;
  std::int64_t limits_ns_ = 0;
  bool limits_read_ = false;
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
