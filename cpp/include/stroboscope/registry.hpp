// The source registry: the one place that maps a source name ("cpu", "memory", ...) to its
// constructor, says which sources exist, which are on by default and why one is unavailable.
// docs/metrics.md is generated from the columns these sources declare.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stroboscope/source.hpp"

namespace stroboscope {

struct SourceInfo {
  std::string name;
  std::string help;    // one line: what it reads
  bool is_default;     // part of the default set (given `opts`)
  bool available;      // can be constructed here
  std::string reason;  // why not, when !available
  // From the source built here (empty/0 when it cannot be built): the kernel interface it reads,
  // how often that value can change (Source::natural_resolution_ns) and why.
  std::string interface;
  std::int64_t resolution_ns = 0;
  std::string resolution_reason;
};

// What one built source says about itself (the fields above).
void describe_built(const Source& source, SourceInfo* info);

// Every source name this build knows, in a stable order.
[[nodiscard]] std::vector<std::string> source_names();

// What each source is, whether it is in the default set and whether it works here.
[[nodiscard]] std::vector<SourceInfo> describe_sources(const SourceOptions& opts);

// The default set for these options: the seed metric set, process CPU %, disk/network rates, and
// the container view where the process runs under cgroup limits.
[[nodiscard]] std::vector<std::string> default_source_names(const SourceOptions& opts);

// Builds one source. Throws std::invalid_argument for an unknown name (listing the known ones)
// and std::runtime_error with the reason when the source cannot work here.
[[nodiscard]] std::unique_ptr<Source> make_source(std::string_view name, const SourceOptions& opts);

}  // namespace stroboscope
