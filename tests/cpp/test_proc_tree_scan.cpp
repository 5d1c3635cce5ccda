// proc_tree's rescan runs on a thread of its own while the source is started: a new descendant is
// found while the tick time given to read() stands still (the inline rescan, which needs a second
// of tick time, cannot be what found it); stopped, read() rescans itself again. TSan in CI.
#include <chrono>
#include <thread>

#include "source_fixture.hpp"

namespace {

// Reads at `now` until proc.tree.count reaches `want` (up to 20 s of real time: a loaded machine).
bool count_reaches(Source& src, Row& r, std::int64_t now, std::int64_t want) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    r.read(src, now);
    if (r.i64("proc.tree.count") == want) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void add_child(const Tree& t, int pid, long start) {
  const std::string dir = "proc/tree/" + std::to_string(pid);
  std::filesystem::create_directories(t.path(dir));
  Tree::write(t.path(dir + "/stat"), std::to_string(pid) + " (new) S 100 1 1 0 -1 0 0 0 0 0 5 0 0 0 20 0 1 0 " +
                                         std::to_string(start) + " 1000 10\n");
  Tree::write(t.path(dir + "/statm"), "1000 30 0 0 0 0 0\n");
}

void test_rescan_on_its_own_thread() {
  Tree t;
  // 100 -> 101 -> 102 -> 99: four processes.
  auto src = make_source("proc_tree", t.opts("tree", 100));
  Row r(*src);
  r.read(*src, kT0);
  CHECK_EQ(r.i64("proc.tree.count"), 4);
  src->on_start();
  add_child(t, 103, 1103);
  CHECK(count_reaches(*src, r, kT0, 5));  // found without the tick time moving
  CHECK_EQ(r.i64("proc.tree.threads"), 9);
  CHECK_EQ(r.i64("proc.tree.rss_bytes"), 1290LL * kPage);
  CHECK(src->reason() == nullptr);
  // 101's subtree goes away (102 and 99 were its descendants): the next scans drop them.
  std::filesystem::remove_all(t.path("proc/tree/101"));
  CHECK(count_reaches(*src, r, kT0, 2));  // 100 and 103 (102, 99 now hang off no one here)
  src->on_stop();
  // No scan thread: a new child is found only once a second of tick time has passed.
  add_child(t, 104, 1104);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  r.read(*src, kT0 + 500'000'000);
  CHECK_EQ(r.i64("proc.tree.count"), 2);
  r.read(*src, kT0 + 1'000'000'000);
  CHECK_EQ(r.i64("proc.tree.count"), 3);
  // Started again, stopped again, destroyed with a scan maybe pending: nothing leaks (ASan).
  src->on_start();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  src->on_stop();
}

}  // namespace

int main() {
  test_rescan_on_its_own_thread();
  TEST_MAIN_END();
}
