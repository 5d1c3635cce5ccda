// Reads /proc/loadavg: the "load" source (1/5/15-minute load averages and runnable tasks).
//
// Format: "0.02 0.04 0.01 1/83 2462" — three averages, runnable/total scheduling entities, the
// last pid handed out. The kernel updates the averages every 5 s; reading faster repeats them.
#include <cerrno>
#include <memory>
#include <stdexcept>

#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope {
namespace procfs {

bool parse_loadavg(std::string_view text, LoadAvg* out) noexcept {
  LoadAvg l;
  if (!next_f64(text, &l.avg1) || !next_f64(text, &l.avg5) || !next_f64(text, &l.avg15) ||
      !next_i64(text, &l.running)) {
    return false;
  }
  if (text.empty() || text.front() != '/') return false;
  text.remove_prefix(1);
  if (!next_i64(text, &l.total)) return false;
  if (!next_i64(text, &l.last_pid)) l.last_pid = 0;  // absent on some emulations (gVisor, WSL1)
  *out = l;
  return true;
}

}  // namespace procfs

namespace {

class LoadSource final : public Source {
 public:
  explicit LoadSource(const SourceOptions& opts)
      : Source("load"),
        file_(detail::open_required(detail::join_path(opts.proc_root, "loadavg"),
                                    "load averages")) {
    int err = 0;
    procfs::LoadAvg l;
    if (!file_.read(&err) || !procfs::parse_loadavg(file_.view(), &l)) {
      throw std::runtime_error("cannot parse " + file_.path());
    }
    add_column("load.1m", "1", DType::kFloat64, Kind::kGauge,
               "System load average over 1 minute (runnable plus uninterruptible tasks).");
    add_column("load.5m", "1", DType::kFloat64, Kind::kGauge,
               "System load average over 5 minutes.");
    add_column("load.15m", "1", DType::kFloat64, Kind::kGauge,
               "System load average over 15 minutes.");
    add_column("load.running", "count", DType::kInt64, Kind::kGauge,
               "Tasks runnable right now, the reader included.");
  }

  // The averages are recomputed every LOAD_FREQ (5 s + 1 tick, kernel/sched/loadavg.c), but
  // the runnable and total task counts are read live: every tick.
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "runnable and total tasks are counted live at each read (the 1/5/15-minute averages "
           "themselves change every LOAD_FREQ = 5 s, kernel/sched/loadavg.c).";
  }
  [[nodiscard]] const char* interface() const noexcept override { return "/proc/loadavg"; }

  void read(RowWriter row, std::int64_t /*now_ns*/) noexcept override {
    int err = 0;
    if (!file_.read(&err)) {
      fail("cannot read /proc/loadavg", err);
      return;
    }
    procfs::LoadAvg l;
    if (!procfs::parse_loadavg(file_.view(), &l)) {
      fail("unexpected content in /proc/loadavg", EINVAL);
      return;
    }
    row.set_f64(0, l.avg1);
    row.set_f64(1, l.avg5);
    row.set_f64(2, l.avg15);
    row.set_i64(3, l.running);
    ok();
  }

 private:
  ProcFile file_;
};

}  // namespace

std::unique_ptr<Source> make_load_source(const SourceOptions& opts) {
  return std::make_unique<LoadSource>(opts);
}

}  // namespace stroboscope
