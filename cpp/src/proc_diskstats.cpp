// Reads /sys/block/<dev>/stat, or /proc/diskstats where that is missing: the "diskio" source (bytes read/written by whole block devices, as totals
// since the first reading and as per-second rates; sectors are always 512 bytes in this file).
//
// A device is whole (counted) when <sys_root>/block/<name, '/' as '!'> exists; partitions are left
// out so their I/O is not counted twice. The check runs once per name, the first time the name is
// seen (a single faccessat on a directory fd opened at construction, no allocation). Without
// <sys_root>/block the kernel's naming rule decides: "<disk><N>", or "<disk>p<N>" when <disk> ends
// in a digit, is a partition of a listed <disk>. Counter resets and devices that come and go are
// handled by the slot table the network source uses too (counter_slots.hpp): a decrease is a
// reset, a device new after the first reading counts in full.
//
// The preferred interface is one /sys/block/<dev>/stat per whole device (the same counters as
// /proc/diskstats, without the partitions and without formatting every device of the machine
// into one file): the devices are listed once at construction, so a disk attached later is not
// counted until the sampler is rebuilt. Devices of size 0 then (an unbound loop device, an
// unconfigured zram) can do no I/O and are left out: each stat read costs a couple of µs (the
// kernel sums per-CPU counters and counts requests in flight), and a machine has many of them. When <sys_root>/block cannot be listed, or a listed device
// has no readable stat file, the source reads /proc/diskstats as before; interface() says which.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "stroboscope/counter_slots.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"

namespace stroboscope {
namespace procfs {

std::size_t parse_diskstats(std::string_view text, std::span<DiskStatLine> out,
                            std::size_t* seen) noexcept {
  std::size_t n = 0, total = 0;
  while (!text.empty()) {
    std::string_view line = next_line(text);
    std::uint64_t major = 0, minor = 0;
    if (!next_u64(line, &major) || !next_u64(line, &minor)) continue;
    std::string_view name = next_token(line);
    if (name.empty()) continue;
    std::uint64_t s[32] = {};
    int k = 0;
    while (k < 32 && next_u64(line, &s[k])) ++k;
    DiskStatLine d;
    d.n_stats = k;
    if (k == 4) {  // old partition line: reads, sectors read, writes, sectors written
      d.read_sectors = s[1];
      d.write_sectors = s[3];
    } else if (k >= 11) {  // reads merged sectors ms, writes merged sectors ms, ...
      d.read_sectors = s[2];
      d.write_sectors = s[6];
    } else {
      continue;
    }
    ++total;
    if (n >= out.size() || !copy_name(name, d.name)) continue;
    d.major = static_cast<std::uint32_t>(major);
    d.minor = static_cast<std::uint32_t>(minor);
    out[n++] = d;
  }
  if (seen != nullptr) *seen = total;
  return n;
}

bool parse_block_stat(std::string_view text, DiskStatLine* out) noexcept {
  std::uint64_t s[32] = {};
  int k = 0;
  while (k < 32 && next_u64(text, &s[k])) ++k;
  if (k < 11) return false;  // 11 fields since 2.6, 15 since 4.18, 17 since 5.5
  out->n_stats = k;
  out->read_sectors = s[2];
  out->write_sectors = s[6];
  return true;
}

bool is_partition_name_of(std::string_view name, std::string_view disk) noexcept {
  if (disk.empty() || name.size() <= disk.size() || name.substr(0, disk.size()) != disk) {
    return false;
  }
  std::string_view rest = name.substr(disk.size());
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (is_digit(disk.back())) {
    if (rest.front() != 'p') return false;
    rest.remove_prefix(1);
  }
  if (rest.empty()) return false;
  for (char c : rest) {
    if (!is_digit(c)) return false;
  }
  return true;
}

}  // namespace procfs

namespace {

constexpr std::size_t kMaxDevices = 1024;
constexpr std::uint64_t kSectorBytes = 512;

class DiskIoSource final : public Source {
 public:
  explicit DiskIoSource(const SourceOptions& opts)
      : Source("diskio"),
        read_every_ns_(detail::byte_counter_read_every_ns(opts.rate_window_ns)),
        totals_(opts.rate_window_ns),
        file_(detail::open_required(detail::join_path(opts.proc_root, "diskstats"),
                                    "block device counters")),
        scratch_(kMaxDevices),
        slots_(kMaxDevices) {
    int err = 0;
    if (!file_.read(&err)) throw std::runtime_error("cannot read " + file_.path());
    std::string block = detail::join_path(opts.sys_root, "block");
    block_dir_ = ::open(block.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);  // -1: use the names
    open_block_stats(block);
    add_column("disk.read_bytes", "bytes", DType::kInt64, Kind::kCounter,
               "Bytes read from whole block devices (partitions excluded) since the first "
               "reading (by default one exact value per "
               "rate_window + 5 %: the resolution table).");
    add_column("disk.write_bytes", "bytes", DType::kInt64, Kind::kCounter,
               "Bytes written to whole block devices (partitions excluded) since the first "
               "reading (by default one exact value per "
               "rate_window + 5 %: the resolution table).");
    add_column("disk.read_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
               "Bytes read per second from whole block devices since the previous value "
               "(windows of at least rate_window; the default read period of rate_window + "
               "5 % loses no value of it).");
    add_column("disk.write_bytes_per_s", "bytes/s", DType::kFloat64, Kind::kRate,
               "Bytes written per second to whole block devices since the previous value "
               "(windows of at least rate_window; the default read period of rate_window + "
               "5 % loses no value of it).");
    set_window(2, 4, opts.rate_window_ns);  // the two *_per_s columns
  }
  ~DiskIoSource() override {
    if (block_dir_ >= 0) ::close(block_dir_);
  }

  // The counters move when a request completes (blk_account_io_done): any tick can see a change.
  // The kernel adds to these counters on any packet or request; they are read once per rate
  // window by default (see byte_counter_read_every_ns).
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return read_every_ns_;
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return read_every_ns_ > 0 ? detail::kByteCounterResolutionReason
                              : "rate_window 0: the counters can change on any tick; every tick.";
  }
  [[nodiscard]] const char* interface() const noexcept override {
    return stat_files_.empty() ? "/proc/diskstats" : "/sys/block/*/stat";
  }

  void read(RowWriter row, std::int64_t now_ns) noexcept override {
    if (!stat_files_.empty()) return read_block_stats(row, now_ns);
    int err = 0;
    if (!file_.read(&err)) {
      fail("cannot read /proc/diskstats", err);
      return;
    }
    std::string_view text = file_.view();
    if (file_.truncated()) text = procfs::complete_lines(text);
    std::size_t n = procfs::parse_diskstats(text, scratch_);
    slots_.begin_reading();
    detail::CounterSlots::Counters sectors{};  // read, written
    for (std::size_t i = 0; i < n; ++i) {
      const procfs::DiskStatLine& d = scratch_[i];
      // A device that is not whole (a partition) gets a slot too, uncounted.
      slots_.add(d.name, i, {d.read_sectors, d.write_sectors}, sectors,
                 [&](const char* name) noexcept { return is_whole(name, n); });
    }
    slots_.end_reading();
    // Sectors to bytes; a product past 64 bits saturates, and the total then reads as out of range.
    auto bytes = [](std::uint64_t s) noexcept {
      std::uint64_t b = 0;
      return __builtin_mul_overflow(s, kSectorBytes, &b) ? UINT64_MAX : b;
    };
    if (totals_.write({bytes(sectors[0]), bytes(sectors[1])}, row, now_ns)) {
      ok();
    } else {
      fail("sector counter out of range in /proc/diskstats", ERANGE);
    }
  }

 private:
  // One stat file per whole device listed in <sys_root>/block now; none (the /proc/diskstats
  // path) when the directory cannot be listed or any device's stat file cannot be read.
  void open_block_stats(const std::string& block) {
    DIR* dir = ::opendir(block.c_str());
    if (dir == nullptr) return;
    std::vector<ProcFile> files;
    std::vector<std::string> names;
    bool complete = true;
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      ProcFile size(block + "/" + name + "/size", 64);
      int err = 0;
      if (size.read(&err) && size.view().substr(0, 2) == "0\n") continue;  // no medium: no I/O
      ProcFile f(block + "/" + name + "/stat", 512);
      procfs::DiskStatLine d;
      if (!f.read(&err) || !procfs::parse_block_stat(f.view(), &d) ||
          name.size() >= procfs::kNameMax) {
        complete = false;
        break;
      }
      for (char& c : name) c = c == '!' ? '/' : c;  // the name /proc/diskstats gives
      files.push_back(std::move(f));
      names.push_back(std::move(name));
    }
    ::closedir(dir);
    if (!complete || files.empty()) return;
    stat_files_ = std::move(files);
    stat_names_.resize(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      names[i].copy(stat_names_[i].name, names[i].size());
    }
  }

  void read_block_stats(RowWriter& row, std::int64_t now_ns) noexcept {
    slots_.begin_reading();
    detail::CounterSlots::Counters sectors{};  // read, written
    int err = 0;
    const char* why = nullptr;
    for (std::size_t i = 0; i < stat_files_.size(); ++i) {
      procfs::DiskStatLine d;
      if (!stat_files_[i].read(&err) || !procfs::parse_block_stat(stat_files_[i].view(), &d)) {
        // A device removed since construction (ENODEV) is simply not counted any more.
        why = "cannot read /sys/block/<dev>/stat";
        continue;
      }
      slots_.add(stat_names_[i].name, i, {d.read_sectors, d.write_sectors}, sectors,
                 [](const char*) noexcept { return true; });
    }
    slots_.end_reading();
    auto bytes = [](std::uint64_t s) noexcept {
      std::uint64_t b = 0;
      return __builtin_mul_overflow(s, kSectorBytes, &b) ? UINT64_MAX : b;
    };
    if (!totals_.write({bytes(sectors[0]), bytes(sectors[1])}, row, now_ns)) {
      fail("sector counter out of range in /sys/block/<dev>/stat", ERANGE);
    } else if (why != nullptr) {
      fail(why, err);
    } else {
      ok();
    }
  }

  // Whole device or partition? `n` is the number of lines in scratch_ (the current listing).
  bool is_whole(const char* name, std::size_t n) const noexcept {
    if (block_dir_ >= 0) {
      char rel[procfs::kNameMax];
      std::size_t i = 0;
      for (; name[i] != '\0' && i + 1 < sizeof rel; ++i) rel[i] = name[i] == '/' ? '!' : name[i];
      rel[i] = '\0';
      return ::faccessat(block_dir_, rel, F_OK, 0) == 0;
    }
    for (std::size_t j = 0; j < n; ++j) {
      if (procfs::is_partition_name_of(name, scratch_[j].name)) return false;
    }
    return true;
  }

  std::int64_t read_every_ns_;
  detail::CounterTotals totals_;
  ProcFile file_;
  int block_dir_ = -1;
  std::vector<procfs::DiskStatLine> scratch_;
  detail::CounterSlots slots_;
  std::vector<ProcFile> stat_files_;               // /sys/block/<dev>/stat, when used
  std::vector<procfs::DiskStatLine> stat_names_;  // their names, as /proc/diskstats spells them
};

}  // namespace

std::unique_ptr<Source> make_diskio_source(const SourceOptions& opts) {
  return std::make_unique<DiskIoSource>(opts);
}

}  // namespace stroboscope
