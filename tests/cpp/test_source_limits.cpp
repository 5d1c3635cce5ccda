// Sources at the edges of what they can represent and hold: values from /proc or a cgroup that
// overflow int64 once scaled or summed (tests/data/proc/overflow, tests/data/cgroup/overflow:
// each was a signed-overflow abort under UBSan), CPU % capped at what the threads could use, and
// the descriptors proc_tree keeps open for a tree larger than the fd budget.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <limits>
#include <string>

#include "source_fixture.hpp"

namespace {

constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

// ---- item: signed overflow from file contents ----------------------------------------------------

// meminfo without MemAvailable whose MemFree + Buffers + Cached (each 2^63 - 1024 bytes) does not
// fit: the estimate and what derives from it are null, with a reason; MemTotal is still reported.
void test_meminfo_estimate_overflow() {
  Tree t;
  auto src = make_source("memory", t.opts("overflow"));
  Row r(*src);
  r.read(*src, kT0);
  CHECK(reason_is(*src, "value out of range in /proc/meminfo"));
  CHECK_EQ(src->error_number(), ERANGE);
  CHECK_EQ(r.i64("mem.total_bytes"), 24683584LL * 1024);
  CHECK(r.null("mem.available_bytes"));
  CHECK(r.null("mem.used_bytes"));
  CHECK(r.null("mem.util_pct"));
  CHECK_EQ(r.i64("mem.swap_used_bytes"), 0);
}

// statm resident 2^62 pages: × the page size does not fit. threads (2^63 - 1) fits and is kept.
void test_process_rss_overflow() {
  Tree t;
  auto src = make_source("process", t.opts("overflow", 4000));
  Row r(*src);
  r.read(*src, kT0);
  CHECK(reason_is(*src, "value out of range in /proc/<pid>/statm"));
  CHECK_EQ(src->error_number(), ERANGE);
  CHECK(r.null("proc.rss_bytes"));
  CHECK(r.null("proc.mem_pct"));
  CHECK_EQ(r.i64("proc.threads"), kI64Max);
}

// Two members, each with 2^63 - 1 threads and 2^62 resident pages: neither sum fits.
void test_proc_tree_sum_overflow() {
  Tree t;
  auto src = make_source("proc_tree", t.opts("overflow", 4000));
  Row r(*src);
  r.read(*src, kT0);
  CHECK(reason_is(*src, "value out of range in /proc/<pid>/stat or statm"));
  CHECK_EQ(src->error_number(), ERANGE);
  CHECK(r.null("proc.tree.rss_bytes"));
  CHECK(r.null("proc.tree.threads"));
  CHECK_EQ(r.i64("proc.tree.count"), 2);
  CHECK_EQ(r.i64("proc.tree.untracked"), 0);
}

// cgroup v2 cpu.stat usage_usec 2^63 - 1: × 1000 (to ns) does not fit.
void test_cgroup_usage_overflow() {
  Tree t;
  auto src = make_source("cgroup", cgroup_opts(t, "overflow", 4000, "overflow"));
  Row r(*src);
  r.read(*src, kT0);
  r.read(*src, kT1);
  CHECK(reason_is(*src, "cgroup cpu usage out of range"));
  CHECK_EQ(src->error_number(), ERANGE);
  CHECK(r.null("cgroup.cpu_used_cores"));
  CHECK(r.null("cgroup.cpu_limit_cores"));
  CHECK_EQ(r.i64("cgroup.mem_used_bytes"), 4096);
}

// ---- CPU % never above what the threads could use -------------------------------------------------

// proc/cpu_cap: one thread, utime+stime 120 -> 131 over 0.1 s. At USER_HZ 100 that is 11 ticks
// = 0.11 s of CPU in 0.1 s = 110 %, more than one thread can use: reported as 100 %.
void test_cpu_pct_capped_at_threads() {
  const double raw = 100.0 * 11.0 / static_cast<double>(kTck) / 0.1;
  const double expected = raw > 100.0 ? 100.0 : raw;
  for (const char* name : {"process", "proc_tree"}) {
    Tree t;
    auto src = make_source(name, t.opts("cpu_cap", 5000));
    Row r(*src);
    r.read(*src, kT0);
    t.advance("proc/cpu_cap");
    r.read(*src, kT0 + 100'000'000);
    const char* col = std::string(name) == "process" ? "proc.cpu_pct" : "proc.tree.cpu_pct";
    CHECK_NEAR(r.f64(col), expected, 1e-9);
    if (kTck == 100) CHECK_NEAR(r.f64(col), 100.0, 1e-9);
    CHECK(src->reason() == nullptr);
  }
}

void test_cap_cpu_pct() {
  CHECK_NEAR(detail::cap_cpu_pct(110.0, 1, 8), 100.0, 0);
  CHECK_NEAR(detail::cap_cpu_pct(350.0, 4, 2), 200.0, 0);  // 4 threads on 2 CPUs
  CHECK_NEAR(detail::cap_cpu_pct(150.0, 4, 8), 150.0, 0);  // within both bounds: unchanged
  CHECK_NEAR(detail::cap_cpu_pct(150.0, 0, 0), 150.0, 0);  // bounds unknown: unchanged
}

}  // namespace

int main() {
  test_cpu_pct_capped_at_threads();
  test_cap_cpu_pct();
  test_meminfo_estimate_overflow();
  test_process_rss_overflow();
  test_proc_tree_sum_overflow();
  test_cgroup_usage_overflow();
  TEST_MAIN_END();
}
