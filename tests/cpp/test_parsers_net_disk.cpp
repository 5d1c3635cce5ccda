// Parser tests for network and disk: /proc/net/dev and /proc/diskstats on recorded files
// (tests/data, see its README) and on small inline texts, which disk names are partitions, and
// the column prefix of a disk path.
#include <string>
#include <string_view>
#include <vector>

#include "check.hpp"
#include "parser_fixture.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope;
using namespace stroboscope::procfs;

namespace {

void test_net_dev() {
  std::vector<NetDevCounters> out(8);
  std::size_t seen = 0;
  std::size_t n = parse_net_dev(slurp("proc/basic/net/dev"), out, &seen);
  CHECK_EQ(n, 4u);
  CHECK_EQ(seen, 4u);
  CHECK(std::string_view(out[0].name) == "lo");
  CHECK(std::string_view(out[3].name) == "eth0");
  CHECK_EQ(out[3].rx_bytes, 226572888u);
  CHECK_EQ(out[3].rx_packets, 4377u);
  CHECK_EQ(out[3].tx_bytes, 210569u);
  CHECK_EQ(out[3].tx_packets, 2725u);

  // The number glued to the colon ("eth0:4294967296"), as old kernels print large counters.
  n = parse_net_dev(slurp("proc/old_kernel/net/dev"), out);
  CHECK_EQ(n, 2u);
  CHECK(std::string_view(out[1].name) == "eth0");
  CHECK_EQ(out[1].rx_bytes, 4294967296u);
  CHECK_EQ(out[1].rx_packets, 3000000u);
  CHECK_EQ(out[1].tx_bytes, 10000000u);

  // Short span: written 1, seen 4. A truncated line (too few numbers) is skipped.
  std::vector<NetDevCounters> one(1);
  n = parse_net_dev(slurp("proc/basic/net/dev"), one, &seen);
  CHECK_EQ(n, 1u);
  CHECK_EQ(seen, 4u);
  n = parse_net_dev("eth1: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\neth2: 1 2 3\n", out, &seen);
  CHECK_EQ(n, 1u);
  CHECK_EQ(out[0].tx_bytes, 9u);

  // A name holding a NUL byte (found by fuzz_net_dev) would be cut short as a C string and could
  // pass for another interface ("eth0\0x" as "eth0"): the line is skipped.
  using namespace std::string_view_literals;
  n = parse_net_dev("eth0\0x: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"
                    "eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"sv,
                    out, &seen);
  CHECK_EQ(n, 1u);
  CHECK(std::string_view(out[0].name) == "eth0");
}

void test_diskstats() {
  std::vector<DiskStatLine> out(32);
  // basic (recorded on 6.18): 17 numbers after the name.
  std::size_t n = parse_diskstats(slurp("proc/basic/diskstats"), out);
  CHECK_EQ(n, 10u);
  CHECK(std::string_view(out[8].name) == "vda");
  CHECK_EQ(out[8].major, 254u);
  CHECK_EQ(out[8].n_stats, 17);
  CHECK_EQ(out[8].read_sectors, 1939522u);
  CHECK_EQ(out[8].write_sectors, 2591192u);

  // old_kernel: 11-number whole-disk lines and 4-number partition lines.
  n = parse_diskstats(slurp("proc/old_kernel/diskstats"), out);
  CHECK_EQ(n, 6u);
  CHECK(std::string_view(out[2].name) == "sda");
  CHECK_EQ(out[2].n_stats, 11);
  CHECK_EQ(out[2].read_sectors, 20000u);
  CHECK_EQ(out[2].write_sectors, 8000u);
  CHECK(std::string_view(out[3].name) == "sda1");
  CHECK_EQ(out[3].n_stats, 4);
  CHECK_EQ(out[3].read_sectors, 18000u);
  CHECK_EQ(out[3].write_sectors, 7600u);

  // mid_kernel (4.18-5.4): 15 numbers.
  n = parse_diskstats(slurp("proc/mid_kernel/diskstats"), out);
  CHECK_EQ(n, 2u);
  CHECK_EQ(out[0].n_stats, 15);
  CHECK_EQ(out[0].read_sectors, 345678u);
  CHECK_EQ(out[0].write_sectors, 456789u);

  // new_kernel: 17 numbers; a name with '/' in it.
  n = parse_diskstats(slurp("proc/new_kernel/diskstats"), out);
  CHECK_EQ(n, 10u);
  CHECK(std::string_view(out[5].name) == "cciss/c0d0");
  CHECK_EQ(out[5].write_sectors, 200u);

  // Neither layout (6 numbers) is skipped; so is a line without a name.
  std::size_t seen = 0;
  n = parse_diskstats("8 0 sda 1 2 3 4 5 6\n8 1\n8 2 sdb 1 2 3 4\n", out, &seen);
  CHECK_EQ(n, 1u);
  CHECK_EQ(seen, 1u);
  CHECK(std::string_view(out[0].name) == "sdb");
}

// A disk name holding a NUL byte (found by fuzz_diskstats) is skipped like an overlong one.
void test_diskstats_nul_in_name() {
  using namespace std::string_view_literals;
  std::vector<DiskStatLine> out(4);
  std::size_t n = parse_diskstats("   8 0 sd\0a 1 0 8 0 1 0 16 0 0 0 0\n   8 0 sda 1 0 8 0 1 0 16 0 0 0 0\n"sv, out);
  CHECK_EQ(n, 1u);
  CHECK(std::string_view(out[0].name) == "sda");
}

void test_partition_names() {
  CHECK(is_partition_name_of("sda1", "sda"));
  CHECK(is_partition_name_of("sda10", "sda"));
  CHECK(!is_partition_name_of("sda", "sda"));
  CHECK(!is_partition_name_of("sdab", "sda"));
  CHECK(is_partition_name_of("nvme0n1p1", "nvme0n1"));
  CHECK(!is_partition_name_of("nvme0n10", "nvme0n1"));  // namespace 10, not a partition
  CHECK(!is_partition_name_of("loop10", "loop1"));      // loop10 is its own device
  CHECK(is_partition_name_of("loop1p2", "loop1"));
  CHECK(is_partition_name_of("mmcblk0p1", "mmcblk0"));
  CHECK(!is_partition_name_of("mmcblk0boot0", "mmcblk0"));
  CHECK(is_partition_name_of("cciss/c0d0p1", "cciss/c0d0"));
  CHECK(!is_partition_name_of("nvme0n1p", "nvme0n1"));
}

void test_disk_prefix() {
  CHECK(disk_column_prefix("/") == "disk.");
  CHECK(disk_column_prefix("//") == "disk.");
  CHECK(disk_column_prefix("/data/x") == "disk.data_x.");
  CHECK(disk_column_prefix("/data/x/") == "disk.data_x.");
  CHECK(disk_column_prefix("/mnt/Scratch-1") == "disk.mnt_scratch_1.");
  CHECK(disk_column_prefix("/a.b c") == "disk.a_b_c.");
}

}  // namespace

int main() {
  test_net_dev();
  test_diskstats();
  test_diskstats_nul_in_name();
  test_partition_names();
  test_disk_prefix();
  TEST_MAIN_END();
}
