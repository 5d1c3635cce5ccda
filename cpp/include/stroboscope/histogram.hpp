// A fixed-size log-linear histogram of nanosecond durations for the sampler's self-measurement.
//
// Values are bucketed by their highest set bit and the next kSubBits bits, so a bucket's width is
// at most 1/16 of its lower bound: percentiles are reported to within ~6 %. Exactly one thread
// (the sampler) records; any thread may read. Recording is a handful of relaxed loads and stores:
// no allocation, no locked instructions.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>

namespace stroboscope {

class DurationHistogram {
 public:
  static constexpr int kSubBits = 4;
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kBuckets = 64 * kSub;

  void record(std::uint64_t ns) noexcept {
    bump(buckets_[index(ns)], 1);
    bump(count_, 1);
    bump(sum_, ns);
    // Single writer: a relaxed load + store is race-free; readers see an untorn value.
    if (ns > max_.load(std::memory_order_relaxed)) max_.store(ns, std::memory_order_relaxed);
  }

  [[nodiscard]] std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t max() const noexcept { return max_.load(std::memory_order_relaxed); }
  [[nodiscard]] double mean() const noexcept {
    const std::uint64_t n = count();
    return n == 0 ? 0.0 : static_cast<double>(sum_.load(std::memory_order_relaxed)) / n;
  }

  // The q-quantile (0 < q <= 1) as the midpoint of the bucket holding it; 0 when empty.
  [[nodiscard]] std::uint64_t quantile(double q) const noexcept {
    std::uint64_t total = 0;
    std::array<std::uint64_t, kBuckets> snap{};
    for (int i = 0; i < kBuckets; ++i) {
      snap[i] = buckets_[i].load(std::memory_order_relaxed);
      total += snap[i];
    }
    if (total == 0) return 0;
    auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total));
    if (rank == 0) rank = 1;
    std::uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += snap[i];
      if (seen >= rank) {
        const std::uint64_t lo = lower_bound(i);
        const std::uint64_t hi = lower_bound(i + 1);
        const std::uint64_t mid = lo + (hi - lo) / 2;
        const std::uint64_t mx = max();
        return mid < mx ? mid : mx;
      }
    }
    return max();
  }

 private:
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t by) noexcept {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  static int index(std::uint64_t v) noexcept {
    if (v < kSub) return static_cast<int>(v);  // exact for the smallest values
    const int msb = 63 - std::countl_zero(v);
    const int sub = static_cast<int>((v >> (msb - kSubBits)) & (kSub - 1));
    return (msb - kSubBits + 1) * kSub + sub;
  }
  static std::uint64_t lower_bound(int i) noexcept {
    if (i < kSub) return static_cast<std::uint64_t>(i);
    const int msb = i / kSub + kSubBits - 1;
    if (msb >= 64) return UINT64_MAX;
    const std::uint64_t sub = static_cast<std::uint64_t>(i % kSub);
    return (std::uint64_t{1} << msb) | (sub << (msb - kSubBits));
  }

  std::array<std::atomic<std::uint64_t>, kBuckets> buckets_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> sum_{0};
  std::atomic<std::uint64_t> max_{0};
};

}  // namespace stroboscope
