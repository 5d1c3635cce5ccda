// The per-process groups of a "gpu" device read: the memory of the monitored process's tree (the
// process and its descendants, see nvml_process_tree.hpp) and how many others hold a context on
// the GPU (the compute and graphics process lists), and the tree's SM, memory, encoder and decoder
// shares (the driver's per-process utilisation samples).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "nvml_device_read.hpp"

namespace stroboscope::nvml_detail {

std::size_t process_info_stride(const unsigned char* buf, unsigned count, int version) noexcept {
  if (version <= 1) return sizeof(nvml::ProcessInfoV1);
  if (count < 2) return sizeof(nvml::ProcessInfoV2);
  auto plausible = [&](std::size_t stride) {
    for (unsigned i = 0; i < count; ++i) {
      const unsigned char* p = buf + static_cast<std::size_t>(i) * stride;
      unsigned pid = 0, gi = 0, ci = 0;
      std::memcpy(&pid, p, sizeof pid);
      std::memcpy(&gi, p + 16, sizeof gi);
      std::memcpy(&ci, p + 20, sizeof ci);
      if (pid == 0 || pid > kMaxPid) return false;
      if (gi != nvml::kInstanceIdNone && gi > 64) return false;
      if (ci != nvml::kInstanceIdNone && ci > 64) return false;
    }
    return true;
  };
  if (plausible(sizeof(nvml::ProcessInfoV2))) return sizeof(nvml::ProcessInfoV2);
  if (plausible(nvml::kProcessInfoMaxStride)) return nvml::kProcessInfoMaxStride;
  return sizeof(nvml::ProcessInfoV2);
}

// Processes: the monitored one's memory and how many others hold a context here.
void read_processes(DeviceRead& r) noexcept {
  DeviceState& d = r.d;
  struct List {
    Query q;
    nvml::DeviceGetRunningProcessesFn fn;
    int version;
    std::vector<unsigned char>* buf;
    unsigned count;
    bool ok;
  } lists[2] = {
      {kQComputeProcs, r.f.device_get_compute_running_processes, r.f.compute_processes_version,
       &d.compute_buf, 0, false},
      {kQGraphicsProcs, r.f.device_get_graphics_running_processes,
       r.f.graphics_processes_version, &d.graphics_buf, 0, false}};
  // Both lists or neither: one whose call budget holds it back this read holds back the other.
  for (const List& l : lists) {
    if (d.usable(l.q) && !d.query_budget[l.q].due(r.now_ns)) return;
  }
  bool any_usable = false, all_ok = true;
  for (List& l : lists) {
    if (!r.asks(l.q)) continue;
    any_usable = true;
    l.count = r.max_processes;
    l.ok = r.call(l.q, l.fn, r.h, &l.count, l.buf->data());
    all_ok = all_ok && l.ok;
  }
  // Both lists (where asked) must have come back, or a process in the missing one is missed.
  if (!any_usable || !all_ok || d.failed()) return;
  bool mine_known = true;
  std::size_t others = 0, n_mine = 0;
  for (const List& l : lists) {
    if (!l.ok) continue;
    const unsigned n = std::min(l.count, r.max_processes);
    const std::size_t stride = process_info_stride(l.buf->data(), n, l.version);
    for (unsigned i = 0; i < n; ++i) {
      unsigned pid = 0;
      unsigned long long used = 0;
      process_info_at(l.buf->data(), stride, i, &pid, &used);
      if (r.tree.contains(pid)) {
        if (used == nvml::kValueNotAvailableUll) {
          mine_known = false;
        } else if (n_mine < d.mine_mem.size()) {
          d.mine_mem[n_mine++] = {pid, used};
        }
      } else if (others < d.other_pids.size()) {
        d.other_pids[others++] = pid;
      }
    }
  }
  const auto first = d.other_pids.begin();
  const auto last = first + static_cast<std::ptrdiff_t>(others);
  std::sort(first, last);
  const auto distinct = std::unique(first, last) - first;
  r.set_i(kOtherProcs, static_cast<std::uint64_t>(distinct));
  // A process in both lists (compute and graphics) reports the same memory twice: per pid the
  // larger entry counts, and the tree's pids add up.
  const auto mb = d.mine_mem.begin();
  std::sort(mb, mb + static_cast<std::ptrdiff_t>(n_mine));
  unsigned long long bytes = 0;
  for (std::size_t i = 0; i < n_mine; ++i) {
    if (i + 1 < n_mine && d.mine_mem[i + 1].first == d.mine_mem[i].first) continue;  // sorted:
    bytes += d.mine_mem[i].second;  // the last entry of a pid is its largest
  }
  if (mine_known) r.set_i(kProcMem, bytes);
}

// The monitored process's SM, memory, encoder and decoder %, from the samples newer than the
// last one seen (NVML's lastSeenTimeStamp): the driver keeps a buffer of per-process samples,
// each an average over its own period, so passing the newest timestamp seen returns each sample
// once and the latest one of the monitored process is its current share. New samples without it
// mean it was idle (0 %); no new samples at all (NOT_FOUND) leave the latest share standing.
void read_process_util(DeviceRead& r) noexcept {
  DeviceState& d = r.d;
  if (!r.asks(kQProcUtil)) return;
  unsigned count = static_cast<unsigned>(d.util_buf.size());
  const int rc = r.timed(kQProcUtil, r.f.device_get_process_utilization, r.h, d.util_buf.data(),
                         &count, d.proc_util_last_seen_us);
  if (rc == nvml::kSuccess) {
    count = std::min<unsigned>(count, static_cast<unsigned>(d.util_buf.size()));
    unsigned long long newest = d.proc_util_last_seen_us;
    std::size_t n_mine = 0;
    for (unsigned i = 0; i < count; ++i) {
      const nvml::ProcessUtilizationSample& s = d.util_buf[i];
      newest = std::max(newest, s.timestamp_us);
      if (r.tree.contains(s.pid)) d.mine_util[n_mine++] = s;
    }
    // Per pid of the tree only its latest sample counts (older ones in the same batch are
    // history); the tree's pids add up. Not listed at all: the tree was idle (0 %).
    const auto mb = d.mine_util.begin();
    std::sort(mb, mb + static_cast<std::ptrdiff_t>(n_mine),
              [](const nvml::ProcessUtilizationSample& a, const nvml::ProcessUtilizationSample& b) {
                return a.pid != b.pid ? a.pid < b.pid : a.timestamp_us < b.timestamp_us;
              });
    double share[4] = {};
    for (std::size_t i = 0; i < n_mine; ++i) {
      if (i + 1 < n_mine && d.mine_util[i + 1].pid == d.mine_util[i].pid) continue;
      const nvml::ProcessUtilizationSample& s = d.mine_util[i];
      share[0] += s.sm_util, share[1] += s.mem_util, share[2] += s.enc_util, share[3] += s.dec_util;
    }
    d.proc_util_last_seen_us = newest;
    for (int k = 0; k < 4; ++k) d.proc_util[k] = share[k];
    d.proc_util_known = true;
  } else if (rc == nvml::kErrorNotFound) {
    // Nothing newer than the last sample: the latest value stands (none yet: nobody ran).
    d.proc_util_known = true;
  } else {
    d.proc_util_known = d.proc_util_known && classify(rc) == ErrorClass::kTransient;
    r.check(kQProcUtil, rc);
  }
  if (d.proc_util_known && (rc == nvml::kSuccess || rc == nvml::kErrorNotFound)) {
    r.set_f(kProcSm, d.proc_util[0]);
    r.set_f(kProcMemUtil, d.proc_util[1]);
    r.set_f(kProcEncUtil, d.proc_util[2]);
    r.set_f(kProcDecUtil, d.proc_util[3]);
  }
}

}  // namespace stroboscope::nvml_detail
