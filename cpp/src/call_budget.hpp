// The call budget of a slow device library (the NVML and AMD SMI sources): each call is timed,
// and a dear call is not repeated before a multiple of its cost has passed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace stroboscope {
namespace nvml_detail {

// The call budget. NVML calls differ in cost by three orders of magnitude and by machine (on an
// H200 in a VM: the clocks ~1 µs, the PCIe byte counters ~135 µs, the energy counter ~2.7 ms and
// the per-process utilisation ~2.1 ms, which a 1 kHz poll would spend most of a core on). So each
// call is timed, and a call whose cost is c is not made again before c * kCallShare after it
// began: no call takes more than 1/kCallShare of the polling thread's time, a cheap one is made
// at every read, and a value read less often leaves its cells null in between (filled like any
// slower source). The cost is the least of the call's last kCostRuns runs, so one run that the
// scheduler preempted does not slow the call down. A call that costs at most kFreeCostNs (made
// every 1 ms or more often under the rule) is never held back.
inline constexpr std::int64_t kCallShare = 20;  // at most 5 % of the poll thread per call
inline constexpr std::size_t kCostRuns = 4;
inline constexpr std::int64_t kFreeCostNs = 1'000'000 / kCallShare;  // 50 µs
// A field that costs more than kFreeCostNs is read in a call of its own, on its own budget (the
// batch's cost is the sum of its fields': one dear field would hold back the cheap ones).

// The recent costs of one call, and when it may be made again (the reading thread's), with the
// estimate published for device_status() on any thread (relaxed: it stands alone).
struct CallBudget {
  std::int64_t runs[kCostRuns] = {};  // ns; 0 until measured, so a new call is made at once
  std::size_t next_run = 0;
  std::size_t made = 0;  // runs timed so far
  std::int64_t due_ns = 0;
  std::atomic<std::int64_t> cost_ns{0};

  [[nodiscard]] bool due(std::int64_t now_ns) const noexcept { return now_ns >= due_ns; }
  // One run of the call, made by the read at `read_ns` (the poll's clock), that took `took_ns`.
  void ran(std::int64_t read_ns, std::int64_t took_ns) noexcept {
    runs[next_run] = took_ns > 0 ? took_ns : 0;
    next_run = (next_run + 1) % kCostRuns;
    made += made < kCostRuns ? 1 : 0;
    std::int64_t least = runs[0];
    for (std::int64_t r : runs) least = r < least ? r : least;
    cost_ns.store(least, std::memory_order_relaxed);
    due_ns = least > kFreeCostNs ? read_ns + least * kCallShare : 0;
  }
  [[nodiscard]] std::int64_t cost() const noexcept {
    return cost_ns.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::size_t runs_made() const noexcept { return made; }
  // Forgets the runs (the call changed: the field batch lost its dear fields).
  void reset() noexcept {
    for (std::int64_t& r : runs) r = 0;
    next_run = made = 0;
    due_ns = 0;
    cost_ns.store(0, std::memory_order_relaxed);
  }
};

}  // namespace nvml_detail
}  // namespace stroboscope
