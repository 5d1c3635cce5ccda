// Reads /proc/net/dev: the "network" source (bytes sent/received by all interfaces but lo, as
// totals since the first reading and as per-second rates).
//
// Each interface is tracked in a fixed slot table sized at construction. An interface whose
// counter goes backwards was reset (delta = new value); one that disappears frees its slot; one
// that appears after the first reading was created after we started, so all its bytes count.
// Interfaces present at the first reading are the baseline (their earlier bytes do not count).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

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

struct IfSlot {
  char name[procfs::kNameMax] = {};
  std::uint64_t rx = 0, tx = 0;
  std::uint64_t seen_gen = 0;
  bool used = false;
};

class NetworkSource final : public Source {
 public:
  explicit NetworkSource(const SourceOptions& opts)
      : Source("network"),
        include_lo_(opts.net_include_loopback),
        sent_rate_(opts.rate_window_ns),
        recv_rate_(opts.rate_window_ns),
        file_(detail::open_required(detail::join_path(opts.proc_root, "net/dev"),
                                    "network interface counters")),
        scratch_(kMaxInterfaces),
        slots_(kMaxInterfaces) {
    int err = 0;
    if (!file_.read(&err)) throw std::runtime_error("cannot read " + file_.path());
    const std::string which = include_lo_ ? "all interfaces, lo included," : "all interfaces but lo";
    add_column("net.sent_bytes", "bytes", DType::kInt64, Kind::kCounter,
               "Bytes sent by " + which + " since the first reading.");
    add_column("net.recv_bytes", "bytes", DType::kInt64, Kind::kCounter,
               "Bytes received by " + which + " since the first reading.");
    add_column("net.sent_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
               "Bytes sent per second by " + which +
                   " since the previous value (windows of at least rate_window).");
    add_column("net.recv_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
               "Bytes received per second by " + which +
                   " since the previous value (windows of at least rate_window).");
  }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    int err = 0;
    if (!file_.read(&err)) {
      fail("cannot read /proc/net/dev", err);
      return;
    }
    std::string_view text = file_.view();
    if (file_.truncated()) text = procfs::complete_lines(text);
    std::size_t n = procfs::parse_net_dev(text, scratch_);
    ++gen_;
    std::uint64_t d_rx = 0, d_tx = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const procfs::NetDevCounters& c = scratch_[i];
      // lo gets a slot too (uncounted) so slot i usually matches line i.
      bool counted = include_lo_ || std::strcmp(c.name, "lo") != 0;
      IfSlot* s = find_slot(c.name, i);
      if (s != nullptr) {
        if (counted) {
          d_rx += procfs::counter_delta(s->rx, c.rx_bytes);
          d_tx += procfs::counter_delta(s->tx, c.tx_bytes);
        }
      } else {
        s = free_slot();
        if (s == nullptr) continue;  // table full: this interface is not counted
        std::memcpy(s->name, c.name, sizeof s->name);
        s->used = true;
        if (counted && has_prev_) {  // appeared after the first reading: all of it is new
          d_rx += c.rx_bytes;
          d_tx += c.tx_bytes;
        }
      }
      s->rx = c.rx_bytes;
      s->tx = c.tx_bytes;
      s->seen_gen = gen_;
    }
    for (IfSlot& s : slots_) {
      if (s.used && s.seen_gen != gen_) s.used = false;  // gone: a later one with its name is new
    }
    recv_total_ += d_rx;
    sent_total_ += d_tx;
    row.set_i64(0, static_cast<std::int64_t>(sent_total_));
    row.set_i64(1, static_cast<std::int64_t>(recv_total_));
    double rate = 0;
    if (sent_rate_.update(sent_total_, now_ns, &rate)) row.set_f64(2, rate);
    if (recv_rate_.update(recv_total_, now_ns, &rate)) row.set_f64(3, rate);
    has_prev_ = true;
    ok();
  }

 private:
  bool include_lo_;
  detail::WindowedRate sent_rate_, recv_rate_;
  // The slot holding `name`; tries the slot at the line's position first (the usual case: the
  // same interfaces in the same order every time).
  IfSlot* find_slot(const char* name, std::size_t hint) noexcept {
    if (hint < slots_.size() && slots_[hint].used && std::strcmp(slots_[hint].name, name) == 0) {
      return &slots_[hint];
    }
    for (IfSlot& s : slots_) {
      if (s.used && std::strcmp(s.name, name) == 0) return &s;
    }
    return nullptr;
  }
  IfSlot* free_slot() noexcept {
    for (IfSlot& s : slots_) {
      if (!s.used) return &s;
    }
    return nullptr;
  }

  ProcFile file_;
  std::vector<procfs::NetDevCounters> scratch_;
  std::vector<IfSlot> slots_;
  std::uint64_t gen_ = 0;
  std::uint64_t sent_total_ = 0, recv_total_ = 0;
  bool has_prev_ = false;
};

}  // namespace

std::unique_ptr<Source> make_network_source(const SourceOptions& opts) {
  return std::make_unique<NetworkSource>(opts);
}

}  // namespace stroboscope
