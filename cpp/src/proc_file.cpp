// ProcFile: a /proc (or /sys, cgroup) file kept open and re-read with pread at offset 0.
//
// The constructor reads the file once to learn its size and sizes the buffer to twice that
// (rounded up to a page, at least `min_capacity`), so later reads never allocate. A file that
// grows past the buffer is reported through truncated(); callers drop the partial last line.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "stroboscope/linux_sources.hpp"
#include "stroboscope/source.hpp"

namespace stroboscope {
namespace {

constexpr std::size_t kPage = 4096;
// The probe read at construction stops here; nothing the sources read comes close.
constexpr std::size_t kProbeLimit = std::size_t{64} << 20;

std::size_t round_up_page(std::size_t n) { return (n + kPage - 1) / kPage * kPage; }

const char* kind_of(mode_t mode) noexcept {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const char* path) noexcept {
  // O_NONBLOCK: open(2) of a FIFO would wait for a writer, forever if none comes.
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st {};
  const int err = ::fstat(fd, &st) != 0 ? errno : (S_ISREG(st.st_mode) ? 0 : EINVAL);
  if (err != 0) {
    ::close(fd);
    errno = err;
    return -1;
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string not_regular_reason(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return {};
  return std::string(kind_of(st.st_mode)) + ", not a regular file";
}

ProcFile::ProcFile(const std::string& path, std::size_t min_capacity) : path_(path) {
  min_capacity = std::max<std::size_t>(min_capacity, 1);
  fd_ = open_regular_file(path.c_str());
  if (fd_ < 0) {
    open_errno_ = errno;
    buf_.assign(min_capacity, '\0');
    return;
  }
  // Probe: read the whole file once (construction may allocate) to size the buffer.
  std::vector<char> probe(std::max(min_capacity, kPage));
  std::size_t total = 0;
  while (total < kProbeLimit) {
    ssize_t n = ::pread(fd_, probe.data() + total, probe.size() - total,
                        static_cast<off_t>(total));
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // unreadable now (EACCES on /proc/<pid>/io, ...): read() will say so
    }
    if (n == 0) break;
    total += static_cast<std::size_t>(n);
    if (total == probe.size()) probe.resize(probe.size() * 2);
  }
  buf_.assign(std::max(min_capacity, round_up_page(2 * total)), '\0');
}

ProcFile::~ProcFile() {
  if (fd_ >= 0) ::close(fd_);
}

ProcFile::ProcFile(ProcFile&& other) noexcept
    : path_(std::move(other.path_)),
      buf_(std::move(other.buf_)),
      len_(std::exchange(other.len_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      open_errno_(std::exchange(other.open_errno_, 0)) {}

ProcFile& ProcFile::operator=(ProcFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    buf_ = std::move(other.buf_);
    len_ = std::exchange(other.len_, 0);
    fd_ = std::exchange(other.fd_, -1);
    open_errno_ = std::exchange(other.open_errno_, 0);
  }
  return *this;
}

bool ProcFile::read(int* err) noexcept {
  len_ = 0;
  if (fd_ < 0) {
    if (err != nullptr) *err = open_errno_ != 0 ? open_errno_ : EBADF;
    return false;
  }
  // One pread: /proc seq_files fill the whole request, so a short count means end of file.
  ssize_t n;
  do {
    n = ::pread(fd_, buf_.data(), buf_.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (err != nullptr) *err = errno;
    return false;
  }
  len_ = static_cast<std::size_t>(n);
  return true;
}

namespace detail {

std::string join_path(std::string_view root, std::string_view rel) {
  while (!root.empty() && root.back() == '/' && root.size() > 1) root.remove_suffix(1);
  while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
  std::string out(root);
  if (out.empty() || out.back() != '/') out += '/';
  out += rel;
  return out;
}

std::int64_t user_hz_ns() noexcept {
  long tck = ::sysconf(_SC_CLK_TCK);
  return tck > 0 ? 1'000'000'000 / tck : 10'000'000;
}

std::int64_t online_cpus() noexcept {
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<std::int64_t>(n) : 0;
}

ProcFile open_required(const std::string& path, const char* what, std::size_t min_capacity) {
  ProcFile f(path, min_capacity);
  if (!f.is_open()) {
    std::string why = f.open_errno() == EINVAL ? not_regular_reason(path) : std::string();
    throw std::runtime_error("cannot open " + path + " (" + what +
                             "): " + (why.empty() ? std::strerror(f.open_errno()) : why));
  }
  return f;
}

}  // namespace detail

}  // namespace stroboscope
