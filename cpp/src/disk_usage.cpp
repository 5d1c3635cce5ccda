// Calls statvfs(2) on each configured path: the "disk" source (space used %, free and total bytes
// per filesystem, psutil.disk_usage() semantics).
//
// used = (f_blocks - f_bfree) * f_frsize; free = f_bavail * f_frsize (space an unprivileged user
// can still write); used % = used / (used + free) * 100, so the root-reserved blocks count as
// neither. A filesystem reporting no blocks at all (pseudo filesystems) gives a null %.
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stroboscope/linux_sources.hpp"

namespace stroboscope {

std::string disk_column_prefix(std::string_view path) {
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  std::string out = "disk.";
  if (path.empty()) return out;
  for (char c : path) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    out += keep ? c : '_';
  }
  out += '.';
  return out;
}

namespace {

class DiskSource final : public Source {
 public:
  explicit DiskSource(const SourceOptions& opts) : Source("disk") {
    if (opts.disk_paths.empty()) {
      throw std::runtime_error("the disk source needs at least one path in disk_paths");
    }
    std::vector<std::string> prefixes;
    for (const std::string& path : opts.disk_paths) {
      std::string prefix = disk_column_prefix(path);
      bool duplicate = false;
      for (std::size_t i = 0; i < paths_.size(); ++i) {
        if (prefixes[i] != prefix) continue;
        if (paths_[i] == path) {
          duplicate = true;  // the same path twice: measure it once
          break;
        }
        // invalid_argument: a ValueError in Python, as the argument's other checks give
        throw std::invalid_argument("disk_paths entries '" + paths_[i] + "' and '" + path +
                                    "' both map to the column prefix '" + prefix +
                                    "': keep one of them");
      }
      if (duplicate) continue;
      struct statvfs st{};
      if (::statvfs(path.c_str(), &st) != 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR) {
          throw std::runtime_error("disk path '" + path + "' does not exist");
        }
        throw std::runtime_error("cannot statvfs disk path '" + path + "': " + std::strerror(e));
      }
      paths_.push_back(path);
      prefixes.push_back(prefix);
      add_column(prefix + "used_pct", "%", DType::kFloat64, Kind::kGauge,
                 "Share of the filesystem holding " + path +
                     " in use, of the space available to unprivileged users.");
      add_column(prefix + "free_bytes", "bytes", DType::kInt64, Kind::kGauge,
                 "Bytes unprivileged users can still write on the filesystem holding " + path +
                     ".");
      add_column(prefix + "total_bytes", "bytes", DType::kInt64, Kind::kGauge,
                 "Size of the filesystem holding " + path + ".");
    }
  }

  // statvfs walks the path on every call; the free-block count of a filesystem moves when
  // writeback allocates blocks (delayed allocation: every vm.dirty_writeback_centisecs, 5 s by
  // default) or files are freed. 1 s keeps the default tick cheap and misses no trend.
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return 1'000'000'000;
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "free blocks move when writeback allocates them (delayed allocation, every "
           "vm.dirty_writeback_centisecs = 5 s by default) or files are freed; statvfs walks "
           "the path each call, so 1 s.";
  }
  [[nodiscard]] const char* interface() const noexcept override { return "statvfs"; }

  void read(RowWriter row, std::int64_t /*now_ns*/) noexcept override {
    int first_err = 0;
    for (std::size_t i = 0; i < paths_.size(); ++i) {
      struct statvfs st{};
      if (::statvfs(paths_[i].c_str(), &st) != 0) {
        if (first_err == 0) first_err = errno != 0 ? errno : EIO;
        continue;  // this path's three cells stay null
      }
      std::uint64_t frsize = st.f_frsize != 0 ? st.f_frsize : st.f_bsize;
      std::uint64_t bfree = st.f_bfree <= st.f_blocks ? st.f_bfree : st.f_blocks;
      std::uint64_t used = (static_cast<std::uint64_t>(st.f_blocks) - bfree) * frsize;
      std::uint64_t avail = static_cast<std::uint64_t>(st.f_bavail) * frsize;
      std::size_t c = 3 * i;
      if (used + avail > 0) {
        row.set_f64(c, 100.0 * static_cast<double>(used) / static_cast<double>(used + avail));
      }
      row.set_i64(c + 1, static_cast<std::int64_t>(avail));
      auto total = static_cast<std::uint64_t>(st.f_blocks) * frsize;
      row.set_i64(c + 2, static_cast<std::int64_t>(total));
    }
    if (first_err != 0) {
      fail("statvfs failed for a disk path", first_err);
    } else {
      ok();
    }
  }

 private:
  std::vector<std::string> paths_;
};

}  // namespace

std::unique_ptr<Source> make_disk_source(const SourceOptions& opts) {
  return std::make_unique<DiskSource>(opts);
}

}  // namespace stroboscope
