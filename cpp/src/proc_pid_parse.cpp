// The parsers of /proc/<pid>/{stat,statm,status,io}: text in, numbers out, no I/O (so the
// unit tests and the fuzzers feed them any bytes). The "process" source that reads the files is
// proc_pid.cpp; proc_tree reuses parse_pid_stat/parse_pid_statm for each member.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "stroboscope/procfs.hpp"

namespace stroboscope {
namespace procfs {

bool parse_pid_stat(std::string_view text, PidStat* out) noexcept {
  std::size_t open = text.find('(');
  std::size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return false;
  }
  PidStat s;
  s.comm = text.substr(open + 1, close - open - 1);
  std::string_view rest = text.substr(close + 1);
  std::string_view state = next_token(rest);
  if (state.size() != 1) return false;
  s.state = state[0];
  // Fields 4..24 of proc(5): ppid .. rss. Some are negative (tpgid, priority, nice).
  std::int64_t f[25] = {};
  for (int i = 4; i <= 24; ++i) {
    if (!next_i64(rest, &f[i])) return false;
  }
  s.ppid = f[4];
  s.flags = static_cast<std::uint64_t>(f[9]);
  s.utime = static_cast<std::uint64_t>(f[14]);
  s.stime = static_cast<std::uint64_t>(f[15]);
  s.num_threads = f[20];
  s.starttime = static_cast<std::uint64_t>(f[22]);
  s.rss_pages = f[24];
  *out = s;
  return true;
}

bool parse_pid_statm(std::string_view text, PidStatm* out) noexcept {
  PidStatm m;
  if (!next_u64(text, &m.size_pages) || !next_u64(text, &m.resident_pages) ||
      !next_u64(text, &m.shared_pages)) {
    return false;
  }
  *out = m;
  return true;
}

namespace {
// Calls on_value(key, rest-of-line) for each "Key:<blanks>value" line.
template <typename F>
void for_each_keyed_line(std::string_view text, F&& on_value) noexcept {
  while (!text.empty()) {
    std::string_view line = next_line(text);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    on_value(line.substr(0, colon), line.substr(colon + 1));
  }
}
std::int64_t value_or_missing(std::string_view rest) noexcept {
  std::int64_t v = 0;
  return next_i64(rest, &v) && v >= 0 ? v : kMissing;
}
}  // namespace

PidStatus parse_pid_status(std::string_view text) noexcept {
  PidStatus s;
  for_each_keyed_line(text, [&s](std::string_view key, std::string_view rest) {
    if (key == "PPid") s.ppid = value_or_missing(rest);
    else if (key == "Threads") s.threads = value_or_missing(rest);
    else if (key == "voluntary_ctxt_switches") s.voluntary_ctxt = value_or_missing(rest);
    else if (key == "nonvoluntary_ctxt_switches") s.nonvoluntary_ctxt = value_or_missing(rest);
  });
  return s;
}

PidIo parse_pid_io(std::string_view text) noexcept {
  PidIo io;
  for_each_keyed_line(text, [&io](std::string_view key, std::string_view rest) {
    if (key == "rchar") io.rchar = value_or_missing(rest);
    else if (key == "wchar") io.wchar = value_or_missing(rest);
    else if (key == "read_bytes") io.read_bytes = value_or_missing(rest);
    else if (key == "write_bytes") io.write_bytes = value_or_missing(rest);
  });
  return io;
}

}  // namespace procfs

}  // namespace stroboscope
