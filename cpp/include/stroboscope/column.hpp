// Column descriptions: the schema every source declares at construction.
//
// Every cell in the ring is 8 bytes; `DType` says how to read them. `Kind` says how the value
// behaves over time so exporters and aggregators can treat it right (a counter "since start" is
// summed differently from a gauge).
#pragma once

#include <cstdint>
#include <string>

namespace stroboscope {

enum class DType : std::uint8_t {
  kFloat64 = 0,
  kInt64 = 1,
};

enum class Kind : std::uint8_t {
  kGauge = 0,    // an instantaneous level (bytes used, threads, %)
  kCounter = 1,  // monotone total since the sampler's first reading (bytes sent since start)
  kRate = 2,     // a per-second rate or % computed from two consecutive counter readings
};

struct ColumnSpec {
  std::string name;  // lower-case, dotted scope then metric with a unit suffix: "cpu.util_pct"
  std::string unit;  // "%", "bytes", "bytes/s", "count", "ns", "1" (dimensionless), ...
  DType dtype = DType::kFloat64;
  Kind kind = Kind::kGauge;
  std::string help;  // one sentence for docs/metrics.md
  // A value written every window of at least this long (a rate or share over cpu_window,
  // rate_window...) holds until the next one; 0: a value per read. Frame.to_arrow(fill=
  // "forward") carries a value this long (or one read period, if longer).
  std::int64_t window_ns = 0;
};

[[nodiscard]] inline const char* dtype_name(DType t) noexcept {
  return t == DType::kInt64 ? "int64" : "float64";
}

[[nodiscard]] inline const char* kind_name(Kind k) noexcept {
  switch (k) {
    case Kind::kCounter:
      return "counter";
    case Kind::kRate:
      return "rate";
    case Kind::kGauge:
    default:
      return "gauge";
  }
}

}  // namespace stroboscope
