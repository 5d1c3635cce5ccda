// Parsers for the cgroup files: /proc/<pid>/cgroup (membership), cpu.max, cpu.stat-style keyed
// files, single-number files and memory limits, v1 and v2. Bytes in, values out (procfs.hpp).
#include <string>
#include <vector>

#include "stroboscope/procfs.hpp"

namespace stroboscope::procfs {

std::vector<CgroupMembership> parse_proc_cgroup(std::string_view text) {
  std::vector<CgroupMembership> out;
  while (!text.empty()) {
    std::string_view line = next_line(text);
    std::size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    std::size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view id = line.substr(0, c1);
    std::uint64_t n = 0;
    if (!next_u64(id, &n) || !id.empty() || n > 1u << 20) continue;
    out.push_back(CgroupMembership{static_cast<int>(n),
                                   std::string(line.substr(c1 + 1, c2 - c1 - 1)),
                                   std::string(line.substr(c2 + 1))});
  }
  return out;
}

const CgroupMembership* find_v1_controller(const std::vector<CgroupMembership>& lines,
                                           std::string_view controller) noexcept {
  for (const CgroupMembership& m : lines) {
    if (m.hierarchy_id == 0) continue;
    std::string_view list = m.controllers;
    while (!list.empty()) {
      std::size_t comma = list.find(',');
      if (list.substr(0, comma) == controller) return &m;
      list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
    }
  }
  return nullptr;
}

const CgroupMembership* find_v2(const std::vector<CgroupMembership>& lines) noexcept {
  for (const CgroupMembership& m : lines) {
    if (m.hierarchy_id == 0 && m.controllers.empty()) return &m;
  }
  return nullptr;
}

bool parse_cpu_max(std::string_view text, CpuMax* out) noexcept {
  CpuMax c;
  std::string_view quota = next_token(text);
  if (quota.empty()) return false;
  std::int64_t period = 100000;  // the kernel's default when only the quota is shown
  std::string_view rest = text;
  if (std::int64_t p = 0; next_i64(rest, &p)) period = p;
  if (period <= 0) return false;
  c.period_us = period;
  if (quota != "max") {
    std::int64_t q = 0;
    if (!next_i64(quota, &q) || !quota.empty()) return false;
    c.has_quota = q > 0;
    c.quota_us = q;
  }
  *out = c;
  return true;
}

bool parse_single_i64(std::string_view text, std::int64_t* out) noexcept {
  std::int64_t v = 0;
  if (!next_i64(text, &v)) return false;
  if (!text.empty() && text.front() != '\n' && !is_blank(text.front())) return false;
  *out = v;
  return true;
}

bool parse_memory_limit(std::string_view text, std::int64_t* limit) noexcept {
  skip_blanks(text);
  if (text.substr(0, 3) == "max") {
    *limit = kMissing;
    return true;
  }
  std::uint64_t v = 0;
  if (!next_u64(text, &v)) return false;
  *limit = v >= (std::uint64_t{1} << 62) ? kMissing : static_cast<std::int64_t>(v);
  return true;
}

std::int64_t find_keyed_i64(std::string_view text, std::string_view key) noexcept {
  while (!text.empty()) {
    std::string_view line = next_line(text);
    if (line.size() <= key.size() || line.substr(0, key.size()) != key ||
        !is_blank(line[key.size()])) {
      continue;
    }
    line.remove_prefix(key.size());
    std::int64_t v = 0;
    return next_i64(line, &v) ? v : kMissing;
  }
  return kMissing;
}

}  // namespace stroboscope::procfs
