// Large buffers on huge pages: see large_memory.hpp.
#include "stroboscope/large_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

namespace stroboscope {
namespace {

std::size_t page_bytes() noexcept {
  static const std::size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
  }();
  return page;
}

// The length of a huge buffer's mapping: whole pages.
std::size_t mapped_length(std::size_t bytes) noexcept {
  const std::size_t page = page_bytes();
  return (bytes + page - 1) / page * page;
}

}  // namespace

void* allocate_large(std::size_t bytes, std::size_t align) noexcept {
  if (bytes == 0) bytes = align;
  if (bytes < kHugeBytes) {
    if (bytes > SIZE_MAX - align) return nullptr;
    return std::aligned_alloc(align, (bytes + align - 1) / align * align);
  }
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) return nullptr;
  const std::size_t length = mapped_length(bytes);
  // Map a huge page more than needed, then unmap the unaligned head and the rest of the tail.
  const std::size_t over = length + kHugePageBytes;
  void* raw = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const std::size_t head = aligned - start;
  if (head > 0) ::munmap(raw, head);
  const std::size_t tail = over - head - length;
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + length), tail);
  auto* p = reinterpret_cast<void*>(aligned);
#if defined(MADV_HUGEPAGE)
  (void)::madvise(p, length, MADV_HUGEPAGE);
#endif
  return p;
}

void free_large(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugeBytes) {  // a size of 0 was allocated as `align` bytes: plain too
    std::free(p);
  } else {
    ::munmap(p, mapped_length(bytes));
  }
}

}  // namespace stroboscope
