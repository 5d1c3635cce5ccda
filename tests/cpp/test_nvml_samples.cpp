// Per-process figures, the sample collector and MIG against the scripted fake libnvidia-ml
// (tests/fake_nvml/fake_nvml.c): this process's memory and SM % among others, NVML's sample
// buffers polled oldest first, and a GPU split into MIG instances.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "nvml_fixture.hpp"

namespace {

using namespace stroboscope;

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
    CHECK_EQ(src.columns().size(), 2u * 33u + 4u);
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

}  // namespace

int main() {
  char tmpl[] = "/tmp/stroboscope-nvml-samples-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  g_dir = tmpl;

  test_processes();
  test_samples();
  test_mig();

  std::string cleanup = "rm -rf '" + g_dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
  TEST_MAIN_END();
}
