// Helpers of the NVML tests (test_nvml*.cpp): scenario files for the fake NVML library
// (tests/fake_nvml), its own introspection functions, and one row of a source read the way the
// sampler does.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "check.hpp"
#include "stroboscope/nvml.hpp"

#ifndef FAKE_NVML_PATH
#error "FAKE_NVML_PATH must name the fake NVML library (see CMakeLists.txt)"
#endif

namespace {

using namespace stroboscope;

inline std::string g_dir;  // scratch directory for scenario files

// Writes a scenario, points the fake at it and the loader at `library`.
void use_script(const std::string& text, const char* library = FAKE_NVML_PATH) {
  static int n = 0;
  const std::string path = g_dir + "/scenario" + std::to_string(n++) + ".txt";
  std::ofstream(path) << text;
  setenv("FAKE_NVML_SCRIPT", path.c_str(), 1);
  setenv(kNvmlLibraryEnv, library, 1);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The fake's own functions (not NVML), for assertions on how it was called.
template <typename Fn>
Fn fake_symbol(const char* library, const char* name) {
  void* h = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  return reinterpret_cast<Fn>(dlsym(h, name));
}
unsigned long long fake_calls(unsigned dev, const char* function,
                              const char* library = FAKE_NVML_PATH) {
  auto fn = fake_symbol<unsigned long long (*)(unsigned, const char*)>(library, "fake_nvml_calls");
  return fn != nullptr ? fn(dev, function) : ~0ull;
}
unsigned long long fake_last_seen(unsigned dev) {
  auto fn = fake_symbol<unsigned long long (*)(unsigned)>(FAKE_NVML_PATH, "fake_nvml_last_seen");
  return fn != nullptr ? fn(dev) : ~0ull;
}
int fake_init_count(const char* library = FAKE_NVML_PATH) {
  auto fn = fake_symbol<int (*)()>(library, "fake_nvml_init_count");
  return fn != nullptr ? fn() : -1;
}

// One row of a source, read the way the sampler does (cleared, then filled).
class Row {
 public:
  explicit Row(Source& s)
      : src_(s), cells_(s.columns().size(), 0), valid_(s.columns().size(), 0) {}
  void read(std::int64_t now_ns = 0) {
    std::fill(valid_.begin(), valid_.end(), 0);
    src_.read(RowWriter(cells_.data(), valid_.data(), cells_.size()), now_ns);
  }
  std::size_t col(const std::string& name) const {
    const auto& cols = src_.columns();
    for (std::size_t i = 0; i < cols.size(); ++i) {
      if (cols[i].name == name) return i;
    }
    std::fprintf(stderr, "no column %s\n", name.c_str());
    return cols.size();
  }
  bool has(const std::string& name) const {
    const std::size_t i = col(name);
    return i < valid_.size() && valid_[i] != 0;
  }
  double f64(const std::string& name) const {
    const std::size_t i = col(name);
    double v = -12345.0;
    if (i < cells_.size() && valid_[i]) std::memcpy(&v, &cells_[i], sizeof v);
    return v;
  }
  std::int64_t i64(const std::string& name) const {
    const std::size_t i = col(name);
    std::int64_t v = -12345;
    if (i < cells_.size() && valid_[i]) std::memcpy(&v, &cells_[i], sizeof v);
    return v;
  }

 private:
  Source& src_;
  std::vector<std::uint64_t> cells_;
  std::vector<std::uint8_t> valid_;
};

const NvmlSymbol* symbol(const std::vector<NvmlSymbol>& syms, const std::string& wanted) {
  for (const NvmlSymbol& s : syms) {
    if (s.wanted == wanted) return &s;
  }
  return nullptr;
}

const NvmlUnavailable* unavailable(const NvmlDeviceStatus& d, const std::string& metric) {
  for (const NvmlUnavailable& u : d.unavailable) {
    if (u.metric == metric) return &u;
  }
  return nullptr;
}

}  // namespace
