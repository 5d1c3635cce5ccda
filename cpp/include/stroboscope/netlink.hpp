// The rtnetlink reply parser of the "network" source: per-interface 64-bit counters from an
// RTM_GETSTATS dump filtered to IFLA_STATS_LINK_64 (one struct rtnl_link_stats64 per interface).
//
// Like the /proc parsers it takes bytes (a recorded reply or the socket's buffer), never a socket,
// so it is unit-tested on recorded replies and fuzzed (tests/fuzz/fuzz_netlink.cpp). It never
// allocates and never reads past `buf`: every length field is checked against what is left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace stroboscope::netlink {

struct LinkCounters {
  std::uint32_t ifindex = 0;
  std::uint64_t rx_bytes = 0, tx_bytes = 0, rx_packets = 0, tx_packets = 0;
};

struct StatsReply {
  std::size_t n = 0;        // counters written to the output span
  std::size_t seen = 0;     // RTM_NEWSTATS messages with IFLA_STATS_LINK_64 (> n: span too short)
  bool done = false;        // NLMSG_DONE reached: the dump is complete
  int error = 0;            // errno of an NLMSG_ERROR message (positive), 0 when none
  bool malformed = false;   // a length field did not fit: the rest of the buffer was skipped
};

// Parses one recv() worth of netlink messages, appending to `out` from `reply->n` on (so a dump
// that takes several recv() calls accumulates). Messages whose sequence number is not `seq` are
// skipped (a late reply to an earlier request).
void parse_stats_reply(std::span<const std::uint8_t> buf, std::uint32_t seq,
                       std::span<LinkCounters> out, StatsReply* reply) noexcept;

}  // namespace stroboscope::netlink
