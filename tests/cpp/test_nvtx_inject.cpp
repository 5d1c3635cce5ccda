// The NVTX injection library as NVTX drives it: dlopen, InitializeInjectionNvtx2 with a fake
// export-table getter whose module tables point at slots of this test (as NVTX's own globals
// are), then the functions the library wrote into those slots, and the edges they wrote into the
// process's events file.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "stroboscope/nvtx_api.hpp"
#include "stroboscope/shared_events.hpp"  // the events file's layout (sev::)

namespace nv = stroboscope::nvtx;

namespace {

constexpr unsigned kSlots = 16;  // ids 1..15 of CORE and of CORE2, 0 unused (NVTX's table size)

// NVTX's function-pointer slots, and its tables of pointers to them: {null, &slot 1, ...,
// &slot 15, null}, reported size 16.
nv::FunctionPointer g_core[kSlots] = {};
nv::FunctionPointer g_core2[kSlots] = {};
nv::FunctionPointer* g_core_table[kSlots + 1] = {};
nv::FunctionPointer* g_core2_table[kSlots + 1] = {};
std::uint32_t g_tool_version = 0;

int get_module_function_table(int module, nv::FunctionTable* out, unsigned int* size) {
  if (module != nv::kModuleCore && module != nv::kModuleCore2) return 0;
  *out = module == nv::kModuleCore ? g_core_table : g_core2_table;
  *size = kSlots;
  return 1;
}
void set_version(std::uint32_t v) { g_tool_version = v; }

const nv::ExportTableCallbacks g_callbacks = {sizeof(nv::ExportTableCallbacks),
                                              get_module_function_table};
const nv::ExportTableVersionInfo g_version = {sizeof(nv::ExportTableVersionInfo), nv::kVersion,
                                              0, set_version};

const void* get_export_table(std::uint32_t id) {
  if (id == nv::kExportTableCallbacks) return &g_callbacks;
  if (id == nv::kExportTableVersionInfo) return &g_version;
  return nullptr;
}
const void* get_no_table(std::uint32_t) { return nullptr; }

void reset_tables() {
  for (unsigned i = 0; i < kSlots; ++i) {
    g_core[i] = nullptr;
    g_core2[i] = nullptr;
    g_core_table[i] = i == 0 ? nullptr : &g_core[i];
    g_core2_table[i] = i == 0 ? nullptr : &g_core2[i];
  }
  g_core_table[kSlots] = nullptr;
  g_core2_table[kSlots] = nullptr;
}

template <typename Fn>
Fn core(unsigned id) {
  return reinterpret_cast<Fn>(g_core[id]);
}
template <typename Fn>
Fn core2(unsigned id) {
  return reinterpret_cast<Fn>(g_core2[id]);
}

nv::InitializeInjectionFn load_entry_point() {
  void* handle = dlopen(NVTX_LIBRARY_PATH, RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", NVTX_LIBRARY_PATH, dlerror());
    return nullptr;
  }
  return reinterpret_cast<nv::InitializeInjectionFn>(dlsym(handle, "InitializeInjectionNvtx2"));
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
  }
  return names;
}

struct Edge {
  unsigned kind;
  std::string scope;
  unsigned depth;
  std::string labels;
  std::uint64_t stack;
  std::int64_t tid;
};

// The published records of an events file in index order, their ids turned into text (the
// layout of shared_events.hpp, read as the Python reader does).
std::vector<Edge> read_events_file(const std::string& path) {
  namespace sev = stroboscope::sev;
  std::vector<Edge> edges;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return edges;
  const auto bytes = static_cast<std::size_t>(st.st_size);
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return edges;
  const char* base = static_cast<const char*>(map);
  auto u64 = [&](std::size_t at) {
    std::uint64_t v = 0;
    std::memcpy(&v, base + at, sizeof v);
    return v;
  };
  std::vector<std::string> strings;
  std::size_t at = u64(sev::kOffStrings);
  for (std::uint64_t i = 0, n = u64(sev::kOffStringsCount); i < n; ++i) {
    std::uint32_t len = 0;
    std::memcpy(&len, base + at, sizeof len);
    strings.emplace_back(base + at + 4, len);
    at += 4 + len;
  }
  auto text = [&](std::uint64_t id) { return id < strings.size() ? strings[id] : "?"; };
  std::map<std::uint64_t, Edge> by_index;
  const std::uint64_t capacity = u64(sev::kOffCapacity);
  for (std::uint64_t slot = 0; slot < capacity; ++slot) {
    const std::uint64_t state = u64(u64(sev::kOffStates) + slot * 8);
    if (state == 0 || (state & 1) != 0) continue;  // never written, or being written
    const std::size_t record = u64(sev::kOffSlots) + slot * sev::kRecordBytes;
    const std::uint64_t w2 = u64(record + 16);
    const std::uint64_t w3 = u64(record + 24);
    by_index[(state >> 1) - 1] = Edge{static_cast<unsigned>((w3 >> 48) & 0xFF),
                                      text(w2 & 0xFFFFFFFF),
                                      static_cast<unsigned>((w3 >> 32) & 0xFFFF),
                                      text(w2 >> 32),
                                      u64(record + 8),
                                      static_cast<std::int32_t>(w3 & 0xFFFFFFFF)};
  }
  munmap(map, bytes);
  for (auto& [index, edge] : by_index) edges.push_back(edge);
  return edges;
}

nv::EventAttributes message(const char* text, std::uint32_t category = 0) {
  nv::EventAttributes a{};
  a.version = static_cast<std::uint16_t>(nv::kVersion);
  a.size = sizeof(nv::EventAttributes);
  a.category = category;
  a.message_type = nv::kMessageAscii;
  a.message.ascii = text;
  return a;
}

// Without STROBOSCOPE_EVENTS_DIR the library declines (NVTX then makes every call a no-op) and
// writes no slot. In a child: the library's writer is made once per process.
void test_declines_without_events_dir() {
  const pid_t pid = fork();
  if (pid == 0) {
    unsetenv(stroboscope::kEventsDirEnv);
    reset_tables();
    nv::InitializeInjectionFn init = load_entry_point();
    int bad = init == nullptr ? 1 : 0;
    if (init != nullptr && init(get_export_table) != 0) bad |= 2;
    for (unsigned i = 0; i < kSlots; ++i) {
      if (g_core[i] != nullptr || g_core2[i] != nullptr) bad |= 4;
    }
    _exit(bad);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);
}

void test_attaches_and_writes_edges(nv::InitializeInjectionFn init, const std::string& dir) {
  reset_tables();
  CHECK_EQ(init(get_no_table), 0);  // an NVTX without the callbacks table: nothing to attach to
  CHECK_EQ(init(get_export_table), 1);
  CHECK_EQ(g_tool_version, nv::kVersion);
  // The slots the library handles are written; the others (thread names, resources) are left to
  // NVTX, which makes them no-ops.
  for (unsigned id = nv::kCoreMarkEx; id <= nv::kCoreNameCategoryW; ++id) CHECK(g_core[id]);
  CHECK(g_core[14] == nullptr && g_core[15] == nullptr);
  for (unsigned id : {1u, 2u, 3u, 4u, 5u, 8u, 9u, 10u, 11u, 12u, 13u, 14u, 15u}) {
    CHECK(g_core2[id] != nullptr);
  }
  CHECK(g_core2[6] == nullptr && g_core2[7] == nullptr);

  // push/pop: the level pushed and the level popped, -1 past the bottom.
  CHECK_EQ(core<nv::RangePushAFn>(nv::kCoreRangePushA)("outer"), 0);
  const nv::EventAttributes inner = message("inner", 7);
  CHECK_EQ(core<nv::RangePushExFn>(nv::kCoreRangePushEx)(&inner), 1);
  CHECK_EQ(core<nv::RangePushWFn>(nv::kCoreRangePushW)(L"w\u00fcrfel"), 2);
  CHECK_EQ(core<nv::RangePopFn>(nv::kCoreRangePop)(), 2);
  CHECK_EQ(core<nv::RangePopFn>(nv::kCoreRangePop)(), 1);

  // Domains: one handle per name; each domain's levels are its own on a thread.
  auto create = core2<nv::DomainCreateAFn>(nv::kCore2DomainCreateA);
  nv::DomainHandle train = create("train");
  CHECK(train != nullptr);
  CHECK(create("train") == train);
  CHECK(create("io") != train);
  CHECK(core2<nv::DomainCreateWFn>(nv::kCore2DomainCreateW)(L"train") == train);
  auto dpush = core2<nv::DomainRangePushExFn>(nv::kCore2DomainRangePushEx);
  auto dpop = core2<nv::DomainRangePopFn>(nv::kCore2DomainRangePop);
  const nv::EventAttributes step = message("step");
  CHECK_EQ(dpush(train, &step), 0);  // "outer" is open on the default domain, not on "train"
  CHECK_EQ(dpush(nullptr, &step), 1);  // the null domain is the default domain

  auto reg = core2<nv::DomainRegisterStringAFn>(nv::kCore2DomainRegisterStringA);
  nv::StringHandle fwd = reg(train, "forward");
  CHECK(fwd != nullptr);
  CHECK(reg(train, "forward") == fwd);
  nv::EventAttributes registered = message(nullptr);
  registered.message_type = nv::kMessageRegistered;
  registered.message.registered = fwd;
  CHECK_EQ(dpush(train, &registered), 1);
  core2<nv::DomainNameCategoryAFn>(nv::kCore2DomainNameCategoryA)(train, 3, "compute");
  const nv::EventAttributes mark = message("tick", 3);
  core2<nv::DomainMarkExFn>(nv::kCore2DomainMarkEx)(train, &mark);
  CHECK_EQ(dpop(train), 1);
  CHECK_EQ(dpop(train), 0);
  CHECK_EQ(dpop(train), -1);
  CHECK_EQ(dpop(nullptr), 1);
  CHECK_EQ(core<nv::RangePopFn>(nv::kCoreRangePop)(), 0);
  CHECK_EQ(core<nv::RangePopFn>(nv::kCoreRangePop)(), -1);

  // start/end: distinct non-zero ids; an end on another thread is an end.
  auto start = core<nv::RangeStartAFn>(nv::kCoreRangeStartA);
  const nv::RangeId a = start("load");
  const nv::RangeId b = core2<nv::DomainRangeStartExFn>(nv::kCore2DomainRangeStartEx)(train, &step);
  CHECK(a != 0 && b != 0 && a != b);
  core<nv::RangeEndFn>(nv::kCoreRangeEnd)(a);
  core2<nv::DomainRangeEndFn>(nv::kCore2DomainRangeEnd)(train, b);
  core<nv::RangeEndFn>(nv::kCoreRangeEnd)(0);  // not a range: nothing
  core<nv::MarkAFn>(nv::kCoreMarkA)("done");

  // What the process's events file for the producer "nvtx" holds: every call above, in order.
  const std::string path = dir + "/" + std::to_string(getpid()) + ".nvtx.sev";
  const std::vector<Edge> edges = read_events_file(path);
  struct Want {
    unsigned kind;
    const char* scope;
    unsigned depth;
    const char* labels;
    char stack;  // d: default domain push/pop, t: "train" push/pop, a and b: the start/end ranges
  };
  const Want want[] = {
      {1, "outer", 0, "", 'd'},
      {1, "inner", 1, "{\"category\":\"7\"}", 'd'},
      {1, "w\xc3\xbcrfel", 2, "", 'd'},  // a Unicode message, as UTF-8
      {2, "w\xc3\xbcrfel", 2, "", 'd'},
      {2, "inner", 1, "{\"category\":\"7\"}", 'd'},
      {1, "train/step", 0, "", 't'},
      {1, "step", 1, "", 'd'},
      {1, "train/forward", 1, "", 't'},  // a registered string
      {1, "train/tick", 2, "{\"category\":\"compute\"}", 't'},  // a mark: a child of zero length
      {2, "train/tick", 2, "{\"category\":\"compute\"}", 't'},
      {2, "train/forward", 1, "", 't'},
      {2, "train/step", 0, "", 't'},
      {2, "step", 1, "", 'd'},
      {2, "outer", 0, "", 'd'},
      {1, "load", 0, "", 'a'},
      {1, "train/step", 0, "", 'b'},
      {2, "load", 0, "", 'a'},
      {2, "train/step", 0, "", 'b'},
      {1, "done", 0, "", 'd'},
      {2, "done", 0, "", 'd'},
  };
  CHECK_EQ(edges.size(), std::size(want));
  std::map<char, std::uint64_t> stacks;
  for (std::size_t i = 0; i < std::min(edges.size(), std::size(want)); ++i) {
    const Edge& e = edges[i];
    const Want& w = want[i];
    if (e.kind != w.kind || e.scope != w.scope || e.depth != w.depth || e.labels != w.labels) {
      std::fprintf(stderr, "edge %zu: got (%u, %s, %u, %s), want (%u, %s, %u, %s)\n", i, e.kind,
                   e.scope.c_str(), e.depth, e.labels.c_str(), w.kind, w.scope, w.depth,
                   w.labels);
      CHECK(false);
    }
    CHECK_EQ(e.tid, static_cast<std::int64_t>(gettid()));
    CHECK((e.stack >> 63) == 1);  // never a Python scope's stack (a thread ident or a task id)
    const auto known = stacks.emplace(w.stack, e.stack).first;
    CHECK_EQ(known->second, e.stack);  // the same stack as the edges it pairs with
  }
  CHECK_EQ(stacks.size(), 4u);
  std::map<std::uint64_t, char> distinct;
  for (const auto& [name, id] : stacks) distinct.emplace(id, name);
  CHECK_EQ(distinct.size(), 4u);  // and a different stack from the others
}

// Threads at once, each on the default domain and a domain of its own, with start/end ranges
// that end on another thread: every edge is in the file once, each push/pop stack holds one
// thread's edges, properly nested, and no two threads share a stack.
void test_threads(const std::string& dir) {
  constexpr int kThreads = 4;
  constexpr int kRanges = 500;
  const std::string path = dir + "/" + std::to_string(getpid()) + ".nvtx.sev";
  const std::size_t before = read_events_file(path).size();
  auto push = core<nv::RangePushAFn>(nv::kCoreRangePushA);
  auto pop = core<nv::RangePopFn>(nv::kCoreRangePop);
  auto create = core2<nv::DomainCreateAFn>(nv::kCore2DomainCreateA);
  auto dpush = core2<nv::DomainRangePushExFn>(nv::kCore2DomainRangePushEx);
  auto dpop = core2<nv::DomainRangePopFn>(nv::kCore2DomainRangePop);
  auto start = core<nv::RangeStartAFn>(nv::kCoreRangeStartA);
  auto end = core<nv::RangeEndFn>(nv::kCoreRangeEnd);
  std::vector<nv::RangeId> started(kThreads * kRanges);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      nv::DomainHandle mine = create(("thread" + std::to_string(t)).c_str());
      const nv::EventAttributes inner = message("inner");
      for (int i = 0; i < kRanges; ++i) {
        push("outer");
        dpush(mine, &inner);
        started[t * kRanges + i] = start("async");
        dpop(mine);
        pop();
      }
    });
  }
  for (auto& th : threads) th.join();
  std::thread ender([&] {
    for (nv::RangeId id : started) end(id);
  });
  ender.join();
  const std::vector<Edge> edges = read_events_file(path);
  CHECK_EQ(edges.size() - before, std::size_t{kThreads * kRanges * 6});
  std::map<std::uint64_t, std::vector<const Edge*>> stacks;
  for (std::size_t i = before; i < edges.size(); ++i) stacks[edges[i].stack].push_back(&edges[i]);
  CHECK_EQ(stacks.size(), std::size_t{kThreads * 2 + kThreads * kRanges});
  std::map<std::int64_t, int> push_pop_stacks_per_thread;
  for (const auto& [stack, list] : stacks) {
    if (list.front()->scope == "async") {  // its begin and its end, on two threads
      CHECK_EQ(list.size(), 2u);
      CHECK(list.size() == 2 && list[0]->kind == 1 && list[1]->kind == 2);
      CHECK(list.size() == 2 && list[0]->tid != list[1]->tid);
      continue;
    }
    ++push_pop_stacks_per_thread[list.front()->tid];
    int depth = 0;
    for (const Edge* e : list) {
      CHECK_EQ(e->tid, list.front()->tid);
      CHECK_EQ(e->depth, 0u);  // outer on the default domain, inner on the thread's domain
      depth += e->kind == 1 ? 1 : -1;
      CHECK(depth == 0 || depth == 1);
    }
    CHECK_EQ(depth, 0);
  }
  CHECK_EQ(push_pop_stacks_per_thread.size(), std::size_t{kThreads});
  for (const auto& [tid, n] : push_pop_stacks_per_thread) CHECK_EQ(n, 2);
}

}  // namespace

int main() {
  test_declines_without_events_dir();
  char dir_template[] = "/tmp/stroboscope-nvtx-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  CHECK(dir != nullptr);
  if (dir == nullptr) return 1;
  setenv(stroboscope::kEventsDirEnv, dir, 1);
  nv::InitializeInjectionFn init = load_entry_point();
  CHECK(init != nullptr);
  if (init != nullptr) {
    test_attaches_and_writes_edges(init, dir);
    test_threads(dir);
  }
  for (const std::string& name : files_in(dir)) unlink((std::string(dir) + "/" + name).c_str());
  rmdir(dir);
  if (stroboscope_test::failures() != 0) {
    std::fprintf(stderr, "%d failure(s)\n", stroboscope_test::failures());
    return 1;
  }
  std::puts("ok");
  return 0;
}
