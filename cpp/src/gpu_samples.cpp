// GpuSampleRecorder: the poll thread over NvmlSampleCollector and the bounded long-form buffer.
#include "stroboscope/gpu_samples.hpp"

#include <chrono>
#include <new>
#include <stdexcept>

namespace stroboscope {
namespace {

constexpr std::size_t kScratchRows = 4096;

template <typename T>
void erase_front(std::vector<T>& v, std::size_t n) {
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace

GpuSampleRecorder::GpuSampleRecorder(std::vector<unsigned> devices,
                                     std::int64_t poll_interval_ns, std::size_t max_rows)
    : collector_(std::move(devices)),
      interval_ns_(poll_interval_ns),
      max_rows_(max_rows),
      anchor_(take_clock_anchor()),
      scratch_(kScratchRows) {
  if (poll_interval_ns < 1'000'000) {
    throw std::invalid_argument("GPU sample poll interval must be >= 1 ms");
  }
  if (max_rows == 0) throw std::invalid_argument("GPU sample buffer must hold at least one row");
}

GpuSampleRecorder::~GpuSampleRecorder() { stop(); }

void GpuSampleRecorder::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = false;
  }
  thread_ = std::thread([this] { loop(); });
}

void GpuSampleRecorder::stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    poll_once();  // whatever the driver buffered since the last poll
  }
}

void GpuSampleRecorder::forget_thread_after_fork() noexcept {
  new (&thread_) std::thread();  // the parent's thread does not exist in the child
  new (&stop_mutex_) std::mutex();
  new (&poll_mutex_) std::mutex();
  new (&rows_mutex_) std::mutex();
}

void GpuSampleRecorder::poll_now() { poll_once(); }

void GpuSampleRecorder::loop() noexcept {
  std::unique_lock<std::mutex> lock(stop_mutex_);
  while (!stop_) {
    lock.unlock();
    poll_once();
    lock.lock();
    stop_cv_.wait_for(lock, std::chrono::nanoseconds(interval_ns_), [this] { return stop_; });
  }
}

void GpuSampleRecorder::poll_once() noexcept {
  std::lock_guard<std::mutex> poll_lock(poll_mutex_);
  // The driver stamps samples in wall-clock time: map them with the wall clock's offset of now,
  // not of the recorder's start, so a step of the wall clock (NTP, a VM resumed) moves only the
  // samples of the poll it falls in, not every later one.
  anchor_ = take_clock_anchor(4);
  for (;;) {
    const std::size_t n = collector_.poll(scratch_.data(), scratch_.size());
    if (n == 0) return;
    try {
      std::lock_guard<std::mutex> lock(rows_mutex_);
      // Reserve all five first, so an allocation failure cannot leave them different lengths.
      const std::size_t want = rows_.value.size() + n;
      rows_.mono_ns.reserve(want);
      rows_.time_ns.reserve(want);
      rows_.gpu.reserve(want);
      rows_.kind.reserve(want);
      rows_.value.reserve(want);
      for (std::size_t i = 0; i < n; ++i) {
        const NvmlSampleRow& r = scratch_[i];
        const std::int64_t utc = r.driver_time_us * 1000;
        rows_.mono_ns.push_back(utc - anchor_.realtime_minus_mono_ns);
        rows_.time_ns.push_back(utc);
        rows_.gpu.push_back(static_cast<std::int32_t>(r.gpu));
        rows_.kind.push_back(static_cast<std::uint8_t>(r.kind));
        rows_.value.push_back(r.value);
      }
      const std::size_t held = rows_.value.size();
      if (held > max_rows_) {
        // Drop the oldest rows, drained or not; count the ones nobody got to see.
        const std::size_t excess = held - max_rows_;
        const std::size_t undrained = excess > taken_ ? excess - taken_ : 0;
        rows_.dropped += undrained;
        erase_front(rows_.mono_ns, excess);
        erase_front(rows_.time_ns, excess);
        erase_front(rows_.gpu, excess);
        erase_front(rows_.kind, excess);
        erase_front(rows_.value, excess);
        taken_ = taken_ > excess ? taken_ - excess : 0;
      }
    } catch (const std::bad_alloc&) {
      // Out of memory: these samples were taken from the driver and cannot be kept.
      std::lock_guard<std::mutex> lock(rows_mutex_);
      rows_.dropped += n;
      return;
    }
    if (n < scratch_.size()) return;
  }
}

GpuSampleRows GpuSampleRecorder::peek() const {
  std::lock_guard<std::mutex> lock(rows_mutex_);
  return rows_;
}

GpuSampleRows GpuSampleRecorder::take() {
  std::lock_guard<std::mutex> lock(rows_mutex_);
  GpuSampleRows out;
  const auto from = static_cast<std::ptrdiff_t>(taken_);
  out.mono_ns.assign(rows_.mono_ns.begin() + from, rows_.mono_ns.end());
  out.time_ns.assign(rows_.time_ns.begin() + from, rows_.time_ns.end());
  out.gpu.assign(rows_.gpu.begin() + from, rows_.gpu.end());
  out.kind.assign(rows_.kind.begin() + from, rows_.kind.end());
  out.value.assign(rows_.value.begin() + from, rows_.value.end());
  out.dropped = rows_.dropped;
  rows_.dropped = 0;
  // Drained rows are no longer needed for take(); peek() keeps showing what is still held.
  taken_ = rows_.value.size();
  return out;
}

}  // namespace stroboscope
