// Parser tests for one process: the /proc/<pid> files and /proc/<pid>/cgroup with the cgroup
// files, on recorded files (tests/data, see its README) and small inline texts, and schedstat and
// /sys/block/<dev>/stat.
#include <string>
#include <string_view>
#include <vector>

#include "check.hpp"
#include "parser_fixture.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope;
using namespace stroboscope::procfs;

namespace {

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
  CHECK_EQ(st.flags, 4194304u);  // PF_RANDOMIZE only: alive
  CHECK(!pid_gone(st));
  // Inside do_exit(): still 'R', PF_EXITING (0x4) set; then a zombie.
  CHECK(parse_pid_stat(slurp("proc/exiting/17421/stat.1"), &st));
  CHECK_EQ(st.state, 'R');
  CHECK_EQ(st.flags, 0x40000cu);
  CHECK(pid_gone(st));
  CHECK(parse_pid_stat(slurp("proc/exiting/17421/stat.2"), &st));
  CHECK(pid_gone(st));

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
  test_pid_files();
  test_cgroup_files();
  test_schedstat_and_block_stat();
  TEST_MAIN_END();
}
