// libFuzzer harness: /proc/pressure/* and cgroup v2 *.pressure.
#include "fuzz_check.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope::procfs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  PressureTotals p = parse_pressure(as_text(data, size));
  FUZZ_CHECK(p.has_some || p.some_total_us == 0);
  FUZZ_CHECK(p.has_full || p.full_total_us == 0);
  return 0;
}
