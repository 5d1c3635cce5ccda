// The "gpu" source's tables (columns, NVML queries, batch fields, which queries feed which
// column) and its per-device state, shared by nvml_device*.cpp (building and reading) and
// nvml_status.cpp (saying what is unavailable and why). Internal to cpp/src.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "call_budget.hpp"
#include "nvml_internal.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/nvml.hpp"

namespace stroboscope {
namespace nvml_detail {

// The columns of one device, in order.
enum Metric : std::size_t {
  kUtil, kMemUtil, kMemUsed, kMemFree, kMemTotal, kMemAllocPct, kTemp, kPower, kPowerLimit,
  kPowerPct, kEnergy, kEnergyReadAt, kSmClock, kMemClock, kGfxClock, kFan, kClockReasons, kPcieTx, kPcieRx,
  kPcieTxRate, kPcieRxRate, kNvlinkTx, kNvlinkRx, kNvlinkTxRate, kNvlinkRxRate,
  kEccCorrected, kEccUncorrected, kProcMem, kProcSm, kProcMemUtil, kProcEncUtil, kProcDecUtil,
  kOtherProcs, kMetricCount
};

struct MetricSpec {
  const char* suffix;
  const char* unit;
  DType dtype;
  Kind kind;
  const char* help;
};

inline constexpr MetricSpec kMetrics[kMetricCount] = {
    {"util_pct", "%", DType::kFloat64, Kind::kGauge,
     "Percent of the driver's last sample period (1/6 s to 1 s, by product) in which a kernel ran "
     "on the GPU; NVML averages over that period, so fast rows repeat the latest value."},
    {"mem_util_pct", "%", DType::kFloat64, Kind::kGauge,
     "Percent of the driver's last sample period (1/6 s to 1 s, by product) in which device "
     "memory was read or written, averaged like util_pct."},
    {"mem_used_bytes", "bytes", DType::kInt64, Kind::kGauge,
     "Device memory NVML reports as used (allocations plus what the driver reserves)."},
    {"mem_free_bytes", "bytes", DType::kInt64, Kind::kGauge,
     "Device memory NVML reports as free."},
    {"mem_total_bytes", "bytes", DType::kInt64, Kind::kGauge, "Total device memory."},
    {"mem_allocated_pct", "%", DType::kFloat64, Kind::kGauge,
     "Used device memory as a percentage of the total (used / total * 100)."},
    {"temp_c", "celsius", DType::kFloat64, Kind::kGauge, "GPU die temperature."},
    {"power_w", "W", DType::kFloat64, Kind::kGauge,
     "Board power draw: instantaneous where the driver has the POWER_INSTANT field, else NVML's "
     "power reading (a 1 s average on recent GPUs)."},
    {"power_limit_w", "W", DType::kFloat64, Kind::kGauge,
     "Power limit the driver enforces now."},
    {"power_pct", "%", DType::kFloat64, Kind::kGauge,
     "Power draw as a percentage of the enforced power limit."},
    {"energy_mj", "mJ", DType::kInt64, Kind::kCounter,
     "Energy the GPU consumed since this source's first reading, from NVML's total energy "
     "counter (wrap-safe). Where reading the counter is dear (~2.7 ms on an H200 in a VM) it is "
     "read at most every 20 times its cost, null in between; gpu_status() lists such calls."},
    {"read_mono_ns", "ns", DType::kInt64, Kind::kGauge,
     "CLOCK_MONOTONIC time (ns) at which this GPU's energy (and, where the same batched call "
     "brought them, power and PCIe/NVLink counters) was read: a poll reads the GPUs one after "
     "another, so this is later than gpu.read_mono_ns, the poll's start, by the GPUs before it. "
     "Energy windows time this GPU's readings by it."},
    {"sm_clock_mhz", "MHz", DType::kInt64, Kind::kGauge, "Current SM clock."},
    {"mem_clock_mhz", "MHz", DType::kInt64, Kind::kGauge, "Current memory clock."},
    {"graphics_clock_mhz", "MHz", DType::kInt64, Kind::kGauge, "Current graphics clock."},
    {"fan_pct", "%", DType::kFloat64, Kind::kGauge,
     "Fan speed as a percentage of its maximum (null on passively cooled GPUs)."},
    {"clock_event_reasons", "bitmask", DType::kInt64, Kind::kGauge,
     "Bitmask of NVML clock event (throttle) reasons holding clocks down: idle, power cap, "
     "thermal and others."},
    {"pcie_tx_bytes", "bytes", DType::kInt64, Kind::kCounter,
     "Bytes the GPU sent over PCIe since this source's first reading."},
    {"pcie_rx_bytes", "bytes", DType::kInt64, Kind::kCounter,
     "Bytes the GPU received over PCIe since this source's first reading."},
    {"pcie_tx_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
     "Bytes per second the GPU sent over PCIe, over windows of at least rate_window timed by "
     "the driver's own timestamps of the counter readings."},
    {"pcie_rx_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
     "Bytes per second the GPU received over PCIe, windowed and timed like "
     "pcie_tx_bytes_per_s."},
    {"nvlink_tx_bytes", "bytes", DType::kInt64, Kind::kCounter,
     "Payload bytes the GPU sent over all its NVLinks since this source's first reading (the "
     "driver counts KiB)."},
    {"nvlink_rx_bytes", "bytes", DType::kInt64, Kind::kCounter,
     "Payload bytes the GPU received over all its NVLinks since this source's first reading "
     "(the driver counts KiB)."},
    {"nvlink_tx_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
     "Bytes per second sent over all NVLinks, windowed and timed like pcie_tx_bytes_per_s."},
    {"nvlink_rx_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
     "Bytes per second received over all NVLinks, windowed and timed like "
     "pcie_tx_bytes_per_s."},
    {"ecc_corrected", "count", DType::kInt64, Kind::kGauge,
     "Corrected (single-bit) ECC errors since the driver loaded (NVML's volatile total)."},
    {"ecc_uncorrected", "count", DType::kInt64, Kind::kGauge,
     "Uncorrected (double-bit) ECC errors since the driver loaded (NVML's volatile total)."},
    {"proc_mem_bytes", "bytes", DType::kInt64, Kind::kGauge,
     "GPU memory the monitored process and its descendants use on this GPU (0 when none has "
     "a context here)."},
    {"proc_sm_util_pct", "%", DType::kFloat64, Kind::kGauge,
     "SM utilisation of the monitored process and its descendants (summed), each from its "
     "latest per-process sample of the driver (an average over 1/6 s to 1 s); 0 when the "
     "driver's newer samples list none of them. Not a copy of the device's util_pct."},
    {"proc_mem_util_pct", "%", DType::kFloat64, Kind::kGauge,
     "Device memory read/write utilisation of the monitored process and its descendants, from "
     "the same per-process samples as proc_sm_util_pct."},
    {"proc_enc_util_pct", "%", DType::kFloat64, Kind::kGauge,
     "Video encoder utilisation of the monitored process and its descendants, from the same "
     "per-process samples."},
    {"proc_dec_util_pct", "%", DType::kFloat64, Kind::kGauge,
     "Video decoder utilisation of the monitored process and its descendants, from the same "
     "per-process samples."},
    {"other_procs", "count", DType::kInt64, Kind::kGauge,
     "Number of processes outside the monitored tree with a context on this GPU, so a shared "
     "GPU shows as shared."},
};

// The NVML calls a device read makes; each can be disabled on its own.
enum Query : std::size_t {
  kQFieldValues, kQMemoryV2, kQMemory, kQUtil, kQTemp, kQPowerUsage, kQPowerLimit, kQEnergy,
  kQClockSm, kQClockMem, kQClockGfx, kQFan, kQClockReasons, kQEccCorrected, kQEccUncorrected,
  kQComputeProcs, kQGraphicsProcs, kQProcUtil, kQueryCount
};

// Whether this NVML library exports the function behind a query.
template <auto kMember>
constexpr bool exported(const NvmlFunctions& f) noexcept {
  return f.*kMember != nullptr;
}

struct QuerySpec {
  Query query;
  const char* name;  // the NVML call, as gpu_status() names it
  bool (*present)(const NvmlFunctions& f) noexcept;
};

// One entry per Query, in enum order (checked below): a query whose function the library lacks
// is disabled from the start.
inline constexpr QuerySpec kQueries[] = {
    {kQFieldValues, "nvmlDeviceGetFieldValues", exported<&NvmlFunctions::device_get_field_values>},
    {kQMemoryV2, "nvmlDeviceGetMemoryInfo_v2",
     exported<&NvmlFunctions::device_get_memory_info_v2>},
    {kQMemory, "nvmlDeviceGetMemoryInfo", exported<&NvmlFunctions::device_get_memory_info>},
    {kQUtil, "nvmlDeviceGetUtilizationRates",
     exported<&NvmlFunctions::device_get_utilization_rates>},
    {kQTemp, "nvmlDeviceGetTemperature", exported<&NvmlFunctions::device_get_temperature>},
    {kQPowerUsage, "nvmlDeviceGetPowerUsage", exported<&NvmlFunctions::device_get_power_usage>},
    {kQPowerLimit, "nvmlDeviceGetEnforcedPowerLimit",
     exported<&NvmlFunctions::device_get_enforced_power_limit>},
    {kQEnergy, "nvmlDeviceGetTotalEnergyConsumption",
     exported<&NvmlFunctions::device_get_total_energy_consumption>},
    {kQClockSm, "nvmlDeviceGetClockInfo(SM)", exported<&NvmlFunctions::device_get_clock_info>},
    {kQClockMem, "nvmlDeviceGetClockInfo(MEM)", exported<&NvmlFunctions::device_get_clock_info>},
    {kQClockGfx, "nvmlDeviceGetClockInfo(GRAPHICS)",
     exported<&NvmlFunctions::device_get_clock_info>},
    {kQFan, "nvmlDeviceGetFanSpeed", exported<&NvmlFunctions::device_get_fan_speed>},
    {kQClockReasons, "nvmlDeviceGetCurrentClocksEventReasons",
     exported<&NvmlFunctions::device_get_clocks_event_reasons>},
    {kQEccCorrected, "nvmlDeviceGetTotalEccErrors(CORRECTED)",
     exported<&NvmlFunctions::device_get_total_ecc_errors>},
    {kQEccUncorrected, "nvmlDeviceGetTotalEccErrors(UNCORRECTED)",
     exported<&NvmlFunctions::device_get_total_ecc_errors>},
    {kQComputeProcs, "nvmlDeviceGetComputeRunningProcesses",
     exported<&NvmlFunctions::device_get_compute_running_processes>},
    {kQGraphicsProcs, "nvmlDeviceGetGraphicsRunningProcesses",
     exported<&NvmlFunctions::device_get_graphics_running_processes>},
    {kQProcUtil, "nvmlDeviceGetProcessUtilization",
     exported<&NvmlFunctions::device_get_process_utilization>},
};

// The fields of the per-device batch.
enum Field : std::size_t {
  kFPowerInstant, kFPowerLimit, kFEnergy, kFPcieTx, kFPcieRx, kFNvlinkTx, kFNvlinkRx, kFEccSbe,
  kFEccDbe, kFieldCount
};

struct FieldSpec {
  Field field;
  unsigned id;       // NVML_FI_*
  unsigned scope;    // scope_id: 0 for the GPU, kScopeAllLinks for the sum over NVLinks
  // Probed when the source is built: a field the device cannot give (NOT_SUPPORTED, ...) then
  // has no column at all, rather than a column that is null on every row.
  bool probed;
  const char* name;  // its name in nvml.h, for gpu_status()
};

// One entry per Field, in enum order (checked below).
inline constexpr FieldSpec kFields[] = {
    {kFPowerInstant, nvml::kFieldPowerInstant, 0, false, "NVML_FI_DEV_POWER_INSTANT"},
    {kFPowerLimit, nvml::kFieldPowerCurrentLimit, 0, false, "NVML_FI_DEV_POWER_CURRENT_LIMIT"},
    {kFEnergy, nvml::kFieldTotalEnergyConsumption, 0, false,
     "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION"},
    {kFPcieTx, nvml::kFieldPcieCountTxBytes, 0, true, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES"},
    {kFPcieRx, nvml::kFieldPcieCountRxBytes, 0, true, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES"},
    {kFNvlinkTx, nvml::kFieldNvlinkThroughputDataTx, nvml::kScopeAllLinks, true,
     "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"},
    {kFNvlinkRx, nvml::kFieldNvlinkThroughputDataRx, nvml::kScopeAllLinks, true,
     "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX"},
    {kFEccSbe, nvml::kFieldEccSbeVolTotal, 0, false, "NVML_FI_DEV_ECC_SBE_VOL_TOTAL"},
    {kFEccDbe, nvml::kFieldEccDbeVolTotal, 0, false, "NVML_FI_DEV_ECC_DBE_VOL_TOTAL"},
};

// Whether a table indexed by an enum lists every value once, at its own index.
template <typename Entry, std::size_t kSize, typename Key>
constexpr bool indexed_by(const Entry (&table)[kSize], Key Entry::*key, std::size_t count) {
  if (kSize != count) return false;
  for (std::size_t i = 0; i < kSize; ++i) {
    if (static_cast<std::size_t>(table[i].*key) != i) return false;
  }
  return true;
}
// So a new Query or Field without its entry (or entries out of order) does not compile.
static_assert(indexed_by(kQueries, &QuerySpec::query, kQueryCount),
              "kQueries needs one entry per Query, in enum order");
static_assert(indexed_by(kFields, &FieldSpec::field, kFieldCount),
              "kFields needs one entry per Field, in enum order");

// A way to read a metric: a field of the batch or a query.
struct Path {
  bool field;
  std::size_t id;
};
struct MetricPaths {
  Path paths[3];
  std::size_t n;
};

// Which paths feed each metric (a metric is unavailable when all of them are disabled).
inline constexpr MetricPaths kMetricPaths[kMetricCount] = {
    {{{false, kQUtil}}, 1},                                         // util_pct
    {{{false, kQUtil}}, 1},                                         // mem_util_pct
    {{{false, kQMemoryV2}, {false, kQMemory}}, 2},                  // mem_used_bytes
    {{{false, kQMemoryV2}, {false, kQMemory}}, 2},                  // mem_free_bytes
    {{{false, kQMemoryV2}, {false, kQMemory}}, 2},                  // mem_total_bytes
    {{{false, kQMemoryV2}, {false, kQMemory}}, 2},                  // mem_allocated_pct
    {{{false, kQTemp}}, 1},                                         // temp_c
    {{{true, kFPowerInstant}, {false, kQPowerUsage}}, 2},           // power_w
    {{{true, kFPowerLimit}, {false, kQPowerLimit}}, 2},             // power_limit_w
    {{{true, kFPowerInstant}, {false, kQPowerUsage}}, 2},           // power_pct (and the limit)
    {{{true, kFEnergy}, {false, kQEnergy}}, 2},                     // energy_mj
    {{{true, kFEnergy}, {false, kQEnergy}}, 2},                     // read_mono_ns
    {{{false, kQClockSm}}, 1},                                      // sm_clock_mhz
    {{{false, kQClockMem}}, 1},                                     // mem_clock_mhz
    {{{false, kQClockGfx}}, 1},                                     // graphics_clock_mhz
    {{{false, kQFan}}, 1},                                          // fan_pct
    {{{false, kQClockReasons}}, 1},                                 // clock_event_reasons
    {{{true, kFPcieTx}}, 1},                                        // pcie_tx_bytes
    {{{true, kFPcieRx}}, 1},                                        // pcie_rx_bytes
    {{{true, kFPcieTx}}, 1},                                        // pcie_tx_bytes_per_s
    {{{true, kFPcieRx}}, 1},                                        // pcie_rx_bytes_per_s
    {{{true, kFNvlinkTx}}, 1},                                      // nvlink_tx_bytes
    {{{true, kFNvlinkRx}}, 1},                                      // nvlink_rx_bytes
    {{{true, kFNvlinkTx}}, 1},                                      // nvlink_tx_bytes_per_s
    {{{true, kFNvlinkRx}}, 1},                                      // nvlink_rx_bytes_per_s
    {{{true, kFEccSbe}, {false, kQEccCorrected}}, 2},               // ecc_corrected
    {{{true, kFEccDbe}, {false, kQEccUncorrected}}, 2},             // ecc_uncorrected
    {{{false, kQComputeProcs}, {false, kQGraphicsProcs}}, 2},       // proc_mem_bytes
    {{{false, kQProcUtil}}, 1},                                     // proc_sm_util_pct
    {{{false, kQProcUtil}}, 1},                                     // proc_mem_util_pct
    {{{false, kQProcUtil}}, 1},                                     // proc_enc_util_pct
    {{{false, kQProcUtil}}, 1},                                     // proc_dec_util_pct
    {{{false, kQComputeProcs}, {false, kQGraphicsProcs}}, 2},       // other_procs
};

// kMetrics and kMetricPaths are sized by kMetricCount, so an extra entry does not compile; a
// missing one would be zero-filled, which this catches.
constexpr bool every_metric_described() {
  for (std::size_t m = 0; m < kMetricCount; ++m) {
    if (kMetrics[m].suffix == nullptr || kMetrics[m].help == nullptr || kMetricPaths[m].n == 0) {
      return false;
    }
  }
  return true;
}
static_assert(every_metric_described(), "kMetrics and kMetricPaths need an entry per Metric");

// Largest pid Linux hands out (PID_MAX_LIMIT on 64-bit).
inline constexpr unsigned kMaxPid = 4194304;

// A cumulative counter reported "since this source's first reading".
struct SinceStart {
  bool started = false;
  std::uint64_t previous = 0;
  std::uint64_t total = 0;

  std::uint64_t update(std::uint64_t reading) noexcept {
    if (started) total += nvml_counter_delta(previous, reading);
    started = true;
    previous = reading;
    return total;
  }
};

// A cumulative counter of the field batch in `unit` bytes (1 for PCIe, 1024 for NVLink's KiB):
// bytes since this source's first reading and bytes per second over windows of at least the
// source's rate window. The window is timed by the driver's own timestamp of each reading (µs of
// CLOCK_REALTIME, taken when the driver read the counter), so the time a poll spent waiting in
// NVML does not bend the rate; a reading without a timestamp is timed by the read's monotonic
// clock, and a switch between the two clocks starts a new window rather than mixing them.
struct FieldCounter {
  SinceStart total;
  detail::WindowedRate rate{0};
  std::int64_t window_ns = 0;
  bool stamped = false;  // the window in progress is timed by driver timestamps

  void set_window(std::int64_t ns) noexcept {
    window_ns = ns;
    rate = detail::WindowedRate(ns);
  }
  // Takes a reading; returns the bytes since start and sets *per_s when a window closed.
  std::uint64_t update(std::uint64_t reading, std::uint64_t unit, std::int64_t driver_us,
                       std::int64_t now_ns, bool* has_rate, double* per_s) noexcept {
    const std::uint64_t bytes = total.update(reading) * unit;
    const bool with_stamp = driver_us > 0;
    if (with_stamp != stamped) {
      rate = detail::WindowedRate(window_ns);
      stamped = with_stamp;
    }
    *has_rate = rate.update(bytes, with_stamp ? driver_us * 1000 : now_ns, per_s);
    return bytes;
  }
};

// The column of a metric a device does not have (its fields were found unsupported when the
// source was built).
inline constexpr std::size_t kNoColumn = static_cast<std::size_t>(-1);

}  // namespace nvml_detail

struct NvmlSource::DeviceState {
  nvml_detail::Identity id;
  std::string label;
  // The column of each metric, or kNoColumn where the device has none.
  std::size_t col[nvml_detail::kMetricCount] = {};

  // Why each query / field is no longer asked (0: still asked). Written by read(), read by
  // device_status() on any thread; each value stands alone, so relaxed order is enough.
  std::atomic<int> query_code[nvml_detail::kQueryCount]{};
  std::atomic<int> field_code[nvml_detail::kFieldCount]{};
  // Why this device reads only nulls (0: it does not); `fail_what` names the call. fail_what is
  // stored before fail_code with release, so a reader that acquires a code sees its call.
  std::atomic<int> fail_code{0};
  std::atomic<const char*> fail_what{nullptr};

  struct Mig {
    std::size_t col_used = 0;
    std::size_t col_total = 0;
    std::atomic<int> code{0};
  };
  std::vector<std::unique_ptr<Mig>> mig;

  // The call budget of each query and field (nvml_detail::CallBudget).
  nvml_detail::CallBudget query_budget[nvml_detail::kQueryCount];
  nvml_detail::CallBudget field_budget[nvml_detail::kFieldCount];
  bool fields_split = false;  // the batch was found dear: its fields are timed one by one

  // State of the reading thread only.
  nvml_detail::SinceStart energy;
  nvml_detail::FieldCounter pcie_tx, pcie_rx, nvlink_tx, nvlink_rx;
  unsigned long long proc_util_last_seen_us = 0;
  bool proc_util_known = false;
  double proc_util[4] = {};  // SM, memory, encoder, decoder % of the latest sample
  std::vector<unsigned char> compute_buf, graphics_buf;  // max_processes * kProcessInfoMaxStride
  std::vector<nvml::ProcessUtilizationSample> util_buf;
  std::vector<unsigned> other_pids;                      // 2 * max_processes
  // The tree's entries of the process lists (pid, bytes) and of the utilisation samples.
  std::vector<std::pair<unsigned, unsigned long long>> mine_mem;  // 2 * max_processes
  std::vector<nvml::ProcessUtilizationSample> mine_util;          // max_processes

  bool failed() const noexcept { return fail_code.load(std::memory_order_relaxed) != 0; }
  bool usable(nvml_detail::Query q) const noexcept {
    return query_code[q].load(std::memory_order_relaxed) == 0;
  }
  bool field_usable(nvml_detail::Field f) const noexcept {
    return usable(nvml_detail::kQFieldValues) && field_code[f].load(std::memory_order_relaxed) == 0;
  }
};

}  // namespace stroboscope
