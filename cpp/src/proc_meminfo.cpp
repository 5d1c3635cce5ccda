// Reads /proc/meminfo: the "memory" source (total, available, used, swap used, used %).
//
// used = total - available and util = used / total, as psutil's virtual_memory().percent. On
// kernels before 3.14 (no MemAvailable) available is estimated as MemFree + Buffers + Cached.
#include <cerrno>
#include <memory>
#include <stdexcept>

#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope {
namespace procfs {

MemInfo parse_meminfo(std::string_view text) noexcept {
  struct Key {
    std::string_view name;
    std::int64_t MemInfo::*field;
  };
  static constexpr Key kKeys[] = {
      {"MemTotal", &MemInfo::total},        {"MemFree", &MemInfo::free},
      {"MemAvailable", &MemInfo::available}, {"Buffers", &MemInfo::buffers},
      {"Cached", &MemInfo::cached},          {"SwapTotal", &MemInfo::swap_total},
      {"SwapFree", &MemInfo::swap_free},
  };
  MemInfo m;
  int found = 0;
  while (!text.empty() && found < static_cast<int>(std::size(kKeys))) {
    std::string_view line = next_line(text);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = line.substr(0, colon);
    for (const Key& k : kKeys) {
      if (k.name != key) continue;
      std::string_view rest = line.substr(colon + 1);
      std::uint64_t v = 0;
      if (!next_u64(rest, &v)) break;
      std::string_view unit = next_token(rest);
      // Values are in kB ("kB" means KiB here); a unit-less line is a plain number.
      std::uint64_t mult = unit == "kB" ? 1024 : 1;
      if (v > static_cast<std::uint64_t>(INT64_MAX) / mult) break;
      m.*(k.field) = static_cast<std::int64_t>(v * mult);
      ++found;
      break;
    }
  }
  return m;
}

std::int64_t mem_available_or_estimate(const MemInfo& m, bool* out_of_range) noexcept {
  if (out_of_range != nullptr) *out_of_range = false;
  if (m.available != kMissing) return m.available;
  if (m.free == kMissing) return kMissing;
  std::int64_t sum = 0;
  if (!checked_add(m.free, m.buffers != kMissing ? m.buffers : 0, &sum) ||
      !checked_add(sum, m.cached != kMissing ? m.cached : 0, &sum)) {
    if (out_of_range != nullptr) *out_of_range = true;
    return kMissing;
  }
  return sum;
}

}  // namespace procfs

namespace {

class MemorySource final : public Source {
 public:
  explicit MemorySource(const SourceOptions& opts)
      : Source("memory"),
        file_(detail::open_required(detail::join_path(opts.proc_root, "meminfo"),
                                    "memory statistics")) {
    int err = 0;
    if (!file_.read(&err)) throw std::runtime_error("cannot read " + file_.path());
    procfs::MemInfo m = procfs::parse_meminfo(file_.view());
    bool out_of_range = false;
    if (m.total <= 0 ||
        (procfs::mem_available_or_estimate(m, &out_of_range) == procfs::kMissing &&
         !out_of_range)) {
      throw std::runtime_error("no MemTotal/MemAvailable (or MemFree) in " + file_.path());
    }
    // vm.stat_interval is whole seconds on the kernels that print it as an integer; unreadable
    // (a recorded tree without it): the kernel's default, 1 s.
    ProcFile interval(detail::join_path(opts.proc_root, "sys/vm/stat_interval"), 64);
    std::string_view text;
    std::int64_t seconds = 0;
    if (interval.read(&err) && (text = interval.view(), procfs::next_i64(text, &seconds)) &&
        seconds > 0 && seconds < 3600) {
      stat_interval_ns_ = seconds * 1'000'000'000;
    }
    add_column("mem.total_bytes", "bytes", DType::kInt64, Kind::kGauge,
               "Physical memory installed (MemTotal).");
    add_column("mem.available_bytes", "bytes", DType::kInt64, Kind::kGauge,
               "Memory available to new work without swapping (MemAvailable).");
    add_column("mem.used_bytes", "bytes", DType::kInt64, Kind::kGauge,
               "Memory in use: total minus available.");
    add_column("mem.swap_used_bytes", "bytes", DType::kInt64, Kind::kGauge,
               "Swap space in use: SwapTotal minus SwapFree.");
    add_column("mem.util_pct", "%", DType::kFloat64, Kind::kGauge,
               "Memory in use as a share of total (psutil virtual_memory().percent).");
  }

  // MemFree and MemAvailable come from zone page counters that each CPU keeps a private delta of;
  // the deltas are folded into the global values every vm.stat_interval (1 s default) by
  // vmstat_update, or earlier when one CPU's delta passes its threshold (mm/vmstat.c).
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return stat_interval_ns_;
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "the free-page counters behind MemFree/MemAvailable are folded from per-CPU deltas "
           "every vm.stat_interval (/proc/sys/vm/stat_interval, 1 s by default; read at "
           "construction), or sooner in threshold-sized steps (mm/vmstat.c).";
  }
  [[nodiscard]] const char* interface() const noexcept override { return "/proc/meminfo"; }

  void read(RowWriter row, std::int64_t /*now_ns*/) noexcept override {
    int err = 0;
    if (!file_.read(&err)) {
      fail("cannot read /proc/meminfo", err);
      return;
    }
    procfs::MemInfo m = procfs::parse_meminfo(file_.view());
    bool out_of_range = false;
    std::int64_t avail = procfs::mem_available_or_estimate(m, &out_of_range);
    if (m.total > 0 && out_of_range) {
      // The pre-3.14 estimate does not fit in int64: what derives from it stays null.
      row.set_i64(0, m.total);
      set_swap(row, m);
      fail("value out of range in /proc/meminfo", ERANGE);
      return;
    }
    if (m.total <= 0 || avail == procfs::kMissing) {
      fail("no MemTotal/MemAvailable in /proc/meminfo", EINVAL);
      return;
    }
    row.set_i64(0, m.total);
    row.set_i64(1, avail);
    row.set_i64(2, m.total - avail);  // both in [0, INT64_MAX]: cannot overflow
    set_swap(row, m);
    row.set_f64(4, 100.0 * static_cast<double>(m.total - avail) / static_cast<double>(m.total));
    ok();
  }

 private:
  static void set_swap(RowWriter& row, const procfs::MemInfo& m) noexcept {
    if (m.swap_total != procfs::kMissing && m.swap_free != procfs::kMissing) {
      row.set_i64(3, m.swap_total - m.swap_free);  // both in [0, INT64_MAX]: cannot overflow
    }
  }

  ProcFile file_;
  std::int64_t stat_interval_ns_ = 1'000'000'000;
};

}  // namespace

std::unique_ptr<Source> make_memory_source(const SourceOptions& opts) {
  return std::make_unique<MemorySource>(opts);
}

}  // namespace stroboscope
