// The monitored process's tree among the processes NVML lists (see nvml_process_tree.hpp).
#include "nvml_process_tree.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <string_view>

#include "stroboscope/procfs.hpp"

namespace stroboscope::nvml_detail {

ProcessTree::ProcessTree(unsigned root, const std::string& proc_root) : root_(root) {
  proc_fd_ = ::open(proc_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

ProcessTree::~ProcessTree() {
  if (proc_fd_ >= 0) ::close(proc_fd_);
}

void ProcessTree::begin() noexcept {
  // Entries the previous read did not ask about are freed: a pid that left the GPU's lists may
  // come back as another process, whose ancestry must be looked up again.
  for (Entry& e : cache_) {
    if (e.pid != 0 && e.used != generation_) e.pid = 0;
  }
  ++generation_;
}

bool ProcessTree::contains(unsigned pid) noexcept {
  if (pid == root_) return true;
  if (pid == 0) return false;
  Entry* free_slot = nullptr;
  for (Entry& e : cache_) {
    if (e.pid == pid) {
      e.used = generation_;
      return e.member;
    }
    if (e.pid == 0 && free_slot == nullptr) free_slot = &e;
  }
  const bool member = walk(pid);
  if (free_slot != nullptr) *free_slot = Entry{pid, member, generation_};
  return member;
}

bool ProcessTree::walk(unsigned pid) const noexcept {
  for (int depth = 0; depth < kMaxDepth && pid > 1; ++depth) {
    pid = parent_of(pid);
    if (pid == root_) return true;
  }
  return false;
}

unsigned ProcessTree::parent_of(unsigned pid) const noexcept {
  if (proc_fd_ < 0) return 0;
  // "<pid>/stat" relative to the kept-open proc root; to_chars, not snprintf: no locale, no
  // allocation, on the poll thread.
  char path[32];
  char* end = std::to_chars(path, path + 16, pid).ptr;
  std::memcpy(end, "/stat", 6);
  const int fd = ::openat(proc_fd_, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // FIFO: no wait
  if (fd < 0) return 0;
  char buf[1024];  // a stat line is a few hundred bytes; the fields needed come early
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  ::close(fd);
  if (n <= 0) return 0;
  procfs::PidStat st;
  if (!procfs::parse_pid_stat(std::string_view(buf, static_cast<std::size_t>(n)), &st)) return 0;
  return st.ppid > 0 && st.ppid <= 0x7FFFFFFF ? static_cast<unsigned>(st.ppid) : 0;
}

}  // namespace stroboscope::nvml_detail
