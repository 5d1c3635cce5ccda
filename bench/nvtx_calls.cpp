// The NVTX injection library's own cost per call, from C (what a CUDA program's or torch's NVTX
// calls pay): the library is loaded and attached as NVTX does it (dlopen, InitializeInjectionNvtx2
// with an export-table getter whose tables point at slots here), then its functions are called
// through those slots, as NVTX's inline functions call them. Beside: a clock_gettime pair (the
// two stamps an edge pair needs at least) and an empty function through a pointer (NVTX's call).
//
// Build: c++ -O2 -std=c++20 -I cpp/include -o nvtx_calls bench/nvtx_calls.cpp -ldl
// Usage: STROBOSCOPE_EVENTS_DIR=DIR nvtx_calls LIBRARY [--calls N] [--rounds R]
// Prints one JSON object: median ns per push+pop (default domain, a domain), start+end, mark,
// clock pair and empty call over the rounds.
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "stroboscope/nvtx_api.hpp"

namespace nv = stroboscope::nvtx;

namespace {

nv::FunctionPointer g_core[16] = {};
nv::FunctionPointer g_core2[16] = {};
nv::FunctionPointer* g_core_table[17] = {};
nv::FunctionPointer* g_core2_table[17] = {};

int get_module_function_table(int module, nv::FunctionTable* out, unsigned int* size) {
  if (module != nv::kModuleCore && module != nv::kModuleCore2) return 0;
  *out = module == nv::kModuleCore ? g_core_table : g_core2_table;
  *size = 16;
  return 1;
}
const nv::ExportTableCallbacks g_callbacks = {sizeof(nv::ExportTableCallbacks),
                                              get_module_function_table};
const void* get_export_table(std::uint32_t id) {
  return id == nv::kExportTableCallbacks ? &g_callbacks : nullptr;
}

std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

volatile int g_sink = 0;
__attribute__((noinline)) int empty_call() { return g_sink; }
int (*volatile g_empty)() = empty_call;

template <typename Body>
double per_call(Body body, long calls) {
  const std::int64_t t0 = now_ns();
  for (long i = 0; i < calls; ++i) body();
  return static_cast<double>(now_ns() - t0) / static_cast<double>(calls);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: nvtx_calls LIBRARY [--calls N] [--rounds R]\n");
    return 2;
  }
  long calls = 1000000;
  int rounds = 7;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::atol(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  for (int i = 1; i < 16; ++i) {
    g_core_table[i] = &g_core[i];
    g_core2_table[i] = &g_core2[i];
  }
  void* handle = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  auto init =
      reinterpret_cast<nv::InitializeInjectionFn>(dlsym(handle, "InitializeInjectionNvtx2"));
  if (init == nullptr || init(get_export_table) == 0) {
    std::fprintf(stderr, "the library did not attach (is STROBOSCOPE_EVENTS_DIR set?)\n");
    return 1;
  }
  auto push = reinterpret_cast<nv::RangePushAFn>(g_core[nv::kCoreRangePushA]);
  auto pop = reinterpret_cast<nv::RangePopFn>(g_core[nv::kCoreRangePop]);
  auto start = reinterpret_cast<nv::RangeStartAFn>(g_core[nv::kCoreRangeStartA]);
  auto end = reinterpret_cast<nv::RangeEndFn>(g_core[nv::kCoreRangeEnd]);
  auto mark = reinterpret_cast<nv::MarkAFn>(g_core[nv::kCoreMarkA]);
  auto dpush = reinterpret_cast<nv::DomainRangePushExFn>(g_core2[nv::kCore2DomainRangePushEx]);
  auto dpop = reinterpret_cast<nv::DomainRangePopFn>(g_core2[nv::kCore2DomainRangePop]);
  auto create = reinterpret_cast<nv::DomainCreateAFn>(g_core2[nv::kCore2DomainCreateA]);
  nv::DomainHandle train = create("train");
  nv::EventAttributes step{};
  step.version = static_cast<std::uint16_t>(nv::kVersion);
  step.size = sizeof step;
  step.message_type = nv::kMessageAscii;
  step.message.ascii = "step";

  std::vector<double> clock, call, push_pop, domain_push_pop, start_end, marks;
  for (int r = 0; r < rounds; ++r) {
    clock.push_back(per_call([] { now_ns(), now_ns(); }, calls));
    call.push_back(per_call([] { g_empty(); }, calls));
    push_pop.push_back(per_call([&] { push("step"), pop(); }, calls));
    domain_push_pop.push_back(per_call([&] { dpush(train, &step), dpop(train); }, calls));
    start_end.push_back(per_call([&] { end(start("load")); }, calls));
    marks.push_back(per_call([&] { mark("tick"); }, calls));
  }
  std::printf(
      "{\"clock_pair\": %.1f, \"empty_call\": %.1f, \"push_pop\": %.1f, "
      "\"push_pop_domain\": %.1f, \"start_end\": %.1f, \"mark\": %.1f}\n",
      median(clock), median(call), median(push_pop), median(domain_push_pop), median(start_end),
      median(marks));
  return 0;
}
