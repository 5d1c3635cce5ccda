// Shared events: a log whose ring lives in a file; the file read back as another process would
// (its header, states, records and strings, nothing of the writer's memory), with many
// producer threads, a ring that laps, a forked child, and SharedEvents::process.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <system_error>
#include <atomic>
#include <thread>
#include <vector>

#include "check.hpp"
#include "stroboscope/events.hpp"
#include "stroboscope/shared_events.hpp"

using stroboscope::EventKind;
using stroboscope::EventLog;
using stroboscope::SharedEvents;
namespace sev = stroboscope::sev;

namespace {

std::string make_dir() {
  char tmpl[] = "/tmp/stroboscope-sev-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d != nullptr ? std::string(d) : std::string();
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void remove_dir(const std::string& dir) {
  for (const auto& name : list_dir(dir)) unlink((dir + "/" + name).c_str());
  rmdir(dir.c_str());
}

std::string slurp(const std::string& path) {
  std::string data;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    data.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return data;
}

template <typename T>
T get(const std::string& data, std::size_t offset) {
  T v{};
  std::memcpy(&v, data.data() + offset, sizeof v);
  return v;
}

// What a reader in another process finds in a file: records by index, and the strings.
struct Parsed {
  bool ok = false;
  std::int64_t pid = 0;
  std::uint64_t capacity = 0;
  std::uint64_t first_index = 0;
  std::string producer;
  std::map<std::uint64_t, std::vector<std::uint64_t>> records;  // index -> the four words
  std::vector<std::string> strings;
};

Parsed parse(const std::string& path) {
  Parsed p;
  const std::string d = slurp(path);
  if (d.size() < sev::kHeaderBytes || std::memcmp(d.data(), sev::kMagic, 8) != 0) return p;
  p.pid = get<std::int64_t>(d, sev::kOffPid);
  p.capacity = get<std::uint64_t>(d, sev::kOffCapacity);
  p.first_index = get<std::uint64_t>(d, sev::kOffFirstIndex);
  p.producer = std::string(d.data() + sev::kOffProducer);
  const auto slots = get<std::uint64_t>(d, sev::kOffSlots);
  const auto states = get<std::uint64_t>(d, sev::kOffStates);
  for (std::uint64_t i = 0; i < p.capacity; ++i) {
    const auto s = get<std::uint64_t>(d, states + i * 8);
    if (s == 0 || (s & 1) != 0) continue;
    std::vector<std::uint64_t> w(4);
    for (int k = 0; k < 4; ++k) w[k] = get<std::uint64_t>(d, slots + i * 32 + k * 8);
    p.records[(s >> 1) - 1] = w;
  }
  const auto strings = get<std::uint64_t>(d, sev::kOffStrings);
  const auto used = get<std::uint64_t>(d, sev::kOffStringsUsed);
  for (std::uint64_t at = 0; at + 4 <= used;) {
    const auto n = get<std::uint32_t>(d, strings + at);
    p.strings.emplace_back(d.data() + strings + at + 4, n);
    at += 4 + n;
  }
  p.ok = true;
  return p;
}

// Producers on 4 threads, each event numbered so that a mixed record shows; all read back
// from the file, once each, with the header and strings a reader needs.
void test_threads_into_file() {
  const std::string dir = make_dir();
  CHECK(!dir.empty());
  {
    EventLog log(1 << 16, "py", dir.c_str(), false);
    const std::uint32_t name = log.intern("step");
    const std::uint32_t labels = log.intern("{\"rank\":\"0\"}");
    constexpr int kThreads = 4;
    constexpr std::uint32_t kEach = 5000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (std::uint32_t n = 0; n < kEach; ++n) {
          log.push(n % 2 == 0 ? EventKind::kBegin : EventKind::kEnd, name,
                   static_cast<std::uint16_t>(n % 7), labels, (std::uint64_t{7u + t} << 32) | n);
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(!log.file_path().empty());
    const auto files = list_dir(dir);
    CHECK_EQ(files.size(), 1u);
    CHECK(files.size() == 1 && files[0] == std::to_string(getpid()) + ".py.sev");
    struct stat st{};
    CHECK_EQ(stat(log.file_path().c_str(), &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600u);
    const Parsed p = parse(log.file_path());
    CHECK(p.ok);
    CHECK_EQ(p.pid, static_cast<std::int64_t>(getpid()));
    CHECK(p.producer == "py");
    CHECK_EQ(p.capacity, std::uint64_t{1} << 16);
    CHECK_EQ(p.records.size(), std::size_t{kThreads} * kEach);
    CHECK(p.strings.size() == 3 && p.strings[0].empty() && p.strings[name] == "step" &&
          p.strings[labels] == "{\"rank\":\"0\"}");
    std::map<std::uint64_t, int> seen;
    for (const auto& [index, w] : p.records) {
      const auto n = static_cast<std::uint32_t>(w[1]);
      const std::uint64_t want3 =
          (n % 2 == 0 ? std::uint64_t{1} : std::uint64_t{2}) << 48 |
          std::uint64_t{n % 7} << 32;
      CHECK_EQ(w[3] & ~std::uint64_t{0xFFFFFFFF}, want3);
      CHECK_EQ(w[2], std::uint64_t{name} | std::uint64_t{labels} << 32);
      ++seen[w[1]];
    }
    CHECK_EQ(seen.size(), std::size_t{kThreads} * kEach);  // each event once
    // The in-process reader sees the same events.
    CHECK_EQ(log.read(0, UINT64_MAX).columns.size(), std::size_t{kThreads} * kEach);
    // A string interned after the events is appended with the next id.
    CHECK_EQ(log.intern("later"), 3u);
    CHECK(parse(log.file_path()).strings.size() == 4);
  }
  remove_dir(dir);
}

// A ring that laps in its file: the file holds the latest `capacity` records.
void test_file_ring_laps() {
  const std::string dir = make_dir();
  {
    EventLog log(128, "nvtx", dir.c_str(), false);
    const std::uint32_t id = log.intern("x");
    for (std::uint64_t n = 0; n < 1000; ++n) log.push(EventKind::kBegin, id, 0, 0, n);
    const Parsed p = parse(log.file_path());
    CHECK(p.producer == "nvtx");
    CHECK_EQ(p.records.size(), 128u);
    CHECK_EQ(p.records.begin()->first, 1000u - 128u);
    for (const auto& [index, w] : p.records) CHECK_EQ(w[1], index);
  }
  remove_dir(dir);
}

// A directory that cannot take the file: a shared log without fallback drops (counted), the
// global kind keeps its events in memory.
void test_no_directory() {
  EventLog strict(64, "nvtx", "/nonexistent/stroboscope-sev", false);
  strict.push(EventKind::kBegin, 0, 0, 0, 0);
  CHECK_EQ(strict.stats().dropped, 1u);
  CHECK(strict.file_path().empty());
  EventLog lenient(64, "py", "/nonexistent/stroboscope-sev", true);
  lenient.push(EventKind::kBegin, 0, 0, 0, 0);
  CHECK_EQ(lenient.stats().dropped, 0u);
  CHECK_EQ(lenient.read(0, UINT64_MAX).columns.size(), 1u);
}

// A directory others may write into is refused (nothing made there: the strict log drops, the
// lenient one keeps its events in memory); so is a ring beyond the largest a reader takes.
void test_directory_not_ours_alone() {
  const std::string dir = make_dir();
  CHECK(!dir.empty());
  CHECK_EQ(chmod(dir.c_str(), 0777), 0);
  EventLog strict(64, "nvtx", dir.c_str(), false);
  strict.push(EventKind::kBegin, 0, 0, 0, 0);
  CHECK_EQ(strict.stats().dropped, 1u);
  EventLog lenient(64, "py", dir.c_str(), true);
  lenient.push(EventKind::kBegin, 0, 0, 0, 0);
  CHECK_EQ(lenient.read(0, UINT64_MAX).columns.size(), 1u);
  CHECK(list_dir(dir).empty());
  CHECK_EQ(chmod(dir.c_str(), 0700), 0);
  CHECK(stroboscope::open_event_file(dir.c_str(), "py", sev::kMaxCapacity * 2, 0, {}) ==
        nullptr);
  CHECK(list_dir(dir).empty());
  remove_dir(dir);
}

// fork: the child leaves the parent's file alone and writes a file of its own on its first
// event, with the strings it inherited (same ids) and its indices going on from the fork.
void test_fork_child_file() {
  const std::string dir = make_dir();
  {
    EventLog log(256, "py", dir.c_str(), false);
    const std::uint32_t id = log.intern("parent");
    log.push(EventKind::kBegin, id, 0, 0, 1);
    log.push(EventKind::kEnd, id, 0, 0, 1);
    log.before_fork();  // as the atfork handlers of a registered log do
    const pid_t child = fork();
    if (child == 0) {
      log.after_fork_child();
      const std::uint32_t mine = log.intern("child");
      log.push(EventKind::kBegin, mine, 0, 0, 2);
      _exit(log.file_path().find(std::to_string(getpid()) + ".py.sev") == std::string::npos);
    }
    log.after_fork_parent();
    int status = 0;
    CHECK_EQ(waitpid(child, &status, 0), child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const Parsed parent = parse(log.file_path());
    CHECK_EQ(parent.records.size(), 2u);  // the child wrote nothing into it
    const Parsed kid = parse(dir + "/" + std::to_string(child) + ".py.sev");
    CHECK(kid.ok);
    CHECK_EQ(kid.pid, static_cast<std::int64_t>(child));
    CHECK_EQ(kid.first_index, 2u);
    CHECK_EQ(kid.records.size(), 1u);
    CHECK(kid.records.count(2) == 1);
    CHECK(kid.strings.size() == 3 && kid.strings[id] == "parent" && kid.strings[2] == "child");
  }
  remove_dir(dir);
}

// SharedEvents::process: nullptr without the variable; with it, one writer per producer, its
// file named after the pid; a taken name gets a suffix.
void test_process_writers() {
  unsetenv(stroboscope::kEventsDirEnv);
  CHECK(SharedEvents::process("nvtx") == nullptr);
  const std::string dir = make_dir();
  setenv(stroboscope::kEventsDirEnv, dir.c_str(), 1);
  CHECK(SharedEvents::process("Bad Name") == nullptr);
  // A file already at the name (a reused pid's): ours gets the next free suffix.
  const std::string taken = dir + "/" + std::to_string(getpid()) + ".nvtx.sev";
  close(open(taken.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  SharedEvents* w = SharedEvents::process("nvtx");
  CHECK(w != nullptr);
  if (w != nullptr) {
    CHECK(SharedEvents::process("nvtx") == w);
    const std::uint32_t id = w->intern("range");
    w->push(EventKind::kBegin, id, 0, 0, 5);
    w->mark(id, 1, 0, 5);
    w->push(EventKind::kEnd, id, 0, 0, 5);
    CHECK(w->log().file_path() == dir + "/" + std::to_string(getpid()) + ".nvtx.1.sev");
    const Parsed p = parse(w->log().file_path());
    CHECK_EQ(p.records.size(), 4u);
    CHECK(p.producer == "nvtx");
  }
  unsetenv(stroboscope::kEventsDirEnv);
  // (the writer lives as long as the process; its file is left in the directory)
}

// The doorbell: a begin written into a file of the directory wakes the recorder's waiter, which
// calls its function; ends do not ring; a second doorbell in the directory is refused.
void test_doorbell() {
  const std::string dir = make_dir();
  {
    std::atomic<int> rung{0};
    stroboscope::EventsDoorbell bell(dir, [&rung] { rung.fetch_add(1); });
    bool refused = false;
    try {
      stroboscope::EventsDoorbell again(dir, [] {});
    } catch (const std::system_error&) {
      refused = true;
    }
    CHECK(refused);
    EventLog log(64, "py", dir.c_str(), false);
    const std::uint32_t id = log.intern("step");
    // Let the waiter reach its sleep (its flag up), then open a scope.
    for (int i = 0; i < 2000; ++i) {
      const std::string d = slurp(bell.path());
      if (d.size() >= sev::kBellBytes && get<std::uint32_t>(d, sev::kOffBellWaiting) == 1) break;
      usleep(1000);
    }
    log.push(EventKind::kBegin, id, 0, 0, 1);
    for (int i = 0; i < 5000 && rung.load() == 0; ++i) usleep(1000);
    CHECK(rung.load() >= 1);
    const int after_begin = rung.load();
    log.push(EventKind::kEnd, id, 0, 0, 1);
    usleep(50'000);
    CHECK_EQ(rung.load(), after_begin);  // an end asks for nothing
    bell.stop();
    CHECK_EQ(bell.wakes(), static_cast<std::uint64_t>(rung.load()));
    // Stopped: the flag is down, so the command's begins make no more system calls.
    CHECK_EQ(get<std::uint32_t>(slurp(bell.path()), sev::kOffBellWaiting), 0u);
  }
  remove_dir(dir);
}

// A word of the doorbell file, read as another process would.
std::uint32_t bell_word(const stroboscope::EventsDoorbell& bell, std::size_t offset) {
  const std::string d = slurp(bell.path());
  return d.size() >= sev::kBellBytes ? get<std::uint32_t>(d, offset) : 0xFFFFFFFFu;
}

// Waits (up to ~10 s, a bound for a loaded machine, not a timing) until `done()`.
template <typename Done>
bool eventually(Done done) {
  for (int i = 0; i < 10'000; ++i) {
    if (done()) return true;
    usleep(1000);
  }
  return done();
}

// A waiter that sleeps is always woken by a begin: it sleeps with no timeout, so a begin that
// did not wake it (a dropped FUTEX_WAKE, a bump after the wake) leaves it asleep and this fails.
void test_doorbell_wakes_sleeper() {
  const std::string dir = make_dir();
  {
    std::atomic<int> rung{0};
    stroboscope::EventsDoorbell bell(dir, [&rung] { rung.fetch_add(1); });
    EventLog log(64, "py", dir.c_str(), false);
    const std::uint32_t id = log.intern("step");
    for (int round = 0; round < 20; ++round) {
      CHECK(eventually([&] { return bell_word(bell, sev::kOffBellWaiting) == 1; }));
      usleep(2000);  // most rounds: the waiter is in the kernel by now
      const int before = rung.load();
      log.push(EventKind::kBegin, id, 0, 0, 1);
      log.push(EventKind::kEnd, id, 0, 0, 1);
      CHECK(eventually([&] { return rung.load() > before; }));
    }
    bell.stop();
  }
  remove_dir(dir);
}

// Begins written while the waiter asks for a row (its function still running): the first takes
// the flag down and bumps the word once, the rest only load the flag (one system call for them
// all), and the waiter asks again once it is done, so each of them has a row asked after it.
void test_doorbell_begins_while_asking() {
  const std::string dir = make_dir();
  {
    std::atomic<int> calls{0};
    std::atomic<bool> go_on{false};
    stroboscope::EventsDoorbell bell(dir, [&] {
      calls.fetch_add(1);
      while (!go_on.load()) usleep(100);
    });
    EventLog log(1024, "py", dir.c_str(), false);
    const std::uint32_t id = log.intern("step");
    CHECK(eventually([&] { return bell_word(bell, sev::kOffBellWaiting) == 1; }));
    log.push(EventKind::kBegin, id, 0, 0, 1);
    CHECK(eventually([&] { return calls.load() == 1; }));
    // Asking: the flag is up again (raised before the ask), so the next begin wakes it.
    CHECK_EQ(bell_word(bell, sev::kOffBellWaiting), 1u);
    const std::uint32_t rings = bell_word(bell, sev::kOffBellRings);
    for (int i = 0; i < 300; ++i) {
      log.push(EventKind::kBegin, id, 1, 0, 1);
      log.push(EventKind::kEnd, id, 1, 0, 1);
    }
    CHECK_EQ(bell_word(bell, sev::kOffBellRings), rings + 1);  // one wake for 300 begins
    CHECK_EQ(bell_word(bell, sev::kOffBellWaiting), 0u);
    go_on.store(true);
    CHECK(eventually([&] { return calls.load() == 2; }));  // asked again, after them
    CHECK(eventually([&] { return bell_word(bell, sev::kOffBellWaiting) == 1; }));
    bell.stop();
    CHECK_EQ(calls.load(), 2);
    CHECK_EQ(bell.wakes(), 2u);
  }
  remove_dir(dir);
}

}  // namespace

int main() {
  test_fork_child_file();  // first, while the process has one thread
  test_threads_into_file();
  test_file_ring_laps();
  test_no_directory();
  test_directory_not_ours_alone();
  test_process_writers();
  test_doorbell();
  test_doorbell_wakes_sleeper();
  test_doorbell_begins_while_asking();
  TEST_MAIN_END();
}
