// A slow source read on a thread of its own, at its own interval, into a latest-value block.
//
// NVML calls take tens to hundreds of µs each (times the number of GPUs); read on the sampler
// thread they would make /proc ticks late. PolledSource runs the slow source on its own thread
// and publishes each reading into a small block guarded by a sequence counter (a seqlock). The
// sampler's read() copies a reading it has not copied before (and that was taken at or before the
// tick's time) into the row in nanoseconds, with
// the CLOCK_MONOTONIC time the reading was taken (`<name>.read_mono_ns`), so every value says how
// fresh it is; on ticks with no new reading the cells stay null (no repeated values).
//
// Phasing: given the sampler's grid of deadlines (follow_schedule), the poll thread reads at
// deadline_k - lead for the ticks k it is due on (multiples of its interval in ticks), where
// lead = the 90th percentiles of its last 32 read durations and of its last 32 wake-up delays
// (how late its sleeps ended) + kPhaseMarginNs. So a reading lands
// just before the tick that copies it, and its age in the row is about one call time, by design
// rather than by the luck of when the two threads started. Without a grid (a PolledSource used
// on its own) it polls on its own deadlines, from the moment it starts.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "stroboscope/source.hpp"

namespace stroboscope {

class PolledSource : public Source {
 public:
  PolledSource(std::unique_ptr<Source> inner, std::int64_t interval_ns);
  ~PolledSource() override;

  void read(RowWriter row, std::int64_t now_ns) noexcept override;
  void on_start() override;
  void on_stop() noexcept override;
  void forget_threads_after_fork() noexcept override;

  [[nodiscard]] const Source& inner() const noexcept { return *inner_; }
  // Its poll interval; the sampler's overhead budget may change it while it runs (the next
  // poll is planned on the new one).
  [[nodiscard]] std::int64_t interval_ns() const noexcept {
    return interval_ns_.load(std::memory_order_relaxed);  // stands alone: no order needed
  }
  void set_interval_ns(std::int64_t ns) noexcept {
    interval_ns_.store(ns, std::memory_order_relaxed);
  }
  // CPU time its poll thread(s) used so far (finished runs plus the running one).
  [[nodiscard]] std::int64_t thread_cpu_ns() const noexcept;
  // The inner source's declared resolution (this wrapper declares none of its own).
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return inner_->natural_resolution_ns();
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return inner_->resolution_reason();
  }
  void follow_schedule(const TickSchedule* schedule) noexcept override { schedule_ = schedule; }
  // How long before its tick the latest poll was planned to start (0 before the first plan):
  // its p90 call time + its p90 wake-up delay + kPhaseMarginNs.
  [[nodiscard]] std::int64_t lead_ns() const noexcept {
    return lead_ns_.load(std::memory_order_relaxed);
  }

  static constexpr std::int64_t kPhaseMarginNs = 20'000;
  static constexpr std::size_t kCallSamples = 32;

 private:
  void poll_loop() noexcept;
  void publish(std::int64_t taken_ns) noexcept;
  // When to poll next, the latest poll having ended at `end`; advances the plan.
  std::int64_t next_poll(std::int64_t end) noexcept;
  // The 90th percentile of the first min(n, kCallSamples) values of `v`.
  static std::int64_t p90(const std::array<std::int64_t, kCallSamples>& v, std::size_t n) noexcept;
  // This source's reason/failure follows the inner source's latest read.
  void mirror_inner_status() noexcept;

  std::unique_ptr<Source> inner_;
  std::atomic<std::int64_t> interval_ns_;
  std::size_t n_;  // the inner source's cell count

  // The poll thread's private row.
  std::vector<std::uint64_t> scratch_cells_;
  std::vector<std::uint8_t> scratch_valid_;

  // The latest-value block. seq_ is odd while the poll thread writes it.
  alignas(64) std::atomic<std::uint64_t> seq_{0};
  std::unique_ptr<std::atomic<std::uint64_t>[]> cells_;
  std::unique_ptr<std::atomic<std::uint8_t>[]> valid_;
  std::atomic<std::int64_t> taken_ns_{0};
  alignas(64) std::uint64_t last_copied_seq_ = 0;  // sampler thread only

  // The poll thread's plan: the sampler's grid (read only; see TickSchedule), its own deadline
  // when there is none, the tick index of its latest poll, and its recent read durations.
  const TickSchedule* schedule_ = nullptr;
  std::int64_t own_deadline_ = 0;
  std::uint64_t last_tick_ = 0;
  bool planned_ = false;
  std::array<std::int64_t, kCallSamples> call_ns_{};
  std::size_t n_calls_ = 0;
  std::array<std::int64_t, kCallSamples> wake_ns_{};  // how late recent sleeps ended
  std::size_t n_wakes_ = 0;
  std::atomic<std::int64_t> lead_ns_{0};

  // The poll thread's CPU clock while it runs (valid flag: release by the thread once the id is
  // stored, cleared before it exits), and the CPU of its finished runs.
  std::atomic<clockid_t> cpu_clock_{0};
  std::atomic<bool> cpu_clock_valid_{false};
  std::atomic<std::int64_t> cpu_done_ns_{0};

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint32_t> stop_word_{0};  // futex word: on_stop() bumps it to wake the thread
};

}  // namespace stroboscope
