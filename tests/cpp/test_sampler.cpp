// Sampler: deadlines, per-source intervals, skipped ticks, snapshots/drains while running, and
// Arrow export of the resulting frames. Runs under ThreadSanitizer in CI.
#include <time.h>

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

}  // namespace

int main() {
  test_inline_ticks_and_frame_content();
  test_thread_deadlines_and_drain();
  test_slow_source_skips_ticks();
  test_overwrite_and_lost_rows();
  test_arrow_export_release();
  TEST_MAIN_END();
}
