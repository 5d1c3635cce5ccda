// Sources at the edges of what they can represent and hold: values from /proc or a cgroup that
// overflow int64 once scaled or summed (tests/data/proc/overflow, tests/data/cgroup/overflow:
// each was a signed-overflow abort under UBSan), CPU % capped at what the threads could use, and
// the descriptors proc_tree keeps open for a tree larger than the fd budget.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "source_fixture.hpp"
#include "stroboscope/counter_slots.hpp"

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

// ---- proc_tree: descriptors bounded far below the soft limit ----------------------------------------

// A tree under proc/wide: root 1000 and `children` children 1001.., one thread and 10 pages each.
void make_wide_tree(const Tree& t, int children) {
  fs::create_directories(t.path("proc/wide"));
  for (int pid = 1000; pid <= 1000 + children; ++pid) {
    const std::string dir = t.path("proc/wide/" + std::to_string(pid));
    fs::create_directories(dir);
    const int ppid = pid == 1000 ? 1 : 1000;
    Tree::write(dir + "/stat", std::to_string(pid) + " (w) S " + std::to_string(ppid) +
                                   " 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 " +
                                   std::to_string(100000 + pid) + " 1000 10\n");
    Tree::write(dir + "/statm", "100 10 0 0 0 0 0\n");
  }
}

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Runs `body` in a forked child (so a lowered RLIMIT_NOFILE and exhausted fds stay there);
// returns the child's failed-check count (or 1000 + signal when it died).
template <typename F>
int in_child(F&& body) {
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid == 0) {
    stroboscope_test::failures() = 0;  // count only the child's own checks
    body();
    std::fflush(stderr);
    ::_exit(stroboscope_test::failures() > 100 ? 100 : stroboscope_test::failures());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

// 300 children under a soft limit of 128 descriptors: before, proc_tree held 2 per member and
// silently dropped all but ~60 of them (and left none for the host). Now it keeps at most 16
// (1/8 of the limit) and reads the rest on demand: all 301 counted, the host can still open files.
// With every descriptor taken by the host, the members without a kept fd are reported as not
// followed (not as exited), and followed again once descriptors are free.
void test_proc_tree_fd_budget() {
  Tree t;
  make_wide_tree(t, 300);
  int child_failures = in_child([&] {
    rlimit rl{};
    CHECK(::getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = 128;
    CHECK(::setrlimit(RLIMIT_NOFILE, &rl) == 0);
    const std::size_t before = open_fds();
    auto src = make_source("proc_tree", t.opts("wide", 1000));
    const std::size_t held = open_fds() - before;
    CHECK(held <= 1 + 2 + 16);  // the procfs root, the root process, 8 members within budget
    Row r(*src);
    r.read(*src, kT0);
    CHECK(src->reason() == nullptr);
    CHECK_EQ(r.i64("proc.tree.count"), 301);
    CHECK_EQ(r.i64("proc.tree.threads"), 301);
    CHECK_EQ(r.i64("proc.tree.rss_bytes"), 3010LL * kPage);
    CHECK_EQ(r.i64("proc.tree.untracked"), 0);
    CHECK_EQ(src->not_followed(), 0u);
    CHECK_EQ(open_fds() - before, held);  // reading on demand leaves nothing open
    // The host takes every descriptor left.
    std::vector<int> hog;
    for (int fd; (fd = ::open("/dev/null", O_RDONLY)) >= 0;) hog.push_back(fd);
    CHECK(errno == EMFILE);
    r.read(*src, kT0 + 100'000'000);
    CHECK_EQ(r.i64("proc.tree.count"), 9);  // the root and the 8 members with kept fds
    CHECK_EQ(r.i64("proc.tree.untracked"), 292);
    CHECK_EQ(src->not_followed(), 292u);
    for (int fd : hog) ::close(fd);
    r.read(*src, kT0 + 200'000'000);
    CHECK_EQ(r.i64("proc.tree.count"), 301);
    CHECK_EQ(src->not_followed(), 0u);
  });
  CHECK_EQ(child_failures, 0);
}

// 1030 children: 1023 followed with the root (the cap), 7 reported not followed.
void test_proc_tree_cap_reported() {
  Tree t;
  make_wide_tree(t, 1030);
  auto src = make_source("proc_tree", t.opts("wide", 1000));
  Row r(*src);
  r.read(*src, kT0);
  CHECK_EQ(r.i64("proc.tree.count"), 1024);
  CHECK_EQ(r.i64("proc.tree.untracked"), 7);
  CHECK_EQ(src->not_followed(), 7u);
}

// Counters whose total since the first reading leaves int64 (net rx 0 -> 2^64 - 1; disk read
// sectors 0 -> 2^63, whose bytes wrapped to 0): null with a reason, the other direction intact.
// Unsigned arithmetic, so no UB here; before, they read as -1 and 0 bytes.
void test_counter_totals_out_of_range() {
  Tree t;
  auto net = make_source("network", t.opts("overflow"));
  auto disk = make_source("diskio", t.opts("overflow"));
  Row rn(*net), rd(*disk);
  rn.read(*net, kT0);
  rd.read(*disk, kT0);
  t.advance("proc/overflow");
  rn.read(*net, kT1);
  rd.read(*disk, kT1);
  CHECK(rn.null("net.recv_bytes"));
  CHECK(rn.null("net.recv_bytes_per_s"));
  CHECK_EQ(rn.i64("net.sent_bytes"), 100);
  CHECK(reason_is(*net, "byte counter out of range in /proc/net/dev"));
  CHECK_EQ(net->error_number(), ERANGE);
  CHECK(rd.null("disk.read_bytes"));
  CHECK_EQ(rd.i64("disk.write_bytes"), 8 * 512);
  CHECK(reason_is(*disk, "sector counter out of range in /proc/diskstats"));
  rn.read(*net, kT2);  // stays unknown: the total since the first reading is lost
  CHECK(rn.null("net.recv_bytes"));
  CHECK_EQ(rn.i64("net.sent_bytes"), 100);
}

// /proc/stat whose user ticks jump by 2^64 - 1: the sum of the deltas wrapped to 19 ticks and
// read as 47 % busy. Now null with a reason, for the aggregate and the per-core columns.
void test_cpu_total_out_of_range() {
  for (const char* name : {"cpu", "cpu_cores"}) {
    Tree t;
    auto src = make_source(name, t.opts("overflow"));
    Row r(*src);
    r.read(*src, kT0);
    t.advance("proc/overflow");
    r.read(*src, kT1);
    CHECK(r.null(std::string(name) == "cpu" ? "cpu.util_pct" : "cpu.0.util_pct"));
    CHECK(reason_is(*src, "value out of range in /proc/stat"));
    CHECK_EQ(src->error_number(), ERANGE);
  }
}

}  // namespace

// Two interfaces that appear after the first reading with 2^63 bytes each: their sum is 2^64,
// which wrapped to 0 and read as "nothing new". It must saturate (then read as out of range).
void test_counter_slot_sum_saturates() {
  stroboscope::detail::CounterSlots slots(4);
  auto counted = [](const char*) noexcept { return true; };
  stroboscope::detail::CounterSlots::Counters deltas{};
  const stroboscope::detail::CounterSlots::Name first = "eth0";
  slots.begin_reading();
  slots.add(first, 0, {1, 1}, deltas, counted);
  slots.end_reading();  // the baseline: later names count whole
  deltas = {};
  const stroboscope::detail::CounterSlots::Name a = "veth1", b = "veth2";
  const std::uint64_t half = std::uint64_t{1} << 63;
  slots.begin_reading();
  slots.add(first, 0, {1, 1}, deltas, counted);
  slots.add(a, 1, {half, 5}, deltas, counted);
  slots.add(b, 2, {half, 7}, deltas, counted);
  slots.end_reading();
  CHECK_EQ(deltas[0], UINT64_MAX);
  CHECK_EQ(deltas[1], std::uint64_t{12});
}

int main() {
  test_counter_slot_sum_saturates();
  test_cpu_total_out_of_range();
  test_counter_totals_out_of_range();
  test_proc_tree_fd_budget();
  test_proc_tree_cap_reported();
  test_cpu_pct_capped_at_threads();
  test_cap_cpu_pct();
  test_meminfo_estimate_overflow();
  test_process_rss_overflow();
  test_proc_tree_sum_overflow();
  test_cgroup_usage_overflow();
  TEST_MAIN_END();
}
