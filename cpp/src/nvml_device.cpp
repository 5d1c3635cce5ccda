// The "gpu" source: one row of NVML device readings per call, per selected GPU. This file builds
// the source (devices, columns, the queries this library can make) and runs a read over its
// devices; nvml_device_read.cpp reads one device, metric group by metric group.
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

#include "nvml_device_read.hpp"

namespace stroboscope {

using namespace nvml_detail;  // the tables and helpers this file reads with

namespace {
// Whether a device gets a column for `m`: every metric does, except one fed only by probed fields
// that the probe found unsupported (a PCIe or NVLink counter this GPU does not have).
bool has_metric(const NvmlSource::DeviceState& d, Metric m) {
  const MetricPaths& mp = kMetricPaths[m];
  for (std::size_t i = 0; i < mp.n; ++i) {
    const Path& p = mp.paths[i];
    if (!p.field || !kFields[p.id].probed || d.field_usable(static_cast<Field>(p.id))) return true;
  }
  return false;
}
}  // namespace

namespace nvml_detail {

std::vector<unsigned> select_devices(const NvmlLibrary& lib, const NvmlSourceOptions& options,
                                     const char* what) {
  std::vector<unsigned> indices;
  const long long count = device_count(lib);
  if (count < 0) {
    throw std::runtime_error(std::string(what) +
                             " is unavailable: nvmlDeviceGetCount failed: " +
                             describe_code(lib, static_cast<int>(-count)));
  }
  if (options.devices.empty()) {
    if (count == 0) {
      throw std::runtime_error(std::string(what) + " is unavailable: NVML found no GPU");
    }
    for (unsigned i = 0; i < static_cast<unsigned>(count); ++i) indices.push_back(i);
  } else {
    for (unsigned i : options.devices) {
      if (i >= static_cast<unsigned long long>(count)) {
        throw std::invalid_argument(
            "devices: GPU index " + std::to_string(i) + " is out of range; NVML sees " +
            std::to_string(count) + " GPU(s)" +
            (count > 0 ? " (indices 0.." + std::to_string(count - 1) + ")" : std::string()));
      }
      if (std::find(indices.begin(), indices.end(), i) != indices.end()) {
        throw std::invalid_argument("devices: GPU index " + std::to_string(i) +
                                    " is given twice");
      }
      indices.push_back(i);
    }
  }
  if (!options.labels.empty() && options.labels.size() != indices.size()) {
    throw std::invalid_argument("labels: " + std::to_string(options.labels.size()) +
                                " label(s) given for " + std::to_string(indices.size()) +
                                " device(s); give one per device or none");
  }
  return indices;
}

}  // namespace nvml_detail

NvmlSource::NvmlSource(std::vector<unsigned> devices, int pid)
    : NvmlSource(NvmlSourceOptions{std::move(devices), {}, pid, true, "/proc", 1024,
                                   100'000'000}) {}

NvmlSource::NvmlSource(const NvmlSourceOptions& options)
    : Source("gpu"), lib_(NvmlLibrary::acquire()) {
  if (!lib_->loaded()) throw std::runtime_error("the gpu source is unavailable: " + lib_->reason());
  indices_ = nvml_detail::select_devices(*lib_, options, "the gpu source");
  pid_ = options.pid > 0 ? static_cast<unsigned>(options.pid) : static_cast<unsigned>(getpid());
  max_processes_ = std::max(1u, options.max_processes);
  // An empty root opens nothing: the tree is then the monitored process alone.
  tree_ = std::make_unique<ProcessTree>(pid_, options.include_children ? options.proc_root : "");

  for (std::size_t pos = 0; pos < indices_.size(); ++pos) {
    auto d = std::make_unique<DeviceState>();
    d->id = nvml_detail::identify(*lib_, indices_[pos]);
    d->label = options.labels.empty() ? std::to_string(indices_[pos]) : options.labels[pos];
    // A query whose function this library lacks is disabled from the start.
    for (const QuerySpec& q : kQueries) {
      if (!q.present(lib_->fn())) {
        d->query_code[q.query].store(kCodeMissingSymbol, std::memory_order_relaxed);
      }
    }
    if (d->id.mig_enabled) {
      // Under MIG, NVML gives no device-level utilisation; do not ask.
      d->query_code[kQUtil].store(kCodeMigEnabled, std::memory_order_relaxed);
      d->query_code[kQProcUtil].store(kCodeMigEnabled, std::memory_order_relaxed);
    }
    if (d->id.handle_error != 0) {
      d->fail_what.store("nvmlDeviceGetHandleByIndex", std::memory_order_relaxed);
      d->fail_code.store(d->id.handle_error, std::memory_order_release);
    }
    // Byte counters the device cannot give get no column (probe_fields); the others start their
    // rate windows at the source's width.
    nvml_detail::probe_fields(*d, lib_->fn());
    for (nvml_detail::FieldCounter* c : {&d->pcie_tx, &d->pcie_rx, &d->nvlink_tx, &d->nvlink_rx}) {
      c->set_window(std::max<std::int64_t>(0, options.rate_window_ns));
    }
    d->compute_buf.resize(static_cast<std::size_t>(max_processes_) * nvml::kProcessInfoMaxStride);
    d->graphics_buf.resize(d->compute_buf.size());
    d->util_buf.resize(max_processes_);
    d->other_pids.resize(2 * static_cast<std::size_t>(max_processes_));
    d->mine_mem.resize(2 * static_cast<std::size_t>(max_processes_));
    d->mine_util.resize(max_processes_);

    const std::string prefix = "gpu." + d->label + ".";
    for (std::size_t m = 0; m < kMetricCount; ++m) {
      d->col[m] = kNoColumn;
      if (!has_metric(*d, static_cast<Metric>(m))) continue;
      d->col[m] = columns().size();
      add_column(prefix + kMetrics[m].suffix, kMetrics[m].unit, kMetrics[m].dtype,
                 kMetrics[m].kind, kMetrics[m].help);
    }
    for (const nvml_detail::MigHandle& mh : d->id.mig) {
      auto m = std::make_unique<DeviceState::Mig>();
      const std::string mp = prefix + "mig." + std::to_string(mh.index) + ".";
      m->col_used = columns().size();
      add_column(mp + "mem_used_bytes", "bytes", DType::kInt64, Kind::kGauge,
                 "Device memory in use on this MIG instance.");
      m->col_total = columns().size();
      add_column(mp + "mem_total_bytes", "bytes", DType::kInt64, Kind::kGauge,
                 "Device memory of this MIG instance.");
      d->mig.push_back(std::move(m));
    }
    devices_.push_back(std::move(d));
  }
  // Last: a source listed here is whole (nvml_status() may ask it from another thread now).
  std::lock_guard<std::mutex> lock(live_sources_mutex());
  live_sources().push_back(this);
}

// Out of line: ProcessTree is complete here.
NvmlSource::~NvmlSource() {
  std::lock_guard<std::mutex> lock(live_sources_mutex());
  auto& live = live_sources();
  live.erase(std::remove(live.begin(), live.end(), this), live.end());
}

void NvmlSource::read(RowWriter row, std::int64_t now_ns) noexcept {
  int first_failure = 0;
  tree_->begin();
  for (auto& d : devices_) {
    read_device(*d, row, now_ns);
    const int code = d->fail_code.load(std::memory_order_relaxed);
    if (code != 0 && first_failure == 0) first_failure = code;
  }
  if (first_failure == 0) {
    ok();
  } else if (first_failure == nvml::kErrorGpuIsLost) {
    fail("NVML: a GPU is lost; its cells are null from then on (see gpu_status())", first_failure);
  } else {
    fail("NVML: queries to a GPU failed; its cells are null from then on (see gpu_status())",
         first_failure);
  }
}

std::unique_ptr<Source> make_nvml_source(const SourceOptions& opts) {
  NvmlSourceOptions o;
  o.pid = opts.pid;
  o.devices = opts.gpu_devices;
  o.labels = opts.gpu_labels;
  o.rate_window_ns = opts.rate_window_ns;
  o.proc_root = opts.proc_root;
  return std::make_unique<NvmlSource>(o);
}

}  // namespace stroboscope
