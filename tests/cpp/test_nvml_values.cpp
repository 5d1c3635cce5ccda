// The "gpu" source's values against the scripted fake libnvidia-ml (tests/fake_nvml/fake_nvml.c):
// every column on two GPUs, an old driver's older symbols, unsupported metrics, a GPU lost
// mid-run, counters that wrap, and device_status() read while another thread reads the source.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "nvml_fixture.hpp"
#include "stroboscope/clock.hpp"

namespace {

using namespace stroboscope;

void test_old_driver() {
  use_script(
      "devices 1\n"
      "set 0 power 150000 151000\n"
      "set 0 power_limit 300000\n"
      "set 0 energy 5000 5600\n"
      "set 0 clock_reasons 0x8 0x0\n"
      "set 0 ecc_corrected 7\n"
      "set 0 mem_total 4000\n"
      "set 0 mem_used 1000 3000\n"
      "set 0 mem_free 3000 1000\n"
      "process 0 self 65536\n"
      "process 0 4242 1024\n",
      FAKE_NVML_OLD_PATH);
  {
    const NvmlStatus s = nvml_status();
    CHECK(s.loaded);
    const NvmlSymbol* init = symbol(s.symbols, "nvmlInit_v2");
    CHECK(init != nullptr && init->resolved == "nvmlInit");
    const NvmlSymbol* count = symbol(s.symbols, "nvmlDeviceGetCount_v2");
    CHECK(count != nullptr && count->resolved == "nvmlDeviceGetCount");
    const NvmlSymbol* procs = symbol(s.symbols, "nvmlDeviceGetComputeRunningProcesses_v3");
    CHECK(procs != nullptr && procs->resolved == "nvmlDeviceGetComputeRunningProcesses");
    const NvmlSymbol* reasons = symbol(s.symbols, "nvmlDeviceGetCurrentClocksEventReasons");
    CHECK(reasons != nullptr &&
          reasons->resolved == "nvmlDeviceGetCurrentClocksThrottleReasons");
    const NvmlSymbol* fields = symbol(s.symbols, "nvmlDeviceGetFieldValues");
    CHECK(fields != nullptr && fields->resolved.empty());
    CHECK(contains(format_nvml_status(s), "nvmlDeviceGetFieldValues"));
    CHECK_EQ(s.devices.size(), 1u);
    if (!s.devices.empty()) {
      // Only the PCIe and NVLink counters (and their rates) need the field API; everything
      // else has an older query. And no GPM functions at all.
      CHECK_EQ(s.devices[0].unavailable.size(), 9u);
      const NvmlUnavailable* gpm = unavailable(s.devices[0], "gpm");
      CHECK(gpm != nullptr && contains(gpm->reason, "does not export the nvmlGpm"));
      const NvmlUnavailable* tx = unavailable(s.devices[0], "pcie_tx_bytes");
      CHECK(tx != nullptr && contains(tx->reason, "not exported"));
      CHECK(unavailable(s.devices[0], "pcie_rx_bytes") != nullptr);
    }
  }
  NvmlSource src({}, 0);
  Row row(src);
  row.read();
  CHECK(row.f64("gpu.0.power_w") == 150.0);
  CHECK(row.f64("gpu.0.power_limit_w") == 300.0);
  CHECK(row.f64("gpu.0.power_pct") == 50.0);
  CHECK_EQ(row.i64("gpu.0.energy_mj"), 0);
  CHECK_EQ(row.i64("gpu.0.clock_event_reasons"), 8);
  CHECK_EQ(row.i64("gpu.0.ecc_corrected"), 7);
  CHECK_EQ(row.i64("gpu.0.mem_used_bytes"), 1000);
  CHECK(row.f64("gpu.0.mem_allocated_pct") == 25.0);
  CHECK_EQ(row.i64("gpu.0.proc_mem_bytes"), 65536);  // 16-byte process entries
  CHECK_EQ(row.i64("gpu.0.other_procs"), 1);
  // No field API: the byte counters have no column at all (not a column of nulls).
  for (const ColumnSpec& c : src.columns()) {
    CHECK(c.name.find("pcie") == std::string::npos && c.name.find("nvlink") == std::string::npos);
  }
  row.read();
  CHECK(row.f64("gpu.0.power_w") == 151.0);
  CHECK_EQ(row.i64("gpu.0.energy_mj"), 600);
  CHECK_EQ(row.i64("gpu.0.clock_event_reasons"), 0);
  CHECK_EQ(row.i64("gpu.0.mem_free_bytes"), 1000);
  CHECK(row.f64("gpu.0.mem_allocated_pct") == 75.0);
  CHECK(src.reason() == nullptr);
}

void test_values_two_devices() {
  use_script(
      "devices 2\n"
      "set 0 util 10 20 30\n"
      "set 0 mem_util 5 6 7\n"
      "set 0 mem_total 1000\n"
      "set 0 mem_used 250 500 750\n"
      "set 0 mem_free 750 500 250\n"
      "set 0 temp 60 61 62\n"
      "set 0 power 250000 300000 350000\n"
      "set 0 power_limit 500000\n"
      "set 0 energy 1000 1500 2500\n"
      "set 0 sm_clock 1500 1600 1700\n"
      "set 0 mem_clock 2600\n"
      "set 0 gfx_clock 1400 1450 1500\n"
      "set 0 fan 40 45 50\n"
      "set 0 clock_reasons 0x1 0x4 0x0\n"
      "set 0 pcie_tx 50 100 300 600\n"  // the first value is the build-time probe's
      "set 0 pcie_rx 1000 1000 1000 5000\n"
      "set 0 ecc_corrected 2 3 3\n"
      "set 0 ecc_uncorrected 0 0 1\n"
      "set 1 temp 70 71 72\n"
      "set 1 power 100000\n");
  NvmlSource src(NvmlSourceOptions{});
  CHECK(src.name() == "gpu");
  CHECK(src.slow());
  CHECK_EQ(src.columns().size(), 66u);
  Row row(src);
  const auto& cols = src.columns();
  const ColumnSpec& power = cols[row.col("gpu.0.power_w")];
  CHECK(power.unit == "W" && power.dtype == DType::kFloat64 && power.kind == Kind::kGauge);
  const ColumnSpec& energy = cols[row.col("gpu.1.energy_mj")];
  CHECK(energy.unit == "mJ" && energy.dtype == DType::kInt64 && energy.kind == Kind::kCounter);
  CHECK(contains(cols[row.col("gpu.0.util_pct")].help, "1/6 s to 1 s"));
  for (const ColumnSpec& c : cols) CHECK(!c.unit.empty() && !c.help.empty());

  const double util[] = {10, 20, 30}, mem_util[] = {5, 6, 7}, temp[] = {60, 61, 62};
  const std::int64_t used[] = {250, 500, 750}, sm[] = {1500, 1600, 1700};
  const std::int64_t gfx[] = {1400, 1450, 1500}, reasons[] = {1, 4, 0};
  const double power_w[] = {250, 300, 350}, power_pct[] = {50, 60, 70}, fan[] = {40, 45, 50};
  const std::int64_t energy_mj[] = {0, 500, 1500}, tx[] = {0, 200, 500}, rx[] = {0, 0, 4000};
  const std::int64_t ecc_c[] = {2, 3, 3}, ecc_u[] = {0, 0, 1};
  std::int64_t read_at[2] = {0, 0};  // each GPU's own read time: GPU 1 after GPU 0, both later
  for (int k = 0; k < 3; ++k) {
    const std::int64_t before = mono_ns();
    row.read();
    const std::int64_t after = mono_ns();
    const std::int64_t at0 = row.i64("gpu.0.read_mono_ns"), at1 = row.i64("gpu.1.read_mono_ns");
    CHECK(before <= at0 && at0 <= at1 && at1 <= after && at0 > read_at[0] && at1 > read_at[1]);
    read_at[0] = at0, read_at[1] = at1;
    CHECK(row.f64("gpu.0.util_pct") == util[k]);
    CHECK(row.f64("gpu.0.mem_util_pct") == mem_util[k]);
    CHECK_EQ(row.i64("gpu.0.mem_used_bytes"), used[k]);
    CHECK_EQ(row.i64("gpu.0.mem_free_bytes"), 1000 - used[k]);
    CHECK_EQ(row.i64("gpu.0.mem_total_bytes"), 1000);
    CHECK(row.f64("gpu.0.mem_allocated_pct") == static_cast<double>(used[k]) / 10.0);
    CHECK(row.f64("gpu.0.temp_c") == temp[k]);
    CHECK(row.f64("gpu.0.power_w") == power_w[k]);
    CHECK(row.f64("gpu.0.power_limit_w") == 500.0);
    CHECK(row.f64("gpu.0.power_pct") == power_pct[k]);
    CHECK_EQ(row.i64("gpu.0.energy_mj"), energy_mj[k]);
    CHECK_EQ(row.i64("gpu.0.sm_clock_mhz"), sm[k]);
    CHECK_EQ(row.i64("gpu.0.mem_clock_mhz"), 2600);
    CHECK_EQ(row.i64("gpu.0.graphics_clock_mhz"), gfx[k]);
    CHECK(row.f64("gpu.0.fan_pct") == fan[k]);
    CHECK_EQ(row.i64("gpu.0.clock_event_reasons"), reasons[k]);
    CHECK_EQ(row.i64("gpu.0.pcie_tx_bytes"), tx[k]);
    CHECK_EQ(row.i64("gpu.0.pcie_rx_bytes"), rx[k]);
    CHECK_EQ(row.i64("gpu.0.ecc_corrected"), ecc_c[k]);
    CHECK_EQ(row.i64("gpu.0.ecc_uncorrected"), ecc_u[k]);
    CHECK_EQ(row.i64("gpu.0.proc_mem_bytes"), 0);  // no process scripted
    CHECK_EQ(row.i64("gpu.0.other_procs"), 0);
    CHECK(row.f64("gpu.0.proc_sm_util_pct") == 0.0);
    CHECK(row.f64("gpu.1.temp_c") == 70.0 + k);
    CHECK(row.f64("gpu.1.power_w") == 100.0);
    CHECK(row.f64("gpu.1.power_pct") == 100.0 / 700.0 * 100.0);  // default limit 700 W
    CHECK(src.reason() == nullptr);
  }
  // Power came from the field batch, one batch per device per read (plus the build-time probe).
  CHECK_EQ(fake_calls(0, "nvmlDeviceGetFieldValues"), 4u);
  CHECK_EQ(fake_calls(0, "nvmlDeviceGetPowerUsage"), 0u);
  CHECK_EQ(fake_calls(0, "nvmlDeviceGetTotalEnergyConsumption"), 0u);
  CHECK_EQ(src.failures(), 0u);
  CHECK_EQ(src.reads(), 3u);
  CHECK_EQ(src.transient_errors(), 0u);
}

void test_not_supported() {
  use_script(
      "devices 2\n"
      "fail 1 fan NOT_SUPPORTED\n"
      "fail 0 field:186 NOT_SUPPORTED\n"
      "set 0 power 123000 124000\n"
      "fail 1 field:197 NOT_SUPPORTED\n"
      "fail 1 field:198 NOT_SUPPORTED\n"
      "fail 0 nvmlDeviceGetMemoryInfo_v2 ARGUMENT_VERSION_MISMATCH\n"
      "set 0 mem_used 4096\n");
  NvmlSource src({}, 0);
  Row row(src);
  for (int k = 0; k < 3; ++k) {
    row.read();
    CHECK(!row.has("gpu.1.fan_pct"));
    CHECK(row.f64("gpu.0.fan_pct") == 30.0);
    CHECK(row.f64("gpu.0.power_w") == (k == 0 ? 123.0 : 124.0));  // nvmlDeviceGetPowerUsage
    CHECK_EQ(row.col("gpu.1.pcie_tx_bytes"), src.columns().size());  // no such column
    CHECK_EQ(row.col("gpu.1.pcie_rx_bytes_per_s"), src.columns().size());
    CHECK(row.has("gpu.1.nvlink_tx_bytes"));
    CHECK_EQ(row.i64("gpu.0.pcie_tx_bytes"), 0);
    CHECK_EQ(row.i64("gpu.0.mem_used_bytes"), 4096);  // the original memory struct
    CHECK(row.has("gpu.1.temp_c"));
    CHECK(src.reason() == nullptr);  // unsupported metrics are not failures
  }
  // Asked once, not on every read.
  CHECK_EQ(fake_calls(1, "nvmlDeviceGetFanSpeed"), 1u);
  CHECK_EQ(fake_calls(0, "nvmlDeviceGetMemoryInfo_v2"), 1u);
  CHECK_EQ(fake_calls(0, "nvmlDeviceGetMemoryInfo"), 3u);
  CHECK_EQ(fake_calls(0, "nvmlDeviceGetPowerUsage"), 3u);
  const auto st = src.device_status();
  CHECK_EQ(st.size(), 2u);
  if (st.size() == 2) {
    CHECK(st[0].unavailable.empty());  // power and memory have a working fallback
    CHECK_EQ(st[1].unavailable.size(), 5u);  // fan, PCIe bytes and rates
    CHECK(unavailable(st[1], "fan_pct") != nullptr);
    const NvmlUnavailable* tx = unavailable(st[1], "pcie_tx_bytes");
    CHECK(tx != nullptr && contains(tx->reason, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES") &&
          contains(tx->reason, "Not Supported"));
  }
}

void test_gpu_lost() {
  use_script(
      "devices 2\n"
      "lost 1 after 3\n"  // the byte counters are served once more: to the build-time probe
      "set 0 temp 60 61 62 63\n"
      "set 1 temp 50 51 52 53\n"
      "fail 0 temp TIMEOUT after 3\n");
  NvmlSource src({}, 0);
  Row row(src);
  for (int k = 0; k < 2; ++k) {
    row.read();
    CHECK(row.f64("gpu.1.temp_c") == 50.0 + k);
    CHECK(row.f64("gpu.0.temp_c") == 60.0 + k);
    CHECK(src.reason() == nullptr);
  }
  row.read();  // the third read finds GPU 1 lost
  CHECK(row.f64("gpu.0.temp_c") == 62.0);
  for (const ColumnSpec& c : src.columns()) {
    if (c.name.rfind("gpu.1.", 0) == 0) CHECK(!row.has(c.name));
  }
  CHECK(src.reason() != nullptr && contains(src.reason(), "lost"));
  CHECK_EQ(src.error_number(), 15);
  CHECK_EQ(src.failures(), 1u);
  const unsigned long long temp_calls = fake_calls(1, "nvmlDeviceGetTemperature");
  CHECK_EQ(temp_calls, 2u);
  row.read();  // GPU 1 is not asked again; GPU 0's temperature times out once, the rest is fine
  CHECK_EQ(fake_calls(1, "nvmlDeviceGetTemperature"), temp_calls);
  CHECK_EQ(fake_calls(1, "nvmlDeviceGetFieldValues"), 4u);  // the probe and three reads
  CHECK(!row.has("gpu.1.power_w"));
  CHECK(!row.has("gpu.0.temp_c"));
  CHECK(row.has("gpu.0.power_w"));
  CHECK(src.transient_errors() >= 1u);
  CHECK_EQ(src.failures(), 2u);
  const auto st = src.device_status();
  CHECK(st.size() == 2 && st[0].error.empty());
  CHECK(st.size() == 2 && contains(st[1].error, "GPU is lost") &&
        contains(st[1].error, "NVML_ERROR_GPU_IS_LOST"));
}

// An error NVML does not document as the end of a device (UNKNOWN, CORRUPTED_INFOROM,
// OPERATING_SYSTEM, ...) empties that one cell for that read: the GPU's other values go on, the
// query is asked again, and it counts as a passing error, not a failure of the source.
void test_an_unknown_error_empties_one_cell() {
  use_script(
      "devices 1\n"
      "set 0 temp 60 61 62 63\n"
      "set 0 fan 40 41 42 43\n"
      "fail 0 fan UNKNOWN after 1\n"
      "fail 0 temp CORRUPTED_INFOROM after 2\n");
  NvmlSource src({0}, 0);
  Row row(src);
  row.read();
  CHECK(row.f64("gpu.0.fan_pct") == 40.0 && row.f64("gpu.0.temp_c") == 60.0);
  row.read();  // the fan fails from now on
  CHECK(!row.has("gpu.0.fan_pct"));
  CHECK(row.f64("gpu.0.temp_c") == 61.0 && row.has("gpu.0.power_w"));
  row.read();  // the temperature too; power, memory and the rest are still read
  CHECK(!row.has("gpu.0.fan_pct") && !row.has("gpu.0.temp_c"));
  CHECK(row.has("gpu.0.power_w") && row.has("gpu.0.mem_used_bytes"));
  CHECK(src.reason() == nullptr);
  CHECK_EQ(src.failures(), 0u);
  CHECK(src.transient_errors() >= 3u);
  const unsigned long long fan_calls = fake_calls(0, "nvmlDeviceGetFanSpeed");
  row.read();  // asked again
  CHECK_EQ(fake_calls(0, "nvmlDeviceGetFanSpeed"), fan_calls + 1);
  const auto st = src.device_status();
  CHECK(st.size() == 1 && st[0].error.empty());
}

void test_energy_wrap() {
  static_assert(nvml_counter_delta(10, 15) == 5);
  static_assert(nvml_counter_delta(0xFFFFFFF0ull, 0x10) == 0x20);
  static_assert(nvml_counter_delta(1ull << 40, 5) == 5);  // a restart, not a wrap
  const char* script =
      "set 0 energy 4294967000 4294967200 100 300\n"
      "set 0 pcie_tx 7 4294967295 5\n";  // 7: the build-time probe's
  for (const char* lib : {FAKE_NVML_PATH, FAKE_NVML_OLD_PATH}) {
    use_script(script, lib);
    NvmlSource src({0}, 0);
    Row row(src);
    const std::int64_t expected[] = {0, 200, 396, 596};
    for (std::int64_t e : expected) {
      row.read();
      CHECK_EQ(row.i64("gpu.0.energy_mj"), e);
    }
    if (lib == std::string(FAKE_NVML_PATH)) {
      CHECK_EQ(row.i64("gpu.0.pcie_tx_bytes"), 6);  // 0xFFFFFFFF -> 5 across the wrap
    }
  }
}

// device_status() from another thread while read() runs (TSan checks the atomics); the status
// seen at the end is the one the reads produced.
void test_status_while_reading() {
  use_script("devices 2\nlost 1 after 51\nfail 0 fan NOT_SUPPORTED after 10\n");
  NvmlSource src({}, 0);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    Row row(src);
    for (int i = 0; i < 100; ++i) row.read();
    done.store(true, std::memory_order_release);
  });
  std::size_t seen = 0;
  while (!done.load(std::memory_order_acquire)) seen += src.device_status().size();
  reader.join();
  CHECK(seen % 2 == 0);
  const auto st = src.device_status();
  CHECK(st.size() == 2 && unavailable(st[0], "fan_pct") != nullptr && st[0].error.empty());
  CHECK(st.size() == 2 && contains(st[1].error, "GPU is lost"));
  CHECK_EQ(src.reads(), 100u);
  CHECK_EQ(src.failures(), 50u);
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/stroboscope-nvml-values-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  g_dir = tmpl;

  test_old_driver();
  test_values_two_devices();
  test_not_supported();
  test_gpu_lost();
  test_an_unknown_error_empties_one_cell();
  test_energy_wrap();
  test_status_while_reading();

  std::string cleanup = "rm -rf '" + g_dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
  TEST_MAIN_END();
}
