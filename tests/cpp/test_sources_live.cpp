// Source tests for the registry (names, defaults, what describe_sources says) and the live
// machine: every source that works here on the real /proc, /sys and cgroups, this process, and
// forked children that exit or are killed; read() must not allocate.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/registry.hpp"

#include "source_fixture.hpp"

namespace {

// ---- registry -----------------------------------------------------------------------------------

void test_registry() {
  std::vector<std::string> want{"cpu",     "cpu_cores", "memory", "network",  "disk",  "diskio",
                                "process", "process_io", "threads", "proc_tree", "load", "pressure",
                                "cgroup", "gpu", "gpu_gpm", "amd_gpu"};
  CHECK(source_names() == want);
  Tree t;
  bool threw = false;
  try {
    (void)make_source("nope", t.opts("basic"));
  } catch (const std::invalid_argument& e) {
    threw = std::strcmp(e.what(),
                        "unknown source 'nope'; known sources: cpu, cpu_cores, memory, network, "
                        "disk, diskio, process, process_io, threads, proc_tree, load, pressure, "
                        "cgroup, gpu, gpu_gpm, amd_gpu") == 0;
    if (!threw) std::fprintf(stderr, "message: %s\n", e.what());
  }
  CHECK(threw);

  // The GPU part of the defaults depends on the machine (NVML present or not): test_nvml covers it.
  auto without_gpu = [](std::vector<std::string> names) {
    if (!names.empty() && names.back() == "amd_gpu") names.pop_back();
    if (!names.empty() && names.back() == "gpu_gpm") names.pop_back();
    if (!names.empty() && names.back() == "gpu") names.pop_back();
    return names;
  };
  std::vector<std::string> defaults{"cpu", "memory", "network", "disk", "diskio", "process"};
  SourceOptions rec = cgroup_opts(t, "basic", 6767, "basic");
  CHECK(without_gpu(default_source_names(rec)) == defaults);
  defaults.emplace_back("cgroup");
  CHECK(without_gpu(default_source_names(cgroup_opts(t, "cgroup_v2", 4242, "v2"))) == defaults);

  // old_kernel: no pid dir, no pressure, no cgroup; the rest builds.
  std::vector<SourceInfo> info = describe_sources(t.opts("old_kernel", 4321));
  CHECK_EQ(info.size(), want.size());
  for (const SourceInfo& i : info) {
    // Machine-dependent; test_nvml* cover them.
    if (i.name == "gpu" || i.name == "gpu_gpm" || i.name == "amd_gpu") continue;
    bool should_work = i.name == "cpu" || i.name == "cpu_cores" || i.name == "memory" ||
                       i.name == "network" || i.name == "disk" || i.name == "diskio" ||
                       i.name == "load";
    CHECK(i.available == should_work);
    CHECK(i.available == i.reason.empty());
    CHECK(!i.help.empty());
    CHECK(i.is_default == (i.name == "cpu" || i.name == "memory" || i.name == "network" ||
                           i.name == "disk" || i.name == "diskio" || i.name == "process"));
    if (i.name == "process") CHECK(i.reason.find("pid 4321 does not exist") != std::string::npos);
    if (i.name == "pressure") CHECK(i.reason.find("pressure") != std::string::npos);
  }
}

// ---- the live machine ---------------------------------------------------------------------------

std::int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

char proc_state(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), {});
  std::size_t close = s.rfind(')');
  return close == std::string::npos || close + 2 >= s.size() ? '?' : s[close + 2];
}

void test_live() {
  SourceOptions live;  // /proc, /sys, /sys/fs/cgroup, this process
  // Every source that works here: schema rules, two reads, no allocation inside read().
  std::vector<std::string> all_columns;
  for (const SourceInfo& info : describe_sources(live)) {
    if (!info.available) {
      std::printf("live: %s unavailable here: %s\n", info.name.c_str(), info.reason.c_str());
      continue;
    }
    auto s = make_source(info.name, live);
    for (const ColumnSpec& c : s->columns()) {
      CHECK(!c.unit.empty());
      CHECK(!c.help.empty());
      bool ok = !c.name.empty();
      for (char ch : c.name) {
        ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.');
      }
      CHECK(ok);
      if (info.is_default) all_columns.push_back(c.name);
    }
    Row r(*s);
    r.read(*s, mono_ns());
    r.read(*s, mono_ns() + 1'000'000);
    if (s->reason() != nullptr) {
      std::fprintf(stderr, "live %s: %s\n", s->name().c_str(), s->reason());
    }
    CHECK(s->reason() == nullptr);
  }
  std::sort(all_columns.begin(), all_columns.end());
  CHECK(std::adjacent_find(all_columns.begin(), all_columns.end()) == all_columns.end());

  // memory against sysinfo(2).
  struct sysinfo si{};
  CHECK(::sysinfo(&si) == 0);
  auto mem = make_source("memory", live);
  Row m(*mem);
  m.read(*mem, mono_ns());
  CHECK_EQ(m.i64("mem.total_bytes"), static_cast<std::int64_t>(si.totalram) * si.mem_unit);

  // This process (pid 0 = getpid()): one thread, rss as in /proc/self/statm.
  auto self = make_source("process", live);
  Row p(*self);
  p.read(*self, mono_ns());
  CHECK_EQ(p.i64("proc.threads"), 1);
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  CHECK_NEAR(static_cast<double>(p.i64("proc.rss_bytes")), static_cast<double>(resident * kPage),
             8.0 * (1 << 20));

  // A child that is killed and reaped: ESRCH on the kept fds -> "process exited".
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  SourceOptions co;
  co.pid = child;
  auto cs = make_source("process", co);
  Row c(*cs);
  c.read(*cs, mono_ns());
  CHECK(cs->reason() == nullptr);
  CHECK_EQ(c.i64("proc.threads"), 1);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  c.read(*cs, mono_ns());
  CHECK(c.all_null());
  CHECK(reason_is(*cs, kReasonProcessExited));
  CHECK_EQ(cs->error_number(), ESRCH);

  // A child that exits but is not reaped yet (a zombie) also counts as exited.
  int fds[2];
  CHECK(::pipe(fds) == 0);
  child = ::fork();
  if (child == 0) {
    char b;
    ::close(fds[1]);
    (void)!::read(fds[0], &b, 1);
    ::_exit(0);
  }
  ::close(fds[0]);
  co.pid = child;
  auto zs = make_source("process", co);
  Row z(*zs);
  z.read(*zs, mono_ns());
  CHECK(zs->reason() == nullptr);
  ::close(fds[1]);  // the child reads EOF and exits
  for (int i = 0; i < 500 && proc_state(child) != 'Z'; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  z.read(*zs, mono_ns());
  CHECK(z.all_null());
  CHECK(reason_is(*zs, kReasonProcessExited));
  ::waitpid(child, nullptr, 0);

  // proc_tree on this process: a child and a grandchild, then both gone after a rescan. As a
  // subreaper this process inherits the orphaned grandchild and can reap it (no zombie left).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  CHECK(::pipe(fds) == 0);
  child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    if (::fork() == 0) {
      int me = static_cast<int>(::getpid());
      (void)!::write(fds[1], &me, sizeof me);  // the grandchild is up
      ::pause();
      ::_exit(0);
    }
    ::close(fds[1]);
    ::pause();
    ::_exit(0);
  }
  ::close(fds[1]);
  int grandchild = 0;
  (void)!::read(fds[0], &grandchild, sizeof grandchild);
  ::close(fds[0]);
  auto tree = make_source("proc_tree", live);
  Row tr(*tree);
  std::int64_t now = mono_ns();
  tr.read(*tree, now);
  CHECK_EQ(tr.i64("proc.tree.count"), 3);
  CHECK_EQ(tr.i64("proc.tree.threads"), 3);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  if (grandchild > 0) {
    ::kill(grandchild, SIGKILL);
    ::waitpid(grandchild, nullptr, 0);
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  tr.read(*tree, now + 2'000'000'000);
  CHECK_EQ(tr.i64("proc.tree.count"), 1);
  CHECK(tree->reason() == nullptr);
}

}  // namespace

int main() {
  test_registry();
  test_live();
  TEST_MAIN_END();
}
