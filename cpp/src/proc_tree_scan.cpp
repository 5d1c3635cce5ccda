// The scan side of the "proc_tree" source: the once-a-second rescan of /proc for the tree's
// members (on the scan thread while the sampler runs) and its adoption by the tick.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <mutex>

#include "proc_tree_source.hpp"

namespace stroboscope::proc_tree {

bool ProcTreeSource::marked(std::int64_t pid) const noexcept {
  auto p = static_cast<std::uint64_t>(pid);
  return pid >= 0 && p / 64 < mark_.size() && ((mark_[p / 64] >> (p % 64)) & 1u) != 0;
}
bool ProcTreeSource::mark(std::int64_t pid) noexcept {
  auto p = static_cast<std::uint64_t>(pid);
  if (pid < 0 || p / 64 >= mark_.size() || n_marked_ >= marked_.size()) return false;
  mark_[p / 64] |= std::uint64_t{1} << (p % 64);
  marked_[n_marked_++] = static_cast<int>(pid);
  return true;
}

// The scan thread: a scan per second, handed over when the previous one was adopted.
void ProcTreeSource::scan_loop() noexcept {
  std::unique_lock<std::mutex> lock(scan_mutex_);
  for (;;) {
    scan_wake_.wait_for(lock, std::chrono::nanoseconds(kRescanNs), [this] { return scan_stop_; });
    if (scan_stop_) return;
    // acquire pairs with adopt_scan()'s release: known_ is the adopted state, scan_ is free.
    if (scan_ready_.load(std::memory_order_acquire)) continue;  // not adopted yet: next time
    lock.unlock();
    scan();
    // release: the list (and the descriptors in it) is complete before the reader sees it.
    scan_ready_.store(true, std::memory_order_release);
    lock.lock();
  }
}

// Lists every pid with its ppid, finds the root's descendants, and writes them sorted by pid
// into scan_, with descriptors opened for the members that have none (new ones) as the budget
// allows. Runs on the scan thread, or on the reading thread when there is none; either way
// scan_ready_ is false, so this thread owns scan_ and known_.
void ProcTreeSource::scan() noexcept {
  std::size_t n_scan = 0;
  if (::lseek(dir_fd_, 0, SEEK_SET) == 0) {
    for (;;) {
      long got = ::syscall(SYS_getdents64, dir_fd_, dents_.data(), dents_.size());
      if (got <= 0) break;
      for (long off = 0; off < got;) {
        // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[]
        const char* rec = dents_.data() + off;
        unsigned short reclen = 0;
        std::memcpy(&reclen, rec + 16, sizeof reclen);
        const char* name = rec + 19;
        off += reclen;
        std::int64_t pid = 0;
        std::size_t len = std::strlen(name);
        auto [end, ec] = std::from_chars(name, name + len, pid);
        if (ec != std::errc{} || end != name + len || pid <= 0 || n_scan >= kMaxScan) continue;
        int fd = open_pid_file(dir_fd_, static_cast<int>(pid), "stat");
        if (fd < 0) continue;
        char buf[1024];
        ssize_t n = pread_all(fd, buf, sizeof buf);
        ::close(fd);
        procfs::PidStat st;
        if (n <= 0 || !procfs::parse_pid_stat({buf, static_cast<std::size_t>(n)}, &st)) continue;
        scan_pid_[n_scan] = static_cast<int>(pid);
        scan_ppid_[n_scan] = static_cast<int>(st.ppid);
        scan_start_[n_scan] = st.starttime;
        ++n_scan;
      }
    }
  }
  // Mark the root, then sweep until no new descendant turns up (children usually have larger
  // pids, listed later, so one sweep plus a confirming one is the common case).
  for (std::size_t i = 0; i < n_marked_; ++i) {
    auto p = static_cast<std::uint64_t>(marked_[i]);
    mark_[p / 64] &= ~(std::uint64_t{1} << (p % 64));
  }
  n_marked_ = 0;
  mark(root_.pid);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < n_scan; ++i) {
      if (!marked(scan_pid_[i]) && marked(scan_ppid_[i]) && mark(scan_pid_[i])) changed = true;
    }
  }
  // The new member list: descendants in scan order up to the cap, then sorted by pid.
  std::size_t n_next = 0;
  std::int64_t found = 0;
  for (std::size_t i = 0; i < n_scan; ++i) {
    if (scan_pid_[i] == root_.pid || !marked(scan_pid_[i])) continue;
    ++found;
    if (n_next + 1 >= kMaxMembers) continue;
    Member m;
    m.pid = scan_pid_[i];
    m.starttime = scan_start_[i];
    scan_[n_next++] = m;
  }
  scan_untracked_ = found - static_cast<std::int64_t>(n_next);
  std::sort(scan_.begin(), scan_.begin() + static_cast<std::ptrdiff_t>(n_next),
            [](const Member& a, const Member& b) { return a.pid < b.pid; });
  // Descriptors, within the budget, in pid order: a member that had them at the last adoption
  // keeps them (or gives them up when the budget shrank); one that had none gets them opened
  // here if the budget allows, else it is read on demand.
  const std::size_t budget = member_fd_budget();
  std::size_t kept = 0, k = 0;
  for (std::size_t i = 0; i < n_next; ++i) {
    Member& nm = scan_[i];
    while (k < n_known_ && known_[k].pid < nm.pid) ++k;
    const bool had = k < n_known_ && known_[k].pid == nm.pid &&
                     known_[k].starttime == nm.starttime && known_[k].has_fds;
    if (had) {
      if (kept + 2 > budget) {
        nm.drop_fds = true;
      } else {
        kept += 2;
      }
    } else if (kept + 2 <= budget) {
      nm.stat_fd = open_pid_file(dir_fd_, nm.pid, "stat");
      nm.statm_fd = nm.stat_fd >= 0 ? open_pid_file(dir_fd_, nm.pid, "statm") : -1;
      if (nm.statm_fd < 0) {
        close_member(nm);  // gone, or no fd to spare: the next read decides which
      } else {
        kept += 2;
      }
    }
    nm.alive = true;
  }
  n_scan_ = n_next;
}

// Merges scan_ into members_ (both sorted by pid): a process still there keeps its descriptors
// and previous reading, a new one takes the descriptors the scan opened, one gone is closed.
// Then records the result in known_ for the next scan and hands scan_ back.
void ProcTreeSource::adopt_scan() noexcept {
  std::size_t j = 0;
  for (std::size_t i = 0; i < n_scan_; ++i) {
    Member nm = scan_[i];
    scan_[i].stat_fd = scan_[i].statm_fd = -1;  // moved out
    while (j < n_members_ && members_[j].pid < nm.pid) close_member(members_[j++]);
    if (j < n_members_ && members_[j].pid == nm.pid) {
      Member& cur = members_[j++];
      if (cur.alive && cur.starttime == nm.starttime) {
        nm.prev_ticks = cur.prev_ticks;
        nm.has_prev = cur.has_prev;
        if (cur.stat_fd >= 0 && !nm.drop_fds && nm.stat_fd < 0) {
          nm.stat_fd = cur.stat_fd;
          nm.statm_fd = cur.statm_fd;
          cur.stat_fd = cur.statm_fd = -1;
        }
      }
      close_member(cur);  // what was not carried over: gone, reused pid, or over the budget
    }
    nm.drop_fds = false;
    nm.alive = true;
    next_[i] = nm;
  }
  while (j < n_members_) close_member(members_[j++]);
  members_.swap(next_);
  n_members_ = n_scan_;
  untracked_ = scan_untracked_;
  for (std::size_t i = 0; i < n_members_; ++i) {
    known_[i] = Known{members_[i].pid, members_[i].starttime, members_[i].stat_fd >= 0};
  }
  n_known_ = n_members_;
  // release: known_ and the emptied scan_ are written before the scan thread may reuse them.
  scan_ready_.store(false, std::memory_order_release);
}

}  // namespace stroboscope::proc_tree
