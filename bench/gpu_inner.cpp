// gpu_inner: stroboscope's own NvmlSource::read (cpp/src/nvml_device.cpp, compiled here from the
// source tree) on the calling thread, the way the poll thread calls it (clear validity, read into
// a private row), timed like gpu_floor: back to back, then paced at 1 kHz. Leaves out what
// PolledSource adds per reading (publishing the row into the seqlock block, the sleep).
// Usage: gpu_inner NDEV SECONDS (NDEV 0 = every GPU). Prints one JSON line.
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "stroboscope/nvml.hpp"

using stroboscope::NvmlSource;
using stroboscope::NvmlSourceOptions;
using stroboscope::RowWriter;

static long long clk(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  NvmlSourceOptions o;
  const unsigned ndev = (unsigned)atoi(argv[1]);
  for (unsigned i = 0; i < ndev; ++i) o.devices.push_back(i);
  const double seconds = atof(argv[2]);
  NvmlSource src(o);
  const std::size_t n = src.columns().size();
  std::vector<std::uint64_t> cells(n);
  std::vector<std::uint8_t> valid(n);
  auto read = [&] {
    std::memset(valid.data(), 0, n);
    src.read(RowWriter(cells.data(), valid.data(), n), clk(CLOCK_MONOTONIC));
  };
  for (int i = 0; i < 3; ++i) read();
  long long t0 = clk(CLOCK_MONOTONIC);
  for (int i = 0; i < 10; ++i) read();
  const long long one = (clk(CLOCK_MONOTONIC) - t0) / 10;
  const long long per_batch = std::clamp<long long>(one > 0 ? 20000000LL / one : 100000, 1, 100000);
  std::vector<long long> ns;
  const long long start = clk(CLOCK_MONOTONIC);
  while (ns.size() < 400 && (ns.size() < 5 || clk(CLOCK_MONOTONIC) - start < seconds * 1e9)) {
    const long long b0 = clk(CLOCK_MONOTONIC);
    for (long long r = 0; r < per_batch; ++r) read();
    ns.push_back((clk(CLOCK_MONOTONIC) - b0) / per_batch);
  }
  std::sort(ns.begin(), ns.end());
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  const int np = std::clamp((int)(seconds * 1000.0), 200, 20000);
  std::vector<long long> pns(np);
  const long long c0 = clk(CLOCK_THREAD_CPUTIME_ID);
  long long deadline = clk(CLOCK_MONOTONIC);
  for (int i = 0; i < np; ++i) {
    deadline += 1000000LL;
    timespec ts{(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
    const long long r0 = clk(CLOCK_MONOTONIC);
    read();
    pns[i] = clk(CLOCK_MONOTONIC) - r0;
  }
  const long long paced_cpu = clk(CLOCK_THREAD_CPUTIME_ID) - c0;
  std::sort(pns.begin(), pns.end());
  printf("{\"devices\": %zu, \"columns\": %zu, \"ns_per_read\": %lld, \"batches\": %zu, "
         "\"paced_reads\": %d, \"paced_read_ns\": %lld, \"paced_read_p90_ns\": %lld, "
         "\"paced_cpu_ns_per_read\": %lld, \"transient\": %llu}\n",
         src.device_indices().size(), n, ns[ns.size() / 2], ns.size(), np, pns[np / 2],
         pns[np * 9 / 10], paced_cpu / np, (unsigned long long)src.transient_errors());
  return 0;
}
