// The amd_gpu source on the fake amdsmi library (tests/fake_amdsmi), read row by row the way the
// sampler does: values, the energy wrap by hand, NOT_SUPPORTED, failing calls, absent library,
// init failure, and the numbering after NVML's GPUs.
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "nvml_fixture.hpp"
#include "stroboscope/amdsmi.hpp"

#ifndef FAKE_AMDSMI_PATH
#error "FAKE_AMDSMI_PATH must name the fake amdsmi library (see CMakeLists.txt)"
#endif

namespace {

// Writes an amdsmi scenario and points the loader at the fake; NVML is absent unless `nvml`.
void use_amd(const std::string& text, const char* nvml = "/nonexistent/libnvidia-ml.so.1") {
  static int n = 0;
  const std::string path = g_dir + "/amd" + std::to_string(n++) + ".txt";
  std::ofstream(path) << text;
  setenv("FAKE_AMDSMI_SCRIPT", path.c_str(), 1);
  setenv(kAmdSmiLibraryEnv, FAKE_AMDSMI_PATH, 1);
  setenv(kNvmlLibraryEnv, nvml, 1);
}

// The source's latest reason, "" when its read succeeded.
std::string said(const Source& s) { return s.reason() != nullptr ? s.reason() : ""; }

std::string unavailable_reason() {
  try {
    (void)make_amd_gpu_source(SourceOptions{});
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

void test_energy_delta() {
  CHECK_EQ(amdsmi_energy_delta(100, 250), 150u);
  CHECK_EQ(amdsmi_energy_delta(0xFFFFFF00ull, 0x10), 0x110u);  // 32-bit wrap
  CHECK_EQ(amdsmi_energy_delta(0x1'0000'0005ull, 7), 7u);       // restart of a 64-bit counter
}

void test_values_and_wrap() {
  use_amd(
      "devices 1\n"
      "0 gfx 12 34\n0 umc 3\n0 mem_used 4096 8192\n0 mem_total 65536\n0 temp 70 71\n"
      "0 resolution 15.5\n0 energy 4294960000 4294966000 400\n"
      "0 energy_ts 1000000000 1001000000 1003000000\n0 gfx_clock 2100\n0 mem_clock 1300\n");
  auto src = make_amd_gpu_source(SourceOptions{});
  CHECK_EQ(src->columns().size(), 9u);
  CHECK(src->columns()[0].name == "gpu.0.util_pct");
  Row row(*src);
  row.read();
  CHECK_NEAR(row.f64("gpu.0.util_pct"), 12.0, 0.0);
  CHECK_NEAR(row.f64("gpu.0.mem_util_pct"), 3.0, 0.0);
  CHECK_EQ(row.i64("gpu.0.mem_used_bytes"), 4096);
  CHECK_EQ(row.i64("gpu.0.mem_total_bytes"), 65536);
  CHECK_NEAR(row.f64("gpu.0.temp_c"), 70.0, 0.0);
  CHECK_EQ(row.i64("gpu.0.energy_mj"), 0);
  CHECK(!row.has("gpu.0.power_w"));  // one reading: no interval yet
  CHECK_EQ(row.i64("gpu.0.graphics_clock_mhz"), 2100);
  CHECK_EQ(row.i64("gpu.0.mem_clock_mhz"), 1300);
  row.read();
  CHECK_EQ(row.i64("gpu.0.energy_mj"), 93);            // 6000 ticks * 15.5 uJ
  CHECK_NEAR(row.f64("gpu.0.power_w"), 93.0, 1e-9);    // 93000 uJ over 1 ms
  row.read();
  // (2^32 - 4294966000) + 400 = 1696 ticks = 26288 uJ over 2 ms.
  CHECK_EQ(row.i64("gpu.0.energy_mj"), 119);
  CHECK_NEAR(row.f64("gpu.0.power_w"), 13.144, 1e-9);
  row.read();  // the accumulator did not move (same timestamp): energy holds, power stands
  CHECK_EQ(row.i64("gpu.0.energy_mj"), 119);
  CHECK_NEAR(row.f64("gpu.0.power_w"), 13.144, 1e-9);
  CHECK(src->reason() == nullptr);
}

void test_not_supported_and_failures() {
  use_amd(
      "devices 2\n0 gfx 50\n"
      "0 fail amdsmi_get_temp_metric 2\n"        // NOT_SUPPORTED: asked once, never again
      "0 fail amdsmi_get_gpu_activity 8 2 2\n"   // a passing timeout on the second read
      "1 fail amdsmi_get_clock_info(MEM) 8 1\n"); // failing for good on device 1
  auto made = make_amd_gpu_source(SourceOptions{});
  auto* src = dynamic_cast<AmdGpuSource*>(made.get());
  CHECK(src != nullptr);
  if (src == nullptr) return;
  Row row(*src);
  row.read();
  CHECK(!row.has("gpu.0.temp_c"));
  CHECK_NEAR(row.f64("gpu.0.util_pct"), 50.0, 0.0);
  CHECK(!row.has("gpu.1.mem_clock_mhz"));
  CHECK(row.has("gpu.1.graphics_clock_mhz"));
  CHECK(contains(said(*src), "amdsmi_get_clock_info(MEM) failed"));
  row.read();
  CHECK(!row.has("gpu.0.util_pct"));  // the timeout nulls this read only
  CHECK(contains(said(*src), "amdsmi_get_gpu_activity failed"));  // the first failure named
  row.read();
  CHECK_NEAR(row.f64("gpu.0.util_pct"), 50.0, 0.0);
  CHECK_EQ(src->disabled_code(0, 2), amdsmi::kNotSupported);  // temperature group
  CHECK_EQ(src->disabled_code(1, 5), 0u);  // a failing call is no reason to stop asking
  auto calls = fake_symbol<unsigned long long (*)(unsigned, const char*)>(FAKE_AMDSMI_PATH,
                                                                          "fake_amdsmi_calls");
  CHECK(calls != nullptr);
  if (calls != nullptr) {
    CHECK_EQ(calls(0, "amdsmi_get_temp_metric"), 1u);
    CHECK_EQ(calls(1, "amdsmi_get_clock_info(MEM)"), 3u);
  }
  CHECK_EQ(src->failures(), 3u);
}

void test_unavailable() {
  use_amd("devices 1\n");
  setenv(kAmdSmiLibraryEnv, "/nonexistent/libamd_smi.so", 1);
  std::string why = unavailable_reason();
  CHECK(contains(why, "the amd_gpu source is unavailable: cannot open /nonexistent/libamd_smi.so"));
  CHECK(!amdsmi_available(nullptr));

  use_amd("init 34\n");
  why = unavailable_reason();
  CHECK(contains(why, "amdsmi_init(AMDSMI_INIT_AMD_GPUS) failed: "
                      "AMDSMI_STATUS_DRIVER_NOT_LOADED: Driver not loaded (amdsmi status 34)"));

  use_amd("devices 0\n");
  std::string reason;
  CHECK(!amdsmi_available(&reason));
  CHECK(reason == "amdsmi found no AMD GPU");
}

void test_numbered_after_nvml() {
  const std::string nvml_script = g_dir + "/nvml.txt";
  std::ofstream(nvml_script) << "devices 2\n";
  setenv("FAKE_NVML_SCRIPT", nvml_script.c_str(), 1);
  use_amd("devices 1\n", FAKE_NVML_PATH);
  auto src = make_amd_gpu_source(SourceOptions{});
  CHECK(src->columns()[0].name == "gpu.2.util_pct");
  CHECK(!contains(std::string(src->columns()[0].help), "NVML"));
}

// One amdsmi_init while anyone holds the library; amdsmi_shut_down when the last holder goes.
void test_init_once_while_held() {
  use_amd("devices 1\n");
  auto initialised = fake_symbol<int (*)()>(FAKE_AMDSMI_PATH, "fake_amdsmi_initialised");
  {
    auto a = AmdSmiLibrary::acquire();
    auto b = AmdSmiLibrary::acquire();
    CHECK(a == b && a->loaded());
    if (initialised == nullptr) initialised = fake_symbol<int (*)()>(FAKE_AMDSMI_PATH,
                                                                     "fake_amdsmi_initialised");
    CHECK(initialised != nullptr && initialised() == 1);
  }
  CHECK(initialised != nullptr && initialised() == 0);
  use_amd("devices 3\n");  // a new holder initialises again and re-reads the script
  auto c = AmdSmiLibrary::acquire();
  CHECK_EQ(c->gpus().size(), 3u);
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/stroboscope-amdsmi-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  g_dir = tmpl;
  test_energy_delta();
  test_values_and_wrap();
  test_not_supported_and_failures();
  test_unavailable();
  test_numbered_after_nvml();
  test_init_once_while_held();
  std::string cleanup = "rm -rf '" + g_dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
  TEST_MAIN_END();
}
