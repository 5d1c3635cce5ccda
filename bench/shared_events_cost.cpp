// What one scope's edges cost in C++ (a begin + end push), with no Python above them: the log in
// anonymous memory (what an in-process recorder reads), in a file of an events directory (what an
// outside recorder reads), and in a file whose directory has a doorbell with a waiter (edge rows
// across processes), beside a clock_gettime(CLOCK_MONOTONIC) pair. Each figure is the wall time
// and the producer thread's own CPU time (CLOCK_THREAD_CPUTIME_ID) per pair, and the process's
// CPU time per pair (which holds the doorbell's waiter thread too).
//
//   g++ -std=c++20 -O2 -Icpp/include bench/shared_events_cost.cpp cpp/src/events*.cpp \
//       cpp/src/shared_events*.cpp -lpthread -o shared_events_cost
//   ./shared_events_cost DIR [pairs] [runs]   (DIR: a directory for the events files)
//
// A tree from before a change builds the same way (A/B in one run: run both binaries alternately).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "stroboscope/events.hpp"
#include "stroboscope/shared_events.hpp"

using namespace stroboscope;

namespace {

std::int64_t ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

struct Cost {
  double wall = 0, thread = 0, process = 0;
};

// The median (by wall time) of `runs` runs of `pairs` pairs.
template <typename Body>
Cost measure(int pairs, int runs, Body body) {
  std::vector<Cost> out;
  for (int r = 0; r < runs; ++r) {
    const std::int64_t w0 = ns(CLOCK_MONOTONIC), t0 = ns(CLOCK_THREAD_CPUTIME_ID),
                       p0 = ns(CLOCK_PROCESS_CPUTIME_ID);
    body(pairs);
    const std::int64_t w1 = ns(CLOCK_MONOTONIC), t1 = ns(CLOCK_THREAD_CPUTIME_ID),
                       p1 = ns(CLOCK_PROCESS_CPUTIME_ID);
    out.push_back({double(w1 - w0) / pairs, double(t1 - t0) / pairs, double(p1 - p0) / pairs});
  }
  std::sort(out.begin(), out.end(), [](const Cost& a, const Cost& b) { return a.wall < b.wall; });
  return out[out.size() / 2];
}

void print(const char* what, const Cost& c) {
  std::printf("| %s | %.0f | %.0f | %.0f |\n", what, c.wall, c.thread, c.process);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [pairs] [runs]\n", argv[0]);
    return 2;
  }
  const std::string base = argv[1];
  const int pairs = argc > 2 ? std::atoi(argv[2]) : 1'000'000;
  const int runs = argc > 3 ? std::atoi(argv[3]) : 7;
  const std::uint64_t capacity = std::uint64_t{1} << 20;
  std::printf("| edge pair (begin + end) | wall ns | thread CPU ns | process CPU ns |\n");
  std::printf("| --- | --- | --- | --- |\n");
  volatile std::int64_t sink = 0;
  print("clock_gettime(CLOCK_MONOTONIC) pair", measure(pairs, runs, [&](int n) {
          for (int i = 0; i < n; ++i) sink = sink + ns(CLOCK_MONOTONIC) + ns(CLOCK_MONOTONIC);
        }));
  auto pushes = [](EventLog& log) {
    return [&log](int n) {
      for (int i = 0; i < n; ++i) {
        log.push(EventKind::kBegin, 1, 0, 0, 1);
        log.push(EventKind::kEnd, 1, 0, 0, 1);
      }
    };
  };
  {
    EventLog memory(capacity);
    print("memory (in-process)", measure(pairs, runs, pushes(memory)));
  }
  const std::string plain = base + "/plain";
  mkdir(plain.c_str(), 0700);
  {
    EventLog file(capacity, "py", plain.c_str(), false);
    print("file (outside recorder)", measure(pairs, runs, pushes(file)));
  }
  const std::string belled = base + "/bell";
  mkdir(belled.c_str(), 0700);
  {
    std::atomic<std::uint64_t> rung{0};
    EventsDoorbell bell(belled, [&rung] { rung.fetch_add(1, std::memory_order_relaxed); });
    usleep(20'000);  // the waiter reaches its sleep
    EventLog file(capacity, "py", belled.c_str(), false);
    print("file + doorbell (edge rows)", measure(pairs, runs, pushes(file)));
    bell.stop();
    std::printf("doorbell: %llu wakes for %llu begins\n",
                static_cast<unsigned long long>(bell.wakes()),
                static_cast<unsigned long long>(std::uint64_t(pairs) * runs));
  }
  return 0;
}
