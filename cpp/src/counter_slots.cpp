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

bool CounterTotals::write(const CounterSlots::Counters& deltas, RowWriter& row,
                          std::int64_t now_ns) noexcept {
  bool all_in_range = true;
  for (std::size_t k = 0; k < CounterSlots::kCounters; ++k) {
    std::uint64_t total = 0;
    if (out_of_range_[k] || __builtin_add_overflow(totals_[k], deltas[k], &total) ||
        total > static_cast<std::uint64_t>(INT64_MAX)) {
      out_of_range_[k] = true;  // the total since the first reading is no longer known
      all_in_range = false;
      continue;
    }
    totals_[k] = total;
    row.set_i64(k, static_cast<std::int64_t>(total));
    double rate = 0;
    if (rates_[k].update(total, now_ns, &rate)) row.set_f64(CounterSlots::kCounters + k, rate);
  }
  return all_in_range;
}

}  // namespace stroboscope::detail
