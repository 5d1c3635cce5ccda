// Driver-buffered samples: nvmlDeviceGetSamples per (GPU, kind) with the last seen timestamp, so
// power, utilisation and clocks come at the driver's own resolution, each sample exactly once.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "nvml_internal.hpp"
#include "stroboscope/nvml.hpp"

namespace stroboscope {

using nvml_detail::classify;
using nvml_detail::ErrorClass;

namespace {

// Samples asked for per call; the driver buffers far fewer (about 100 per kind).
constexpr std::size_t kScratchSamples = 2048;

constexpr int kSamplingType[kNvmlSampleKindCount] = {
    nvml::kTotalPowerSamples, nvml::kGpuUtilizationSamples, nvml::kMemoryUtilizationSamples,
    nvml::kProcessorClkSamples, nvml::kMemoryClkSamples};

constexpr bool is_utilisation(NvmlSampleKind k) noexcept {
  return k == NvmlSampleKind::kGpuUtilPct || k == NvmlSampleKind::kMemUtilPct;
}

}  // namespace

const char* nvml_sample_kind_name(NvmlSampleKind kind) noexcept {
  switch (kind) {
    case NvmlSampleKind::kPowerW: return "power_w";
    case NvmlSampleKind::kGpuUtilPct: return "gpu_util_pct";
    case NvmlSampleKind::kMemUtilPct: return "mem_util_pct";
    case NvmlSampleKind::kSmClockMhz: return "sm_clock_mhz";
    case NvmlSampleKind::kMemClockMhz: return "mem_clock_mhz";
  }
  return "unknown";
}

NvmlSampleCollector::NvmlSampleCollector(std::vector<unsigned> devices)
    : lib_(NvmlLibrary::acquire()) {
  if (!lib_->loaded()) {
    throw std::runtime_error("GPU samples are unavailable: " + lib_->reason());
  }
  const long long count = nvml_detail::device_count(*lib_);
  if (count < 0) {
    throw std::runtime_error("GPU samples are unavailable: nvmlDeviceGetCount failed: " +
                             nvml_detail::describe_code(*lib_, static_cast<int>(-count)));
  }
  if (devices.empty()) {
    if (count == 0) throw std::runtime_error("GPU samples are unavailable: NVML found no GPU");
    for (unsigned i = 0; i < static_cast<unsigned>(count); ++i) devices.push_back(i);
  }
  for (unsigned i : devices) {
    if (i >= static_cast<unsigned long long>(count)) {
      throw std::invalid_argument("devices: GPU index " + std::to_string(i) +
                                  " is out of range; NVML sees " + std::to_string(count) +
                                  " GPU(s)");
    }
    if (std::find(indices_.begin(), indices_.end(), i) != indices_.end()) {
      throw std::invalid_argument("devices: GPU index " + std::to_string(i) + " is given twice");
    }
    indices_.push_back(i);
  }
  for (unsigned i : indices_) {
    const nvml_detail::Identity id = nvml_detail::identify(*lib_, i);
    for (std::size_t k = 0; k < kNvmlSampleKindCount; ++k) {
      auto s = std::make_unique<Stream>();
      s->device = id.handle;
      s->gpu = i;
      s->kind = static_cast<NvmlSampleKind>(k);
      int stop = 0;
      if (id.handle_error != 0) {
        stop = id.handle_error;
      } else if (lib_->fn().device_get_samples == nullptr) {
        stop = nvml_detail::kCodeMissingSymbol;
      } else if (id.mig_enabled && is_utilisation(s->kind)) {
        stop = nvml_detail::kCodeMigEnabled;
      }
      s->stop_code.store(stop, std::memory_order_relaxed);
      streams_.push_back(std::move(s));
    }
  }
  scratch_.resize(kScratchSamples);
  order_.resize(kScratchSamples);
}

NvmlSampleCollector::~NvmlSampleCollector() = default;

bool NvmlSampleCollector::collecting(std::size_t position, NvmlSampleKind kind) const noexcept {
  return stop_code(position, kind) == 0;
}

int NvmlSampleCollector::stop_code(std::size_t position, NvmlSampleKind kind) const noexcept {
  const std::size_t i = position * kNvmlSampleKindCount + static_cast<std::size_t>(kind);
  if (position >= indices_.size() || i >= streams_.size()) return nvml::kErrorInvalidArgument;
  return streams_[i]->stop_code.load(std::memory_order_relaxed);
}

std::size_t NvmlSampleCollector::poll(NvmlSampleRow* out, std::size_t capacity) noexcept {
  const NvmlFunctions& f = lib_->fn();
  std::size_t n = 0;
  for (std::size_t si = 0; si < streams_.size() && n < capacity; ++si) {
    Stream& s = *streams_[si];
    if (s.stop_code.load(std::memory_order_relaxed) != 0) continue;
    unsigned count = static_cast<unsigned>(scratch_.size());
    int value_type = nvml::kValueTypeUnsignedInt;
    const int rc = f.device_get_samples(s.device, kSamplingType[static_cast<std::size_t>(s.kind)],
                                        s.last_seen_us, &value_type, &count, scratch_.data());
    if (rc == nvml::kErrorNotFound) continue;  // nothing newer than last_seen_us
    if (rc != nvml::kSuccess) {
      switch (classify(rc)) {
        case ErrorClass::kUnsupported:
          s.stop_code.store(rc, std::memory_order_relaxed);
          break;
        case ErrorClass::kTransient:
          break;
        case ErrorClass::kFatal:
          // The GPU is gone: stop all of its kinds.
          for (auto& other : streams_) {
            if (other->gpu == s.gpu) other->stop_code.store(rc, std::memory_order_relaxed);
          }
          break;
      }
      continue;
    }
    count = std::min<unsigned>(count, static_cast<unsigned>(scratch_.size()));
    // The driver returns only newer samples; check anyway, and order them by time (its buffer is
    // circular, so a batch may start anywhere).
    std::size_t k = 0;
    for (unsigned i = 0; i < count; ++i) {
      if (scratch_[i].timestamp_us > s.last_seen_us) order_[k++] = i;
    }
    std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k),
              [&](std::uint32_t a, std::uint32_t b) {
                return scratch_[a].timestamp_us < scratch_[b].timestamp_us;
              });
    for (std::size_t j = 0; j < k && n < capacity; ++j) {
      const nvml::Sample& smp = scratch_[order_[j]];
      double v = 0.0;
      if (nvml_detail::value_to_double(value_type, smp.value, &v)) {
        if (s.kind == NvmlSampleKind::kPowerW) v /= 1000.0;  // the driver reports mW
        out[n++] = NvmlSampleRow{static_cast<std::int64_t>(smp.timestamp_us), s.gpu, s.kind, v};
      }
      // Rows that did not fit stay newer than last_seen_us and come back next poll.
      s.last_seen_us = smp.timestamp_us;
    }
  }
  return n;
}

}  // namespace stroboscope
