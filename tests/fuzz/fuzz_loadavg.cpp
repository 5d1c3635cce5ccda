// libFuzzer harness: /proc/loadavg.
#include "fuzz_check.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope::procfs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  LoadAvg l;
  (void)parse_loadavg(as_text(data, size), &l);
  return 0;
}
