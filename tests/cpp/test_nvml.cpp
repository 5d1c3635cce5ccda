// NVML loader, "gpu" source and sample collector against the scripted fake libnvidia-ml
// (tests/fake_nvml/fake_nvml.c), loaded through STROBOSCOPE_NVML_LIBRARY like the real one.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nvml_fixture.hpp"

namespace {

using namespace stroboscope;

void test_missing_library() {
  const char* path = "/nonexistent-stroboscope-dir/libnvidia-ml.so.1";
  setenv(kNvmlLibraryEnv, path, 1);
  // What dlopen itself says, to compare with the status text.
  CHECK(dlopen(path, RTLD_NOW) == nullptr);
  const std::string dl_text = dlerror();

  const NvmlStatus s = nvml_status();
  CHECK(!s.loaded);
  CHECK(s.library_path == path);
  CHECK(contains(s.reason, dl_text));
  CHECK(contains(s.reason, "cannot load"));
  CHECK_EQ(s.init_error, -1);
  CHECK(s.devices.empty());
  CHECK(contains(format_nvml_status(s), dl_text));

  std::string why;
  CHECK(!nvml_available(&why));
  CHECK(contains(why, dl_text));
  CHECK(!nvml_index_of_uuid("GPU-00000000").has_value());
  bool threw = false;
  try {
    NvmlSource src(NvmlSourceOptions{});
  } catch (const std::runtime_error& e) {
    threw = contains(e.what(), dl_text);
  }
  CHECK(threw);
  threw = false;
  try {
    NvmlSampleCollector c;
  } catch (const std::runtime_error& e) {
    threw = contains(e.what(), dl_text);
  }
  CHECK(threw);
}

void test_init_error() {
  use_script("init_error 9\n");
  NvmlStatus s = nvml_status();
  CHECK(!s.loaded);
  CHECK_EQ(s.init_error, 9);
  CHECK(contains(s.reason, "nvmlInit_v2 failed"));
  CHECK(contains(s.reason, "Driver Not Loaded"));  // nvmlErrorString's text
  CHECK(contains(s.reason, "NVML_ERROR_DRIVER_NOT_LOADED"));
  CHECK_EQ(fake_init_count(), 0);

  use_script("init_error NO_PERMISSION\n", FAKE_NVML_OLD_PATH);
  s = nvml_status();
  CHECK(!s.loaded);
  CHECK_EQ(s.init_error, 4);
  CHECK(contains(s.reason, "nvmlInit failed"));  // the old driver has no nvmlInit_v2
  CHECK(contains(s.reason, "Insufficient Permissions"));
}

void test_status() {
  use_script(
      "devices 2\n"
      "name 0 NVIDIA H200 NVL\n"
      "uuid 1 GPU-11111111-2222-3333-4444-555555555555\n"
      "driver 560.35.03\n"
      "nvml_version 12.560.35.03\n"
      "mig 0 off\n"
      "gpm 0 on\n"
      "fail 1 fan NOT_SUPPORTED\n");
  const NvmlStatus s = nvml_status();
  CHECK(s.loaded);
  CHECK(s.reason.empty());
  CHECK_EQ(s.init_error, 0);
  CHECK(s.driver_version == "560.35.03");
  CHECK(s.nvml_version == "12.560.35.03");
  CHECK_EQ(s.device_count, 2u);
  // Newest versions first.
  const NvmlSymbol* init = symbol(s.symbols, "nvmlInit_v2");
  CHECK(init != nullptr && init->resolved == "nvmlInit_v2" && init->required);
  const NvmlSymbol* procs = symbol(s.symbols, "nvmlDeviceGetComputeRunningProcesses_v3");
  CHECK(procs != nullptr && procs->resolved == "nvmlDeviceGetComputeRunningProcesses_v3");
  const NvmlSymbol* reasons = symbol(s.symbols, "nvmlDeviceGetCurrentClocksEventReasons");
  CHECK(reasons != nullptr && reasons->resolved == "nvmlDeviceGetCurrentClocksEventReasons");
  CHECK_EQ(s.devices.size(), 2u);
  if (s.devices.size() == 2) {
    CHECK(s.devices[0].name == "NVIDIA H200 NVL");
    CHECK(s.devices[0].uuid == "GPU-00000000-fake-0000-0000-000000000000");
    CHECK(s.devices[1].uuid == "GPU-11111111-2222-3333-4444-555555555555");
    CHECK(!s.devices[0].mig_enabled);
    CHECK(s.devices[0].error.empty());
    CHECK(s.devices[0].unavailable.empty());  // the fake supports every metric by default
    CHECK_EQ(s.devices[1].unavailable.size(), 2u);
    const NvmlUnavailable* gpm = unavailable(s.devices[1], "gpm");  // GPM is off by default
    CHECK(gpm != nullptr && contains(gpm->reason, "does not support GPM"));
    const NvmlUnavailable* fan = unavailable(s.devices[1], "fan_pct");
    CHECK(fan != nullptr && contains(fan->reason, "nvmlDeviceGetFanSpeed") &&
          contains(fan->reason, "Not Supported") &&
          contains(fan->reason, "NVML_ERROR_NOT_SUPPORTED"));
  }
  const std::string text = format_nvml_status(s);
  CHECK(contains(text, "NVIDIA H200 NVL"));
  CHECK(contains(text, "fan_pct unavailable"));
  CHECK(contains(text, "560.35.03"));
  CHECK_EQ(fake_init_count(), 0);  // status released its nvmlInit
}

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
  CHECK_EQ(src.columns().size(), 64u);
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
  for (int k = 0; k < 3; ++k) {
    row.read();
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

void test_processes() {
  use_script(
      "devices 2\n"
      "process 0 self 1048576 40 55\n"
      "process 0 1234 2097152 10\n"
      "graphics_process 0 5678 4096\n"
      "graphics_process 0 self 1048576\n"
      "process 1 4321 8192\n");
  {
    NvmlSource src({}, 0);
    Row row(src);
    row.read();
    CHECK_EQ(row.i64("gpu.0.proc_mem_bytes"), 1048576);  // in both lists, counted once
    CHECK(row.f64("gpu.0.proc_sm_util_pct") == 40.0);
    CHECK_EQ(row.i64("gpu.0.other_procs"), 2);
    CHECK_EQ(row.i64("gpu.1.proc_mem_bytes"), 0);
    CHECK_EQ(row.i64("gpu.1.other_procs"), 1);
    CHECK(row.f64("gpu.1.proc_sm_util_pct") == 0.0);  // no samples at all: nobody ran
    CHECK_EQ(fake_last_seen(0), 0u);
    row.read();
    CHECK(row.f64("gpu.0.proc_sm_util_pct") == 55.0);
    CHECK_EQ(fake_last_seen(0), 1000000u);  // the first sample's timestamp was passed back
    row.read();
    CHECK(row.f64("gpu.0.proc_sm_util_pct") == 55.0);
    CHECK_EQ(fake_last_seen(0), 2000000u);
  }
  {
    NvmlSource other({0}, 1234);  // another pid: its memory and SM %, and we count as other
    Row row(other);
    row.read();
    CHECK_EQ(row.i64("gpu.0.proc_mem_bytes"), 2097152);
    CHECK(row.f64("gpu.0.proc_sm_util_pct") == 10.0);
    CHECK_EQ(row.i64("gpu.0.other_procs"), 2);
  }
  // R535's 32-byte _v3 elements, and a driver with nothing new to say after the first call.
  use_script(
      "process_info_stride 32\n"
      "process 0 999 512\n"
      "process 0 self 3000000 40 70\n"
      "process 0 1000 777\n"
      "fail 0 nvmlDeviceGetProcessUtilization NOT_FOUND after 1\n");
  NvmlSource src({}, 0);
  Row row(src);
  for (int k = 0; k < 3; ++k) {
    row.read();
    CHECK_EQ(row.i64("gpu.0.proc_mem_bytes"), 3000000);
    CHECK_EQ(row.i64("gpu.0.other_procs"), 2);
    CHECK(row.f64("gpu.0.proc_sm_util_pct") == 40.0);  // the latest value stands
  }
  CHECK_EQ(src.transient_errors(), 0u);
}

void test_samples() {
  constexpr std::int64_t kMono =
      nvml_driver_time_to_monotonic_ns(1700000000000000, 1700000000500000000, 1000000000);
  static_assert(kMono == 500000000);
  CHECK(std::string(nvml_sample_kind_name(NvmlSampleKind::kMemUtilPct)) == "mem_util_pct");

  use_script(
      "devices 2\n"
      "samples 0 power 2000:260000 1000:250000\n"
      "samples 0 gpu_util 1500:42\n"
      "samples 0 mem_clock 1000:2619.5\n"
      "samples 1 sm_clock 1100:1410 1200:1420\n"
      "samples 1 power from 3 5000:300500\n");
  NvmlSampleRow rows[64];
  {
    NvmlSampleCollector c;
    CHECK_EQ(c.device_indices().size(), 2u);
    std::size_t n = c.poll(rows, 64);
    // Stream order (GPU, then kind), oldest first within a stream; power converted to W.
    const NvmlSampleRow expected[] = {{1000, 0, NvmlSampleKind::kPowerW, 250.0},
                                      {2000, 0, NvmlSampleKind::kPowerW, 260.0},
                                      {1500, 0, NvmlSampleKind::kGpuUtilPct, 42.0},
                                      {1000, 0, NvmlSampleKind::kMemClockMhz, 2619.5},
                                      {1100, 1, NvmlSampleKind::kSmClockMhz, 1410.0},
                                      {1200, 1, NvmlSampleKind::kSmClockMhz, 1420.0}};
    CHECK_EQ(n, 6u);
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 6); ++i) {
      CHECK_EQ(rows[i].driver_time_us, expected[i].driver_time_us);
      CHECK_EQ(rows[i].gpu, expected[i].gpu);
      CHECK_EQ(static_cast<int>(rows[i].kind), static_cast<int>(expected[i].kind));
      CHECK(rows[i].value == expected[i].value);
    }
    CHECK_EQ(c.poll(rows, 64), 0u);  // nothing new
    n = c.poll(rows, 64);            // the third call for GPU 1's power sees a new sample
    CHECK_EQ(n, 1u);
    CHECK(n == 1 && rows[0].gpu == 1 && rows[0].kind == NvmlSampleKind::kPowerW &&
          rows[0].driver_time_us == 5000 && rows[0].value == 300.5);
    CHECK_EQ(c.poll(rows, 64), 0u);
  }

  // A full buffer: the rest comes next poll, nothing twice.
  use_script(
      "samples 0 power 1:1000 2:2000 3:3000\n"
      "mig 0 on\n"
      "fail 0 samples:sm_clock NOT_SUPPORTED\n");
  NvmlSampleCollector small;
  CHECK_EQ(small.poll(rows, 2), 2u);
  CHECK(rows[0].driver_time_us == 1 && rows[1].driver_time_us == 2 && rows[1].value == 2.0);
  CHECK_EQ(small.poll(rows, 2), 1u);
  CHECK(rows[0].driver_time_us == 3 && rows[0].value == 3.0);
  CHECK_EQ(small.poll(rows, 2), 0u);
  CHECK(small.collecting(0, NvmlSampleKind::kPowerW));
  CHECK(!small.collecting(0, NvmlSampleKind::kGpuUtilPct));  // MIG
  CHECK(!small.collecting(0, NvmlSampleKind::kMemUtilPct));
  CHECK_EQ(small.stop_code(0, NvmlSampleKind::kSmClockMhz), 3);
  CHECK(small.collecting(0, NvmlSampleKind::kMemClockMhz));
}

void test_mig() {
  use_script(
      "devices 2\n"
      "mig 0 on 2\n"
      "mig_memory 0 0 1000 5000\n"
      "mig_memory 0 1 2000 6000\n"
      "mig 1 off\n"
      "set 0 util 50\n"
      "set 1 util 60\n");
  {
    NvmlSource src({}, 0);
    CHECK_EQ(src.columns().size(), 2u * 32u + 4u);
    Row row(src);
    row.read();
    CHECK_EQ(row.i64("gpu.0.mig.0.mem_used_bytes"), 1000);
    CHECK_EQ(row.i64("gpu.0.mig.0.mem_total_bytes"), 5000);
    CHECK_EQ(row.i64("gpu.0.mig.1.mem_used_bytes"), 2000);
    CHECK_EQ(row.i64("gpu.0.mig.1.mem_total_bytes"), 6000);
    CHECK(!row.has("gpu.0.util_pct"));
    CHECK(!row.has("gpu.0.proc_sm_util_pct"));
    CHECK(row.has("gpu.0.mem_used_bytes"));
    CHECK(row.f64("gpu.1.util_pct") == 60.0);
    CHECK_EQ(fake_calls(0, "nvmlDeviceGetUtilizationRates"), 0u);  // not asked under MIG
  }
  const NvmlStatus s = nvml_status();
  CHECK_EQ(s.devices.size(), 2u);
  if (s.devices.size() == 2) {
    const NvmlDeviceStatus& d = s.devices[0];
    CHECK(d.mig_enabled);
    CHECK_EQ(d.mig_instances.size(), 2u);
    CHECK(d.mig_instances.size() == 2 && d.mig_instances[1].index == 1 &&
          d.mig_instances[1].uuid == "MIG-00000000-fake-0000-0000-000000000001");
    for (const char* m : {"util_pct", "mem_util_pct", "proc_sm_util_pct"}) {
      const NvmlUnavailable* u = unavailable(d, m);
      CHECK(u != nullptr && contains(u->reason, "MIG"));
    }
    CHECK(!s.devices[1].mig_enabled);
    CHECK_EQ(s.devices[1].unavailable.size(), 1u);  // GPM only
    CHECK(unavailable(s.devices[1], "gpm") != nullptr);
  }
  const auto parent = nvml_index_of_uuid("MIG-00000000-fake-0000-0000-000000000001");
  CHECK(parent.has_value() && *parent == 0);
}

void test_uuid_lookup() {
  use_script(
      "devices 3\n"
      "uuid 0 GPU-aaaa1111\n"
      "uuid 1 GPU-aaaa2222\n"
      "uuid 2 GPU-bbbb3333\n");
  const auto exact = nvml_index_of_uuid("GPU-aaaa2222");
  CHECK(exact.has_value() && *exact == 1);
  const auto prefix = nvml_index_of_uuid("GPU-bbbb");
  CHECK(prefix.has_value() && *prefix == 2);
  CHECK(!nvml_index_of_uuid("GPU-aaaa").has_value());  // ambiguous
  CHECK(!nvml_index_of_uuid("GPU-cccc").has_value());
  CHECK(!nvml_index_of_uuid("").has_value());
}

void test_selection() {
  use_script("devices 3\nset 2 temp 77\nset 0 temp 33\n");
  {
    NvmlSourceOptions o;
    o.devices = {2, 0};
    o.labels = {"a", "b"};
    NvmlSource src(o);
    CHECK_EQ(src.columns().size(), 64u);
    CHECK(src.columns().front().name == "gpu.a.util_pct");
    CHECK(src.device_indices() == std::vector<unsigned>({2, 0}));
    Row row(src);
    row.read();
    CHECK(row.f64("gpu.a.temp_c") == 77.0);
    CHECK(row.f64("gpu.b.temp_c") == 33.0);
  }
  {
    NvmlSource one({1}, 0);
    CHECK_EQ(one.columns().size(), 32u);
    CHECK(one.columns().back().name == "gpu.1.other_procs");
    // Sources hold one nvmlInit between them.
    NvmlSource two({0}, 0);
    CHECK_EQ(fake_init_count(), 1);
  }
  CHECK_EQ(fake_init_count(), 0);
  auto throws_invalid = [](NvmlSourceOptions o, const char* text) {
    try {
      NvmlSource src(o);
    } catch (const std::invalid_argument& e) {
      return contains(e.what(), text);
    }
    return false;
  };
  NvmlSourceOptions bad;
  bad.devices = {3};
  CHECK(throws_invalid(bad, "GPU index 3 is out of range"));
  bad.devices = {1, 1};
  CHECK(throws_invalid(bad, "given twice"));
  bad.devices = {0, 1};
  bad.labels = {"x"};
  CHECK(throws_invalid(bad, "labels"));

  use_script("devices 0\n");
  const NvmlStatus s = nvml_status();
  CHECK(s.loaded && s.device_count == 0 && s.devices.empty());
  std::string why;
  CHECK(!nvml_available(&why) && contains(why, "no GPU"));
  bool threw = false;
  try {
    auto src = make_nvml_source(SourceOptions{});
  } catch (const std::runtime_error& e) {
    threw = contains(e.what(), "no GPU");
  }
  CHECK(threw);
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

void test_fake_defaults_and_bad_script() {
  unsetenv("FAKE_NVML_SCRIPT");  // no script: one GPU with the fake's defaults
  setenv(kNvmlLibraryEnv, FAKE_NVML_PATH, 1);
  {
    NvmlSource src(NvmlSourceOptions{});
    CHECK_EQ(src.device_indices().size(), 1u);
    Row row(src);
    row.read();
    CHECK(row.f64("gpu.0.temp_c") == 40.0);
    CHECK(row.f64("gpu.0.power_w") == 100.0);
    CHECK(row.f64("gpu.0.power_limit_w") == 700.0);
    CHECK_EQ(row.i64("gpu.0.mem_total_bytes"), 85899345920);
    CHECK_EQ(row.i64("gpu.0.mem_free_bytes"), 85899345920 - 1073741824);
  }
  use_script("devices 1\nset 0 tmep 50\n");  // a typo: the fake refuses to initialise
  const NvmlStatus s = nvml_status();
  CHECK(!s.loaded);
  CHECK_EQ(s.init_error, 999);
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/stroboscope-nvml-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  g_dir = tmpl;

  test_missing_library();
  test_init_error();
  test_status();
  test_old_driver();
  test_values_two_devices();
  test_not_supported();
  test_gpu_lost();
  test_energy_wrap();
  test_processes();
  test_samples();
  test_mig();
  test_uuid_lookup();
  test_selection();
  test_status_while_reading();
  test_fake_defaults_and_bad_script();

  std::string cleanup = "rm -rf '" + g_dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
  TEST_MAIN_END();
}
