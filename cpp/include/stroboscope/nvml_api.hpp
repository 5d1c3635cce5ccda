// The subset of the NVML C API that stroboscope uses, declared here so the build needs no NVML or
// CUDA header and the binary has no link-time dependency: the library is opened with dlopen and
// every function below is reached through a pointer resolved with dlsym (see nvml.hpp).
//
// Names follow NVML's meaning with this project's spelling. Numbers (return codes, field ids,
// enum values) and struct layouts are NVML's ABI and must not change; the static_asserts at the
// bottom pin the layouts to the sizes and offsets nvml.h gives on LP64 Linux. NVML's C enums are
// int-sized, so enum parameters are declared as `int` in the function pointer types.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stroboscope::nvml {

// ---- return codes (nvmlReturn_t) -------------------------------------------------------------
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorAlreadyInitialized = 5;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorInsufficientPower = 8;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorIrqIssue = 11;
inline constexpr Return kErrorLibraryNotFound = 12;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorCorruptedInforom = 14;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorResetRequired = 16;
inline constexpr Return kErrorOperatingSystem = 17;
inline constexpr Return kErrorLibRmVersionMismatch = 18;
inline constexpr Return kErrorInUse = 19;
inline constexpr Return kErrorMemory = 20;
inline constexpr Return kErrorNoData = 21;
inline constexpr Return kErrorVgpuEccNotSupported = 22;
inline constexpr Return kErrorInsufficientResources = 23;
inline constexpr Return kErrorFreqNotSupported = 24;
inline constexpr Return kErrorArgumentVersionMismatch = 25;
inline constexpr Return kErrorDeprecated = 26;
inline constexpr Return kErrorNotReady = 27;
inline constexpr Return kErrorGpuNotFound = 28;
inline constexpr Return kErrorInvalidState = 29;
inline constexpr Return kErrorUnknown = 999;

// ---- handles ---------------------------------------------------------------------------------
struct DeviceOpaque;                // nvmlDevice_st, never defined
using Device = DeviceOpaque*;       // nvmlDevice_t

// ---- enums -----------------------------------------------------------------------------------
// nvmlValueType_t: which member of Value is meaningful.
inline constexpr int kValueTypeDouble = 0;
inline constexpr int kValueTypeUnsignedInt = 1;
inline constexpr int kValueTypeUnsignedLong = 2;
inline constexpr int kValueTypeUnsignedLongLong = 3;
inline constexpr int kValueTypeSignedLongLong = 4;
inline constexpr int kValueTypeSignedInt = 5;
inline constexpr int kValueTypeUnsignedShort = 6;

// nvmlSamplingType_t (nvmlDeviceGetSamples).
inline constexpr int kTotalPowerSamples = 0;        // mW
inline constexpr int kGpuUtilizationSamples = 1;    // %
inline constexpr int kMemoryUtilizationSamples = 2; // %
inline constexpr int kProcessorClkSamples = 5;      // MHz
inline constexpr int kMemoryClkSamples = 6;         // MHz

// nvmlClockType_t.
inline constexpr int kClockGraphics = 0;
inline constexpr int kClockSm = 1;
inline constexpr int kClockMem = 2;

// nvmlTemperatureSensors_t.
inline constexpr int kTemperatureGpu = 0;

// nvmlMemoryErrorType_t and nvmlEccCounterType_t.
inline constexpr int kMemoryErrorTypeCorrected = 0;
inline constexpr int kMemoryErrorTypeUncorrected = 1;
inline constexpr int kVolatileEcc = 0;
inline constexpr int kAggregateEcc = 1;

// MIG mode (nvmlDeviceGetMigMode current/pending).
inline constexpr unsigned kDeviceMigDisable = 0;
inline constexpr unsigned kDeviceMigEnable = 1;

// Field ids for nvmlDeviceGetFieldValues (NVML_FI_DEV_*). Ids never change once assigned.
inline constexpr unsigned kFieldEccSbeVolTotal = 3;            // corrected (single-bit), volatile
inline constexpr unsigned kFieldEccDbeVolTotal = 4;            // uncorrected (double-bit), volatile
inline constexpr unsigned kFieldTotalEnergyConsumption = 83;   // mJ since the driver loaded
inline constexpr unsigned kFieldPowerInstant = 186;            // mW
inline constexpr unsigned kFieldPowerCurrentLimit = 190;       // mW, the limit enforced now
inline constexpr unsigned kFieldPcieCountTxBytes = 197;        // bytes, cumulative
inline constexpr unsigned kFieldPcieCountRxBytes = 198;        // bytes, cumulative
// NVLink data (payload) throughput, KiB, cumulative. scope_id picks a link, or kScopeAllLinks for
// the sum over every link (nvml.h: "A scopeId of UINT_MAX returns aggregate value").
inline constexpr unsigned kFieldNvlinkThroughputDataTx = 138;
inline constexpr unsigned kFieldNvlinkThroughputDataRx = 139;
inline constexpr unsigned kScopeAllLinks = 0xFFFFFFFFu;

// Buffer sizes the API documents as always large enough.
inline constexpr unsigned kDeviceNameBufferSize = 96;     // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kDeviceUuidBufferSize = 96;     // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kSystemVersionBufferSize = 80;  // driver and NVML version strings

// usedGpuMemory when the driver cannot say (NVML_VALUE_NOT_AVAILABLE as unsigned long long).
inline constexpr unsigned long long kValueNotAvailableUll = ~0ULL;
// gpuInstanceId / computeInstanceId when MIG is off.
inline constexpr unsigned kInstanceIdNone = 0xFFFFFFFFu;

// ---- structs ---------------------------------------------------------------------------------
union Value {  // nvmlValue_t
  double d_val;
  int si_val;
  unsigned int ui_val;
  unsigned long ul_val;
  unsigned long long ull_val;
  long long sll_val;
  unsigned short us_val;
};

struct FieldValue {  // nvmlFieldValue_t
  unsigned int field_id;
  unsigned int scope_id;  // 0: the GPU (called `unused` in older headers)
  long long timestamp_us; // CPU time of the value, µs since 1970
  long long latency_us;
  int value_type;         // kValueType*
  Return nvml_return;     // check before reading `value`
  Value value;
};

struct Sample {  // nvmlSample_t
  unsigned long long timestamp_us;  // CPU time, µs since 1970
  Value value;
};

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

struct Memory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct MemoryV2 {  // nvmlMemory_v2_t
  unsigned int version;  // must be kMemoryV2Version
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2): the struct size in the low bits, the version in the top byte.
inline constexpr unsigned kMemoryV2Version =
    static_cast<unsigned>(sizeof(MemoryV2)) | (2u << 24);

struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t: the un-suffixed *RunningProcesses functions
  unsigned int pid;
  unsigned long long used_gpu_memory;
};

struct ProcessInfoV2 {  // nvmlProcessInfo_v2_t / nvmlProcessInfo_t: the _v2 and _v3 functions
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

// Some R535 drivers wrote a 32-byte element from the _v3 functions (an extra
// usedGpuCcProtectedMemory); the reader allocates for this size and detects the stride.
inline constexpr std::size_t kProcessInfoMaxStride = 32;

struct ProcessUtilizationSample {  // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long timestamp_us;  // CPU time, µs since 1970
  unsigned int sm_util;
  unsigned int mem_util;
  unsigned int enc_util;
  unsigned int dec_util;
};

// ---- GPM (GPU Performance Monitoring, Hopper and newer) ---------------------------------------
// Metrics come from two samples of the device's counters taken more than 100 ms apart: the
// metric is the activity between them.
struct GpmSampleOpaque;                // nvmlGpmSample_st, never defined
using GpmSample = GpmSampleOpaque*;    // nvmlGpmSample_t

// nvmlGpmMetricId_t values used here ("%" over the pair's interval unless noted).
inline constexpr unsigned kGpmSmUtil = 2;          // SMs busy
inline constexpr unsigned kGpmSmOccupancy = 3;     // warps resident vs the theoretical maximum
inline constexpr unsigned kGpmAnyTensorUtil = 5;   // SMs doing any tensor operation
inline constexpr unsigned kGpmHmmaTensorUtil = 7;  // SMs doing HMMA (FP16/BF16) tensor operations
inline constexpr unsigned kGpmDramBwUtil = 10;     // DRAM bandwidth vs the theoretical maximum
inline constexpr unsigned kGpmFp64Util = 11;       // SMs doing non-tensor FP64
inline constexpr unsigned kGpmFp32Util = 12;       // SMs doing non-tensor FP32
inline constexpr unsigned kGpmFp16Util = 13;       // SMs doing non-tensor FP16
inline constexpr unsigned kGpmPcieTxPerSec = 20;   // MiB/s from this GPU
inline constexpr unsigned kGpmPcieRxPerSec = 21;   // MiB/s to this GPU
inline constexpr unsigned kGpmNvlinkTotalRxPerSec = 60;  // MiB/s, all links
inline constexpr unsigned kGpmNvlinkTotalTxPerSec = 61;  // MiB/s, all links

struct GpmMetric {  // nvmlGpmMetric_t
  unsigned int metric_id;  // in
  Return nvml_return;      // out: check before reading `value`
  double value;            // out
  struct {
    char* short_name;
    char* long_name;
    char* unit;
  } info;                  // out; may be null
};

// The metrics array of nvmlGpmMetricsGet_t has NVML_GPM_METRIC_MAX entries, which grew across
// headers (98 in CUDA 12, 333 in CUDA 13) under the same struct version; the driver reads and
// writes only the first num_metrics, so the largest known size is safe with every driver.
inline constexpr unsigned kGpmMetricArraySize = 333;
struct GpmMetricsGet {  // nvmlGpmMetricsGet_t
  unsigned int version;  // kGpmMetricsGetVersion
  unsigned int num_metrics;
  GpmSample sample1;
  GpmSample sample2;
  GpmMetric metrics[kGpmMetricArraySize];
};
inline constexpr unsigned kGpmMetricsGetVersion = 1;  // NVML_GPM_METRICS_GET_VERSION

struct GpmSupport {  // nvmlGpmSupport_t
  unsigned int version;  // kGpmSupportVersion
  unsigned int is_supported_device;
};
inline constexpr unsigned kGpmSupportVersion = 1;  // NVML_GPM_SUPPORT_VERSION

// ---- function pointer types ------------------------------------------------------------------
using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using SystemGetStringFn = Return (*)(char*, unsigned int);
using DeviceGetCountFn = Return (*)(unsigned int*);
using DeviceGetHandleByIndexFn = Return (*)(unsigned int, Device*);
using DeviceGetStringFn = Return (*)(Device, char*, unsigned int);
using DeviceGetUintFn = Return (*)(Device, unsigned int*);
using DeviceGetUllFn = Return (*)(Device, unsigned long long*);
using DeviceGetMemoryInfoFn = Return (*)(Device, Memory*);
using DeviceGetMemoryInfoV2Fn = Return (*)(Device, MemoryV2*);
using DeviceGetUtilizationRatesFn = Return (*)(Device, Utilization*);
using DeviceGetTemperatureFn = Return (*)(Device, int sensor, unsigned int*);
using DeviceGetClockInfoFn = Return (*)(Device, int clock_type, unsigned int*);
using DeviceGetTotalEccErrorsFn = Return (*)(Device, int error_type, int counter_type,
                                             unsigned long long*);
using DeviceGetFieldValuesFn = Return (*)(Device, int count, FieldValue*);
// The element type depends on the symbol's version (ProcessInfoV1 or ProcessInfoV2).
using DeviceGetRunningProcessesFn = Return (*)(Device, unsigned int* count, void* infos);
using DeviceGetProcessUtilizationFn = Return (*)(Device, ProcessUtilizationSample*,
                                                 unsigned int* count,
                                                 unsigned long long last_seen_us);
using DeviceGetSamplesFn = Return (*)(Device, int sampling_type, unsigned long long last_seen_us,
                                      int* value_type, unsigned int* count, Sample*);
using DeviceGetMigModeFn = Return (*)(Device, unsigned int* current, unsigned int* pending);
using DeviceGetMigDeviceHandleByIndexFn = Return (*)(Device, unsigned int, Device*);
using GpmQueryDeviceSupportFn = Return (*)(Device, GpmSupport*);
using GpmSampleAllocFn = Return (*)(GpmSample*);
using GpmSampleFreeFn = Return (*)(GpmSample);
using GpmSampleGetFn = Return (*)(Device, GpmSample);
using GpmMetricsGetFn = Return (*)(GpmMetricsGet*);

// ---- layout pins (nvml.h on LP64 Linux) ------------------------------------------------------
static_assert(sizeof(Value) == 8);
static_assert(sizeof(FieldValue) == 40 && offsetof(FieldValue, timestamp_us) == 8 &&
              offsetof(FieldValue, value_type) == 24 && offsetof(FieldValue, nvml_return) == 28 &&
              offsetof(FieldValue, value) == 32);
static_assert(sizeof(Sample) == 16 && offsetof(Sample, value) == 8);
static_assert(sizeof(Utilization) == 8);
static_assert(sizeof(Memory) == 24);
static_assert(sizeof(MemoryV2) == 40 && offsetof(MemoryV2, total) == 8);
static_assert(kMemoryV2Version == 0x02000028u);
static_assert(sizeof(ProcessInfoV1) == 16 && offsetof(ProcessInfoV1, used_gpu_memory) == 8);
static_assert(sizeof(ProcessInfoV2) == 24 && offsetof(ProcessInfoV2, gpu_instance_id) == 16);
static_assert(sizeof(ProcessUtilizationSample) == 32 &&
              offsetof(ProcessUtilizationSample, timestamp_us) == 8 &&
              offsetof(ProcessUtilizationSample, sm_util) == 16);

static_assert(sizeof(GpmMetric) == 40 && offsetof(GpmMetric, value) == 8 &&
              offsetof(GpmMetric, info) == 16);
static_assert(offsetof(GpmMetricsGet, sample1) == 8 && offsetof(GpmMetricsGet, metrics) == 24);
static_assert(sizeof(GpmSupport) == 8);

}  // namespace stroboscope::nvml
