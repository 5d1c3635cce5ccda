// Whether a process that NVML lists on a GPU belongs to the monitored process's tree (the process
// itself or one of its descendants), for the "gpu" source's per-process columns. Internal to
// cpp/src.
//
// NVML lists the processes with a context on a GPU and their utilisation samples by host pid; a
// training job's GPU work often runs in children of the monitored process (launcher workers,
// spawned ranks), so the shares of the tree are what the user means by "my GPU use". The tree is
// found by walking each listed pid's parent chain in <proc>/<pid>/stat: the lists are short (a
// few processes per GPU), and verdicts are kept for the pids listed at the previous read, so a
// steady job costs no /proc reads at all. No allocation: fixed tables and stack buffers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace stroboscope::nvml_detail {

class ProcessTree {
 public:
  // Descendants are looked up under `proc_root` (normally /proc). A root that cannot be opened
  // leaves only `root` itself in the tree.
  ProcessTree(unsigned root, const std::string& proc_root);
  ~ProcessTree();
  ProcessTree(const ProcessTree&) = delete;
  ProcessTree& operator=(const ProcessTree&) = delete;

  // A read of the process lists begins: verdicts of pids not asked about since the previous
  // begin() are forgotten at the next one (their pid may be reused).
  void begin() noexcept;
  // Whether `pid` is the root or one of its descendants.
  [[nodiscard]] bool contains(unsigned pid) noexcept;
  [[nodiscard]] unsigned root() const noexcept { return root_; }

  static constexpr std::size_t kCached = 64;  // verdicts kept; more pids are walked every time
  static constexpr int kMaxDepth = 64;        // parent links followed before giving up

 private:
  // The parent pid from <proc>/<pid>/stat; 0 when the process is gone or unreadable.
  [[nodiscard]] unsigned parent_of(unsigned pid) const noexcept;
  [[nodiscard]] bool walk(unsigned pid) const noexcept;

  struct Entry {
    unsigned pid = 0;  // 0: free
    bool member = false;
    std::uint64_t used = 0;  // the generation that last asked about it
  };
  unsigned root_;
  int proc_fd_ = -1;
  std::uint64_t generation_ = 1;
  std::array<Entry, kCached> cache_{};
};

}  // namespace stroboscope::nvml_detail
