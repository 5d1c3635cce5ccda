// NVML at run time: the loader (dlopen of libnvidia-ml, versioned symbols, init once per process),
// the status the user reads (`stroboscope.gpu_status()`), the "gpu" source and the collector of
// driver-buffered samples.
//
// Absence is normal: no library, no GPU or a failing call gives zero GPUs or null cells plus a
// reason the user can read. Nothing here includes an NVML header; see nvml_api.hpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stroboscope/nvml_api.hpp"
#include "stroboscope/source.hpp"

namespace stroboscope {

namespace nvml_detail {
class ProcessTree;
}

// ---- loader ----------------------------------------------------------------------------------

// The library opened when STROBOSCOPE_NVML_LIBRARY is unset or empty.
inline constexpr const char* kNvmlDefaultLibrary = "libnvidia-ml.so.1";
// The environment variable that overrides it (a path or a soname).
inline constexpr const char* kNvmlLibraryEnv = "STROBOSCOPE_NVML_LIBRARY";

// Every NVML function stroboscope calls; nullptr where this driver's library lacks the symbol.
// Where NVML has versions, the newest one found is stored (see NvmlLibrary::symbols()).
struct NvmlFunctions {
  nvml::InitFn init = nullptr;                 // nvmlInit_v2 -> nvmlInit            (required)
  nvml::ShutdownFn shutdown = nullptr;         // nvmlShutdown                       (required)
  nvml::ErrorStringFn error_string = nullptr;  // nvmlErrorString
  nvml::SystemGetStringFn system_get_driver_version = nullptr;
  nvml::SystemGetStringFn system_get_nvml_version = nullptr;
  nvml::DeviceGetCountFn device_get_count = nullptr;  // _v2 -> plain              (required)
  nvml::DeviceGetHandleByIndexFn device_get_handle_by_index = nullptr;  // _v2 -> plain (required)
  nvml::DeviceGetStringFn device_get_name = nullptr;
  nvml::DeviceGetStringFn device_get_uuid = nullptr;
  nvml::DeviceGetMemoryInfoV2Fn device_get_memory_info_v2 = nullptr;
  nvml::DeviceGetMemoryInfoFn device_get_memory_info = nullptr;
  nvml::DeviceGetUtilizationRatesFn device_get_utilization_rates = nullptr;
  nvml::DeviceGetTemperatureFn device_get_temperature = nullptr;
  nvml::DeviceGetUintFn device_get_power_usage = nullptr;
  nvml::DeviceGetUintFn device_get_enforced_power_limit = nullptr;
  nvml::DeviceGetUllFn device_get_total_energy_consumption = nullptr;
  nvml::DeviceGetClockInfoFn device_get_clock_info = nullptr;
  nvml::DeviceGetUintFn device_get_fan_speed = nullptr;
  // nvmlDeviceGetCurrentClocksEventReasons -> nvmlDeviceGetCurrentClocksThrottleReasons
  nvml::DeviceGetUllFn device_get_clocks_event_reasons = nullptr;
  nvml::DeviceGetTotalEccErrorsFn device_get_total_ecc_errors = nullptr;
  nvml::DeviceGetFieldValuesFn device_get_field_values = nullptr;
  // _v3 -> _v2 -> plain; the version found decides the element layout (1: ProcessInfoV1).
  nvml::DeviceGetRunningProcessesFn device_get_compute_running_processes = nullptr;
  int compute_processes_version = 0;
  nvml::DeviceGetRunningProcessesFn device_get_graphics_running_processes = nullptr;
  int graphics_processes_version = 0;
  nvml::DeviceGetProcessUtilizationFn device_get_process_utilization = nullptr;
  nvml::DeviceGetSamplesFn device_get_samples = nullptr;
  nvml::DeviceGetMigModeFn device_get_mig_mode = nullptr;
  nvml::DeviceGetUintFn device_get_max_mig_device_count = nullptr;
  nvml::DeviceGetMigDeviceHandleByIndexFn device_get_mig_device_handle_by_index = nullptr;
  // GPM (all five or none is useful; see NvmlGpmSource).
  nvml::GpmQueryDeviceSupportFn gpm_query_device_support = nullptr;
  nvml::GpmSampleAllocFn gpm_sample_alloc = nullptr;
  nvml::GpmSampleFreeFn gpm_sample_free = nullptr;
  nvml::GpmSampleGetFn gpm_sample_get = nullptr;
  nvml::GpmMetricsGetFn gpm_metrics_get = nullptr;
};

// One entry of the symbol table: the names tried, newest first, and the one found.
struct NvmlSymbol {
  std::string wanted;    // the newest name tried, e.g. "nvmlInit_v2"
  std::string resolved;  // the name found, e.g. "nvmlInit"; empty when none was
  bool required = false;
};

// The NVML library opened and initialised once per process while anyone holds it: the first
// acquire() opens it and calls nvmlInit, dropping the last holder calls nvmlShutdown; a later
// acquire() starts again (re-reading STROBOSCOPE_NVML_LIBRARY). The dlopen handle itself is never
// closed, so an NVML that registered process-exit work stays mapped.
class NvmlLibrary {
 public:
  // Never null; check loaded(). Thread-safe. Not for the hot path (it may dlopen and nvmlInit).
  [[nodiscard]] static std::shared_ptr<const NvmlLibrary> acquire();

  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // The library was opened, every required symbol was found and nvmlInit succeeded.
  [[nodiscard]] bool loaded() const noexcept { return loaded_; }
  // The file or soname passed to dlopen.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  // Why loaded() is false: the dlerror text, the missing required symbols, or the init error with
  // nvmlErrorString's text. Empty when loaded.
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }
  // nvmlInit's return code; -1 when it was never called (no library or a required symbol missing).
  [[nodiscard]] int init_error() const noexcept { return init_error_; }
  [[nodiscard]] const NvmlFunctions& fn() const noexcept { return fn_; }
  [[nodiscard]] const std::vector<NvmlSymbol>& symbols() const noexcept { return symbols_; }
  // nvmlErrorString's text for `code` (this library's words), or the code's NVML name when the
  // library has no nvmlErrorString. Never null; safe on the hot path.
  [[nodiscard]] const char* error_text(nvml::Return code) const noexcept;

 private:
  NvmlLibrary() = default;
  void load();

  std::string path_;
  std::string reason_;
  int init_error_ = -1;
  bool loaded_ = false;
  NvmlFunctions fn_;
  std::vector<NvmlSymbol> symbols_;
};

// "NVML_ERROR_NOT_SUPPORTED" for 3, "NVML_SUCCESS" for 0, "NVML_ERROR_UNKNOWN" for unknown codes.
[[nodiscard]] const char* nvml_return_name(nvml::Return code) noexcept;

// A wrap-safe difference of two readings of a cumulative NVML counter. A reading below the
// previous one is taken as a 32-bit wrap when the previous one fitted in 32 bits (the counter's
// width on some drivers), else as a counter restart (driver reload): the new reading is the delta.
[[nodiscard]] constexpr std::uint64_t nvml_counter_delta(std::uint64_t previous,
                                                         std::uint64_t current) noexcept {
  if (current >= previous) return current - previous;
  if (previous <= 0xFFFFFFFFull) return (0x100000000ull - previous) + current;
  return current;
}

// ---- status (stroboscope.gpu_status()) -------------------------------------------------------

struct NvmlUnavailable {
  std::string metric;  // the column suffix: "fan_pct", "pcie_tx_bytes", ...
  std::string reason;  // e.g. "nvmlDeviceGetFanSpeed: Not Supported (NVML_ERROR_NOT_SUPPORTED)"
};

struct NvmlMigInstance {
  unsigned index = 0;  // MIG device index on its parent
  std::string uuid;    // "MIG-..."
};

// A call the gpu source makes less often than its poll because of what it costs (the call
// budget: no call takes more than 1/20 of the polling thread's time).
struct NvmlHeldBack {
  std::string call;  // "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetFieldValues(NVML_FI_...)"
  std::int64_t cost_ns = 0;   // the least of its last runs
  std::int64_t every_ns = 0;  // made at most this often
};

struct NvmlDeviceStatus {
  unsigned index = 0;  // NVML index
  std::string name;
  std::string uuid;
  bool mig_enabled = false;
  std::vector<NvmlMigInstance> mig_instances;
  std::string error;   // why this device gives only null cells (lost, query failed); empty if fine
  std::vector<NvmlUnavailable> unavailable;  // metrics that stay null on this device, and why
  std::vector<NvmlHeldBack> held_back;  // of a running source: calls made less often than 1 kHz
};

struct NvmlStatus {
  std::string library_path;
  bool loaded = false;
  std::string reason;     // why not loaded (contains the dlerror / nvmlErrorString text)
  int init_error = -1;    // nvmlInit's code; -1 when not called
  std::string driver_version;
  std::string nvml_version;
  unsigned device_count = 0;
  std::vector<NvmlSymbol> symbols;   // what was resolved, newest name first
  std::vector<std::string> notes;    // caveats the user should know (PID namespaces, ...)
  std::vector<NvmlDeviceStatus> devices;
};

// Loads NVML if needed and describes it: library, versions, devices, and - after one probing
// read of every metric on every device - which metrics are unavailable and why. Slow (ms);
// never throws for a missing library or GPU (that is what the status says).
[[nodiscard]] NvmlStatus nvml_status();

// A readable multi-line summary of a status, for logs and the command line.
[[nodiscard]] std::string format_nvml_status(const NvmlStatus& status);

// The NVML index of the GPU whose UUID is `uuid`, or - for a MIG UUID - of its parent GPU. A
// unique prefix of a UUID matches too ("GPU-8f3a", as CUDA_VISIBLE_DEVICES allows). nullopt when
// NVML is unavailable, nothing matches or the prefix is ambiguous.
[[nodiscard]] std::optional<unsigned> nvml_index_of_uuid(std::string_view uuid);

// ---- the "gpu" source ------------------------------------------------------------------------

struct NvmlSourceOptions {
  std::vector<unsigned> devices;    // NVML indices to sample; empty = every GPU
  std::vector<std::string> labels;  // column label per device ("gpu.{label}."); empty = the index
  int pid = 0;                      // the monitored process; 0 = the calling process
  // The per-process columns (proc_*) cover the monitored process and its descendants, found
  // under proc_root; false: the process alone.
  bool include_children = true;
  std::string proc_root = "/proc";
  unsigned max_processes = 1024;    // per device and list; longer process lists read as null
  // Byte rates (pcie_*_per_s, nvlink_*_per_s) are computed over windows of at least this long.
  std::int64_t rate_window_ns = 100'000'000;
};

// Reads one row per call for every selected GPU: utilisation, memory, temperature, power and
// energy, clocks, fan, clock-event reasons, PCIe and NVLink bytes and rates, ECC counts, and the
// monitored process's share (memory, SM/memory/encoder/decoder %, number of other processes),
// summed over its descendants too (options.include_children).
// See columns() for names, units and help.
//
// The byte counters (PCIe, NVLink) are probed once when the source is built: a device that
// cannot give one has no column for it (and gpu_status() says why). Any other metric the device
// does not support reads null and is not asked again; a lost GPU (or one
// whose queries fail) reads null from then on while the others continue; device_status() says why.
class NvmlSource final : public Source {
 public:
  // Throws std::runtime_error with the loader's reason when NVML is unavailable, and
  // std::invalid_argument for an index >= the device count or labels of the wrong length.
  explicit NvmlSource(const NvmlSourceOptions& options);
  NvmlSource(std::vector<unsigned> devices, int pid);
  ~NvmlSource() override;

  void read(RowWriter row, std::int64_t now_ns) noexcept override;
  // NVML calls take tens to hundreds of µs each: the sampler polls this source on its own thread.
  [[nodiscard]] bool slow() const noexcept override { return true; }
  // The driver's values change at its own rates, none of them per event of ours (see the reason).
  static constexpr std::int64_t kResolutionNs = 10'000'000;
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return kResolutionNs;
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "the driver updates its values at its own rates: utilisation once per sample period "
           "(1/6 s to 1 s by product, nvml.h), power and the energy counter at the power "
           "sensor's rate (every 100 ms on A100/H100, arXiv 2312.02741; tens of ms on older "
           "boards), clocks and memory on driver events; 10 ms sees each update within 10 ms "
           "without a dozen NVML calls per GPU every tick. sources={'gpu': seconds} reads "
           "faster";
  }
  [[nodiscard]] const char* interface() const noexcept override {
    return "nvmlDeviceGetFieldValues + per-metric NVML queries";
  }

  // The NVML indices sampled, in column order.
  [[nodiscard]] const std::vector<unsigned>& device_indices() const noexcept { return indices_; }
  // Per device (in device_indices() order): identity, MIG, failure and unavailable metrics as
  // known so far. Safe to call from another thread while read() runs. Allocates.
  [[nodiscard]] std::vector<NvmlDeviceStatus> device_status() const;
  // NVML calls that returned a passing error (timeout, in use, ...) and left a cell null once.
  [[nodiscard]] std::uint64_t transient_errors() const noexcept {
    return transient_errors_.load(std::memory_order_relaxed);
  }

  struct DeviceState;  // per-device handles, buffers and support flags (nvml_source_state.hpp)

 private:
  void read_device(DeviceState& d, RowWriter& row, std::int64_t now_ns) noexcept;

  std::shared_ptr<const NvmlLibrary> lib_;
  std::vector<unsigned> indices_;
  std::vector<std::unique_ptr<DeviceState>> devices_;
  std::unique_ptr<nvml_detail::ProcessTree> tree_;
  unsigned pid_ = 0;
  unsigned max_processes_ = 0;
  // Written by read(), read anywhere; a count with no data behind it, so relaxed is enough.
  std::atomic<std::uint64_t> transient_errors_{0};
};

// For the registry: the "gpu" source over every GPU for `opts.pid`. Throws like NvmlSource.
[[nodiscard]] std::unique_ptr<Source> make_nvml_source(const SourceOptions& opts);

// Whether NVML loads here with at least one GPU; when not, `*reason` says why. Not for hot paths.
[[nodiscard]] bool nvml_available(std::string* reason);

// ---- driver-buffered samples -----------------------------------------------------------------

enum class NvmlSampleKind : std::uint8_t {
  kPowerW = 0,       // board power, W (the driver reports mW)
  kGpuUtilPct = 1,   // % of time a kernel ran
  kMemUtilPct = 2,   // % of time device memory was read or written
  kSmClockMhz = 3,   // SM (processor) clock, MHz
  kMemClockMhz = 4,  // memory clock, MHz
};
inline constexpr std::size_t kNvmlSampleKindCount = 5;

// "power_w", "gpu_util_pct", "mem_util_pct", "sm_clock_mhz", "mem_clock_mhz".
[[nodiscard]] const char* nvml_sample_kind_name(NvmlSampleKind kind) noexcept;

// One long-form row: a sample the driver took at `driver_time_us` (µs of CLOCK_REALTIME).
struct NvmlSampleRow {
  std::int64_t driver_time_us = 0;
  std::uint32_t gpu = 0;  // NVML index
  NvmlSampleKind kind = NvmlSampleKind::kPowerW;
  double value = 0.0;     // in the kind's unit
};

// Maps a driver timestamp (µs of CLOCK_REALTIME) onto CLOCK_MONOTONIC ns, given one anchor pair
// (realtime_ns, mono_ns) read at (nearly) the same instant.
[[nodiscard]] constexpr std::int64_t nvml_driver_time_to_monotonic_ns(
    std::int64_t driver_time_us, std::int64_t anchor_realtime_ns,
    std::int64_t anchor_mono_ns) noexcept {
  return driver_time_us * 1000 - anchor_realtime_ns + anchor_mono_ns;
}

// Polls nvmlDeviceGetSamples for power, GPU and memory utilisation, SM and memory clocks on each
// selected GPU, passing each (GPU, kind)'s last seen timestamp, so every driver sample comes back
// exactly once and polling never needs to be faster than the driver's own sampling. The first
// poll returns what the driver has buffered (up to several seconds before the collector started).
class NvmlSampleCollector {
 public:
  // Throws like NvmlSource. `devices` empty = every GPU.
  explicit NvmlSampleCollector(std::vector<unsigned> devices = {});
  ~NvmlSampleCollector();
  NvmlSampleCollector(const NvmlSampleCollector&) = delete;
  NvmlSampleCollector& operator=(const NvmlSampleCollector&) = delete;

  // Appends up to `capacity` new rows to `out`, oldest first per (GPU, kind), and returns how
  // many. Samples that did not fit are returned by the next poll (if the driver still holds
  // them). No allocation, no exception, no logging.
  [[nodiscard]] std::size_t poll(NvmlSampleRow* out, std::size_t capacity) noexcept;

  [[nodiscard]] const std::vector<unsigned>& device_indices() const noexcept { return indices_; }
  // Whether `kind` is collected on the device at `position` in device_indices(); false once the
  // driver said it is not supported (or MIG is on, for utilisation) or the GPU was lost.
  [[nodiscard]] bool collecting(std::size_t position, NvmlSampleKind kind) const noexcept;
  // Why `kind` stopped being collected on that device: an NVML code (0 while collecting).
  [[nodiscard]] int stop_code(std::size_t position, NvmlSampleKind kind) const noexcept;

 private:
  struct Stream {
    nvml::Device device = nullptr;
    std::uint32_t gpu = 0;
    NvmlSampleKind kind = NvmlSampleKind::kPowerW;
    unsigned long long last_seen_us = 0;
    std::atomic<int> stop_code{0};  // written by poll(), read by any thread: relaxed is enough
  };

  std::shared_ptr<const NvmlLibrary> lib_;
  std::vector<unsigned> indices_;
  std::vector<std::unique_ptr<Stream>> streams_;  // device-major, kind-minor
  std::vector<nvml::Sample> scratch_;
  std::vector<std::uint32_t> order_;              // sort permutation of scratch_
};

}  // namespace stroboscope
