// Source tests: each Linux source built on a recorded tree (a temp copy of tests/data), read at
// fabricated tick times, every cell checked (value and null-ness) against hand-computed numbers.
// Between reads a fixture "advances": each "<file>.1" is written over "<file>" in place (the
// source keeps the fd open, so the inode must stay). Also: the live /proc (a forked child that
// exits, this process), the registry, and a count of heap allocations inside read().
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "stroboscope/cgroup.hpp"
#include "stroboscope/counter_slots.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/registry.hpp"

#include "source_fixture.hpp"

namespace {

// ---- cpu, cpu_cores -----------------------------------------------------------------------------

void test_cpu() {
  Tree t;
  auto src = make_source("cpu", t.opts("basic"));
  Row r(*src);
  r.read(*src, kT0);
  CHECK(r.all_null());  // first reading: no interval yet
  CHECK(src->reason() == nullptr);
  t.advance("proc/basic");
  r.read(*src, kT1);
  // Δ user 120, nice 30, system 40, idle 180, iowait 20, softirq 6, steal 4 (guest +10 is inside
  // user, not added): Δtotal 400, busy 400 - 180 - 20 = 200.
  CHECK_NEAR(r.f64("cpu.util_pct"), 50.0, 1e-9);
  CHECK_NEAR(r.f64("cpu.user_pct"), 37.5, 1e-9);  // (120 + 30) / 400
  CHECK_NEAR(r.f64("cpu.system_pct"), 10.0, 1e-9);
  CHECK_NEAR(r.f64("cpu.iowait_pct"), 5.0, 1e-9);
  CHECK_NEAR(r.f64("cpu.steal_pct"), 1.0, 1e-9);
  r.read(*src, kT2);  // nothing moved: Δtotal 0 -> null
  CHECK(r.all_null());
  CHECK(src->reason() == nullptr);
  CHECK_EQ(src->reads(), 3u);
  CHECK_EQ(src->failures(), 0u);

  // old_kernel (8 fields): Δ user 60 system 20 idle 100 iowait 10 irq 5 softirq 5 -> Δtotal 200.
  auto old = make_source("cpu", t.opts("old_kernel"));
  Row o(*old);
  o.read(*old, kT0);
  t.advance("proc/old_kernel");
  o.read(*old, kT1);
  CHECK_NEAR(o.f64("cpu.util_pct"), 45.0, 1e-9);  // (200 - 100 - 10) / 200
  CHECK_NEAR(o.f64("cpu.user_pct"), 30.0, 1e-9);
  CHECK_NEAR(o.f64("cpu.system_pct"), 10.0, 1e-9);
  CHECK_NEAR(o.f64("cpu.iowait_pct"), 5.0, 1e-9);
  CHECK_NEAR(o.f64("cpu.steal_pct"), 0.0, 1e-9);

  // The file becomes unreadable garbage: a failure with a reason, cells null.
  Tree::write(t.path("proc/old_kernel/stat"), "intr 0\n");
  o.read(*old, kT2);
  CHECK(o.all_null());
  CHECK(reason_is(*old, "no aggregate cpu line in /proc/stat"));
  CHECK_EQ(old->failures(), 1u);
}

void test_cpu_cores() {
  Tree t;
  auto src = make_source("cpu_cores", t.opts("basic"));
  CHECK_EQ(src->columns().size(), 2u);
  Row r(*src);
  r.read(*src, kT0);
  CHECK(r.all_null());
  t.advance("proc/basic");
  r.read(*src, kT1);
  CHECK_NEAR(r.f64("cpu.0.util_pct"), 60.0, 1e-9);  // Δ user 100 system 20 idle 80: 120 / 200
  CHECK_NEAR(r.f64("cpu.1.util_pct"), 40.0, 1e-9);  // Δ 200 total, idle 100, iowait 20: 80 / 200

  // 96 possible cores, cpu7 and cpu50 offline at construction: 94 columns, ids kept.
  auto many = make_source("cpu_cores", t.opts("many_cpus"));
  CHECK_EQ(many->columns().size(), 94u);
  CHECK(many->columns()[7].name == "cpu.8.util_pct");
  Row m(*many);
  CHECK(!m.has("cpu.7.util_pct"));
  CHECK(!m.has("cpu.50.util_pct"));
  m.read(*many, kT0);
  CHECK(m.all_null());
  t.advance("proc/many_cpus");
  m.read(*many, kT1);
  // cpuK: Δtotal 100, busy 10·(K mod 10). cpu3 went offline (null); cpu7 came online (no column).
  CHECK(m.null("cpu.3.util_pct"));
  CHECK_NEAR(m.f64("cpu.0.util_pct"), 0.0, 1e-9);
  CHECK_NEAR(m.f64("cpu.8.util_pct"), 80.0, 1e-9);
  CHECK_NEAR(m.f64("cpu.49.util_pct"), 90.0, 1e-9);
  CHECK_NEAR(m.f64("cpu.95.util_pct"), 50.0, 1e-9);
  int checked = 0;
  for (int k = 0; k < 96; ++k) {
    if (k == 3 || k == 7 || k == 50) continue;
    std::string name = "cpu." + std::to_string(k) + ".util_pct";
    CHECK_NEAR(m.f64(name.c_str()), 10.0 * (k % 10), 1e-9);
    ++checked;
  }
  CHECK_EQ(checked, 93);
  CHECK(many->reason() == nullptr);
  // cpu3 comes back online: no previous reading of its own, so null (not a delta against t0);
  // every other core is unchanged (Δtotal 0): null too.
  std::ifstream in(t.path("proc/many_cpus/stat.1"));
  std::string t1((std::istreambuf_iterator<char>(in)), {});
  std::size_t at = t1.find("cpu4 ");
  t1.insert(at, "cpu3 2000 0 600 10100 0 0 0 0 0 0\n");
  Tree::write(t.path("proc/many_cpus/stat"), t1);
  m.read(*many, kT2);
  CHECK(m.all_null());
}

// ---- memory -------------------------------------------------------------------------------------

void test_memory() {
  Tree t;
  auto src = make_source("memory", t.opts("basic"));
  Row r(*src);
  r.read(*src, kT0);
  CHECK_EQ(r.i64("mem.total_bytes"), 24683584LL * 1024);
  CHECK_EQ(r.i64("mem.available_bytes"), 24057104LL * 1024);
  CHECK_EQ(r.i64("mem.used_bytes"), 626480LL * 1024);  // 24683584 - 24057104 kB
  CHECK_EQ(r.i64("mem.swap_used_bytes"), 0);
  CHECK_NEAR(r.f64("mem.util_pct"), 2.5380431, 1e-6);  // 626480 / 24683584 · 100

  // No MemAvailable: MemFree + Buffers + Cached = 832000 kB available of 2048000 kB.
  auto old = make_source("memory", t.opts("old_kernel"));
  Row o(*old);
  o.read(*old, kT0);
  CHECK_EQ(o.i64("mem.total_bytes"), 2048000LL * 1024);
  CHECK_EQ(o.i64("mem.available_bytes"), 832000LL * 1024);
  CHECK_EQ(o.i64("mem.used_bytes"), 1216000LL * 1024);
  CHECK_EQ(o.i64("mem.swap_used_bytes"), 48576LL * 1024);  // 1048576 - 1000000 kB
  CHECK_NEAR(o.f64("mem.util_pct"), 59.375, 1e-9);         // 1216000 / 2048000

  // No swap lines at all: swap null, the rest set.
  auto w = make_source("memory", t.opts("weird_comm"));
  Row wr(*w);
  wr.read(*w, kT0);
  CHECK(wr.null("mem.swap_used_bytes"));
  CHECK_EQ(wr.i64("mem.used_bytes"), 400000LL * 1024);
  CHECK_NEAR(wr.f64("mem.util_pct"), 40.0, 1e-9);
}

// ---- network ------------------------------------------------------------------------------------

void test_network() {
  Tree t;
  auto src = make_source("network", t.opts("basic"));
  Row r(*src);
  r.read(*src, kT0);
  CHECK_EQ(r.i64("net.sent_bytes"), 0);
  CHECK_EQ(r.i64("net.recv_bytes"), 0);
  CHECK(r.null("net.sent_bytes_per_s"));
  CHECK(r.null("net.recv_bytes_per_s"));
  t.advance("proc/basic");
  r.read(*src, kT1);
  // eth0 +500000 received, +25000 sent; lo's +1000 each way is left out.
  CHECK_EQ(r.i64("net.recv_bytes"), 500000);
  CHECK_EQ(r.i64("net.sent_bytes"), 25000);
  CHECK_NEAR(r.f64("net.recv_bytes_per_s"), 1000000.0, 1e-6);
  CHECK_NEAR(r.f64("net.sent_bytes_per_s"), 50000.0, 1e-6);

  // eth0's counters drop (driver reset: +1000 rx, +0 tx), ifb0/ifb1 vanish, veth1 is new (all
  // of its 300/700 bytes count).
  Tree::write(t.path("proc/basic/net/dev"),
              "Inter-|   Receive |  Transmit\n face |bytes packets|bytes packets\n"
              "    lo: 5193 49 0 0 0 0 0 0 5193 49 0 0 0 0 0 0\n"
              "  eth0: 1000 10 0 0 0 0 0 0 235569 2825 0 0 0 0 0 0\n"
              " veth1: 300 3 0 0 0 0 0 0 700 7 0 0 0 0 0 0\n");
  r.read(*src, kT2);
  CHECK_EQ(r.i64("net.recv_bytes"), 501300);
  CHECK_EQ(r.i64("net.sent_bytes"), 25700);
  CHECK_NEAR(r.f64("net.recv_bytes_per_s"), 2600.0, 1e-6);
  CHECK_NEAR(r.f64("net.sent_bytes_per_s"), 1400.0, 1e-6);
  CHECK(src->reason() == nullptr);

  // Counters glued to the colon: eth0 +1000000 received, +500 sent.
  auto old = make_source("network", t.opts("old_kernel"));
  Row o(*old);
  o.read(*old, kT0);
  t.advance("proc/old_kernel");
  o.read(*old, kT1);
  CHECK_EQ(o.i64("net.recv_bytes"), 1000000);
  CHECK_EQ(o.i64("net.sent_bytes"), 500);
  CHECK_NEAR(o.f64("net.recv_bytes_per_s"), 2000000.0, 1e-6);
  CHECK_NEAR(o.f64("net.sent_bytes_per_s"), 1000.0, 1e-6);
}

// ---- diskio -------------------------------------------------------------------------------------

void check_diskio(const Tree& t, const SourceOptions& opts, const char* proc_case,
                  std::int64_t read_sectors, std::int64_t write_sectors) {
  auto src = make_source("diskio", opts);
  Row r(*src);
  r.read(*src, kT0);
  CHECK_EQ(r.i64("disk.read_bytes"), 0);
  CHECK_EQ(r.i64("disk.write_bytes"), 0);
  CHECK(r.null("disk.read_bytes_per_s"));
  CHECK(r.null("disk.write_bytes_per_s"));
  t.advance(std::string("proc/") + proc_case);
  r.read(*src, kT1);
  CHECK_EQ(r.i64("disk.read_bytes"), read_sectors * 512);
  CHECK_EQ(r.i64("disk.write_bytes"), write_sectors * 512);
  CHECK_NEAR(r.f64("disk.read_bytes_per_s"), read_sectors * 512 / 0.5, 1e-6);
  CHECK_NEAR(r.f64("disk.write_bytes_per_s"), write_sectors * 512 / 0.5, 1e-6);
  CHECK(src->reason() == nullptr);
}

void test_diskio() {
  // basic (sysfs lists vda and the loops): vda +2048 read / +4096 written sectors, loop0 +8 read.
  {
    Tree t;
    check_diskio(t, t.opts("basic"), "basic", 2056, 4096);
  }
  // new_kernel with sysfs: nvme0n1 +1000 r +3000 w, sda +24 r and writes 5000 -> 100 (reset:
  // +100), cciss/c0d0 (sysfs "cciss!c0d0") +8 w, loop10 +16 r, sdb new (+64 r in full);
  // partitions not counted. Read 1000+24+16+64 = 1104, written 3000+100+8 = 3108.
  {
    Tree t;
    check_diskio(t, t.opts("new_kernel"), "new_kernel", 1104, 3108);
  }
  // The same without sysfs: the naming rule gives the same split.
  {
    Tree t;
    SourceOptions o = t.opts("new_kernel");
    o.sys_root = t.path("sys/absent");
    check_diskio(t, o, "new_kernel", 1104, 3108);
  }
  // old_kernel, no sysfs: sda (14 fields) +1000 r +2000 w; sda1 (7 fields) and hda1 are
  // partitions by name.
  {
    Tree t;
    check_diskio(t, t.opts("old_kernel"), "old_kernel", 1000, 2000);
  }
}

// ---- disk (statvfs) -----------------------------------------------------------------------------

void test_disk() {
  Tree t;
  SourceOptions o = t.opts("basic");
  std::string extra = t.path("proc");
  o.disk_paths = {"/", extra};
  auto src = make_source("disk", o);
  std::string p = disk_column_prefix(extra);
  CHECK_EQ(src->columns().size(), 6u);
  CHECK(src->columns()[0].name == "disk.used_pct");
  CHECK(src->columns()[3].name == p + "used_pct");
  Row r(*src);
  r.read(*src, kT0);
  CHECK(src->reason() == nullptr);
  for (const std::string& path : o.disk_paths) {
    struct statvfs st{};
    CHECK(::statvfs(path.c_str(), &st) == 0);
    double used = static_cast<double>(st.f_blocks - st.f_bfree) * st.f_frsize;
    double avail = static_cast<double>(st.f_bavail) * st.f_frsize;
    std::string pre = disk_column_prefix(path);
    CHECK_EQ(r.i64((pre + "total_bytes").c_str()),
             static_cast<std::int64_t>(st.f_blocks * st.f_frsize));
    // Live filesystem: allow 64 MiB of writes by others between the two statvfs calls.
    CHECK_NEAR(static_cast<double>(r.i64((pre + "free_bytes").c_str())), avail, 64.0 * (1 << 20));
    CHECK_NEAR(r.f64((pre + "used_pct").c_str()), 100.0 * used / (used + avail), 0.5);
  }
  SourceOptions bad = o;
  bad.disk_paths = {"/", t.path("no/such/dir")};
  CHECK(throws_with([&] { (void)make_source("disk", bad); }, "no/such/dir' does not exist"));
  fs::create_directories(t.path("a-b"));
  fs::create_directories(t.path("a_b"));
  bad.disk_paths = {t.path("a-b"), t.path("a_b")};
  CHECK(throws_with([&] { (void)make_source("disk", bad); }, "both map to the column prefix"));
  bad.disk_paths = {};
  CHECK(throws_with([&] { (void)make_source("disk", bad); }, "at least one path"));
}


// ---- process ------------------------------------------------------------------------------------

void test_process() {
  Tree t;
  auto src = make_source("process", t.opts("basic", 6767));
  auto io_src = make_source("process_io", t.opts("basic", 6767));
  CHECK_EQ(src->columns().size(), 4u);  // stat + statm only; io and status are process_io's
  CHECK_EQ(io_src->columns().size(), 4u);
  Row r(*src);
  Row io(*io_src);
  r.read(*src, kT0);
  io.read(*io_src, kT0);
  CHECK(src->reason() == nullptr);
  CHECK(io_src->reason() == nullptr);
  CHECK(r.null("proc.cpu_pct"));
  CHECK_EQ(r.i64("proc.rss_bytes"), 5346LL * kPage);  // statm resident pages
  CHECK_NEAR(r.f64("proc.mem_pct"), 100.0 * 5346 * kPage / (24683584.0 * 1024), 1e-9);
  CHECK_EQ(r.i64("proc.threads"), 4);
  CHECK_EQ(io.i64("proc.read_bytes"), 0);
  CHECK_EQ(io.i64("proc.write_bytes"), 0);
  CHECK_EQ(io.i64("proc.ctx_voluntary"), 0);
  CHECK_EQ(io.i64("proc.ctx_involuntary"), 0);
  t.advance("proc/basic");
  r.read(*src, kT1);
  io.read(*io_src, kT1);
  // utime+stime 17+0 -> 37+5: 25 ticks = 0.25 s of CPU (at 100 Hz) in 0.5 s = 50 %.
  CHECK_NEAR(r.f64("proc.cpu_pct"), 100.0 * 25.0 / static_cast<double>(kTck) / 0.5, 1e-9);
  if (kTck == 100) CHECK_NEAR(r.f64("proc.cpu_pct"), 50.0, 1e-9);
  CHECK_EQ(r.i64("proc.rss_bytes"), 6000LL * kPage);
  CHECK_EQ(r.i64("proc.threads"), 5);
  CHECK_EQ(io.i64("proc.read_bytes"), 8192);
  CHECK_EQ(io.i64("proc.write_bytes"), 4096);
  CHECK_EQ(io.i64("proc.ctx_voluntary"), 12);   // 8 -> 20
  CHECK_EQ(io.i64("proc.ctx_involuntary"), 3);  // 18 -> 21
  CHECK(src->reason() == nullptr);
  CHECK(io_src->reason() == nullptr);
  // process_io notices the exit through status reading 0 bytes.
  Tree::write(t.path("proc/basic/6767/status"), "");
  io.read(*io_src, kT2);
  CHECK(io.all_null());
  CHECK(reason_is(*io_src, kReasonProcessExited));

  // The process goes away (its fd reads 0 bytes): every cell null, "process exited", ESRCH.
  Tree::write(t.path("proc/basic/6767/stat"), "");
  r.read(*src, kT2);
  CHECK(r.all_null());
  CHECK(reason_is(*src, kReasonProcessExited));
  CHECK(src->reason() == kReasonProcessExited);
  CHECK_EQ(src->error_number(), ESRCH);
  r.read(*src, kT2 + 500'000'000);  // stays so
  CHECK(r.all_null());
  CHECK(reason_is(*src, kReasonProcessExited));
  CHECK_EQ(src->failures(), 2u);

  // comm "a) b (c"; no io file (as for another user's process): those two cells null, the rest set.
  auto w = make_source("process", t.opts("weird_comm", 31337));
  auto wio_src = make_source("process_io", t.opts("weird_comm", 31337));
  Row wr(*w);
  Row wio(*wio_src);
  wr.read(*w, kT0);
  wio.read(*wio_src, kT0);
  CHECK(w->reason() == nullptr);
  CHECK(wio_src->reason() == nullptr);
  CHECK(wio.null("proc.read_bytes"));
  CHECK(wio.null("proc.write_bytes"));
  CHECK_EQ(wr.i64("proc.threads"), 3);
  CHECK_EQ(wr.i64("proc.rss_bytes"), 300LL * kPage);
  CHECK_NEAR(wr.f64("proc.mem_pct"), 100.0 * 300 * kPage / (1000000.0 * 1024), 1e-9);
  t.advance("proc/weird_comm");
  wr.read(*w, kT1);
  // 250+50 -> 300+60: 60 ticks = 0.6 s in 0.5 s = 120 % (more than one core; 3 threads), capped
  // at 100 per online CPU.
  CHECK_NEAR(wr.f64("proc.cpu_pct"),
             std::min(100.0 * 60.0 / static_cast<double>(kTck) / 0.5,
                      100.0 * static_cast<double>(detail::online_cpus())),
             1e-9);
  wio.read(*wio_src, kT1);
  CHECK_EQ(wio.i64("proc.ctx_voluntary"), 0);
  CHECK(wio.null("proc.read_bytes"));
  CHECK(w->reason() == nullptr);

  CHECK(throws_with([&] { (void)make_source("process", t.opts("basic", 999999)); },
                    "pid 999999 does not exist (no "));
  fs::rename(t.path("proc/weird_comm/31337"), t.path("proc/weird_comm/31338"));
  CHECK(throws_with([&] { (void)make_source("process", t.opts("weird_comm", 31337)); },
                    "proc/weird_comm/31337)"));
  bool invalid = false;
  try {
    (void)make_source("process", t.opts("basic", -3));
  } catch (const std::invalid_argument& e) {
    invalid = std::strstr(e.what(), "got -3") != nullptr;
  }
  CHECK(invalid);
}

// ---- proc_tree ----------------------------------------------------------------------------------

void test_proc_tree() {
  Tree t;
  // 100 -> 101 -> 102 -> 99 (a lower pid), 150 and 1 outside the tree.
  auto src = make_source("proc_tree", t.opts("tree", 100));
  Row r(*src);
  r.read(*src, kT0);
  CHECK(src->reason() == nullptr);
  CHECK(r.null("proc.tree.cpu_pct"));
  CHECK_EQ(r.i64("proc.tree.count"), 4);
  CHECK_EQ(r.i64("proc.tree.threads"), 8);                 // 4 + 2 + 1 + 1
  CHECK_EQ(r.i64("proc.tree.rss_bytes"), 1260LL * kPage);  // 1000 + 200 + 50 + 10 pages
  CHECK_EQ(r.i64("proc.tree.untracked"), 0);
  t.advance("proc/tree");
  r.read(*src, kT1);
  // 99 exited (drops out); Δticks: 100 +40, 101 +10, 102 0 -> 50 ticks = 0.5 s in 0.5 s.
  CHECK_NEAR(r.f64("proc.tree.cpu_pct"), 100.0 * 50.0 / static_cast<double>(kTck) / 0.5, 1e-9);
  CHECK_EQ(r.i64("proc.tree.count"), 3);
  CHECK_EQ(r.i64("proc.tree.threads"), 7);
  CHECK_EQ(r.i64("proc.tree.rss_bytes"), 1250LL * kPage);

  // A new child of 100 appears; it is found by the next scan (>= 1 s after the last one).
  fs::create_directories(t.path("proc/tree/103"));
  const char* st103 = "103 (new) S 100 1 1 0 -1 0 0 0 0 0 5 0 0 0 20 0 1 0 1103 1000 10\n";
  Tree::write(t.path("proc/tree/103/stat"), st103);
  Tree::write(t.path("proc/tree/103/statm"), "1000 30 0 0 0 0 0\n");
  r.read(*src, kT1 + 400'000'000);  // 0.9 s after the first scan: not yet
  CHECK_EQ(r.i64("proc.tree.count"), 3);
  r.read(*src, kT1 + 1'000'000'000);  // 1.5 s: rescanned
  CHECK_EQ(r.i64("proc.tree.count"), 4);
  CHECK_EQ(r.i64("proc.tree.threads"), 8);
  CHECK_EQ(r.i64("proc.tree.rss_bytes"), 1280LL * kPage);
  CHECK_NEAR(r.f64("proc.tree.cpu_pct"), 0.0, 1e-9);  // nothing moved; 103 is not counted yet
  Tree::write(t.path("proc/tree/103/stat"),
              "103 (new) S 100 1 1 0 -1 0 0 0 0 0 15 0 0 0 20 0 1 0 1103 1000 10\n");
  r.read(*src, kT1 + 1'500'000'000);
  CHECK_NEAR(r.f64("proc.tree.cpu_pct"), 100.0 * 10.0 / static_cast<double>(kTck) / 0.5, 1e-9);
  CHECK(src->reason() == nullptr);

  // The root exits: all null, "process exited".
  Tree::write(t.path("proc/tree/100/stat"), "");
  r.read(*src, kT1 + 2'000'000'000);
  CHECK(r.all_null());
  CHECK(reason_is(*src, kReasonProcessExited));
  CHECK_EQ(src->error_number(), ESRCH);
}

// ---- load, pressure -----------------------------------------------------------------------------

void test_load_pressure() {
  Tree t;
  auto load = make_source("load", t.opts("basic"));
  Row l(*load);
  l.read(*load, kT0);  // "2.36 0.94 0.35 4/107 6766"
  CHECK_NEAR(l.f64("load.1m"), 2.36, 1e-12);
  CHECK_NEAR(l.f64("load.5m"), 0.94, 1e-12);
  CHECK_NEAR(l.f64("load.15m"), 0.35, 1e-12);
  CHECK_EQ(l.i64("load.running"), 4);
  CHECK(load->reason() == nullptr);

  auto psi = make_source("pressure", t.opts("basic"));
  const char* names[] = {"psi.cpu.some_pct", "psi.memory.some_pct", "psi.memory.full_pct",
                         "psi.io.some_pct", "psi.io.full_pct"};
  CHECK_EQ(psi->columns().size(), 5u);
  for (std::size_t i = 0; i < 5 && i < psi->columns().size(); ++i) {
    CHECK(psi->columns()[i].name == names[i]);
  }
  Row p(*psi);
  p.read(*psi, kT0);
  CHECK(p.all_null());
  t.advance("proc/basic");
  p.read(*psi, kT1);
  // cpu some +250000 µs in 0.5 s = 50 %; io some +5000 µs = 1 %, io full +2500 µs = 0.5 %.
  CHECK_NEAR(p.f64("psi.cpu.some_pct"), 50.0, 1e-9);
  CHECK_NEAR(p.f64("psi.memory.some_pct"), 0.0, 1e-9);
  CHECK_NEAR(p.f64("psi.memory.full_pct"), 0.0, 1e-9);
  CHECK_NEAR(p.f64("psi.io.some_pct"), 1.0, 1e-9);
  CHECK_NEAR(p.f64("psi.io.full_pct"), 0.5, 1e-9);

  auto nk = make_source("pressure", t.opts("new_kernel"));
  Row n(*nk);
  n.read(*nk, kT0);
  t.advance("proc/new_kernel");
  n.read(*nk, kT1);
  CHECK_NEAR(n.f64("psi.cpu.some_pct"), 20.0, 1e-9);  // +100000 µs
  CHECK_NEAR(n.f64("psi.memory.some_pct"), 0.0, 1e-9);
  CHECK_NEAR(n.f64("psi.io.some_pct"), 4.0, 1e-9);   // +20000 µs
  CHECK_NEAR(n.f64("psi.io.full_pct"), 2.0, 1e-9);   // +10000 µs

  CHECK(throws_with([&] { (void)make_source("pressure", t.opts("old_kernel")); },
                    "pressure stall information is not available"));
  // Only what exists at construction: a cpu file without a "full" line and nothing else.
  fs::create_directories(t.path("proc/psi_partial/pressure"));
  Tree::write(t.path("proc/psi_partial/pressure/cpu"),
              "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\n");
  auto part = make_source("pressure", t.opts("psi_partial"));
  CHECK_EQ(part->columns().size(), 1u);
  CHECK(part->columns()[0].name == "psi.cpu.some_pct");
}

// ---- cgroup -------------------------------------------------------------------------------------

void test_cgroup() {
  Tree t;
  // v2: ctr has cpu.max 1.5 cores (its parent allows 2), memory.max "max" under a 1 GiB parent.
  SourceOptions v2 = cgroup_opts(t, "cgroup_v2", 4242, "v2");
  CHECK(cgroup_limits_exist(v2));
  auto src = make_source("cgroup", v2);
  Row r(*src);
  r.read(*src, kT0);
  CHECK(src->reason() == nullptr);
  CHECK_NEAR(r.f64("cgroup.cpu_limit_cores"), 1.5, 1e-12);
  CHECK(r.null("cgroup.cpu_used_cores"));
  CHECK(r.null("cgroup.cpu_util_pct"));
  CHECK_EQ(r.i64("cgroup.mem_limit_bytes"), 1073741824);
  CHECK_EQ(r.i64("cgroup.mem_used_bytes"), 268435456);
  CHECK_NEAR(r.f64("cgroup.mem_util_pct"), 25.0, 1e-9);
  t.advance("cgroup/v2");
  r.read(*src, kT1);
  CHECK_NEAR(r.f64("cgroup.cpu_used_cores"), 1.2, 1e-9);  // +600000 µs in 0.5 s
  CHECK_NEAR(r.f64("cgroup.cpu_util_pct"), 80.0, 1e-9);   // 1.2 / 1.5
  CHECK_EQ(r.i64("cgroup.mem_used_bytes"), 536870912);
  CHECK_NEAR(r.f64("cgroup.mem_util_pct"), 50.0, 1e-9);

  // v1, "cpu,cpuacct" mounted together: abc's quota is 50000/100000 but its parent's 25000/100000
  // is tighter; the memory limit is also the parent's (abc says "unlimited").
  SourceOptions v1 = cgroup_opts(t, "cgroup_v1", 4243, "v1");
  CHECK(cgroup_limits_exist(v1));
  auto s1 = make_source("cgroup", v1);
  Row r1(*s1);
  r1.read(*s1, kT0);
  CHECK_NEAR(r1.f64("cgroup.cpu_limit_cores"), 0.25, 1e-12);
  CHECK(r1.null("cgroup.cpu_used_cores"));
  CHECK_EQ(r1.i64("cgroup.mem_limit_bytes"), 536870912);
  CHECK_EQ(r1.i64("cgroup.mem_used_bytes"), 134217728);
  CHECK_NEAR(r1.f64("cgroup.mem_util_pct"), 25.0, 1e-9);
  t.advance("cgroup/v1");
  r1.read(*s1, kT1);
  CHECK_NEAR(r1.f64("cgroup.cpu_used_cores"), 0.2, 1e-9);  // +0.1e9 ns in 0.5 s
  CHECK_NEAR(r1.f64("cgroup.cpu_util_pct"), 80.0, 1e-9);   // 0.2 / 0.25
  CHECK(s1->reason() == nullptr);

  // Recorded on the dev machine: v1 with separate cpu and cpuacct mounts, no limits anywhere.
  SourceOptions rec = cgroup_opts(t, "basic", 6767, "basic");
  CHECK(!cgroup_limits_exist(rec));
  auto s2 = make_source("cgroup", rec);
  Row r2(*s2);
  r2.read(*s2, kT0);
  r2.read(*s2, kT1);
  CHECK(s2->reason() == nullptr);
  CHECK(r2.null("cgroup.cpu_limit_cores"));
  CHECK_NEAR(r2.f64("cgroup.cpu_used_cores"), 0.0, 1e-12);  // cpuacct.usage did not move
  CHECK(r2.null("cgroup.cpu_util_pct"));
  CHECK(r2.null("cgroup.mem_limit_bytes"));
  CHECK_EQ(r2.i64("cgroup.mem_used_bytes"), 26427392);
  CHECK(r2.null("cgroup.mem_util_pct"));

  // Container namespace: the listed path is absent under the mount, so the mount root is used.
  SourceOptions ns = cgroup_opts(t, "cgroup_ns", 4244, "ns_root");
  CHECK(!cgroup_limits_exist(ns));
  auto s3 = make_source("cgroup", ns);
  Row r3(*s3);
  r3.read(*s3, kT0);
  t.advance("cgroup/ns_root");
  r3.read(*s3, kT1);
  CHECK(r3.null("cgroup.cpu_limit_cores"));
  CHECK_NEAR(r3.f64("cgroup.cpu_used_cores"), 0.5, 1e-9);  // +250000 µs in 0.5 s
  CHECK(r3.null("cgroup.cpu_util_pct"));
  CHECK(r3.null("cgroup.mem_limit_bytes"));
  CHECK_EQ(r3.i64("cgroup.mem_used_bytes"), 4096);

  CHECK(throws_with([&] { (void)make_source("cgroup", cgroup_opts(t, "cgroup_v2", 5555, "v2")); },
                    "cannot read"));
  CHECK(throws_with([&] { (void)make_source("cgroup", cgroup_opts(t, "cgroup_v1", 4243, "none")); },
                    "no cgroup cpu or memory accounting found"));
  CHECK(!cgroup_limits_exist(cgroup_opts(t, "cgroup_v1", 4243, "none")));
}

// Discovery on its own: which files the source is given, so the tightest-limit rule is checked
// on the paths, not only through the values read from them.
void test_cgroup_discovery() {
  using cgroup::dirs_up;
  using Dirs = std::vector<std::string>;
  CHECK(dirs_up("/sys/fs/cgroup", "/sys/fs/cgroup/a/b") ==
        Dirs({"/sys/fs/cgroup/a/b", "/sys/fs/cgroup/a", "/sys/fs/cgroup"}));
  CHECK(dirs_up("/sys/fs/cgroup", "/sys/fs/cgroup") == Dirs({"/sys/fs/cgroup"}));
  CHECK(dirs_up("/m", "/m/x") == Dirs({"/m/x", "/m"}));

  Tree t;
  // v2: ctr's own cpu.max (1.5 cores) beats its parent's 2; memory is limited by the parent only.
  const std::string v2 = t.path("cgroup/v2");
  cgroup::Layout l = cgroup::find_layout(cgroup_opts(t, "cgroup_v2", 4242, "v2"));
  CHECK(l.v2);
  CHECK(l.cpu_limit == v2 + "/kubepods/pod1/ctr/cpu.max");
  CHECK(l.cpu_period.empty());
  CHECK(l.cpu_usage == v2 + "/kubepods/pod1/ctr/cpu.stat");
  CHECK(l.mem_limit == v2 + "/kubepods/pod1/memory.max");
  CHECK(l.mem_usage == v2 + "/kubepods/pod1/ctr/memory.current");

  // v1, cpu and cpuacct mounted together: the parent's 0.25-core quota beats abc's 0.5, and its
  // 512 MiB memory limit beats the "unlimited" above and below it; usage stays abc's.
  const std::string v1 = t.path("cgroup/v1");
  l = cgroup::find_layout(cgroup_opts(t, "cgroup_v1", 4243, "v1"));
  CHECK(!l.v2);
  CHECK(l.cpu_limit == v1 + "/cpu,cpuacct/docker/cpu.cfs_quota_us");
  CHECK(l.cpu_period == v1 + "/cpu,cpuacct/docker/cpu.cfs_period_us");
  CHECK(l.cpu_usage == v1 + "/cpu,cpuacct/docker/abc/cpuacct.usage");
  CHECK(l.mem_limit == v1 + "/memory/docker/memory.limit_in_bytes");
  CHECK(l.mem_usage == v1 + "/memory/docker/abc/memory.usage_in_bytes");

  // No limit anywhere: the process's own directory (here the mount root) is kept.
  const std::string basic = t.path("cgroup/basic");
  l = cgroup::find_layout(cgroup_opts(t, "basic", 6767, "basic"));
  CHECK(!l.v2);  // a "0::/" line, but no cgroup.controllers at the root: v1
  CHECK(l.cpu_limit == basic + "/cpu/cpu.cfs_quota_us");
  CHECK(l.cpu_usage == basic + "/cpuacct/cpuacct.usage");
  const std::string mem_leaf = basic + "/memory/process_api/8727d5f5ec74dfb7d31986f5618e8966";
  CHECK(l.mem_limit == mem_leaf + "/memory.limit_in_bytes");
  CHECK(l.mem_usage == mem_leaf + "/memory.usage_in_bytes");

  // The listed path is absent under the mount (a container's namespace): the root is used.
  const std::string ns = t.path("cgroup/ns_root");
  l = cgroup::find_layout(cgroup_opts(t, "cgroup_ns", 4244, "ns_root"));
  CHECK(l.v2);
  CHECK(l.cpu_limit == ns + "/cpu.max" && l.cpu_usage == ns + "/cpu.stat");
  CHECK(l.mem_limit == ns + "/memory.max" && l.mem_usage == ns + "/memory.current");

  // read_cpu_limit: cores, no quota, and a v1 period read only when there is a quota.
  int err = 0;
  ProcFile none;
  ProcFile v2_max(v2 + "/kubepods/pod1/ctr/cpu.max");
  CHECK_NEAR(cgroup::read_cpu_limit(v2_max, none, true, &err), 1.5, 1e-12);
  ProcFile ns_max(ns + "/cpu.max");
  CHECK(cgroup::read_cpu_limit(ns_max, none, true, &err) == cgroup::kNoCpuLimit);
  ProcFile quota(v1 + "/cpu,cpuacct/docker/abc/cpu.cfs_quota_us");
  ProcFile period(v1 + "/cpu,cpuacct/docker/abc/cpu.cfs_period_us");
  CHECK_NEAR(cgroup::read_cpu_limit(quota, period, false, &err), 0.5, 1e-12);
  ProcFile no_quota(v1 + "/cpu,cpuacct/cpu.cfs_quota_us");  // -1
  CHECK(cgroup::read_cpu_limit(no_quota, none, false, &err) == cgroup::kNoCpuLimit);
  err = 0;
  CHECK(cgroup::read_cpu_limit(quota, none, false, &err) == cgroup::kCpuLimitUnreadable);
  CHECK_EQ(err, EBADF);  // the unopened period file was asked for
  Tree::write(t.path("cgroup/v2/cpu.max"), "lots 100000\n");
  ProcFile garbage(t.path("cgroup/v2/cpu.max"));
  CHECK(cgroup::read_cpu_limit(garbage, none, true, &err) == cgroup::kCpuLimitUnreadable);
  ProcFile missing(t.path("cgroup/v2/no-such-file"));
  err = 0;
  CHECK(cgroup::read_cpu_limit(missing, none, true, &err) == cgroup::kCpuLimitUnreadable);
  CHECK_EQ(err, ENOENT);
}

// ---- counter slots (diskio, network) ------------------------------------------------------------

void test_counter_slots() {
  using detail::CounterSlots;
  const CounterSlots::Name a = "a", b = "b", c = "c", lo = "lo";
  int decided = 0;  // calls of the counts callback: once per new name
  auto counts = [&](const char* n) noexcept {
    ++decided;
    return std::strcmp(n, "lo") != 0;
  };
  CounterSlots slots(3);
  CounterSlots::Counters d{};
  // First reading: the baseline, nothing counts.
  slots.begin_reading();
  CHECK(slots.add(a, 0, {100, 10}, d, counts));
  CHECK(slots.add(lo, 1, {5, 5}, d, counts));
  slots.end_reading();
  CHECK(d[0] == 0 && d[1] == 0);
  CHECK_EQ(decided, 2);
  // a moves on, lo moves but is not counted, b is new (all of it counts), c finds the table full.
  d = {};
  slots.begin_reading();
  CHECK(slots.add(lo, 0, {9, 9}, d, counts));  // at another position: found anyway
  CHECK(slots.add(a, 1, {150, 30}, d, counts));
  CHECK(slots.add(b, 2, {7, 3}, d, counts));
  CHECK(!slots.add(c, 3, {1000, 1000}, d, counts));
  slots.end_reading();
  CHECK_EQ(d[0], 50u + 7u);
  CHECK_EQ(d[1], 20u + 3u);
  CHECK_EQ(decided, 3);  // b was new; c got no slot, so nothing to decide; a and lo were known
  // a resets (counts from 0 again), b vanishes and frees its slot, so c fits now (new: counts).
  d = {};
  slots.begin_reading();
  CHECK(slots.add(a, 0, {4, 2}, d, counts));
  CHECK(slots.add(lo, 1, {9, 9}, d, counts));
  slots.end_reading();
  CHECK(d[0] == 4 && d[1] == 2);
  d = {};
  slots.begin_reading();
  CHECK(slots.add(c, 2, {11, 12}, d, counts));
  slots.end_reading();
  CHECK(d[0] == 11 && d[1] == 12);

  // The totals and rates a summing source writes: columns 0-1 totals, 2-3 rates.
  detail::CounterTotals totals(400'000'000);  // windows of at least 0.4 s
  std::uint64_t cells[4] = {};
  std::uint8_t valid[4] = {};
  auto write = [&](CounterSlots::Counters delta, std::int64_t now) {
    std::fill(std::begin(valid), std::end(valid), 0);
    RowWriter row(cells, valid, 4);
    CHECK(totals.write(delta, row, now));  // every total within int64 here
  };
  write({0, 0}, kT0);
  CHECK(valid[0] && valid[1] && !valid[2] && !valid[3]);
  write({1000, 10}, kT0 + 100'000'000);  // 0.1 s: the window is still open
  CHECK_EQ(static_cast<std::int64_t>(cells[0]), 1000);
  CHECK(!valid[2] && !valid[3]);
  write({1000, 10}, kT1);  // 0.5 s after the first: 2000 and 20 over 0.5 s
  double rate0 = 0, rate1 = 0;
  std::memcpy(&rate0, &cells[2], sizeof rate0);
  std::memcpy(&rate1, &cells[3], sizeof rate1);
  CHECK(valid[2] && valid[3]);
  CHECK_NEAR(rate0, 4000.0, 1e-9);
  CHECK_NEAR(rate1, 40.0, 1e-9);
  CHECK_EQ(static_cast<std::int64_t>(cells[1]), 20);
}

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
  test_cpu();
  test_cpu_cores();
  test_memory();
  test_network();
  test_diskio();
  test_disk();
  test_process();
  test_proc_tree();
  test_load_pressure();
  test_cgroup();
  test_cgroup_discovery();
  test_counter_slots();
  test_registry();
  test_live();
  TEST_MAIN_END();
}
