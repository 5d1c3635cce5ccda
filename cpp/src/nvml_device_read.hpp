// One device read of the "gpu" source in progress, shared by the group readers of
// nvml_device_read.cpp (device-level metrics) and nvml_device_processes.cpp (per-process ones).
// Internal to cpp/src.
#pragma once

#include <atomic>
#include <cstdint>

#include "nvml_process_tree.hpp"
#include "stroboscope/clock.hpp"
#include "nvml_source_state.hpp"

namespace stroboscope::nvml_detail {

using DeviceState = NvmlSource::DeviceState;

// One device's read in progress: what every group reader works with.
struct DeviceRead {
  DeviceState& d;
  const NvmlFunctions& f;
  nvml::Device h;
  RowWriter& row;
  std::int64_t now_ns;     // CLOCK_MONOTONIC time of this read
  unsigned pid;            // the monitored process
  ProcessTree& tree;       // it and its descendants: whose GPU use the proc_* columns sum
  unsigned max_processes;  // per process list
  std::atomic<std::uint64_t>& transient_errors;
  // What the field batch brought back; the groups after it use these before asking again.
  std::uint64_t field[kFieldCount] = {};
  bool have_field[kFieldCount] = {};
  std::int64_t field_us[kFieldCount] = {};  // the driver's timestamp of each (0: none given)
  std::int64_t field_at_ns[kFieldCount] = {};  // CLOCK_MONOTONIC time each came back
  bool field_tried[kFieldCount] = {};  // asked this read (a field its budget held back is not)

  // Returns true on success; otherwise disables the query, counts a passing error, or marks the
  // device failed, by the error's class.
  bool check(Query q, int rc) noexcept {
    if (rc == nvml::kSuccess) return true;
    switch (classify(rc)) {
      case ErrorClass::kUnsupported:
        d.query_code[q].store(rc, std::memory_order_relaxed);
        break;
      case ErrorClass::kTransient:
        // A count with no data behind it: relaxed is enough.
        transient_errors.fetch_add(1, std::memory_order_relaxed);
        break;
      case ErrorClass::kFatal:
        d.fail_what.store(kQueries[q].name, std::memory_order_relaxed);
        // release: a reader that sees the code also sees which call failed.
        d.fail_code.store(rc, std::memory_order_release);
        break;
    }
    return false;
  }
  // Whether to make query `q` now: the device has not failed, the query is still asked, and its
  // call budget lets it run (CallBudget).
  [[nodiscard]] bool asks(Query q) const noexcept {
    return !d.failed() && d.usable(q) && d.query_budget[q].due(now_ns);
  }
  // Whether to ask the older query in place of field `w`: the device cannot give the field, or it
  // was asked this read and did not come back (not when its call budget held it back).
  [[nodiscard]] bool instead_of(Field w) const noexcept {
    return !d.field_usable(w) || field_tried[w];
  }
  // Makes the NVML call `fn(args...)` of query `q`, timed for its call budget; returns its code.
  template <typename Fn, typename... Args>
  int timed(Query q, Fn fn, Args... args) noexcept {
    const std::int64_t begin = mono_ns();
    const int rc = fn(args...);
    d.query_budget[q].ran(now_ns, mono_ns() - begin);
    return rc;
  }
  // timed() then check(): whether the call succeeded.
  template <typename Fn, typename... Args>
  bool call(Query q, Fn fn, Args... args) noexcept {
    return check(q, timed(q, fn, args...));
  }
  void set_f(Metric m, double v) noexcept {
    if (d.col[m] != kNoColumn) row.set_f64(d.col[m], v);
  }
  void set_i(Metric m, std::uint64_t v) noexcept {
    if (d.col[m] != kNoColumn) row.set_i64(d.col[m], static_cast<std::int64_t>(v));
  }
};

// Asks the device once, when the source is built, for the fields marked `probed`, and disables
// those it cannot give (their metrics then get no column). Not for the hot path.
void probe_fields(DeviceState& d, const NvmlFunctions& f);

// The per-process groups (nvml_device_processes.cpp).
void read_processes(DeviceRead& r) noexcept;
void read_process_util(DeviceRead& r) noexcept;

}  // namespace stroboscope::nvml_detail
