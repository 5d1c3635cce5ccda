// The "gpu_gpm" source (see nvml_gpm.hpp): GPM metrics from pairs of device samples, one new
// sample per poll, the previous one kept.
#include "stroboscope/nvml_gpm.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nvml_internal.hpp"

namespace stroboscope {

using namespace nvml_detail;  // select_devices, classify, describe_code

namespace {

struct GpmSpec {
  unsigned id;        // nvmlGpmMetricId_t
  const char* suffix;
  const char* unit;
  double scale;       // to the column's unit: 1 for %, 2^20 for NVML's MiB/s
  const char* help;
};

constexpr double kMiB = 1048576.0;

// The columns of one GPU, in order. Each value describes the interval between the two samples
// of its pair (100-200 ms at the default rate), not an instant.
constexpr GpmSpec kGpm[] = {
    {nvml::kGpmSmUtil, "sm_active_pct", "%", 1.0,
     "GPM: percent of SMs busy over the sample pair (DCGM's SM_ACTIVE)."},
    {nvml::kGpmSmOccupancy, "sm_occupancy_pct", "%", 1.0,
     "GPM: resident warps as a percent of the theoretical maximum over the sample pair."},
    {nvml::kGpmAnyTensorUtil, "tensor_active_pct", "%", 1.0,
     "GPM: percent of time the SMs ran any tensor (matrix) instruction over the sample pair."},
    {nvml::kGpmHmmaTensorUtil, "hmma_active_pct", "%", 1.0,
     "GPM: percent of time the SMs ran HMMA (FP16/BF16 tensor) instructions."},
    {nvml::kGpmFp16Util, "fp16_active_pct", "%", 1.0,
     "GPM: percent of time the SMs ran non-tensor FP16 math."},
    {nvml::kGpmFp32Util, "fp32_active_pct", "%", 1.0,
     "GPM: percent of time the SMs ran non-tensor FP32 math."},
    {nvml::kGpmFp64Util, "fp64_active_pct", "%", 1.0,
     "GPM: percent of time the SMs ran non-tensor FP64 math."},
    {nvml::kGpmDramBwUtil, "dram_active_pct", "%", 1.0,
     "GPM: DRAM bandwidth used as a percent of the theoretical maximum."},
    {nvml::kGpmPcieTxPerSec, "gpm_pcie_tx_bytes_per_s", "bytes/s", kMiB,
     "GPM: PCIe bytes per second from this GPU over the sample pair (NVML gives MiB/s)."},
    {nvml::kGpmPcieRxPerSec, "gpm_pcie_rx_bytes_per_s", "bytes/s", kMiB,
     "GPM: PCIe bytes per second to this GPU over the sample pair (NVML gives MiB/s)."},
    {nvml::kGpmNvlinkTotalTxPerSec, "gpm_nvlink_tx_bytes_per_s", "bytes/s", kMiB,
     "GPM: NVLink bytes per second written by this GPU, all links (NVML gives MiB/s)."},
    {nvml::kGpmNvlinkTotalRxPerSec, "gpm_nvlink_rx_bytes_per_s", "bytes/s", kMiB,
     "GPM: NVLink bytes per second read by this GPU, all links (NVML gives MiB/s)."},
};
constexpr std::size_t kGpmCount = sizeof kGpm / sizeof kGpm[0];
static_assert(kGpmCount <= nvml::kGpmMetricArraySize);

bool has_gpm_functions(const NvmlFunctions& f) noexcept {
  return f.gpm_query_device_support != nullptr && f.gpm_sample_alloc != nullptr &&
         f.gpm_sample_free != nullptr && f.gpm_sample_get != nullptr &&
         f.gpm_metrics_get != nullptr;
}

}  // namespace

struct NvmlGpmSource::Device {
  unsigned index = 0;
  nvml::Device handle = nullptr;
  std::size_t col[kGpmCount] = {};
  nvml::GpmSample previous = nullptr;  // the kept sample: the first of the next pair
  nvml::GpmSample next = nullptr;      // filled by the next poll, then swapped with previous
  bool have_previous = false;
  std::int64_t previous_ns = 0;        // CLOCK_MONOTONIC just before `previous` was taken
  // Per metric: why it is no longer asked (0: still asked). Set by the poll thread, read by it
  // and by gpu_status() (relaxed: each is a code on its own, with nothing else to publish).
  std::atomic<int> metric_code[kGpmCount] = {};
  std::atomic<int> fail_code{0};     // the GPU failed (lost): nothing is asked again, the read fails
  std::atomic<int> stopped_code{0};  // sampling not supported after all (MIG...): nothing asked
};

namespace {

// The "gpu_gpm" sources alive in this process, for gpu_status() to say why a GPU that supports
// GPM stopped giving values. The mutex is held while a listed source is read, and a source
// leaves the list in its destructor under it.
std::mutex& live_gpm_mutex() {
  static std::mutex m;
  return m;
}
std::vector<const NvmlGpmSource*>& live_gpm_sources() {
  static std::vector<const NvmlGpmSource*> v;
  return v;
}

}  // namespace

std::vector<NvmlUnavailable> NvmlGpmSource::stopped(unsigned index) const {
  std::vector<NvmlUnavailable> out;
  for (const auto& d : devices_) {
    if (d->index != index) continue;
    const int stopped = d->stopped_code.load(std::memory_order_relaxed);
    if (stopped != 0) {
      out.push_back({"gpm", "nvmlGpmSampleGet or nvmlGpmMetricsGet: " +
                                describe_code(*lib_, stopped) +
                                " after the GPU reported GPM support; its GPM cells stay null"});
    }
    for (std::size_t m = 0; m < kGpmCount; ++m) {
      const int code = d->metric_code[m].load(std::memory_order_relaxed);
      if (code != 0) {
        out.push_back({kGpm[m].suffix, "nvmlGpmMetricsGet: " + describe_code(*lib_, code)});
      }
    }
  }
  return out;
}

std::vector<NvmlUnavailable> nvml_gpm_stopped(unsigned index) {
  std::lock_guard<std::mutex> lock(live_gpm_mutex());
  for (const NvmlGpmSource* src : live_gpm_sources()) {
    std::vector<NvmlUnavailable> out = src->stopped(index);
    if (!out.empty()) return out;
  }
  return {};
}

std::string nvml_gpm_unavailable(const NvmlLibrary& lib, unsigned index) {
  if (!has_gpm_functions(lib.fn())) {
    return "this NVML library does not export the nvmlGpm* functions (a driver before R520)";
  }
  nvml::Device h = nullptr;
  int rc = lib.fn().device_get_handle_by_index(index, &h);
  if (rc != nvml::kSuccess) return "nvmlDeviceGetHandleByIndex: " + describe_code(lib, rc);
  nvml::GpmSupport support{};
  support.version = nvml::kGpmSupportVersion;
  rc = lib.fn().gpm_query_device_support(h, &support);
  if (rc != nvml::kSuccess) return "nvmlGpmQueryDeviceSupport: " + describe_code(lib, rc);
  if (support.is_supported_device == 0) {
    return "nvmlGpmQueryDeviceSupport: this GPU does not support GPM (Hopper or newer needed)";
  }
  return {};
}

NvmlGpmSource::NvmlGpmSource(const NvmlSourceOptions& options)
    : Source("gpu_gpm"), lib_(NvmlLibrary::acquire()) {
  if (!lib_->loaded()) throw std::runtime_error("GPM is unavailable: " + lib_->reason());
  const std::vector<unsigned> indices = select_devices(*lib_, options, "GPM");
  const NvmlFunctions& f = lib_->fn();
  std::string why_none;
  for (std::size_t pos = 0; pos < indices.size(); ++pos) {
    const std::string why = nvml_gpm_unavailable(*lib_, indices[pos]);
    if (!why.empty()) {
      why_none += (why_none.empty() ? "" : "; ") + ("GPU " + std::to_string(indices[pos])) +
                  ": " + why;
      continue;
    }
    auto d = std::make_unique<Device>();
    d->index = indices[pos];
    (void)f.device_get_handle_by_index(d->index, &d->handle);
    if (f.gpm_sample_alloc(&d->previous) != nvml::kSuccess ||
        f.gpm_sample_alloc(&d->next) != nvml::kSuccess) {
      if (d->previous != nullptr) f.gpm_sample_free(d->previous);
      why_none += (why_none.empty() ? "" : "; ") + ("GPU " + std::to_string(d->index)) +
                  ": nvmlGpmSampleAlloc failed";
      continue;
    }
    const std::string label =
        options.labels.empty() ? std::to_string(d->index) : options.labels[pos];
    for (std::size_t m = 0; m < kGpmCount; ++m) {
      d->col[m] = columns().size();
      add_column("gpu." + label + "." + kGpm[m].suffix, kGpm[m].unit, DType::kFloat64,
                 Kind::kGauge, kGpm[m].help);
    }
    devices_.push_back(std::move(d));
  }
  if (devices_.empty()) throw std::runtime_error("GPM is unavailable: " + why_none);
  request_ = std::make_unique<nvml::GpmMetricsGet>();
  std::lock_guard<std::mutex> lock(live_gpm_mutex());
  live_gpm_sources().push_back(this);
}

NvmlGpmSource::~NvmlGpmSource() {
  {
    std::lock_guard<std::mutex> lock(live_gpm_mutex());
    auto& live = live_gpm_sources();
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
  }
  for (const auto& d : devices_) {
    lib_->fn().gpm_sample_free(d->previous);
    lib_->fn().gpm_sample_free(d->next);
  }
}

std::vector<unsigned> NvmlGpmSource::device_indices() const {
  std::vector<unsigned> out;
  for (const auto& d : devices_) out.push_back(d->index);
  return out;
}

void NvmlGpmSource::read(RowWriter row, std::int64_t now_ns) noexcept {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  const NvmlFunctions& f = lib_->fn();
  int failure = 0;
  for (const auto& dp : devices_) {
    Device& d = *dp;
    if (const int fc = d.fail_code.load(std::memory_order_relaxed); fc != 0) {
      failure = fc;
      continue;
    }
    if (d.stopped_code.load(std::memory_order_relaxed) != 0) continue;
    // The read's CLOCK_MONOTONIC (a polled source gets the poll's own clock, read just before
    // this call), so the samples of a pair are at least kMinPairNs apart.
    const std::int64_t t = now_ns;
    if (d.have_previous && t - d.previous_ns <= kMinPairNs) continue;  // too close: wait
    const int rc = f.gpm_sample_get(d.handle, d.have_previous ? d.next : d.previous);
    if (rc != nvml::kSuccess) {
      if (classify(rc) == ErrorClass::kUnsupported) d.stopped_code.store(rc, kRelaxed);
      if (classify(rc) == ErrorClass::kFatal) d.fail_code.store(failure = rc, kRelaxed);
      continue;
    }
    if (!d.have_previous) {  // the first sample opens the first pair
      d.have_previous = true;
      d.previous_ns = t;
      continue;
    }
    nvml::GpmMetricsGet& req = *request_;
    req.version = nvml::kGpmMetricsGetVersion;
    req.sample1 = d.previous;
    req.sample2 = d.next;
    std::size_t asked[kGpmCount];
    unsigned n = 0;
    for (std::size_t m = 0; m < kGpmCount; ++m) {
      if (d.metric_code[m].load(kRelaxed) != 0) continue;
      req.metrics[n] = nvml::GpmMetric{};
      req.metrics[n].metric_id = kGpm[m].id;
      asked[n++] = m;
    }
    req.num_metrics = n;
    const int mrc = n > 0 ? f.gpm_metrics_get(&req) : nvml::kSuccess;
    // The new sample is kept either way: it opens the next pair.
    std::swap(d.previous, d.next);
    d.previous_ns = t;
    if (mrc != nvml::kSuccess) {
      if (classify(mrc) == ErrorClass::kUnsupported) d.stopped_code.store(mrc, kRelaxed);
      if (classify(mrc) == ErrorClass::kFatal) d.fail_code.store(failure = mrc, kRelaxed);
      continue;
    }
    for (unsigned i = 0; i < n; ++i) {
      const nvml::GpmMetric& g = req.metrics[i];
      const std::size_t m = asked[i];
      if (g.nvml_return == nvml::kSuccess) {
        row.set_f64(d.col[m], g.value * kGpm[m].scale);
      } else if (classify(g.nvml_return) == ErrorClass::kUnsupported) {
        d.metric_code[m].store(g.nvml_return, kRelaxed);  // not asked again; cells stay null
      }
    }
  }
  if (failure == 0) {
    ok();
  } else if (failure == nvml::kErrorGpuIsLost) {
    fail("NVML GPM: a GPU is lost; its GPM cells are null from then on", failure);
  } else {
    fail("NVML GPM: sampling a GPU failed; its GPM cells are null from then on", failure);
  }
}

std::unique_ptr<Source> make_nvml_gpm_source(const SourceOptions& opts) {
  NvmlSourceOptions o;
  o.devices = opts.gpu_devices;
  o.labels = opts.gpu_labels;
  return std::make_unique<NvmlGpmSource>(o);
}

bool nvml_gpm_available() {
  const auto lib = NvmlLibrary::acquire();
  if (!lib->loaded()) return false;
  const long long count = device_count(*lib);
  for (long long i = 0; i < count; ++i) {
    if (nvml_gpm_unavailable(*lib, static_cast<unsigned>(i)).empty()) return true;
  }
  return false;
}

}  // namespace stroboscope
