// libFuzzer harness: /proc/stat ("cpu" and "cpuN" lines).
#include <array>

#include "fuzz_check.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope::procfs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::array<CoreTimes, 8> cores{};
  StatCpus s = parse_stat_cpus(as_text(data, size), cores);
  FUZZ_CHECK(s.n_cores <= cores.size());
  FUZZ_CHECK(s.n_cores <= s.n_cores_seen);
  for (std::size_t i = 0; i < s.n_cores; ++i) {
    FUZZ_CHECK(cores[i].id >= 0);
    (void)cpu_busy(cores[i].times);
  }
  if (s.has_total) (void)cpu_total(s.total);
  return 0;
}
