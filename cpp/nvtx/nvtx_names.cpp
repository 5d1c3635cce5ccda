// The NVTX injection library's names (nvtx_names.hpp): domains, registered strings, categories,
// and each thread's cache of their interned ids.
#include "nvtx_names.hpp"

#include <unistd.h>

#include <cstdio>
#include <utility>

namespace stroboscope::nvtx {
namespace {

constexpr std::size_t kMaxCachedNames = 4096;  // per thread and domain; a miss re-interns
constexpr std::string_view kUnnamed = "(unnamed)";

// Bumped in a forked child (atfork_child). relaxed: the child has one thread when the handler
// runs.
std::atomic<std::uint32_t> g_generation{0};

// Never destroyed, as the tables below: threads may still call NVTX while the process exits.
Domain& default_domain() {
  static auto* d = new Domain();
  return *d;
}

std::mutex g_registry_mutex;  // around the two tables below (not the hot path)
std::uint32_t g_next_domain = 1;
std::unordered_map<std::string, std::unique_ptr<Domain>>& domains() {
  static auto* d = new std::unordered_map<std::string, std::unique_ptr<Domain>>();  // never freed:
  return *d;  // handles stay valid while other threads and static destructors may still use them
}
using StringTable = std::map<std::pair<Domain*, std::string>, std::unique_ptr<RegisteredString>>;
StringTable& strings() {
  static auto* s = new StringTable();  // never freed, as domains()
  return *s;
}

thread_local ThreadState t_state;

void append_utf8(std::string& out, std::uint32_t c) {
  if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;  // not a scalar value
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// wchar_t is UTF-32 on Linux.

void append_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out.append(buf);
    } else {
      out.push_back(ch);  // UTF-8 passes through (JSON text is Unicode)
    }
  }
  out.push_back('"');
}

}  // namespace

void atfork_child() { g_generation.fetch_add(1, std::memory_order_relaxed); }

ThreadState& thread_state() noexcept {
  ThreadState& t = t_state;
  const std::uint32_t g = g_generation.load(std::memory_order_relaxed);
  if (t.generation != g) {  // first call on this thread, or the first in a forked child
    t.generation = g;
    t.tid = static_cast<std::uint64_t>(gettid());
    for (auto& d : t.domains) {
      if (!d) continue;
      d->names.clear();
      d->category_labels.clear();
    }
  }
  return t;
}

Domain& domain_of(DomainHandle handle) noexcept {
  return handle != nullptr ? *handle : default_domain();
}

DomainState* domain_state(ThreadState& t, const Domain& d) noexcept {
  try {
    if (t.domains.size() <= d.index) t.domains.resize(d.index + 1);
    auto& slot = t.domains[d.index];
    if (!slot) slot = std::make_unique<DomainState>();
    return slot.get();
  } catch (...) {
    return nullptr;
  }
}

std::string_view to_utf8(const wchar_t* text, std::string& out) {
  out.clear();
  if (text == nullptr) return {};
  for (; *text != 0; ++text) append_utf8(out, static_cast<std::uint32_t>(*text));
  return out;
}

std::uint32_t name_id(SharedEvents& ev, const Domain& d, DomainState& s, std::string_view text) {
  if (text.empty()) text = kUnnamed;
  auto it = s.names.find(text);
  if (it != s.names.end()) return it->second;
  std::string full = d.prefix;
  full.append(text);
  const std::uint32_t id = ev.intern(full);
  if (s.names.size() >= kMaxCachedNames) s.names.clear();  // a name per call: keep memory bounded
  s.names.emplace(std::string(text), id);
  return id;
}

std::uint32_t category_labels(SharedEvents& ev, Domain& d, DomainState& s,
                              std::uint32_t category) {
  if (category == 0) return 0;
  const std::uint32_t version = d.category_version.load(std::memory_order_acquire);
  if (s.category_version != version) {
    s.category_labels.clear();
    s.category_version = version;
  }
  auto it = s.category_labels.find(category);
  if (it != s.category_labels.end()) return it->second;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    auto named = d.categories.find(category);
    name = named != d.categories.end() ? named->second : std::to_string(category);
  }
  std::string json = "{\"category\":";
  append_json_string(json, name);
  json.push_back('}');
  const std::uint32_t id = ev.intern(json);
  s.category_labels.emplace(category, id);
  return id;
}

void name_category(DomainHandle handle, std::uint32_t category, std::string_view name) noexcept {
  Domain& d = domain_of(handle);
  try {
    std::lock_guard<std::mutex> lock(d.mutex);
    d.categories[category] = std::string(name);
  } catch (...) {
    return;
  }
  d.category_version.fetch_add(1, std::memory_order_release);
}

DomainHandle create_domain(std::string_view name) noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    auto& table = domains();
    auto it = table.find(std::string(name));
    if (it != table.end()) return it->second.get();  // one handle per name
    auto d = std::make_unique<Domain>();
    d->index = g_next_domain++;
    d->prefix = std::string(name) + "/";
    Domain* handle = d.get();
    table.emplace(std::string(name), std::move(d));
    return handle;
  } catch (...) {
    return nullptr;  // the default domain: its events still count
  }
}

StringHandle register_string(DomainHandle handle, std::string_view text) noexcept {
  Domain* d = &domain_of(handle);
  try {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    auto key = std::make_pair(d, std::string(text));
    auto it = strings().find(key);
    if (it != strings().end()) return it->second.get();
    auto s = std::make_unique<RegisteredString>();
    s->domain = d;
    s->text = std::string(text);
    StringHandle out = s.get();
    strings().emplace(std::move(key), std::move(s));
    return out;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace stroboscope::nvtx
