// Source slots for a sampler: registry construction plus polling for slow sources.
#include "stroboscope/slots.hpp"

#include "stroboscope/polled_source.hpp"
#include "stroboscope/registry.hpp"

namespace stroboscope {

std::vector<SourceSlot> build_source_slots(
    const std::vector<std::pair<std::string, std::uint32_t>>& specs, std::int64_t interval_ns,
    const SourceOptions& opts) {
  std::vector<SourceSlot> slots;
  slots.reserve(specs.size());
  for (const auto& [name, every] : specs) {
    slots.push_back(make_source_slot(make_source(name, opts), every, interval_ns));
  }
  return slots;
}

SourceSlot make_source_slot(std::unique_ptr<Source> source, std::uint32_t every,
                            std::int64_t interval_ns) {
  if (source->slow()) {
    const std::int64_t poll_ns = interval_ns * static_cast<std::int64_t>(every == 0 ? 1 : every);
    return SourceSlot{std::make_unique<PolledSource>(std::move(source), poll_ns), 1};
  }
  return SourceSlot{std::move(source), every};
}

}  // namespace stroboscope
