// Source tests for one process and its tree: process and proc_tree on recorded /proc trees (a
// temp copy of tests/data) read at fabricated tick times, every cell checked against
// hand-computed numbers, down to the process exiting (every cell null, "process exited").
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/registry.hpp"

#include "source_fixture.hpp"

namespace {

// ---- threads ------------------------------------------------------------------------------------

// A window of the threads source read 5 ms late: tick at 100 ms, reads (and their stamps) at
// 105 ms. Thread 6770 ran throughout (105 ms), 6767 half the time (52.5 ms, and waited 10 ms):
// each is divided by the span between its reads, 105 ms, not by the 100 ms between ticks.
void test_threads_read_late() {
  Tree t;
  auto src = make_source("threads", t.opts("basic", 6767));
  Row r(*src);
  r.read(*src, kT0);  // 6767: 52345678 1200000; 6770: 9000000 50000
  CHECK_EQ(r.i64("threads.count"), 2);
  CHECK(r.null("threads.cpu_pct"));
  Tree::write(t.path("proc/basic/6767/task/6767/schedstat"), "104845678 11200000 330\n");
  Tree::write(t.path("proc/basic/6767/task/6770/schedstat"), "114000000 50000 40\n");
  r.read(*src, kT0 + 100'000'000, 5'000'000);
  CHECK_EQ(r.i64("threads.ran"), 2);
  CHECK_NEAR(r.f64("threads.cpu_pct"), 150.0, 1e-9);
  CHECK_NEAR(r.f64("threads.wait_pct"), 100.0 * 10.0 / 105.0, 1e-9);
  CHECK_EQ(r.i64("threads.top0.tid"), 6770);
  CHECK_NEAR(r.f64("threads.top0.cpu_pct"), 100.0, 1e-9);
  CHECK_EQ(r.i64("threads.top1.tid"), 6767);
  CHECK_NEAR(r.f64("threads.top1.cpu_pct"), 50.0, 1e-9);
  CHECK(r.null("threads.top2.tid"));
}

// ---- process ------------------------------------------------------------------------------------

void test_process() {
  Tree t;
  auto src = make_source("process", t.opts("basic", 6767));
  auto io_src = make_source("process_io", t.opts("basic", 6767));
  // stat + statm and proc.self_cpu_pct (the sampler's own CPU); io and status are process_io's.
  CHECK_EQ(src->columns().size(), 5u);
  CHECK_EQ(io_src->columns().size(), 4u);
  Row r(*src);
  Row io(*io_src);
  r.read(*src, kT0);
  io.read(*io_src, kT0);
  CHECK(src->reason() == nullptr);
  CHECK(io_src->reason() == nullptr);
  CHECK(r.null("proc.cpu_pct"));
  CHECK(r.null("proc.self_cpu_pct"));  // a recorded tree: no CPU clocks of the live process
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

  // A process inside do_exit() (recorded from a real one): its address space is gone, so statm
  // reads "0 0 0 0 0 0 0" while stat still says 'R', with PF_EXITING (0x4) in its flags
  // (0x40000c); then a zombie. Every cell null from the first, never a 0 rss.
  auto ex = make_source("process", t.opts("exiting", 17421));
  Row er(*ex);
  er.read(*ex, kT0);
  CHECK_EQ(er.i64("proc.rss_bytes"), 101040LL * kPage);
  CHECK_EQ(er.i64("proc.threads"), 1);
  t.advance("proc/exiting");  // stat.1: 'R' + PF_EXITING; statm.1: zeros
  er.read(*ex, kT1);
  CHECK(er.all_null());
  CHECK(reason_is(*ex, kReasonProcessExited));
  CHECK_EQ(ex->error_number(), ESRCH);
  t.advance("proc/exiting", ".2");  // the zombie
  er.read(*ex, kT2);
  CHECK(er.all_null());
  CHECK(reason_is(*ex, kReasonProcessExited));
  // The zombie from the start: refused at construction, as an exited pid is.
  CHECK(throws_with([&] { (void)make_source("process", t.opts("exiting", 17421)); },
                    "has already exited"));

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

}  // namespace

int main() {
  test_process();
  test_threads_read_late();
  test_proc_tree();
  TEST_MAIN_END();
}
