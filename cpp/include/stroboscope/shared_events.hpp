// TEMPORARY: the declaration of the shared-events writer that NVTX capture codes against, copied
// from the helpers' contract until the shared-events part lands (its header replaces this file).
#pragma once

#include <cstdint>
#include <string_view>

#include "stroboscope/events.hpp"

namespace stroboscope {

class SharedEvents {
 public:
  static SharedEvents* process(const char* producer);
  std::uint32_t intern(std::string_view text);
  void push(EventKind kind, std::uint32_t scope_id, std::uint16_t depth, std::uint32_t labels_id,
            std::uint64_t stack_id) noexcept;
};

}  // namespace stroboscope
