// PolledSource: the poll thread, the seqlock-guarded latest reading, and the sampler's copy.
#include "stroboscope/polled_source.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "stroboscope/clock.hpp"

namespace stroboscope {
namespace {

constexpr std::int64_t kMaxSleepChunkNs = 20'000'000;  // bounds how long stop() waits
constexpr int kCopyTries = 8;

void sleep_until(std::int64_t deadline_ns) noexcept {
  timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000),
              static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

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
  thread_ = std::thread([this] { poll_loop(); });
}

void PolledSource::on_stop() noexcept {
  // release pairs with the poll loop's acquire load of the flag.
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

void PolledSource::forget_threads_after_fork() noexcept {
  new (&thread_) std::thread();  // the parent's thread does not exist here; see Sampler
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

void PolledSource::poll_loop() noexcept {
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  std::int64_t deadline = mono_ns();
  while (!stop_.load(std::memory_order_acquire)) {
    std::int64_t now = mono_ns();
    while (now < deadline && !stop_.load(std::memory_order_acquire)) {
      sleep_until(std::min(deadline, now + kMaxSleepChunkNs));
      now = mono_ns();
    }
    if (stop_.load(std::memory_order_acquire)) break;
    std::memset(scratch_valid_.data(), 0, n_);
    inner_->read(RowWriter(scratch_cells_.data(), scratch_valid_.data(), n_), now);
    publish(now);
    deadline += interval_ns_;
    const std::int64_t end = mono_ns();
    if (end >= deadline) deadline += ((end - deadline) / interval_ns_ + 1) * interval_ns_;
  }
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
