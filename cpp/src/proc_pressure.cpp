// Reads /proc/pressure/{cpu,memory,io}: the "pressure" source (PSI stall time as a share of wall
// time over the last interval, from the cumulative "total=" microsecond counters).
//
// "some" is the share of time at least one task was stalled on the resource, "full" the share all
// non-idle tasks were. Only the files and lines present at construction get a column (kernels
// before 5.13 have no cpu "full"; this source does not export cpu "full" at all, by design).
#include <cerrno>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope {
namespace procfs {

PressureTotals parse_pressure(std::string_view text) noexcept {
  PressureTotals p;
  while (!text.empty()) {
    std::string_view line = next_line(text);
    std::string_view kind = next_token(line);
    bool some = kind == "some";
    if (!some && kind != "full") continue;
    for (std::string_view tok = next_token(line); !tok.empty(); tok = next_token(line)) {
      if (tok.substr(0, 6) != "total=") continue;
      std::string_view num = tok.substr(6);
      std::uint64_t v = 0;
      if (!next_u64(num, &v)) break;
      (some ? p.some_total_us : p.full_total_us) = v;
      (some ? p.has_some : p.has_full) = true;
      break;
    }
  }
  return p;
}

}  // namespace procfs

namespace {

struct Resource {
  const char* file;
  const char* some_column;  // nullptr: not exported
  const char* full_column;
  const char* what;
};

constexpr Resource kResources[] = {
    {"cpu", "psi.cpu.some_pct", nullptr, "CPU"},
    {"memory", "psi.memory.some_pct", "psi.memory.full_pct", "memory"},
    {"io", "psi.io.some_pct", "psi.io.full_pct", "I/O"},
};

struct Column {
  std::size_t file;  // index into files_
  bool full;
  std::uint64_t prev_us = 0;
  bool has_prev = false;
};

class PressureSource final : public Source {
 public:
  explicit PressureSource(const SourceOptions& opts) : Source("pressure") {
    std::string dir = detail::join_path(opts.proc_root, "pressure");
    for (const Resource& r : kResources) {
      ProcFile f(dir + "/" + r.file);
      int err = 0;
      if (!f.is_open() || !f.read(&err)) continue;  // absent or unsupported (EOPNOTSUPP)
      procfs::PressureTotals t = procfs::parse_pressure(f.view());
      std::size_t idx = files_.size();
      bool used = false;
      std::string what = r.what;
      if (r.some_column != nullptr && t.has_some) {
        cols_.push_back(Column{idx, false});
        add_column(r.some_column, "%", DType::kFloat64, Kind::kRate,
                   "Share of wall time in which at least one task was stalled on " + what + ".");
        used = true;
      }
      if (r.full_column != nullptr && t.has_full) {
        cols_.push_back(Column{idx, true});
        add_column(r.full_column, "%", DType::kFloat64, Kind::kRate,
                   "Share of wall time in which all non-idle tasks were stalled on " + what + ".");
        used = true;
      }
      if (used) files_.push_back(std::move(f));
    }
    if (files_.empty()) {
      throw std::runtime_error(
          "pressure stall information is not available: no readable " + dir +
          "/{cpu,memory,io} (needs Linux 4.20+ with CONFIG_PSI and psi not disabled)");
    }
    totals_.resize(files_.size());
    read_ok_.resize(files_.size());
  }

  // psi_show() folds each CPU's stall state into the totals at every read (kernel/sched/psi.c):
  // the "total=" microseconds are current to the read.
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "the total= stall times are brought up to date from each CPU's state at every read "
           "(psi_show, kernel/sched/psi.c), in microseconds.";
  }
  [[nodiscard]] const char* interface() const noexcept override { return "/proc/pressure/*"; }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    int first_err = 0;
    for (std::size_t i = 0; i < files_.size(); ++i) {
      int err = 0;
      read_ok_[i] = files_[i].read(&err) ? 1 : 0;
      if (read_ok_[i]) {
        totals_[i] = procfs::parse_pressure(files_[i].view());
      } else if (first_err == 0) {
        first_err = err != 0 ? err : EIO;
      }
    }
    double dt_ns = now_ns > prev_ns_ ? static_cast<double>(now_ns - prev_ns_) : 0.0;
    for (std::size_t k = 0; k < cols_.size(); ++k) {
      Column& c = cols_[k];
      const procfs::PressureTotals& t = totals_[c.file];
      bool has = read_ok_[c.file] && (c.full ? t.has_full : t.has_some);
      if (!has) {
        c.has_prev = false;
        continue;
      }
      std::uint64_t v = c.full ? t.full_total_us : t.some_total_us;
      if (c.has_prev && has_prev_ && dt_ns > 0) {
        row.set_f64(k, 100.0 * static_cast<double>(procfs::counter_delta(c.prev_us, v)) *
                           1000.0 / dt_ns);
      }
      c.prev_us = v;
      c.has_prev = true;
    }
    prev_ns_ = now_ns;
    has_prev_ = true;
    if (first_err != 0) {
      fail("cannot read a /proc/pressure file", first_err);
    } else {
      ok();
    }
  }

 private:
  std::vector<ProcFile> files_;
  std::vector<Column> cols_;
  std::vector<procfs::PressureTotals> totals_;
  std::vector<std::uint8_t> read_ok_;
  std::int64_t prev_ns_ = 0;
  bool has_prev_ = false;
};

}  // namespace

std::unique_ptr<Source> make_pressure_source(const SourceOptions& opts) {
  return std::make_unique<PressureSource>(opts);
}

}  // namespace stroboscope
