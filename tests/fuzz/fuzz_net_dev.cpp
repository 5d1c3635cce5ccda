// libFuzzer harness: /proc/net/dev.
#include <array>
#include <cstring>

#include "fuzz_check.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope::procfs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::array<NetDevCounters, 4> out{};
  std::size_t seen = 0;
  std::size_t n = parse_net_dev(as_text(data, size), out, &seen);
  FUZZ_CHECK(n <= out.size() && n <= seen);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t len = strnlen(out[i].name, kNameMax);
    FUZZ_CHECK(len > 0 && len < kNameMax);  // a non-empty, terminated name
  }
  return 0;
}
