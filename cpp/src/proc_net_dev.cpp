// Reads /proc/net/dev: the "network" source (bytes sent/received by all interfaces but lo, as
// totals since the first reading and as per-second rates).
//
// Each interface is tracked in a fixed slot table sized at construction (counter_slots.hpp). An
// interface whose counter goes backwards was reset (delta = new value); one that disappears frees
// its slot; one that appears after the first reading was created after we started, so all its
// bytes count. Interfaces present at the first reading are the baseline (their earlier bytes do
// not count).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "stroboscope/counter_slots.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"
#include "network_source.hpp"

namespace stroboscope {
namespace procfs {

std::size_t parse_net_dev(std::string_view text, std::span<NetDevCounters> out,
                          std::size_t* seen) noexcept {
  std::size_t n = 0, total = 0;
  while (!text.empty()) {
    std::string_view line = next_line(text);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;  // the two header lines
    std::string_view name = line.substr(0, colon);
    skip_blanks(name);
    while (!name.empty() && is_blank(name.back())) name.remove_suffix(1);
    std::string_view rest = line.substr(colon + 1);  // "1234 ..." even when glued to the ':'
    std::uint64_t v[10] = {};
    bool good = true;
    for (std::uint64_t& x : v) {
      if (!next_u64(rest, &x)) {
        good = false;
        break;
      }
    }
    if (!good || name.empty()) continue;
    ++total;
    if (n >= out.size()) continue;
    NetDevCounters& c = out[n];
    if (!copy_name(name, c.name)) continue;
    // Receive: bytes packets errs drop fifo frame compressed multicast; then transmit.
    c.rx_bytes = v[0];
    c.rx_packets = v[1];
    c.tx_bytes = v[8];
    c.tx_packets = v[9];
    ++n;
  }
  if (seen != nullptr) *seen = total;
  return n;
}

}  // namespace procfs

namespace {

constexpr std::size_t kMaxInterfaces = 256;

class ProcNetDevSource final : public detail::NetworkSource {
 public:
  explicit ProcNetDevSource(const SourceOptions& opts)
      : NetworkSource(opts),
        file_(detail::open_required(detail::join_path(opts.proc_root, "net/dev"),
                                    "network interface counters")),
        scratch_(kMaxInterfaces),
        slots_(kMaxInterfaces) {
    int err = 0;
    if (!file_.read(&err)) throw std::runtime_error("cannot read " + file_.path());
  }

  [[nodiscard]] const char* interface() const noexcept override { return "/proc/net/dev"; }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    int err = 0;
    if (!file_.read(&err)) {
      fail("cannot read /proc/net/dev", err);
      return;
    }
    std::string_view text = file_.view();
    if (file_.truncated()) text = procfs::complete_lines(text);
    std::size_t n = procfs::parse_net_dev(text, scratch_);
    slots_.begin_reading();
    detail::CounterSlots::Counters bytes{};  // sent, received: the column order
    for (std::size_t i = 0; i < n; ++i) {
      const procfs::NetDevCounters& c = scratch_[i];
      // lo gets a slot too (uncounted) so slot i usually matches line i.
      slots_.add(c.name, i, {c.tx_bytes, c.rx_bytes}, bytes, [&](const char* name) noexcept {
        return include_lo_ || std::strcmp(name, "lo") != 0;
      });
    }
    slots_.end_reading();
    if (totals_.write(bytes, row, now_ns)) {
      ok();
    } else {
      fail("byte counter out of range in /proc/net/dev", ERANGE);
    }
  }

 private:
  ProcFile file_;
  std::vector<procfs::NetDevCounters> scratch_;
  detail::CounterSlots slots_;
};

}  // namespace

std::unique_ptr<Source> make_network_source(const SourceOptions& opts) {
  // rtnetlink answers for the network namespace of the calling process, which is what
  // <proc_root>/net/dev shows only when the root is the live /proc.
  if (opts.proc_root == "/proc") {
    try {
      return make_netlink_network_source(opts);
    } catch (const std::runtime_error&) {
      // no rtnetlink statistics here (Linux < 4.7, a seccomp filter): the text file below
    }
  }
  return std::make_unique<ProcNetDevSource>(opts);
}

}  // namespace stroboscope
