// rtnetlink counters: the "network" source's preferred interface (the parser of netlink.hpp and
// the source). One NETLINK_ROUTE socket is opened at construction and kept; each read sends one
// RTM_GETSTATS dump request filtered to IFLA_STATS_LINK_64 and parses the reply in place, in a
// buffer sized at construction: no allocation, no text formatting, one 64-bit counter block per
// interface (the same counters /proc/net/dev prints, from the driver's ndo_get_stats64).
// RTM_GETSTATS needs Linux 4.7; where the socket or the request fails at construction the
// registry falls back to /proc/net/dev (proc_net_dev.cpp).
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "stroboscope/counter_slots.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/netlink.hpp"
#include "network_source.hpp"

namespace stroboscope {
namespace netlink {

namespace {
constexpr std::size_t align4(std::size_t n) noexcept { return (n + 3) & ~std::size_t{3}; }
constexpr long long kMaxErrno = 4095;  // MAX_ERRNO in the kernel

template <typename T>
T load(const std::uint8_t* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);  // the buffer is not aligned for T in a fuzzer's hands
  return v;
}
}  // namespace

void parse_stats_reply(std::span<const std::uint8_t> buf, std::uint32_t seq,
                       std::span<LinkCounters> out, StatsReply* reply) noexcept {
  std::size_t off = 0;
  while (buf.size() - off >= sizeof(nlmsghdr)) {
    const auto hdr = load<nlmsghdr>(buf.data() + off);
    if (hdr.nlmsg_len < sizeof(nlmsghdr) || hdr.nlmsg_len > buf.size() - off) {
      reply->malformed = true;
      return;
    }
    const std::uint8_t* body = buf.data() + off + sizeof(nlmsghdr);
    const std::size_t body_len = hdr.nlmsg_len - sizeof(nlmsghdr);
    off += std::min(align4(hdr.nlmsg_len), buf.size() - off);
    if (hdr.nlmsg_seq != seq) continue;
    if (hdr.nlmsg_type == NLMSG_DONE) {
      reply->done = true;
      return;
    }
    if (hdr.nlmsg_type == NLMSG_ERROR) {
      if (body_len >= sizeof(int)) {
        // The kernel sends -errno (0 for an ACK). Widen before negating: -INT_MIN does not fit
        // an int. A code outside errno's range (1..4095) is not the kernel's: malformed.
        const long long e = load<int>(body);
        const long long magnitude = e < 0 ? -e : e;
        if (magnitude <= kMaxErrno) {
          reply->error = static_cast<int>(magnitude);
        } else {
          reply->malformed = true;
        }
      } else {
        reply->malformed = true;
      }
      reply->done = true;
      return;
    }
    if (hdr.nlmsg_type != RTM_NEWSTATS || body_len < sizeof(if_stats_msg)) continue;
    const auto msg = load<if_stats_msg>(body);
    std::size_t aoff = align4(sizeof(if_stats_msg));
    while (aoff + sizeof(rtattr) <= body_len) {
      const auto attr = load<rtattr>(body + aoff);
      if (attr.rta_len < sizeof(rtattr) || attr.rta_len > body_len - aoff) {
        reply->malformed = true;
        break;
      }
      const std::size_t payload = attr.rta_len - sizeof(rtattr);
      if (attr.rta_type == IFLA_STATS_LINK_64 && payload >= sizeof(rtnl_link_stats64)) {
        const auto s = load<rtnl_link_stats64>(body + aoff + sizeof(rtattr));
        ++reply->seen;
        if (reply->n < out.size()) {
          out[reply->n++] = LinkCounters{msg.ifindex, s.rx_bytes, s.tx_bytes, s.rx_packets,
                                         s.tx_packets};
        }
      }
      aoff += align4(attr.rta_len);
    }
  }
}

}  // namespace netlink

namespace {

constexpr std::size_t kMaxLinks = 256;
constexpr std::size_t kReplyBytes = 64 * 1024;

class NetlinkNetworkSource final : public detail::NetworkSource {
 public:
  explicit NetlinkNetworkSource(const SourceOptions& opts)
      : NetworkSource(opts),
        reply_(kReplyBytes),
        links_(kMaxLinks),
        slots_(kMaxLinks) {
    fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd_ < 0) throw std::runtime_error(std::string("no rtnetlink socket: ") + std::strerror(errno));
    // A dump is produced while we wait for it; a bound on the wait keeps a kernel that never
    // answers from stalling the sampler for good (the read then fails and is counted).
    timeval tv{0, 100'000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    lo_index_ = ::if_nametoindex("lo");  // 1 in every network namespace; 0 if there is none
    netlink::StatsReply r;
    if (!request(&r) || !r.done || r.error != 0 || r.seen == 0) {
      ::close(fd_);
      throw std::runtime_error("rtnetlink RTM_GETSTATS is not answered here");
    }
  }
  ~NetlinkNetworkSource() override {
    if (fd_ >= 0) ::close(fd_);
  }

  [[nodiscard]] const char* interface() const noexcept override { return "rtnetlink"; }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    netlink::StatsReply r;
    if (!request(&r) || !r.done || r.error != 0) {
      fail("rtnetlink RTM_GETSTATS failed", r.error != 0 ? r.error : errno);
      return;
    }
    slots_.begin_reading();
    detail::CounterSlots::Counters bytes{};  // sent, received: the column order
    for (std::size_t i = 0; i < r.n; ++i) {
      const netlink::LinkCounters& c = links_[i];
      char name[procfs::kNameMax];
      format_index(c.ifindex, name);
      const bool counted = include_lo_ || c.ifindex != lo_index_;
      slots_.add(name, i, {c.tx_bytes, c.rx_bytes}, bytes,
                 [counted](const char*) noexcept { return counted; });
    }
    slots_.end_reading();
    if (totals_.write(bytes, row, now_ns)) {
      ok();
    } else {
      fail("byte counter out of range in rtnetlink stats", ERANGE);
    }
  }

 private:
  // Slots are keyed by name; an interface index is unique and stable for the interface's life.
  static void format_index(std::uint32_t ifindex, char (&out)[procfs::kNameMax]) noexcept {
    char digits[16];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + ifindex % 10);
      ifindex /= 10;
    } while (ifindex != 0 && n < 15);
    out[0] = '#';
    for (int i = 0; i < n; ++i) out[i + 1] = digits[n - 1 - i];
    out[n + 1] = '\0';
  }

  // One dump request and its whole reply (possibly several recv calls) into links_.
  bool request(netlink::StatsReply* r) noexcept {
    struct {
      nlmsghdr hdr;
      if_stats_msg msg;
    } req{};
    req.hdr.nlmsg_len = sizeof req;
    req.hdr.nlmsg_type = RTM_GETSTATS;
    req.hdr.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.hdr.nlmsg_seq = ++seq_;
    req.msg.family = AF_UNSPEC;
    req.msg.filter_mask = IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(fd_, &req, sizeof req, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) <
        0) {
      return false;
    }
    while (!r->done && !r->malformed) {
      ssize_t n = ::recv(fd_, reply_.data(), reply_.size(), 0);
      if (n <= 0) return false;
      netlink::parse_stats_reply(std::span<const std::uint8_t>(reply_.data(), static_cast<std::size_t>(n)),
                                 seq_, links_, r);
    }
    return !r->malformed;
  }

  int fd_ = -1;
  unsigned lo_index_ = 0;
  std::uint32_t seq_ = 0;
  std::vector<std::uint8_t> reply_;
  std::vector<netlink::LinkCounters> links_;
  detail::CounterSlots slots_;
};

}  // namespace

std::unique_ptr<Source> make_netlink_network_source(const SourceOptions& opts) {
  return std::make_unique<NetlinkNetworkSource>(opts);
}

}  // namespace stroboscope
