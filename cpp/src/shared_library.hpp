// The one loader of the libraries the GPU sources use at run time (NVML, amdsmi): dlopen once
// per path for the life of the process, with the loader's error text kept for the user.
#pragma once

#include <string>

namespace stroboscope::detail {

// Opens the shared library `path` (a soname to search, or a path) with RTLD_NOW | RTLD_LOCAL, or
// returns the handle opened for that path before: handles stay open for the life of the process
// (a library's functions may be held anywhere). A path that names a FIFO, a directory or a
// device is refused before dlopen (a FIFO would make it wait forever). On failure returns
// nullptr with `*error` saying why (dlerror's text). Thread-safe.
[[nodiscard]] void* open_shared_library(const std::string& path, std::string* error);

// `*slot` = the symbol `sym` (from dlsym) as the function pointer type of the slot; POSIX
// guarantees that this conversion of dlsym's void* works.
template <typename Fn>
void assign_symbol(Fn* slot, void* sym) noexcept {
  *slot = reinterpret_cast<Fn>(sym);
}

}  // namespace stroboscope::detail
