// The NVTX injection library (libstroboscope_nvtx.so): NVTX ranges, marks, domains and categories
// of a process become scope edges in its shared events (shared_events.hpp, producer "nvtx"), on
// the clock and with the thread ids of stroboscope's own scopes.
//
// A recorder sets NVTX_INJECTION64_PATH to this library and STROBOSCOPE_EVENTS_DIR to its events
// directory; NVTX calls InitializeInjectionNvtx2 on the process's first NVTX call (nvtx_api.hpp).
// Without STROBOSCOPE_EVENTS_DIR (or when its file cannot be made) the entry point returns 0, and
// NVTX unloads nothing of ours but turns every call into its own no-op.
//
// What becomes what:
// - push/pop ranges: a begin at push and an end at pop on the stack of (thread, domain): NVTX
//   scopes push/pop levels to a domain, so each domain of a thread nests on its own (as Nsight
//   Systems draws a row per domain). The stack id is kPushPopStack | tid << 24 | domain index.
// - start/end ranges may end on another thread: each gets a stack of its own (kStartEndStack |
//   sequence number), depth 0; the range id handed back carries that number and the scope id.
// - marks: a begin and an end at one instant, one level below the innermost open range of the
//   thread's stack of that domain (a zero-length child of it).
// - names: the message (ASCII, Unicode as UTF-8, or a registered string), prefixed by the domain
//   name and '/' when the call gives a domain: "domain/message". No message: "(unnamed)".
// - categories: a label {"category": name} (the name given with nvtxNameCategory, else the
//   number), interned as the label set of the begin.
// Stack ids have bit 63 set, so they never equal the ids of Python scopes (thread idents and
// task ids, user-space addresses) in the same process.
//
// The callbacks are called by the application's threads from C: they never throw, and allocate
// only on a cache miss (a name or category not seen before on this thread, a deeper stack).
// This file: the ranges and marks, the functions written into NVTX's slots and the entry point;
// what a call is named by (domains, strings, categories, per-thread caches): nvtx_names.cpp.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "nvtx_names.hpp"
#include "stroboscope/nvtx_api.hpp"
#include "stroboscope/shared_events.hpp"

namespace stroboscope::nvtx {
namespace {

constexpr std::uint64_t kPushPopStack = std::uint64_t{1} << 63;
constexpr std::uint64_t kStartEndStack = std::uint64_t{3} << 62;
constexpr std::uint64_t kDomainBits = 24;

// The writer; set once by the entry point (release), read by every callback (acquire: the object
// it points to is fully made).
std::atomic<SharedEvents*> g_events{nullptr};
// Start/end range numbers (relaxed: only unique).
std::atomic<std::uint32_t> g_next_range{1};

struct Resolved {
  SharedEvents* ev = nullptr;
  Domain* domain = nullptr;
  DomainState* state = nullptr;
  ThreadState* thread = nullptr;
};

Resolved resolve(DomainHandle handle) noexcept {
  Resolved r;
  r.ev = g_events.load(std::memory_order_acquire);
  if (r.ev == nullptr) return r;
  r.thread = &thread_state();
  r.domain = &domain_of(handle);
  r.state = domain_state(*r.thread, *r.domain);
  if (r.state == nullptr) r.ev = nullptr;
  return r;
}

// The scope and label ids of an event's attributes (the fields the struct's size covers).
bool attribute_ids(const Resolved& r, const EventAttributes* a, Open* out) noexcept {
  try {
    std::string_view text;
    std::uint32_t category = 0;
    if (a != nullptr) {
      const std::size_t size = a->size;
      if (size >= offsetof(EventAttributes, category) + sizeof(a->category)) category = a->category;
      if (size >= offsetof(EventAttributes, message) + sizeof(a->message)) {
        switch (a->message_type) {
          case kMessageAscii:
            if (a->message.ascii != nullptr) text = a->message.ascii;
            break;
          case kMessageUnicode:
            text = to_utf8(a->message.unicode, r.thread->utf8);
            break;
          case kMessageRegistered:
            if (a->message.registered != nullptr) text = a->message.registered->text;
            break;
          default:
            break;
        }
      }
    }
    out->scope_id = name_id(*r.ev, *r.domain, *r.state, text);
    out->labels_id = category_labels(*r.ev, *r.domain, *r.state, category);
    return true;
  } catch (...) {
    return false;  // out of memory: the event is left out
  }
}

std::uint16_t clamp_depth(std::size_t depth) noexcept {
  return static_cast<std::uint16_t>(std::min<std::size_t>(depth, 0xFFFF));
}

std::uint64_t push_pop_stack(const ThreadState& t, const Domain& d) noexcept {
  return kPushPopStack | (t.tid << kDomainBits) |
         (d.index & ((std::uint64_t{1} << kDomainBits) - 1));
}

int push(DomainHandle handle, const EventAttributes* a) noexcept {
  const Resolved r = resolve(handle);
  Open o{};
  if (r.ev == nullptr || !attribute_ids(r, a, &o)) return -1;
  std::vector<Open>& open = r.state->open;
  const std::size_t level = open.size();
  try {
    open.push_back(o);
  } catch (...) {
    return -1;
  }
  r.ev->push(EventKind::kBegin, o.scope_id, clamp_depth(level), o.labels_id,
             push_pop_stack(*r.thread, *r.domain));
  return static_cast<int>(std::min<std::size_t>(level, 0x7FFFFFFF));
}

int pop(DomainHandle handle) noexcept {
  const Resolved r = resolve(handle);
  if (r.ev == nullptr || r.state->open.empty()) return -1;
  const Open o = r.state->open.back();
  r.state->open.pop_back();
  const std::size_t level = r.state->open.size();
  r.ev->push(EventKind::kEnd, o.scope_id, clamp_depth(level), o.labels_id,
             push_pop_stack(*r.thread, *r.domain));
  return static_cast<int>(std::min<std::size_t>(level, 0x7FFFFFFF));
}

RangeId start(DomainHandle handle, const EventAttributes* a) noexcept {
  const Resolved r = resolve(handle);
  Open o{};
  if (r.ev == nullptr || !attribute_ids(r, a, &o)) return 0;
  std::uint32_t n = g_next_range.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = g_next_range.fetch_add(1, std::memory_order_relaxed);  // 0 is "no range"
  r.ev->push(EventKind::kBegin, o.scope_id, 0, o.labels_id, kStartEndStack | n);
  return (RangeId{n} << 32) | o.scope_id;
}

void end(RangeId id) noexcept {
  SharedEvents* ev = g_events.load(std::memory_order_acquire);
  const auto n = static_cast<std::uint32_t>(id >> 32);
  if (ev == nullptr || n == 0) return;  // not a range of ours
  ev->push(EventKind::kEnd, static_cast<std::uint32_t>(id), 0, 0, kStartEndStack | n);
}

void mark(DomainHandle handle, const EventAttributes* a) noexcept {
  const Resolved r = resolve(handle);
  Open o{};
  if (r.ev == nullptr || !attribute_ids(r, a, &o)) return;
  r.ev->mark(o.scope_id, clamp_depth(r.state->open.size()), o.labels_id,
             push_pop_stack(*r.thread, *r.domain));
}

EventAttributes ascii_attributes(const char* message) noexcept {
  EventAttributes a{};
  a.version = static_cast<std::uint16_t>(kVersion);
  a.size = sizeof(EventAttributes);
  a.message_type = kMessageAscii;
  a.message.ascii = message;
  return a;
}

EventAttributes unicode_attributes(const wchar_t* message) noexcept {
  EventAttributes a = ascii_attributes(nullptr);
  a.message_type = kMessageUnicode;
  a.message.unicode = message;
  return a;
}


// ---- the functions written into NVTX's slots ---------------------------------------------------
// CORE: the default domain.
void core_mark_ex(const EventAttributes* a) { mark(nullptr, a); }
void core_mark_a(const char* m) {
  const EventAttributes a = ascii_attributes(m);
  mark(nullptr, &a);
}
void core_mark_w(const wchar_t* m) {
  const EventAttributes a = unicode_attributes(m);
  mark(nullptr, &a);
}
RangeId core_start_ex(const EventAttributes* a) { return start(nullptr, a); }
RangeId core_start_a(const char* m) {
  const EventAttributes a = ascii_attributes(m);
  return start(nullptr, &a);
}
RangeId core_start_w(const wchar_t* m) {
  const EventAttributes a = unicode_attributes(m);
  return start(nullptr, &a);
}
void core_end(RangeId id) { end(id); }
int core_push_ex(const EventAttributes* a) { return push(nullptr, a); }
int core_push_a(const char* m) {
  const EventAttributes a = ascii_attributes(m);
  return push(nullptr, &a);
}
int core_push_w(const wchar_t* m) {
  const EventAttributes a = unicode_attributes(m);
  return push(nullptr, &a);
}
int core_pop() { return pop(nullptr); }
void core_name_category_a(std::uint32_t c, const char* n) {
  name_category(nullptr, c, n != nullptr ? std::string_view(n) : std::string_view());
}
void core_name_category_w(std::uint32_t c, const wchar_t* n) {
  try {
    std::string utf8;
    name_category(nullptr, c, to_utf8(n, utf8));
  } catch (...) {
  }
}

// CORE2: the domain calls (a null domain is the default domain).
void domain_mark_ex(DomainHandle d, const EventAttributes* a) { mark(d, a); }
RangeId domain_start_ex(DomainHandle d, const EventAttributes* a) { return start(d, a); }
void domain_end(DomainHandle, RangeId id) { end(id); }
int domain_push_ex(DomainHandle d, const EventAttributes* a) { return push(d, a); }
int domain_pop(DomainHandle d) { return pop(d); }
void domain_name_category_a(DomainHandle d, std::uint32_t c, const char* n) {
  name_category(d, c, n != nullptr ? std::string_view(n) : std::string_view());
}
void domain_name_category_w(DomainHandle d, std::uint32_t c, const wchar_t* n) {
  try {
    std::string utf8;
    name_category(d, c, to_utf8(n, utf8));
  } catch (...) {
  }
}
StringHandle domain_register_string_a(DomainHandle d, const char* s) {
  return register_string(d, s != nullptr ? std::string_view(s) : std::string_view());
}
StringHandle domain_register_string_w(DomainHandle d, const wchar_t* s) {
  try {
    std::string utf8;
    return register_string(d, to_utf8(s, utf8));
  } catch (...) {
    return nullptr;
  }
}
DomainHandle domain_create_a(const char* name) {
  if (name == nullptr) return nullptr;
  return create_domain(name);
}
DomainHandle domain_create_w(const wchar_t* name) {
  if (name == nullptr) return nullptr;
  try {
    std::string utf8;
    return create_domain(to_utf8(name, utf8));
  } catch (...) {
    return nullptr;
  }
}
// Handles stay valid after destroy: ranges may still end on them, and a later create of the same
// name returns the same handle.
void domain_destroy(DomainHandle) {}
void initialize(const void*) {}

template <typename Fn>
FunctionPointer as_slot(Fn fn) noexcept {
  return reinterpret_cast<FunctionPointer>(fn);
}

struct Slot {
  unsigned id;
  FunctionPointer fn;
};

// Writes `slots` into the module's table; false when NVTX has no such module.
bool attach(const ExportTableCallbacks& callbacks, int module, const Slot* slots,
            std::size_t count) noexcept {
  FunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks.get_module_function_table(module, &table, &size) == 0 || table == nullptr) {
    return false;
  }
  for (std::size_t i = 0; i < count; ++i) {
    // A slot past the application's table (an older NVTX) or without storage is left alone.
    if (slots[i].id < size && table[slots[i].id] != nullptr) *table[slots[i].id] = slots[i].fn;
  }
  return true;
}

}  // namespace
}  // namespace stroboscope::nvtx

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    stroboscope::nvtx::GetExportTable get_export_table) {
  using namespace stroboscope::nvtx;
  if (get_export_table == nullptr) return 0;
  const auto* callbacks =
      static_cast<const ExportTableCallbacks*>(get_export_table(kExportTableCallbacks));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(ExportTableCallbacks) ||
      callbacks->get_module_function_table == nullptr) {
    return 0;
  }
  stroboscope::SharedEvents* events = stroboscope::SharedEvents::process("nvtx");
  if (events == nullptr) return 0;  // no recorder (or no file): NVTX stays a no-op
  static const int atfork = pthread_atfork(nullptr, nullptr, atfork_child);
  (void)atfork;
  g_events.store(events, std::memory_order_release);

  const Slot core[] = {
      {kCoreMarkEx, as_slot<MarkExFn>(core_mark_ex)},
      {kCoreMarkA, as_slot<MarkAFn>(core_mark_a)},
      {kCoreMarkW, as_slot<MarkWFn>(core_mark_w)},
      {kCoreRangeStartEx, as_slot<RangeStartExFn>(core_start_ex)},
      {kCoreRangeStartA, as_slot<RangeStartAFn>(core_start_a)},
      {kCoreRangeStartW, as_slot<RangeStartWFn>(core_start_w)},
      {kCoreRangeEnd, as_slot<RangeEndFn>(core_end)},
      {kCoreRangePushEx, as_slot<RangePushExFn>(core_push_ex)},
      {kCoreRangePushA, as_slot<RangePushAFn>(core_push_a)},
      {kCoreRangePushW, as_slot<RangePushWFn>(core_push_w)},
      {kCoreRangePop, as_slot<RangePopFn>(core_pop)},
      {kCoreNameCategoryA, as_slot<NameCategoryAFn>(core_name_category_a)},
      {kCoreNameCategoryW, as_slot<NameCategoryWFn>(core_name_category_w)},
  };
  const Slot core2[] = {
      {kCore2DomainMarkEx, as_slot<DomainMarkExFn>(domain_mark_ex)},
      {kCore2DomainRangeStartEx, as_slot<DomainRangeStartExFn>(domain_start_ex)},
      {kCore2DomainRangeEnd, as_slot<DomainRangeEndFn>(domain_end)},
      {kCore2DomainRangePushEx, as_slot<DomainRangePushExFn>(domain_push_ex)},
      {kCore2DomainRangePop, as_slot<DomainRangePopFn>(domain_pop)},
      {kCore2DomainNameCategoryA, as_slot<DomainNameCategoryAFn>(domain_name_category_a)},
      {kCore2DomainNameCategoryW, as_slot<DomainNameCategoryWFn>(domain_name_category_w)},
      {kCore2DomainRegisterStringA, as_slot<DomainRegisterStringAFn>(domain_register_string_a)},
      {kCore2DomainRegisterStringW, as_slot<DomainRegisterStringWFn>(domain_register_string_w)},
      {kCore2DomainCreateA, as_slot<DomainCreateAFn>(domain_create_a)},
      {kCore2DomainCreateW, as_slot<DomainCreateWFn>(domain_create_w)},
      {kCore2DomainDestroy, as_slot<DomainDestroyFn>(domain_destroy)},
      {kCore2Initialize, as_slot<InitializeFn>(initialize)},
  };
  const bool has_core = attach(*callbacks, kModuleCore, core, std::size(core));
  const bool has_core2 = attach(*callbacks, kModuleCore2, core2, std::size(core2));
  if (!has_core && !has_core2) return 0;

  const auto* version =
      static_cast<const ExportTableVersionInfo*>(get_export_table(kExportTableVersionInfo));
  if (version != nullptr && version->struct_size >= sizeof(ExportTableVersionInfo) &&
      version->set_injection_nvtx_version != nullptr) {
    version->set_injection_nvtx_version(kVersion);
  }
  return 1;
}
