// When a source's reads began to fail: the times (CLOCK_MONOTONIC ns, the row's mono_ns) of
// each failed read that followed a successful one (or came first), so that a null cell can be
// told apart as "not due" (no read on that tick) or "after a failed read". A frame carries the
// log of each source (Frame::failed_reads); Frame.to_arrow(fill="forward") in Python carries a
// value to the next reading except from a failed read on.
//
// One writer (the sampler thread, in Sampler::tick), any reader (a consumer under the sampler's
// consumer mutex). The log is a ring of kSize times: a source that flaps between failing and
// succeeding overwrites its oldest entries, and a reader then knows the log is complete only from
// its oldest kept entry on. No allocation, exception or lock on the writer's side.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stroboscope {

// What a reader copies out of a FailedReads log.
struct FailedReadStarts {
  std::vector<std::int64_t> starts;  // ascending mono_ns of the first failed read of each run
  bool complete = true;              // false: older runs were overwritten (before starts[0])
};

class FailedReads {
 public:
  static constexpr std::size_t kSize = 64;

  // Writer: the outcome of one read of the source at `now_ns` (the row's mono_ns).
  void record(bool failed, std::int64_t now_ns) noexcept {
    if (failed && !failing_) {
      const std::uint64_t n = done_.load(std::memory_order_relaxed);
      // Announce the write before making it (relaxed store + release fence): a reader that sees
      // the new time in the slot (its loads then its acquire fence) also sees begun_ past n, and
      // drops the entry the slot held.
      begun_.store(n + 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      starts_[n % kSize].store(now_ns, std::memory_order_relaxed);
      // release: a reader that sees done_ == n + 1 (acquire) sees the time in the slot.
      done_.store(n + 1, std::memory_order_release);
    }
    failing_ = failed;
  }

  // Reader: the runs' starts as far as they are kept, oldest first.
  [[nodiscard]] FailedReadStarts copy() const {
    // acquire pairs with record()'s release store: entries below `done` are written.
    const std::uint64_t done = done_.load(std::memory_order_acquire);
    const std::uint64_t first = done > kSize ? done - kSize : 0;
    std::array<std::int64_t, kSize> got{};
    for (std::uint64_t i = first; i < done; ++i) {
      got[i - first] = starts_[i % kSize].load(std::memory_order_relaxed);
    }
    // acquire fence pairs with record()'s release fence: any slot read above that a concurrent
    // write had already replaced shows in begun_, and entries it may have replaced are dropped.
    std::atomic_thread_fence(std::memory_order_acquire);
    const std::uint64_t begun = begun_.load(std::memory_order_relaxed);
    const std::uint64_t keep = begun > kSize ? std::max(first, begun - kSize) : first;
    FailedReadStarts out;
    out.complete = keep == 0;
    for (std::uint64_t i = keep; i < done; ++i) out.starts.push_back(got[i - first]);
    return out;
  }

 private:
  std::array<std::atomic<std::int64_t>, kSize> starts_{};
  std::atomic<std::uint64_t> begun_{0};  // writes begun (relaxed; see record())
  std::atomic<std::uint64_t> done_{0};   // writes finished
  bool failing_ = false;                 // the latest read failed (writer only)
};

}  // namespace stroboscope
