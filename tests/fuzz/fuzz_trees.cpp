// libFuzzer harness: whole fake /proc and cgroup trees, mutated between reads.
//
// The sources are built on a private directory (proc/, sys/, cgroup/ under $TMPDIR) and read
// the way the sampler reads them: files kept open and re-read in place. The input is a list of
// records, each `selector (1 byte), length (2 bytes, little-endian), content`: selector
// s % (kNumFiles + 1) names a file of kFiles to overwrite in place (same inode, as the kernel's
// files keep theirs), or, when it equals kNumFiles, a tick: every source is read once, 0.6 s of
// fabricated time after the previous tick (so proc_tree rescans every other tick). Every file
// starts each input from a valid baseline; the records before the first tick shape what the
// sources see when they are built. tests/fuzz/make_seeds.py writes tests/data's cases in this
// format. Besides the sanitizers, it checks the hot-path rule: no read() allocates, whatever the
// files hold.
#include <fcntl.h>
#include <sanitizer/allocator_interface.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "stroboscope/registry.hpp"
#include "stroboscope/source.hpp"

// ---- heap allocations made while a source reads: there must be none ----------------------------
// Counted through the sanitizer allocator's hooks (malloc and operator new alike), so nothing
// of libFuzzer's own allocation is replaced.
namespace {
// Only this thread reads; relaxed is enough (atomics only because the hook runs on every
// thread that allocates).
std::atomic<bool> g_in_read{false};
std::atomic<long> g_read_allocs{0};
void on_malloc(const volatile void*, std::size_t) {
  if (g_in_read.load(std::memory_order_relaxed)) {
    g_read_allocs.fetch_add(1, std::memory_order_relaxed);
  }
}
void on_free(const volatile void*) {}
const int g_hooks_installed = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}  // namespace

namespace {

struct File {
  const char* path;      // under the private root
  const char* baseline;  // valid content
};

constexpr File kFiles[] = {
    {"proc/stat", "cpu  100 0 50 1000 0 0 0 0 0 0\ncpu0 100 0 50 1000 0 0 0 0 0 0\n"},
    {"proc/meminfo", "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 500 kB\n"},
    {"proc/net/dev", "Inter-|\n face |\n  eth0: 1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0\n"},
    {"proc/diskstats", "   8       0 sda 1 0 8 0 1 0 16 0 0 0 0\n"},
    {"proc/loadavg", "0.10 0.20 0.30 1/80 42\n"},
    {"proc/pressure/cpu", "some avg10=0.00 avg60=0.00 avg300=0.00 total=100\n"},
    {"proc/pressure/memory", "some avg10=0.00 avg60=0.00 avg300=0.00 total=100\n"
                             "full avg10=0.00 avg60=0.00 avg300=0.00 total=50\n"},
    {"proc/pressure/io", "some avg10=0.00 avg60=0.00 avg300=0.00 total=100\n"
                         "full avg10=0.00 avg60=0.00 avg300=0.00 total=50\n"},
    {"proc/42/stat", "42 (root) S 1 42 42 0 -1 0 0 0 0 0 10 5 0 0 20 0 2 0 500 1000 10\n"},
    {"proc/42/statm", "1000 100 10 1 0 500 0\n"},
    {"proc/42/status", "Name:\troot\nPPid:\t1\nThreads:\t2\nvoluntary_ctxt_switches:\t3\n"
                       "nonvoluntary_ctxt_switches:\t4\n"},
    {"proc/42/io", "rchar: 1\nwchar: 2\nread_bytes: 4096\nwrite_bytes: 8192\n"},
    {"proc/42/cgroup", "0::/\n"},
    {"proc/43/stat", "43 (child) S 42 42 42 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 600 1000 10\n"},
    {"proc/43/statm", "500 50 5 1 0 200 0\n"},
    {"proc/sys/kernel/pid_max", "32768\n"},
    {"cgroup/cgroup.controllers", "cpu memory\n"},
    {"cgroup/cpu.max", "150000 100000\n"},
    {"cgroup/cpu.stat", "usage_usec 1000\nuser_usec 600\nsystem_usec 400\n"},
    {"cgroup/memory.max", "1073741824\n"},
    {"cgroup/memory.current", "4096\n"},
};
constexpr std::size_t kNumFiles = sizeof kFiles / sizeof kFiles[0];
constexpr int kMaxTicks = 16;
constexpr const char* kSources[] = {"cpu",     "cpu_cores",  "memory",    "network",
                                    "diskio",  "process",    "process_io", "proc_tree",
                                    "load",    "pressure",   "cgroup"};

const std::string& root() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                       "/stroboscope-fuzz-XXXXXX";
    FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr);
    for (const char* d : {"/proc", "/proc/net", "/proc/pressure", "/proc/42", "/proc/43",
                          "/proc/sys", "/proc/sys/kernel", "/sys", "/cgroup"}) {
      FUZZ_CHECK(::mkdir((tmpl + d).c_str(), 0700) == 0);
    }
    return tmpl;
  }();
  return dir;
}

// Overwrites a file in place: O_TRUNC keeps the inode the sources hold open.
void write_file(std::size_t i, const char* data, std::size_t n) {
  const std::string path = root() + "/" + kFiles[i].path;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FUZZ_CHECK(fd >= 0);
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    FUZZ_CHECK(w > 0);
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  ::close(fd);
}

struct Reader {
  std::unique_ptr<stroboscope::Source> source;
  std::vector<std::uint64_t> cells;
  std::vector<std::uint8_t> valid;
};

void read_all(std::vector<Reader>& readers, std::int64_t now_ns) {
  for (Reader& r : readers) {
    std::fill(r.valid.begin(), r.valid.end(), 0);
    FUZZ_CHECK(g_hooks_installed != 0);
    g_read_allocs.store(0, std::memory_order_relaxed);
    g_in_read.store(true, std::memory_order_relaxed);
    r.source->read(stroboscope::RowWriter(r.cells.data(), r.valid.data(), r.cells.size()),
                   now_ns);
    g_in_read.store(false, std::memory_order_relaxed);
    if (g_read_allocs.load(std::memory_order_relaxed) != 0) {
      std::fprintf(stderr, "source %s allocated in read()\n", r.source->name().c_str());
      std::abort();
    }
  }
}

// Applies records from `data` until a tick record or the end; returns false at the end.
bool apply_until_tick(const std::uint8_t*& data, std::size_t& size) {
  while (size >= 3) {
    const std::size_t sel = data[0] % (kNumFiles + 1);
    std::size_t len = static_cast<std::size_t>(data[1]) | (static_cast<std::size_t>(data[2]) << 8);
    data += 3;
    size -= 3;
    if (sel == kNumFiles) return true;
    if (len > size) len = size;
    write_file(sel, reinterpret_cast<const char*>(data), len);
    data += len;
    size -= len;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (std::size_t i = 0; i < kNumFiles; ++i) {
    write_file(i, kFiles[i].baseline, std::strlen(kFiles[i].baseline));
  }
  bool more = apply_until_tick(data, size);

  stroboscope::SourceOptions opts;
  opts.proc_root = root() + "/proc";
  opts.sys_root = root() + "/sys";
  opts.cgroup_root = root() + "/cgroup";
  opts.pid = 42;
  std::vector<Reader> readers;
  for (const char* name : kSources) {
    try {
      Reader r;
      r.source = stroboscope::make_source(name, opts);
      r.cells.assign(r.source->columns().size(), 0);
      r.valid.assign(r.source->columns().size(), 0);
      readers.push_back(std::move(r));
    } catch (const std::exception&) {
      // A source that refuses this tree at construction is a clear error, not a crash.
    }
  }
  std::int64_t now_ns = 1'000'000'000;
  read_all(readers, now_ns);
  for (int tick = 0; more && tick < kMaxTicks; ++tick) {
    more = apply_until_tick(data, size);
    now_ns += 600'000'000;
    read_all(readers, now_ns);
  }
  return 0;
}
