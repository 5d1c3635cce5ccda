// The sampler: one thread on absolute CLOCK_MONOTONIC deadlines that reads every due source into
// a row and pushes it into the ring, and the consumer side (snapshot, drain) that copies rows out.
//
// Tick k is due at start + k * interval. A source with `every = n` is read on ticks that are
// multiples of n (or on the first tick taken after such a tick was skipped). A tick whose
// deadline has already passed when the previous one finishes is skipped and counted as missed:
// ticks are never bunched to catch up. The thread never blocks on a consumer and never calls
// into Python; consumers never block it (they only read atomics and copy cells).
//
// Between ticks the thread waits on a futex word with an absolute CLOCK_MONOTONIC deadline
// (wake.hpp), so another thread can wake it early: request_tick() asks for one extra row at once
// (an "edge row", e.g. at a scope's begin or end). Edge rows leave the grid of deadlines as it is.
// An edge row reads every source due on every tick; a source read every n > 1 ticks is read on it
// only when it is due on the next regular tick, and that tick then does not read it again (so
// its reading moves earlier by less than one base interval and its number of reads is unchanged).
//
// Precise mode (opt-in, for short profiling runs) sleeps until just before each deadline and
// spins the rest of the way: lateness drops to the spin loop's granularity at the price of the
// spin's CPU time. How early it wakes is learned from its own sleeps (see wait_for()).
//
// The overhead budget (opt-in by `max_overhead`, a share of one core): every kBudgetCheckNs the
// sampler thread, after its tick's row is pushed (outside the tick's measured cost), reads its
// own CPU clock and those of its sources' poll threads and keeps the readings, with each source's
// cost (read time, or its poll thread's CPU), in a fixed ring of checkpoints. When its CPU over
// the last kLowerWindowNs (at least kLowerAfterNs since the latest change) exceeds the budget, it
// doubles the interval of the costliest source, again and again, until the estimate (each
// doubling halves that source's share) is under kLowerTarget of the budget, or, when the CPU the
// sources do not cost (the wake-ups at the interval, precise's spin) leaves less than kFloorRoom
// of the budget under that, until the sources cost kFloorRoom of the budget above it; each
// doubling is one entry of the rate log. Sources read faster than their declared resolution are
// slowed first (nothing is lost up to it); past its resolution, only when no such source is
// left, and the entry says so (kBeyondResolution); no interval passes
// max(kBudgetMaxIntervalNs, its resolution, its first interval). After kRaiseAfterNs without a
// change, if the CPU plus the cost of halving the cheapest slowed source's interval stays under
// kRaiseTarget of the budget, it halves it (one step per kRaiseAfterNs: the hysteresis). No
// allocation, exception or logging: the log is a fixed ring of kRateLogSize entries read by
// stats() under a sequence counter; the Python layer logs the entries it has not logged.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "stroboscope/clock.hpp"
#include "stroboscope/column.hpp"
#include "stroboscope/failed_reads.hpp"
#include "stroboscope/frame.hpp"
#include "stroboscope/histogram.hpp"
#include "stroboscope/ring.hpp"
#include "stroboscope/source.hpp"

namespace stroboscope {

class PolledSource;

inline constexpr std::int64_t kMinIntervalNs = 100'000;                  // 100 µs
inline constexpr std::int64_t kMaxIntervalNs = 3600LL * 1'000'000'000;  // 1 h

// The overhead budget's timing (see the header comment).
inline constexpr std::int64_t kBudgetCheckNs = 250'000'000;
inline constexpr std::int64_t kLowerAfterNs = 500'000'000;
inline constexpr std::int64_t kLowerWindowNs = 2'000'000'000;
inline constexpr std::int64_t kRaiseAfterNs = 5'000'000'000;
inline constexpr std::int64_t kBudgetMaxIntervalNs = 1'000'000'000;
inline constexpr double kLowerTarget = 0.9;
inline constexpr double kFloorRoom = 0.25;
inline constexpr double kRaiseTarget = 0.8;
inline constexpr std::size_t kCheckpoints = 32;  // 8 s of checkpoints: > kRaiseAfterNs
inline constexpr std::size_t kRateLogSize = 256;

enum class RateReason : std::uint8_t {
  kOverBudget = 1,         // lowered, still at or faster than the source's resolution
  kBeyondResolution = 2,   // lowered past the source's declared resolution: values are lost
  kRoom = 3,               // raised again: the budget has room
};
[[nodiscard]] const char* rate_reason_name(RateReason r) noexcept;

// One change of a source's rate made by the overhead budget.
struct RateChange {
  std::int64_t mono_ns;        // CLOCK_MONOTONIC time of the decision
  std::uint32_t source;        // index of the source (stats().sources)
  std::int64_t old_interval_ns;
  std::int64_t new_interval_ns;
  RateReason reason;
  std::int64_t share_ppm;      // the sampler's CPU that decided it (millionths of one core)
};

struct SourceSlot {
  std::unique_ptr<Source> source;
  std::uint32_t every = 1;  // read on every n-th tick of the base interval
};

struct SourceStats {
  std::string name;
  std::uint32_t every;
  std::uint64_t reads;
  std::uint64_t failures;
  std::uint64_t read_ns_total;  // time spent in this source's read()
  std::string reason;           // why the latest read left cells null ("" when fine)
  int error_number;
  bool process_exited;  // the latest read found the monitored process gone
  std::uint64_t not_followed = 0;  // found but not followed at the latest read (Source)
  // A polled (slow) source: how long before its tick its latest poll was planned to start (its
  // p90 call time + p90 wake-up delay + PolledSource::kPhaseMarginNs); 0 for the others.
  std::int64_t poll_lead_ns = 0;
  // Its interval now (the overhead budget may have changed it), its first one, and its
  // declared resolution (Source::natural_resolution_ns, a polled source's inner one's).
  std::int64_t interval_ns = 0;
  std::int64_t first_interval_ns = 0;
  std::int64_t resolution_ns = 0;
  // CPU time of its own poll thread (a polled source); its read_ns_total otherwise.
  std::int64_t cost_ns = 0;
};

struct SamplerStats {
  std::int64_t interval_ns;
  bool running;
  std::uint64_t ticks_scheduled;  // deadlines that have passed while running (taken + missed)
  std::uint64_t ticks_taken;
  std::uint64_t ticks_missed;
  std::uint64_t ticks_requested;  // edge rows taken for request_tick() (not in ticks_taken)
  std::uint64_t tick_requests;    // request_tick() calls while running (several may share a row)
  bool precise;                   // sleeps then spins to each deadline
  std::int64_t spin_window_ns;    // precise mode: how long before a deadline it starts spinning
  std::uint64_t rows_written;
  std::uint64_t rows_overwritten;  // rows whose ring slot was reused
  std::uint64_t rows_lost;         // rows overwritten before a drain() reached them
  std::uint64_t lateness_p50_ns, lateness_p99_ns, lateness_max_ns;
  double cost_mean_ns;
  std::uint64_t cost_p99_ns, cost_max_ns;
  std::int64_t thread_cpu_ns;  // CPU time used by the sampler thread
  std::uint64_t capacity;
  std::size_t num_columns;  // metric columns (mono_ns not counted)
  std::size_t ring_bytes;
  std::int64_t clock_anchor_uncertainty_ns;
  bool process_exited = false;  // a process source's latest read found the process gone
  std::vector<SourceStats> sources;
  // The overhead budget (0: off), the latest measured share (millionths of a core, over the
  // latest window; -1 before the first), the sampler's threads' CPU (its own + poll threads'),
  // the changes made (total) and the latest of them (at most kRateLogSize, oldest first), and
  // the decisions that found the budget exceeded with nothing left to lower.
  double max_overhead = 0.0;
  std::int64_t overhead_ppm = -1;
  std::int64_t threads_cpu_ns = 0;
  std::uint64_t rate_changes_total = 0;
  std::vector<RateChange> rate_changes;
  std::uint64_t budget_unmet = 0;
};

class Sampler {
 public:
  // `interval_ns` in [kMinIntervalNs, kMaxIntervalNs]; `capacity` a power of two >= 2. Throws
  // std::invalid_argument otherwise (the Python layer validates first, with friendlier text).
  // With a `spool_path`, the ring lives in that file (see spool.hpp), created 0600.
  // `precise`: sleep to just before each deadline, then spin (see above).
  Sampler(std::vector<SourceSlot> sources, std::int64_t interval_ns, std::uint64_t capacity,
          const std::string& spool_path = {}, bool precise = false, double max_overhead = 0.0);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  void start();  // idempotent; throws std::system_error if the thread cannot be created
  void stop();   // idempotent; joins the thread
  [[nodiscard]] bool running() const noexcept { return running_.load(std::memory_order_acquire); }

  // Any thread: the sampler thread takes one extra row at once (an edge row, counted in
  // stats().ticks_requested); the regular deadlines are unchanged. A request made while a tick
  // is running yields one row after it; requests made before that row starts share it, and a
  // request made just before a regular tick starts is served by that tick's row (no edge row;
  // tick_requests counts it, ticks_requested does not). A no-op while stopped. Lock-free: two atomic operations, plus a futex wake when the thread sleeps.
  void request_tick() noexcept;

  // Metric columns in ring order: mono_ns first, then each source's columns.
  [[nodiscard]] const std::vector<ColumnSpec>& ring_columns() const noexcept { return columns_; }

  // A consistent copy of every row still in the ring; does not move the drain cursor.
  [[nodiscard]] std::shared_ptr<Frame> snapshot();
  // The rows written since the previous drain (rows overwritten before this call are counted in
  // the frame's rows_lost and in stats().rows_lost).
  [[nodiscard]] std::shared_ptr<Frame> drain();
  // The rows from index `from` on, for a consumer with a cursor of its own (the spool's segment
  // writer); rows already overwritten are counted in the frame's rows_lost. Moves no cursor.
  [[nodiscard]] std::shared_ptr<Frame> copy_since(std::uint64_t from);

  [[nodiscard]] SamplerStats stats() const;
  // Three of stats()'s counters, without the rest of it (a frame's provenance records them).
  [[nodiscard]] std::uint64_t ticks_taken() const noexcept {
    return ticks_taken_.load(std::memory_order_relaxed);  // a count: no order with other data
  }
  [[nodiscard]] std::uint64_t ticks_missed() const noexcept {
    return ticks_missed_.load(std::memory_order_relaxed);  // a count: no order with other data
  }
  [[nodiscard]] std::uint64_t rows_lost() const noexcept {
    return rows_lost_.load(std::memory_order_relaxed);  // a count: no order with other data
  }
  // The overhead budget's changes so far (a cheap check for new ones).
  [[nodiscard]] std::uint64_t rate_changes() const noexcept {
    return rate_changes_.load(std::memory_order_acquire);  // pairs with record_change()'s release
  }

  // Runs `n` ticks back to back on the calling thread (no sleeping) and returns the nanoseconds
  // they took: the cost of sampling, without scheduling. Only while stopped (benchmarks).
  std::int64_t run_ticks_inline(std::uint64_t n);

  // In a child after fork(): the sampler thread does not exist there. Forget it without joining
  // so the child can start this sampler again or build its own.
  void forget_thread_after_fork() noexcept;

 private:
  enum class Wake { kDeadline, kRequest, kStop };
  void run() noexcept;
  // Waits for `deadline`, a request or stop(), whichever comes first.
  Wake wait_for(std::int64_t deadline) noexcept;
  // `edge`: an edge row taken before regular tick `k` (see the header comment).
  void tick(std::uint64_t k, std::int64_t now, bool edge) noexcept;
  // The overhead budget (sampler_budget.cpp): its per-source state, made by the constructor;
  // its check (sampler thread, every kBudgetCheckNs; see the header comment); the rate log's
  // copy into stats().
  void init_budget(std::int64_t interval_ns);
  void keep_budget(std::int64_t now) noexcept;
  void copy_rate_log(SamplerStats& s) const;
  [[nodiscard]] std::int64_t source_cost_ns(std::size_t s) const noexcept;
  [[nodiscard]] std::int64_t source_interval_ns(std::size_t s) const noexcept;
  void set_source_interval(std::size_t s, std::int64_t interval_ns) noexcept;
  void record_change(std::int64_t now, std::size_t s, std::int64_t old_ns, std::int64_t new_ns,
                     RateReason why, std::int64_t share_ppm) noexcept;
  // Rows [from, to) as a frame; `lost` rows wanted before `from` were already overwritten.
  std::shared_ptr<Frame> copy_rows(std::uint64_t from, std::uint64_t to, std::uint64_t lost = 0);

  std::vector<SourceSlot> sources_;
  std::vector<std::size_t> offsets_;            // first ring column of each source
  std::vector<std::uint64_t> next_due_;         // tick index each source is next due on
  std::unique_ptr<FailedReads[]> failed_reads_;  // per source: when its reads began to fail
  std::unique_ptr<std::atomic<std::uint64_t>[]> source_ns_;  // per-source read time
  std::vector<ColumnSpec> columns_;
  std::int64_t interval_ns_;
  std::unique_ptr<Ring> ring_;
  // Buffers of dropped frames, reused by the next copy (consumer side; frames keep it alive).
  std::shared_ptr<FrameBufferPool> frame_pool_ = std::make_shared<FrameBufferPool>();
  std::vector<std::uint64_t> row_cells_;  // the row being built (sampler thread only)
  std::vector<std::uint8_t> row_valid_;

  std::thread thread_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> running_{false};
  std::atomic<std::uint64_t> ticks_taken_{0};
  std::atomic<std::uint64_t> ticks_missed_{0};
  std::atomic<std::int64_t> thread_cpu_done_ns_{0};  // CPU time of finished runs
  std::atomic<clockid_t> thread_cpu_clock_{0};
  std::atomic<bool> thread_cpu_clock_valid_{false};
  DurationHistogram lateness_;
  DurationHistogram cost_;
  ClockAnchor anchor_;
  std::atomic<std::int64_t> anchor_offset_ns_{0};
  std::uint64_t next_tick_ = 0;  // tick index to resume from after a stop (sampler thread)
  TickSchedule schedule_;        // this run's grid; written by start() before any thread reads it

  // Wake-ups. wake_word_ is the futex word: request_tick() and stop() bump it. The sampler
  // thread remembers the value it has served; a different value means "a row was asked for".
  // sleeping_ lets a requester skip the futex syscall when the thread is not asleep (see
  // request_tick() for why seq_cst).
  alignas(64) std::atomic<std::uint32_t> wake_word_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<std::uint64_t> tick_requests_{0};
  alignas(64) std::uint32_t served_word_ = 0;  // sampler thread (and start(), before it runs)
  std::atomic<std::uint64_t> ticks_requested_{0};
  const bool precise_;
  // Precise mode: how late each of the last 64 ticks' sleeps woke (sampler thread only).
  std::array<std::int64_t, 64> overshoot_ns_{};
  std::size_t overshoot_at_ = 0;
  std::atomic<std::int64_t> spin_window_ns_{0};

  // The overhead budget. Per source (index s): its every now, mirrored for stats() (written by
  // the sampler thread only; relaxed: a value that stands alone), its first interval, its
  // resolution, and its poll thread's source (null for a source read on the tick).
  double max_overhead_;
  std::unique_ptr<std::atomic<std::int64_t>[]> interval_now_ns_;
  std::vector<std::int64_t> first_interval_ns_;
  std::vector<std::int64_t> resolution_ns_;
  std::vector<PolledSource*> polled_;
  // Checkpoints (sampler thread only): time, the threads' CPU, and each source's cost, in a
  // ring of kCheckpoints rows; checkpoints_ counts those taken, since_ the first usable one
  // (the latest change's).
  std::vector<std::int64_t> cp_mono_, cp_cpu_, cp_cost_;
  std::uint64_t checkpoints_ = 0, since_ = 0;
  std::int64_t next_check_ns_ = 0;
  std::atomic<std::int64_t> overhead_ppm_{-1};
  std::atomic<std::uint64_t> budget_unmet_{0};
  // The rate log: a ring of kRateLogSize entries, each six words, under a sequence counter
  // (odd while the sampler thread writes) that stats() reads around its copy.
  std::unique_ptr<std::atomic<std::int64_t>[]> rate_log_;
  std::atomic<std::uint64_t> rate_seq_{0};
  std::atomic<std::uint64_t> rate_changes_{0};

  std::mutex consumer_mutex_;  // serialises ring copies; the producer never takes it
  std::mutex drain_mutex_;     // guards drain_cursor_
  std::uint64_t drain_cursor_ = 0;
  std::atomic<std::uint64_t> rows_lost_{0};
};

}  // namespace stroboscope
