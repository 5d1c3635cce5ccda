// The sampler thread (deadlines, ticks, self-measurement) and the consumer side of the ring.
#include "stroboscope/sampler.hpp"

#include "stroboscope/spool.hpp"
#include "stroboscope/linux_sources.hpp"

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

// The longest single sleep: a stop() waits at most this long for a sampler with a long interval.
constexpr std::int64_t kMaxSleepChunkNs = 20'000'000;  // 20 ms

void sleep_until_mono(std::int64_t deadline_ns) noexcept {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(deadline_ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(deadline_ns % 1'000'000'000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

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
                 std::uint64_t capacity, const std::string& spool_path)
    : sources_(std::move(sources)),
      columns_(ring_columns_for(sources_)),
      interval_ns_(interval_ns) {
  if (interval_ns < kMinIntervalNs || interval_ns > kMaxIntervalNs) {
    throw std::invalid_argument("interval must be within [100 us, 1 h], got " +
                                std::to_string(interval_ns) + " ns");
  }
  (void)checked_capacity(capacity);
  std::size_t offset = 1;  // column 0 is mono_ns
  for (const SourceSlot& slot : sources_) {
    if (slot.every == 0) throw std::invalid_argument("source interval multiple must be >= 1");
    offsets_.push_back(offset);
    offset += slot.source->columns().size();
  }
  next_due_.assign(sources_.size(), 0);
  source_ns_ = std::make_unique<std::atomic<std::uint64_t>[]>(sources_.size());
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
  running_.store(true, std::memory_order_release);
  try {
    for (SourceSlot& slot : sources_) slot.source->on_start();  // e.g. a slow source's poller
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
  thread_cpu_clock_valid_.store(false, std::memory_order_relaxed);
}

void Sampler::tick(std::uint64_t k, std::int64_t now) noexcept {
  std::memset(row_valid_.data(), 0, row_valid_.size());
  std::memcpy(&row_cells_[0], &now, sizeof now);
  row_valid_[0] = 1;
  for (std::size_t s = 0; s < sources_.size(); ++s) {
    if (k < next_due_[s]) continue;
    const SourceSlot& slot = sources_[s];
    const std::int64_t t0 = mono_ns();
    slot.source->read(RowWriter(&row_cells_[offsets_[s]], &row_valid_[offsets_[s]],
                                slot.source->columns().size()),
                      now);
    const std::int64_t t1 = mono_ns();
    // Single writer; relaxed load + store so stats() can read an untorn total.
    source_ns_[s].store(source_ns_[s].load(std::memory_order_relaxed) +
                            static_cast<std::uint64_t>(t1 - t0),
                        std::memory_order_relaxed);
    next_due_[s] = (k / slot.every + 1) * slot.every;
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
  const std::int64_t start = mono_ns();
  // Tick indices continue across stop/start so sources' "every n" stays consistent; deadlines
  // restart from now.
  std::uint64_t k = next_tick_;
  std::int64_t deadline = start;
  // acquire pairs with stop()'s release store.
  while (!stop_requested_.load(std::memory_order_acquire)) {
    std::int64_t now = mono_ns();
    bool stopping = false;
    while (now < deadline) {
      sleep_until_mono(std::min(deadline, now + kMaxSleepChunkNs));
      if (stop_requested_.load(std::memory_order_acquire)) {
        stopping = true;
        break;
      }
      now = mono_ns();
    }
    if (stopping) break;
    lateness_.record(static_cast<std::uint64_t>(now - deadline));
    tick(k, now);
    const std::int64_t end = mono_ns();
    cost_.record(static_cast<std::uint64_t>(end - now));
    ticks_taken_.store(ticks_taken_.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);
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
  for (std::uint64_t i = 0; i < n; ++i) tick(next_tick_++, mono_ns());
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
    s.sources.push_back(SourceStats{src.name(), sources_[i].every, src.reads(), src.failures(),
                                    source_ns_[i].load(std::memory_order_relaxed),
                                    why != nullptr ? std::string(why) : std::string(),
                                    src.error_number(), exited, src.not_followed()});
    s.process_exited = s.process_exited || exited;
  }
  return s;
}

}  // namespace stroboscope
