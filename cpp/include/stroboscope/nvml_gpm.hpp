// The "gpu_gpm" source: GPM (GPU Performance Monitoring) metrics of the GPUs that support it
// (Hopper and newer): SM activity and occupancy, tensor/HMMA/FP16/FP32/FP64 pipe activity, DRAM
// bandwidth utilisation, PCIe and NVLink throughput, as gpu.{i}.* columns.
//
// A GPM metric describes the interval between two samples of the device's counters, which NVML
// requires to be more than 100 ms apart: so this source runs at 10 Hz at most, on its own polled
// thread (slow()), and never waits for a pair. It keeps the previous sample: each poll takes one
// new sample (nvmlGpmSampleGet) and computes the metrics of the pair (previous, new) on the host
// (nvmlGpmMetricsGet); a poll that comes within 100 ms of the kept sample takes nothing and leaves
// its cells null, so a pair is never too short. A GPU without GPM has no columns here, and
// gpu_status() says why under its "gpm" entry.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stroboscope/nvml.hpp"

namespace stroboscope {

class NvmlGpmSource final : public Source {
 public:
  // Uses options.devices and options.labels as the "gpu" source does. Throws std::runtime_error
  // (saying why, per GPU) when NVML is unavailable or no selected GPU supports GPM, and
  // std::invalid_argument for a bad index or labels of the wrong length.
  explicit NvmlGpmSource(const NvmlSourceOptions& options);
  ~NvmlGpmSource() override;

  void read(RowWriter row, std::int64_t now_ns) noexcept override;
  [[nodiscard]] bool slow() const noexcept override { return true; }
  [[nodiscard]] std::int64_t natural_resolution_ns() const noexcept override {
    return kResolutionNs;
  }
  [[nodiscard]] const char* resolution_reason() const noexcept override {
    return "GPM metrics need two samples more than 100 ms apart (nvml.h); 125 ms keeps each "
           "pair apart despite wake-up jitter";
  }
  [[nodiscard]] const char* interface() const noexcept override {
    return "nvmlGpmSampleGet + nvmlGpmMetricsGet";
  }

  // NVML indices of the GPUs with GPM columns, in column order.
  [[nodiscard]] std::vector<unsigned> device_indices() const;

  // What GPU `index` stopped giving after its support was reported (the whole of GPM, or single
  // metrics), with NVML's words: for gpu_status(). Not for the hot path.
  [[nodiscard]] std::vector<NvmlUnavailable> stopped(unsigned index) const;

  // NVML wants the samples of a pair more than 100 ms apart; 1 ms more covers the few µs
  // between the read's clock and the sample itself.
  static constexpr std::int64_t kMinPairNs = 101'000'000;
  static constexpr std::int64_t kResolutionNs = 125'000'000;

  struct Device;  // handle, the two samples, columns and support codes (nvml_gpm.cpp)

 private:
  std::shared_ptr<const NvmlLibrary> lib_;
  std::vector<std::unique_ptr<Device>> devices_;
  // The request nvmlGpmMetricsGet fills (13 KB): built once, reused by every poll.
  std::unique_ptr<nvml::GpmMetricsGet> request_;
};

// Why GPM gives nothing on the GPU `index` of this library: empty when it is supported. Not for
// the hot path.
[[nodiscard]] std::string nvml_gpm_unavailable(const NvmlLibrary& lib, unsigned index);

// What the live "gpu_gpm" sources found GPU `index` stopped giving (see
// NvmlGpmSource::stopped); empty when none says so. Not for the hot path.
[[nodiscard]] std::vector<NvmlUnavailable> nvml_gpm_stopped(unsigned index);

// For the registry: the "gpu_gpm" source over every GPU that supports GPM. Throws like
// NvmlGpmSource.
[[nodiscard]] std::unique_ptr<Source> make_nvml_gpm_source(const SourceOptions& opts);

// Whether NVML loads here and at least one GPU supports GPM. Not for hot paths.
[[nodiscard]] bool nvml_gpm_available();

}  // namespace stroboscope
