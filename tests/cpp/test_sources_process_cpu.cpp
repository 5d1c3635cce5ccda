// proc.cpu_pct of this very process (thread CPU clocks) with a scripted clock_gettime
// (SourceOptions::gettime): one thread spins, another (standing for the sampler thread) uses
// 5 µs per read, and the sampler is preempted between one thread's clock and the next or before
// its closing stamp. Each thread's CPU time between two reads is divided by the span within which
// both of its clock reads happened, so a thread never reads above 100 %. Then the live clocks:
// the thread list is re-read only when it may have changed, and stroboscope's own threads (the
// reading thread, registered poll threads) are left out unless asked for.
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "../../cpp/src/proc_cpu_clock.hpp"
#include "check.hpp"
#include "source_fixture.hpp"

namespace {

// The scripted clocks. Every call takes 1 µs; the call numbered g_preempt_after (counted from
// the start of a read) is followed by 2 ms during which the sampler does not run.
std::int64_t g_now_ns = 0;
int g_calls = 0;
int g_preempt_after = -1;
int g_spin_tid = 0;              // its CPU clock reads the fake time itself: 100 % busy
std::int64_t g_other_cpu_ns = 0;  // any other thread: 5 µs more at each read of its clock
std::int64_t g_own_reads = 0;     // reads of CLOCK_THREAD_CPUTIME_ID

int fake_gettime(clockid_t id, timespec* ts) {
  std::int64_t v = g_now_ns;
  if (id == CLOCK_THREAD_CPUTIME_ID) {
    // The reading thread's own clock, for proc.self_cpu_pct (read after the chain below): 50 µs
    // more at each read of it.
    v = (g_own_reads += 1) * 50'000;
  } else if (id != CLOCK_MONOTONIC) {
    // A thread CPU clock is (~tid << 3) | 6 (include/linux/posix-timers.h).
    const int tid = ~(static_cast<int>(id) >> 3);
    v = tid == g_spin_tid ? g_now_ns : (g_other_cpu_ns += 5'000);
  }
  ts->tv_sec = static_cast<time_t>(v / 1'000'000'000);
  ts->tv_nsec = static_cast<long>(v % 1'000'000'000);
  g_now_ns += 1'000;
  if (++g_calls == g_preempt_after) g_now_ns += 2'000'000;
  return 0;
}

// A read starting at `at_ns` of the fake clock, preempted after call `preempt_after` of it.
void read_at(Row& r, Source& s, std::int64_t at_ns, int preempt_after) {
  g_now_ns = at_ns;
  g_calls = 0;
  g_preempt_after = preempt_after;
  r.read(s, at_ns);
}

void test_preempted_between_thread_clocks() {
  // A second thread, so /proc/self/task lists two: this one (the spinner) and a sleeper.
  std::atomic<bool> stop{false};
  std::thread other([&stop] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  g_spin_tid = static_cast<int>(::getpid());
  SourceOptions o;
  o.pid = 0;
  o.gettime = &fake_gettime;
  // The reading thread is the spinner here: counted like any other (by default it would be
  // left out as stroboscope's own sampler thread).
  o.include_own_threads = true;
  {
    auto src = make_process_source(o);
    CHECK(std::strcmp(src->interface(), "clock_gettime(thread CPU clocks of /proc/self/task)") ==
          0);
    Row r(*src);
    // Each read chains stamps and clocks: stamp, spinner's clock, stamp, other's clock, stamp
    // (the main thread has the lowest tid, so the task listing gives it first). A thread's
    // share is its CPU time over the span from the stamp before its previous clock read to the
    // stamp after this one.
    // Read 1 at 10 ms: s0 10.000, spinner 10.001, 2 ms preempted, s1 12.002, other 12.003,
    // s2 12.004.
    read_at(r, *src, 10'000'000, 2);
    CHECK(r.null("proc.cpu_pct"));  // the first reading is the baseline
    CHECK_EQ(r.i64("proc.threads"), 2);
    // Read 2 at 13 ms: s0 13.000, spinner 13.001, s1 13.002, other 13.003, s2 13.004.
    // Spinner: 3.000 ms over 10.000 -> 13.002; other: 5 µs over 12.002 -> 13.004. One stamp
    // after all the clocks (12.004 -> 13.004) would give 3.005 ms / 1 ms = 300.5 % (200 once
    // capped at 100 x the two threads that ran).
    read_at(r, *src, 13'000'000, -1);
    CHECK_NEAR(r.f64("proc.cpu_pct"), 100.0 * (3.000 / 3.002 + 0.005 / 1.002), 1e-9);
    // Read 3 at 14 ms, preempted between the last clock and the closing stamp: s0 14.000,
    // spinner 14.001, s1 14.002, other 14.003, 2 ms, s2 16.004. Spinner: 1.000 ms over
    // 13.000 -> 14.002; other: 5 µs over 13.002 -> 16.004.
    read_at(r, *src, 14'000'000, 4);
    CHECK_NEAR(r.f64("proc.cpu_pct"), 100.0 * (1.000 / 1.002 + 0.005 / 3.002), 1e-9);
    // Read 4 at 17 ms, unpreempted: spinner 3.000 ms over 14.000 -> 17.002, other 5 µs over
    // 14.002 -> 17.004.
    read_at(r, *src, 17'000'000, -1);
    CHECK_NEAR(r.f64("proc.cpu_pct"), 100.0 * (3.000 / 3.002 + 0.005 / 3.002), 1e-9);
  }
  stop = true;
  other.join();
}

// proc.self_cpu_pct costs a system call per own thread: the sampler thread's clock is read once
// per cpu_window, not on every read, and the column holds a value at those reads only: the own
// CPU time over the span between them.
void test_own_clock_read_once_per_window() {
  g_spin_tid = 0;
  // A thread of the workload, so each read's stamps fall a few fake µs after its tick's time
  // (as they do live): the windows are still counted in tick times.
  std::atomic<bool> stop{false};
  std::thread other([&stop] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  SourceOptions o;
  o.pid = 0;
  o.gettime = &fake_gettime;
  o.cpu_window_ns = 10'000'000;
  auto src = make_process_source(o);
  src->on_start();  // a sampler's run: this thread reads, as the sampler thread would
  Row r(*src);
  g_own_reads = 0;
  std::vector<std::int64_t> valued;
  for (std::int64_t ms = 10; ms <= 40; ++ms) {
    read_at(r, *src, ms * 1'000'000, -1);
    if (!r.null("proc.self_cpu_pct")) {
      valued.push_back(ms);
      // 50 µs of own CPU between two reads of its clock, 10 ms apart (their stamps are each
      // the same few µs after their ticks).
      CHECK_NEAR(r.f64("proc.self_cpu_pct"), 100.0 * 0.050 / 10.0, 1e-9);
    }
  }
  // Read at 10 (the baseline), 20, 30 and 40 ms: the first tick a window after the tick of the
  // previous read (against the read's own stamp, 2 µs after its tick, 21 and 32 ms).
  CHECK_EQ(g_own_reads, 4);
  CHECK_EQ(valued.size(), 3u);
  if (valued.size() == 3) {
    CHECK_EQ(valued[0], 20);
    CHECK_EQ(valued[1], 30);
    CHECK_EQ(valued[2], 40);
  }
  // cpu_window = 0: on every read, as before.
  o.cpu_window_ns = 0;
  auto every = make_process_source(o);
  every->on_start();
  Row e(*every);
  g_own_reads = 0;
  for (std::int64_t ms = 50; ms < 60; ++ms) read_at(e, *every, ms * 1'000'000, -1);
  CHECK_EQ(g_own_reads, 10);
  CHECK(!e.null("proc.self_cpu_pct"));
  src->on_stop();
  every->on_stop();
  stop = true;
  other.join();
}

// Threads listed in /proc/self/task (its link count is 2 + the threads).
std::size_t task_entries() {
  struct stat st {};
  if (::stat("/proc/self/task", &st) != 0) return 0;
  return static_cast<std::size_t>(st.st_nlink) - 2;
}

// Spins on the calling thread until its own CPU clock has moved by `ns`.
void spin_cpu(std::int64_t ns) {
  timespec a{}, b{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  do {
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  } while ((b.tv_sec - a.tv_sec) * 1'000'000'000LL + (b.tv_nsec - a.tv_nsec) < ns);
}

// One listing per change of the thread set: births (the task directory's link count moves),
// exits, registrations of own threads; none while it stays the same.
void test_thread_list_reread_only_when_it_changes() {
  detail::ProcessCpuClock c(static_cast<int>(::getpid()), "/proc/self/task", true);
  CHECK(c.mode() == detail::ProcessCpuClock::Mode::kThreadClocks);
  c.set_running(true);  // as the sampler's on_start does
  detail::CpuReading r;
  CHECK(c.read(&r));  // the first read of a run learns the reading thread: one listing
  const std::uint64_t base = c.rescans();
  const std::size_t n0 = c.threads();
  for (int i = 0; i < 50; ++i) CHECK(c.read(&r));
  CHECK_EQ(c.rescans(), base);  // nothing changed: no listing, only the link count
  CHECK_EQ(c.threads(), n0);
  std::atomic<int> step{0};
  std::thread t([&step] {
    while (step.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    register_own_thread();
    step = 2;
    while (step.load() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    unregister_own_thread();
  });
  CHECK(c.read(&r));  // born: listed again
  CHECK_EQ(c.rescans(), base + 1);
  CHECK_EQ(c.threads(), n0 + 1);
  CHECK(c.read(&r));
  CHECK_EQ(c.rescans(), base + 1);
  step = 1;
  while (step.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(c.read(&r));  // registered as own: listed again, to leave it out
  CHECK_EQ(c.rescans(), base + 2);
  step = 3;
  t.join();
  // pthread_join returns when the kernel clears the thread's tid, during its exit; it leaves
  // /proc/self/task a moment later (on a loaded machine, milliseconds).
  for (int i = 0; i < 5000 && task_entries() != n0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(c.read(&r));  // unregistered and gone
  CHECK(c.rescans() >= base + 3);
  CHECK_EQ(c.threads(), n0);
}

// While the sampler runs, the reading thread and a registered thread are stroboscope's own: by
// default their CPU time is not in the process's (here nothing else runs, so it does not move at
// all) and is in own_ns; with include_own it is in both. Stopped, a reading thread (tick_now's
// caller) is the user's: counted, and no own CPU is reported.
void test_own_threads_left_out_unless_asked() {
  for (bool include : {false, true}) {
    detail::ProcessCpuClock c(static_cast<int>(::getpid()), "/proc/self/task", true,
                              &::clock_gettime, include);
    std::atomic<int> step{0};
    std::thread poll([&step] {
      register_own_thread();
      step = 1;
      while (step.load() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      spin_cpu(20'000'000);  // 20 ms of a registered thread
      step = 3;
      while (step.load() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      unregister_own_thread();
    });
    while (step.load() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    c.set_running(true);  // reads come from the sampler thread (this one) from here
    detail::CpuReading a, b;
    CHECK(c.read(&a));
    CHECK(a.own_ok);
    step = 2;
    while (step.load() != 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    spin_cpu(20'000'000);  // 20 ms of the reading thread
    CHECK(c.read(&b));
    CHECK(b.own_ns - a.own_ns >= 40'000'000u);
    if (include) {
      CHECK(b.ns - a.ns >= 40'000'000u);
    } else {
      // Other threads of this test process sleep: a few µs at most, never the 40 ms.
      CHECK(b.ns - a.ns < 1'000'000u);
    }
    step = 4;
    poll.join();
    c.set_running(false);
    detail::CpuReading d, e;
    CHECK(c.read(&d));
    spin_cpu(10'000'000);
    CHECK(c.read(&e));
    CHECK(!e.own_ok);
    CHECK(e.ns - d.ns >= 10'000'000u);
  }
}

// proc.self_cpu_pct sums cumulative clocks a window apart: a registered thread that leaves in
// between must not take its time out of the sum (the value would read low, or be lost).
void test_own_time_stays_when_a_registered_thread_leaves() {
  detail::ProcessCpuClock c(static_cast<int>(::getpid()), "/proc/self/task", true);
  c.set_running(true);
  detail::CpuReading a, b, d;
  CHECK(c.read(&a));
  std::atomic<int> step{0};
  std::thread poll([&step] {
    register_own_thread();
    spin_cpu(20'000'000);  // 20 ms of a registered thread
    step = 1;
    while (step.load() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    unregister_own_thread();
  });
  while (step.load() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(c.read(&b));
  CHECK(b.own_ok);
  CHECK(b.own_ns - a.own_ns >= 20'000'000u);
  step = 2;
  poll.join();
  CHECK(c.read(&d));
  CHECK(d.own_ok);
  CHECK(d.own_ns >= b.own_ns);  // its 20 ms stay in the sum after it left
  c.set_running(false);
}

}  // namespace

int main() {
  test_preempted_between_thread_clocks();
  test_thread_list_reread_only_when_it_changes();
  test_own_threads_left_out_unless_asked();
  test_own_clock_read_once_per_window();
  test_own_time_stays_when_a_registered_thread_leaves();
  TEST_MAIN_END();
}
