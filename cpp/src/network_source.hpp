// The network source's columns and read rate, in one home for its two ways of reading the same
// kernel counters: rtnetlink (net_netlink.cpp) and the /proc/net/dev fallback (proc_net_dev.cpp).
// Each derives from NetworkSource and adds only how it reads.
#pragma once

#include <cstdint>
#include <string>

#include "stroboscope/counter_slots.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/source.hpp"

namespace stroboscope::detail {

class NetworkSource : public Source {
 public:
  // The kernel adds to these counters on any packet or request; they are read once per rate
  // window by default (see byte_counter_read_every_ns).
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return read_every_ns_;
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return read_every_ns_ > 0 ? kByteCounterResolutionReason
                              : "rate_window 0: the counters can change on any tick; every tick.";
  }

 protected:
  // Columns: the two totals (sent, received: CounterSlots' order), then their rates.
  explicit NetworkSource(const SourceOptions& opts)
      : Source("network"),
        include_lo_(opts.net_include_loopback),
        read_every_ns_(byte_counter_read_every_ns(opts.rate_window_ns)),
        totals_(opts.rate_window_ns) {
    const std::string which =
        include_lo_ ? "all interfaces, lo included," : "all interfaces but lo";
    add_column("net.sent_bytes", "bytes", DType::kInt64, Kind::kCounter,
               "Bytes sent by " + which + " since the first reading (by default one exact "
                   "value per rate_window + 5 %: the resolution table).");
    add_column("net.recv_bytes", "bytes", DType::kInt64, Kind::kCounter,
               "Bytes received by " + which + " since the first reading (by default one "
                   "exact value per rate_window + 5 %).");
    add_column("net.sent_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
               "Bytes sent per second by " + which +
                   " since the previous value (windows of at least rate_window; the default "
                   "read period of rate_window + 5 % loses no value of it).");
    add_column("net.recv_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
               "Bytes received per second by " + which +
                   " since the previous value (windows of at least rate_window; the default "
                   "read period of rate_window + 5 % loses no value of it).");
    set_window(2, 4, opts.rate_window_ns);  // the two *_per_s columns
  }

  bool include_lo_;
  std::int64_t read_every_ns_;
  CounterTotals totals_;  // the cells: totals, then rates
};

}  // namespace stroboscope::detail
