// A CPython str object, copied out of another process, as UTF-8. Only compact strings (every
// string the compiler makes for a code object's names is one) are decoded.
#include <algorithm>
#include <cstring>

#include "stroboscope/py_stacks.hpp"

namespace stroboscope::py_stacks {
namespace {

constexpr std::int64_t kMaxLength = 1 << 20;  // code points: more is not a name

std::size_t put_utf8(std::uint32_t cp, char* out, std::size_t cap, std::size_t at) noexcept {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;  // not a scalar value
  char b[4];
  std::size_t n;
  if (cp < 0x80) {
    b[0] = static_cast<char>(cp);
    n = 1;
  } else if (cp < 0x800) {
    b[0] = static_cast<char>(0xC0 | (cp >> 6));
    b[1] = static_cast<char>(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    b[0] = static_cast<char>(0xE0 | (cp >> 12));
    b[1] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    b[2] = static_cast<char>(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    b[0] = static_cast<char>(0xF0 | (cp >> 18));
    b[1] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    b[2] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    b[3] = static_cast<char>(0x80 | (cp & 0x3F));
    n = 4;
  }
  if (at + n > cap) return at;  // cut at a whole character
  std::memcpy(out + at, b, n);
  return at + n;
}

}  // namespace

long unicode_utf8(const std::uint8_t* obj, std::size_t avail, const StroboscopePyLayout& L,
                  char* out, std::size_t cap, std::size_t* need) noexcept {
  const auto state_at = static_cast<std::size_t>(L.unicode_state);
  const auto length_at = static_cast<std::size_t>(L.unicode_length);
  if (L.state_kind_mask == 0 || avail < state_at + 4 || avail < length_at + 8) return -1;
  std::uint32_t state;
  std::int64_t length;
  std::memcpy(&state, obj + state_at, 4);
  std::memcpy(&length, obj + length_at, 8);
  if ((state & L.state_compact_mask) == 0 || length < 0 || length > kMaxLength) return -1;
  const bool ascii = (state & L.state_ascii_mask) != 0;
  const std::uint32_t kind =
      (state & L.state_kind_mask) >> static_cast<unsigned>(__builtin_ctz(L.state_kind_mask));
  if (kind != 1 && kind != 2 && kind != 4) return -1;
  if (ascii && kind != 1) return -1;
  const std::size_t data_at =
      static_cast<std::size_t>(ascii ? L.unicode_ascii_size : L.unicode_compact_size);
  // Each code point is at least one byte of output: past `cap` of them, none is written. So only
  // that many are needed, and the bytes asked for stay bounded by `cap` whatever the length.
  const std::size_t used = std::min(static_cast<std::size_t>(length), cap);
  const std::size_t size = data_at + used * kind;
  if (avail < size) {
    if (need != nullptr) *need = size;
    return -2;
  }
  const std::uint8_t* data = obj + data_at;
  std::size_t at = 0;
  for (std::size_t i = 0; i < used; ++i) {
    std::uint32_t cp;
    if (kind == 1) {
      cp = data[i];
    } else if (kind == 2) {
      std::uint16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      cp = v;
    } else {
      std::memcpy(&cp, data + 4 * i, 4);
    }
    if (ascii && cp >= 0x80) cp = 0xFFFD;
    const std::size_t before = at;
    at = put_utf8(cp, out, cap, at);
    if (at == before) break;  // out of room
  }
  return static_cast<long>(at);
}

}  // namespace stroboscope::py_stacks
