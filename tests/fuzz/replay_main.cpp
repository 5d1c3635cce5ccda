// A main() for the parser harnesses without libFuzzer: feeds each file named on the command line
// (a directory: each regular file below it) to LLVMFuzzerTestOneInput once. ctest builds one per
// parser harness with the ordinary compiler and sanitizers, and replays the kept crash inputs
// (tests/fuzz/regressions/<harness>) and every recorded fixture under tests/data, so those run
// on every CI pass even where clang is missing. Exits non-zero when no input was found.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void replay(const std::filesystem::path& file, std::size_t* count) {
  std::ifstream in(file, std::ios::binary);
  // On the heap at exactly the file's size, so ASan sees a read one byte past the input.
  std::vector<std::uint8_t> input((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(input.empty() ? nullptr : input.data(), input.size());
  ++*count;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path root(argv[i]);
    if (std::filesystem::is_directory(root)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
        if (entry.is_regular_file()) replay(entry.path(), &count);
      }
    } else if (std::filesystem::is_regular_file(root)) {
      replay(root, &count);
    }
  }
  std::printf("replayed %zu inputs\n", count);
  return count > 0 ? 0 : 1;
}
