// The sampler's overhead budget (see sampler.hpp): per-source intervals the sampler thread may
// change, the checkpoints of its CPU, the decisions, and the rate log stats() copies.
#include <time.h>

#include <algorithm>
#include <cmath>

#include "stroboscope/polled_source.hpp"
#include "stroboscope/sampler.hpp"

namespace stroboscope {
namespace {

std::int64_t ns_of(const timespec& ts) noexcept {
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

constexpr std::size_t kLogWords = 6;  // a RateChange in the rate log

}  // namespace

const char* rate_reason_name(RateReason r) noexcept {
  switch (r) {
    case RateReason::kOverBudget:
      return "over_budget";
    case RateReason::kBeyondResolution:
      return "over_budget_beyond_resolution";
    case RateReason::kRoom:
      return "room";
  }
  return "unknown";
}

void Sampler::init_budget(std::int64_t interval_ns) {
  const std::size_t n = sources_.size();
  interval_now_ns_ = std::make_unique<std::atomic<std::int64_t>[]>(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto* polled = dynamic_cast<PolledSource*>(sources_[i].source.get());
    polled_.push_back(polled);
    const std::int64_t first = polled != nullptr
                                   ? polled->interval_ns()
                                   : interval_ns * static_cast<std::int64_t>(sources_[i].every);
    first_interval_ns_.push_back(first);
    interval_now_ns_[i].store(first, std::memory_order_relaxed);
    resolution_ns_.push_back(sources_[i].source->natural_resolution_ns());
  }
  cp_mono_.assign(kCheckpoints, 0);
  cp_cpu_.assign(kCheckpoints, 0);
  cp_cost_.assign(kCheckpoints * n, 0);
  rate_log_ = std::make_unique<std::atomic<std::int64_t>[]>(kRateLogSize * kLogWords);
}

std::int64_t Sampler::source_interval_ns(std::size_t s) const noexcept {
  return interval_now_ns_[s].load(std::memory_order_relaxed);  // stands alone
}

std::int64_t Sampler::source_cost_ns(std::size_t s) const noexcept {
  if (polled_[s] != nullptr) return polled_[s]->thread_cpu_ns();
  return static_cast<std::int64_t>(source_ns_[s].load(std::memory_order_relaxed));
}

void Sampler::set_source_interval(std::size_t s, std::int64_t interval_ns) noexcept {
  if (polled_[s] != nullptr) {
    polled_[s]->set_interval_ns(interval_ns);
  } else {
    sources_[s].every = static_cast<std::uint32_t>(interval_ns / interval_ns_);
  }
  interval_now_ns_[s].store(interval_ns, std::memory_order_relaxed);
}

void Sampler::record_change(std::int64_t now, std::size_t s, std::int64_t old_ns,
                            std::int64_t new_ns, RateReason why,
                            std::int64_t share_ppm) noexcept {
  const std::uint64_t at = rate_changes_.load(std::memory_order_relaxed);
  const std::uint64_t seq = rate_seq_.load(std::memory_order_relaxed);
  // Odd while writing. Relaxed: each word below is stored with release, so a reader that
  // acquires one of them sees this odd value (or a later one) on its re-check (the pattern of
  // PolledSource::publish).
  rate_seq_.store(seq + 1, std::memory_order_relaxed);
  std::atomic<std::int64_t>* e = &rate_log_[(at % kRateLogSize) * kLogWords];
  e[0].store(now, std::memory_order_release);
  e[1].store(static_cast<std::int64_t>(s), std::memory_order_release);
  e[2].store(old_ns, std::memory_order_release);
  e[3].store(new_ns, std::memory_order_release);
  e[4].store(static_cast<std::int64_t>(why), std::memory_order_release);
  e[5].store(share_ppm, std::memory_order_release);
  // release: a reader that acquires the new count or the even seq sees the whole entry.
  rate_changes_.store(at + 1, std::memory_order_release);
  rate_seq_.store(seq + 2, std::memory_order_release);
}

void Sampler::keep_budget(std::int64_t now) noexcept {
  next_check_ns_ = now + kBudgetCheckNs;
  const std::size_t n = sources_.size();
  timespec ts{};
  std::int64_t cpu = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0 ? ns_of(ts) : 0;
  for (std::size_t s = 0; s < n; ++s) {
    if (polled_[s] != nullptr) cpu += polled_[s]->thread_cpu_ns();
  }
  const std::size_t row = checkpoints_ % kCheckpoints;
  cp_mono_[row] = now;
  cp_cpu_[row] = cpu;
  for (std::size_t s = 0; s < n; ++s) cp_cost_[row * n + s] = source_cost_ns(s);
  const std::uint64_t latest = checkpoints_++;
  // The first usable checkpoint: the latest change's, and not older than the ring keeps.
  const std::uint64_t oldest = std::max<std::uint64_t>(
      since_, latest + 1 > kCheckpoints ? latest + 1 - kCheckpoints : 0);
  if (latest == oldest) return;
  // The window: back to kLowerWindowNs (lowering) or the oldest usable (raising).
  const auto back_to = [&](std::int64_t span) {
    std::uint64_t i = latest;
    while (i > oldest && now - cp_mono_[(i - 1) % kCheckpoints] <= span) --i;
    return i;
  };
  // Per-source shares on the stack: the sampler thread must not allocate. A sampler has a
  // handful of sources; past kMaxBudgeted the rest are not budgeted (never the case in the
  // registry today).
  constexpr std::size_t kMaxBudgeted = 64;
  std::int64_t shares[kMaxBudgeted];
  const std::size_t m = std::min(n, kMaxBudgeted);
  const auto share_between = [&](std::uint64_t a, std::int64_t* cost_share_ppm) {
    const std::size_t ra = a % kCheckpoints;
    const auto dt = static_cast<double>(now - cp_mono_[ra]);
    for (std::size_t s = 0; s < m; ++s) {
      cost_share_ppm[s] = std::llround(
          static_cast<double>(cp_cost_[row * n + s] - cp_cost_[ra * n + s]) / dt * 1e6);
    }
    return std::llround(static_cast<double>(cpu - cp_cpu_[ra]) / dt * 1e6);
  };
  const auto budget_ppm = std::llround(max_overhead_ * 1e6);
  const std::uint64_t lower_from = back_to(kLowerWindowNs);
  if (lower_from < latest && now - cp_mono_[oldest % kCheckpoints] >= kLowerAfterNs) {
    std::int64_t share = share_between(lower_from, shares);
    overhead_ppm_.store(share, std::memory_order_relaxed);  // a statistic only
    if (share > budget_ppm) {
      const std::int64_t decided = share;
      // What slowing sources cannot take away: the wake-ups at this interval, precise's spin,
      // the pushes (the sources' shares are the wall time of their reads, so a read preempted
      // makes this low, never high). The sources are slowed until the estimate is under the
      // target, or, when the floor leaves less than kFloorRoom of the budget under it, until
      // they cost kFloorRoom of the budget above the floor: a cost they do not make never
      // slows them to their caps, and a costly source is still slowed.
      std::int64_t floor = share;
      for (std::size_t s = 0; s < m; ++s) floor -= std::max<std::int64_t>(shares[s], 0);
      const std::int64_t goal =
          std::max(std::llround(static_cast<double>(budget_ppm) * kLowerTarget),
                   floor + std::llround(static_cast<double>(budget_ppm) * kFloorRoom));
      bool changed = false;
      while (share > goal) {
        // The costliest source read faster than its resolution (slowing it loses nothing);
        // only when none is left, the costliest of the others (below the cap).
        std::size_t pick = m;
        for (int pass = 0; pass < 2 && pick == m; ++pass) {
          for (std::size_t s = 0; s < m; ++s) {
            const std::int64_t next = source_interval_ns(s) * 2;
            const std::int64_t cap = pass == 0 ? resolution_ns_[s]
                                               : std::max({kBudgetMaxIntervalNs,
                                                           resolution_ns_[s],
                                                           first_interval_ns_[s]});
            if (next > cap || shares[s] <= 0) continue;
            if (pick == m || shares[s] > shares[pick]) pick = s;
          }
        }
        if (pick == m) break;
        const std::int64_t old_ns = source_interval_ns(pick);
        const std::int64_t new_ns = old_ns * 2;
        set_source_interval(pick, new_ns);
        record_change(now, pick, old_ns, new_ns,
                      new_ns > resolution_ns_[pick] ? RateReason::kBeyondResolution
                                                    : RateReason::kOverBudget,
                      decided);
        share -= shares[pick] / 2;
        shares[pick] -= shares[pick] / 2;
        changed = true;
      }
      // Over the budget still, by the estimate: every source at its cap, or the floor.
      if (share > budget_ppm) budget_unmet_.fetch_add(1, std::memory_order_relaxed);
      if (changed) since_ = latest;
      return;
    }
  }
  // Raising: kRaiseAfterNs without a change, and room for the cheapest slowed source at twice
  // its rate.
  if (now - cp_mono_[oldest % kCheckpoints] < kRaiseAfterNs) return;
  const std::int64_t share = share_between(back_to(kRaiseAfterNs), shares);
  overhead_ppm_.store(share, std::memory_order_relaxed);  // a statistic only
  std::size_t pick = m;
  for (std::size_t s = 0; s < m; ++s) {
    if (source_interval_ns(s) <= first_interval_ns_[s]) continue;
    if (pick == m || shares[s] < shares[pick]) pick = s;
  }
  if (pick == m) return;
  if (share + shares[pick] > std::llround(static_cast<double>(budget_ppm) * kRaiseTarget)) return;
  const std::int64_t old_ns = source_interval_ns(pick);
  const std::int64_t new_ns = std::max(first_interval_ns_[pick], old_ns / 2);
  set_source_interval(pick, new_ns);
  record_change(now, pick, old_ns, new_ns, RateReason::kRoom, share);
  since_ = latest;
}

void Sampler::copy_rate_log(SamplerStats& s) const {
  // The rate log under its sequence counter (see record_change()); the writer is rare (a few
  // entries per kBudgetCheckNs at most), so a retry is rare too. The vector is reserved before
  // the loop: no allocation between the two reads of the counter.
  s.rate_changes.reserve(kRateLogSize);
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::uint64_t seq = rate_seq_.load(std::memory_order_acquire);
    if ((seq & 1U) != 0) continue;
    const std::uint64_t total = rate_changes_.load(std::memory_order_relaxed);
    s.rate_changes.clear();
    const std::uint64_t first = total > kRateLogSize ? total - kRateLogSize : 0;
    for (std::uint64_t c = first; c < total; ++c) {
      // acquire: seeing a word of a newer entry makes the re-check below see seq changed.
      const std::atomic<std::int64_t>* e = &rate_log_[(c % kRateLogSize) * kLogWords];
      s.rate_changes.push_back(RateChange{
          e[0].load(std::memory_order_acquire),
          static_cast<std::uint32_t>(e[1].load(std::memory_order_acquire)),
          e[2].load(std::memory_order_acquire), e[3].load(std::memory_order_acquire),
          static_cast<RateReason>(e[4].load(std::memory_order_acquire)),
          e[5].load(std::memory_order_acquire)});
    }
    if (rate_seq_.load(std::memory_order_relaxed) == seq) {
      s.rate_changes_total = total;
      break;
    }
  }
}

}  // namespace stroboscope
