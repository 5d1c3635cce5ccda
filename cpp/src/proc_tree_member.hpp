// proc_tree's members and the descriptors it reads them through (internal to the proc_tree source):
// the fd budget (a share of the soft RLIMIT_NOFILE), the kept or on-demand files of a member,
// and the syscall helpers. Nothing here allocates: it runs on the sampler thread and on the
// source's scan thread.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace stroboscope::proc_tree {

inline constexpr std::size_t kMaxMembers = 1024;     // followed processes, the root included
inline constexpr std::uint64_t kFdShareOfLimit = 8;  // kept-open fds: at most 1/8 of the soft limit

// Descriptors this source may keep open for its members: 1/8 of the soft RLIMIT_NOFILE, never
// more than two per member (getrlimit is a plain syscall: safe on the sampler thread).
inline std::size_t member_fd_budget() noexcept {
  constexpr std::uint64_t kMax = 2 * kMaxMembers;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return kMax;
  return static_cast<std::size_t>(std::min<std::uint64_t>(kMax, rl.rlim_cur / kFdShareOfLimit));
}

// What reading one member found.
enum class Sampled { kOk, kGone, kNoFd };

inline bool out_of_fds(int err) noexcept { return err == EMFILE || err == ENFILE || err == ENOMEM; }

struct Member {
  int pid = 0;
  int stat_fd = -1, statm_fd = -1;  // kept open within the fd budget; -1: opened on each read
  std::uint64_t starttime = 0;  // from the scan: a reused pid has a different one
  std::uint64_t prev_ticks = 0;
  bool has_prev = false;
  bool alive = false;
  bool drop_fds = false;  // a scan's verdict: over the budget, read on demand from now
};

// What the reading thread followed at its latest adoption of a scan, for the next scan to know
// which members already hold descriptors.
struct Known {
  int pid = 0;
  std::uint64_t starttime = 0;
  bool has_fds = false;
};

inline void close_member(Member& m) noexcept {
  if (m.stat_fd >= 0) ::close(m.stat_fd);
  if (m.statm_fd >= 0) ::close(m.statm_fd);
  m.stat_fd = m.statm_fd = -1;
  m.alive = false;
}

// pread into buf, retrying EINTR; -1 with errno on failure.
inline ssize_t pread_all(int fd, char* buf, std::size_t n) noexcept {
  ssize_t r;
  do {
    r = ::pread(fd, buf, n, 0);
  } while (r < 0 && errno == EINTR);
  return r;
}

// openat(dir, "<pid>/<leaf>") with the path built on the stack.
inline int open_pid_file(int dir_fd, int pid, const char* leaf) noexcept {
  char path[64];
  auto [end, ec] = std::to_chars(path, path + 16, pid);
  if (ec != std::errc{}) return -1;
  *end++ = '/';
  std::size_t len = std::strlen(leaf);
  std::memcpy(end, leaf, len + 1);
  return ::openat(dir_fd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO: never waited on
}

}  // namespace stroboscope::proc_tree
