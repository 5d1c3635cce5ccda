// Pieces shared by the NVML source files and nothing else: device identity, value decoding and
// the classes of NVML errors.
#pragma once

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "stroboscope/nvml.hpp"

namespace stroboscope::nvml_detail {

// Codes of our own for a query that was never made, next to NVML's (all positive).
inline constexpr int kCodeMissingSymbol = -1;  // this NVML library does not export the function
inline constexpr int kCodeMigEnabled = -2;     // MIG mode is on: NVML has no device-level value
inline constexpr int kCodeBadValueType = -3;   // the driver answered with a value type we cannot read

// How a failed NVML call affects what we do next.
enum class ErrorClass {
  kUnsupported,  // this device/driver cannot answer: stop asking, the cell stays null
  kTransient,    // a passing condition: null this time, ask again next time
  kFatal,        // the GPU is gone or NVML broke: the device gives nulls from then on
};

// Only the codes that say the GPU or the driver itself is gone end a device. Any other error of
// one query (UNKNOWN, CORRUPTED_INFOROM, OPERATING_SYSTEM, IRQ_ISSUE, a code newer than this
// list, ...) empties that cell for that read and is asked again, so a board with one broken
// sensor keeps its power, memory and the rest.

[[nodiscard]] constexpr ErrorClass classify(int code) noexcept {
  switch (code) {
    case nvml::kErrorNotSupported:
    case nvml::kErrorNoPermission:
    case nvml::kErrorInvalidArgument:  // e.g. a field id this driver does not know
    case nvml::kErrorFunctionNotFound:
    case nvml::kErrorDeprecated:
    case nvml::kErrorArgumentVersionMismatch:  // e.g. a struct version this driver does not know
    case nvml::kErrorVgpuEccNotSupported:
    case kCodeMissingSymbol:
    case kCodeMigEnabled:
    case kCodeBadValueType:
      return ErrorClass::kUnsupported;
    case nvml::kErrorTimeout:
    case nvml::kErrorInUse:
    case nvml::kErrorNoData:
    case nvml::kErrorNotReady:
    case nvml::kErrorNotFound:
    case nvml::kErrorInsufficientSize:
    case nvml::kErrorMemory:
    case nvml::kErrorInsufficientResources:
      return ErrorClass::kTransient;
    case nvml::kErrorUninitialized:
    case nvml::kErrorDriverNotLoaded:
    case nvml::kErrorLibraryNotFound:
    case nvml::kErrorGpuIsLost:
    case nvml::kErrorResetRequired:
    case nvml::kErrorLibRmVersionMismatch:
    case nvml::kErrorGpuNotFound:
      return ErrorClass::kFatal;
    default:
      return ErrorClass::kTransient;
  }
}

// Words for a code, ours or NVML's: "Not Supported (NVML_ERROR_NOT_SUPPORTED)".
[[nodiscard]] std::string describe_code(const NvmlLibrary& lib, int code);

// A MIG device (instance) of a GPU.
struct MigHandle {
  unsigned index = 0;
  nvml::Device handle = nullptr;
  std::string uuid;
};

// What a GPU is: its handle, name, UUID and MIG instances. `handle_error` is non-zero when
// nvmlDeviceGetHandleByIndex failed (then `handle` is null).
struct Identity {
  unsigned index = 0;
  nvml::Device handle = nullptr;
  int handle_error = 0;
  std::string name;
  std::string uuid;
  bool mig_enabled = false;
  std::vector<MigHandle> mig;
};

// Not for the hot path (allocates). `lib` must be loaded.
[[nodiscard]] Identity identify(const NvmlLibrary& lib, unsigned index);

// The NVML indices a source over `options` reads (every GPU when options.devices is empty),
// checked: throws std::runtime_error ("<what> is unavailable: ...") when NVML sees no GPU and
// std::invalid_argument for an index out of range, one given twice or labels of the wrong length.
[[nodiscard]] std::vector<unsigned> select_devices(const NvmlLibrary& lib,
                                                   const NvmlSourceOptions& options,
                                                   const char* what);

// The "gpu" sources alive in this process (nvml_status.cpp): a source adds itself at the end of
// its constructor and removes itself in its destructor, both under the mutex.
[[nodiscard]] std::mutex& live_sources_mutex();
[[nodiscard]] std::vector<const NvmlSource*>& live_sources();

// Number of GPUs, or -code on failure.
[[nodiscard]] long long device_count(const NvmlLibrary& lib);

// Reads an NVML value of type `type` as a double; false for a type we do not know.
[[nodiscard]] inline bool value_to_double(int type, const nvml::Value& v, double* out) noexcept {
  switch (type) {
    case nvml::kValueTypeDouble: *out = v.d_val; return true;
    case nvml::kValueTypeUnsignedInt: *out = static_cast<double>(v.ui_val); return true;
    case nvml::kValueTypeUnsignedLong: *out = static_cast<double>(v.ul_val); return true;
    case nvml::kValueTypeUnsignedLongLong: *out = static_cast<double>(v.ull_val); return true;
    case nvml::kValueTypeSignedLongLong: *out = static_cast<double>(v.sll_val); return true;
    case nvml::kValueTypeSignedInt: *out = static_cast<double>(v.si_val); return true;
    case nvml::kValueTypeUnsignedShort: *out = static_cast<double>(v.us_val); return true;
    default: return false;
  }
}

// Reads an NVML value as an unsigned 64-bit integer (counters, bitmasks, mW); false for an
// unknown type or a negative or non-finite value.
[[nodiscard]] inline bool value_to_u64(int type, const nvml::Value& v, std::uint64_t* out) noexcept {
  switch (type) {
    case nvml::kValueTypeUnsignedInt: *out = v.ui_val; return true;
    case nvml::kValueTypeUnsignedLong: *out = v.ul_val; return true;
    case nvml::kValueTypeUnsignedLongLong: *out = v.ull_val; return true;
    case nvml::kValueTypeUnsignedShort: *out = v.us_val; return true;
    case nvml::kValueTypeSignedLongLong:
      if (v.sll_val < 0) return false;
      *out = static_cast<std::uint64_t>(v.sll_val);
      return true;
    case nvml::kValueTypeSignedInt:
      if (v.si_val < 0) return false;
      *out = static_cast<std::uint64_t>(v.si_val);
      return true;
    case nvml::kValueTypeDouble:
      if (!(v.d_val >= 0.0 && v.d_val < 1.8e19)) return false;
      *out = static_cast<std::uint64_t>(v.d_val);
      return true;
    default:
      return false;
  }
}

// The element stride of a list written by a _v2/_v3 *RunningProcesses function: 24 bytes
// (nvmlProcessInfo_v2_t) per nvml.h, but some R535 drivers wrote 32-byte elements from _v3
// without a version bump. With two or more entries the stride is recognisable: every element at
// the right stride has a plausible pid and MIG instance ids (0xFFFFFFFF when MIG is off).
[[nodiscard]] std::size_t process_info_stride(const unsigned char* buf, unsigned count,
                                              int version) noexcept;

// pid and memory of element `i` of a process list with `stride`.
inline void process_info_at(const unsigned char* buf, std::size_t stride, unsigned i,
                            unsigned* pid, unsigned long long* used) noexcept {
  const unsigned char* p = buf + static_cast<std::size_t>(i) * stride;
  std::memcpy(pid, p, sizeof *pid);
  std::memcpy(used, p + 8, sizeof *used);
}

}  // namespace stroboscope::nvml_detail
