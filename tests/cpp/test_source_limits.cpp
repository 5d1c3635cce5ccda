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

}  // namespace

int main() {
  test_meminfo_estimate_overflow();
  test_process_rss_overflow();
  test_proc_tree_sum_overflow();
  test_cgroup_usage_overflow();
  TEST_MAIN_END();
}
