// Source tests for network and disk: network, diskio, disk (statvfs) on a recorded tree (a temp
// copy of tests/data) read at fabricated tick times, every cell checked against hand-computed
// numbers, and the counter slots that diskio and network keep per interface or disk.
#include <sys/statvfs.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "stroboscope/counter_slots.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/registry.hpp"

#include "source_fixture.hpp"

namespace {

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

// A rate window that ends exactly on a tick closes on that tick: rate_window 100 ms, ticks every
// 1 ms from the baseline, eth0 +500000 bytes received by the tick at 100 ms.
void test_rate_window_ends_on_a_tick() {
  Tree t;
  SourceOptions o = t.opts("basic");
  o.rate_window_ns = 100'000'000;
  auto src = make_source("network", o);
  Row r(*src);
  r.read(*src, kT0);
  for (std::int64_t ms = 1; ms < 100; ++ms) {
    r.read(*src, kT0 + ms * 1'000'000);
    CHECK(r.null("net.recv_bytes_per_s"));  // the window is still open
  }
  t.advance("proc/basic");
  r.read(*src, kT0 + 100'000'000);
  CHECK_NEAR(r.f64("net.recv_bytes_per_s"), 500000 / 0.1, 1e-6);  // not null, not / 0.101 s
  CHECK_NEAR(r.f64("net.sent_bytes_per_s"), 25000 / 0.1, 1e-6);
  r.read(*src, kT0 + 101'000'000);  // a new window opened at 100 ms
  CHECK(r.null("net.recv_bytes_per_s"));

  // The same rule, bare: a window of 4 ns over ticks at 0, 2, 4, 6, 8.
  detail::WindowedRate w(4);
  double rate = -1.0;
  CHECK(!w.update(10, 0, &rate));
  CHECK(!w.update(12, 2, &rate));
  CHECK(w.update(18, 4, &rate));  // 8 units in 4 ns, ending exactly on the tick
  CHECK_NEAR(rate, 8 / 4e-9, 1e-3);
  CHECK(!w.update(19, 6, &rate));
  CHECK(w.update(26, 8, &rate));
  CHECK_NEAR(rate, 8 / 4e-9, 1e-3);
}

// The byte-counter sources are read once per rate window + 5 % by default (every tick when the
// window is 0), and reads that far apart close a window on every read while the ticks they land
// on are late by less than 5 ms (spans of 103 ms and 100.000001 ms below): no rate value is lost.
void test_byte_counters_read_once_per_window() {
  Tree t;
  for (const char* name : {"network", "diskio"}) {
    SourceOptions o = t.opts("basic");
    CHECK_EQ(o.rate_window_ns, 100'000'000);
    CHECK_EQ(make_source(name, o)->natural_resolution_ns(), 105'000'000);
    o.rate_window_ns = 0;
    CHECK_EQ(make_source(name, o)->natural_resolution_ns(), 0);
  }
  detail::WindowedRate w(100'000'000);
  double rate = -1.0;
  const std::int64_t lateness[] = {0, 3'000'000, 1'000'000, 0, 4'999'999, 0};
  CHECK(!w.update(0, 0, &rate));  // the baseline
  std::uint64_t total = 0;
  for (int k = 1; k < 6; ++k) {
    total += 1000;
    CHECK(w.update(total, k * 105'000'000 + lateness[k], &rate));
  }
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
  bool invalid_argument = false;  // a ValueError in Python, like the argument's other checks
  try {
    (void)make_source("disk", bad);
  } catch (const std::invalid_argument&) {
    invalid_argument = true;
  } catch (const std::exception&) {
  }
  CHECK(invalid_argument);
  bad.disk_paths = {};
  CHECK(throws_with([&] { (void)make_source("disk", bad); }, "at least one path"));
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

}  // namespace

int main() {
  test_network();
  test_rate_window_ends_on_a_tick();
  test_byte_counters_read_once_per_window();
  test_diskio();
  test_disk();
  test_counter_slots();
  TEST_MAIN_END();
}
