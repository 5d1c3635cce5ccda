// The GPU libraries' loader (see shared_library.hpp).
#include "shared_library.hpp"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>

#include "stroboscope/source.hpp"

namespace stroboscope::detail {

void* open_shared_library(const std::string& path, std::string* error) {
  static std::mutex mutex;
  static std::map<std::string, void*> handles;  // by the path opened
  std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(path);
  if (it != handles.end()) return it->second;
  // A path (not a soname to search): a FIFO would make dlopen wait forever, a directory or a
  // device is no library. Refused with what it is, before dlopen opens it.
  if (path.find('/') != std::string::npos) {
    std::string why = not_regular_reason(path);
    if (!why.empty()) {
      *error = path + " is " + why;
      return nullptr;
    }
  }
  dlerror();  // clear a stale error so the text below is this call's
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    *error = e != nullptr ? e : "dlopen failed without an error text";
    return nullptr;
  }
  handles.emplace(path, h);
  return h;
}

}  // namespace stroboscope::detail
