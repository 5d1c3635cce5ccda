// The part of AMD's amdsmi C API that stroboscope calls, declared here so the build needs no ROCm
// headers and the binary no link-time dependency (the library is opened with dlopen at run time).
//
// Facts from AMD's public amdsmi.h (ROCm 6.0 to 6.4, amdsmi library 24.x/25.x). Only calls whose
// signatures and layouts did not change across those releases are used:
//   - amdsmi_engine_usage_t (gfx/umc/mm activity, %) and the scalar getters have one layout in
//     every release;
//   - amdsmi_clk_info_t changed (6.0: cur_clk, min, max, reserved[5]; 6.1+: clk, min, max,
//     clk_locked, clk_deep_sleep, reserved[4]) but its first member is the current clock (MHz,
//     uint32_t) in both, so only that member is read, from a buffer larger than either layout;
//   - amdsmi_power_info_t changed three times (6.0: average_socket_power first; 6.1: current and
//     average; 6.2+: a uint64_t socket_power first), so it is NOT used: power comes from two
//     readings of the energy accumulator and their own timestamps (see amdsmi.hpp).
#pragma once

#include <cstdint>

namespace stroboscope::amdsmi {

using Status = std::uint32_t;  // amdsmi_status_t (an enum: 4 bytes)
inline constexpr Status kSuccess = 0;               // AMDSMI_STATUS_SUCCESS
inline constexpr Status kInval = 1;                 // AMDSMI_STATUS_INVAL
inline constexpr Status kNotSupported = 2;          // AMDSMI_STATUS_NOT_SUPPORTED
inline constexpr Status kNotYetImplemented = 3;     // AMDSMI_STATUS_NOT_YET_IMPLEMENTED
inline constexpr Status kNoPerm = 10;               // AMDSMI_STATUS_NO_PERM
inline constexpr Status kInitError = 18;            // AMDSMI_STATUS_INIT_ERROR
inline constexpr Status kNotFound = 31;             // AMDSMI_STATUS_NOT_FOUND
inline constexpr Status kDriverNotLoaded = 34;      // AMDSMI_STATUS_DRIVER_NOT_LOADED

// amdsmi_init_flags_t: AMDSMI_INIT_AMD_GPUS = (1 << 1); amdsmi_init takes a uint64_t.
inline constexpr std::uint64_t kInitAmdGpus = 1ull << 1;

using SocketHandle = void*;     // amdsmi_socket_handle
using ProcessorHandle = void*;  // amdsmi_processor_handle

inline constexpr std::uint32_t kMemTypeVram = 0;         // AMDSMI_MEM_TYPE_VRAM
inline constexpr std::uint32_t kTempTypeHotspot = 1;     // AMDSMI_TEMPERATURE_TYPE_HOTSPOT
                                                         // (= AMDSMI_TEMPERATURE_TYPE_JUNCTION)
inline constexpr std::uint32_t kTempCurrent = 0;         // AMDSMI_TEMP_CURRENT
inline constexpr std::uint32_t kClkTypeGfx = 0;          // AMDSMI_CLK_TYPE_GFX (= SYS)
inline constexpr std::uint32_t kClkTypeMem = 4;          // AMDSMI_CLK_TYPE_MEM

// amdsmi_engine_usage_t: activity in %, the same layout in every release.
struct EngineUsage {
  std::uint32_t gfx_activity;
  std::uint32_t umc_activity;
  std::uint32_t mm_activity;
  std::uint32_t reserved[13];
};
static_assert(sizeof(EngineUsage) == 64, "amdsmi_engine_usage_t is 16 uint32_t");

// Room for any release's amdsmi_clk_info_t (32 bytes in 6.0, 28 in 6.1+); the first uint32_t
// is the current clock in MHz in both.
struct ClkInfoBuffer {
  std::uint32_t current_mhz;
  std::uint32_t rest[15];
};

using InitFn = Status (*)(std::uint64_t init_flags);
using ShutDownFn = Status (*)();
using StatusCodeToStringFn = Status (*)(Status status, const char** text);
using GetSocketHandlesFn = Status (*)(std::uint32_t* count, SocketHandle* handles);
using GetProcessorHandlesFn = Status (*)(SocketHandle socket, std::uint32_t* count,
                                         ProcessorHandle* handles);
using GetActivityFn = Status (*)(ProcessorHandle, EngineUsage* info);
using GetMemoryFn = Status (*)(ProcessorHandle, std::uint32_t mem_type, std::uint64_t* bytes);
using GetTempMetricFn = Status (*)(ProcessorHandle, std::uint32_t sensor, std::uint32_t metric,
                                   std::int64_t* value);
using GetClockInfoFn = Status (*)(ProcessorHandle, std::uint32_t clk_type, void* info);
// energy_accumulator in ticks of *counter_resolution µJ; *timestamp in ns.
using GetEnergyCountFn = Status (*)(ProcessorHandle, std::uint64_t* energy_accumulator,
                                    float* counter_resolution, std::uint64_t* timestamp);

}  // namespace stroboscope::amdsmi
