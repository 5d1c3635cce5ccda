// Driver-resolution GPU samples: a thread that polls nvmlDeviceGetSamples at a slow interval and
// keeps every sample the driver buffered (power, GPU/memory utilisation, SM/memory clocks) in
// long form, each with the driver's own timestamp mapped onto CLOCK_MONOTONIC.
//
// This runs beside the sampler, not in it: the rows have their own times and shape (one row per
// driver sample), so they go to their own bounded buffer. The poll thread and the consumer share a
// mutex; the sampler thread never touches it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "stroboscope/clock.hpp"
#include "stroboscope/nvml.hpp"

namespace stroboscope {

struct GpuSampleRows {
  std::vector<std::int64_t> mono_ns;
  std::vector<std::int64_t> time_ns;  // UTC, as the driver stamped it
  std::vector<std::int32_t> gpu;      // NVML index
  std::vector<std::uint8_t> kind;     // NvmlSampleKind
  std::vector<double> value;
  std::uint64_t dropped = 0;  // rows discarded because the buffer was full before a drain
};

class GpuSampleRecorder {
 public:
  // `devices` empty = every GPU; `poll_interval_ns` >= 1 ms; `max_rows` bounds the buffer (the
  // oldest rows are dropped and counted when it is full). Throws like NvmlSource.
  GpuSampleRecorder(std::vector<unsigned> devices, std::int64_t poll_interval_ns,
                    std::size_t max_rows);
  ~GpuSampleRecorder();
  GpuSampleRecorder(const GpuSampleRecorder&) = delete;
  GpuSampleRecorder& operator=(const GpuSampleRecorder&) = delete;

  void start();  // idempotent
  void stop();   // idempotent; polls once more so nothing buffered at stop is missed
  void poll_now();  // one poll on the calling thread (stopped recorders; tests)
  // Rows since the last take() (take = drain), or a copy of all held rows (peek = snapshot).
  [[nodiscard]] GpuSampleRows take();
  [[nodiscard]] GpuSampleRows peek() const;
  [[nodiscard]] const std::vector<unsigned>& devices() const noexcept {
    return collector_.device_indices();
  }
  void forget_thread_after_fork() noexcept;

 private:
  void loop() noexcept;
  void poll_once() noexcept;

  NvmlSampleCollector collector_;
  std::int64_t interval_ns_;
  std::size_t max_rows_;
  ClockAnchor anchor_;  // re-taken at each poll, under poll_mutex_
  std::vector<NvmlSampleRow> scratch_;  // poll thread only (or poll_now under poll_mutex_)

  std::mutex poll_mutex_;                // one poller at a time
  mutable std::mutex rows_mutex_;        // guards rows_ and taken_
  GpuSampleRows rows_;
  std::size_t taken_ = 0;                // rows_[0, taken_) were already drained

  std::thread thread_;
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

}  // namespace stroboscope
