// libFuzzer harness: /proc/diskstats, and the partition-name rule on the names it yields.
#include <array>
#include <cstring>

#include "fuzz_check.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope::procfs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::array<DiskStatLine, 4> out{};
  std::size_t seen = 0;
  std::size_t n = parse_diskstats(as_text(data, size), out, &seen);
  FUZZ_CHECK(n <= out.size() && n <= seen);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t len = strnlen(out[i].name, kNameMax);
    FUZZ_CHECK(len > 0 && len < kNameMax);
    FUZZ_CHECK(out[i].n_stats == 4 || out[i].n_stats >= 11);
    for (std::size_t j = 0; j < n; ++j) {
      (void)is_partition_name_of(out[i].name, out[j].name);
    }
  }
  return 0;
}
