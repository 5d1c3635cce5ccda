// PolledSource: a slow source read on its own thread never makes the sampler's ticks late, each
// reading is copied once with the time it was taken, and stop/start work. TSan in CI.
#include <time.h>

#include <cstring>
#include <memory>
#include <thread>

#include "check.hpp"
#include "stroboscope/polled_source.hpp"
#include "stroboscope/sampler.hpp"

using namespace stroboscope;

namespace {

// Takes 3 ms per read (like several NVML calls) and writes its read count in both cells, so a
// torn copy would show two different numbers in one row.
class SlowSource : public Source {
 public:
  SlowSource() : Source("slow") {
    add_column("slow.a", "count", DType::kInt64, Kind::kCounter, "reads");
    add_column("slow.b", "count", DType::kInt64, Kind::kCounter, "reads again");
  }
  bool slow() const noexcept override { return true; }
  void read(RowWriter row, std::int64_t) noexcept override {
    timespec ts{0, 3'000'000};
    nanosleep(&ts, nullptr);
    ++n_;
    row.set_i64(0, n_);
    row.set_i64(1, n_);
    ok();
  }

 private:
  std::int64_t n_ = 0;
};

std::int64_t cell(const FrameColumn& c, std::int64_t i) {
  std::int64_t v;
  const std::uint64_t raw = c.cell(i);
  std::memcpy(&v, &raw, sizeof v);
  return v;
}
bool valid(const FrameColumn& c, std::int64_t i) { return c.valid(i); }

void test_slow_source_does_not_delay_ticks() {
  std::vector<SourceSlot> slots;
  // Polled every 10 ms; the sampler ticks at 1 kHz.
  slots.push_back(SourceSlot{
      std::make_unique<PolledSource>(std::make_unique<SlowSource>(), 10'000'000), 1});
  Sampler s(std::move(slots), 1'000'000, 4096);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  s.stop();
  auto st = s.stats();
  // The 3 ms reads happen elsewhere: the tick itself stays far below the 1 ms interval.
  CHECK(st.cost_p99_ns < 500'000);
  CHECK(st.ticks_taken > 150);
  auto f = s.snapshot();
  const auto& cols = f->columns();  // time, mono_ns, slow.a, slow.b, slow.read_mono_ns
  CHECK_EQ(cols.size(), 5u);
  CHECK(cols[4].spec.name == "slow.read_mono_ns");
  std::int64_t readings = 0, last = 0;
  for (std::int64_t i = 0; i < f->length(); ++i) {
    if (!valid(cols[2], i)) {
      CHECK(!valid(cols[3], i) && !valid(cols[4], i));
      continue;
    }
    ++readings;
    CHECK_EQ(cell(cols[2], i), cell(cols[3], i));  // never torn
    CHECK(cell(cols[2], i) > last);                  // each reading copied once, in order
    last = cell(cols[2], i);
    CHECK(cell(cols[4], i) <= cell(cols[1], i));     // taken before the row that carries it
    CHECK(cell(cols[1], i) - cell(cols[4], i) < 50'000'000);
  }
  // ~300 ms / 10 ms = ~30 readings; generous bounds.
  CHECK(readings > 10 && readings < 40);
  // Restart works (the poll thread starts again).
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  s.stop();
  auto f2 = s.snapshot();
  std::int64_t after = 0;
  for (std::int64_t i = f->length(); i < f2->length(); ++i) after += valid(f2->columns()[2], i);
  CHECK(after > 0);
}

}  // namespace

int main() {
  test_slow_source_does_not_delay_ticks();
  TEST_MAIN_END();
}
