// The sampler's overhead budget: a source that spins is slowed step by step while the sampler's
// CPU is over budget (read faster than its resolution first), raised again once it costs nothing,
// every change in the rate log that stats() copies while the sampler thread writes it (run under
// ThreadSanitizer in CI); under a budget its own waiting exceeds, only to a quarter of the
// budget above that; a budget of 0 changes nothing; a bad budget is refused.
#include <time.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "check.hpp"
#include "stroboscope/clock.hpp"
#include "stroboscope/sampler.hpp"

using namespace stroboscope;

namespace {

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Spends `spin_ns` of CPU per read (a knob the test turns), declares `resolution_ns`.
class SpinSource : public Source {
 public:
  SpinSource(std::string name, std::int64_t resolution_ns, const std::atomic<std::int64_t>* spin)
      : Source(name), resolution_ns_(resolution_ns), spin_(spin) {
    add_column(name + ".reads", "count", DType::kInt64, Kind::kCounter, "reads so far");
  }
  void read(RowWriter row, std::int64_t /*now_ns*/) noexcept override {
    const std::int64_t until = thread_cpu_ns() + spin_->load(std::memory_order_relaxed);
    while (thread_cpu_ns() < until) {
    }
    row.set_i64(0, ++n_);
    ok();
  }
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return resolution_ns_;
  }

 private:
  std::int64_t n_ = 0;
  std::int64_t resolution_ns_;
  const std::atomic<std::int64_t>* spin_;
};

template <class Pred>
bool eventually(Pred pred, std::int64_t limit_ns = 60'000'000'000) {
  const std::int64_t until = mono_ns() + limit_ns;
  while (!pred()) {
    if (mono_ns() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// The budget is a quarter of a core and the costly read half a core, so the test holds whatever
// a bare tick costs here (under ThreadSanitizer, on a loaded machine, a tick alone can cost more
// than 5 %): lowering needs the reads over the budget, raising needs the bare ticks under 20 %.
constexpr double kTestBudget = 0.25;
constexpr std::int64_t kTestBudgetPpm = 250'000;

void test_lowered_then_raised_and_logged() {
  std::atomic<std::int64_t> spin{500'000};  // 500 µs a read: half a core at 1 kHz
  std::atomic<std::int64_t> none{0};
  std::vector<SourceSlot> slots;
  // "dear" is read every tick, though its value changes every 4 ms: slowing it to 4 ms is free.
  slots.push_back(SourceSlot{std::make_unique<SpinSource>("dear", 4'000'000, &spin), 1});
  slots.push_back(SourceSlot{std::make_unique<SpinSource>("cheap", 0, &none), 1});
  Sampler s(std::move(slots), 1'000'000, 1024, {}, false, kTestBudget);
  s.start();
  // A reader copying the log while the sampler thread writes it (ThreadSanitizer watches).
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      (void)s.stats();
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // leave the cores to the test
    }
  });
  CHECK(eventually([&] { return s.rate_changes() > 0; }));
  const SamplerStats low = s.stats();
  CHECK(low.max_overhead == kTestBudget);
  CHECK(low.overhead_ppm > kTestBudgetPpm);  // the window that decided was over the budget
  CHECK(!low.rate_changes.empty());
  const RateChange& first = low.rate_changes.front();
  CHECK_EQ(first.source, 0u);  // the costly source, not the cheap one
  CHECK_EQ(first.old_interval_ns, 1'000'000);
  CHECK_EQ(first.new_interval_ns, 2'000'000);
  CHECK(first.reason == RateReason::kOverBudget);  // 2 ms: still faster than its 4 ms
  CHECK(first.share_ppm > kTestBudgetPpm);
  for (const RateChange& c : low.rate_changes) {
    CHECK(c.reason == (c.new_interval_ns > 4'000'000 ? RateReason::kBeyondResolution
                                                     : RateReason::kOverBudget));
  }
  CHECK_EQ(low.sources[1].interval_ns, 1'000'000);  // the cheap one is left as it is
  spin.store(0);  // the cost goes: after kRaiseAfterNs of room it is raised, step by step
  CHECK(eventually([&] { return s.stats().sources[0].interval_ns == 1'000'000; }));
  done.store(true);
  reader.join();
  s.stop();
  const SamplerStats st = s.stats();
  CHECK_EQ(st.rate_changes_total, static_cast<std::uint64_t>(st.rate_changes.size()));
  std::int64_t interval = 1'000'000;
  bool raised = false;
  for (const RateChange& c : st.rate_changes) {
    CHECK_EQ(c.source, 0u);  // the cheap source is never slowed
    CHECK_EQ(c.old_interval_ns, interval);  // one chain of steps, each logged
    interval = c.new_interval_ns;
    if (c.reason == RateReason::kRoom) {
      raised = true;
      CHECK_EQ(c.new_interval_ns * 2, c.old_interval_ns);
      CHECK(c.share_ppm < kTestBudgetPpm * 8 / 10);  // the estimate after raising fits kRaiseTarget
    }
  }
  CHECK(raised);
  CHECK_EQ(interval, 1'000'000);
  CHECK_EQ(st.sources[0].every, 1u);
  CHECK(std::string(rate_reason_name(RateReason::kRoom)) == "room");
}

// A budget the sampler thread's own waiting costs more than: precise mode spins before each
// deadline (a few % of a core at least, up to half), against a budget of 1 % of a core. Slowing
// the source cannot meet it: it is slowed until it costs a quarter of the budget above that
// floor (20 µs a read: 2 % at 1 ms, 0.25 % at 8 ms), not to its 1 s cap, and the checks after
// say the budget is unmet.
void test_a_budget_below_the_floor_slows_a_source_to_its_room() {
  std::atomic<std::int64_t> spin{20'000};
  std::vector<SourceSlot> slots;
  slots.push_back(SourceSlot{std::make_unique<SpinSource>("dear", 1'000'000, &spin), 1});
  Sampler s(std::move(slots), 1'000'000, 1024, {}, true, 0.01);
  s.start();
  CHECK(eventually([&] { return s.rate_changes() > 0 && s.stats().budget_unmet >= 4; }));
  s.stop();
  const SamplerStats st = s.stats();
  CHECK(st.rate_changes_total > 0);
  for (const RateChange& c : st.rate_changes) CHECK(c.new_interval_ns <= 256'000'000);
  CHECK(st.sources[0].interval_ns >= 8'000'000);
  CHECK(st.sources[0].interval_ns <= 256'000'000);
}

// The same source read at its resolution (every step loses rows) under a budget the bare ticks
// fit in: it is slowed past its resolution until the budget is met.
void test_a_budget_the_wake_fits_slows_past_the_resolution() {
  std::atomic<std::int64_t> spin{500'000};  // half a core at 1 kHz
  std::vector<SourceSlot> slots;
  slots.push_back(SourceSlot{std::make_unique<SpinSource>("dear", 1'000'000, &spin), 1});
  Sampler s(std::move(slots), 1'000'000, 1024, {}, false, kTestBudget);
  s.start();
  CHECK(eventually([&] { return s.rate_changes() > 0; }));
  s.stop();
  const SamplerStats st = s.stats();
  CHECK(!st.rate_changes.empty());
  CHECK(st.rate_changes.front().reason == RateReason::kBeyondResolution);
  CHECK(st.sources[0].interval_ns >= 2'000'000);
}

void test_no_budget_changes_nothing() {
  std::atomic<std::int64_t> spin{150'000};
  std::vector<SourceSlot> slots;
  slots.push_back(SourceSlot{std::make_unique<SpinSource>("dear", 0, &spin), 1});
  Sampler s(std::move(slots), 1'000'000, 1024);
  s.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past kLowerAfterNs
  s.stop();
  const SamplerStats st = s.stats();
  CHECK(st.ticks_taken > 0);
  CHECK_EQ(st.rate_changes_total, 0u);
  CHECK_EQ(st.overhead_ppm, -1);
  CHECK_EQ(st.sources[0].interval_ns, 1'000'000);
}

void test_bad_budget_refused() {
  for (double bad : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    std::vector<SourceSlot> slots;
    bool threw = false;
    try {
      Sampler s(std::move(slots), 1'000'000, 1024, {}, false, bad);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    CHECK(threw);
  }
}

}  // namespace

int main() {
  test_lowered_then_raised_and_logged();
  test_a_budget_below_the_floor_slows_a_source_to_its_room();
  test_a_budget_the_wake_fits_slows_past_the_resolution();
  test_no_budget_changes_nothing();
  test_bad_budget_refused();
  TEST_MAIN_END();
}
