// A slow source read on a thread of its own, at its own interval, into a latest-value block.
//
// NVML calls take tens to hundreds of µs each (times the number of GPUs); read on the sampler
// thread they would make /proc ticks late. PolledSource runs the slow source on its own thread
// and publishes each reading into a small block guarded by a sequence counter (a seqlock). The
// sampler's read() copies a reading it has not copied before (and that was taken at or before the
// tick's time) into the row in nanoseconds, with
// the CLOCK_MONOTONIC time the reading was taken (`<name>.read_mono_ns`), so every value says how
// fresh it is; on ticks with no new reading the cells stay null (no repeated values).
#pragma once

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
  [[nodiscard]] std::int64_t interval_ns() const noexcept { return interval_ns_; }

 private:
  void poll_loop() noexcept;
  void publish(std::int64_t taken_ns) noexcept;
  // This source's reason/failure follows the inner source's latest read.
  void mirror_inner_status() noexcept;

  std::unique_ptr<Source> inner_;
  std::int64_t interval_ns_;
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

  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace stroboscope
