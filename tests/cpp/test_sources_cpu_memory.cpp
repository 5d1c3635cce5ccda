// Source tests for the whole-machine gauges: cpu, cpu_cores, memory, load and pressure, each
// built on a recorded tree (a temp copy of tests/data), read at fabricated tick times, every cell
// checked (value and null-ness) against hand-computed numbers. Between reads a fixture "advances"
// ("<file>.1" written over "<file>" in place); read() must not allocate.
#include <filesystem>
#include <fstream>
#include <string>

#include "check.hpp"
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

// ---- load, pressure -----------------------------------------------------------------------------

// PSI read by a 1 kHz sampler: total= (µs) only advances when a read folds the CPUs' stall time
// in, and a read covering less than a jiffy adds nothing, so the source reads the file once per
// window (100 ms) and never in between; the share's denominator is the span from the stamp
// before the previous read to the stamp after this one. Both CPUs saturated, totals in chunks.
void test_pressure_windows(const Tree& t) {
  auto psi = make_source("pressure", t.opts("psi_chunks"));
  CHECK_EQ(psi->columns().size(), 1u);  // cpu only
  CHECK_EQ(psi->natural_resolution_ns(), 100'000'000);
  Row p(*psi);
  constexpr std::int64_t kMs = 1'000'000;
  const std::string cpu = t.path("proc/psi_chunks/pressure/cpu");
  p.read(*psi, kT0);  // total=5000000: the baseline
  CHECK(p.null("psi.cpu.some_pct"));
  for (std::int64_t ms = 1; ms < 100; ++ms) {
    // Not read in between (a read here would see this and lose its baseline).
    if (ms == 50) Tree::write(cpu, "some avg10=0.00 avg60=0.00 avg300=0.00 total=garbage\n");
    p.read(*psi, kT0 + ms * kMs);
    CHECK(p.null("psi.cpu.some_pct"));
  }
  t.advance("proc/psi_chunks");  // total=5080000
  p.read(*psi, kT0 + 100 * kMs);
  CHECK_NEAR(p.f64("psi.cpu.some_pct"), 80.0, 1e-9);  // 80000 µs in 100 ms
  CHECK(psi->reason() == nullptr);
  for (std::int64_t ms = 101; ms < 200; ++ms) {
    p.read(*psi, kT0 + ms * kMs);
    CHECK(p.null("psi.cpu.some_pct"));
  }
  // The tick at 200 ms is read 3 ms late: 103000 µs of stall (stalled throughout) between the
  // reads at 100 and 203 ms: 100 %, not 103000 µs / 100 ms of ticks = 103 %.
  t.advance("proc/psi_chunks", ".2");  // total=5183000
  p.read(*psi, kT0 + 200 * kMs, 3 * kMs);
  CHECK_NEAR(p.f64("psi.cpu.some_pct"), 100.0, 1e-9);
  // Then on time at 300 ms: 97000 µs since the read at 203 ms: 100 %, not 97 %.
  t.advance("proc/psi_chunks", ".3");  // total=5280000
  for (std::int64_t ms = 201; ms < 300; ++ms) p.read(*psi, kT0 + ms * kMs);
  p.read(*psi, kT0 + 300 * kMs);
  CHECK_NEAR(p.f64("psi.cpu.some_pct"), 100.0, 1e-9);
  t.advance("proc/psi_chunks", ".4");  // total=5280500
  for (std::int64_t ms = 301; ms < 400; ++ms) p.read(*psi, kT0 + ms * kMs);
  p.read(*psi, kT0 + 400 * kMs);
  CHECK_NEAR(p.f64("psi.cpu.some_pct"), 0.5, 1e-9);  // 500 µs in 100 ms
  CHECK_EQ(psi->failures(), 0u);

  // Read every 100 ms (its natural resolution) on ticks that jitter: the tick due at 100 ms
  // woke 5 µs earlier than the one at 0 did, and still closes the window (a value per read,
  // not one per two reads).
  auto slow = make_source("pressure", t.opts("psi_chunks"));
  Row q(*slow);
  q.read(*slow, kT0 + 5'000);  // total=5280500
  Tree::write(cpu, "some avg10=0.00 avg60=0.00 avg300=0.00 total=5281000\n");
  q.read(*slow, kT0 + 100 * kMs);
  CHECK_NEAR(q.f64("psi.cpu.some_pct"), 100.0 * 500.0 / 99'995.0, 1e-9);  // µs over µs
}

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

  test_pressure_windows(t);

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

}  // namespace

int main() {
  test_cpu();
  test_cpu_cores();
  test_memory();
  test_load_pressure();
  TEST_MAIN_END();
}
