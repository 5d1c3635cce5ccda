// Reads /proc/pressure/{cpu,memory,io}: the "pressure" source (PSI stall time as a share of wall
// time over a window, from the cumulative "total=" microsecond counters).
//
// "some" is the share of time at least one task was stalled on the resource, "full" the share all
// non-idle tasks were. Only the files and lines present at construction get a column (kernels
// before 5.13 have no cpu "full"; this source does not export cpu "full" at all, by design).
//
// What the kernel does (kernel/sched/psi.c) and what this source relies on:
//  - Each CPU keeps its stall and non-idle times, updated on every task state change
//    (psi_group_change -> record_times). The system-wide total= is only advanced when someone
//    "collects": a read of the file (psi_show) or the averaging worker (psi_avgs_work, every
//    2 s while there is activity). collect_percpu_times() takes each CPU's times since the
//    previous collection, the running state included up to cpu_clock(), and adds to total= their
//    average over CPUs weighted by each CPU's non-idle time IN WHOLE JIFFIES
//    (nsecs_to_jiffies, 1-10 ms). A collection covering less than a jiffy of non-idle time on
//    every CPU therefore weighs every CPU 0 and adds nothing: that stall time is lost, for every
//    reader (the total is shared). Measured: with both CPUs saturated a reader polling every
//    1 ms sees total= advance at 43 % of wall time, every 0.2 ms at 56 % in 0/228 % chunks,
//    every 100 ms at 100 %.
//  - So this source closes a window no sooner than kMinWindowNs (and rate_window) of ticks after
//    it opened, less half its read period for tick jitter: it does not touch the files in
//    between (each read is a collection), and its cells stay null there.
//  - The stall time a collection adds lies between the previous collection and this one, and
//    averages each CPU's stall over its own interval, so it cannot exceed the interval. The
//    interval is timed by CLOCK_MONOTONIC stamps either side of each file's read: the span from
//    the stamp before the previous read to the stamp after this one contains it, whatever the
//    sampler thread was preempted for, so the share is at most 100 %. Only the rate difference
//    between the kernel's cpu_clock() and CLOCK_MONOTONIC (NTP slews by up to 500 ppm) can
//    nudge a fully stalled window past 100; the cell is clamped there.
#include <time.h>

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

constexpr const char* kWindowNote =
    ", over windows of at least 100 ms and rate_window (null in between); at most 100.";

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

// A collection covering less than a jiffy of non-idle time on every CPU adds nothing to total=
// (see above); 100 ms is 10 jiffies at the coarsest CONFIG_HZ (100), 25 at the common 250.
constexpr std::int64_t kMinWindowNs = 100'000'000;

std::int64_t stamp(int (*gettime)(clockid_t, timespec*)) noexcept {
  timespec ts{};
  gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class PressureSource final : public Source {
 public:
  explicit PressureSource(const SourceOptions& opts)
      : Source("pressure"),
        window_ns_(std::max(opts.rate_window_ns, kMinWindowNs)),
        gettime_(opts.gettime) {
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
                   "Share of wall time in which at least one task was stalled on " + what +
                       kWindowNote);
        used = true;
      }
      if (r.full_column != nullptr && t.has_full) {
        cols_.push_back(Column{idx, true});
        add_column(r.full_column, "%", DType::kFloat64, Kind::kRate,
                   "Share of wall time in which all non-idle tasks were stalled on " + what +
                       kWindowNote);
        used = true;
      }
      if (used) files_.push_back(std::move(f));
    }
    if (files_.empty()) {
      throw std::runtime_error(
          "pressure stall information is not available: no readable " + dir +
          "/{cpu,memory,io} (needs Linux 4.20+ with CONFIG_PSI and psi not disabled)");
    }
    set_window(0, columns().size(), window_ns_);
    totals_.resize(files_.size());
    read_ok_.resize(files_.size());
    before_.resize(files_.size());
    after_.resize(files_.size());
    prev_before_.resize(files_.size());
  }

  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return kMinWindowNs;
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "each read folds every CPU's stall time into total=, weighting the CPUs by their "
           "non-idle time in whole jiffies (collect_percpu_times, kernel/sched/psi.c): a read "
           "less than a jiffy (1-10 ms) after the previous one adds nothing and the stall time "
           "is lost, so the share is taken over windows of at least 100 ms (and rate_window), "
           "and the files are not read in between.";
  }
  [[nodiscard]] const char* interface() const noexcept override { return "/proc/pressure/*"; }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    // Windows open and close on the ticks (a late tick does not push the next window out), and
    // a window closes on the call due at its end: tick times jitter by microseconds, so half
    // the time between calls is allowed (read every 100 ms, a window closes on every read, not
    // on every other one). The share's denominator is timed by the reads themselves.
    const std::int64_t slack = prev_call_ns_ > 0 && now_ns > prev_call_ns_
                                   ? (now_ns - prev_call_ns_) / 2
                                   : 0;
    prev_call_ns_ = now_ns;
    if (has_prev_ && now_ns - window_tick_ns_ < window_ns_ - slack) {
      ok();  // not yet: the files stay unread (a read is a collection, see above)
      return;
    }
    int first_err = 0;
    for (std::size_t i = 0; i < files_.size(); ++i) {
      int err = 0;
      before_[i] = stamp(gettime_);
      read_ok_[i] = files_[i].read(&err) ? 1 : 0;
      after_[i] = stamp(gettime_);
      if (read_ok_[i]) {
        totals_[i] = procfs::parse_pressure(files_[i].view());
      } else if (first_err == 0) {
        first_err = err != 0 ? err : EIO;
      }
    }
    for (std::size_t k = 0; k < cols_.size(); ++k) {
      Column& c = cols_[k];
      const procfs::PressureTotals& t = totals_[c.file];
      bool has = read_ok_[c.file] && (c.full ? t.has_full : t.has_some);
      if (!has) {
        c.has_prev = false;
        continue;
      }
      std::uint64_t v = c.full ? t.full_total_us : t.some_total_us;
      // Stall added between the two reads lies within [before the previous, after this one].
      const std::int64_t span_ns = after_[c.file] - prev_before_[c.file];
      if (c.has_prev && span_ns > 0) {
        const double stalled_ns = static_cast<double>(procfs::counter_delta(c.prev_us, v)) * 1e3;
        row.set_f64(k, std::min(100.0, 100.0 * stalled_ns / static_cast<double>(span_ns)));
      }
      c.prev_us = v;
      c.has_prev = true;
    }
    for (std::size_t i = 0; i < files_.size(); ++i) prev_before_[i] = before_[i];
    window_tick_ns_ = now_ns;
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
  std::vector<std::int64_t> before_, after_, prev_before_;  // CLOCK_MONOTONIC around each read
  std::int64_t window_ns_;
  int (*gettime_)(clockid_t, timespec*);
  std::int64_t window_tick_ns_ = 0;  // the tick of the read the current window started at
  std::int64_t prev_call_ns_ = 0;    // the tick of the previous call of read()
  bool has_prev_ = false;
};

}  // namespace

std::unique_ptr<Source> make_pressure_source(const SourceOptions& opts) {
  return std::make_unique<PressureSource>(opts);
}

}  // namespace stroboscope
