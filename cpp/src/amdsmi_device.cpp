// The "amd_gpu" source: one row of amdsmi readings per call, per AMD GPU, metric group by metric
// group. Column names, units, types and kinds are the NVML gpu source's (nvml_detail::kMetrics):
// the same name means the same quantity on either vendor; only the help says how AMD measures it.
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#include "nvml_source_state.hpp"
#include "stroboscope/amdsmi.hpp"
#include "stroboscope/nvml.hpp"

namespace stroboscope {
namespace {

using nvml_detail::Metric;

// The columns of one AMD device, in order; each names the gpu source's metric it shares.
enum AmdMetric : std::size_t {
  kAUtil, kAMemUtil, kAMemUsed, kAMemTotal, kATemp, kAPower, kAEnergy, kAGfxClock, kAMemClock,
  kAmdMetricCount
};

struct AmdMetricSpec {
  Metric shared;     // the vendor-neutral column (suffix, unit, dtype, kind) of the gpu source
  const char* help;  // how amdsmi measures it
};

inline constexpr AmdMetricSpec kAmdMetrics[kAmdMetricCount] = {
    {nvml_detail::kUtil,
     "Percent of time the graphics/compute engine was busy (amdsmi gfx_activity, the firmware's "
     "average over its own short window)."},
    {nvml_detail::kMemUtil,
     "Percent of time the memory controller was busy (amdsmi umc_activity)."},
    {nvml_detail::kMemUsed, "VRAM in use (amdsmi_get_gpu_memory_usage, AMDSMI_MEM_TYPE_VRAM)."},
    {nvml_detail::kMemTotal, "Total VRAM (amdsmi_get_gpu_memory_total)."},
    {nvml_detail::kTemp,
     "Junction (hotspot) temperature, the hottest die sensor (AMDSMI_TEMPERATURE_TYPE_HOTSPOT)."},
    {nvml_detail::kPower,
     "Socket power averaged between this reading of the energy accumulator and the previous one, "
     "timed by amdsmi's own timestamps of the two readings (null on the first reading)."},
    {nvml_detail::kEnergy,
     "Energy the GPU socket consumed since this source's first reading, from amdsmi's energy "
     "accumulator (ticks of counter_resolution µJ, typically 15.3 µJ; whole mJ, wrap-safe)."},
    {nvml_detail::kGfxClock, "Current graphics (GFX/SCLK) clock (AMDSMI_CLK_TYPE_GFX)."},
    {nvml_detail::kMemClock, "Current memory clock (AMDSMI_CLK_TYPE_MEM)."},
};

// The amdsmi calls a read makes; each can be disabled on its own.
enum Group : std::size_t {
  kGActivity, kGMemory, kGTemp, kGEnergy, kGGfxClock, kGMemClock, kGroupCount
};

// Why a read left a group's cells null (static strings: no allocation on the hot path).
constexpr const char* kFailure[kGroupCount] = {
    "amdsmi_get_gpu_activity failed on an AMD GPU: util_pct and mem_util_pct are null",
    "amdsmi_get_gpu_memory_usage/total failed on an AMD GPU: mem_*_bytes are null",
    "amdsmi_get_temp_metric failed on an AMD GPU: temp_c is null",
    "amdsmi_get_energy_count failed on an AMD GPU: energy_mj and power_w are null",
    "amdsmi_get_clock_info(GFX) failed on an AMD GPU: graphics_clock_mhz is null",
    "amdsmi_get_clock_info(MEM) failed on an AMD GPU: mem_clock_mhz is null",
};

}  // namespace

struct AmdGpuSource::Device {
  amdsmi::ProcessorHandle handle = nullptr;
  std::size_t first_col = 0;  // its columns are first_col + AmdMetric
  // The status that disabled each group (0: still asked). Written by read(), read by
  // disabled_code() on any thread; each value stands alone, so relaxed order is enough.
  std::array<std::atomic<std::uint32_t>, kGroupCount> disabled{};
  // State of the reading thread only.
  bool energy_started = false;
  std::uint64_t energy_prev_ticks = 0;
  std::uint64_t energy_prev_ts_ns = 0;
  double energy_uj = 0.0;  // since the first reading
  bool power_known = false;
  double power_w = 0.0;
};

AmdGpuSource::AmdGpuSource(unsigned label_offset)
    : Source("amd_gpu"), lib_(AmdSmiLibrary::acquire()) {
  if (!lib_->loaded()) {
    throw std::runtime_error("the amd_gpu source is unavailable: " + lib_->reason());
  }
  if (lib_->gpus().empty()) {
    throw std::runtime_error("the amd_gpu source is unavailable: amdsmi found no AMD GPU");
  }
  const AmdSmiFunctions& f = lib_->fn();
  const bool present[kGroupCount] = {
      f.get_gpu_activity != nullptr,
      f.get_gpu_memory_usage != nullptr && f.get_gpu_memory_total != nullptr,
      f.get_temp_metric != nullptr, f.get_energy_count != nullptr,
      f.get_clock_info != nullptr, f.get_clock_info != nullptr};
  for (std::size_t k = 0; k < lib_->gpus().size(); ++k) {
    auto d = std::make_unique<Device>();
    d->handle = lib_->gpus()[k];
    // A call this library lacks is disabled from the start (its cells stay null).
    for (std::size_t g = 0; g < kGroupCount; ++g) {
      d->disabled[g].store(present[g] ? 0 : amdsmi::kNotYetImplemented, std::memory_order_relaxed);
    }
    d->first_col = columns().size();
    const std::string prefix = "gpu." + std::to_string(label_offset + k) + ".";
    for (const AmdMetricSpec& m : kAmdMetrics) {
      const nvml_detail::MetricSpec& s = nvml_detail::kMetrics[m.shared];
      add_column(prefix + s.suffix, s.unit, s.dtype, s.kind, m.help);
    }
    devices_.push_back(std::move(d));
  }
}

AmdGpuSource::~AmdGpuSource() = default;

std::uint32_t AmdGpuSource::disabled_code(std::size_t device, std::size_t group) const noexcept {
  if (device >= devices_.size() || group >= kGroupCount) return 0;
  return devices_[device]->disabled[group].load(std::memory_order_relaxed);
}

namespace {

// Runs one group's call on a device: true when its cells can be written. NOT_SUPPORTED (or not
// implemented) disables the group for good; any other failure nulls it for this read and names it.
template <typename Call>
bool ask(std::atomic<std::uint32_t>& disabled, Group g, const char** failure, Call call) noexcept {
  if (disabled.load(std::memory_order_relaxed) != 0) return false;
  const amdsmi::Status s = call();
  if (s == amdsmi::kSuccess) return true;
  if (s == amdsmi::kNotSupported || s == amdsmi::kNotYetImplemented) {
    disabled.store(s, std::memory_order_relaxed);
  } else if (*failure == nullptr) {
    *failure = kFailure[g];
  }
  return false;
}

}  // namespace

void AmdGpuSource::read(RowWriter row, std::int64_t /*now_ns*/) noexcept {
  const AmdSmiFunctions& f = lib_->fn();
  const char* failure = nullptr;
  for (auto& dp : devices_) {
    Device& d = *dp;
    const std::size_t c = d.first_col;
    void* const h = d.handle;

    amdsmi::EngineUsage usage{};
    if (ask(d.disabled[kGActivity], kGActivity, &failure,
            [&] { return f.get_gpu_activity(h, &usage); })) {
      row.set_f64(c + kAUtil, usage.gfx_activity);
      row.set_f64(c + kAMemUtil, usage.umc_activity);
    }
    std::uint64_t used = 0, total = 0;
    if (ask(d.disabled[kGMemory], kGMemory, &failure, [&] {
          const amdsmi::Status s = f.get_gpu_memory_usage(h, amdsmi::kMemTypeVram, &used);
          if (s != amdsmi::kSuccess) return s;
          return f.get_gpu_memory_total(h, amdsmi::kMemTypeVram, &total);
        })) {
      row.set_i64(c + kAMemUsed, static_cast<std::int64_t>(used));
      row.set_i64(c + kAMemTotal, static_cast<std::int64_t>(total));
    }
    std::int64_t temp = 0;
    if (ask(d.disabled[kGTemp], kGTemp, &failure, [&] {
          return f.get_temp_metric(h, amdsmi::kTempTypeHotspot, amdsmi::kTempCurrent, &temp);
        })) {
      row.set_f64(c + kATemp, static_cast<double>(temp));
    }
    std::uint64_t ticks = 0, ts_ns = 0;
    float resolution_uj = 0.0f;
    if (ask(d.disabled[kGEnergy], kGEnergy, &failure,
            [&] { return f.get_energy_count(h, &ticks, &resolution_uj, &ts_ns); })) {
      if (d.energy_started) {
        const double delta_uj =
            static_cast<double>(amdsmi_energy_delta(d.energy_prev_ticks, ticks)) * resolution_uj;
        d.energy_uj += delta_uj;
        // µJ per ns is kW: times 1e3 for W. Equal timestamps: the firmware has not updated the
        // accumulator since the last poll, so the previous power still stands.
        if (ts_ns > d.energy_prev_ts_ns) {
          d.power_w = delta_uj * 1e3 / static_cast<double>(ts_ns - d.energy_prev_ts_ns);
          d.power_known = true;
        }
      }
      d.energy_started = true;
      d.energy_prev_ticks = ticks;
      d.energy_prev_ts_ns = ts_ns;
      row.set_i64(c + kAEnergy, static_cast<std::int64_t>(std::floor(d.energy_uj / 1000.0)));
      if (d.power_known) row.set_f64(c + kAPower, d.power_w);
    }
    amdsmi::ClkInfoBuffer clk{};
    if (ask(d.disabled[kGGfxClock], kGGfxClock, &failure,
            [&] { return f.get_clock_info(h, amdsmi::kClkTypeGfx, &clk); })) {
      row.set_i64(c + kAGfxClock, clk.current_mhz);
    }
    clk = amdsmi::ClkInfoBuffer{};
    if (ask(d.disabled[kGMemClock], kGMemClock, &failure,
            [&] { return f.get_clock_info(h, amdsmi::kClkTypeMem, &clk); })) {
      row.set_i64(c + kAMemClock, clk.current_mhz);
    }
  }
  if (failure == nullptr) {
    ok();
  } else {
    fail(failure);
  }
}

std::unique_ptr<Source> make_amd_gpu_source(const SourceOptions& /*opts*/) {
  // AMD GPUs are numbered after NVML's (see amdsmi.hpp); 0 where NVML is absent or sees none.
  unsigned offset = 0;
  auto nvml = NvmlLibrary::acquire();
  if (nvml->loaded() && nvml->fn().device_get_count != nullptr) {
    unsigned n = 0;
    if (nvml->fn().device_get_count(&n) == nvml::kSuccess) offset = n;
  }
  return std::make_unique<AmdGpuSource>(offset);
}

}  // namespace stroboscope
