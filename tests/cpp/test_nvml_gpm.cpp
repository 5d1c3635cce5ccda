// The "gpu_gpm" source on the fake NVML library (tests/fake_nvml/fake_nvml_gpm.c): columns only
// for GPUs that support GPM, sample pairs more than 100 ms apart by the read's clock, one sample
// per poll, values scaled to the columns' units, unsupported metrics and a GPU lost mid-run.
#include <stdexcept>
#include <string>

#include "nvml_fixture.hpp"
#include "stroboscope/nvml_gpm.hpp"

namespace {

using namespace stroboscope;

constexpr std::int64_t kMs = 1'000'000;

long long gpm_live_samples() {
  auto fn = fake_symbol<long long (*)()>(FAKE_NVML_PATH, "fake_nvml_gpm_live_samples");
  return fn != nullptr ? fn() : -1;
}

void test_pairs_and_values() {
  use_script(
      "devices 2\n"
      "gpm 0 on\n"  // GPU 1: a pre-Hopper GPU
      "gpm_metric 0 2 40 50\n"     // SM active %
      "gpm_metric 0 3 12.5\n"      // SM occupancy %
      "gpm_metric 0 5 30\n"        // any tensor %
      "gpm_metric 0 20 2 4\n"      // PCIe TX, MiB/s
      "gpm_metric 0 61 1.5\n");    // NVLink TX, MiB/s; the other metrics are not supported
  {
    NvmlGpmSource src(NvmlSourceOptions{});
    CHECK(src.name() == "gpu_gpm" && src.slow());
    CHECK(src.device_indices() == std::vector<unsigned>({0}));
    CHECK_EQ(src.columns().size(), 12u);  // GPU 0 only: GPU 1 has no GPM columns at all
    for (const ColumnSpec& c : src.columns()) CHECK(c.name.rfind("gpu.0.", 0) == 0);
    CHECK_EQ(gpm_live_samples(), 2);  // the kept sample and the next one
    Row row(src);
    row.read(1000 * kMs);  // the first sample opens the first pair: no values yet
    CHECK(!row.has("gpu.0.sm_active_pct"));
    CHECK_EQ(fake_calls(0, "nvmlGpmSampleGet"), 1u);
    row.read(1100 * kMs);  // 100 ms later: too close for a pair, and no sample is taken
    CHECK(!row.has("gpu.0.sm_active_pct"));
    CHECK_EQ(fake_calls(0, "nvmlGpmSampleGet"), 1u);
    CHECK_EQ(fake_calls(0, "nvmlGpmMetricsGet"), 0u);
    row.read(1102 * kMs);  // 102 ms after the kept sample: one sample, one pair
    CHECK_EQ(fake_calls(0, "nvmlGpmSampleGet"), 2u);
    CHECK(row.f64("gpu.0.sm_active_pct") == 40.0);
    CHECK(row.f64("gpu.0.sm_occupancy_pct") == 12.5);
    CHECK(row.f64("gpu.0.tensor_active_pct") == 30.0);
    CHECK(row.f64("gpu.0.gpm_pcie_tx_bytes_per_s") == 2.0 * 1048576.0);  // MiB/s -> bytes/s
    CHECK(row.f64("gpu.0.gpm_nvlink_tx_bytes_per_s") == 1.5 * 1048576.0);
    CHECK(!row.has("gpu.0.fp64_active_pct"));  // NOT_SUPPORTED in its entry: null
    row.read(1300 * kMs);  // the next pair starts from the kept sample: still one sample a poll
    CHECK_EQ(fake_calls(0, "nvmlGpmSampleGet"), 3u);
    CHECK(row.f64("gpu.0.sm_active_pct") == 50.0);
    CHECK(row.f64("gpu.0.gpm_pcie_tx_bytes_per_s") == 4.0 * 1048576.0);
    CHECK(src.reason() == nullptr);
  }
  CHECK_EQ(gpm_live_samples(), 0);  // freed with the source
}

void test_unsupported_everywhere() {
  use_script("devices 2\n");
  bool threw = false;
  try {
    NvmlGpmSource src(NvmlSourceOptions{});
  } catch (const std::runtime_error& e) {
    threw = contains(e.what(), "GPU 0: nvmlGpmQueryDeviceSupport: this GPU does not support GPM") &&
            contains(e.what(), "GPU 1:");
  }
  CHECK(threw);
  CHECK(!nvml_gpm_available());
  use_script("devices 1\ngpm 0 on\n", FAKE_NVML_OLD_PATH);  // no nvmlGpm* symbols at all
  threw = false;
  try {
    NvmlGpmSource src(NvmlSourceOptions{});
  } catch (const std::runtime_error& e) {
    threw = contains(e.what(), "does not export the nvmlGpm");
  }
  CHECK(threw);
}

void test_gpu_lost() {
  use_script(
      "devices 2\n"
      "gpm 0 on\n"
      "gpm 1 on\n"
      "gpm_metric 0 2 10\n"
      "gpm_metric 1 2 20\n"
      "fail 1 nvmlGpmSampleGet GPU_IS_LOST after 2\n");
  NvmlGpmSource src(NvmlSourceOptions{});
  Row row(src);
  row.read(0);
  row.read(200 * kMs);
  CHECK(row.f64("gpu.1.sm_active_pct") == 20.0);
  CHECK(src.reason() == nullptr);
  row.read(400 * kMs);  // GPU 1's third sample finds it lost; GPU 0 carries on
  CHECK(!row.has("gpu.1.sm_active_pct"));
  CHECK(row.f64("gpu.0.sm_active_pct") == 10.0);
  CHECK(src.reason() != nullptr && contains(src.reason(), "lost"));
  CHECK_EQ(src.error_number(), 15);
  row.read(600 * kMs);  // not asked again
  CHECK_EQ(fake_calls(1, "nvmlGpmSampleGet"), 3u);
  CHECK(row.f64("gpu.0.sm_active_pct") == 10.0);
}

// A GPU that says it supports GPM but then refuses to sample (NOT_SUPPORTED, as under MIG) is
// left alone: its cells stay null, nothing more is asked, and the source is not failing.
void test_sampling_refused() {
  use_script(
      "devices 2\n"
      "gpm 0 on\ngpm 1 on\n"
      "gpm_metric 0 2 10\n"
      "fail 1 nvmlGpmSampleGet NOT_SUPPORTED\n");
  NvmlGpmSource src(NvmlSourceOptions{});
  Row row(src);
  for (int k = 0; k < 4; ++k) row.read(k * 200 * kMs);
  CHECK(row.f64("gpu.0.sm_active_pct") == 10.0);
  CHECK(!row.has("gpu.1.sm_active_pct"));
  CHECK_EQ(fake_calls(1, "nvmlGpmSampleGet"), 1u);
  CHECK(src.reason() == nullptr);
  CHECK_EQ(src.failures(), 0u);
  // gpu_status() says why GPU 1 has no GPM values while the source lives, and GPU 0 is fine.
  const NvmlStatus st = nvml_status();
  CHECK(st.devices.size() == 2);
  const NvmlUnavailable* gpm1 = st.devices.size() == 2 ? unavailable(st.devices[1], "gpm") : nullptr;
  CHECK(gpm1 != nullptr && contains(gpm1->reason, "nvmlGpmSampleGet") &&
        contains(gpm1->reason, "Not Supported"));
  CHECK(st.devices.size() == 2 && unavailable(st.devices[0], "gpm") == nullptr);
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/stroboscope-nvml-gpm-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  g_dir = tmpl;
  test_pairs_and_values();
  test_unsupported_everywhere();
  test_gpu_lost();
  test_sampling_refused();
  std::string cleanup = "rm -rf '" + g_dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
  TEST_MAIN_END();
}
