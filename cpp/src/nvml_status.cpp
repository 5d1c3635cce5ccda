// What the user reads about NVML (stroboscope.gpu_status()): the library, its versions, each GPU
// with its MIG instances and the metrics it cannot give; and GPU lookup by UUID.
#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "nvml_source_state.hpp"
#include "stroboscope/nvml_gpm.hpp"

namespace stroboscope {

using namespace nvml_detail;  // the source tables device_status() reads

namespace nvml_detail {

// The "gpu" sources alive in this process. nvml_status() asks one that reads every GPU what its
// reads found instead of building a probe and reading every metric again: a status is asked on
// every snapshot (its provenance), and the probe's full read of every GPU would cost that much
// again, each time, while the source's own counts are the better answer anyway. The mutex is held
// while a listed source is used, and a source leaves the list in its destructor under it.
std::mutex& live_sources_mutex() {
  static std::mutex m;
  return m;
}
std::vector<const NvmlSource*>& live_sources() {
  static std::vector<const NvmlSource*> v;
  return v;
}

std::string describe_code(const NvmlLibrary& lib, int code) {
  switch (code) {
    case kCodeMissingSymbol:
      return "not exported by this NVML library (an older driver)";
    case kCodeMigEnabled:
      return "MIG mode is enabled: NVML reports no device-level utilisation under MIG";
    case kCodeBadValueType:
      return "the driver answered with a value type stroboscope cannot read";
    default:
      return std::string(lib.error_text(code)) + " (" + nvml_return_name(code) + ")";
  }
}

long long device_count(const NvmlLibrary& lib) {
  unsigned n = 0;
  const int rc = lib.fn().device_get_count(&n);
  return rc == nvml::kSuccess ? static_cast<long long>(n) : -static_cast<long long>(rc);
}

namespace {
std::string read_string(nvml::DeviceGetStringFn fn, nvml::Device h, unsigned size) {
  if (fn == nullptr) return {};
  std::vector<char> buf(size + 1, '\0');
  if (fn(h, buf.data(), size) != nvml::kSuccess) return {};
  buf[size] = '\0';
  return std::string(buf.data());
}
}  // namespace

Identity identify(const NvmlLibrary& lib, unsigned index) {
  const NvmlFunctions& f = lib.fn();
  Identity id;
  id.index = index;
  const int rc = f.device_get_handle_by_index(index, &id.handle);
  if (rc != nvml::kSuccess) {
    id.handle = nullptr;
    id.handle_error = rc;
    return id;
  }
  id.name = read_string(f.device_get_name, id.handle, nvml::kDeviceNameBufferSize);
  id.uuid = read_string(f.device_get_uuid, id.handle, nvml::kDeviceUuidBufferSize);
  unsigned current = 0, pending = 0;
  if (f.device_get_mig_mode != nullptr &&
      f.device_get_mig_mode(id.handle, &current, &pending) == nvml::kSuccess &&
      current == nvml::kDeviceMigEnable) {
    id.mig_enabled = true;
    unsigned max_count = 0;
    if (f.device_get_max_mig_device_count != nullptr &&
        f.device_get_mig_device_handle_by_index != nullptr &&
        f.device_get_max_mig_device_count(id.handle, &max_count) == nvml::kSuccess) {
      for (unsigned j = 0; j < max_count; ++j) {
        MigHandle m;
        m.index = j;
        // NOT_FOUND: no instance in this slot.
        if (f.device_get_mig_device_handle_by_index(id.handle, j, &m.handle) != nvml::kSuccess) {
          continue;
        }
        m.uuid = read_string(f.device_get_uuid, m.handle, nvml::kDeviceUuidBufferSize);
        id.mig.push_back(std::move(m));
      }
    }
  }
  return id;
}

}  // namespace nvml_detail

namespace {
std::string system_string(nvml::SystemGetStringFn fn) {
  if (fn == nullptr) return {};
  char buf[nvml::kSystemVersionBufferSize + 1] = {};
  if (fn(buf, nvml::kSystemVersionBufferSize) != nvml::kSuccess) return {};
  buf[nvml::kSystemVersionBufferSize] = '\0';
  return std::string(buf);
}
}  // namespace

NvmlStatus nvml_status() {
  NvmlStatus s;
  const auto lib = NvmlLibrary::acquire();
  s.library_path = lib->path();
  s.loaded = lib->loaded();
  s.reason = lib->reason();
  s.init_error = lib->init_error();
  s.symbols = lib->symbols();
  if (!s.loaded) return s;

  s.driver_version = system_string(lib->fn().system_get_driver_version);
  s.nvml_version = system_string(lib->fn().system_get_nvml_version);
  const long long count = nvml_detail::device_count(*lib);
  if (count < 0) {
    s.reason = "nvmlDeviceGetCount failed: " +
               nvml_detail::describe_code(*lib, static_cast<int>(-count));
    return s;
  }
  s.device_count = static_cast<unsigned>(count);
  s.notes.push_back(
      "NVML reports host PIDs: in a container with its own PID namespace the monitored process "
      "is not found, so proc_mem_bytes and the proc_*_util_pct columns read 0 and it counts "
      "among other_procs");
  if (lib->fn().compute_processes_version == 1) {
    s.notes.push_back("this NVML has only the original process list: no MIG instance ids");
  }
  if (count == 0) return s;

  // A live source over every GPU already knows what each cannot give (see live_sources()).
  {
    std::lock_guard<std::mutex> lock(live_sources_mutex());
    for (const NvmlSource* src : live_sources()) {
      std::vector<unsigned> covered = src->device_indices();
      std::sort(covered.begin(), covered.end());
      if (covered.size() != s.device_count || covered.back() != s.device_count - 1) continue;
      s.devices = src->device_status();
      break;
    }
  }
  // Otherwise one probing read of every metric on every GPU says which ones it cannot give.
  if (s.devices.empty()) {
    try {
      NvmlSource probe(NvmlSourceOptions{});
      const std::size_t n = probe.columns().size();
      std::vector<std::uint64_t> cells(n, 0);
      std::vector<std::uint8_t> valid(n, 0);
      probe.read(RowWriter(cells.data(), valid.data(), n), 0);
      s.devices = probe.device_status();
    } catch (const std::exception& e) {
      s.reason = e.what();
    }
  }
  std::sort(s.devices.begin(), s.devices.end(),
            [](const NvmlDeviceStatus& x, const NvmlDeviceStatus& y) { return x.index < y.index; });
  // The GPM metrics come from their own source ("gpu_gpm"); say here why a GPU has none.
  for (NvmlDeviceStatus& d : s.devices) {
    const std::string why = nvml_gpm_unavailable(*lib, d.index);
    if (!why.empty()) d.unavailable.push_back(NvmlUnavailable{"gpm", why});
    for (NvmlUnavailable& u : nvml_gpm_stopped(d.index)) d.unavailable.push_back(std::move(u));
  }
  return s;
}

// What each device of a source cannot give, from the codes its reads stored.
std::vector<NvmlDeviceStatus> NvmlSource::device_status() const {
  std::vector<NvmlDeviceStatus> out;
  for (const auto& dp : devices_) {
    const DeviceState& d = *dp;
    NvmlDeviceStatus s;
    s.index = d.id.index;
    s.name = d.id.name;
    s.uuid = d.id.uuid;
    s.mig_enabled = d.id.mig_enabled;
    for (const auto& m : d.id.mig) s.mig_instances.push_back(NvmlMigInstance{m.index, m.uuid});

    // acquire pairs with the release stores of fail_code (nvml_device_read.cpp): fail_what is
    // the failing call's.
    const int fc = d.fail_code.load(std::memory_order_acquire);
    if (fc != 0) {
      const char* what = d.fail_what.load(std::memory_order_relaxed);
      s.error = std::string(what != nullptr ? what : "NVML") + ": " +
                nvml_detail::describe_code(*lib_, fc) + "; this GPU's cells are null from then on";
    }

    auto path_reason = [&](const Path& p) -> std::string {
      if (p.field) {
        const int qc = d.query_code[kQFieldValues].load(std::memory_order_relaxed);
        const int c = qc != 0 ? qc : d.field_code[p.id].load(std::memory_order_relaxed);
        if (c == 0) return {};
        return std::string(kQueries[kQFieldValues].name) + "(" + kFields[p.id].name +
               "): " + nvml_detail::describe_code(*lib_, c);
      }
      const int c = d.query_code[p.id].load(std::memory_order_relaxed);
      if (c == 0) return {};
      return std::string(kQueries[p.id].name) + ": " + nvml_detail::describe_code(*lib_, c);
    };
    for (std::size_t m = 0; m < kMetricCount; ++m) {
      const MetricPaths& mp = kMetricPaths[m];
      std::string reason;
      bool all_disabled = true;
      for (std::size_t i = 0; i < mp.n; ++i) {
        const std::string r = path_reason(mp.paths[i]);
        if (r.empty()) {
          all_disabled = false;
          break;
        }
        reason += (reason.empty() ? "" : "; ") + r;
      }
      if (m == kPowerPct && !all_disabled) {
        // power_pct also needs the limit.
        const MetricPaths& lp = kMetricPaths[kPowerLimit];
        std::string lr;
        bool limit_disabled = true;
        for (std::size_t i = 0; i < lp.n && limit_disabled; ++i) {
          const std::string r = path_reason(lp.paths[i]);
          limit_disabled = !r.empty();
          lr += (lr.empty() ? "" : "; ") + r;
        }
        if (limit_disabled) {
          all_disabled = true;
          reason = "no power limit: " + lr;
        }
      }
      if (all_disabled) s.unavailable.push_back(NvmlUnavailable{kMetrics[m].suffix, reason});
    }
    // The calls the budget holds back (a cost above kFreeCostNs).
    auto held = [&s](std::string call, const CallBudget& b) {
      if (b.cost() <= kFreeCostNs) return;
      s.held_back.push_back(NvmlHeldBack{std::move(call), b.cost(), b.cost() * kCallShare});
    };
    for (std::size_t q = 0; q < kQueryCount; ++q) held(kQueries[q].name, d.query_budget[q]);
    for (std::size_t f = 0; f < kFieldCount; ++f) {
      held(std::string(kQueries[kQFieldValues].name) + "(" + kFields[f].name + ")",
           d.field_budget[f]);
    }
    for (std::size_t j = 0; j < d.mig.size(); ++j) {
      const int c = d.mig[j]->code.load(std::memory_order_relaxed);
      if (c == 0) continue;
      const std::string metric = "mig." + std::to_string(d.id.mig[j].index) + ".mem_used_bytes";
      s.unavailable.push_back(NvmlUnavailable{
          metric, "nvmlDeviceGetMemoryInfo(MIG instance): " + nvml_detail::describe_code(*lib_, c)});
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string format_nvml_status(const NvmlStatus& s) {
  std::string out = "NVML library: " + s.library_path + "\n";
  if (!s.loaded) {
    out += "not loaded: " + s.reason + "\n";
    return out;
  }
  out += "driver " + (s.driver_version.empty() ? "?" : s.driver_version) + ", NVML " +
         (s.nvml_version.empty() ? "?" : s.nvml_version) + ", " + std::to_string(s.device_count) +
         " GPU(s)\n";
  if (!s.reason.empty()) out += "error: " + s.reason + "\n";
  std::string missing;
  for (const NvmlSymbol& sym : s.symbols) {
    if (sym.resolved.empty()) missing += (missing.empty() ? "" : ", ") + sym.wanted;
  }
  if (!missing.empty()) out += "functions this NVML lacks: " + missing + "\n";
  for (const NvmlDeviceStatus& d : s.devices) {
    out += "GPU " + std::to_string(d.index) + ": " + d.name + " " + d.uuid;
    if (d.mig_enabled) {
      out += " (MIG on, " + std::to_string(d.mig_instances.size()) + " instance(s))";
    }
    out += "\n";
    if (!d.error.empty()) out += "  failed: " + d.error + "\n";
    for (const NvmlHeldBack& h : d.held_back) {
      out += "  " + h.call + " costs " + std::to_string(h.cost_ns / 1000) + " us: made every " +
             std::to_string(h.every_ns / 1'000'000) + " ms at most (1/" +
             std::to_string(nvml_detail::kCallShare) + " of the poll thread)\n";
    }
    for (const NvmlUnavailable& u : d.unavailable) {
      out += "  " + u.metric + " unavailable: " + u.reason + "\n";
    }
  }
  for (const std::string& note : s.notes) out += "note: " + note + "\n";
  return out;
}

std::optional<unsigned> nvml_index_of_uuid(std::string_view uuid) {
  if (uuid.empty()) return std::nullopt;
  const auto lib = NvmlLibrary::acquire();
  if (!lib->loaded()) return std::nullopt;
  const long long count = nvml_detail::device_count(*lib);
  std::optional<unsigned> prefix_match;
  bool ambiguous = false;
  auto consider = [&](const std::string& candidate, unsigned index) {
    if (candidate == uuid) return true;
    if (candidate.size() > uuid.size() && candidate.compare(0, uuid.size(), uuid) == 0) {
      if (prefix_match.has_value() && *prefix_match != index) ambiguous = true;
      prefix_match = index;
    }
    return false;
  };
  for (long long i = 0; i < count; ++i) {
    const nvml_detail::Identity id = nvml_detail::identify(*lib, static_cast<unsigned>(i));
    if (id.handle_error != 0) continue;
    if (consider(id.uuid, id.index)) return id.index;
    for (const nvml_detail::MigHandle& m : id.mig) {
      if (consider(m.uuid, id.index)) return id.index;
    }
  }
  if (ambiguous) return std::nullopt;
  return prefix_match;
}

bool nvml_available(std::string* reason) {
  const auto lib = NvmlLibrary::acquire();
  if (!lib->loaded()) {
    if (reason != nullptr) *reason = lib->reason();
    return false;
  }
  const long long count = nvml_detail::device_count(*lib);
  if (count <= 0) {
    if (reason != nullptr) {
      *reason = count == 0 ? "NVML found no GPU"
                           : "nvmlDeviceGetCount failed: " +
                                 nvml_detail::describe_code(*lib, static_cast<int>(-count));
    }
    return false;
  }
  return true;
}

}  // namespace stroboscope
