// NVML loader and status against the scripted fake libnvidia-ml (tests/fake_nvml/fake_nvml.c),
// loaded through STROBOSCOPE_NVML_LIBRARY like the real one: a missing library, nvmlInit errors,
// the status report, UUID lookup, choosing GPUs, and the fake's own defaults.
#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
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
    CHECK_EQ(src.columns().size(), 66u);
    CHECK(src.columns().front().name == "gpu.a.util_pct");
    CHECK(src.device_indices() == std::vector<unsigned>({2, 0}));
    Row row(src);
    row.read();
    CHECK(row.f64("gpu.a.temp_c") == 77.0);
    CHECK(row.f64("gpu.b.temp_c") == 33.0);
  }
  {
    NvmlSource one({1}, 0);
    CHECK_EQ(one.columns().size(), 33u);
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
  test_uuid_lookup();
  test_selection();
  test_fake_defaults_and_bad_script();

  std::string cleanup = "rm -rf '" + g_dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
  TEST_MAIN_END();
}
