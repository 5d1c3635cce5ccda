// libFuzzer harness: the /proc/PID/maps parser of the stack reader (parse_maps).
#include "fuzz_check.hpp"
#include "stroboscope/py_stacks.hpp"

namespace sp = stroboscope::py_stacks;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = as_text(data, size);
  const auto maps = sp::parse_maps(text);
  std::size_t lines = 0;
  for (const char c : text) lines += c == '\n' ? 1 : 0;
  FUZZ_CHECK(maps.size() <= lines + 1);  // at most one mapping a line
  for (const auto& m : maps) {
    FUZZ_CHECK(m.path.find('\n') == std::string::npos);
    FUZZ_CHECK(m.path.empty() || m.path[0] != ' ');
  }
  return 0;
}
