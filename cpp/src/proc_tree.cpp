// Reads /proc/<pid>/{stat,statm} of a process and all its descendants: the "proc_tree" source
// (CPU %, resident memory, threads and member count of the whole tree).
//
// Membership is rescanned once per second: getdents64 on the procfs root into a buffer allocated at
// construction, each listed pid's stat read into a stack buffer for its ppid, then the descendants
// of the root found by marking a pid bitmap. That scan costs about a stat open and read per process
// on the machine (thousands on a busy host), so while the sampler runs it happens on a thread of
// this source's own (started by on_start): the scan thread lists the tree, opens the descriptors of
// new members (within the budget below) and hands the list over through a flag; the next tick
// adopts it (a merge of two sorted lists: no syscall but close() for members gone). The tick only
// reads the members already known. Without a running sampler (tick_now, direct reads) there is no
// scan thread and read() rescans itself, at most once per second of tick time. At most kMaxMembers processes are followed;
// descendants beyond that are counted in proc.tree.untracked and in stats() (not_followed).
//
// Descriptors: a member's stat and statm are kept open only within a budget far below the soft
// RLIMIT_NOFILE (an eighth of it, re-read at every scan), so a large tree never exhausts the host
// process's descriptors; members beyond the budget are opened, read and closed on each read
// (openat on the kept procfs root fd, one file at a time). A member whose file cannot be opened
// for want of descriptors (EMFILE, ENFILE) is not followed that tick and counted as such; a member
// whose file is gone has exited.
//
// CPU % is the sum over members seen in both readings of Δ(utime + stime). A member that exits
// between two readings drops out (its last partial interval is lost); one found by a rescan counts
// from its second reading. RSS is summed per process, so shared pages count once per member (as
// summing psutil's rss does).

#include <memory>

#include "proc_tree_source.hpp"
#include "stroboscope/linux_sources.hpp"

namespace stroboscope {

std::unique_ptr<Source> make_proc_tree_source(const SourceOptions& opts) {
  return std::make_unique<proc_tree::ProcTreeSource>(opts);
}

}  // namespace stroboscope
