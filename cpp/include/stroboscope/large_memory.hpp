// Large buffers (the ring, frame buffers) backed by huge pages where the kernel allows it.
//
// A 1M-row ring or snapshot spans some 200 MiB. On 4 KiB pages every 4 KiB of a sequential copy
// costs a TLB miss and a page walk for the source and again for the destination; on 2 MiB pages
// a hundred walks cover it all. Transparent huge pages are often in "madvise" mode, so a buffer
// gets them only when asked before its first touch. A buffer of kHugeBytes or more is a mapping
// of its own, aligned to a huge page and advised (the advice failing, e.g. with THP off, only
// costs the speed): advice on a range of the malloc heap would outlive the buffer and apply to
// whatever the heap puts there next. Only whole 2 MiB pages inside the mapping are huge, so the
// tail past the last one stays in 4 KiB pages (no partly used huge page is faulted in). With
// THP's defrag in "madvise" mode the first touch of an advised range may compact memory first:
// the ring's constructor and a fresh frame buffer's first copy pay it, not the sampler's ticks.
// A smaller buffer is a plain aligned allocation.
#pragma once

#include <cstddef>

namespace stroboscope {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
inline constexpr std::size_t kHugeBytes = std::size_t{4} << 20;

// `bytes` of memory aligned to `align` (a power of two, at least alignof(max_align_t) and at
// most a page), not yet touched (a mapping: zeros); nullptr when out of memory. Free it with
// free_large(p, bytes), the same `bytes`.
void* allocate_large(std::size_t bytes, std::size_t align) noexcept;
void free_large(void* p, std::size_t bytes) noexcept;

}  // namespace stroboscope
