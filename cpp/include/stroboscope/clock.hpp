// Clocks: CLOCK_MONOTONIC nanoseconds for every sample, and a wall-clock anchor to turn them into
// UTC timestamps. The anchor is the narrowest (MONO, REALTIME, MONO) bracket of several tries, so
// its error is at most half that bracket (typically tens of ns).
#pragma once

#include <cstdint>
#include <ctime>

namespace stroboscope {

[[nodiscard]] inline std::int64_t clock_ns(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The same clock as Python's time.monotonic_ns() and time.perf_counter_ns() on Linux.
[[nodiscard]] inline std::int64_t mono_ns() noexcept { return clock_ns(CLOCK_MONOTONIC); }

struct ClockAnchor {
  std::int64_t realtime_minus_mono_ns = 0;  // add to a CLOCK_MONOTONIC reading to get UTC ns
  std::int64_t uncertainty_ns = 0;          // half the width of the narrowest bracket
};

[[nodiscard]] inline ClockAnchor take_clock_anchor(int tries = 16) noexcept {
  ClockAnchor best{};
  std::int64_t best_width = INT64_MAX;
  for (int i = 0; i < tries; ++i) {
    const std::int64_t m0 = mono_ns();
    const std::int64_t r = clock_ns(CLOCK_REALTIME);
    const std::int64_t m1 = mono_ns();
    if (m1 - m0 < best_width) {
      best_width = m1 - m0;
      best.realtime_minus_mono_ns = r - (m0 + (m1 - m0) / 2);
      best.uncertainty_ns = (m1 - m0 + 1) / 2;
    }
  }
  return best;
}

}  // namespace stroboscope
