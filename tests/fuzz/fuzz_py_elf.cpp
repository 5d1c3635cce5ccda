// libFuzzer harness: the ELF symbol lookup of the stack reader (elf_find_symbols) over a file
// that is the fuzz input. The file is the recorded command's: a crafted libpython*.so must give
// "not found" or a value, never a crash, a read past the file or an allocation it does not hold.
#include <cstring>

#include "fuzz_check.hpp"
#include "stroboscope/py_stacks.hpp"

namespace sp = stroboscope::py_stacks;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const sp::ReadAt read = [&](std::uint64_t off, void* buf, std::size_t n) {
    if (off > size || n > size - off) return false;
    if (n != 0) std::memcpy(buf, data + off, n);
    return true;
  };
  static const char* const kNames[] = {"_PyRuntime", "Py_Version"};
  std::uint64_t values[2] = {1, 1};
  const sp::ElfImage image = sp::elf_find_symbols(read, kNames, 2, values);
  if (!image.ok) FUZZ_CHECK(values[0] == 0 && values[1] == 0);
  return 0;
}
