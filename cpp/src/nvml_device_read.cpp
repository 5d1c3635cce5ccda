// One read of one GPU for the "gpu" source: a reader per metric group, run from a table.
//
// Per device and read: one nvmlDeviceGetFieldValues batch (instant power, enforced limit, energy,
// PCIe and NVLink bytes, ECC counts) where the driver supports it, then the plain queries group
// by group in the order of kGroupReaders (memory, utilisation, temperature, power, clocks, fan,
// clock-event reasons, PCIe and NVLink, ECC, processes, process utilisation, MIG instances). A
// query the device cannot answer is disabled for good (with its code kept for gpu_status()), a
// passing error leaves one cell null, and a lost GPU turns all of its cells null from then on.
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "nvml_device_read.hpp"
#include "stroboscope/clock.hpp"

namespace stroboscope {

using namespace nvml_detail;  // the tables and helpers this file reads with

namespace {

// One field of a batch's answer into the read, or its code where the device cannot give it.
void take_field(DeviceRead& r, Field w, const nvml::FieldValue& v, std::int64_t at_ns) noexcept {
  DeviceState& d = r.d;
  const int rc = v.nvml_return;
  if (rc == nvml::kSuccess) {
    if (value_to_u64(v.value_type, v.value, &r.field[w])) {
      r.have_field[w] = true;
      r.field_us[w] = v.timestamp_us > 0 ? v.timestamp_us : 0;
      r.field_at_ns[w] = at_ns;
    } else {
      d.field_code[w].store(kCodeBadValueType, std::memory_order_relaxed);
    }
  } else if (classify(rc) == ErrorClass::kUnsupported) {
    d.field_code[w].store(rc, std::memory_order_relaxed);
  } else {
    r.check(kQFieldValues, rc);  // passing: count it; fatal: the device failed
  }
}

// The fields: one batched call for the cheap ones, each dear one in a call of its own when its
// budget lets it run (CallBudget, kFreeCostNs). All start in the batch; once the batch itself
// is found dear, each field is timed alone over kCostRuns reads to find which ones are.
void read_field_batch(DeviceRead& r) noexcept {
  DeviceState& d = r.d;
  if (!d.usable(kQFieldValues)) return;
  CallBudget& batch = d.query_budget[kQFieldValues];
  if (!d.fields_split && batch.cost() > kFreeCostNs) {
    d.fields_split = true;
    batch.reset();  // its dear fields leave it: what it cost no longer says what it will
  }
  // Alone: a field still being timed (split, fewer than kCostRuns runs) or found dear.
  auto alone = [&d](Field w) noexcept {
    const CallBudget& b = d.field_budget[w];
    return d.fields_split && (b.runs_made() < kCostRuns || b.cost() > kFreeCostNs);
  };
  nvml::FieldValue fv[kFieldCount];
  Field which[kFieldCount];
  int n = 0;
  for (const FieldSpec& s : kFields) {
    if (!d.field_usable(s.field) || alone(s.field)) continue;
    fv[n] = nvml::FieldValue{};
    fv[n].field_id = s.id;
    fv[n].scope_id = s.scope;
    which[n++] = s.field;
  }
  if (n > 0 && batch.due(r.now_ns)) {
    for (int i = 0; i < n; ++i) r.field_tried[which[i]] = true;
    const int rc = r.timed(kQFieldValues, r.f.device_get_field_values, r.h, n, &fv[0]);
    if (!r.check(kQFieldValues, rc)) return;
    const std::int64_t at = mono_ns();  // this GPU's own read time (the poll reads GPUs in turn)
    for (int i = 0; i < n && !d.failed(); ++i) take_field(r, which[i], fv[i], at);
  }
  for (const FieldSpec& s : kFields) {
    if (d.failed() || !d.field_usable(s.field) || !alone(s.field)) continue;
    CallBudget& b = d.field_budget[s.field];
    if (!b.due(r.now_ns)) continue;
    nvml::FieldValue one{};
    one.field_id = s.id;
    one.scope_id = s.scope;
    r.field_tried[s.field] = true;
    const std::int64_t begin = mono_ns();
    const int rc = r.f.device_get_field_values(r.h, 1, &one);
    const std::int64_t end = mono_ns();
    b.ran(r.now_ns, end - begin);
    if (!r.check(kQFieldValues, rc)) return;
    take_field(r, s.field, one, end);
  }
}

// Memory: _v2 where the driver has it, the original struct otherwise.
void read_memory(DeviceRead& r) noexcept {
  DeviceState& d = r.d;
  if (d.failed()) return;
  bool ok = false;
  std::uint64_t total = 0, free = 0, used = 0;
  if (r.asks(kQMemoryV2)) {
    nvml::MemoryV2 m{};
    m.version = nvml::kMemoryV2Version;
    if (r.call(kQMemoryV2, r.f.device_get_memory_info_v2, r.h, &m)) {
      ok = true;
      total = m.total, free = m.free, used = m.used;
    }
  }
  // Only once _v2 is disabled (maybe by the call just made), not after a passing error.
  if (!ok && !d.usable(kQMemoryV2) && r.asks(kQMemory)) {
    nvml::Memory m{};
    if (r.call(kQMemory, r.f.device_get_memory_info, r.h, &m)) {
      ok = true;
      total = m.total, free = m.free, used = m.used;
    }
  }
  if (!ok) return;
  r.set_i(kMemUsed, used);
  r.set_i(kMemFree, free);
  r.set_i(kMemTotal, total);
  if (total > 0) {
    r.set_f(kMemAllocPct, static_cast<double>(used) / static_cast<double>(total) * 100.0);
  }
}

void read_utilisation(DeviceRead& r) noexcept {
  if (!r.asks(kQUtil)) return;
  nvml::Utilization u{};
  if (r.call(kQUtil, r.f.device_get_utilization_rates, r.h, &u)) {
    r.set_f(kUtil, u.gpu);
    r.set_f(kMemUtil, u.memory);
  }
}

void read_temperature(DeviceRead& r) noexcept {
  if (!r.asks(kQTemp)) return;
  unsigned t = 0;
  if (r.call(kQTemp, r.f.device_get_temperature, r.h, nvml::kTemperatureGpu, &t)) {
    r.set_f(kTemp, t);
  }
}

// Power, limit, energy: the field where it came back, the older query otherwise.
void read_power(DeviceRead& r) noexcept {
  DeviceState& d = r.d;
  bool have_power = r.have_field[kFPowerInstant];
  std::uint64_t power_mw = r.field[kFPowerInstant];
  if (!have_power && r.instead_of(kFPowerInstant) && r.asks(kQPowerUsage)) {
    unsigned p = 0;
    if ((have_power = r.call(kQPowerUsage, r.f.device_get_power_usage, r.h, &p))) power_mw = p;
  }
  bool have_limit = r.have_field[kFPowerLimit];
  std::uint64_t limit_mw = r.field[kFPowerLimit];
  if (!have_limit && r.instead_of(kFPowerLimit) && r.asks(kQPowerLimit)) {
    unsigned p = 0;
    if ((have_limit = r.call(kQPowerLimit, r.f.device_get_enforced_power_limit, r.h, &p))) {
      limit_mw = p;
    }
  }
  if (have_power) r.set_f(kPower, static_cast<double>(power_mw) / 1000.0);
  if (have_limit) r.set_f(kPowerLimit, static_cast<double>(limit_mw) / 1000.0);
  if (have_power && have_limit && limit_mw > 0) {
    r.set_f(kPowerPct, static_cast<double>(power_mw) / static_cast<double>(limit_mw) * 100.0);
  }
  bool have_energy = r.have_field[kFEnergy];
  std::uint64_t energy_mj = r.field[kFEnergy];
  std::int64_t energy_at = r.field_at_ns[kFEnergy];
  if (!have_energy && r.instead_of(kFEnergy) && r.asks(kQEnergy)) {
    unsigned long long e = 0;
    if ((have_energy = r.call(kQEnergy, r.f.device_get_total_energy_consumption, r.h, &e))) {
      energy_mj = e;
      energy_at = mono_ns();
    }
  }
  if (have_energy) {
    r.set_i(kEnergy, d.energy.update(energy_mj));
    r.set_i(kEnergyReadAt, static_cast<std::uint64_t>(energy_at));
  }
}

void read_clocks(DeviceRead& r) noexcept {
  constexpr struct {
    Query q;
    int type;
    Metric m;
  } kClocks[] = {{kQClockSm, nvml::kClockSm, kSmClock},
                 {kQClockMem, nvml::kClockMem, kMemClock},
                 {kQClockGfx, nvml::kClockGraphics, kGfxClock}};
  for (const auto& c : kClocks) {
    if (!r.asks(c.q)) continue;
    unsigned mhz = 0;
    if (r.call(c.q, r.f.device_get_clock_info, r.h, c.type, &mhz)) r.set_i(c.m, mhz);
  }
}

void read_fan(DeviceRead& r) noexcept {
  if (!r.asks(kQFan)) return;
  unsigned pct = 0;
  if (r.call(kQFan, r.f.device_get_fan_speed, r.h, &pct)) r.set_f(kFan, pct);
}

void read_clock_reasons(DeviceRead& r) noexcept {
  if (!r.asks(kQClockReasons)) return;
  unsigned long long bits = 0;
  if (r.call(kQClockReasons, r.f.device_get_clocks_event_reasons, r.h, &bits)) {
    r.set_i(kClockReasons, bits);
  }
}

// PCIe and NVLink bytes: fields only (the older PCIe throughput query blocks ~20 ms per
// direction). Each counter gives bytes since start and a windowed rate (FieldCounter).
void read_links(DeviceRead& r) noexcept {
  DeviceState& d = r.d;
  const struct {
    Field fi;
    FieldCounter* counter;
    std::uint64_t unit;  // bytes per counter unit
    Metric total;
    Metric rate;
  } kLinks[] = {{kFPcieTx, &d.pcie_tx, 1, kPcieTx, kPcieTxRate},
                {kFPcieRx, &d.pcie_rx, 1, kPcieRx, kPcieRxRate},
                {kFNvlinkTx, &d.nvlink_tx, 1024, kNvlinkTx, kNvlinkTxRate},
                {kFNvlinkRx, &d.nvlink_rx, 1024, kNvlinkRx, kNvlinkRxRate}};
  for (const auto& l : kLinks) {
    if (!r.have_field[l.fi]) continue;
    bool has_rate = false;
    double per_s = 0.0;
    r.set_i(l.total, l.counter->update(r.field[l.fi], l.unit, r.field_us[l.fi], r.now_ns,
                                       &has_rate, &per_s));
    if (has_rate) r.set_f(l.rate, per_s);
  }
}

// ECC, volatile totals: the field where it came back, the query otherwise.
void read_ecc(DeviceRead& r) noexcept {
  constexpr struct {
    Field fi;
    Query q;
    int type;
    Metric m;
  } kEcc[] = {{kFEccSbe, kQEccCorrected, nvml::kMemoryErrorTypeCorrected, kEccCorrected},
              {kFEccDbe, kQEccUncorrected, nvml::kMemoryErrorTypeUncorrected, kEccUncorrected}};
  for (const auto& e : kEcc) {
    if (r.have_field[e.fi]) {
      r.set_i(e.m, r.field[e.fi]);
    } else if (r.instead_of(e.fi) && r.asks(e.q)) {
      unsigned long long n = 0;
      if (r.call(e.q, r.f.device_get_total_ecc_errors, r.h, e.type, nvml::kVolatileEcc, &n)) {
        r.set_i(e.m, n);
      }
    }
  }
}

// MIG instances' memory, into their own columns.
void read_mig(DeviceRead& r) noexcept {
  DeviceState& d = r.d;
  for (std::size_t j = 0; j < d.mig.size() && !d.failed(); ++j) {
    DeviceState::Mig& m = *d.mig[j];
    if (m.code.load(std::memory_order_relaxed) != 0) continue;
    const nvml::Device mh = d.id.mig[j].handle;
    int rc = nvml::kErrorFunctionNotFound;
    std::uint64_t used = 0, total = 0;
    if (d.usable(kQMemoryV2)) {
      nvml::MemoryV2 mem{};
      mem.version = nvml::kMemoryV2Version;
      rc = r.f.device_get_memory_info_v2(mh, &mem);
      used = mem.used, total = mem.total;
    } else if (d.usable(kQMemory)) {
      nvml::Memory mem{};
      rc = r.f.device_get_memory_info(mh, &mem);
      used = mem.used, total = mem.total;
    }
    if (rc == nvml::kSuccess) {
      r.row.set_i64(m.col_used, static_cast<std::int64_t>(used));
      r.row.set_i64(m.col_total, static_cast<std::int64_t>(total));
    } else if (classify(rc) == ErrorClass::kUnsupported) {
      m.code.store(rc, std::memory_order_relaxed);
    } else if (classify(rc) == ErrorClass::kTransient) {
      // A count with no data behind it: relaxed is enough.
      r.transient_errors.fetch_add(1, std::memory_order_relaxed);
    } else {
      d.fail_what.store("nvmlDeviceGetMemoryInfo(MIG instance)", std::memory_order_relaxed);
      // release: a reader that sees the code also sees which call failed.
      d.fail_code.store(rc, std::memory_order_release);
    }
  }
}

// The groups of one device read, in the order their NVML calls are made.
enum Group : std::size_t {
  kGFieldBatch, kGMemory, kGUtilisation, kGTemperature, kGPower, kGClocks, kGFan,
  kGClockReasons, kGLinks, kGEcc, kGProcesses, kGProcessUtil, kGMig, kGroupCount
};

struct GroupReader {
  Group group;
  void (*read)(DeviceRead& r) noexcept;
  Metric metrics[8];  // the device columns (kMetrics) it writes; MIG columns are its own
  std::size_t n_metrics;
};

// Every reader runs on every read, each checking for itself whether the device has failed. The
// field batch comes first: the groups after it use what it brought back.
constexpr GroupReader kGroupReaders[] = {
    {kGFieldBatch, read_field_batch, {}, 0},
    {kGMemory, read_memory, {kMemUsed, kMemFree, kMemTotal, kMemAllocPct}, 4},
    {kGUtilisation, read_utilisation, {kUtil, kMemUtil}, 2},
    {kGTemperature, read_temperature, {kTemp}, 1},
    {kGPower, read_power, {kPower, kPowerLimit, kPowerPct, kEnergy, kEnergyReadAt}, 5},
    {kGClocks, read_clocks, {kSmClock, kMemClock, kGfxClock}, 3},
    {kGFan, read_fan, {kFan}, 1},
    {kGClockReasons, read_clock_reasons, {kClockReasons}, 1},
    {kGLinks, read_links,
     {kPcieTx, kPcieRx, kPcieTxRate, kPcieRxRate, kNvlinkTx, kNvlinkRx, kNvlinkTxRate,
      kNvlinkRxRate},
     8},
    {kGEcc, read_ecc, {kEccCorrected, kEccUncorrected}, 2},
    {kGProcesses, read_processes, {kProcMem, kOtherProcs}, 2},
    {kGProcessUtil, read_process_util, {kProcSm, kProcMemUtil, kProcEncUtil, kProcDecUtil}, 4},
    {kGMig, read_mig, {}, 0},
};

// Every Metric is written by exactly one group's reader.
constexpr bool each_metric_read_once() {
  for (std::size_t m = 0; m < kMetricCount; ++m) {
    std::size_t readers = 0;
    for (const GroupReader& g : kGroupReaders) {
      for (std::size_t i = 0; i < g.n_metrics; ++i) readers += g.metrics[i] == m ? 1 : 0;
    }
    if (readers != 1) return false;
  }
  return true;
}
static_assert(indexed_by(kGroupReaders, &GroupReader::group, kGroupCount),
              "kGroupReaders needs one entry per Group, in enum order");
static_assert(each_metric_read_once(),
              "every Metric must be listed by exactly one entry of kGroupReaders");

}  // namespace

namespace nvml_detail {

void probe_fields(DeviceState& d, const NvmlFunctions& f) {
  if (d.failed() || !d.usable(kQFieldValues)) return;
  nvml::FieldValue fv[kFieldCount];
  Field which[kFieldCount];
  int n = 0;
  for (const FieldSpec& s : kFields) {
    if (!s.probed) continue;
    fv[n] = nvml::FieldValue{};
    fv[n].field_id = s.id;
    fv[n].scope_id = s.scope;
    which[n++] = s.field;
  }
  const int rc = f.device_get_field_values(d.id.handle, n, fv);
  if (rc != nvml::kSuccess) {
    // The whole batch: unsupported disables it (and every field with it); a lost GPU fails the
    // device, whose columns then stay (null) like those of any failed device.
    if (classify(rc) == ErrorClass::kUnsupported) {
      d.query_code[kQFieldValues].store(rc, std::memory_order_relaxed);
    } else if (classify(rc) == ErrorClass::kFatal) {
      d.fail_what.store(kQueries[kQFieldValues].name, std::memory_order_relaxed);
      d.fail_code.store(rc, std::memory_order_release);  // release: see DeviceRead::check
    }
    return;
  }
  for (int i = 0; i < n; ++i) {
    const int code = fv[i].nvml_return;
    if (code != nvml::kSuccess && classify(code) == ErrorClass::kUnsupported) {
      d.field_code[which[i]].store(code, std::memory_order_relaxed);
    }
  }
}

}  // namespace nvml_detail

void NvmlSource::read_device(DeviceState& d, RowWriter& row, std::int64_t now_ns) noexcept {
  if (d.failed()) return;
  DeviceRead r{d, lib_->fn(), d.id.handle, row, now_ns, pid_, *tree_, max_processes_,
               transient_errors_};
  for (const GroupReader& g : kGroupReaders) g.read(r);

  // The read that found the device failed leaves none of its cells, not half a row.
  if (d.failed()) {
    for (std::size_t m = 0; m < kMetricCount; ++m) {
      if (d.col[m] != kNoColumn) row.set_null(d.col[m]);
    }
    for (const auto& m : d.mig) {
      row.set_null(m->col_used);
      row.set_null(m->col_total);
    }
  }
}

}  // namespace stroboscope
