// Large buffers (the ring, frame buffers) backed by huge pages where the kernel allows it.
//
// A 1M-row ring or snapshot spans some 200 MiB. On 4 KiB pages every 4 KiB of a sequential copy
// costs a TLB miss and a page walk for the source and again for the destination; on 2 MiB pages
// a hundred walks cover it all. Transparent huge pages are often in "madvise" mode, so a buffer
// gets them only when asked before its first touch. Buffers under kHugeBytes are plain aligned
// allocations (a small ring would waste most of a 2 MiB page).
#pragma once

#include <cstddef>

namespace stroboscope {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
inline constexpr std::size_t kHugeBytes = std::size_t{4} << 20;

// `bytes` of memory aligned to `align` (a power of two, at least alignof(max_align_t)), not yet
// touched; at kHugeBytes and above aligned to a huge page and advised to use huge pages (the
// advice failing, e.g. with THP off, only costs the speed). nullptr when out of memory. Free
// with std::free.
void* allocate_large(std::size_t bytes, std::size_t align) noexcept;

}  // namespace stroboscope
