// Parser tests for the whole-machine files: the number and line helpers of procfs.hpp, then
// /proc/stat, /proc/meminfo, /proc/loadavg and /proc/pressure/*, on recorded files (tests/data,
// see its README) and on small inline texts, against values read off the files by hand.
#include <string>
#include <string_view>
#include <vector>

#include "check.hpp"
#include "parser_fixture.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope;
using namespace stroboscope::procfs;

namespace {

void test_helpers() {
  std::string_view s = "  12\t345 x";
  std::uint64_t v = 0;
  CHECK(next_u64(s, &v) && v == 12);
  CHECK(next_u64(s, &v) && v == 345);
  CHECK(!next_u64(s, &v));  // "x"
  CHECK(next_token(s) == "x");
  std::string_view big = "99999999999999999999";  // > 2^64
  CHECK(!next_u64(big, &v));
  std::string_view neg = " -17 ";
  std::int64_t i = 0;
  CHECK(next_i64(neg, &i) && i == -17);
  std::string_view lines = "a\nbb\ncc";
  CHECK(next_line(lines) == "a");
  CHECK(next_line(lines) == "bb");
  CHECK(next_line(lines) == "cc");
  CHECK(lines.empty());
  CHECK(complete_lines("a\nb\npartial") == "a\nb\n");
  CHECK(complete_lines("no newline").empty());
  char name[kNameMax];
  CHECK(copy_name("eth0", name) && std::string_view(name) == "eth0");
  CHECK(!copy_name(std::string(kNameMax, 'x'), name));
  CHECK(!copy_name("", name));
  CHECK_EQ(counter_delta(100, 150), 50u);
  CHECK_EQ(counter_delta(150, 40), 40u);  // went backwards: reset, the new value accrued
}

void test_stat() {
  // basic/stat, recorded: "cpu  18656 0 2810 270943 189 0 42 13 0 0" and two cores.
  std::vector<CoreTimes> cores(8);
  StatCpus s = parse_stat_cpus(slurp("proc/basic/stat"), cores);
  CHECK(s.has_total);
  CHECK_EQ(s.total.user, 18656u);
  CHECK_EQ(s.total.system, 2810u);
  CHECK_EQ(s.total.idle, 270943u);
  CHECK_EQ(s.total.iowait, 189u);
  CHECK_EQ(s.total.softirq, 42u);
  CHECK_EQ(s.total.steal, 13u);
  CHECK_EQ(s.total.n_fields, 10);
  CHECK_EQ(s.n_cores, 2u);
  CHECK_EQ(cores[0].id, 0);
  CHECK_EQ(cores[1].id, 1);
  CHECK_EQ(cores[1].times.user, 11369u);
  CHECK_EQ(cores[1].times.iowait, 183u);
  // total = 18656+0+2810+270943+189+0+42+13 = 292653; busy = total - idle - iowait = 21521
  CHECK_EQ(cpu_total(s.total), 292653u);
  CHECK_EQ(cpu_busy(s.total), 21521u);

  // guest time is inside user: total leaves it out.
  CpuTimes g;
  g.user = 100;
  g.idle = 100;
  g.guest = 40;
  g.guest_nice = 5;
  CHECK_EQ(cpu_total(g), 200u);

  // A span too short keeps the first lines and counts the rest.
  std::vector<CoreTimes> one(1);
  s = parse_stat_cpus(slurp("proc/basic/stat"), one);
  CHECK_EQ(s.n_cores, 1u);
  CHECK_EQ(s.n_cores_seen, 2u);

  // old_kernel: 8 fields (no guest columns), guest stays 0.
  s = parse_stat_cpus(slurp("proc/old_kernel/stat"), cores);
  CHECK(s.has_total);
  CHECK_EQ(s.total.n_fields, 8);
  CHECK_EQ(s.total.irq, 5u);
  CHECK_EQ(s.total.guest, 0u);
  CHECK_EQ(s.n_cores, 1u);

  // many_cpus: 94 lines, cpu7 and cpu50 offline, so ids jump.
  std::vector<CoreTimes> many(256);
  s = parse_stat_cpus(slurp("proc/many_cpus/stat"), many);
  CHECK_EQ(s.n_cores, 94u);
  CHECK_EQ(many[6].id, 6);
  CHECK_EQ(many[7].id, 8);
  CHECK_EQ(many[49].id, 51);
  CHECK_EQ(many[93].id, 95);
  CHECK_EQ(many[93].times.user, 1095u);

  // Malformed: a cpu line with fewer than 4 numbers is skipped; parsing stops at non-cpu lines.
  s = parse_stat_cpus("cpu  1 2 3\ncpu0 1 2 3 4\nintr 5\ncpu1 9 9 9 9\n", cores);
  CHECK(!s.has_total);
  CHECK_EQ(s.n_cores, 1u);
  CHECK_EQ(cores[0].times.idle, 4u);
  CHECK(!parse_stat_cpus("", cores).has_total);
}

void test_meminfo() {
  MemInfo m = parse_meminfo(slurp("proc/basic/meminfo"));
  CHECK_EQ(m.total, 24683584LL * 1024);
  CHECK_EQ(m.free, 23830604LL * 1024);
  CHECK_EQ(m.available, 24057104LL * 1024);
  CHECK_EQ(m.buffers, 1340LL * 1024);
  CHECK_EQ(m.cached, 415556LL * 1024);  // "Cached", not "SwapCached"
  CHECK_EQ(m.swap_total, 0);
  CHECK_EQ(m.swap_free, 0);
  CHECK_EQ(mem_available_or_estimate(m), 24057104LL * 1024);

  // old_kernel: no MemAvailable -> MemFree + Buffers + Cached = 512000 + 64000 + 256000 kB.
  m = parse_meminfo(slurp("proc/old_kernel/meminfo"));
  CHECK_EQ(m.available, kMissing);
  CHECK_EQ(mem_available_or_estimate(m), 832000LL * 1024);
  CHECK_EQ(m.swap_free, 1000000LL * 1024);

  m = parse_meminfo("MemTotal: 100 kB\n");
  CHECK_EQ(m.total, 102400);
  CHECK_EQ(m.swap_total, kMissing);
  CHECK_EQ(mem_available_or_estimate(m), kMissing);
}

void test_loadavg() {
  LoadAvg l;
  CHECK(parse_loadavg(slurp("proc/basic/loadavg"), &l));  // "2.36 0.94 0.35 4/107 6766"
  CHECK_NEAR(l.avg1, 2.36, 1e-12);
  CHECK_NEAR(l.avg5, 0.94, 1e-12);
  CHECK_NEAR(l.avg15, 0.35, 1e-12);
  CHECK_EQ(l.running, 4);
  CHECK_EQ(l.total, 107);
  CHECK_EQ(l.last_pid, 6766);
  CHECK(!parse_loadavg("1.0 2.0\n", &l));
  CHECK(!parse_loadavg("1.0 2.0 3.0 4 107\n", &l));  // no '/'
  CHECK(!parse_loadavg("", &l));
}

void test_pressure() {
  PressureTotals p = parse_pressure(slurp("proc/basic/pressure/cpu"));
  CHECK(p.has_some && p.has_full);
  CHECK_EQ(p.some_total_us, 48742281u);
  CHECK_EQ(p.full_total_us, 0u);
  p = parse_pressure(slurp("proc/basic/pressure/io"));
  CHECK_EQ(p.some_total_us, 1853191u);
  CHECK_EQ(p.full_total_us, 1660125u);
  p = parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=123\n");  // pre-5.13 cpu
  CHECK(p.has_some && !p.has_full);
  CHECK_EQ(p.some_total_us, 123u);
  p = parse_pressure("some avg10=0.00 avg60=0.00\n");
  CHECK(!p.has_some);
}

}  // namespace

int main() {
  test_helpers();
  test_stat();
  test_meminfo();
  test_loadavg();
  test_pressure();
  TEST_MAIN_END();
}
