// The sampler thread (deadlines, ticks, self-measurement) and the consumer side of the ring.
#include "stroboscope/sampler.hpp"

#include "stroboscope/polled_source.hpp"
#include "stroboscope/spool.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/wake.hpp"

#include <pthread.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace stroboscope {
namespace {

// Precise mode: the spin window is the largest overshoot of the sleep before a deadline over the
// last 64 ticks (about the 98th percentile), plus kSpinMarginNs; at least kMinSpinNs, at most half
// the interval. The cap keeps the thread sleeping for part of every interval: a thread that never
// sleeps is, to the scheduler, a CPU hog it preempts for whole time slices (measured: with the
// window at the full interval on a busy 2-core VM, p99 lateness was 3x worse than sleeping).
constexpr std::int64_t kSpinMarginNs = 20'000;
constexpr std::int64_t kMinSpinNs = 20'000;

std::vector<ColumnSpec> ring_columns_for(const std::vector<SourceSlot>& sources) {
  std::vector<ColumnSpec> cols;
  cols.push_back(ColumnSpec{"mono_ns", "ns", DType::kInt64, Kind::kGauge,
                            "CLOCK_MONOTONIC time of the tick, as time.monotonic_ns()."});
  for (const SourceSlot& slot : sources) {
    for (const ColumnSpec& c : slot.source->columns()) cols.push_back(c);
  }
  return cols;
}

std::uint64_t checked_capacity(std::uint64_t capacity) {
  if (capacity < 2 || (capacity & (capacity - 1)) != 0) {
    throw std::invalid_argument("capacity must be a power of two >= 2, got " +
                                std::to_string(capacity));
  }
  return capacity;
}

}  // namespace

Sampler::Sampler(std::vector<SourceSlot> sources, std::int64_t interval_ns,
                 std::uint64_t capacity, const std::string& spool_path, bool precise,
                 double max_overhead)
    : sources_(std::move(sources)),
      columns_(ring_columns_for(sources_)),
      interval_ns_(interval_ns),
      precise_(precise),
      max_overhead_(max_overhead) {
  if (interval_ns < kMinIntervalNs || interval_ns > kMaxIntervalNs) {
    throw std::invalid_argument("interval must be within [100 us, 1 h], got " +
                                std::to_string(interval_ns) + " ns");
  }
  if (!(max_overhead >= 0.0 && max_overhead <= 1.0)) {  // also refuses NaN
    throw std::invalid_argument("max_overhead must be within [0, 1] (0: off), got " +
                                std::to_string(max_overhead));
  }
  (void)checked_capacity(capacity);
  std::size_t offset = 1;  // column 0 is mono_ns
  for (const SourceSlot& slot : sources_) {
    if (slot.every == 0) throw std::invalid_argument("source interval multiple must be >= 1");
    offsets_.push_back(offset);
    offset += slot.source->columns().size();
  }
  next_due_.assign(sources_.size(), 0);
  failed_reads_ = std::make_unique<FailedReads[]>(sources_.size());
  source_ns_ = std::make_unique<std::atomic<std::uint64_t>[]>(sources_.size());
  init_budget(interval_ns);
  row_cells_.assign(columns_.size(), 0);
  row_valid_.assign(columns_.size(), 0);
  anchor_ = take_clock_anchor();
  anchor_offset_ns_.store(anchor_.realtime_minus_mono_ns, std::memory_order_relaxed);
  if (spool_path.empty()) {
    ring_ = std::make_unique<Ring>(columns_.size(), capacity);
  } else {
    ring_ = std::make_unique<Ring>(
        columns_.size(), capacity,
        create_spool(spool_path, columns_, capacity,
                     SpoolInfo{anchor_.realtime_minus_mono_ns, interval_ns}));
  }
}

Sampler::~Sampler() { stop(); }

void Sampler::start() {
  if (running_.load(std::memory_order_acquire)) return;
  if (thread_.joinable()) thread_.join();  // a run that ended on its own
  stop_requested_.store(false, std::memory_order_relaxed);
  // Requests made while stopped are not owed a row. No thread of this sampler runs now, so the
  // plain writes below reach the threads created next through their creation.
  served_word_ = wake_word_.load(std::memory_order_relaxed);
  // Deadlines restart from now; tick indices continue (sources' "every n" stays consistent).
  schedule_ = TickSchedule{mono_ns(), next_tick_, interval_ns_};
  running_.store(true, std::memory_order_release);
  try {
    for (SourceSlot& slot : sources_) {
      slot.source->follow_schedule(&schedule_);
      slot.source->on_start();  // e.g. a slow source's poller
    }
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    for (SourceSlot& slot : sources_) slot.source->on_stop();
    running_.store(false, std::memory_order_release);
    throw;
  }
}

void Sampler::stop() {
  // release: the sampler thread's acquire load of the flag ends its loop.
  stop_requested_.store(true, std::memory_order_release);
  // Wake a sleeping sampler thread; it sees the flag before it would sleep again. seq_cst like
  // request_tick(), though here an unconditional wake makes the order moot.
  wake_word_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&wake_word_);
  if (thread_.joinable()) thread_.join();
  for (SourceSlot& slot : sources_) slot.source->on_stop();
  running_.store(false, std::memory_order_release);
}

void Sampler::forget_thread_after_fork() noexcept {
  // The std::thread object describes a thread of the parent. Joining or destroying a joinable
  // one would block or terminate, so end its lifetime without running its destructor.
  new (&thread_) std::thread();
  // Another thread of the parent may have held a consumer lock at the fork; in the child that
  // thread is gone and the lock would stay held for ever.
  new (&consumer_mutex_) std::mutex();
  new (&drain_mutex_) std::mutex();
  for (SourceSlot& slot : sources_) slot.source->forget_threads_after_fork();
  running_.store(false, std::memory_order_relaxed);
  stop_requested_.store(false, std::memory_order_relaxed);
  sleeping_.store(false, std::memory_order_relaxed);
  thread_cpu_clock_valid_.store(false, std::memory_order_relaxed);
}

void Sampler::request_tick() noexcept {
  // relaxed: a request racing with start() or stop() may or may not get a row; either is fine.
  if (!running_.load(std::memory_order_relaxed)) return;
  tick_requests_.fetch_add(1, std::memory_order_relaxed);  // a statistic only
  // seq_cst on both sides (Dekker): the sampler stores sleeping_ = true and then loads the word;
  // we bump the word and then load sleeping_. In the single total order either our load sees
  // true (we wake it) or its load comes after our bump (it sees a new value and does not sleep).
  // A wake sent before it enters the futex is not lost either: the kernel compares the word.
  wake_word_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) futex_wake_all(&wake_word_);
}

Sampler::Wake Sampler::wait_for(std::int64_t deadline) noexcept {
  std::int64_t window = -1;  // precise mode's spin window, computed when first needed
  for (;;) {
    // acquire pairs with stop()'s release store.
    if (stop_requested_.load(std::memory_order_acquire)) return Wake::kStop;
    // acquire: a request "happens before" the row it gets (only an ordering nicety; the row's
    // content does not depend on the requester's writes).
    const std::uint32_t word = wake_word_.load(std::memory_order_acquire);
    if (word != served_word_) {
      served_word_ = word;  // every request made so far shares this row
      return Wake::kRequest;
    }
    const std::int64_t now = mono_ns();
    if (now >= deadline) return Wake::kDeadline;
    std::int64_t wake_at = deadline;
    if (precise_) {
      if (window < 0) {  // once per wait, and again after each sleep (a new overshoot)
        std::int64_t worst = 0;
        for (std::int64_t o : overshoot_ns_) worst = std::max(worst, o);
        window = std::clamp(worst + kSpinMarginNs, kMinSpinNs,
                            std::max(kMinSpinNs, interval_ns_ / 2));
        spin_window_ns_.store(window, std::memory_order_relaxed);  // a statistic only
      }
      if (deadline - now <= window) {
        cpu_relax();  // spin: re-check the deadline, requests and stop
        continue;
      }
      wake_at = deadline - window;
    }
    sleeping_.store(true, std::memory_order_seq_cst);  // see request_tick()
    if (wake_word_.load(std::memory_order_seq_cst) == word) {
      futex_wait_until(&wake_word_, word, wake_at);
    }
    sleeping_.store(false, std::memory_order_relaxed);
    if (precise_) {
      overshoot_ns_[overshoot_at_] = std::max<std::int64_t>(0, mono_ns() - wake_at);
      window = -1;
    }
  }
}

void Sampler::tick(std::uint64_t k, std::int64_t now, bool edge) noexcept {
  std::memset(row_valid_.data(), 0, row_valid_.size());
  std::memcpy(&row_cells_[0], &now, sizeof now);
  row_valid_[0] = 1;
  for (std::size_t s = 0; s < sources_.size(); ++s) {
    if (k < next_due_[s]) continue;
    const SourceSlot& slot = sources_[s];
    const std::uint64_t failures = slot.source->failures();
    const std::int64_t t0 = mono_ns();
    slot.source->read(RowWriter(&row_cells_[offsets_[s]], &row_valid_[offsets_[s]],
                                slot.source->columns().size()),
                      now);
    const std::int64_t t1 = mono_ns();
    failed_reads_[s].record(slot.source->failures() != failures, now);
    // Single writer; relaxed load + store so stats() can read an untorn total.
    source_ns_[s].store(source_ns_[s].load(std::memory_order_relaxed) +
                            static_cast<std::uint64_t>(t1 - t0),
                        std::memory_order_relaxed);
    // An edge row leaves an every-tick source due on tick k; a slower one it read is not read
    // again on tick k (see the header).
    if (!edge || slot.every > 1) next_due_[s] = (k / slot.every + 1) * slot.every;
  }
  ring_->push(row_cells_.data(), row_valid_.data());
}

void Sampler::run() noexcept {
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // wake at the deadline, not up to 50 µs after
  clockid_t cpu_clock{};
  const bool have_cpu_clock = pthread_getcpuclockid(pthread_self(), &cpu_clock) == 0;
  if (have_cpu_clock) {
    thread_cpu_clock_.store(cpu_clock, std::memory_order_relaxed);
    thread_cpu_clock_valid_.store(true, std::memory_order_release);
  }
  overshoot_ns_.fill(0);
  // The budget's checkpoints start afresh with each run (a stopped sampler costs nothing).
  checkpoints_ = since_ = 0;
  next_check_ns_ = 0;
  // start() wrote the schedule before creating this thread.
  std::uint64_t k = schedule_.first_tick;
  std::int64_t deadline = schedule_.origin_ns;
  for (;;) {
    const Wake why = wait_for(deadline);
    if (why == Wake::kStop) break;
    if (why == Wake::kRequest) {
      // An edge row before regular tick k: timed like a tick, recorded apart from the deadlines.
      tick(k, mono_ns(), true);
      ticks_requested_.store(ticks_requested_.load(std::memory_order_relaxed) + 1,
                             std::memory_order_relaxed);
      continue;
    }
    // Requests made before this row's time are served by it; those during it get an edge row.
    served_word_ = wake_word_.load(std::memory_order_acquire);
    const std::int64_t now = mono_ns();
    lateness_.record(static_cast<std::uint64_t>(now - deadline));
    // Precise mode: the next tick's sleep (if any) records its overshoot in the next slot.
    overshoot_at_ = (overshoot_at_ + 1) % overshoot_ns_.size();
    overshoot_ns_[overshoot_at_] = 0;
    tick(k, now, false);
    std::int64_t end = mono_ns();
    cost_.record(static_cast<std::uint64_t>(end - now));
    ticks_taken_.store(ticks_taken_.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);
    if (max_overhead_ > 0.0 && end >= next_check_ns_) {
      keep_budget(end);  // after the row: not in the tick's cost, nor in its lateness
      end = mono_ns();
    }
    ++k;
    deadline += interval_ns_;
    if (end >= deadline) {
      // Skip every deadline that has already passed: no bunching to catch up.
      const auto skipped = static_cast<std::uint64_t>((end - deadline) / interval_ns_ + 1);
      deadline += static_cast<std::int64_t>(skipped) * interval_ns_;
      k += skipped;
      ticks_missed_.store(ticks_missed_.load(std::memory_order_relaxed) + skipped,
                          std::memory_order_relaxed);
    }
  }
  next_tick_ = k;
  timespec ts{};
  if (have_cpu_clock && clock_gettime(cpu_clock, &ts) == 0) {
    const std::int64_t used = static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    thread_cpu_done_ns_.store(thread_cpu_done_ns_.load(std::memory_order_relaxed) + used,
                              std::memory_order_relaxed);
  }
  // The clock id dies with the thread: stop readers from using it (release orders the total
  // above before the flag).
  thread_cpu_clock_valid_.store(false, std::memory_order_release);
  running_.store(false, std::memory_order_release);
}

std::int64_t Sampler::run_ticks_inline(std::uint64_t n) {
  if (running()) throw std::logic_error("run_ticks_inline needs a stopped sampler");
  const std::int64_t t0 = mono_ns();
  for (std::uint64_t i = 0; i < n; ++i) tick(next_tick_++, mono_ns(), false);
  return mono_ns() - t0;
}

std::shared_ptr<Frame> Sampler::copy_rows(std::uint64_t from, std::uint64_t to,
                                          std::uint64_t lost) {
  // Above this many bytes a copy is far larger than the caches: the ring copy writes the frame
  // with streaming stores, which do not first read each destination line (a third less memory
  // traffic). Below it, cached stores leave a drain's rows warm for the export that follows.
  constexpr std::size_t kStreamingBytes = std::size_t{16} << 20;
  // Metric columns of the frame = ring columns (mono_ns first); the frame adds `time` in front.
  // Its buffer comes from the pool when a previous frame's is free again.
  FrameBuilder frame(columns_, from, to, frame_pool_);
  std::vector<FrameFailedReads> logs(sources_.size());
  for (std::size_t s = 0; s < sources_.size(); ++s) {
    // Ring column offsets_[s] is frame column offsets_[s] + 1 (the frame adds `time` in front).
    logs[s] = FrameFailedReads{offsets_[s] + 1, sources_[s].source->columns().size(),
                               failed_reads_[s].copy()};
  }
  frame.set_failed_reads(std::move(logs));
  const std::uint64_t first_intact = ring_->copy(from, to, frame.ring_destinations().data(),
                                                 frame.copy_bytes() >= kStreamingBytes);
  return std::move(frame).finish(first_intact, anchor_offset_ns_.load(std::memory_order_relaxed),
                                 lost);
}

std::shared_ptr<Frame> Sampler::snapshot() {
  std::lock_guard<std::mutex> lock(consumer_mutex_);
  const std::uint64_t to = ring_->written();
  return copy_rows(ring_->oldest(to), to);
}

std::shared_ptr<Frame> Sampler::copy_since(std::uint64_t from) {
  std::lock_guard<std::mutex> lock(consumer_mutex_);
  const std::uint64_t to = ring_->written();
  const std::uint64_t oldest = ring_->oldest(to);
  std::uint64_t lost = 0;
  if (from < oldest) {
    lost = oldest - from;
    from = oldest;
  }
  if (from > to) from = to;
  return copy_rows(from, to, lost);
}

std::shared_ptr<Frame> Sampler::drain() {
  std::lock_guard<std::mutex> lock(drain_mutex_);
  auto frame = copy_since(drain_cursor_);
  drain_cursor_ = frame->first_row() + static_cast<std::uint64_t>(frame->length());
  rows_lost_.store(rows_lost_.load(std::memory_order_relaxed) + frame->rows_lost(),
                   std::memory_order_relaxed);
  return frame;
}

SamplerStats Sampler::stats() const {
  SamplerStats s{};
  s.interval_ns = interval_ns_;
  s.running = running();
  s.ticks_taken = ticks_taken_.load(std::memory_order_relaxed);
  s.ticks_missed = ticks_missed_.load(std::memory_order_relaxed);
  s.ticks_scheduled = s.ticks_taken + s.ticks_missed;
  s.ticks_requested = ticks_requested_.load(std::memory_order_relaxed);
  s.tick_requests = tick_requests_.load(std::memory_order_relaxed);
  s.precise = precise_;
  s.spin_window_ns = spin_window_ns_.load(std::memory_order_relaxed);
  s.rows_written = ring_->written();
  s.rows_overwritten = ring_->overwritten();
  s.rows_lost = rows_lost_.load(std::memory_order_relaxed);
  s.lateness_p50_ns = lateness_.quantile(0.50);
  s.lateness_p99_ns = lateness_.quantile(0.99);
  s.lateness_max_ns = lateness_.max();
  s.cost_mean_ns = cost_.mean();
  s.cost_p99_ns = cost_.quantile(0.99);
  s.cost_max_ns = cost_.max();
  s.thread_cpu_ns = thread_cpu_done_ns_.load(std::memory_order_relaxed);
  // acquire pairs with the release in run(): the clock id is valid while the flag is set. The
  // thread may exit between the check and the read; then clock_gettime fails and the finished
  // total (already counted above once the flag drops) is what we report.
  if (thread_cpu_clock_valid_.load(std::memory_order_acquire)) {
    timespec ts{};
    if (clock_gettime(thread_cpu_clock_.load(std::memory_order_relaxed), &ts) == 0 &&
        thread_cpu_clock_valid_.load(std::memory_order_acquire)) {
      s.thread_cpu_ns += static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    }
  }
  s.threads_cpu_ns = s.thread_cpu_ns;
  s.capacity = ring_->capacity();
  s.num_columns = columns_.size() - 1;
  s.ring_bytes = ring_->memory_bytes();
  s.clock_anchor_uncertainty_ns = anchor_.uncertainty_ns;
  for (std::size_t i = 0; i < sources_.size(); ++i) {
    const Source& src = *sources_[i].source;
    const char* why = src.reason();
    // The process sources say so with one reason; compared by text, not by address, so a
    // reason copied through a wrapper (PolledSource) still counts.
    const bool exited = why != nullptr && std::strcmp(why, kReasonProcessExited) == 0;
    // A tick source's every from the mirror (the sampler thread may change the slot's); a polled
    // source's slot is read on every tick, its own interval is its poll thread's.
    const auto every = polled_[i] != nullptr
                           ? sources_[i].every
                           : static_cast<std::uint32_t>(source_interval_ns(i) / interval_ns_);
    s.sources.push_back(SourceStats{src.name(), every, src.reads(), src.failures(),
                                    source_ns_[i].load(std::memory_order_relaxed),
                                    why != nullptr ? std::string(why) : std::string(),
                                    src.error_number(), exited, src.not_followed()});
    SourceStats& back = s.sources.back();
    if (const auto* polled = polled_[i]) back.poll_lead_ns = polled->lead_ns();
    back.interval_ns = source_interval_ns(i);
    back.first_interval_ns = first_interval_ns_[i];
    back.resolution_ns = resolution_ns_[i];
    back.cost_ns = source_cost_ns(i);
    if (polled_[i] != nullptr) s.threads_cpu_ns += back.cost_ns;
    s.process_exited = s.process_exited || exited;
  }
  s.max_overhead = max_overhead_;
  s.overhead_ppm = overhead_ppm_.load(std::memory_order_relaxed);
  s.budget_unmet = budget_unmet_.load(std::memory_order_relaxed);
  copy_rate_log(s);
  return s;
}

}  // namespace stroboscope
