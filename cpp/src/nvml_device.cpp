// The "gpu" source: one row of NVML device readings per call, per selected GPU.
//
// Per device and read: one nvmlDeviceGetFieldValues batch (instant power, enforced limit, energy,
// PCIe bytes, ECC counts) where the driver supports it, then the plain queries (memory,
// utilisation, temperature, clocks, fan, clock-event reasons, processes). A query the device
// cannot answer is disabled for good (with its code kept for gpu_status()), a passing error
// leaves one cell null, and a lost GPU turns all of its cells null from then on.
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "nvml_source_state.hpp"

namespace stroboscope {

using namespace nvml_detail;  // the tables and helpers this file reads with

std::size_t nvml_detail::process_info_stride(const unsigned char* buf, unsigned count,
                                             int version) noexcept {
  if (version <= 1) return sizeof(nvml::ProcessInfoV1);
  if (count < 2) return sizeof(nvml::ProcessInfoV2);
  auto plausible = [&](std::size_t stride) {
    for (unsigned i = 0; i < count; ++i) {
      const unsigned char* p = buf + static_cast<std::size_t>(i) * stride;
      unsigned pid = 0, gi = 0, ci = 0;
      std::memcpy(&pid, p, sizeof pid);
      std::memcpy(&gi, p + 16, sizeof gi);
      std::memcpy(&ci, p + 20, sizeof ci);
      if (pid == 0 || pid > kMaxPid) return false;
      if (gi != nvml::kInstanceIdNone && gi > 64) return false;
      if (ci != nvml::kInstanceIdNone && ci > 64) return false;
    }
    return true;
  };
  if (plausible(sizeof(nvml::ProcessInfoV2))) return sizeof(nvml::ProcessInfoV2);
  if (plausible(nvml::kProcessInfoMaxStride)) return nvml::kProcessInfoMaxStride;
  return sizeof(nvml::ProcessInfoV2);
}

NvmlSource::NvmlSource(std::vector<unsigned> devices, int pid)
    : NvmlSource(NvmlSourceOptions{std::move(devices), {}, pid, 1024}) {}

NvmlSource::NvmlSource(const NvmlSourceOptions& options)
    : Source("gpu"), lib_(NvmlLibrary::acquire()) {
  if (!lib_->loaded()) throw std::runtime_error("the gpu source is unavailable: " + lib_->reason());
  const long long count = nvml_detail::device_count(*lib_);
  if (count < 0) {
    throw std::runtime_error("the gpu source is unavailable: nvmlDeviceGetCount failed: " +
                             nvml_detail::describe_code(*lib_, static_cast<int>(-count)));
  }
  if (options.devices.empty()) {
    if (count == 0) throw std::runtime_error("the gpu source is unavailable: NVML found no GPU");
    for (unsigned i = 0; i < static_cast<unsigned>(count); ++i) indices_.push_back(i);
  } else {
    for (unsigned i : options.devices) {
      if (i >= static_cast<unsigned long long>(count)) {
        throw std::invalid_argument(
            "devices: GPU index " + std::to_string(i) + " is out of range; NVML sees " +
            std::to_string(count) + " GPU(s)" +
            (count > 0 ? " (indices 0.." + std::to_string(count - 1) + ")" : std::string()));
      }
      if (std::find(indices_.begin(), indices_.end(), i) != indices_.end()) {
        throw std::invalid_argument("devices: GPU index " + std::to_string(i) +
                                    " is given twice");
      }
      indices_.push_back(i);
    }
  }
  if (!options.labels.empty() && options.labels.size() != indices_.size()) {
    throw std::invalid_argument("labels: " + std::to_string(options.labels.size()) +
                                " label(s) given for " + std::to_string(indices_.size()) +
                                " device(s); give one per device or none");
  }
  pid_ = options.pid > 0 ? static_cast<unsigned>(options.pid) : static_cast<unsigned>(getpid());
  max_processes_ = std::max(1u, options.max_processes);

  const NvmlFunctions& f = lib_->fn();
  // A query whose function this library lacks is disabled from the start.
  const bool have[kQueryCount] = {
      f.device_get_field_values != nullptr,     f.device_get_memory_info_v2 != nullptr,
      f.device_get_memory_info != nullptr,      f.device_get_utilization_rates != nullptr,
      f.device_get_temperature != nullptr,      f.device_get_power_usage != nullptr,
      f.device_get_enforced_power_limit != nullptr,
      f.device_get_total_energy_consumption != nullptr,
      f.device_get_clock_info != nullptr,       f.device_get_clock_info != nullptr,
      f.device_get_clock_info != nullptr,       f.device_get_fan_speed != nullptr,
      f.device_get_clocks_event_reasons != nullptr, f.device_get_total_ecc_errors != nullptr,
      f.device_get_total_ecc_errors != nullptr, f.device_get_compute_running_processes != nullptr,
      f.device_get_graphics_running_processes != nullptr,
      f.device_get_process_utilization != nullptr};

  for (std::size_t pos = 0; pos < indices_.size(); ++pos) {
    auto d = std::make_unique<DeviceState>();
    d->id = nvml_detail::identify(*lib_, indices_[pos]);
    d->label = options.labels.empty() ? std::to_string(indices_[pos]) : options.labels[pos];
    for (std::size_t q = 0; q < kQueryCount; ++q) {
      if (!have[q]) d->query_code[q].store(kCodeMissingSymbol, std::memory_order_relaxed);
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
    d->compute_buf.resize(static_cast<std::size_t>(max_processes_) * nvml::kProcessInfoMaxStride);
    d->graphics_buf.resize(d->compute_buf.size());
    d->util_buf.resize(max_processes_);
    d->other_pids.resize(2 * static_cast<std::size_t>(max_processes_));

    const std::string prefix = "gpu." + d->label + ".";
    d->col0 = columns().size();
    for (const MetricSpec& m : kMetrics) {
      add_column(prefix + m.suffix, m.unit, m.dtype, m.kind, m.help);
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
}

NvmlSource::~NvmlSource() = default;

void NvmlSource::read(RowWriter row, std::int64_t /*now_ns*/) noexcept {
  int first_failure = 0;
  for (auto& d : devices_) {
    read_device(*d, row);
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

void NvmlSource::read_device(DeviceState& d, RowWriter& row) noexcept {
  if (d.failed()) return;
  const NvmlFunctions& f = lib_->fn();
  const nvml::Device h = d.id.handle;

  // Returns true on success; otherwise disables the query, counts a passing error, or marks the
  // device failed, by the error's class.
  auto check = [&](Query q, int rc) noexcept {
    if (rc == nvml::kSuccess) return true;
    switch (classify(rc)) {
      case ErrorClass::kUnsupported:
        d.query_code[q].store(rc, std::memory_order_relaxed);
        break;
      case ErrorClass::kTransient:
        transient_errors_.fetch_add(1, std::memory_order_relaxed);
        break;
      case ErrorClass::kFatal:
        d.fail_what.store(kQueryNames[q], std::memory_order_relaxed);
        // release: a reader that sees the code also sees which call failed.
        d.fail_code.store(rc, std::memory_order_release);
        break;
    }
    return false;
  };
  auto set_f = [&](Metric m, double v) noexcept { row.set_f64(d.col0 + m, v); };
  auto set_i = [&](Metric m, std::uint64_t v) noexcept {
    row.set_i64(d.col0 + m, static_cast<std::int64_t>(v));
  };

  // 1. The field batch.
  std::uint64_t field[kFieldCount] = {};
  bool have_field[kFieldCount] = {};
  if (d.usable(kQFieldValues)) {
    nvml::FieldValue fv[kFieldCount];
    Field which[kFieldCount];
    int n = 0;
    for (std::size_t i = 0; i < kFieldCount; ++i) {
      if (!d.field_usable(static_cast<Field>(i))) continue;
      fv[n] = nvml::FieldValue{};
      fv[n].field_id = kFieldIds[i];
      which[n++] = static_cast<Field>(i);
    }
    if (n > 0 && check(kQFieldValues, f.device_get_field_values(h, n, fv))) {
      for (int i = 0; i < n && !d.failed(); ++i) {
        const Field w = which[i];
        const int rc = fv[i].nvml_return;
        if (rc == nvml::kSuccess) {
          if (nvml_detail::value_to_u64(fv[i].value_type, fv[i].value, &field[w])) {
            have_field[w] = true;
          } else {
            d.field_code[w].store(kCodeBadValueType, std::memory_order_relaxed);
          }
        } else if (classify(rc) == ErrorClass::kUnsupported) {
          d.field_code[w].store(rc, std::memory_order_relaxed);
        } else {
          check(kQFieldValues, rc);  // passing: count it; fatal: the device failed
        }
      }
    }
  }

  // 2. Memory (_v2 where the driver has it, the original struct otherwise).
  if (!d.failed()) {
    bool ok = false;
    std::uint64_t total = 0, free = 0, used = 0;
    if (d.usable(kQMemoryV2)) {
      nvml::MemoryV2 m{};
      m.version = nvml::kMemoryV2Version;
      if (check(kQMemoryV2, f.device_get_memory_info_v2(h, &m))) {
        ok = true;
        total = m.total, free = m.free, used = m.used;
      }
    }
    if (!ok && !d.usable(kQMemoryV2) && d.usable(kQMemory) && !d.failed()) {
      nvml::Memory m{};
      if (check(kQMemory, f.device_get_memory_info(h, &m))) {
        ok = true;
        total = m.total, free = m.free, used = m.used;
      }
    }
    if (ok) {
      set_i(kMemUsed, used);
      set_i(kMemFree, free);
      set_i(kMemTotal, total);
      if (total > 0) {
        set_f(kMemAllocPct, static_cast<double>(used) / static_cast<double>(total) * 100.0);
      }
    }
  }

  // 3. Utilisation, temperature.
  if (!d.failed() && d.usable(kQUtil)) {
    nvml::Utilization u{};
    if (check(kQUtil, f.device_get_utilization_rates(h, &u))) {
      set_f(kUtil, u.gpu);
      set_f(kMemUtil, u.memory);
    }
  }
  if (!d.failed() && d.usable(kQTemp)) {
    unsigned t = 0;
    if (check(kQTemp, f.device_get_temperature(h, nvml::kTemperatureGpu, &t))) set_f(kTemp, t);
  }

  // 4. Power, limit, energy: the field where it came back, the older query otherwise.
  bool have_power = have_field[kFPowerInstant];
  std::uint64_t power_mw = field[kFPowerInstant];
  if (!have_power && !d.failed() && d.usable(kQPowerUsage)) {
    unsigned p = 0;
    if ((have_power = check(kQPowerUsage, f.device_get_power_usage(h, &p)))) power_mw = p;
  }
  bool have_limit = have_field[kFPowerLimit];
  std::uint64_t limit_mw = field[kFPowerLimit];
  if (!have_limit && !d.failed() && d.usable(kQPowerLimit)) {
    unsigned p = 0;
    if ((have_limit = check(kQPowerLimit, f.device_get_enforced_power_limit(h, &p)))) limit_mw = p;
  }
  if (have_power) set_f(kPower, static_cast<double>(power_mw) / 1000.0);
  if (have_limit) set_f(kPowerLimit, static_cast<double>(limit_mw) / 1000.0);
  if (have_power && have_limit && limit_mw > 0) {
    set_f(kPowerPct, static_cast<double>(power_mw) / static_cast<double>(limit_mw) * 100.0);
  }
  bool have_energy = have_field[kFEnergy];
  std::uint64_t energy_mj = field[kFEnergy];
  if (!have_energy && !d.failed() && d.usable(kQEnergy)) {
    unsigned long long e = 0;
    if ((have_energy = check(kQEnergy, f.device_get_total_energy_consumption(h, &e)))) {
      energy_mj = e;
    }
  }
  if (have_energy) set_i(kEnergy, d.energy.update(energy_mj));

  // 5. Clocks, fan, clock-event reasons.
  constexpr struct {
    Query q;
    int type;
    Metric m;
  } kClocks[] = {{kQClockSm, nvml::kClockSm, kSmClock},
                 {kQClockMem, nvml::kClockMem, kMemClock},
                 {kQClockGfx, nvml::kClockGraphics, kGfxClock}};
  for (const auto& c : kClocks) {
    if (d.failed() || !d.usable(c.q)) continue;
    unsigned mhz = 0;
    if (check(c.q, f.device_get_clock_info(h, c.type, &mhz))) set_i(c.m, mhz);
  }
  if (!d.failed() && d.usable(kQFan)) {
    unsigned pct = 0;
    if (check(kQFan, f.device_get_fan_speed(h, &pct))) set_f(kFan, pct);
  }
  if (!d.failed() && d.usable(kQClockReasons)) {
    unsigned long long bits = 0;
    if (check(kQClockReasons, f.device_get_clocks_event_reasons(h, &bits))) {
      set_i(kClockReasons, bits);
    }
  }

  // 6. PCIe bytes (fields only: the older throughput query blocks ~20 ms per direction).
  if (have_field[kFPcieTx]) set_i(kPcieTx, d.pcie_tx.update(field[kFPcieTx]));
  if (have_field[kFPcieRx]) set_i(kPcieRx, d.pcie_rx.update(field[kFPcieRx]));

  // 7. ECC, volatile totals.
  constexpr struct {
    Field fi;
    Query q;
    int type;
    Metric m;
  } kEcc[] = {{kFEccSbe, kQEccCorrected, nvml::kMemoryErrorTypeCorrected, kEccCorrected},
              {kFEccDbe, kQEccUncorrected, nvml::kMemoryErrorTypeUncorrected, kEccUncorrected}};
  for (const auto& e : kEcc) {
    if (have_field[e.fi]) {
      set_i(e.m, field[e.fi]);
    } else if (!d.failed() && d.usable(e.q)) {
      unsigned long long n = 0;
      if (check(e.q, f.device_get_total_ecc_errors(h, e.type, nvml::kVolatileEcc, &n))) {
        set_i(e.m, n);
      }
    }
  }

  // 8. Processes: the monitored one's memory and how many others hold a context here.
  {
    struct List {
      Query q;
      nvml::DeviceGetRunningProcessesFn fn;
      int version;
      std::vector<unsigned char>* buf;
      unsigned count;
      bool ok;
    } lists[2] = {
        {kQComputeProcs, f.device_get_compute_running_processes, f.compute_processes_version,
         &d.compute_buf, 0, false},
        {kQGraphicsProcs, f.device_get_graphics_running_processes, f.graphics_processes_version,
         &d.graphics_buf, 0, false}};
    bool any_usable = false, all_ok = true;
    for (List& l : lists) {
      if (d.failed() || !d.usable(l.q)) continue;
      any_usable = true;
      l.count = max_processes_;
      l.ok = check(l.q, l.fn(h, &l.count, l.buf->data()));
      all_ok = all_ok && l.ok;
    }
    // Both lists (where asked) must have come back, or a process in the missing one is missed.
    if (any_usable && all_ok && !d.failed()) {
      bool mine = false, mine_known = true;
      unsigned long long mine_bytes = 0;
      std::size_t others = 0;
      for (const List& l : lists) {
        if (!l.ok) continue;
        const unsigned n = std::min(l.count, max_processes_);
        const std::size_t stride = nvml_detail::process_info_stride(l.buf->data(), n, l.version);
        for (unsigned i = 0; i < n; ++i) {
          unsigned pid = 0;
          unsigned long long used = 0;
          nvml_detail::process_info_at(l.buf->data(), stride, i, &pid, &used);
          if (pid == pid_) {
            mine = true;
            // A process in both lists (compute and graphics) reports the same memory twice.
            if (used == nvml::kValueNotAvailableUll) {
              mine_known = false;
            } else {
              mine_bytes = std::max(mine_bytes, used);
            }
          } else if (others < d.other_pids.size()) {
            d.other_pids[others++] = pid;
          }
        }
      }
      std::sort(d.other_pids.begin(), d.other_pids.begin() + static_cast<std::ptrdiff_t>(others));
      const auto distinct = std::unique(d.other_pids.begin(),
                                        d.other_pids.begin() + static_cast<std::ptrdiff_t>(others)) -
                            d.other_pids.begin();
      set_i(kOtherProcs, static_cast<std::uint64_t>(distinct));
      if (!mine) {
        set_i(kProcMem, 0);
      } else if (mine_known) {
        set_i(kProcMem, mine_bytes);
      }
    }
  }

  // 9. The monitored process's SM %, from the samples newer than the last one seen.
  if (!d.failed() && d.usable(kQProcUtil)) {
    unsigned count = static_cast<unsigned>(d.util_buf.size());
    const int rc =
        f.device_get_process_utilization(h, d.util_buf.data(), &count, d.proc_util_last_seen_us);
    if (rc == nvml::kSuccess) {
      count = std::min<unsigned>(count, static_cast<unsigned>(d.util_buf.size()));
      unsigned long long newest = d.proc_util_last_seen_us, mine_ts = 0;
      bool mine = false;
      unsigned mine_sm = 0;
      for (unsigned i = 0; i < count; ++i) {
        const nvml::ProcessUtilizationSample& s = d.util_buf[i];
        newest = std::max(newest, s.timestamp_us);
        if (s.pid == pid_ && (!mine || s.timestamp_us >= mine_ts)) {
          mine = true;
          mine_ts = s.timestamp_us;
          mine_sm = s.sm_util;
        }
      }
      d.proc_util_last_seen_us = newest;
      d.proc_sm = mine ? mine_sm : 0.0;  // new samples without us: we were idle
      d.proc_sm_known = true;
    } else if (rc == nvml::kErrorNotFound) {
      // Nothing newer than the last sample: the latest value stands (none yet: nobody ran).
      if (!d.proc_sm_known) d.proc_sm = 0.0;
      d.proc_sm_known = true;
    } else {
      d.proc_sm_known = d.proc_sm_known && classify(rc) == ErrorClass::kTransient;
      check(kQProcUtil, rc);
    }
    if (d.proc_sm_known && (rc == nvml::kSuccess || rc == nvml::kErrorNotFound)) {
      set_f(kProcSm, d.proc_sm);
    }
  }

  // 10. MIG instances' memory.
  for (std::size_t j = 0; j < d.mig.size() && !d.failed(); ++j) {
    DeviceState::Mig& m = *d.mig[j];
    if (m.code.load(std::memory_order_relaxed) != 0) continue;
    const nvml::Device mh = d.id.mig[j].handle;
    int rc = nvml::kErrorFunctionNotFound;
    std::uint64_t used = 0, total = 0;
    if (d.usable(kQMemoryV2)) {
      nvml::MemoryV2 mem{};
      mem.version = nvml::kMemoryV2Version;
      rc = f.device_get_memory_info_v2(mh, &mem);
      used = mem.used, total = mem.total;
    } else if (d.usable(kQMemory)) {
      nvml::Memory mem{};
      rc = f.device_get_memory_info(mh, &mem);
      used = mem.used, total = mem.total;
    }
    if (rc == nvml::kSuccess) {
      row.set_i64(m.col_used, static_cast<std::int64_t>(used));
      row.set_i64(m.col_total, static_cast<std::int64_t>(total));
    } else if (classify(rc) == ErrorClass::kUnsupported) {
      m.code.store(rc, std::memory_order_relaxed);
    } else if (classify(rc) == ErrorClass::kTransient) {
      transient_errors_.fetch_add(1, std::memory_order_relaxed);
    } else {
      d.fail_what.store("nvmlDeviceGetMemoryInfo(MIG instance)", std::memory_order_relaxed);
      d.fail_code.store(rc, std::memory_order_release);
    }
  }

  // The read that found the device failed leaves none of its cells, not half a row.
  if (d.failed()) {
    for (std::size_t m = 0; m < kMetricCount; ++m) row.set_null(d.col0 + m);
    for (const auto& m : d.mig) {
      row.set_null(m->col_used);
      row.set_null(m->col_total);
    }
  }
}

std::unique_ptr<Source> make_nvml_source(const SourceOptions& opts) {
  NvmlSourceOptions o;
  o.pid = opts.pid;
  o.devices = opts.gpu_devices;
  o.labels = opts.gpu_labels;
  return std::make_unique<NvmlSource>(o);
}

}  // namespace stroboscope
