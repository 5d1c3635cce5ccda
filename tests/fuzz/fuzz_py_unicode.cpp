// libFuzzer harness: the decoding of a str object copied out of another process (unicode_utf8),
// with CPython 3.12's layout of PyASCIIObject. The first input byte is the output room (bytes);
// the rest is the object. The output buffer is allocated at exactly that room, so a write past
// it is an ASan report.
#include <memory>

#include "fuzz_check.hpp"
#include "stroboscope/py_stacks.hpp"

namespace sp = stroboscope::py_stacks;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  StroboscopePyLayout l{};
  l.unicode_length = 16;
  l.unicode_state = 32;
  l.unicode_ascii_size = 40;
  l.unicode_compact_size = 56;
  l.state_kind_mask = 0x1C;
  l.state_compact_mask = 0x20;
  l.state_ascii_mask = 0x40;
  const std::size_t cap = data[0];
  const auto out = std::make_unique<char[]>(cap == 0 ? 1 : cap);
  std::size_t need = 0;
  const long n = sp::unicode_utf8(data + 1, size - 1, l, out.get(), cap, &need);
  FUZZ_CHECK(n >= -2 && n <= static_cast<long>(cap));
  if (n == -2) FUZZ_CHECK(need > size - 1);  // asks for more than it was given
  return 0;
}
