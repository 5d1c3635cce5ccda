// The rtnetlink stats parser on a recorded RTM_GETSTATS dump reply (tests/data/netlink), checked
// against the values an independent decoder (Python struct) read from the same bytes, and on
// cut, corrupted and foreign replies.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "check.hpp"
#include "stroboscope/netlink.hpp"

using stroboscope::netlink::LinkCounters;
using stroboscope::netlink::parse_stats_reply;
using stroboscope::netlink::StatsReply;

namespace {

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

const std::string kDir = std::string(STROBOSCOPE_TEST_DATA) + "/netlink/";

void test_recorded_reply() {
  std::vector<std::uint8_t> buf = read_bytes(kDir + "getstats_reply.bin");
  CHECK(!buf.empty());
  std::vector<LinkCounters> out(16);
  StatsReply r;
  parse_stats_reply(buf, 7, out, &r);
  CHECK(r.done);
  CHECK(!r.malformed);
  CHECK_EQ(r.error, 0);
  std::ifstream expected(kDir + "getstats_reply.expected");
  std::string line;
  std::size_t i = 0;
  while (std::getline(expected, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::uint64_t ifindex = 0, rxb = 0, txb = 0, rxp = 0, txp = 0;
    in >> ifindex >> rxb >> txb >> rxp >> txp;
    CHECK(i < r.n);
    if (i >= r.n) break;
    CHECK_EQ(out[i].ifindex, ifindex);
    CHECK_EQ(out[i].rx_bytes, rxb);
    CHECK_EQ(out[i].tx_bytes, txb);
    CHECK_EQ(out[i].rx_packets, rxp);
    CHECK_EQ(out[i].tx_packets, txp);
    ++i;
  }
  CHECK_EQ(i, r.n);
  CHECK_EQ(r.seen, r.n);

  // Another request's sequence number: every message skipped, nothing counted, not done.
  StatsReply other;
  parse_stats_reply(buf, 8, out, &other);
  CHECK_EQ(other.n, 0u);
  CHECK(!other.done);

  // A short output span: counted in `seen`, not written past the span.
  std::vector<LinkCounters> one(1);
  StatsReply short_r;
  parse_stats_reply(buf, 7, one, &short_r);
  CHECK_EQ(short_r.n, 1u);
  CHECK_EQ(short_r.seen, r.n);

  // Cut anywhere: never done with a partial message, never reads past the end (ASan).
  for (std::size_t cut = 0; cut < buf.size(); cut += 7) {
    StatsReply c;
    parse_stats_reply(std::span<const std::uint8_t>(buf.data(), cut), 7, out, &c);
    CHECK(c.n <= r.n);
  }
  // A length field larger than the buffer: malformed, stop.
  std::vector<std::uint8_t> bad = buf;
  bad[0] = 0xff;
  bad[1] = 0xff;
  StatsReply m;
  parse_stats_reply(bad, 7, out, &m);
  CHECK(m.malformed);
  CHECK_EQ(m.n, 0u);
}

void test_error_message() {
  // struct nlmsghdr {len 36, NLMSG_ERROR, 0, seq 3, pid 0} + int error (-EPERM) + the request.
  std::vector<std::uint8_t> buf(36, 0);
  const std::uint32_t len = 36, seq = 3;
  const std::uint16_t type = 2;
  const int err = -1;
  std::memcpy(buf.data(), &len, 4);
  std::memcpy(buf.data() + 4, &type, 2);
  std::memcpy(buf.data() + 8, &seq, 4);
  std::memcpy(buf.data() + 16, &err, 4);
  std::vector<LinkCounters> out(4);
  StatsReply r;
  parse_stats_reply(buf, 3, out, &r);
  CHECK(r.done);
  CHECK_EQ(r.error, 1);
}

void test_error_code_out_of_errno_range() {
  // A negative error code whose negation does not fit an int (found by fuzz_netlink under
  // UBSan), and one past any errno: both are a malformed reply, not an error number.
  for (const int err : {std::numeric_limits<int>::min(), -100000, 5000}) {
    std::vector<std::uint8_t> buf(36, 0);
    const std::uint32_t len = 36, seq = 3;
    const std::uint16_t type = 2;
    std::memcpy(buf.data(), &len, 4);
    std::memcpy(buf.data() + 4, &type, 2);
    std::memcpy(buf.data() + 8, &seq, 4);
    std::memcpy(buf.data() + 16, &err, 4);
    std::vector<LinkCounters> out(4);
    StatsReply r;
    parse_stats_reply(buf, 3, out, &r);
    CHECK(r.done);
    CHECK(r.malformed);
    CHECK_EQ(r.error, 0);
  }
}

}  // namespace

int main() {
  test_recorded_reply();
  test_error_message();
  test_error_code_out_of_errno_range();
  return stroboscope_test::failures() == 0 ? 0 : 1;
}
