// Parser tests: each parser in procfs.hpp on recorded /proc files (tests/data, see its README) and
// on small inline texts, against values read off the files by hand.
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "check.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope;
using namespace stroboscope::procfs;

namespace {

std::string slurp(const std::string& rel) {
  std::string path = std::string(STROBOSCOPE_TEST_DATA) + "/" + rel;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "missing fixture %s\n", path.c_str());
    ++stroboscope_test::failures();
    return {};
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

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

void test_net_dev() {
  std::vector<NetDevCounters> out(8);
  std::size_t seen = 0;
  std::size_t n = parse_net_dev(slurp("proc/basic/net/dev"), out, &seen);
  CHECK_EQ(n, 4u);
  CHECK_EQ(seen, 4u);
  CHECK(std::string_view(out[0].name) == "lo");
  CHECK(std::string_view(out[3].name) == "eth0");
  CHECK_EQ(out[3].rx_bytes, 226572888u);
  CHECK_EQ(out[3].rx_packets, 4377u);
  CHECK_EQ(out[3].tx_bytes, 210569u);
  CHECK_EQ(out[3].tx_packets, 2725u);

  // The number glued to the colon ("eth0:4294967296"), as old kernels print large counters.
  n = parse_net_dev(slurp("proc/old_kernel/net/dev"), out);
  CHECK_EQ(n, 2u);
  CHECK(std::string_view(out[1].name) == "eth0");
  CHECK_EQ(out[1].rx_bytes, 4294967296u);
  CHECK_EQ(out[1].rx_packets, 3000000u);
  CHECK_EQ(out[1].tx_bytes, 10000000u);

  // Short span: written 1, seen 4. A truncated line (too few numbers) is skipped.
  std::vector<NetDevCounters> one(1);
  n = parse_net_dev(slurp("proc/basic/net/dev"), one, &seen);
  CHECK_EQ(n, 1u);
  CHECK_EQ(seen, 4u);
  n = parse_net_dev("eth1: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\neth2: 1 2 3\n", out, &seen);
  CHECK_EQ(n, 1u);
  CHECK_EQ(out[0].tx_bytes, 9u);

  // A name holding a NUL byte (found by fuzz_net_dev) would be cut short as a C string and could
  // pass for another interface ("eth0\0x" as "eth0"): the line is skipped.
  using namespace std::string_view_literals;
  n = parse_net_dev("eth0\0x: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"
                    "eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"sv,
                    out, &seen);
  CHECK_EQ(n, 1u);
  CHECK(std::string_view(out[0].name) == "eth0");
}

void test_diskstats() {
  std::vector<DiskStatLine> out(32);
  // basic (recorded on 6.18): 17 numbers after the name.
  std::size_t n = parse_diskstats(slurp("proc/basic/diskstats"), out);
  CHECK_EQ(n, 10u);
  CHECK(std::string_view(out[8].name) == "vda");
  CHECK_EQ(out[8].major, 254u);
  CHECK_EQ(out[8].n_stats, 17);
  CHECK_EQ(out[8].read_sectors, 1939522u);
  CHECK_EQ(out[8].write_sectors, 2591192u);

  // old_kernel: 11-number whole-disk lines and 4-number partition lines.
  n = parse_diskstats(slurp("proc/old_kernel/diskstats"), out);
  CHECK_EQ(n, 6u);
  CHECK(std::string_view(out[2].name) == "sda");
  CHECK_EQ(out[2].n_stats, 11);
  CHECK_EQ(out[2].read_sectors, 20000u);
  CHECK_EQ(out[2].write_sectors, 8000u);
  CHECK(std::string_view(out[3].name) == "sda1");
  CHECK_EQ(out[3].n_stats, 4);
  CHECK_EQ(out[3].read_sectors, 18000u);
  CHECK_EQ(out[3].write_sectors, 7600u);

  // mid_kernel (4.18-5.4): 15 numbers.
  n = parse_diskstats(slurp("proc/mid_kernel/diskstats"), out);
  CHECK_EQ(n, 2u);
  CHECK_EQ(out[0].n_stats, 15);
  CHECK_EQ(out[0].read_sectors, 345678u);
  CHECK_EQ(out[0].write_sectors, 456789u);

  // new_kernel: 17 numbers; a name with '/' in it.
  n = parse_diskstats(slurp("proc/new_kernel/diskstats"), out);
  CHECK_EQ(n, 10u);
  CHECK(std::string_view(out[5].name) == "cciss/c0d0");
  CHECK_EQ(out[5].write_sectors, 200u);

  // Neither layout (6 numbers) is skipped; so is a line without a name.
  std::size_t seen = 0;
  n = parse_diskstats("8 0 sda 1 2 3 4 5 6\n8 1\n8 2 sdb 1 2 3 4\n", out, &seen);
  CHECK_EQ(n, 1u);
  CHECK_EQ(seen, 1u);
  CHECK(std::string_view(out[0].name) == "sdb");
}

// A disk name holding a NUL byte (found by fuzz_diskstats) is skipped like an overlong one.
void test_diskstats_nul_in_name() {
  using namespace std::string_view_literals;
  std::vector<DiskStatLine> out(4);
  std::size_t n = parse_diskstats("   8 0 sd\0a 1 0 8 0 1 0 16 0 0 0 0\n   8 0 sda 1 0 8 0 1 0 16 0 0 0 0\n"sv, out);
  CHECK_EQ(n, 1u);
  CHECK(std::string_view(out[0].name) == "sda");
}

void test_partition_names() {
  CHECK(is_partition_name_of("sda1", "sda"));
  CHECK(is_partition_name_of("sda10", "sda"));
  CHECK(!is_partition_name_of("sda", "sda"));
  CHECK(!is_partition_name_of("sdab", "sda"));
  CHECK(is_partition_name_of("nvme0n1p1", "nvme0n1"));
  CHECK(!is_partition_name_of("nvme0n10", "nvme0n1"));  // namespace 10, not a partition
  CHECK(!is_partition_name_of("loop10", "loop1"));      // loop10 is its own device
  CHECK(is_partition_name_of("loop1p2", "loop1"));
  CHECK(is_partition_name_of("mmcblk0p1", "mmcblk0"));
  CHECK(!is_partition_name_of("mmcblk0boot0", "mmcblk0"));
  CHECK(is_partition_name_of("cciss/c0d0p1", "cciss/c0d0"));
  CHECK(!is_partition_name_of("nvme0n1p", "nvme0n1"));
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

void test_pid_files() {
  PidStat st;  // st.comm views into the text: keep it alive
  std::string text = slurp("proc/basic/6767/stat");
  CHECK(parse_pid_stat(text, &st));
  CHECK(st.comm == "python3");
  CHECK_EQ(st.state, 'S');
  CHECK_EQ(st.ppid, 6726);
  CHECK_EQ(st.utime, 17u);
  CHECK_EQ(st.stime, 0u);
  CHECK_EQ(st.num_threads, 4);
  CHECK_EQ(st.starttime, 146598u);
  CHECK_EQ(st.rss_pages, 5337);

  // comm "a) b (c": spaces and parentheses; fields are found after the LAST ')'.
  text = slurp("proc/weird_comm/31337/stat");
  CHECK(parse_pid_stat(text, &st));
  CHECK(st.comm == "a) b (c");
  CHECK_EQ(st.state, 'R');
  CHECK_EQ(st.ppid, 1);
  CHECK_EQ(st.utime, 250u);
  CHECK_EQ(st.stime, 50u);
  CHECK_EQ(st.num_threads, 3);
  CHECK_EQ(st.rss_pages, 300);

  // Missing fields, no parentheses, empty: rejected.
  CHECK(!parse_pid_stat("42 (x) S 1 2 3 4 5 6 7 8 9 10 11\n", &st));
  CHECK(!parse_pid_stat("42 x S 1 2 3\n", &st));
  CHECK(!parse_pid_stat("", &st));
  CHECK(!parse_pid_stat("42 (x)) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21\n", &st));
  CHECK(parse_pid_stat("42 ()) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21\n", &st));
  CHECK(st.comm == ")");
  CHECK_EQ(st.utime, 11u);  // field 14 is the 11th number after the state
  CHECK_EQ(st.num_threads, 17);

  PidStatm sm;
  CHECK(parse_pid_statm(slurp("proc/basic/6767/statm"), &sm));  // "61406 5346 1660 1 0 10228 0"
  CHECK_EQ(sm.size_pages, 61406u);
  CHECK_EQ(sm.resident_pages, 5346u);
  CHECK_EQ(sm.shared_pages, 1660u);
  CHECK(!parse_pid_statm("1 2\n", &sm));

  PidStatus s = parse_pid_status(slurp("proc/basic/6767/status"));
  CHECK_EQ(s.ppid, 6726);
  CHECK_EQ(s.threads, 4);
  CHECK_EQ(s.voluntary_ctxt, 8);
  CHECK_EQ(s.nonvoluntary_ctxt, 18);
  s = parse_pid_status("Name:\tx\nPPid:\t7\n");
  CHECK_EQ(s.ppid, 7);
  CHECK_EQ(s.voluntary_ctxt, kMissing);

  PidIo io = parse_pid_io(slurp("proc/basic/6767/io"));
  CHECK_EQ(io.rchar, 1353168);
  CHECK_EQ(io.wchar, 0);
  CHECK_EQ(io.read_bytes, 0);
  CHECK_EQ(io.write_bytes, 0);
  io = parse_pid_io(slurp("proc/basic/6767/io.1"));
  CHECK_EQ(io.read_bytes, 8192);
  CHECK_EQ(io.write_bytes, 4096);  // not confused with cancelled_write_bytes
  io = parse_pid_io("rchar: 5\n");
  CHECK_EQ(io.read_bytes, kMissing);
}

void test_cgroup_files() {
  auto lines = parse_proc_cgroup(slurp("proc/basic/6767/cgroup"));
  CHECK_EQ(lines.size(), 10u);
  const CgroupMembership* mem = find_v1_controller(lines, "memory");
  CHECK(mem != nullptr && mem->hierarchy_id == 4 &&
        mem->path == "/process_api/8727d5f5ec74dfb7d31986f5618e8966");
  const CgroupMembership* cpu = find_v1_controller(lines, "cpu");
  CHECK(cpu != nullptr && cpu->hierarchy_id == 1 && cpu->path == "/");
  CHECK(find_v1_controller(lines, "systemd") == nullptr);  // it is "name=systemd"
  const CgroupMembership* v2 = find_v2(lines);
  CHECK(v2 != nullptr && v2->path == "/");

  lines = parse_proc_cgroup(slurp("proc/cgroup_v1/4243/cgroup"));
  const CgroupMembership* acct = find_v1_controller(lines, "cpuacct");
  CHECK(acct != nullptr && acct->controllers == "cpu,cpuacct" && acct->path == "/docker/abc");
  lines = parse_proc_cgroup("0::/a:b/c\ngarbage\nx:y:z\n");  // ':' inside the path survives
  CHECK_EQ(lines.size(), 1u);
  CHECK(lines[0].path == "/a:b/c");
  CHECK(find_v1_controller(lines, "memory") == nullptr);

  CpuMax c;
  CHECK(parse_cpu_max("max 100000\n", &c) && !c.has_quota && c.period_us == 100000);
  CHECK(parse_cpu_max("150000 100000\n", &c) && c.has_quota && c.quota_us == 150000 &&
        c.period_us == 100000);
  CHECK(parse_cpu_max("max\n", &c) && !c.has_quota);
  CHECK(!parse_cpu_max("lots 100000\n", &c));
  CHECK(!parse_cpu_max("", &c));

  std::int64_t v = 0;
  CHECK(parse_memory_limit("max\n", &v) && v == kMissing);
  CHECK(parse_memory_limit("9223372036854771712\n", &v) && v == kMissing);  // v1 "unlimited"
  CHECK(parse_memory_limit("4611686018427387904\n", &v) && v == kMissing);  // 2^62
  CHECK(parse_memory_limit("4611686018427387903\n", &v) && v == 4611686018427387903LL);
  CHECK(parse_memory_limit("536870912\n", &v) && v == 536870912);
  CHECK(!parse_memory_limit("\n", &v));

  CHECK(parse_single_i64("-1\n", &v) && v == -1);
  CHECK(parse_single_i64("1200000000", &v) && v == 1200000000);
  CHECK(!parse_single_i64("12abc\n", &v));
  CHECK(!parse_single_i64("", &v));

  std::string stat = slurp("cgroup/v2/kubepods/pod1/ctr/cpu.stat");
  CHECK_EQ(find_keyed_i64(stat, "usage_usec"), 5000000);
  CHECK_EQ(find_keyed_i64(stat, "user_usec"), 4000000);
  CHECK_EQ(find_keyed_i64(stat, "throttled_usec"), 300);
  CHECK_EQ(find_keyed_i64(stat, "usage"), kMissing);  // a prefix of a key is not the key
}

void test_disk_prefix() {
  CHECK(disk_column_prefix("/") == "disk.");
  CHECK(disk_column_prefix("//") == "disk.");
  CHECK(disk_column_prefix("/data/x") == "disk.data_x.");
  CHECK(disk_column_prefix("/data/x/") == "disk.data_x.");
  CHECK(disk_column_prefix("/mnt/Scratch-1") == "disk.mnt_scratch_1.");
  CHECK(disk_column_prefix("/a.b c") == "disk.a_b_c.");
}

}  // namespace

void test_schedstat_and_block_stat() {
  SchedStat s;
  CHECK(parse_schedstat("123456789 4242 17\n", &s));
  CHECK_EQ(s.run_ns, 123456789u);
  CHECK_EQ(s.wait_ns, 4242u);
  CHECK_EQ(s.slices, 17u);
  CHECK(!parse_schedstat("123 456\n", &s));  // a field missing
  CHECK(!parse_schedstat("", &s));
  // /sys/block/<dev>/stat: reads merged sectors ms, writes merged sectors ms, ... (17 on 5.5+)
  DiskStatLine d;
  CHECK(parse_block_stat("    1000  5 2056 300   200 7 4096 90 0 400 390 0 0 0 0 0 0\n", &d));
  CHECK_EQ(d.read_sectors, 2056u);
  CHECK_EQ(d.write_sectors, 4096u);
  CHECK_EQ(d.n_stats, 17);
  CHECK(parse_block_stat("1 2 3 4 5 6 7 8 9 10 11\n", &d) && d.write_sectors == 7u);
  CHECK(!parse_block_stat("1 2 3 4\n", &d));  // the partition layout never appears here
}

int main() {
  test_helpers();
  test_stat();
  test_meminfo();
  test_net_dev();
  test_diskstats();
  test_diskstats_nul_in_name();
  test_partition_names();
  test_loadavg();
  test_pressure();
  test_pid_files();
  test_cgroup_files();
  test_disk_prefix();
  test_schedstat_and_block_stat();
  TEST_MAIN_END();
}
