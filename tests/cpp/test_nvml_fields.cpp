// The "gpu" source's field counters (PCIe and NVLink bytes, their rates timed by the driver's
// timestamps, columns absent where a field is unsupported) and the monitored process's
// utilisation shares, on the fake NVML library (tests/fake_nvml/fake_nvml.c).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "nvml_fixture.hpp"

namespace {

using namespace stroboscope;

// Byte counters since start and their rates, hand-computed from the script below. The probe
// made when the source is built takes each counter's first value and the fields' first
// timestamp (call 0); the reads then see calls 1, 2, 3 at 1.5 s, 2.0 s, 2.5 s.
void test_link_counters_and_rates() {
  use_script(
      "field_time 0 1000000 500000\n"       // call n is stamped 1 s + n * 0.5 s
      "set 0 pcie_tx 0 1000 3000 3000\n"      // bytes
      "set 0 pcie_rx 0 4294967000 200 200\n"  // wraps at 2^32 between reads 1 and 2
      "set 0 nvlink_tx 5 10 30 30\n"          // KiB
      "set 0 nvlink_rx 0 0 0 1\n");
  NvmlSource src(NvmlSourceOptions{});
  for (const char* name : {"gpu.0.pcie_tx_bytes_per_s", "gpu.0.nvlink_rx_bytes_per_s"}) {
    Row probe(src);
    const ColumnSpec& c = src.columns()[probe.col(name)];
    CHECK(c.unit == "bytes/s" && c.kind == Kind::kRate && c.dtype == DType::kFloat64);
  }
  Row row(src);
  // The read's own clock is deliberately far from the driver's stamps: rates must not use it.
  row.read(1'000'000);
  CHECK_EQ(row.i64("gpu.0.pcie_tx_bytes"), 0);
  CHECK_EQ(row.i64("gpu.0.nvlink_tx_bytes"), 0);
  CHECK(!row.has("gpu.0.pcie_tx_bytes_per_s"));  // the first reading opens the window
  row.read(2'000'000);
  CHECK_EQ(row.i64("gpu.0.pcie_tx_bytes"), 2000);
  CHECK_EQ(row.i64("gpu.0.pcie_rx_bytes"), 496);           // 296 to the top + 200 after it
  CHECK_EQ(row.i64("gpu.0.nvlink_tx_bytes"), 20 * 1024);   // KiB -> bytes
  CHECK_EQ(row.i64("gpu.0.nvlink_rx_bytes"), 0);
  CHECK(row.f64("gpu.0.pcie_tx_bytes_per_s") == 4000.0);   // 2000 B / 0.5 s
  CHECK(row.f64("gpu.0.pcie_rx_bytes_per_s") == 992.0);    // 496 B / 0.5 s
  CHECK(row.f64("gpu.0.nvlink_tx_bytes_per_s") == 40960.0);
  CHECK(row.f64("gpu.0.nvlink_rx_bytes_per_s") == 0.0);
  row.read(3'000'000);
  CHECK_EQ(row.i64("gpu.0.pcie_tx_bytes"), 2000);
  CHECK(row.f64("gpu.0.pcie_tx_bytes_per_s") == 0.0);
  CHECK(row.f64("gpu.0.nvlink_rx_bytes_per_s") == 2048.0);  // 1 KiB / 0.5 s
  CHECK(src.reason() == nullptr);
}

// Without driver timestamps the rate is timed by the read's monotonic clock, over windows of at
// least rate_window_ns: a read inside the window leaves the rate null and keeps the baseline.
void test_rates_without_timestamps() {
  use_script("set 0 pcie_tx 0 0 100 300 700\n");
  NvmlSourceOptions o;
  o.rate_window_ns = 100'000'000;
  NvmlSource src(o);
  Row row(src);
  row.read(1'000'000'000);
  row.read(1'050'000'000);  // 50 ms: inside the window
  CHECK_EQ(row.i64("gpu.0.pcie_tx_bytes"), 100);
  CHECK(!row.has("gpu.0.pcie_tx_bytes_per_s"));
  row.read(1'200'000'000);  // 300 bytes over 200 ms since the window opened
  CHECK(row.f64("gpu.0.pcie_tx_bytes_per_s") == 1500.0);
  row.read(1'250'000'000);
  CHECK(!row.has("gpu.0.pcie_tx_bytes_per_s"));
  CHECK_EQ(row.i64("gpu.0.pcie_tx_bytes"), 700);
}

// A field the device cannot give has no column, and gpu_status() says which field and why; the
// other counters are unaffected.
void test_unsupported_field_has_no_column() {
  use_script(
      "devices 2\n"
      "fail 0 field:138 NOT_SUPPORTED\n"
      "fail 1 nvmlDeviceGetFieldValues GPU_IS_LOST after 1\n"  // lost after the probe
      "set 0 nvlink_rx 1 2\n");
  NvmlSource src(NvmlSourceOptions{});
  Row row(src);
  const std::size_t none = src.columns().size();
  CHECK_EQ(row.col("gpu.0.nvlink_tx_bytes"), none);
  CHECK_EQ(row.col("gpu.0.nvlink_tx_bytes_per_s"), none);
  CHECK(row.col("gpu.0.nvlink_rx_bytes") < none);
  CHECK(row.col("gpu.1.nvlink_tx_bytes") < none);  // lost later: its columns stay (null)
  row.read(1);
  CHECK_EQ(row.i64("gpu.0.nvlink_rx_bytes"), 0);
  CHECK(!row.has("gpu.1.nvlink_tx_bytes"));
  CHECK(!row.has("gpu.1.temp_c"));
  const auto st = src.device_status();
  CHECK_EQ(st.size(), 2u);
  if (st.size() == 2) {
    const NvmlUnavailable* tx = unavailable(st[0], "nvlink_tx_bytes");
    CHECK(tx != nullptr && contains(tx->reason, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX") &&
          contains(tx->reason, "NVML_ERROR_NOT_SUPPORTED"));
    CHECK(unavailable(st[0], "nvlink_rx_bytes") == nullptr);
    CHECK(contains(st[1].error, "NVML_ERROR_GPU_IS_LOST"));
  }
}

// SM, memory, encoder and decoder shares of the monitored process, from its latest sample.
void test_process_shares() {
  use_script(
      "process_util 0 self 40/10/5/0 55/20/0/30\n"
      "process_util 0 4242 90/90/90/90\n");
  NvmlSource src(NvmlSourceOptions{});
  Row row(src);
  row.read();
  CHECK(row.f64("gpu.0.proc_sm_util_pct") == 40.0);
  CHECK(row.f64("gpu.0.proc_mem_util_pct") == 10.0);
  CHECK(row.f64("gpu.0.proc_enc_util_pct") == 5.0);
  CHECK(row.f64("gpu.0.proc_dec_util_pct") == 0.0);
  CHECK_EQ(row.i64("gpu.0.other_procs"), 1);
  row.read();
  CHECK(row.f64("gpu.0.proc_sm_util_pct") == 55.0);
  CHECK(row.f64("gpu.0.proc_mem_util_pct") == 20.0);
  CHECK(row.f64("gpu.0.proc_enc_util_pct") == 0.0);
  CHECK(row.f64("gpu.0.proc_dec_util_pct") == 30.0);
}

// The tree: a child's samples and memory count with the monitored process's, a process outside
// the tree (pid 1) counts among the others; without children only the process itself counts.
void test_process_tree() {
  const pid_t child = fork();
  if (child == 0) {
    pause();  // killed below
    _exit(0);
  }
  CHECK(child > 0);
  const std::string c = std::to_string(child);
  use_script("process 0 " + c + " 1000\n" + "process_util 0 " + c +
             " 20/1/2/3\n"
             "process_util 0 self 30/4/0/0\n"
             "process 0 1 4096\n");
  {
    NvmlSource src(NvmlSourceOptions{});
    Row row(src);
    row.read();
    CHECK(row.f64("gpu.0.proc_sm_util_pct") == 50.0);
    CHECK(row.f64("gpu.0.proc_mem_util_pct") == 5.0);
    CHECK(row.f64("gpu.0.proc_enc_util_pct") == 2.0);
    CHECK(row.f64("gpu.0.proc_dec_util_pct") == 3.0);
    CHECK_EQ(row.i64("gpu.0.proc_mem_bytes"), 1000);
    CHECK_EQ(row.i64("gpu.0.other_procs"), 1);
  }
  use_script("process 0 " + c + " 1000\n" + "process_util 0 " + c +
             " 20/1/2/3\n"
             "process_util 0 self 30/4/0/0\n");
  {
    NvmlSourceOptions alone;
    alone.include_children = false;
    NvmlSource src(alone);
    Row row(src);
    row.read();
    CHECK(row.f64("gpu.0.proc_sm_util_pct") == 30.0);
    CHECK(row.f64("gpu.0.proc_mem_util_pct") == 4.0);
    CHECK_EQ(row.i64("gpu.0.proc_mem_bytes"), 0);
    CHECK_EQ(row.i64("gpu.0.other_procs"), 1);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// While a source over every GPU lives, nvml_status() reports what that source's reads found and
// makes no device queries of its own (it used to build a probe and read every metric again:
// on every snapshot, through its provenance, taking the fake's scripted values too).
void test_status_from_the_live_source() {
  use_script("devices 2\nfail 1 fan NOT_SUPPORTED\nset 0 temp 50 51 52\n");
  NvmlSource src(NvmlSourceOptions{});
  Row row(src);
  row.read();
  const unsigned long long temp_calls = fake_calls(0, "nvmlDeviceGetTemperature");
  const NvmlStatus s = nvml_status();
  CHECK_EQ(fake_calls(0, "nvmlDeviceGetTemperature"), temp_calls);
  CHECK_EQ(fake_calls(1, "nvmlDeviceGetFanSpeed"), 1u);
  CHECK_EQ(s.devices.size(), 2u);
  CHECK(s.devices.size() == 2 && unavailable(s.devices[1], "fan_pct") != nullptr);
  row.read();
  CHECK(row.f64("gpu.0.temp_c") == 51.0);  // the scripted sequence is the source's alone
  {
    NvmlSource only_one({1}, 0);  // covers one GPU of two: not used for the status
  }
  NvmlSourceOptions one;
  one.devices = {0};
  NvmlSource partial(one);
  const NvmlStatus again = nvml_status();
  CHECK(again.devices.size() == 2 && again.devices[0].index == 0 && again.devices[1].index == 1);
}

}  // namespace

int main() {
  char tmpl[] = "/tmp/stroboscope-nvml-fields-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  g_dir = tmpl;
  test_link_counters_and_rates();
  test_rates_without_timestamps();
  test_unsupported_field_has_no_column();
  test_process_shares();
  test_process_tree();
  test_status_from_the_live_source();
  std::string cleanup = "rm -rf '" + g_dir + "'";
  if (std::system(cleanup.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
  TEST_MAIN_END();
}
