// EventLog: order, overwrite accounting, torn-read detection, many producers, interning, fork.
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "stroboscope/clock.hpp"
#include "stroboscope/events.hpp"

using stroboscope::EventKind;
using stroboscope::EventLog;
using stroboscope::EventRead;

namespace {

constexpr std::uint64_t kAll = UINT64_MAX;

// Event number `n` of producer `p`: every field derived from (p, n), so a record mixed from two
// events is seen as such.
void push_numbered(EventLog& log, std::uint32_t p, std::uint32_t n) {
  log.push(n % 2 == 0 ? EventKind::kBegin : EventKind::kEnd, n, static_cast<std::uint16_t>(n),
           n ^ 0x5A5A5A5Au, (std::uint64_t{p} << 32) | n);
}

bool consistent(const EventRead& r, std::size_t i) {
  const auto& c = r.columns;
  const auto n = static_cast<std::uint32_t>(c.stack_id[i]);
  return c.scope_id[i] == n && c.depth[i] == static_cast<std::uint16_t>(n) &&
         c.labels_id[i] == (n ^ 0x5A5A5A5Au) && c.kind[i] == (n % 2 == 0 ? 1 : 2);
}

void test_order_and_fields() {
  EventLog log(64);
  const std::int64_t before = stroboscope::mono_ns();
  for (std::uint32_t n = 0; n < 40; ++n) push_numbered(log, 7, n);
  const std::int64_t after = stroboscope::mono_ns();
  CHECK_EQ(log.written(), 40u);
  EventRead r = log.read(0, kAll);
  CHECK_EQ(r.first, 0u);
  CHECK_EQ(r.next, 40u);
  CHECK_EQ(r.lost, 0u);
  CHECK_EQ(r.columns.size(), 40u);
  for (std::size_t i = 0; i < r.columns.size(); ++i) {
    CHECK_EQ(r.columns.stack_id[i], (std::uint64_t{7} << 32) | i);
    CHECK(consistent(r, i));
    CHECK_EQ(r.columns.thread_id[i], static_cast<std::int64_t>(gettid()));
    CHECK(r.columns.mono_ns[i] >= before && r.columns.mono_ns[i] <= after);
    if (i > 0) CHECK(r.columns.mono_ns[i] >= r.columns.mono_ns[i - 1]);
  }
  // A sub-range, and a range past the end (clamped to what was written).
  EventRead sub = log.read(10, 13);
  CHECK_EQ(sub.columns.size(), 3u);
  CHECK_EQ(sub.columns.scope_id[0], 10u);
  CHECK_EQ(sub.next, 13u);
  EventRead past = log.read(38, 1000);
  CHECK_EQ(past.columns.size(), 2u);
  CHECK_EQ(past.next, 40u);
  EventRead none = log.read(40, kAll);
  CHECK_EQ(none.columns.size(), 0u);
  CHECK_EQ(none.next, 40u);
  CHECK_EQ(none.lost, 0u);
}

void test_empty_log_reads_nothing() {
  EventLog log(8);
  EventRead r = log.read(0, kAll);
  CHECK_EQ(r.columns.size(), 0u);
  CHECK_EQ(r.next, 0u);
  CHECK_EQ(log.stats().bytes, 0u);  // nothing mapped before the first event
}

void test_wrap_counts_overwritten() {
  EventLog log(8);
  for (std::uint32_t n = 0; n < 20; ++n) push_numbered(log, 0, n);
  const auto st = log.stats();
  CHECK_EQ(st.written, 20u);
  CHECK_EQ(st.overwritten, 12u);
  CHECK_EQ(st.dropped, 0u);
  CHECK_EQ(st.capacity, 8u);
  CHECK_EQ(st.bytes, 8u * 40u);
  EventRead r = log.read(0, kAll);
  CHECK_EQ(r.first, 12u);
  CHECK_EQ(r.lost, 12u);
  CHECK_EQ(r.next, 20u);
  CHECK_EQ(r.columns.size(), 8u);
  for (std::size_t i = 0; i < r.columns.size(); ++i) CHECK_EQ(r.columns.scope_id[i], 12 + i);
  // Asked from inside the held range: nothing lost.
  EventRead tail = log.read(15, kAll);
  CHECK_EQ(tail.lost, 0u);
  CHECK_EQ(tail.columns.size(), 5u);
}

struct Overwriter {
  EventLog* log;
  std::uint32_t pushes_left;
  std::uint32_t next;
};

void overwrite_once(void* arg) {
  auto* o = static_cast<Overwriter*>(arg);
  if (o->pushes_left == 0) return;
  --o->pushes_left;
  push_numbered(*o->log, 1, o->next++);
}

void test_torn_read_detected() {
  // The hook runs after slot 0's words are copied: one more event reuses slot 0 before the
  // reader re-checks it. The copy of event 0 must be dropped and counted, events 1..3 kept.
  EventLog log(4);
  for (std::uint32_t n = 0; n < 4; ++n) push_numbered(log, 0, n);
  Overwriter o{&log, 1, 100};
  EventRead r = log.read(0, 4, overwrite_once, &o);
  CHECK_EQ(o.pushes_left, 0u);
  CHECK_EQ(r.columns.size(), 3u);
  CHECK_EQ(r.lost, 1u);
  CHECK_EQ(r.next, 4u);
  for (std::size_t i = 0; i < r.columns.size(); ++i) {
    CHECK_EQ(r.columns.scope_id[i], i + 1);
    CHECK(consistent(r, i));
  }
  // The same read with a hook that changes nothing keeps all four (the control).
  EventLog quiet(4);
  for (std::uint32_t n = 0; n < 4; ++n) push_numbered(quiet, 0, n);
  Overwriter none{&quiet, 0, 0};
  EventRead q = quiet.read(0, 4, overwrite_once, &none);
  CHECK_EQ(q.columns.size(), 4u);
  CHECK_EQ(q.lost, 0u);
}

// Producers on several threads, a reader following them. With room for everything, each
// producer's events come back complete, in its own order, with its own thread id.
void test_many_producers_no_loss() {
  constexpr std::uint32_t kThreads = 4;
  constexpr std::uint32_t kEach = 20000;
  EventLog log(std::uint64_t{1} << 17);
  std::atomic<bool> done{false};
  std::vector<std::int64_t> tids(kThreads);
  std::vector<std::thread> producers;
  EventRead got;
  std::thread reader([&] {
    std::uint64_t next = 0;
    std::uint64_t lost = 0;
    for (;;) {
      const bool finished = done.load(std::memory_order_acquire);
      EventRead r = log.read(next, kAll);
      for (std::size_t i = 0; i < r.columns.size(); ++i) {
        got.columns.append({r.columns.mono_ns[i], r.columns.thread_id[i], r.columns.stack_id[i],
                            r.columns.scope_id[i], r.columns.labels_id[i], r.columns.depth[i],
                            r.columns.kind[i]});
      }
      lost += r.lost;
      next = r.next;
      if (finished && next == log.written()) break;
    }
    got.lost = lost;
    got.next = next;
  });
  for (std::uint32_t p = 0; p < kThreads; ++p) {
    producers.emplace_back([&, p] {
      tids[p] = gettid();
      for (std::uint32_t n = 0; n < kEach; ++n) push_numbered(log, p, n);
    });
  }
  for (auto& t : producers) t.join();
  done.store(true, std::memory_order_release);
  reader.join();
  CHECK_EQ(got.lost, 0u);
  CHECK_EQ(got.next, std::uint64_t{kThreads} * kEach);
  CHECK_EQ(got.columns.size(), std::size_t{kThreads} * kEach);
  CHECK_EQ(log.stats().dropped, 0u);
  std::vector<std::uint32_t> seen(kThreads, 0);
  std::vector<std::int64_t> last_mono(kThreads, 0);
  for (std::size_t i = 0; i < got.columns.size(); ++i) {
    const auto p = static_cast<std::uint32_t>(got.columns.stack_id[i] >> 32);
    CHECK(p < kThreads);
    if (p >= kThreads) continue;
    CHECK(consistent(got, i));
    CHECK_EQ(got.columns.scope_id[i], seen[p]);  // each producer's events in its own order
    ++seen[p];
    CHECK_EQ(got.columns.thread_id[i], tids[p]);
    CHECK(got.columns.mono_ns[i] >= last_mono[p]);
    last_mono[p] = got.columns.mono_ns[i];
  }
  for (std::uint32_t p = 0; p < kThreads; ++p) CHECK_EQ(seen[p], kEach);
}

// A tiny ring lapped all the time by several producers while a reader copies it: whatever is
// returned is a whole record, and returned + lost accounts for every index.
void test_many_producers_overwriting() {
  constexpr std::uint32_t kThreads = 3;
  constexpr std::uint32_t kEach = 30000;
  EventLog log(16);
  std::atomic<bool> done{false};
  std::uint64_t returned = 0, lost = 0, next = 0, torn = 0;
  std::thread reader([&] {
    for (;;) {
      const bool finished = done.load(std::memory_order_acquire);
      EventRead r = log.read(next, kAll);
      for (std::size_t i = 0; i < r.columns.size(); ++i) torn += consistent(r, i) ? 0 : 1;
      returned += r.columns.size();
      lost += r.lost;
      CHECK(r.first >= next);
      next = r.next;
      if (finished && next == log.written()) break;
    }
  });
  std::vector<std::thread> producers;
  for (std::uint32_t p = 0; p < kThreads; ++p) {
    producers.emplace_back([&, p] {
      for (std::uint32_t n = 0; n < kEach; ++n) push_numbered(log, p, n);
    });
  }
  for (auto& t : producers) t.join();
  done.store(true, std::memory_order_release);
  reader.join();
  CHECK_EQ(torn, 0u);
  CHECK_EQ(log.written(), std::uint64_t{kThreads} * kEach);
  CHECK_EQ(returned + lost, std::uint64_t{kThreads} * kEach);
  CHECK(returned >= 16u);  // at least the last lap, read after the producers finished
}

void test_configure() {
  EventLog log(8);
  CHECK(log.configure(32));
  CHECK_EQ(log.capacity(), 32u);
  bool threw = false;
  try {
    (void)log.configure(48);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
  threw = false;
  try {
    EventLog bad(1);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  CHECK(threw);
  push_numbered(log, 0, 0);
  CHECK(!log.configure(64));  // the ring exists: refused, nothing changes
  CHECK_EQ(log.capacity(), 32u);
}

void test_intern() {
  EventLog log(8);
  CHECK_EQ(log.strings(0).size(), 1u);  // "" is id 0 from the start
  CHECK_EQ(log.intern(""), 0u);
  const auto a = log.intern("train/step");
  const auto b = log.intern("forward");
  CHECK_EQ(a, 1u);
  CHECK_EQ(b, 2u);
  CHECK_EQ(log.intern("train/step"), a);
  CHECK_EQ(log.intern(std::string("emb\0edded", 9)), 3u);
  auto all = log.strings(0);
  CHECK_EQ(all.size(), 4u);
  CHECK(all[1] == "train/step" && all[2] == "forward" && all[3].size() == 9);
  auto tail = log.strings(2);
  CHECK_EQ(tail.size(), 2u);
  CHECK(tail[0] == "forward");
  CHECK_EQ(log.strings(99).size(), 0u);
  // Threads interning overlapping names agree on every id.
  std::vector<std::vector<std::uint32_t>> ids(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < 500; ++n) ids[t].push_back(log.intern("name-" + std::to_string(n)));
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < 4; ++t) CHECK(ids[t] == ids[0]);
  CHECK_EQ(log.num_strings(), 4u + 500u);
  auto table = log.strings(0);
  for (int n = 0; n < 500; ++n) CHECK(table[ids[0][n]] == "name-" + std::to_string(n));
}

// The global log across fork: the child's counters go on from the parent's, its events carry
// its own thread id, and the intern table is usable (its mutex was not inherited locked).
void test_fork_child_goes_on() {
  EventLog& log = EventLog::global();
  const std::uint64_t base = log.written();
  const auto id = log.intern("before-fork");
  push_numbered(log, 9, 0);
  push_numbered(log, 9, 1);
  const pid_t child = fork();
  if (child == 0) {
    int bad = 0;
    push_numbered(log, 9, 2);
    if (log.written() != base + 3) bad |= 1;
    EventRead r = log.read(base, kAll);
    if (r.columns.size() != 3) bad |= 2;
    if (r.columns.size() == 3) {
      if (r.columns.thread_id[2] != getpid()) bad |= 4;        // the child's own id
      if (r.columns.thread_id[0] == getpid()) bad |= 8;        // the parent's events kept
    }
    if (log.intern("after-fork") != id + 1) bad |= 16;
    _exit(bad);
  }
  int status = 0;
  CHECK_EQ(waitpid(child, &status, 0), child);
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);
  CHECK_EQ(log.written(), base + 2);  // the child's event is its own
  CHECK_EQ(log.read(base, kAll).columns.thread_id[0], static_cast<std::int64_t>(gettid()));
}

}  // namespace

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Edge counters: off by default; on, every edge is followed by its thread's counters record,
// also with several producers at once (each pairs with its own thread's latest edge), and a
// scope's CPU clock difference holds the CPU time spent inside it.
void test_edge_counters() {
  EventLog off(64);
  CHECK_EQ(off.counters(), 0);
  off.push(EventKind::kBegin, 1, 0, 0, 1);
  CHECK_EQ(off.written(), 1u);  // no counters record

  constexpr std::uint32_t kThreads = 4;
  constexpr std::uint32_t kEach = 5000;  // scopes per thread: 2 edges, 2 counters records
  EventLog log(std::uint64_t{1} << 17);
  log.set_counters(stroboscope::kEdgeCountersCpu | stroboscope::kEdgeCountersRusage);
  CHECK_EQ(log.counters(), 3);
  std::vector<std::int64_t> inside(kThreads, 0);
  std::vector<std::thread> producers;
  for (std::uint32_t p = 0; p < kThreads; ++p) {
    producers.emplace_back([&, p] {
      for (std::uint32_t n = 0; n < kEach; ++n) {
        log.push(EventKind::kBegin, p, 0, 0, p);
        const std::int64_t t0 = thread_cpu_ns();
        const std::int64_t t1 = thread_cpu_ns();
        inside[p] += t1 - t0;
        log.push(EventKind::kEnd, p, 0, 0, p);
      }
    });
  }
  for (auto& t : producers) t.join();
  EventRead r = log.read(0, kAll);
  CHECK_EQ(r.lost, 0u);
  CHECK_EQ(r.columns.size(), std::size_t{kThreads} * kEach * 4);
  // Per thread: edge, counters, edge, counters... in index order; begin and end alternate.
  std::vector<std::size_t> seen(kThreads, 0);
  std::vector<std::int64_t> begin_cpu(kThreads, 0), total(kThreads, 0), last(kThreads, 0);
  // A counters record's other words are counters: its producer is known by its thread id.
  std::vector<std::int64_t> tids;
  for (std::size_t i = 0; i < r.columns.size(); ++i) {
    const std::uint8_t kind = r.columns.kind[i];
    auto at = std::find(tids.begin(), tids.end(), r.columns.thread_id[i]);
    if (at == tids.end()) {
      CHECK(kind == 1);  // a thread's first record is its first begin
      tids.push_back(r.columns.thread_id[i]);
      at = tids.end() - 1;
    }
    const auto p = static_cast<std::uint32_t>(at - tids.begin());
    CHECK(p < kThreads);
    if (p >= kThreads) continue;
    const std::size_t k = seen[p]++;
    if (k % 2 == 0) {
      CHECK_EQ(kind, (k / 2) % 2 == 0 ? 1 : 2);
      CHECK(r.columns.scope_id[i] < kThreads);
      CHECK_EQ(r.columns.stack_id[i], r.columns.scope_id[i]);  // the edge's own words
      continue;
    }
    CHECK_EQ(kind, static_cast<std::uint8_t>(EventKind::kCountersRusage));
    const std::int64_t cpu = r.columns.mono_ns[i];  // a counters record's first word
    CHECK(cpu >= last[p]);
    last[p] = cpu;
    if ((k / 2) % 2 == 0) {
      begin_cpu[p] = cpu;
    } else {
      total[p] += cpu - begin_cpu[p];
    }
  }
  CHECK_EQ(tids.size(), std::size_t{kThreads});
  std::int64_t all_total = 0, all_inside = 0;
  for (std::uint32_t p = 0; p < kThreads; ++p) {
    CHECK_EQ(seen[p], std::size_t{kEach} * 4);
    all_total += total[p];
    all_inside += inside[p];
  }
  CHECK(all_total >= all_inside);  // the clock pairs hold the CPU time measured inside
  log.set_counters(0);
  const std::uint64_t before = log.written();
  log.push(EventKind::kBegin, 9, 0, 0, 9);
  CHECK_EQ(log.written(), before + 1);
}

int main() {
  test_fork_child_goes_on();  // first, while the process has one thread
  test_order_and_fields();
  test_empty_log_reads_nothing();
  test_wrap_counts_overwritten();
  test_torn_read_detected();
  test_many_producers_no_loss();
  test_many_producers_overwriting();
  test_configure();
  test_intern();
  test_edge_counters();
  TEST_MAIN_END();
}
