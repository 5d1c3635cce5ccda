// proc.cpu_pct of this very process (thread CPU clocks) with a scripted clock_gettime
// (SourceOptions::gettime): one thread spins, another (standing for the sampler thread) uses
// 5 µs per read, and the sampler is preempted between one thread's clock and the next or before
// its closing stamp. Each thread's CPU time between two reads is divided by the span within which
// both of its clock reads happened, so a thread never reads above 100 %.
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

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

int fake_gettime(clockid_t id, timespec* ts) {
  std::int64_t v = g_now_ns;
  if (id != CLOCK_MONOTONIC) {
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

}  // namespace

int main() {
  test_preempted_between_thread_clocks();
  TEST_MAIN_END();
}
