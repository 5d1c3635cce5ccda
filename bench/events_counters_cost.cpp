// The C++ cost of an edge pair (push begin + push end) with edge counters off, cpu and rusage
// (EventLog::set_counters), no Python: `g++ -std=c++20 -O2 -DHAS_COUNTERS -Icpp/include -Icpp/src
// bench/events_counters_cost.cpp cpp/src/events*.cpp cpp/src/shared_events*.cpp -lpthread`, then
// `./a.out MODE` (0 off, 1 cpu, 3 rusage): the median ns per pair of 7 runs of 2,000,000 pairs.
// Built without -DHAS_COUNTERS it also builds against a tree from before edge counters (A/B).
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <algorithm>
#include <vector>
#include "stroboscope/events.hpp"
using namespace stroboscope;
int main(int argc, char** argv) {
  int mode = argc > 1 ? atoi(argv[1]) : 0;
  EventLog log(std::uint64_t{1} << 20);
#ifdef HAS_COUNTERS
  log.set_counters(static_cast<std::uint8_t>(mode));
#endif
  const int n = 2000000;
  std::vector<double> runs;
  for (int r = 0; r < 7; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      log.push(EventKind::kBegin, 1, 0, 0, 1);
      log.push(EventKind::kEnd, 1, 0, 0, 1);
    }
    auto t1 = std::chrono::steady_clock::now();
    runs.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
  }
  std::sort(runs.begin(), runs.end());
  printf("%.1f\n", runs[3]);
}
