// Large buffers (the ring's storage, frame buffers): from kHugeBytes on a mapping of their own,
// huge-page aligned and advised, unmapped when freed; below it plain aligned allocations.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "check.hpp"
#include "stroboscope/large_memory.hpp"

using stroboscope::allocate_large;
using stroboscope::free_large;
using stroboscope::kHugeBytes;
using stroboscope::kHugePageBytes;

namespace {

// The VmFlags line of the mapping holding `p` in /proc/self/smaps ("" when not found).
std::string vm_flags_of(const void* p) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0;
    unsigned long hi = 0;
    char dash = 0;
    std::istringstream head(line);
    // A mapping's line starts "lo-hi perms ..." (its first ':' is in the device, after a
    // space); a field's line starts "Name:".
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool thp_available() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  return std::getline(f, modes) && modes.find("[never]") == std::string::npos;
}

void test_large_buffers_are_huge_page_aligned_and_advised() {
  const std::size_t bytes = kHugeBytes + 12345;
  void* p = allocate_large(bytes, 64);
  CHECK(p != nullptr);
  CHECK_EQ(reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes, 0u);
  std::memset(p, 1, bytes);  // the whole size asked is usable
  const std::string flags = vm_flags_of(p);
  CHECK(!flags.empty());
  if (thp_available()) {
    CHECK(flags.find(" hg") != std::string::npos);  // VM_HUGEPAGE: madvise(MADV_HUGEPAGE) took
  } else {
    std::printf("transparent huge pages off: the advice is not checked\n");
  }
  free_large(p, bytes);
  CHECK(vm_flags_of(p).empty());  // a mapping of its own, gone with it: no advice left behind
}

void test_small_buffers_are_plain() {
  void* p = allocate_large(4096, 64);
  CHECK(p != nullptr);
  CHECK_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  free_large(p, 4096);
  void* q = allocate_large(0, 64);  // a zero size still gives a freeable pointer
  CHECK(q != nullptr);
  free_large(q, 0);
}

}  // namespace

int main() {
  test_large_buffers_are_huge_page_aligned_and_advised();
  test_small_buffers_are_plain();
  TEST_MAIN_END();
}
