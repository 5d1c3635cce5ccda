// From (source name, interval multiple) pairs to the sampler's source slots.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stroboscope/sampler.hpp"
#include "stroboscope/source.hpp"

namespace stroboscope {

// Builds each named source through the registry. A slow source (Source::slow()) is wrapped in a
// PolledSource that polls it every `every * interval_ns` on its own thread, and is itself copied
// on every tick (each new reading lands in the first row after it was taken).
[[nodiscard]] std::vector<SourceSlot> build_source_slots(
    const std::vector<std::pair<std::string, std::uint32_t>>& specs, std::int64_t interval_ns,
    const SourceOptions& opts);

// The slot of one source built already (the rule above: a slow source is polled).
[[nodiscard]] SourceSlot make_source_slot(std::unique_ptr<Source> source, std::uint32_t every,
                                          std::int64_t interval_ns);

}  // namespace stroboscope
