// The amdsmi loader: dlopen of libamd_smi.so (or STROBOSCOPE_AMDSMI_LIBRARY), amdsmi_init with
// AMDSMI_INIT_AMD_GPUS once while anyone holds the library, the GPUs over every socket, and the
// words for the user when any of it fails.
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "shared_library.hpp"
#include "stroboscope/amdsmi.hpp"
#include "stroboscope/nvml.hpp"

namespace stroboscope {
namespace {

std::mutex& current_mutex() {
  static std::mutex m;
  return m;
}
std::weak_ptr<const AmdSmiLibrary>& current() {
  static std::weak_ptr<const AmdSmiLibrary> w;
  return w;
}
// Instances alive whose amdsmi_init succeeded, per library path (guarded by current_mutex()).
// The last holder of an instance drops it outside acquire()'s lock, so a new instance may be
// loaded before the old one's destructor runs; amdsmi_init is then skipped (the library is still
// initialised) and only the last instance to go calls amdsmi_shut_down, whether or not amdsmi
// counts its inits.
int& live_inits(const std::string& path) {
  static std::map<std::string, int> n;
  return n[path];
}

}  // namespace

std::shared_ptr<const AmdSmiLibrary> AmdSmiLibrary::acquire() {
  std::lock_guard<std::mutex> lock(current_mutex());
  if (auto lib = current().lock()) return lib;
  std::shared_ptr<AmdSmiLibrary> lib(new AmdSmiLibrary());
  lib->load();
  current() = lib;
  return lib;
}

AmdSmiLibrary::~AmdSmiLibrary() {
  if (!initialised_) return;
  std::lock_guard<std::mutex> lock(current_mutex());
  if (--live_inits(path_) == 0) fn_.shut_down();
}

std::string AmdSmiLibrary::describe(amdsmi::Status code) const {
  const char* text = nullptr;
  std::string out;
  if (fn_.status_code_to_string != nullptr &&
      fn_.status_code_to_string(code, &text) == amdsmi::kSuccess && text != nullptr) {
    out = text;
    out += " ";
  }
  return out + "(amdsmi status " + std::to_string(code) + ")";
}

void AmdSmiLibrary::load() {
  const char* env = std::getenv(kAmdSmiLibraryEnv);
  path_ = (env != nullptr && *env != '\0') ? env : kAmdSmiDefaultLibrary;
  std::string error;
  void* h = detail::open_shared_library(path_, &error);
  if (h == nullptr) {
    reason_ = "cannot open " + path_ + " (set " + kAmdSmiLibraryEnv + " to its path): " + error;
    return;
  }
  struct Want {
    const char* name;
    void** slot;
    bool required;
  };
  void* found[11] = {};
  const Want wants[] = {
      {"amdsmi_init", &found[0], true},
      {"amdsmi_shut_down", &found[1], true},
      {"amdsmi_get_socket_handles", &found[2], true},
      {"amdsmi_get_processor_handles", &found[3], true},
      {"amdsmi_status_code_to_string", &found[4], false},
      {"amdsmi_get_gpu_activity", &found[5], false},
      {"amdsmi_get_gpu_memory_usage", &found[6], false},
      {"amdsmi_get_gpu_memory_total", &found[7], false},
      {"amdsmi_get_temp_metric", &found[8], false},
      {"amdsmi_get_clock_info", &found[9], false},
      {"amdsmi_get_energy_count", &found[10], false},
  };
  std::string missing;
  for (const Want& w : wants) {
    *w.slot = dlsym(h, w.name);
    if (*w.slot == nullptr && w.required) {
      missing += (missing.empty() ? "" : ", ") + std::string(w.name);
    }
  }
  detail::assign_symbol(&fn_.init, found[0]);
  detail::assign_symbol(&fn_.shut_down, found[1]);
  detail::assign_symbol(&fn_.get_socket_handles, found[2]);
  detail::assign_symbol(&fn_.get_processor_handles, found[3]);
  detail::assign_symbol(&fn_.status_code_to_string, found[4]);
  detail::assign_symbol(&fn_.get_gpu_activity, found[5]);
  detail::assign_symbol(&fn_.get_gpu_memory_usage, found[6]);
  detail::assign_symbol(&fn_.get_gpu_memory_total, found[7]);
  detail::assign_symbol(&fn_.get_temp_metric, found[8]);
  detail::assign_symbol(&fn_.get_clock_info, found[9]);
  detail::assign_symbol(&fn_.get_energy_count, found[10]);
  if (!missing.empty()) {
    reason_ = path_ + " lacks required amdsmi symbol(s): " + missing;
    return;
  }
  // Called from acquire(), under current_mutex().
  if (live_inits(path_) == 0) {
    const amdsmi::Status rc = fn_.init(amdsmi::kInitAmdGpus);
    if (rc != amdsmi::kSuccess) {
      reason_ = "amdsmi_init(AMDSMI_INIT_AMD_GPUS) failed: " + describe(rc);
      return;
    }
  }
  ++live_inits(path_);
  initialised_ = true;
  // Sockets first, then the processors on each: amdsmi's own enumeration order.
  std::uint32_t sockets = 0;
  amdsmi::Status s = fn_.get_socket_handles(&sockets, nullptr);
  std::vector<amdsmi::SocketHandle> socket_handles(sockets);
  if (s == amdsmi::kSuccess && sockets > 0) {
    s = fn_.get_socket_handles(&sockets, socket_handles.data());
    socket_handles.resize(sockets);
  }
  if (s != amdsmi::kSuccess) {
    reason_ = "amdsmi_get_socket_handles failed: " + describe(s);
    return;
  }
  for (amdsmi::SocketHandle socket : socket_handles) {
    std::uint32_t n = 0;
    s = fn_.get_processor_handles(socket, &n, nullptr);
    std::vector<amdsmi::ProcessorHandle> procs(n);
    if (s == amdsmi::kSuccess && n > 0) {
      s = fn_.get_processor_handles(socket, &n, procs.data());
      procs.resize(n);
    }
    if (s != amdsmi::kSuccess) {
      reason_ = "amdsmi_get_processor_handles failed: " + describe(s);
      return;
    }
    gpus_.insert(gpus_.end(), procs.begin(), procs.end());
  }
  loaded_ = true;
}

bool amdsmi_available(std::string* reason) {
  auto lib = AmdSmiLibrary::acquire();
  std::string why;
  if (!lib->loaded()) {
    why = lib->reason();
  } else if (lib->gpus().empty()) {
    why = "amdsmi found no AMD GPU";
  }
  if (reason != nullptr) *reason = why;
  return why.empty();
}

std::uint64_t amdsmi_energy_delta(std::uint64_t previous, std::uint64_t current) noexcept {
  return nvml_counter_delta(previous, current);
}

}  // namespace stroboscope
