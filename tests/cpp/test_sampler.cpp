// Sampler: deadlines, per-source intervals, skipped ticks, snapshots/drains while running, and
// Arrow export of the resulting frames. Runs under ThreadSanitizer in CI.
#include <time.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "check.hpp"
#include "stroboscope/arrow_export.hpp"
#include "stroboscope/clock.hpp"
#include "stroboscope/sampler.hpp"

using namespace stroboscope;

namespace {

// Writes a counter (reads so far) and the tick time it was given; optionally sleeps, to make
// ticks late; optionally fails every n-th read.
class FakeSource : public Source {
 public:
  FakeSource(std::string name, std::int64_t sleep_ns = 0, int fail_every = 0)
      : Source(name), sleep_ns_(sleep_ns), fail_every_(fail_every) {
    add_column(name + ".count", "count", DType::kInt64, Kind::kCounter, "reads so far");
    add_column(name + ".now_ns", "ns", DType::kInt64, Kind::kGauge, "tick time seen");
    add_column(name + ".half", "1", DType::kFloat64, Kind::kGauge, "count / 2");
  }
  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    ++n_;
    if (sleep_ns_ > 0) {
      timespec ts{0, static_cast<long>(sleep_ns_)};
      nanosleep(&ts, nullptr);
    }
    if (fail_every_ > 0 && n_ % fail_every_ == 0) {
      fail("scripted failure", 5);
      return;
    }
    row.set_i64(0, n_);
    row.set_i64(1, now_ns);
    row.set_f64(2, static_cast<double>(n_) / 2.0);
    ok();
  }

 private:
  std::int64_t n_ = 0;
  std::int64_t sleep_ns_;
  int fail_every_;
};

std::int64_t cell_i64(const FrameColumn& c, std::int64_t i) {
  std::int64_t v;
  const std::uint64_t raw = c.cell(i);
  std::memcpy(&v, &raw, sizeof v);
  return v;
}
bool is_valid(const FrameColumn& c, std::int64_t i) { return c.valid(i); }

std::unique_ptr<Sampler> make(std::int64_t interval_ns, std::uint64_t capacity,
                              std::int64_t slow_sleep_ns = 0, std::uint32_t every_b = 4) {
  std::vector<SourceSlot> slots;
  slots.push_back(SourceSlot{std::make_unique<FakeSource>("a", slow_sleep_ns, 7), 1});
  slots.push_back(SourceSlot{std::make_unique<FakeSource>("b"), every_b});
  return std::make_unique<Sampler>(std::move(slots), interval_ns, capacity);
}

void test_inline_ticks_and_frame_content() {
  auto s = make(1'000'000, 64);
  s->run_ticks_inline(7);
  auto st = s->stats();
  CHECK_EQ(st.sources[0].failures, 1u);  // a's 7th read failed...
  CHECK(st.sources[0].reason == "scripted failure");
  CHECK_EQ(st.sources[0].error_number, 5);
  s->run_ticks_inline(3);
  CHECK(s->stats().sources[0].reason.empty());  // ...and the reason clears on the next success
  auto f = s->snapshot();
  CHECK_EQ(f->length(), 10);
  // time, mono_ns, a.count, a.now_ns, a.half, b.count, b.now_ns, b.half
  CHECK_EQ(f->columns().size(), 8u);
  const auto& cols = f->columns();
  for (std::int64_t i = 0; i < 10; ++i) {
    // a fails on its 7th read: that row's a.* cells are null.
    CHECK_EQ(is_valid(cols[2], i), i != 6);
    if (i != 6) CHECK_EQ(cell_i64(cols[2], i), i + 1);
    CHECK_EQ(cell_i64(cols[3], i) == cell_i64(cols[1], i), i != 6);  // source saw the tick time
    // b is due every 4th tick: ticks 0, 4, 8.
    CHECK_EQ(is_valid(cols[5], i), i % 4 == 0);
    if (i % 4 == 0) CHECK_EQ(cell_i64(cols[5], i), i / 4 + 1);
    if (i > 0) CHECK(cell_i64(cols[1], i) >= cell_i64(cols[1], i - 1));
  }
  CHECK_EQ(cols[2].null_count, 1);
  CHECK_EQ(cols[5].null_count, 7);
}

void test_thread_deadlines_and_drain() {
  constexpr std::int64_t kIntervalNs = 1'000'000;  // 1 kHz
  auto s = make(kIntervalNs, 1024);
  const std::int64_t started_ns = stroboscope::mono_ns();
  s->start();
  s->start();  // idempotent
  std::uint64_t drained = 0;
  std::int64_t first_mono = 0, last_mono = 0;
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto f = s->drain();
    drained += static_cast<std::uint64_t>(f->length());
    const auto& mono = f->columns()[1];
    for (std::int64_t r = 0; r < f->length(); ++r) {
      CHECK(cell_i64(mono, r) > last_mono);  // monotone across drains, no duplicates
      if (first_mono == 0) first_mono = cell_i64(mono, r);
      last_mono = cell_i64(mono, r);
    }
  }
  s->stop();
  s->stop();  // idempotent
  const std::int64_t stopped_ns = stroboscope::mono_ns();
  auto f = s->drain();
  drained += static_cast<std::uint64_t>(f->length());
  if (f->length() > 0) {
    if (first_mono == 0) first_mono = cell_i64(f->columns()[1], 0);
    last_mono = cell_i64(f->columns()[1], f->length() - 1);
  }
  auto st = s->stats();
  CHECK_EQ(drained, st.rows_written);
  CHECK_EQ(st.ticks_taken, st.rows_written);
  CHECK(st.ticks_scheduled == st.ticks_taken + st.ticks_missed);
  // Bounds from what the sampler itself reports, not from how busy the machine was: it takes at
  // least one tick; every deadline between its first and last row's stamps passed while it ran
  // (ticks_scheduled counts them), and no more deadlines than fit between start and stop.
  CHECK(st.ticks_taken >= 1);
  CHECK(first_mono >= started_ns && last_mono <= stopped_ns);
  CHECK(st.ticks_scheduled + 1 >=
        static_cast<std::uint64_t>((last_mono - first_mono) / kIntervalNs));
  CHECK(st.ticks_scheduled <= static_cast<std::uint64_t>((stopped_ns - started_ns) / kIntervalNs) + 1);
  CHECK(st.thread_cpu_ns > 0);
  CHECK(!st.running);
  CHECK(st.lateness_max_ns >= st.lateness_p99_ns && st.lateness_p99_ns >= st.lateness_p50_ns);
  // Restart continues appending.
  s->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  s->stop();
  CHECK(s->stats().rows_written > st.rows_written);
}

void test_slow_source_skips_ticks() {
  // A source that takes 2.5 ms at 1 kHz: after each tick the next two deadlines have passed and
  // are skipped (counted), never run back to back.
  auto s = make(1'000'000, 1024, 2'500'000);
  s->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  s->stop();
  auto st = s->stats();
  CHECK(st.ticks_missed >= st.ticks_taken);  // ~2 missed per taken
  auto f = s->snapshot();
  const auto& mono = f->columns()[1];
  for (std::int64_t r = 1; r < f->length(); ++r) {
    CHECK(cell_i64(mono, r) - cell_i64(mono, r - 1) >= 2'500'000);  // no bunching
  }
  CHECK(st.cost_mean_ns >= 2'500'000.0);
}

void test_overwrite_and_lost_rows() {
  auto s = make(1'000'000, 16);
  s->run_ticks_inline(10);
  CHECK_EQ(s->drain()->length(), 10);
  s->run_ticks_inline(40);  // rows 10..49; ring keeps 34..49
  auto f = s->drain();
  CHECK_EQ(f->length(), 16);
  CHECK_EQ(f->rows_lost(), 24u);
  CHECK_EQ(f->first_row(), 34u);
  auto st = s->stats();
  CHECK_EQ(st.rows_overwritten, 34u);
  CHECK_EQ(st.rows_lost, 24u);
}

void test_arrow_export_release() {
  auto s = make(1'000'000, 64);
  s->run_ticks_inline(5);
  std::shared_ptr<const Frame> frame = s->snapshot();
  ArrowSchema schema;
  ArrowArray array;
  export_schema(frame, &schema);
  export_array(frame, &array);
  CHECK(std::strcmp(schema.format, "+s") == 0);
  CHECK_EQ(schema.n_children, 8);
  CHECK(std::strcmp(schema.children[0]->format, "tsn:UTC") == 0);
  CHECK(std::strcmp(schema.children[1]->name, "mono_ns") == 0);
  CHECK(std::strcmp(schema.children[4]->format, "g") == 0);
  CHECK_EQ(array.length, 5);
  CHECK_EQ(array.children[5]->null_count, 3);  // b due on ticks 0 and 4 only
  CHECK(array.children[1]->buffers[0] == nullptr);  // no nulls → no bitmap
  // A consumer moves one child out, then releases the parent and later the child.
  ArrowArray moved = *array.children[2];
  array.children[2]->release = nullptr;
  CHECK_EQ(frame.use_count(), 10);  // ours + 8 children (one moved out) + the parent
  schema.release(&schema);
  array.release(&array);
  CHECK_EQ(frame.use_count(), 2);  // the moved child still holds the frame
  moved.release(&moved);
  CHECK_EQ(frame.use_count(), 1);

  ArrowArrayStream stream;
  export_stream(frame, &stream);
  ArrowArray a1, a2;
  CHECK_EQ(stream.get_next(&stream, &a1), 0);
  CHECK(a1.release != nullptr);
  CHECK_EQ(stream.get_next(&stream, &a2), 0);
  CHECK(a2.release == nullptr);  // end of stream
  a1.release(&a1);
  stream.release(&stream);
  CHECK_EQ(frame.use_count(), 1);
}

// Holds its first read until released, so a test knows a tick is running; writes its read count.
class GateSource : public Source {
 public:
  GateSource() : Source("gate") {
    add_column("gate.count", "count", DType::kInt64, Kind::kCounter, "reads so far");
  }
  void read(RowWriter row, std::int64_t) noexcept override {
    if (n_.load(std::memory_order_relaxed) == 0) {
      entered_.store(true, std::memory_order_release);
      while (!open_.load(std::memory_order_acquire)) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    const std::int64_t n = n_.load(std::memory_order_relaxed) + 1;
    n_.store(n, std::memory_order_relaxed);
    row.set_i64(0, n);
    ok();
  }
  void wait_entered() const {
    while (!entered_.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  void release() { open_.store(true, std::memory_order_release); }

 private:
  std::atomic<std::int64_t> n_{0};
  std::atomic<bool> entered_{false}, open_{false};
};

// Waits (up to 20 s, for a loaded machine) until `pred` holds.
template <typename Pred>
bool eventually(Pred pred) {
  const std::int64_t until = stroboscope::mono_ns() + 20'000'000'000;
  while (!pred()) {
    if (stroboscope::mono_ns() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// request_tick(): a no-op while stopped; requests made while a tick runs share one edge row after
// it; each later request gets its own; the grid of deadlines (1 h here) is not moved by them.
void test_request_tick_edge_rows() {
  std::vector<SourceSlot> slots;
  auto gate_owned = std::make_unique<GateSource>();
  GateSource* gate = gate_owned.get();
  slots.push_back(SourceSlot{std::move(gate_owned), 1});
  slots.push_back(SourceSlot{std::make_unique<FakeSource>("b"), 2});
  Sampler s(std::move(slots), kMaxIntervalNs, 64);
  s.request_tick();  // stopped: nothing owed
  CHECK_EQ(s.stats().tick_requests, 0u);
  s.start();
  gate->wait_entered();  // tick 0 is running
  const std::int64_t asked_ns = stroboscope::mono_ns();
  for (int i = 0; i < 5; ++i) s.request_tick();
  gate->release();
  CHECK(eventually([&] { return s.stats().ticks_requested >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // no second row for the same five
  auto st = s.stats();
  CHECK_EQ(st.ticks_taken, 1u);
  CHECK_EQ(st.ticks_requested, 1u);
  CHECK_EQ(st.tick_requests, 5u);
  CHECK_EQ(st.rows_written, 2u);
  // Three more, one at a time: one row each.
  for (std::uint64_t i = 2; i <= 4; ++i) {
    s.request_tick();
    CHECK(eventually([&] { return s.stats().ticks_requested >= i; }));
  }
  s.stop();
  st = s.stats();
  CHECK_EQ(st.ticks_taken, 1u);  // the next deadline is an hour away
  CHECK_EQ(st.ticks_missed, 0u);
  CHECK_EQ(st.ticks_requested, 4u);
  CHECK_EQ(st.tick_requests, 8u);
  CHECK_EQ(st.rows_written, st.ticks_taken + st.ticks_requested);
  auto f = s.snapshot();
  const auto& cols = f->columns();  // time, mono_ns, gate.count, b.count, b.now_ns, b.half
  CHECK_EQ(f->length(), 5);
  CHECK(cell_i64(cols[1], 1) >= asked_ns);  // the edge row comes after the requests
  for (std::int64_t r = 0; r < f->length(); ++r) {
    CHECK_EQ(cell_i64(cols[2], r), r + 1);  // every-tick source: on every edge row
    if (r > 0) CHECK(cell_i64(cols[1], r) > cell_i64(cols[1], r - 1));
  }
  CHECK(is_valid(cols[3], 0));  // b (every 2 ticks): read on tick 0 ...
  for (std::int64_t r = 1; r < f->length(); ++r) CHECK(!is_valid(cols[3], r));  // not due on 1
  s.request_tick();  // stopped again: a no-op
  CHECK_EQ(s.stats().tick_requests, 8u);
}

// A source read every 2 ticks is read on an edge row when it is due on the next regular tick, and
// that tick then leaves it out (its number of reads is unchanged).
void test_edge_row_reads_a_slower_source_when_due() {
  constexpr std::int64_t kIntervalNs = 100'000'000;  // 100 ms
  std::vector<SourceSlot> slots;
  auto gate_owned = std::make_unique<GateSource>();
  GateSource* gate = gate_owned.get();
  slots.push_back(SourceSlot{std::move(gate_owned), 1});
  slots.push_back(SourceSlot{std::make_unique<FakeSource>("b"), 2});
  Sampler s(std::move(slots), kIntervalNs, 64);
  s.start();
  gate->wait_entered();
  // Hold tick 0 past the deadline of tick 1, which is then skipped: b is due on the next tick.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  s.request_tick();
  gate->release();
  CHECK(eventually([&] { return s.stats().rows_written >= 3; }));
  s.stop();
  auto f = s.snapshot();
  const auto& cols = f->columns();
  CHECK(f->length() >= 3);
  CHECK(s.stats().ticks_missed >= 1);
  // Row 0: tick 0 (b's 1st read). Row 1: the edge row (b's 2nd). Row 2: the next regular tick,
  // on which b was due: not read again.
  CHECK(is_valid(cols[3], 0) && cell_i64(cols[3], 0) == 1);
  CHECK(is_valid(cols[3], 1) && cell_i64(cols[3], 1) == 2);
  CHECK(!is_valid(cols[3], 2));
  CHECK(is_valid(cols[2], 2));
}

// stop() wakes a sampler sleeping towards a deadline an hour away at once; precise mode keeps
// ticking, spinning within a window it learned, bounded by the interval.
void test_stop_wakes_and_precise_mode() {
  std::vector<SourceSlot> slots;
  slots.push_back(SourceSlot{std::make_unique<FakeSource>("a"), 1});
  Sampler idle(std::move(slots), kMaxIntervalNs, 16);
  idle.start();
  CHECK(eventually([&] { return idle.stats().ticks_taken == 1; }));
  const std::int64_t t0 = stroboscope::mono_ns();
  idle.stop();
  CHECK(stroboscope::mono_ns() - t0 < 10'000'000'000);  // not an hour (nor the old 20 ms chunks)
  CHECK(!idle.stats().precise && idle.stats().spin_window_ns == 0);

  std::vector<SourceSlot> slots2;
  slots2.push_back(SourceSlot{std::make_unique<FakeSource>("a"), 1});
  Sampler p(std::move(slots2), 1'000'000, 1024, {}, true);
  p.start();
  CHECK(eventually([&] { return p.stats().ticks_taken >= 20; }));
  // A request made just before a regular tick is served by that tick (no edge row): on a loaded
  // machine that can happen to any one request, so ask until one gets an edge row of its own.
  CHECK(eventually([&] {
    p.request_tick();
    return p.stats().ticks_requested >= 1;
  }));
  p.stop();
  auto st = p.stats();
  CHECK(st.precise);
  CHECK(st.spin_window_ns >= 20'000 && st.spin_window_ns <= 500'000);  // at most half the interval
  CHECK_EQ(st.rows_written, st.ticks_taken + st.ticks_requested);
}

// A frame says when each source's reads began to fail (the row's mono_ns of the first failed
// read after a good one): what Frame.to_arrow(fill="forward") needs to tell a null after a
// failed read from one on a tick the source was not due (a late tick before a delayed read).
void test_failed_reads_in_frames() {
  auto s = make(1'000'000, 64);
  s->run_ticks_inline(21);  // a fails on reads 7, 14 and 21 (rows 6, 13, 20); b never fails
  auto f = s->snapshot();
  const auto& logs = f->failed_reads();
  CHECK_EQ(logs.size(), 2u);
  CHECK_EQ(logs[0].first_column, 2u);  // time, mono_ns, then a.*
  CHECK_EQ(logs[0].columns, 3u);
  CHECK_EQ(logs[1].first_column, 5u);
  CHECK(logs[0].failed.complete);
  CHECK_EQ(logs[0].failed.starts.size(), 3u);
  const std::int64_t rows[] = {6, 13, 20};
  for (std::size_t i = 0; i < 3 && i < logs[0].failed.starts.size(); ++i) {
    CHECK_EQ(logs[0].failed.starts[i], cell_i64(f->columns()[1], rows[i]));
    CHECK(!is_valid(f->columns()[2], rows[i]));
  }
  CHECK(logs[1].failed.starts.empty());
  CHECK(logs[1].failed.complete);
}

// A run of failures is one entry; past kSize runs the oldest go and the log says so.
void test_failed_reads_log_keeps_the_latest_runs() {
  FailedReads log;
  log.record(false, 1);
  log.record(true, 2);
  log.record(true, 3);  // the same run
  log.record(false, 4);
  log.record(true, 5);
  FailedReadStarts got = log.copy();
  CHECK(got.complete);
  CHECK(got.starts == (std::vector<std::int64_t>{2, 5}));
  const auto runs = static_cast<std::int64_t>(FailedReads::kSize) + 10;
  for (std::int64_t t = 10; t < 10 + 2 * runs; t += 2) {  // ok at t, failed at t + 1
    log.record(false, t);
    log.record(true, t + 1);
  }
  got = log.copy();
  CHECK(!got.complete);
  CHECK_EQ(got.starts.size(), FailedReads::kSize);
  CHECK_EQ(got.starts.back(), 10 + 2 * runs - 1);
  CHECK_EQ(got.starts.front(), 10 + 2 * (runs - static_cast<std::int64_t>(FailedReads::kSize)) + 1);
}

}  // namespace

int main() {
  test_inline_ticks_and_frame_content();
  test_failed_reads_in_frames();
  test_failed_reads_log_keeps_the_latest_runs();
  test_thread_deadlines_and_drain();
  test_slow_source_skips_ticks();
  test_overwrite_and_lost_rows();
  test_arrow_export_release();
  test_request_tick_edge_rows();
  test_edge_row_reads_a_slower_source_when_due();
  test_stop_wakes_and_precise_mode();
  TEST_MAIN_END();
}
