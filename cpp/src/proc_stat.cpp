// Reads /proc/stat: the "cpu" source (whole-machine CPU %) and the "cpu_cores" source (one
// utilisation column per core present at construction).
//
// Semantics follow psutil: total = user+nice+system+idle+iowait+irq+softirq+steal (guest and
// guest_nice are already inside user and nice), busy = total - idle - iowait,
// util = Δbusy / Δtotal.
// A field that goes backwards (iowait is known to on some kernels) contributes 0, not a reset:
// CPU counters are never reset, so a decrease is noise and must not become a huge delta.
#include <algorithm>
#include <cerrno>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope {
namespace procfs {

StatCpus parse_stat_cpus(std::string_view text, std::span<CoreTimes> cores) noexcept {
  StatCpus out;
  while (!text.empty()) {
    std::string_view line = next_line(text);
    if (line.size() < 3 || line.substr(0, 3) != "cpu") break;  // cpu lines come first
    std::string_view rest = line.substr(3);
    int id = -1;
    if (!rest.empty() && !is_blank(rest.front())) {
      std::uint64_t n = 0;
      if (!next_u64(rest, &n) || n > 1u << 20) continue;
      id = static_cast<int>(n);
    }
    CpuTimes t;
    std::uint64_t* fields[] = {&t.user,    &t.nice,  &t.system, &t.idle,  &t.iowait,
                               &t.irq,     &t.softirq, &t.steal, &t.guest, &t.guest_nice};
    for (std::uint64_t* f : fields) {
      if (!next_u64(rest, f)) break;
      ++t.n_fields;
    }
    if (t.n_fields < 4) continue;  // not even user nice system idle: malformed
    if (id < 0) {
      out.has_total = true;
      out.total = t;
    } else {
      if (out.n_cores < cores.size()) cores[out.n_cores++] = CoreTimes{id, t};
      ++out.n_cores_seen;
    }
  }
  return out;
}

}  // namespace procfs

namespace {

using procfs::CpuTimes;

// Δ of each field, a decrease counted as 0 (see the file comment).
CpuTimes field_deltas(const CpuTimes& a, const CpuTimes& b) noexcept {
  auto d = [](std::uint64_t x, std::uint64_t y) { return y >= x ? y - x : 0; };
  CpuTimes r;
  r.user = d(a.user, b.user);
  r.nice = d(a.nice, b.nice);
  r.system = d(a.system, b.system);
  r.idle = d(a.idle, b.idle);
  r.iowait = d(a.iowait, b.iowait);
  r.irq = d(a.irq, b.irq);
  r.softirq = d(a.softirq, b.softirq);
  r.steal = d(a.steal, b.steal);
  r.guest = d(a.guest, b.guest);
  r.guest_nice = d(a.guest_nice, b.guest_nice);
  return r;
}

class CpuSource final : public Source {
 public:
  explicit CpuSource(const SourceOptions& opts)
      : Source("cpu"),
        file_(detail::open_required(detail::join_path(opts.proc_root, "stat"), "cpu times")),
        window_ns_(opts.cpu_window_ns) {
    int err = 0;
    if (!file_.read(&err) || !procfs::parse_stat_cpus(file_.view(), {}).has_total) {
      throw std::runtime_error("cannot read the aggregate cpu line from " + file_.path());
    }
    add_column("cpu.util_pct", "%", DType::kFloat64, Kind::kRate,
               "Share of all CPU time spent busy (not idle, not waiting for I/O), all cores.");
    add_column("cpu.user_pct", "%", DType::kFloat64, Kind::kRate,
               "Share of all CPU time spent in user mode, niced processes included.");
    add_column("cpu.system_pct", "%", DType::kFloat64, Kind::kRate,
               "Share of all CPU time spent in the kernel (irq and softirq excluded).");
    add_column("cpu.iowait_pct", "%", DType::kFloat64, Kind::kRate,
               "Share of all CPU time spent idle while waiting for I/O.");
    add_column("cpu.steal_pct", "%", DType::kFloat64, Kind::kRate,
               "Share of all CPU time taken by the hypervisor for other virtual machines.");
    set_window(0, columns().size(), window_ns_);
  }

  // /proc/stat counts CPU time in USER_HZ ticks (sysconf(_SC_CLK_TCK), 100 per second on every
  // mainstream kernel): nothing new can show up between two ticks of that clock.
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return detail::user_hz_ns();
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "/proc/stat counts CPU time in USER_HZ ticks (sysconf(_SC_CLK_TCK) = 100/s: 10 ms).";
  }
  [[nodiscard]] const char* interface() const noexcept override { return "/proc/stat"; }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    if (has_prev_ && now_ns - prev_ns_ < window_ns_) {
      ok();  // the window since the baseline is too short for 10 ms tick counters: null
      return;
    }
    int err = 0;
    if (!file_.read(&err)) {
      has_prev_ = false;
      fail("cannot read /proc/stat", err);
      return;
    }
    // Only the first line (the aggregate) is needed: skip the per-core lines.
    std::string_view text = file_.view();
    procfs::StatCpus s = procfs::parse_stat_cpus(text.substr(0, text.find('\n')), {});
    if (!s.has_total) {
      has_prev_ = false;
      fail("no aggregate cpu line in /proc/stat", EINVAL);
      return;
    }
    bool in_range = true;
    if (has_prev_) {
      CpuTimes d = field_deltas(prev_, s.total);
      std::uint64_t total = 0;
      in_range = procfs::cpu_total_fits(d, &total);
      if (in_range && total > 0) {
        // 100 * part / total, not part * (100 / total): the latter reads 100.00000000000001 when
        // part == total (e.g. 11 of 11 ticks); this form is exact for whole tick counts.
        const double whole = static_cast<double>(total);
        auto pct = [whole](std::uint64_t part) { return 100.0 * static_cast<double>(part) / whole; };
        row.set_f64(0, pct(procfs::cpu_busy(d)));
        row.set_f64(1, pct(d.user + d.nice));
        row.set_f64(2, pct(d.system));
        row.set_f64(3, pct(d.iowait));
        row.set_f64(4, pct(d.steal));
      }
    }
    prev_ = s.total;
    prev_ns_ = now_ns;
    has_prev_ = true;
    if (in_range) {
      ok();
    } else {
      fail("value out of range in /proc/stat", ERANGE);
    }
  }

 private:
  ProcFile file_;
  std::int64_t window_ns_;
  std::int64_t prev_ns_ = 0;
  CpuTimes prev_;
  bool has_prev_ = false;
};

class CpuCoresSource final : public Source {
 public:
  explicit CpuCoresSource(const SourceOptions& opts)
      : Source("cpu_cores"),
        file_(detail::open_required(detail::join_path(opts.proc_root, "stat"), "cpu times",
                                    16384)),
        window_ns_(opts.cpu_window_ns) {
    int err = 0;
    if (!file_.read(&err)) {
      throw std::runtime_error("cannot read " + file_.path());
    }
    std::vector<procfs::CoreTimes> probe(8192);
    procfs::StatCpus s = procfs::parse_stat_cpus(file_.view(), probe);
    if (s.n_cores == 0) {
      throw std::runtime_error("no per-core cpu lines in " + file_.path());
    }
    int max_id = 0;
    for (std::size_t i = 0; i < s.n_cores; ++i) max_id = std::max(max_id, probe[i].id);
    col_of_id_.assign(static_cast<std::size_t>(max_id) + 1, -1);
    for (std::size_t i = 0; i < s.n_cores; ++i) {
      int id = probe[i].id;
      if (col_of_id_[static_cast<std::size_t>(id)] >= 0) continue;  // duplicate line
      col_of_id_[static_cast<std::size_t>(id)] = static_cast<int>(columns().size());
      std::string ids = std::to_string(id);
      add_column("cpu." + ids + ".util_pct", "%", DType::kFloat64, Kind::kRate,
                 "Share of core " + ids + "'s time spent busy (not idle, not waiting for I/O).");
    }
    // Lines are in ascending id order, so every core we track fits in the first max_id + 1
    // entries; the margin covers cores that come online later (ignored).
    set_window(0, columns().size(), window_ns_);
    scratch_.resize(static_cast<std::size_t>(max_id) + 1 + 64);
    prev_.resize(columns().size());
    has_prev_.assign(columns().size(), 0);
    seen_.assign(columns().size(), 0);
  }

  // /proc/stat counts CPU time in USER_HZ ticks (sysconf(_SC_CLK_TCK), 100 per second on every
  // mainstream kernel): nothing new can show up between two ticks of that clock.
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return detail::user_hz_ns();
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "/proc/stat counts CPU time in USER_HZ ticks (sysconf(_SC_CLK_TCK) = 100/s: 10 ms).";
  }
  [[nodiscard]] const char* interface() const noexcept override { return "/proc/stat"; }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    if (have_baseline_ && now_ns - prev_ns_ < window_ns_) {
      ok();  // too short a window for 10 ms tick counters: null (see SourceOptions)
      return;
    }
    int err = 0;
    if (!file_.read(&err)) {
      have_baseline_ = false;
      std::fill(has_prev_.begin(), has_prev_.end(), 0);
      fail("cannot read /proc/stat", err);
      return;
    }
    procfs::StatCpus s = procfs::parse_stat_cpus(file_.view(), scratch_);
    std::fill(seen_.begin(), seen_.end(), 0);
    bool in_range = true;
    for (std::size_t i = 0; i < s.n_cores; ++i) {
      const procfs::CoreTimes& c = scratch_[i];
      if (c.id < 0 || static_cast<std::size_t>(c.id) >= col_of_id_.size()) continue;
      int col = col_of_id_[static_cast<std::size_t>(c.id)];
      if (col < 0) continue;  // came online after construction: no column for it
      auto k = static_cast<std::size_t>(col);
      seen_[k] = 1;
      if (has_prev_[k]) {
        CpuTimes d = field_deltas(prev_[k], c.times);
        std::uint64_t total = 0;
        const bool fits = procfs::cpu_total_fits(d, &total);
        in_range = in_range && fits;
        if (fits && total > 0) {
          row.set_f64(k, 100.0 * static_cast<double>(procfs::cpu_busy(d)) /
                             static_cast<double>(total));
        }
      }
      prev_[k] = c.times;
      has_prev_[k] = 1;
    }
    // A core missing now (offline) stays null and starts over when it comes back.
    for (std::size_t k = 0; k < seen_.size(); ++k) {
      if (!seen_[k]) has_prev_[k] = 0;
    }
    prev_ns_ = now_ns;
    have_baseline_ = true;
    if (in_range) {
      ok();
    } else {
      fail("value out of range in /proc/stat", ERANGE);
    }
  }

 private:
  ProcFile file_;
  std::vector<int> col_of_id_;  // core id -> column index, -1 when not tracked
  std::vector<procfs::CoreTimes> scratch_;
  std::vector<CpuTimes> prev_;
  std::vector<std::uint8_t> has_prev_;
  std::vector<std::uint8_t> seen_;
  std::int64_t window_ns_;
  std::int64_t prev_ns_ = 0;
  bool have_baseline_ = false;
};

}  // namespace

std::unique_ptr<Source> make_cpu_source(const SourceOptions& opts) {
  return std::make_unique<CpuSource>(opts);
}

std::unique_ptr<Source> make_cpu_cores_source(const SourceOptions& opts) {
  return std::make_unique<CpuCoresSource>(opts);
}

}  // namespace stroboscope
