// The slot table and totals shared by the "diskio" and "network" sources.
#include "stroboscope/counter_slots.hpp"

#include <cstring>

namespace stroboscope::detail {

CounterSlots::Slot* CounterSlots::find(const Name& name, std::size_t hint) noexcept {
  if (hint < slots_.size() && slots_[hint].used && std::strcmp(slots_[hint].name, name) == 0) {
    return &slots_[hint];
  }
  for (Slot& s : slots_) {
    if (s.used && std::strcmp(s.name, name) == 0) return &s;
  }
  return nullptr;
}

CounterSlots::Slot* CounterSlots::claim(const Name& name) noexcept {
  for (Slot& s : slots_) {
    if (s.used) continue;
    std::memcpy(s.name, name, sizeof s.name);
    s.used = true;
    return &s;
  }
  return nullptr;
}

void CounterSlots::end_reading() noexcept {
  for (Slot& s : slots_) {
    if (s.used && s.seen_gen != gen_) s.used = false;
  }
  has_baseline_ = true;
}

void CounterTotals::write(const CounterSlots::Counters& deltas, RowWriter& row,
                          std::int64_t now_ns) noexcept {
  for (std::size_t k = 0; k < CounterSlots::kCounters; ++k) {
    totals_[k] += deltas[k];
    row.set_i64(k, static_cast<std::int64_t>(totals_[k]));
  }
  for (std::size_t k = 0; k < CounterSlots::kCounters; ++k) {
    double rate = 0;
    if (rates_[k].update(totals_[k], now_ns, &rate)) row.set_f64(CounterSlots::kCounters + k, rate);
  }
}

}  // namespace stroboscope::detail
