// The NVML loader: dlopen of libnvidia-ml (or STROBOSCOPE_NVML_LIBRARY), symbols resolved newest
// version first, nvmlInit once while anyone holds the library, and the words for the user when
// any of it fails.
#include <dlfcn.h>

#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <string>

#include "shared_library.hpp"
#include "stroboscope/nvml.hpp"

namespace stroboscope {
namespace {

std::mutex& current_mutex() {
  static std::mutex m;
  return m;
}
std::weak_ptr<const NvmlLibrary>& current() {
  static std::weak_ptr<const NvmlLibrary> w;
  return w;
}

}  // namespace

const char* nvml_return_name(nvml::Return code) noexcept {
  switch (code) {
    case nvml::kSuccess: return "NVML_SUCCESS";
    case nvml::kErrorUninitialized: return "NVML_ERROR_UNINITIALIZED";
    case nvml::kErrorInvalidArgument: return "NVML_ERROR_INVALID_ARGUMENT";
    case nvml::kErrorNotSupported: return "NVML_ERROR_NOT_SUPPORTED";
    case nvml::kErrorNoPermission: return "NVML_ERROR_NO_PERMISSION";
    case nvml::kErrorAlreadyInitialized: return "NVML_ERROR_ALREADY_INITIALIZED";
    case nvml::kErrorNotFound: return "NVML_ERROR_NOT_FOUND";
    case nvml::kErrorInsufficientSize: return "NVML_ERROR_INSUFFICIENT_SIZE";
    case nvml::kErrorInsufficientPower: return "NVML_ERROR_INSUFFICIENT_POWER";
    case nvml::kErrorDriverNotLoaded: return "NVML_ERROR_DRIVER_NOT_LOADED";
    case nvml::kErrorTimeout: return "NVML_ERROR_TIMEOUT";
    case nvml::kErrorIrqIssue: return "NVML_ERROR_IRQ_ISSUE";
    case nvml::kErrorLibraryNotFound: return "NVML_ERROR_LIBRARY_NOT_FOUND";
    case nvml::kErrorFunctionNotFound: return "NVML_ERROR_FUNCTION_NOT_FOUND";
    case nvml::kErrorCorruptedInforom: return "NVML_ERROR_CORRUPTED_INFOROM";
    case nvml::kErrorGpuIsLost: return "NVML_ERROR_GPU_IS_LOST";
    case nvml::kErrorResetRequired: return "NVML_ERROR_RESET_REQUIRED";
    case nvml::kErrorOperatingSystem: return "NVML_ERROR_OPERATING_SYSTEM";
    case nvml::kErrorLibRmVersionMismatch: return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
    case nvml::kErrorInUse: return "NVML_ERROR_IN_USE";
    case nvml::kErrorMemory: return "NVML_ERROR_MEMORY";
    case nvml::kErrorNoData: return "NVML_ERROR_NO_DATA";
    case nvml::kErrorVgpuEccNotSupported: return "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED";
    case nvml::kErrorInsufficientResources: return "NVML_ERROR_INSUFFICIENT_RESOURCES";
    case nvml::kErrorFreqNotSupported: return "NVML_ERROR_FREQ_NOT_SUPPORTED";
    case nvml::kErrorArgumentVersionMismatch: return "NVML_ERROR_ARGUMENT_VERSION_MISMATCH";
    case nvml::kErrorDeprecated: return "NVML_ERROR_DEPRECATED";
    case nvml::kErrorNotReady: return "NVML_ERROR_NOT_READY";
    case nvml::kErrorGpuNotFound: return "NVML_ERROR_GPU_NOT_FOUND";
    case nvml::kErrorInvalidState: return "NVML_ERROR_INVALID_STATE";
    default: return "NVML_ERROR_UNKNOWN";
  }
}

std::shared_ptr<const NvmlLibrary> NvmlLibrary::acquire() {
  std::lock_guard<std::mutex> lock(current_mutex());
  if (auto held = current().lock()) return held;
  // make_shared cannot reach the private constructor.
  std::shared_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->load();
  current() = lib;
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  // Balances the nvmlInit in load(); NVML counts inits, so other users in the process keep theirs.
  if (loaded_ && fn_.shutdown != nullptr) fn_.shutdown();
}

const char* NvmlLibrary::error_text(nvml::Return code) const noexcept {
  if (fn_.error_string != nullptr) {
    const char* s = fn_.error_string(code);
    if (s != nullptr) return s;
  }
  return nvml_return_name(code);
}

void NvmlLibrary::load() {
  const char* env = std::getenv(kNvmlLibraryEnv);
  path_ = (env != nullptr && env[0] != '\0') ? env : kNvmlDefaultLibrary;

  std::string dl_error;
  void* handle = detail::open_shared_library(path_, &dl_error);
  if (handle == nullptr) {
    reason_ = "cannot load the NVML library " + path_ + ": " + dl_error;
    if (env == nullptr || env[0] == '\0') {
      reason_ += " (no NVIDIA driver here, or set " + std::string(kNvmlLibraryEnv) +
                 " to the library's path)";
    }
    return;
  }

  // Resolves the first of `names` that the library exports into `*slot`; records it either way.
  std::string missing_required;
  auto resolve = [&](auto* slot, std::initializer_list<const char*> names, bool required,
                     int* version = nullptr) {
    NvmlSymbol sym;
    sym.wanted = *names.begin();
    sym.required = required;
    int v = static_cast<int>(names.size());  // newest first: versions count down
    for (const char* name : names) {
      dlerror();
      void* p = dlsym(handle, name);
      if (p != nullptr) {
        detail::assign_symbol(slot, p);
        sym.resolved = name;
        if (version != nullptr) *version = v;
        break;
      }
      --v;
    }
    if (sym.resolved.empty() && required) {
      if (!missing_required.empty()) missing_required += ", ";
      missing_required += sym.wanted;
    }
    symbols_.push_back(std::move(sym));
  };

  NvmlFunctions& f = fn_;
  resolve(&f.init, {"nvmlInit_v2", "nvmlInit"}, true);
  resolve(&f.shutdown, {"nvmlShutdown"}, true);
  resolve(&f.error_string, {"nvmlErrorString"}, false);
  resolve(&f.system_get_driver_version, {"nvmlSystemGetDriverVersion"}, false);
  resolve(&f.system_get_nvml_version, {"nvmlSystemGetNVMLVersion"}, false);
  resolve(&f.device_get_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, true);
  resolve(&f.device_get_handle_by_index,
          {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}, true);
  resolve(&f.device_get_name, {"nvmlDeviceGetName"}, false);
  resolve(&f.device_get_uuid, {"nvmlDeviceGetUUID"}, false);
  resolve(&f.device_get_memory_info_v2, {"nvmlDeviceGetMemoryInfo_v2"}, false);
  resolve(&f.device_get_memory_info, {"nvmlDeviceGetMemoryInfo"}, false);
  resolve(&f.device_get_utilization_rates, {"nvmlDeviceGetUtilizationRates"}, false);
  resolve(&f.device_get_temperature, {"nvmlDeviceGetTemperature"}, false);
  resolve(&f.device_get_power_usage, {"nvmlDeviceGetPowerUsage"}, false);
  resolve(&f.device_get_enforced_power_limit, {"nvmlDeviceGetEnforcedPowerLimit"}, false);
  resolve(&f.device_get_total_energy_consumption, {"nvmlDeviceGetTotalEnergyConsumption"}, false);
  resolve(&f.device_get_clock_info, {"nvmlDeviceGetClockInfo"}, false);
  resolve(&f.device_get_fan_speed, {"nvmlDeviceGetFanSpeed"}, false);
  resolve(&f.device_get_clocks_event_reasons,
          {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
          false);
  resolve(&f.device_get_total_ecc_errors, {"nvmlDeviceGetTotalEccErrors"}, false);
  resolve(&f.device_get_field_values, {"nvmlDeviceGetFieldValues"}, false);
  resolve(&f.device_get_compute_running_processes,
          {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
           "nvmlDeviceGetComputeRunningProcesses"},
          false, &f.compute_processes_version);
  resolve(&f.device_get_graphics_running_processes,
          {"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
           "nvmlDeviceGetGraphicsRunningProcesses"},
          false, &f.graphics_processes_version);
  resolve(&f.device_get_process_utilization, {"nvmlDeviceGetProcessUtilization"}, false);
  resolve(&f.device_get_samples, {"nvmlDeviceGetSamples"}, false);
  resolve(&f.device_get_mig_mode, {"nvmlDeviceGetMigMode"}, false);
  resolve(&f.device_get_max_mig_device_count, {"nvmlDeviceGetMaxMigDeviceCount"}, false);
  resolve(&f.device_get_mig_device_handle_by_index, {"nvmlDeviceGetMigDeviceHandleByIndex"},
          false);
  resolve(&f.gpm_query_device_support, {"nvmlGpmQueryDeviceSupport"}, false);
  resolve(&f.gpm_sample_alloc, {"nvmlGpmSampleAlloc"}, false);
  resolve(&f.gpm_sample_free, {"nvmlGpmSampleFree"}, false);
  resolve(&f.gpm_sample_get, {"nvmlGpmSampleGet"}, false);
  resolve(&f.gpm_metrics_get, {"nvmlGpmMetricsGet"}, false);

  if (!missing_required.empty()) {
    reason_ = "the NVML library " + path_ + " lacks required functions: " + missing_required;
    return;
  }

  init_error_ = f.init();
  if (init_error_ != nvml::kSuccess) {
    const NvmlSymbol& init_sym = symbols_.front();
    reason_ = init_sym.resolved + " failed: " + error_text(init_error_) + " (" +
              nvml_return_name(init_error_) + " = " + std::to_string(init_error_) + ")";
    if (init_error_ == nvml::kErrorDriverNotLoaded) reason_ += "; is the NVIDIA driver loaded?";
    if (init_error_ == nvml::kErrorNoPermission) reason_ += "; no permission to the GPU devices";
    return;
  }
  loaded_ = true;
}

}  // namespace stroboscope
