// Named counter slots for the sources that sum per-device counters into one total: "diskio"
// (sectors of each block device) and "network" (bytes of each interface).
//
// Each name listed by the kernel gets a slot holding its previous reading, in a fixed table sized
// at construction, so a read never allocates. A counter that goes backwards was reset (the delta
// is the new value); a name that is no longer listed frees its slot; a name that appears after
// the first reading was created after we started, so all of its counts are new. Names listed at
// the first reading are the baseline: their earlier counts do not count.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stroboscope/linux_sources.hpp"
#include "stroboscope/procfs.hpp"
#include "stroboscope/source.hpp"

namespace stroboscope::detail {

class CounterSlots {
 public:
  static constexpr std::size_t kCounters = 2;  // both users sum two counters per name
  using Counters = std::array<std::uint64_t, kCounters>;
  using Name = char[procfs::kNameMax];  // a parser's NUL-terminated name field

  explicit CounterSlots(std::size_t capacity) : slots_(capacity) {}

  // Starts a reading of the listing: call before the first add().
  void begin_reading() noexcept { ++gen_; }

  // Adds to `deltas` how far `name`'s counters moved since the previous reading (`now` is this
  // reading). `hint` is the name's position in the listing, the slot tried first (the usual case:
  // the same names in the same order every time). `counts(name)` decides, once, when the name
  // first gets a slot, whether its counters are summed at all. False when the table is full: the
  // name is then neither tracked nor summed.
  template <typename CountsFn>
  bool add(const Name& name, std::size_t hint, const Counters& now, Counters& deltas,
           CountsFn&& counts) noexcept {
    Slot* s = find(name, hint);
    const bool fresh = s == nullptr;
    if (fresh) {
      s = claim(name);
      if (s == nullptr) return false;
      s->counted = counts(name);
    }
    if (s->counted && (!fresh || has_baseline_)) {
      for (std::size_t k = 0; k < kCounters; ++k) {
        // A name that appeared after the first reading is new: all of its count is new.
        const std::uint64_t d = fresh ? now[k] : procfs::counter_delta(s->previous[k], now[k]);
        // A sum past 64 bits saturates; CounterTotals::write then reads it as out of range
        // instead of a wrapped, plausible-looking total.
        if (__builtin_add_overflow(deltas[k], d, &deltas[k])) deltas[k] = UINT64_MAX;
      }
    }
    s->previous = now;
    s->seen_gen = gen_;
    return true;
  }

  // Ends the reading: frees the slots of names it did not list (a later name like theirs is
  // new), and makes it the baseline for names that appear later.
  void end_reading() noexcept;

 private:
  struct Slot {
    Name name = {};
    Counters previous{};
    std::uint64_t seen_gen = 0;  // the reading that last listed this name
    bool used = false;
    bool counted = false;
  };

  // The used slot holding `name`, or nullptr.
  Slot* find(const Name& name, std::size_t hint) noexcept;
  // A free slot, now holding `name`, or nullptr when the table is full.
  Slot* claim(const Name& name) noexcept;

  std::vector<Slot> slots_;
  std::uint64_t gen_ = 0;
  bool has_baseline_ = false;
};

// Since-start totals of the summed counters and their per-second rates over windows of at least
// `rate_window_ns` (see WindowedRate): the cells a summing source writes first, totals (int64) in
// columns 0 .. kCounters-1, then the rates (float64, null until a window closes).
class CounterTotals {
 public:
  explicit CounterTotals(std::int64_t rate_window_ns) noexcept
      : rates_{WindowedRate(rate_window_ns), WindowedRate(rate_window_ns)} {}

  // Adds `deltas` to the totals and writes the cells for the tick at `now_ns`. A total that
  // leaves int64 (only garbage counters get there) stays null from then on, with its rate:
  // returns false when any total is out of range.
  [[nodiscard]] bool write(const CounterSlots::Counters& deltas, RowWriter& row,
                           std::int64_t now_ns) noexcept;

 private:
  CounterSlots::Counters totals_{};
  std::array<bool, CounterSlots::kCounters> out_of_range_{};
  std::array<WindowedRate, CounterSlots::kCounters> rates_;
};

}  // namespace stroboscope::detail
