// Shared events (shared_events.hpp): the events file (create, map, strings) and the process's
// writers per producer.
#include "stroboscope/shared_events.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <mutex>
#include <new>

#include "stroboscope/clock.hpp"

namespace stroboscope {
namespace {

static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free,
              "the events file's counters are shared through a mapping: they must be lock-free");

template <typename T>
void put(char* base, std::size_t offset, T value) noexcept {
  std::memcpy(base + offset, &value, sizeof value);
}

std::atomic_ref<std::uint64_t> counter(const EventFile& f, std::size_t offset) noexcept {
  return std::atomic_ref<std::uint64_t>(*f.word(offset));
}

bool valid_producer(const char* p) noexcept {
  if (p == nullptr) return false;
  const std::size_t n = std::strlen(p);
  if (n == 0 || n > 16) return false;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = p[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

// Creates the file under an open directory: `<pid>.<producer>.sev`, then `.1`, `.2`, ... when a
// name is taken. O_EXCL: never a file someone else made (a planted one, or a reused pid's);
// O_NOFOLLOW: never through a symbolic link. -1 when none can be made.
int create_exclusive(int dir_fd, const char* producer, std::string& name) noexcept {
  const long pid = static_cast<long>(::getpid());
  char buf[96];
  for (int n = 0; n < 1000; ++n) {
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "%ld.%s.sev", pid, producer);
    } else {
      std::snprintf(buf, sizeof buf, "%ld.%s.%d.sev", pid, producer, n);
    }
    const int fd = ::openat(dir_fd, buf, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
      name = buf;
      return fd;
    }
    if (errno != EEXIST) return -1;
  }
  return -1;
}

constexpr std::uint64_t kStringsStep = 64 * 1024;

// fallocate mode 0: blocks reserved, data and size unchanged. A filesystem without fallocate
// (EOPNOTSUPP) cannot reserve: the file is used as it is (glibc's posix_fallocate would write
// zeros over the range instead, which a concurrent writer's data could be).
bool reserve_range(int fd, std::uint64_t offset, std::uint64_t len) noexcept {
  if (::fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(len)) == 0) return true;
  return errno == EOPNOTSUPP;
}

// The directory's doorbell, mapped, if the recorder made one (nullptr otherwise).
char* map_doorbell(int dir_fd) noexcept {
  const int fd = ::openat(dir_fd, sev::kDoorbellName, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return nullptr;
  struct stat st{};
  void* map = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_size >= static_cast<off_t>(sev::kBellBytes)) {
    map = ::mmap(nullptr, sev::kBellBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);  // the mapping keeps the file
  if (map == MAP_FAILED) return nullptr;
  if (std::memcmp(map, sev::kBellMagic, sizeof sev::kBellMagic) != 0) {
    ::munmap(map, sev::kBellBytes);
    return nullptr;
  }
  return static_cast<char*>(map);
}

// Whether the directory is one this process may write its events into: owned by its
// effective user and writable by nobody else. A directory another user made (after ours was
// removed, under the same name) or that anyone may write into is refused, said once on stderr
// (not the hot path: a log's first event).
bool directory_is_ours(int dir_fd, const char* dir) noexcept {
  struct stat st{};
  if (::fstat(dir_fd, &st) != 0) return false;
  if (st.st_uid == ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0) return true;
  static std::atomic<bool> said{false};
  if (!said.exchange(true, std::memory_order_relaxed)) {  // a flag, ordering nothing
    char msg[512];
    const int n = std::snprintf(
        msg, sizeof msg,
        "stroboscope: scope events are not written into %s: the directory %s (owner uid %ld, "
        "mode %03o)\n",
        dir, st.st_uid != ::geteuid() ? "is another user's" : "may be written by other users",
        static_cast<long>(st.st_uid), static_cast<unsigned>(st.st_mode & 0777));
    if (n > 0) (void)!::write(2, msg, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof msg - 1));
  }
  return false;
}

}  // namespace

bool reserve_event_chunk(const EventFile& f, std::uint64_t first, std::uint64_t count) noexcept {
  return reserve_range(f.fd, sev::kHeaderBytes + first * sev::kRecordBytes,
                       count * sev::kRecordBytes) &&
         reserve_range(f.fd, sev::kHeaderBytes + f.capacity * sev::kRecordBytes + first * 8,
                       count * 8);
}

EventFile* open_event_file(const char* dir, const char* producer, std::uint64_t capacity,
                           std::uint64_t first_index,
                           const std::vector<std::string>& strings) noexcept {
  if (dir == nullptr || !valid_producer(producer)) return nullptr;
  if (capacity < 2 || capacity > sev::kMaxCapacity) return nullptr;
  const std::uint64_t ring = capacity * (sev::kRecordBytes + 8);
  const std::uint64_t total = sev::kHeaderBytes + ring + sev::kStringsBytes;
  const int dir_fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dir_fd < 0) return nullptr;
  if (!directory_is_ours(dir_fd, dir)) {
    ::close(dir_fd);
    return nullptr;
  }
  std::string name;
  const int fd = create_exclusive(dir_fd, producer, name);
  if (fd < 0) {
    ::close(dir_fd);
    return nullptr;
  }
  // From here a failure empties the file and renames it `<name>.failed` (a name and no block:
  // that much a full disk still takes), so the recorder counts a process whose events it will
  // not see; removed when even that cannot be done.
  const auto fail = [&]() -> EventFile* {
    (void)::ftruncate(fd, 0);
    char failed[128];
    const int n = std::snprintf(failed, sizeof failed, "%s%s", name.c_str(), sev::kFailedSuffix);
    if (n <= 0 || static_cast<std::size_t>(n) >= sizeof failed ||
        ::renameat(dir_fd, name.c_str(), dir_fd, failed) != 0) {
      ::unlinkat(dir_fd, name.c_str(), 0);
    }
    ::close(fd);
    ::close(dir_fd);
    return nullptr;
  };
  // 0600 whatever the umask; the size now, the header's blocks reserved (the rest as it fills).
  if (::fchmod(fd, 0600) != 0) return fail();
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) return fail();
  if (!reserve_range(fd, 0, sev::kHeaderBytes)) return fail();
  void* map = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return fail();
  EventFile* f = new (std::nothrow) EventFile;
  if (f == nullptr) {
    ::munmap(map, total);
    return fail();
  }
  try {
    f->path = std::string(dir) + "/" + name;
  } catch (...) {
    delete f;
    ::munmap(map, total);
    return fail();
  }
  f->bell = map_doorbell(dir_fd);
  ::close(dir_fd);
  f->fd = fd;
  f->base = static_cast<char*>(map);
  f->bytes = total;
  f->capacity = capacity;
  char* b = f->base;
  put<std::uint32_t>(b, sev::kOffVersion, sev::kVersion);
  put<std::uint32_t>(b, sev::kOffHeaderBytes, static_cast<std::uint32_t>(sev::kHeaderBytes));
  put<std::int64_t>(b, sev::kOffPid, static_cast<std::int64_t>(::getpid()));
  put<std::int64_t>(b, sev::kOffParentPid, static_cast<std::int64_t>(::getppid()));
  put<std::uint64_t>(b, sev::kOffCapacity, capacity);
  put<std::uint64_t>(b, sev::kOffSlots, sev::kHeaderBytes);
  put<std::uint64_t>(b, sev::kOffStates, sev::kHeaderBytes + capacity * sev::kRecordBytes);
  put<std::uint64_t>(b, sev::kOffStrings, sev::kHeaderBytes + ring);
  put<std::uint64_t>(b, sev::kOffStringsCapacity, sev::kStringsBytes);
  put<std::uint64_t>(b, sev::kOffFirstIndex, first_index);
  put<std::int64_t>(b, sev::kOffCreatedNs, mono_ns());
  put<std::uint32_t>(b, sev::kOffRecordBytes, static_cast<std::uint32_t>(sev::kRecordBytes));
  put<std::uint32_t>(b, sev::kOffFlags, 0);
  std::strncpy(b + sev::kOffProducer, producer, sev::kProducerBytes - 1);
  // The strings so far, ids in order: "" is id 0 whether or not anything was interned yet.
  (void)append_event_string(*f, std::string_view());
  for (std::size_t i = 1; i < strings.size(); ++i) (void)append_event_string(*f, strings[i]);
  // release: a reader that sees the magic (acquire) sees the header written above.
  std::atomic_ref<std::uint64_t> magic(*f->word(0));
  std::uint64_t m = 0;
  std::memcpy(&m, sev::kMagic, sizeof m);
  magic.store(m, std::memory_order_release);
  return f;
}

void close_event_file(EventFile* file) noexcept {
  if (file == nullptr) return;
  if (file->bell != nullptr) ::munmap(file->bell, sev::kBellBytes);
  ::munmap(file->base, file->bytes);
  ::close(file->fd);
  delete file;
}

bool append_event_string(EventFile& f, std::string_view text) noexcept {
  const std::uint64_t area = *f.word(sev::kOffStrings);
  const std::uint64_t cap = *f.word(sev::kOffStringsCapacity);
  // relaxed: only this process appends, under its log's strings mutex.
  const std::uint64_t used = counter(f, sev::kOffStringsUsed).load(std::memory_order_relaxed);
  const std::uint64_t need = 4 + text.size();
  bool room = !f.strings_full && text.size() <= UINT32_MAX && used + need <= cap;
  if (room && used + need > f.strings_reserved) {
    const std::uint64_t upto =
        std::min(cap, (used + need + kStringsStep - 1) / kStringsStep * kStringsStep);
    room = reserve_range(f.fd, area + f.strings_reserved, upto - f.strings_reserved);
    if (room) f.strings_reserved = upto;
  }
  if (!room) {
    // Ids are positions: once one string is missing no later one can be placed right.
    f.strings_full = true;
    counter(f, sev::kOffStringsMissing).fetch_add(1, std::memory_order_relaxed);  // a count
    return false;
  }
  char* at = f.base + area + used;
  const auto len = static_cast<std::uint32_t>(text.size());
  std::memcpy(at, &len, 4);
  if (!text.empty()) std::memcpy(at + 4, text.data(), text.size());
  // release: the entry's bytes happen-before the new length; a reader that loads it (acquire)
  // reads whole entries only. The count follows (a reader takes the entries, not the count).
  counter(f, sev::kOffStringsUsed).store(used + need, std::memory_order_release);
  counter(f, sev::kOffStringsCount).fetch_add(1, std::memory_order_release);
  return true;
}

namespace {

// The process's writers: made once each, never freed (threads may push while the process
// exits). "py" is the global log's; the others own a log of their own.
constexpr int kMaxProducers = 8;
struct Registry {
  std::mutex mutex;
  int count = 0;
  char names[kMaxProducers][17] = {};
  SharedEvents* writers[kMaxProducers] = {};
  EventLog* own_logs[kMaxProducers] = {};  // logs made here (fork handlers), nullptr for "py"
};
constinit Registry* g_registry = nullptr;
std::once_flag g_registry_once;

Registry& registry() {
  std::call_once(g_registry_once, [] { g_registry = new Registry; });
  return *g_registry;
}

// Fork: the logs made here get the handlers the global log gets in events_log.cpp.
void registry_prepare() {
  Registry& r = registry();
  r.mutex.lock();
  for (int i = 0; i < r.count; ++i) {
    if (r.own_logs[i] != nullptr) r.own_logs[i]->before_fork();
  }
}
void registry_parent() {
  Registry& r = *g_registry;
  for (int i = 0; i < r.count; ++i) {
    if (r.own_logs[i] != nullptr) r.own_logs[i]->after_fork_parent();
  }
  r.mutex.unlock();
}
void registry_child() {
  Registry& r = *g_registry;
  for (int i = 0; i < r.count; ++i) {
    if (r.own_logs[i] != nullptr) r.own_logs[i]->after_fork_child();
  }
  r.mutex.unlock();
}

}  // namespace

SharedEvents* SharedEvents::process(const char* producer) noexcept {
  if (!valid_producer(producer)) return nullptr;
  const char* dir = std::getenv(kEventsDirEnv);
  if (dir == nullptr || *dir == '\0') return nullptr;
  try {
    static const int atfork = pthread_atfork(registry_prepare, registry_parent, registry_child);
    (void)atfork;
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (int i = 0; i < r.count; ++i) {
      if (std::strcmp(r.names[i], producer) == 0) return r.writers[i];
    }
    if (r.count == kMaxProducers) return nullptr;
    EventLog* log = nullptr;
    EventLog* own = nullptr;
    if (std::strcmp(producer, "py") == 0) {
      log = &EventLog::global();
    } else {
      char* name = new char[17];
      std::strncpy(name, producer, 16);
      name[16] = '\0';
      own = log = new EventLog(name, nullptr, false);
    }
    if (!log->share_now()) return nullptr;  // (a leaked log of a few bytes: once per producer)
    auto* w = new SharedEvents(log);
    std::strncpy(r.names[r.count], producer, 16);
    r.writers[r.count] = w;
    r.own_logs[r.count] = own;
    ++r.count;
    return w;
  } catch (...) {
    return nullptr;
  }
}

}  // namespace stroboscope
