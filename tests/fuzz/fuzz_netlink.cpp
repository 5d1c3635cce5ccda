// libFuzzer harness: the rtnetlink RTM_GETSTATS reply parser (netlink.hpp).
#include <array>

#include "fuzz_check.hpp"
#include "stroboscope/netlink.hpp"

using namespace stroboscope::netlink;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::array<LinkCounters, 4> out{};
  StatsReply r;
  // Sequence 7 is the one the recorded seed (tests/data/netlink) answers.
  parse_stats_reply(std::span<const std::uint8_t>(data, size), 7, out, &r);
  FUZZ_CHECK(r.n <= out.size() && r.n <= r.seen);
  FUZZ_CHECK(r.error >= 0);
  // A second pass appends after the first and stays within the span.
  StatsReply again = r;
  again.done = false;
  parse_stats_reply(std::span<const std::uint8_t>(data, size), 7, out, &again);
  FUZZ_CHECK(again.n <= out.size() && again.n >= r.n);
  return 0;
}
