// AMD GPUs through amdsmi, loaded at run time: the loader (dlopen of libamd_smi.so, amdsmi_init
// once per process while anyone holds it) and the "amd_gpu" source.
//
// The source writes the same vendor-neutral columns as the NVML "gpu" source where the meaning is
// the same (gpu.{i}.util_pct, mem_used_bytes, energy_mj, ...): names, units, types and kinds come
// from the gpu source's own metric table, not from a copy (see amdsmi_device.cpp).
//
// GPU indices when NVIDIA and AMD GPUs share a machine: "amd_gpu" is a default source only where
// NVML sees no GPU, so an AMD-only machine gets gpu.0, gpu.1, ... exactly like an NVIDIA one and
// every consumer of gpu.{i}.* (reports, exporters, energy windows) works unchanged. Asked for
// explicitly on a machine where NVML sees N GPUs, AMD device k is labelled gpu.{N+k}: the labels
// stay integers, never collide with the gpu source's and do not depend on which NVIDIA GPUs that
// source was given.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stroboscope/amdsmi_api.hpp"
#include "stroboscope/source.hpp"

namespace stroboscope {

// The library opened when STROBOSCOPE_AMDSMI_LIBRARY is unset or empty.
inline constexpr const char* kAmdSmiDefaultLibrary = "libamd_smi.so";
// The environment variable that overrides it (a path or a soname).
inline constexpr const char* kAmdSmiLibraryEnv = "STROBOSCOPE_AMDSMI_LIBRARY";

// Every amdsmi function stroboscope calls; nullptr where the library lacks the symbol.
struct AmdSmiFunctions {
  amdsmi::InitFn init = nullptr;                                // required
  amdsmi::ShutDownFn shut_down = nullptr;                       // required
  amdsmi::GetSocketHandlesFn get_socket_handles = nullptr;      // required
  amdsmi::GetProcessorHandlesFn get_processor_handles = nullptr;  // required
  amdsmi::StatusCodeToStringFn status_code_to_string = nullptr;
  amdsmi::GetActivityFn get_gpu_activity = nullptr;
  amdsmi::GetMemoryFn get_gpu_memory_usage = nullptr;
  amdsmi::GetMemoryFn get_gpu_memory_total = nullptr;
  amdsmi::GetTempMetricFn get_temp_metric = nullptr;
  amdsmi::GetClockInfoFn get_clock_info = nullptr;
  amdsmi::GetEnergyCountFn get_energy_count = nullptr;
};

// amdsmi opened and initialised (AMDSMI_INIT_AMD_GPUS) once per process while anyone holds it:
// the first acquire() opens it and calls amdsmi_init, dropping the last holder calls
// amdsmi_shut_down; a later acquire() starts again (re-reading STROBOSCOPE_AMDSMI_LIBRARY). The
// dlopen handle is never closed, like NVML's (a library may have registered exit work).
class AmdSmiLibrary {
 public:
  // Never null; check loaded(). Thread-safe. Not for the hot path.
  [[nodiscard]] static std::shared_ptr<const AmdSmiLibrary> acquire();

  ~AmdSmiLibrary();
  AmdSmiLibrary(const AmdSmiLibrary&) = delete;
  AmdSmiLibrary& operator=(const AmdSmiLibrary&) = delete;

  [[nodiscard]] bool loaded() const noexcept { return loaded_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  // Why loaded() is false: the dlerror text, the missing symbols, or amdsmi_init's code and text.
  [[nodiscard]] const std::string& reason() const noexcept { return reason_; }
  [[nodiscard]] const AmdSmiFunctions& fn() const noexcept { return fn_; }
  // The GPUs found at load time, over every socket, in amdsmi's order (the source's indices).
  [[nodiscard]] const std::vector<amdsmi::ProcessorHandle>& gpus() const noexcept { return gpus_; }
  // amdsmi_status_code_to_string's text for `code`, or "amdsmi status N". Not for the hot path.
  [[nodiscard]] std::string describe(amdsmi::Status code) const;

 private:
  AmdSmiLibrary() = default;
  void load();

  std::string path_;
  std::string reason_;
  bool loaded_ = false;
  bool initialised_ = false;
  AmdSmiFunctions fn_;
  std::vector<amdsmi::ProcessorHandle> gpus_;
};

// Reads gfx/memory-controller activity, VRAM used/total, junction temperature, energy (and power
// from it), graphics and memory clocks of every AMD GPU. One call per metric group per device;
// a group the device does not support (AMDSMI_STATUS_NOT_SUPPORTED) reads null and is not asked
// again; any other failure nulls that group's cells for the read and says why in reason().
class AmdGpuSource final : public Source {
 public:
  // Throws std::runtime_error with the loader's reason when amdsmi is unavailable or sees no GPU.
  // `label_offset`: the index of the first AMD GPU in the gpu.{i} label space (see above).
  explicit AmdGpuSource(unsigned label_offset);
  ~AmdGpuSource() override;

  void read(RowWriter row, std::int64_t now_ns) noexcept override;
  // amdsmi reads sysfs/ioctl per call: polled on its own thread like NVML.
  [[nodiscard]] bool slow() const noexcept override { return true; }
  [[nodiscard]] const char* interface() const noexcept override { return "amdsmi"; }
  // As the gpu source (nvml.hpp): the driver's values change at its own rates.
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return 10'000'000;
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "the driver updates activity, power and energy over its own sampling periods (by "
           "metric and product; none per event of ours), as NVML does for the gpu source; 10 ms "
           "sees each update within 10 ms without every metric's amdsmi call every tick. "
           "sources={'amd_gpu': seconds} reads faster";
  }

  // The number of GPUs sampled, and the amdsmi status that disabled a metric group on a device
  // (0 while it is asked). Safe from any thread.
  [[nodiscard]] std::size_t device_count() const noexcept { return devices_.size(); }
  [[nodiscard]] std::uint32_t disabled_code(std::size_t device, std::size_t group) const noexcept;

  struct Device;  // per-device handle, columns and state (amdsmi_device.cpp)

 private:
  std::shared_ptr<const AmdSmiLibrary> lib_;
  std::vector<std::unique_ptr<Device>> devices_;
};

// For the registry: the "amd_gpu" source over every AMD GPU, labelled after NVML's GPUs.
[[nodiscard]] std::unique_ptr<Source> make_amd_gpu_source(const SourceOptions& opts);

// Whether amdsmi loads here with at least one GPU; when not, `*reason` says why. Not for hot paths.
[[nodiscard]] bool amdsmi_available(std::string* reason);

// The energy delta of two accumulator readings in counter ticks. AMD documents a 64-bit
// accumulator, but some firmware keeps a 32-bit one, which wraps after 2^32 ticks (about 66 kJ:
// about a minute at 1 kW with 15.3 µJ ticks, so the source must poll faster than that). A
// reading below the previous one is taken as a 32-bit wrap when the previous fitted in 32 bits,
// else as a restart (driver reload) whose delta is the new reading: the same rule as NVML's
// counters (nvml_counter_delta), which this forwards to rather than repeats.
[[nodiscard]] std::uint64_t amdsmi_energy_delta(std::uint64_t previous,
                                                std::uint64_t current) noexcept;

}  // namespace stroboscope
