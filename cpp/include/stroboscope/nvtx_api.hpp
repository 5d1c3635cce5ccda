// The subset of NVTX's tool-injection interface that stroboscope's injection library implements,
// declared here so the build needs no NVTX or CUDA header (as nvml_api.hpp does for NVML).
//
// How an application's NVTX reaches a tool: on its first NVTX call, the NVTX code compiled into
// the application (header-only, NVTX v3) reads NVTX_INJECTION64_PATH, dlopens that library, looks
// up the C symbol `InitializeInjectionNvtx2` and calls it with a getter of NVTX's export tables.
// The tool asks the getter for the callbacks table (kExportTableCallbacks), and that table for one
// function table per module (CORE: the calls without a domain; CORE2: the domain calls). A
// module's function table is an array of pointers to NVTX's own function-pointer slots, indexed by
// the callback ids below (index 0 and the last index are null); the tool writes its functions into
// the slots it handles. If the entry point returns 0 NVTX unloads the library and every NVTX call
// stays a no-op; slots the tool left alone become no-ops.
//
// Numbers (export table ids, module ids, callback ids, message and payload types) and the event
// attributes' layout are NVTX's ABI and must not change; the static_asserts pin the layout to the
// offsets nvToolsExt.h gives on LP64 Linux. NVTX's C enums are int-sized.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stroboscope::nvtx {

// ---- handles: opaque to the application, defined by the tool -----------------------------------
struct Domain;            // nvtxDomainRegistration_st; nullptr is the default domain
struct RegisteredString;  // nvtxStringRegistration_st
using DomainHandle = Domain*;
using StringHandle = RegisteredString*;
using RangeId = std::uint64_t;  // nvtxRangeId_t; 0 means no range

// ---- event attributes (nvtxEventAttributes_v2) --------------------------------------------------
inline constexpr int kMessageUnknown = 0;     // NVTX_MESSAGE_UNKNOWN: no message
inline constexpr int kMessageAscii = 1;       // NVTX_MESSAGE_TYPE_ASCII: const char*
inline constexpr int kMessageUnicode = 2;     // NVTX_MESSAGE_TYPE_UNICODE: const wchar_t* (UTF-32)
inline constexpr int kMessageRegistered = 3;  // NVTX_MESSAGE_TYPE_REGISTERED: a StringHandle

union MessageValue {
  const char* ascii;
  const wchar_t* unicode;
  StringHandle registered;
};

struct EventAttributes {
  std::uint16_t version;   // NVTX_VERSION of the application's headers
  std::uint16_t size;      // sizeof the struct the application knows: fields past it are absent
  std::uint32_t category;  // 0: none
  std::int32_t color_type;
  std::uint32_t color;
  std::int32_t payload_type;
  std::int32_t reserved0;
  std::uint64_t payload;  // a union of 64-bit and 32-bit numbers, read per payload_type
  std::int32_t message_type;
  MessageValue message;
};
static_assert(offsetof(EventAttributes, category) == 4);
static_assert(offsetof(EventAttributes, payload) == 24);
static_assert(offsetof(EventAttributes, message_type) == 32);
static_assert(offsetof(EventAttributes, message) == 40);
static_assert(sizeof(EventAttributes) == 48);

// ---- export tables (NvtxExportTableID) ----------------------------------------------------------
inline constexpr std::uint32_t kExportTableCallbacks = 1;    // NVTX_ETID_CALLBACKS
inline constexpr std::uint32_t kExportTableVersionInfo = 3;  // NVTX_ETID_VERSIONINFO

// Generic function pointer; a slot is cast to its real type before it is written.
using FunctionPointer = void (*)();
// A module's table: array of pointers to NVTX's function-pointer slots.
using FunctionTable = FunctionPointer**;

// NvtxExportTableCallbacks.
struct ExportTableCallbacks {
  std::size_t struct_size;
  // Returns non-zero and fills *out_table, *out_size (the number of entries, index 0 included,
  // the closing null excluded) for a known module; 0 for an unknown one.
  int (*get_module_function_table)(int module, FunctionTable* out_table, unsigned int* out_size);
};

// NvtxExportTableVersionInfo.
struct ExportTableVersionInfo {
  std::size_t struct_size;
  std::uint32_t version;  // NVTX_VERSION of the application's NVTX
  std::uint32_t reserved0;
  void (*set_injection_nvtx_version)(std::uint32_t version);  // the tool says which it speaks
};

using GetExportTable = const void* (*)(std::uint32_t export_table_id);  // NvtxGetExportTableFunc_t

// The NVTX API version this library was written against (NVTX_VERSION of NVTX v3).
inline constexpr std::uint32_t kVersion = 3;

// ---- callback modules (NvtxCallbackModule) ------------------------------------------------------
inline constexpr int kModuleCore = 1;   // NVTX_CB_MODULE_CORE
inline constexpr int kModuleCore2 = 5;  // NVTX_CB_MODULE_CORE2

// CORE slots (NvtxCallbackIdCore): the calls on the default domain.
inline constexpr unsigned kCoreMarkEx = 1;
inline constexpr unsigned kCoreMarkA = 2;
inline constexpr unsigned kCoreMarkW = 3;
inline constexpr unsigned kCoreRangeStartEx = 4;
inline constexpr unsigned kCoreRangeStartA = 5;
inline constexpr unsigned kCoreRangeStartW = 6;
inline constexpr unsigned kCoreRangeEnd = 7;
inline constexpr unsigned kCoreRangePushEx = 8;
inline constexpr unsigned kCoreRangePushA = 9;
inline constexpr unsigned kCoreRangePushW = 10;
inline constexpr unsigned kCoreRangePop = 11;
inline constexpr unsigned kCoreNameCategoryA = 12;
inline constexpr unsigned kCoreNameCategoryW = 13;

// CORE2 slots (NvtxCallbackIdCore2): the domain calls.
inline constexpr unsigned kCore2DomainMarkEx = 1;
inline constexpr unsigned kCore2DomainRangeStartEx = 2;
inline constexpr unsigned kCore2DomainRangeEnd = 3;
inline constexpr unsigned kCore2DomainRangePushEx = 4;
inline constexpr unsigned kCore2DomainRangePop = 5;
inline constexpr unsigned kCore2DomainNameCategoryA = 8;
inline constexpr unsigned kCore2DomainNameCategoryW = 9;
inline constexpr unsigned kCore2DomainRegisterStringA = 10;
inline constexpr unsigned kCore2DomainRegisterStringW = 11;
inline constexpr unsigned kCore2DomainCreateA = 12;
inline constexpr unsigned kCore2DomainCreateW = 13;
inline constexpr unsigned kCore2DomainDestroy = 14;
inline constexpr unsigned kCore2Initialize = 15;

// ---- the functions a tool writes into those slots ----------------------------------------------
using MarkExFn = void (*)(const EventAttributes*);
using MarkAFn = void (*)(const char*);
using MarkWFn = void (*)(const wchar_t*);
using RangeStartExFn = RangeId (*)(const EventAttributes*);
using RangeStartAFn = RangeId (*)(const char*);
using RangeStartWFn = RangeId (*)(const wchar_t*);
using RangeEndFn = void (*)(RangeId);
using RangePushExFn = int (*)(const EventAttributes*);  // the level pushed, or < 0
using RangePushAFn = int (*)(const char*);
using RangePushWFn = int (*)(const wchar_t*);
using RangePopFn = int (*)();  // the level popped, or < 0
using NameCategoryAFn = void (*)(std::uint32_t, const char*);
using NameCategoryWFn = void (*)(std::uint32_t, const wchar_t*);

using DomainMarkExFn = void (*)(DomainHandle, const EventAttributes*);
using DomainRangeStartExFn = RangeId (*)(DomainHandle, const EventAttributes*);
using DomainRangeEndFn = void (*)(DomainHandle, RangeId);
using DomainRangePushExFn = int (*)(DomainHandle, const EventAttributes*);
using DomainRangePopFn = int (*)(DomainHandle);
using DomainNameCategoryAFn = void (*)(DomainHandle, std::uint32_t, const char*);
using DomainNameCategoryWFn = void (*)(DomainHandle, std::uint32_t, const wchar_t*);
using DomainRegisterStringAFn = StringHandle (*)(DomainHandle, const char*);
using DomainRegisterStringWFn = StringHandle (*)(DomainHandle, const wchar_t*);
using DomainCreateAFn = DomainHandle (*)(const char*);
using DomainCreateWFn = DomainHandle (*)(const wchar_t*);
using DomainDestroyFn = void (*)(DomainHandle);
using InitializeFn = void (*)(const void*);

// The entry point NVTX looks up in the injection library (NvtxInitializeInjectionNvtxFunc_t):
// non-zero when the tool attached.
using InitializeInjectionFn = int (*)(GetExportTable);

}  // namespace stroboscope::nvtx

// Exported by the injection library (the name NVTX looks up with dlsym).
extern "C" int InitializeInjectionNvtx2(stroboscope::nvtx::GetExportTable get_export_table);
