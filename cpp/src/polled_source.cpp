// PolledSource: the poll thread, the seqlock-guarded latest reading, and the sampler's copy.
#include "stroboscope/polled_source.hpp"

#include <pthread.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "stroboscope/clock.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/wake.hpp"

namespace stroboscope {
namespace {

constexpr int kCopyTries = 8;

}  // namespace

PolledSource::PolledSource(std::unique_ptr<Source> inner, std::int64_t interval_ns)
    : Source(inner->name()),
      inner_(std::move(inner)),
      interval_ns_(interval_ns),
      n_(inner_->columns().size()),
      scratch_cells_(n_, 0),
      scratch_valid_(n_, 0),
      cells_(std::make_unique<std::atomic<std::uint64_t>[]>(n_)),
      valid_(std::make_unique<std::atomic<std::uint8_t>[]>(n_)) {
  for (const ColumnSpec& c : inner_->columns()) {
    add_column(c.name, c.unit, c.dtype, c.kind, c.help);
  }
  add_column(name() + ".read_mono_ns", "ns", DType::kInt64, Kind::kGauge,
             "CLOCK_MONOTONIC time at which the " + name() +
                 " reading in this row was taken on its own polling thread.");
}

PolledSource::~PolledSource() { on_stop(); }

void PolledSource::on_start() {
  if (thread_.joinable()) return;
  stop_.store(false, std::memory_order_relaxed);
  planned_ = false;  // a new run, a new grid (read by the thread created below)
  thread_ = std::thread([this] { poll_loop(); });
}

void PolledSource::on_stop() noexcept {
  // release pairs with the poll loop's acquire load of the flag.
  stop_.store(true, std::memory_order_release);
  // Wake the poll thread from its sleep; it checks stop_ before sleeping again (the kernel's
  // compare of the word makes a bump before it sleeps return at once).
  stop_word_.fetch_add(1, std::memory_order_release);
  futex_wake_all(&stop_word_);
  if (thread_.joinable()) thread_.join();
}

void PolledSource::forget_threads_after_fork() noexcept {
  new (&thread_) std::thread();  // the parent's thread does not exist here; see Sampler
  cpu_clock_valid_.store(false, std::memory_order_relaxed);
}

void PolledSource::publish(std::int64_t taken_ns) noexcept {
  const std::uint64_t s = seq_.load(std::memory_order_relaxed);
  // Odd = writing. Relaxed is enough: the release stores below publish it to any reader that
  // sees one of them (the same argument as Ring::push).
  seq_.store(s + 1, std::memory_order_relaxed);
  for (std::size_t i = 0; i < n_; ++i) {
    cells_[i].store(scratch_cells_[i], std::memory_order_release);
    valid_[i].store(scratch_valid_[i], std::memory_order_release);
  }
  taken_ns_.store(taken_ns, std::memory_order_release);
  // Even again: a reader that acquires this value sees the whole reading.
  seq_.store(s + 2, std::memory_order_release);
}

std::int64_t PolledSource::p90(const std::array<std::int64_t, kCallSamples>& v,
                               std::size_t count) noexcept {
  const std::size_t n = std::min(count, kCallSamples);
  if (n == 0) return 0;
  std::array<std::int64_t, kCallSamples> sorted = v;
  const std::size_t rank = (n * 9) / 10;  // 0-based: the 90th percentile of n values
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(rank),
                   sorted.begin() + static_cast<std::ptrdiff_t>(n));
  return sorted[rank];
}

std::int64_t PolledSource::next_poll(std::int64_t end) noexcept {
  const TickSchedule* g = schedule_;
  const std::int64_t interval = interval_ns();
  if (g == nullptr || g->interval_ns <= 0) {
    own_deadline_ += interval;
    if (end >= own_deadline_) own_deadline_ += ((end - own_deadline_) / interval + 1) * interval;
    return own_deadline_;
  }
  const std::int64_t lead = p90(call_ns_, n_calls_) + p90(wake_ns_, n_wakes_) + kPhaseMarginNs;
  lead_ns_.store(lead, std::memory_order_relaxed);  // a statistic only
  const auto every = static_cast<std::uint64_t>(std::max<std::int64_t>(1, interval / g->interval_ns));
  // The first grid tick j (index first_tick + j) whose poll time, deadline_j - lead, is after
  // `end`; later than the latest planned one; and a tick this source is due on.
  const std::int64_t ahead = end + lead - g->origin_ns;
  std::uint64_t j = ahead < 0 ? 0 : static_cast<std::uint64_t>(ahead / g->interval_ns) + 1;
  if (planned_ && j <= last_tick_) j = last_tick_ + 1;
  const std::uint64_t r = (g->first_tick + j) % every;
  if (r != 0) j += every - r;
  last_tick_ = j;
  planned_ = true;
  return g->origin_ns + static_cast<std::int64_t>(j) * g->interval_ns - lead;
}

std::int64_t PolledSource::thread_cpu_ns() const noexcept {
  std::int64_t total = cpu_done_ns_.load(std::memory_order_relaxed);
  // acquire pairs with poll_loop()'s release: the clock id is valid while the flag is set. The
  // thread may exit between the check and the read: then the finished total counts it (the
  // flag is cleared after that total is updated), and this read is dropped.
  if (cpu_clock_valid_.load(std::memory_order_acquire)) {
    timespec ts{};
    if (clock_gettime(cpu_clock_.load(std::memory_order_relaxed), &ts) == 0 &&
        cpu_clock_valid_.load(std::memory_order_acquire)) {
      total += static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    } else {
      total = cpu_done_ns_.load(std::memory_order_relaxed);
    }
  }
  return total;
}

void PolledSource::poll_loop() noexcept {
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  register_own_thread();  // stroboscope's own: out of proc.cpu_pct, into proc.self_cpu_pct
  clockid_t cpu_clock{};
  const bool have_cpu_clock = pthread_getcpuclockid(pthread_self(), &cpu_clock) == 0;
  if (have_cpu_clock) {
    cpu_clock_.store(cpu_clock, std::memory_order_relaxed);
    cpu_clock_valid_.store(true, std::memory_order_release);
  }
  // The first reading at once (so a value is known early), then on the plan.
  std::int64_t wake = mono_ns();
  own_deadline_ = wake;
  bool slept = false;
  for (;;) {
    // acquire pairs with on_stop()'s release store.
    const std::uint32_t word = stop_word_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) break;
    std::int64_t now = mono_ns();
    if (now < wake) {
      futex_wait_until(&stop_word_, word, wake);
      slept = true;
      continue;  // re-check stop and the time (a wake-up may come early)
    }
    if (slept) wake_ns_[n_wakes_++ % kCallSamples] = now - wake;  // this machine's wake-up delay
    slept = false;
    std::memset(scratch_valid_.data(), 0, n_);
    inner_->read(RowWriter(scratch_cells_.data(), scratch_valid_.data(), n_), now);
    const std::int64_t end = mono_ns();
    call_ns_[n_calls_++ % kCallSamples] = end - now;
    publish(now);
    wake = next_poll(end);
  }
  timespec ts{};
  if (have_cpu_clock && clock_gettime(cpu_clock, &ts) == 0) {
    cpu_done_ns_.store(cpu_done_ns_.load(std::memory_order_relaxed) +
                           static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec,
                       std::memory_order_relaxed);
  }
  // release: the total above is counted before readers stop using the clock id.
  cpu_clock_valid_.store(false, std::memory_order_release);
  unregister_own_thread();
}

void PolledSource::mirror_inner_status() noexcept {
  const char* why = inner_->reason();
  if (why != nullptr) {
    fail(why, inner_->error_number());
  } else {
    ok();
  }
}

void PolledSource::read(RowWriter row, std::int64_t now_ns) noexcept {
  for (int attempt = 0; attempt < kCopyTries; ++attempt) {
    // acquire: pairs with publish()'s final release store.
    const std::uint64_t s1 = seq_.load(std::memory_order_acquire);
    if (s1 == 0) {
      fail("no reading yet");
      return;
    }
    if ((s1 & 1U) != 0 || s1 == last_copied_seq_) {
      // Being written right now (taken on the next tick), or nothing new since the last tick:
      // the cells stay null, and the status stays the inner source's.
      mirror_inner_status();
      return;
    }
    for (std::size_t i = 0; i < n_; ++i) {
      // acquire: seeing a value of a newer reading makes the re-check below see seq_ != s1.
      const std::uint64_t v = cells_[i].load(std::memory_order_acquire);
      if (valid_[i].load(std::memory_order_acquire) != 0) {
        std::int64_t as_i64;
        std::memcpy(&as_i64, &v, sizeof v);
        row.set_i64(i, as_i64);  // the bits are copied as they are, float or int
      } else {
        row.set_null(i);
      }
    }
    const std::int64_t taken = taken_ns_.load(std::memory_order_acquire);
    if (seq_.load(std::memory_order_relaxed) != s1) continue;  // torn: a newer reading landed
    if (taken > now_ns) {
      // Taken after this tick's time: it belongs to the next row, so that every row only shows
      // readings taken at or before its own time.
      for (std::size_t i = 0; i < n_; ++i) row.set_null(i);
      mirror_inner_status();
      return;
    }
    row.set_i64(n_, taken);
    last_copied_seq_ = s1;
    mirror_inner_status();
    return;
  }
  for (std::size_t i = 0; i <= n_; ++i) row.set_null(i);
  fail("reading kept changing while being copied");
}

}  // namespace stroboscope
