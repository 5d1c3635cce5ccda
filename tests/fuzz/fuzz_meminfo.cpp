// libFuzzer harness: /proc/meminfo, and the pre-3.14 MemAvailable estimate derived from it.
#include "fuzz_check.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope::procfs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  MemInfo m = parse_meminfo(as_text(data, size));
  for (std::int64_t v : {m.total, m.free, m.available, m.buffers, m.cached, m.swap_total,
                         m.swap_free}) {
    FUZZ_CHECK(v == kMissing || v >= 0);  // bytes never negative; absent is kMissing
  }
  bool out_of_range = false;
  std::int64_t avail = mem_available_or_estimate(m, &out_of_range);
  FUZZ_CHECK(avail == kMissing || avail >= 0);
  FUZZ_CHECK(!out_of_range || avail == kMissing);
  return 0;
}
