// The "gpu" source's call budget (call_budget.hpp, CallBudget): a call that costs c is not
// made again before c * 20 after it ran, a dear field of the batch is read in a call of its own,
// and cheap calls are made at every read. On the fake NVML library, whose "cost" directive makes
// a call spend CPU time like a driver that busy-waits (an H200's energy field took ~2.7 ms).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "nvml_fixture.hpp"

namespace {

using namespace stroboscope;

constexpr std::int64_t kMs = 1'000'000;

// The reads (index = ms of the poll's clock) at which `column` had a value.
std::vector<int> reads_with(NvmlSource& src, const std::string& column, int reads,
                            std::vector<int>* also = nullptr, const std::string& other = "") {
  Row row(src);
  std::vector<int> seen;
  for (int i = 0; i < reads; ++i) {
    row.read(i * kMs);
    if (row.has(column)) seen.push_back(i);
    if (also != nullptr && row.has(other)) also->push_back(i);
  }
  return seen;
}

// Energy (field 83) costs 3 ms: the first four batches carry it (a call is timed over four runs
// before it is held back), then four reads time each field alone, then energy alone at most every
// 60 ms of the poll's clock; instant power stays in the batch and comes back at every read.
void test_a_dear_field_is_read_alone_on_its_budget() {
  use_script("cost 0 field:83 3000\nset 0 energy 1000 2000 3000 4000 5000 6000\n");
  NvmlSource src(NvmlSourceOptions{});
  std::vector<int> power;
  const std::vector<int> energy = reads_with(src, "gpu.0.energy_mj", 200, &power, "gpu.0.power_w");
  CHECK_EQ(power.size(), 200u);
  CHECK(energy.size() >= 8 && energy.size() <= 11);
  for (int i = 0; i < 8 && i < static_cast<int>(energy.size()); ++i) CHECK_EQ(energy[i], i);
  for (std::size_t k = 8; k < energy.size(); ++k) CHECK(energy[k] - energy[k - 1] >= 60);
  const auto st = src.device_status();
  CHECK(st.size() == 1 && st[0].held_back.size() == 1);
  if (st.size() == 1 && st[0].held_back.size() == 1) {
    const NvmlHeldBack& h = st[0].held_back[0];
    CHECK(h.call == "nvmlDeviceGetFieldValues(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)");
    CHECK(h.cost_ns >= 3 * kMs && h.every_ns == h.cost_ns * 20);
  }
}

// A dear query (per-process utilisation, ~2.1 ms on an H200) is held back the same way; the
// device's utilisation, a cheap query, comes back at every read.
void test_a_dear_query_is_held_back() {
  use_script("cost 0 nvmlDeviceGetProcessUtilization 2000\nprocess_util 0 self 40/10/0/0\n");
  NvmlSource src(NvmlSourceOptions{});
  std::vector<int> util;
  const std::vector<int> mine =
      reads_with(src, "gpu.0.proc_sm_util_pct", 200, &util, "gpu.0.util_pct");
  CHECK_EQ(util.size(), 200u);
  CHECK(mine.size() >= 4 && mine.size() <= 4 + 200 / 40);
  for (std::size_t k = 4; k < mine.size(); ++k) CHECK(mine[k] - mine[k - 1] >= 40);
  const auto st = src.device_status();
  CHECK(st.size() == 1 && st[0].held_back.size() == 1 &&
        st[0].held_back[0].call == "nvmlDeviceGetProcessUtilization");
}

// The two process lists are read together or not at all: a read that holds back the dear
// compute list gives no process columns, not a count made from the graphics list alone.
void test_process_lists_are_read_together() {
  use_script(
      "cost 0 nvmlDeviceGetComputeRunningProcesses 2000\n"
      "process 0 4242 1024\ngraphics_process 0 4343 2048\n");
  NvmlSource src(NvmlSourceOptions{});
  Row row(src);
  int with = 0;
  for (int i = 0; i < 100; ++i) {
    row.read(i * kMs);
    if (!row.has("gpu.0.other_procs")) continue;
    ++with;
    CHECK_EQ(row.i64("gpu.0.other_procs"), 2);  // both lists, every time
  }
  CHECK(with >= 4 && with <= 4 + 100 / 40);
}

// Without costs every call is made at every read and nothing is held back.
void test_cheap_calls_every_read() {
  use_script("set 0 energy 10 20 30\nprocess_util 0 self 40/10/0/0\n");
  NvmlSource src(NvmlSourceOptions{});
  std::vector<int> mine;
  const std::vector<int> energy =
      reads_with(src, "gpu.0.energy_mj", 100, &mine, "gpu.0.proc_sm_util_pct");
  CHECK_EQ(energy.size(), 100u);
  CHECK_EQ(mine.size(), 100u);
  const auto st = src.device_status();
  CHECK(st.size() == 1 && st[0].held_back.empty());
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/stroboscope-nvml-budget-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  g_dir = tmpl;
  test_a_dear_field_is_read_alone_on_its_budget();
  test_a_dear_query_is_held_back();
  test_process_lists_are_read_together();
  test_cheap_calls_every_read();
  std::string cleanup = "rm -rf '" + g_dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
  TEST_MAIN_END();
}
