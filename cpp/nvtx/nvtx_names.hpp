// What the NVTX injection library (nvtx_inject.cpp) names a call by: the domains and registered
// strings an application makes, the category names it gives, and each thread's cache of the ids
// they are interned as in the process's shared events (scope names "domain/message", label sets
// {"category": name}). nvtx_names.cpp holds them; the library's callbacks resolve every range and
// mark through them. Internal to the library (hidden symbols), not part of the core.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stroboscope/nvtx_api.hpp"
#include "stroboscope/shared_events.hpp"

namespace stroboscope::nvtx {

struct Domain {
  std::uint32_t index = 0;  // 0: the default domain
  std::string prefix;       // "name/", or "" for the default domain
  std::mutex mutex;         // around categories
  std::map<std::uint32_t, std::string> categories;
  // Bumped when a category is named, so threads drop the label ids they cached for this domain.
  // release on the bump after the name is stored; acquire on the reading thread's check.
  std::atomic<std::uint32_t> category_version{0};
};

struct RegisteredString {
  Domain* domain = nullptr;
  std::string text;
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

// An open push/pop range: its ids, pushed at its begin and written again at its end.
struct Open {
  std::uint32_t scope_id;
  std::uint32_t labels_id;
};

// One thread's view of one domain: its push/pop stack and the ids it has interned.
struct DomainState {
  std::vector<Open> open;
  std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>> names;
  std::unordered_map<std::uint32_t, std::uint32_t> category_labels;
  std::uint32_t category_version = 0;
};

struct ThreadState {
  std::uint32_t generation = ~std::uint32_t{0};
  std::uint64_t tid = 0;
  std::vector<std::unique_ptr<DomainState>> domains;  // by domain index
  std::string utf8;                                   // scratch for Unicode messages
};

// The pthread_atfork child handler: a thread's cached ids and thread id belong to the process
// that cached them (the child's events file may start its own string table).
void atfork_child();
// The calling thread's state (its cache dropped in a forked child's first call).
ThreadState& thread_state() noexcept;
// The domain of a handle (the default domain for nullptr).
Domain& domain_of(DomainHandle handle) noexcept;
// The thread's state for domain `d`; nullptr only when memory runs out.
DomainState* domain_state(ThreadState& t, const Domain& d) noexcept;
// `text` (UTF-32, as wchar_t is on Linux) as UTF-8 in `out`.
std::string_view to_utf8(const wchar_t* text, std::string& out);
// The scope id of `text` in domain `d` (interned as "prefix" + text), cached per thread.
std::uint32_t name_id(SharedEvents& ev, const Domain& d, DomainState& s, std::string_view text);
// The label set of `category` in `d`: the same text Python's labels give ({"category":"..."},
// JSON with sorted keys and no spaces), 0 for no category.
std::uint32_t category_labels(SharedEvents& ev, Domain& d, DomainState& s,
                              std::uint32_t category);
// nvtxNameCategory: later events of `category` in that domain carry `name`.
void name_category(DomainHandle handle, std::uint32_t category, std::string_view name) noexcept;
// One handle per name, valid for the life of the process; nullptr (the default domain) when
// memory runs out.
DomainHandle create_domain(std::string_view name) noexcept;
// One handle per (domain, text), valid for the life of the process.
StringHandle register_string(DomainHandle handle, std::string_view text) noexcept;

}  // namespace stroboscope::nvtx
