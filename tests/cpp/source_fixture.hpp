// Helpers shared by the C++ source tests: a heap-allocation counter (read() must not allocate), a
// private copy of tests/data that can "advance" to its next snapshot, and a row of cells read by
// column name. Include it from exactly one file per test executable (it replaces operator new).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/registry.hpp"
#include "stroboscope/source.hpp"

// ---- heap allocation counter: read() must not allocate ------------------------------------------
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};
void* counted_alloc(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocs.fetch_add(1, std::memory_order_relaxed);
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace
void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

using namespace stroboscope;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kT0 = 1'000'000'000;  // fabricated tick times: 0.5 s apart
constexpr std::int64_t kT1 = 1'500'000'000;
constexpr std::int64_t kT2 = 2'000'000'000;

// The clock sources on a recorded tree stamp their reads with (SourceOptions::gettime): every
// clock reads g_read_ns, which Row::read sets to the tick's time, so a read happens at its tick.
std::int64_t g_read_ns = 0;
int tick_gettime(clockid_t, timespec* ts) {
  ts->tv_sec = static_cast<time_t>(g_read_ns / 1'000'000'000);
  ts->tv_nsec = static_cast<long>(g_read_ns % 1'000'000'000);
  return 0;
}

const long kPage = ::sysconf(_SC_PAGESIZE);
const long kTck = ::sysconf(_SC_CLK_TCK);  // the hand-computed CPU % below assume 100

// A private copy of tests/data, removed at the end.
class Tree {
 public:
  Tree() {
    std::string tmpl = (fs::temp_directory_path() / "stroboscope-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root_ = tmpl;
    fs::copy(STROBOSCOPE_TEST_DATA, root_, fs::copy_options::recursive);
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string path(const std::string& rel) const { return root_ + "/" + rel; }
  // Writes every "<f><suffix>" under `rel` over "<f>", in place.
  void advance(const std::string& rel, const std::string& suffix = ".1") const {
    for (const auto& e : fs::recursive_directory_iterator(path(rel))) {
      std::string p = e.path().string();
      if (!e.is_regular_file() || p.size() <= suffix.size() ||
          p.compare(p.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      std::ifstream in(p, std::ios::binary);
      std::string content((std::istreambuf_iterator<char>(in)), {});
      write(p.substr(0, p.size() - suffix.size()), content);
    }
  }
  static void write(const std::string& path, const std::string& content) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);  // same inode: O_TRUNC
    out << content;
  }
  SourceOptions opts(const std::string& proc_case, int pid = 1) const {
    SourceOptions o;
    o.proc_root = path("proc/" + proc_case);
    o.sys_root = path("sys/" + proc_case);
    o.cgroup_root = path("cgroup/none");
    o.pid = pid;
    o.gettime = &tick_gettime;
    return o;
  }

 private:
  std::string root_;
};

// One row of cells for a source, looked up by column name.
class Row {
 public:
  explicit Row(const Source& s) : src_(s), cells_(s.columns().size()), valid_(s.columns().size()) {}
  // Reads once at `now_ns` into a cleared row (as the sampler does each tick); counts allocations.
  // `late_ns`: the sampler thread was preempted that long between the tick and the read.
  void read(Source& s, std::int64_t now_ns, std::int64_t late_ns = 0) {
    std::fill(valid_.begin(), valid_.end(), 0);
    g_read_ns = now_ns + late_ns;
    g_allocs = 0;
    g_counting = true;
    s.read(RowWriter(cells_.data(), valid_.data(), cells_.size()), now_ns);
    g_counting = false;
    if (g_allocs != 0) {
      std::fprintf(stderr, "source %s allocated %ld time(s) in read()\n", s.name().c_str(),
                   g_allocs.load());
      ++stroboscope_test::failures();
    }
  }
  std::size_t index(const char* name) const {
    for (std::size_t i = 0; i < src_.columns().size(); ++i) {
      if (src_.columns()[i].name == name) return i;
    }
    std::fprintf(stderr, "source %s has no column %s\n", src_.name().c_str(), name);
    ++stroboscope_test::failures();
    return 0;
  }
  bool has(const char* name) const {
    for (const ColumnSpec& c : src_.columns()) {
      if (c.name == name) return true;
    }
    return false;
  }
  bool null(const char* name) const { return valid_[index(name)] == 0; }
  double f64(const char* name) const {
    std::size_t i = index(name);
    if (!valid_[i]) return -12345.0;  // a value no check expects
    double v;
    std::memcpy(&v, &cells_[i], sizeof v);
    return v;
  }
  std::int64_t i64(const char* name) const {
    std::size_t i = index(name);
    if (!valid_[i]) return -12345;
    std::int64_t v;
    std::memcpy(&v, &cells_[i], sizeof v);
    return v;
  }
  bool all_null() const {
    for (std::uint8_t v : valid_) {
      if (v) return false;
    }
    return true;
  }

 private:
  const Source& src_;
  std::vector<std::uint64_t> cells_;
  std::vector<std::uint8_t> valid_;
};

template <typename F>
bool throws_with(F&& f, const char* needle) {
  try {
    f();
  } catch (const std::exception& e) {
    if (std::strstr(e.what(), needle) != nullptr) return true;
    std::fprintf(stderr, "exception text \"%s\" lacks \"%s\"\n", e.what(), needle);
    return false;
  }
  return false;
}

bool reason_is(const Source& s, const char* r) {
  return s.reason() != nullptr && std::strcmp(s.reason(), r) == 0;
}

// The options of a cgroup case: /proc from tests/data/proc/<proc_case>, cgroups from cgroup/<cg>.
SourceOptions cgroup_opts(const Tree& t, const char* proc_case, int pid, const char* cg) {
  SourceOptions o = t.opts(proc_case, pid);
  o.cgroup_root = t.path(std::string("cgroup/") + cg);
  return o;
}

}  // namespace
