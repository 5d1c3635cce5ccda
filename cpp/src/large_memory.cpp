// Large buffers on huge pages: see large_memory.hpp.
#include "stroboscope/large_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace stroboscope {

void* allocate_large(std::size_t bytes, std::size_t align) noexcept {
  if (bytes == 0) bytes = align;
  const std::size_t a = bytes >= kHugeBytes ? std::max(align, kHugePageBytes) : align;
  if (bytes > SIZE_MAX - a) return nullptr;
  const std::size_t size = (bytes + a - 1) / a * a;  // aligned_alloc wants a multiple of `a`
  void* p = std::aligned_alloc(a, size);
  if (p != nullptr && a == kHugePageBytes) {
#if defined(MADV_HUGEPAGE)
    (void)madvise(p, size, MADV_HUGEPAGE);
#endif
  }
  return p;
}

}  // namespace stroboscope
