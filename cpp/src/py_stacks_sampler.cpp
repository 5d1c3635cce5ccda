// The stack sampler: its thread, the processes it follows, the walk of one process's threads,
// and the interning of frames and stacks. See py_stacks.hpp for the design.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <deque>

#include "stroboscope/clock.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/py_stacks.hpp"
#include "stroboscope/wake.hpp"

namespace stroboscope::py_stacks {
namespace {

constexpr std::size_t kIovBatch = 512;         // iovecs per process_vm_readv (IOV_MAX is 1024)
constexpr std::size_t kMaxString = 8 * 1024;  // bytes of one str object read (header + name)
constexpr std::size_t kMaxName = 1024;        // UTF-8 bytes of a name kept (cut at a character)
constexpr std::int64_t kNameRefreshNs = 1'000'000'000;
constexpr std::int64_t kPidCheckNs = 10'000'000;  // how often /proc/loadavg is looked at
constexpr int kMaxNewPids = 4096;  // more new pids than this in 10 ms: a full scan instead
constexpr int kProbeScans = 10;  // a process that is not (yet) Python is probed this many scans

std::uint64_t u64_at(const std::uint8_t* p, std::int64_t off) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p + off, 8);
  return v;
}

// One process_vm_readv of one range; false on any failure or short read.
bool read_remote(int pid, std::uint64_t addr, void* out, std::size_t n, int* err) noexcept {
  iovec local{out, n};
  iovec remote{reinterpret_cast<void*>(addr), n};
  const ssize_t r = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (r == static_cast<ssize_t>(n)) return true;
  *err = r < 0 ? errno : EFAULT;
  return false;
}

// The thread's on-CPU ns from /proc/PID/task/TID/schedstat (the first field).
std::int64_t schedstat_ns(int fd) noexcept {
  char buf[128];
  ssize_t r;
  do {
    r = ::pread(fd, buf, sizeof buf - 1, 0);
  } while (r < 0 && errno == EINTR);
  if (r <= 0) return -1;
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(buf, buf + r, v);
  return ec == std::errc{} ? v : -1;
}

// This process's thread `tid`'s CPU clock (the kernel's MAKE_THREAD_CPUCLOCK(tid, SCHED)).
std::int64_t own_thread_cpu_ns(int tid) noexcept {
  const clockid_t id = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6U);
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return -1;
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::uint64_t hash_ids(const std::int32_t* ids, std::size_t n) noexcept {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the ids' bytes
  for (std::size_t i = 0; i < n; ++i) {
    auto v = static_cast<std::uint32_t>(ids[i]);
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xFF;
      h *= 1099511628211ULL;
    }
  }
  return h;
}

// Whether a linked list (thread states, frames) came back to an element it had passed: Brent's
// cycle check, O(1) memory. Each element is compared with one saved before it, re-saved at every
// power of two steps, so a cycle of length c entered after m steps is found within about
// 2 * max(m, c) + c steps. The memory is the target's: a list that loops is hostile or torn.
struct LoopCheck {
  std::uint64_t saved = 0;
  std::size_t power = 1, steps = 0;
  [[nodiscard]] bool repeats(std::uint64_t p) noexcept {
    if (p == saved) return true;
    if (++steps == power) {
      saved = p;
      power *= 2;
      steps = 0;
    }
    return false;
  }
};

struct FrameKey {
  std::int32_t function, file, line;
  bool operator==(const FrameKey&) const = default;
};
struct FrameKeyHash {
  std::size_t operator()(const FrameKey& k) const noexcept {
    return std::hash<std::uint64_t>{}((static_cast<std::uint64_t>(k.function) << 32) ^
                                      static_cast<std::uint64_t>(k.file) ^
                                      (static_cast<std::uint64_t>(k.line) << 17));
  }
};

struct ThreadSlot {
  int tid = 0;
  int fd = -1;  // schedstat of another process's thread
  std::int64_t prev_cpu = 0;
  bool has_prev = false;
  std::int32_t name = -1;
  std::int64_t name_at = 0;
  std::uint64_t seen = 0;
};

struct CodeEntry {
  std::uint64_t qualname = 0, filename = 0;
  std::int32_t line = 0;
  std::int32_t frame = -1;
  std::uint64_t validated = 0;  // the round that last read these fields back
};

struct Target {
  int pid = 0;
  bool own = false;
  bool ok = false;
  bool gone = false;
  bool read = false;  // a stack of it was recorded
  int probes = 0;
  std::uint64_t runtime = 0;
  std::string auxv;
  std::string why;
  std::uint64_t scan = 0;  // the latest tree scan that found it
  std::uint64_t mark = 0;  // the latest round read: its threads' slots carry it
  std::vector<std::uint64_t> thread_list;  // the first interpreter's thread states, last round
  std::vector<ThreadSlot> slots;
  std::unordered_map<std::uint64_t, CodeEntry> codes;
};

// One thread's walk in a round: its codes, leaf first, are codes_[begin, end).
struct Walk {
  int tid;
  std::size_t begin, end;
  bool failed;
};

}  // namespace

struct StackSampler::Impl {
  StroboscopePyLayout L;
  int root_pid;
  bool tree;
  std::int64_t interval_ns;
  std::string proc_root;
  std::vector<std::unique_ptr<Target>> targets;
  std::int64_t next_scan_ns = 0;
  std::uint64_t scan_no = 0;
  std::uint64_t round = 0;
  ElfCache elf_cache;
  std::int64_t probe_ns = 0;  // time the latest scan spent probing new processes

  // Interned strings, frames and stacks. Only the sampling thread adds to them, under pub_mu
  // (only when something new is seen); drains read them under it.
  mutable std::mutex pub_mu;
  std::deque<std::string> strings;
  std::unordered_map<std::string_view, std::int32_t> string_ids;
  std::vector<FrameKey> frames;
  std::unordered_map<FrameKey, std::int32_t, FrameKeyHash> frame_ids;
  std::vector<std::int32_t> stack_pool;   // frame ids of every stack, root first
  std::vector<std::size_t> stack_begin;   // stack i is stack_pool[stack_begin[i], [i+1])
  std::unordered_multimap<std::uint64_t, std::int32_t> stack_ids;
  std::vector<std::pair<int, std::string>> skipped;

  // The samples buffer: single producer (the sampling thread), single consumer (drain).
  std::vector<StackSample> ring;
  std::size_t mask;
  // head_: written by the producer only, read by the consumer (acquire: the slots before it are
  // written); tail_: the reverse. Each on its own cache line.
  alignas(64) std::atomic<std::uint64_t> head{0};
  alignas(64) std::atomic<std::uint64_t> tail{0};

  // Statistics: written by the sampling thread, read by stats() (relaxed: counts stand alone).
  std::atomic<std::uint64_t> ticks{0}, missed{0}, samples{0}, threads_read{0}, reads_failed{0},
      extra_reads{0}, truncated{0}, dropped{0}, processes{0}, torn{0}, threads_capped{0},
      processes_capped{0};
  std::atomic<std::int64_t> busy_ns{0};
  std::atomic<clockid_t> cpu_clock{0};
  std::atomic<bool> cpu_clock_valid{false};
  std::atomic<std::int64_t> cpu_done_ns{0};

  std::atomic<bool> stop{false};
  std::atomic<std::uint32_t> stop_word{0};

  // Threads of this process not read (0 = a free slot). Set and cleared by any thread with a
  // compare-exchange (a slot is claimed whole); read by the sampling thread with relaxed loads:
  // each slot is one value standing alone, and a change seen one round late is harmless.
  std::array<std::atomic<int>, StackSampler::kMaxSkipped> skip{};

  [[nodiscard]] bool left_out(int tid) const noexcept {
    for (const auto& slot : skip) {
      if (slot.load(std::memory_order_relaxed) == tid) return true;
    }
    return false;
  }

  // Scratch, sized once.
  std::vector<std::uint8_t> tstate_buf, chunk_buf, frame_buf, code_buf, str_buf;
  std::vector<std::uint8_t> ts_bufs;    // a round's thread states, one after the other
  std::vector<std::uint8_t> chunk_all;  // the batched chunk copies, kSlotBytes per thread
  struct BatchThread {
    std::uint64_t frame_at, frame, chunk, top;
    std::size_t iov_begin, iov_end;
    bool chunk_copied;
  };
  std::array<BatchThread, 64> batch{};
  std::vector<char> utf8_buf;
  std::vector<std::uint64_t> codes, uniq;
  std::vector<Walk> walks;
  std::vector<std::int32_t> stack_scratch;
  std::vector<iovec> local_iov, remote_iov;
  std::size_t code_lo = 0, code_len = 0;

  Impl(const StroboscopePyLayout& layout, int pid, bool follow_tree, std::int64_t interval,
       std::size_t capacity, std::string root)
      : L(layout), root_pid(pid == 0 ? ::getpid() : pid), tree(follow_tree),
        interval_ns(interval), proc_root(std::move(root)) {
    std::size_t cap = 1;
    while (cap < std::max<std::size_t>(capacity, 2)) cap <<= 1;
    ring.resize(cap);
    mask = cap - 1;
    tstate_buf.resize(static_cast<std::size_t>(std::max<std::int64_t>(L.tstate_size, 8)));
    chunk_buf.resize(kChunkCopy);
    frame_buf.resize(static_cast<std::size_t>(std::max<std::int64_t>(L.frame_size, 8)));
    const std::int64_t lo = std::min({L.code_qualname, L.code_filename, L.code_firstlineno});
    const std::int64_t hi = std::max({L.code_qualname, L.code_filename, L.code_firstlineno}) + 8;
    code_lo = static_cast<std::size_t>(lo);
    code_len = static_cast<std::size_t>(hi - lo);
    code_buf.resize(code_len * kIovBatch);
    str_buf.resize(kMaxString);
    utf8_buf.resize(kMaxName);
    codes.reserve(kMaxDepth * 16);
    uniq.reserve(kMaxDepth * 16);
    walks.reserve(kMaxThreads);
    stack_scratch.reserve(kMaxDepth);
    local_iov.resize(kIovBatch);
    remote_iov.resize(kIovBatch);
    ts_bufs.resize(16 * tstate_buf.size());
    chunk_all.resize(8 * 32 * 1024);
    if (tree) loadavg_fd = ::open((proc_root + "/loadavg").c_str(), O_RDONLY | O_CLOEXEC);
  }

  ~Impl() {
    if (loadavg_fd >= 0) ::close(loadavg_fd);
    for (auto& t : targets) close_slots(*t, true);
  }

  static void close_slots(Target& t, bool all) {
    auto& s = t.slots;
    for (std::size_t i = 0; i < s.size();) {
      if (all || s[i].seen != t.mark) {
        if (s[i].fd >= 0) ::close(s[i].fd);
        s[i] = s.back();
        s.pop_back();
      } else {
        ++i;
      }
    }
  }

  // -- interning (new things only) ------------------------------------------------------------

  std::int32_t intern_string(std::string_view s) {
    const auto it = string_ids.find(s);
    if (it != string_ids.end()) return it->second;
    std::lock_guard lock(pub_mu);
    strings.emplace_back(s);
    const auto id = static_cast<std::int32_t>(strings.size() - 1);
    string_ids.emplace(std::string_view(strings.back()), id);
    return id;
  }

  std::int32_t intern_frame(std::int32_t function, std::int32_t file, std::int32_t line) {
    const FrameKey k{function, file, line};
    const auto it = frame_ids.find(k);
    if (it != frame_ids.end()) return it->second;
    std::lock_guard lock(pub_mu);
    frames.push_back(k);
    const auto id = static_cast<std::int32_t>(frames.size() - 1);
    frame_ids.emplace(k, id);
    return id;
  }

  std::int32_t intern_stack(const std::int32_t* ids, std::size_t n) {
    const std::uint64_t h = hash_ids(ids, n);
    const auto [lo, hi] = stack_ids.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
      const auto s = static_cast<std::size_t>(it->second);
      const std::size_t b = stack_begin[s];
      const std::size_t e = s + 1 < stack_begin.size() ? stack_begin[s + 1] : stack_pool.size();
      if (e - b == n && std::equal(ids, ids + n, stack_pool.data() + b)) return it->second;
    }
    std::lock_guard lock(pub_mu);
    const auto id = static_cast<std::int32_t>(stack_begin.size());
    stack_begin.push_back(stack_pool.size());
    stack_pool.insert(stack_pool.end(), ids, ids + n);
    stack_ids.emplace(h, id);
    return id;
  }

  // -- processes ------------------------------------------------------------------------------

  // The process's ELF auxiliary vector: it changes at each exec (AT_ENTRY, AT_RANDOM, AT_BASE
  // move with ASLR), even into the same executable, so a process that exec'd is probed again.
  std::string read_auxv(int pid) const {
    const std::string path = proc_root + "/" + std::to_string(pid) + "/auxv";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    char buf[1024];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    ::close(fd);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  }

  void probe(Target& t) {
    const std::int64_t t0 = mono_ns();
    probe_inner(t);
    probe_ns += mono_ns() - t0;
  }

  void probe_inner(Target& t) {
    ++t.probes;
    t.ok = false;
    t.codes.clear();
    const RuntimeAddress where = find_runtime(t.pid, proc_root.c_str(), &elf_cache);
    if (where.runtime == 0) {
      t.why = where.why;
      return;
    }
    if (where.version == 0) {
      t.why = "CPython older than 3.11 (no Py_Version in " + where.image + ")";
      return;
    }
    std::uint32_t version = 0;
    int err = 0;
    if (!read_remote(t.pid, where.version, &version, 4, &err)) {
      t.why = std::string("cannot read its memory (process_vm_readv: ") + std::strerror(err) + ")";
      if (err == ESRCH) t.gone = true;
      return;
    }
    if ((version >> 16) != (L.version_hex >> 16)) {
      t.why = "CPython " + std::to_string(version >> 24) + "." +
              std::to_string((version >> 16) & 0xFF) + " in the process; stacks are built for " +
              std::to_string(L.version_hex >> 24) + "." + std::to_string((L.version_hex >> 16) & 0xFF);
      return;
    }
    t.runtime = where.runtime;
    t.ok = true;
    t.why.clear();
  }

  // The pids of root's tree (root first), from every /proc/N/stat's ppid.
  std::vector<int> tree_pids() {
    std::vector<std::pair<int, int>> parent;  // (pid, ppid)
    DIR* d = ::opendir(proc_root.c_str());
    if (d == nullptr) return {root_pid};
    while (const dirent* e = ::readdir(d)) {
      int pid = 0;
      const char* name = e->d_name;
      const auto [p, ec] = std::from_chars(name, name + std::strlen(name), pid);
      if (ec != std::errc{} || *p != '\0' || pid <= 0) continue;
      const std::string path = proc_root + "/" + name + "/stat";
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char buf[1024];
      const ssize_t n = ::read(fd, buf, sizeof buf - 1);
      ::close(fd);
      if (n <= 0) continue;
      const std::string_view text(buf, static_cast<std::size_t>(n));
      const auto rp = text.rfind(')');
      if (rp == std::string_view::npos || rp + 4 >= text.size()) continue;
      // ") S ppid ..."
      const auto sp = text.find(' ', rp + 3);
      int ppid = 0;
      std::from_chars(text.data() + rp + 4, text.data() + (sp == std::string_view::npos ? text.size() : sp), ppid);
      parent.emplace_back(pid, ppid);
    }
    ::closedir(d);
    std::vector<int> out{root_pid};
    for (std::size_t i = 0; i < out.size() && out.size() < kMaxProcesses; ++i) {
      for (const auto& [pid, ppid] : parent) {
        if (ppid != out[i]) continue;
        if (out.size() == kMaxProcesses) {
          processes_capped.fetch_add(1, std::memory_order_relaxed);
          return out;
        }
        out.push_back(pid);
      }
    }
    return out;
  }

  void scan(std::int64_t now) {
    ++scan_no;
    probe_ns = 0;
    std::vector<int> pids = tree ? tree_pids() : std::vector<int>{root_pid};
    for (int pid : pids) {
      const bool exists = ::access((proc_root + "/" + std::to_string(pid)).c_str(), F_OK) == 0;
      Target* t = nullptr;
      for (auto& x : targets) {
        if (x->pid == pid) t = x.get();
      }
      if (!exists) {  // the root, gone (a member of the tree gone is not listed)
        if (t == nullptr) {
          targets.push_back(std::make_unique<Target>());
          t = targets.back().get();
          t->pid = pid;
        }
        t->gone = true;
        t->ok = false;
        t->why = "exited";
      } else if (t == nullptr) {
        t = add_target(pid);
      } else if (!t->gone) {
        std::string auxv = read_auxv(pid);
        if (auxv != t->auxv) {  // it exec'd: another program now (or the same, elsewhere)
          t->auxv = std::move(auxv);
          t->probes = 0;
          probe(*t);
        } else if (!t->ok && t->probes < kProbeScans) {
          probe(*t);
        }
      }
      t->scan = scan_no;
    }
    // Processes gone from the tree are forgotten (their descriptors closed).
    scan_requested = false;
    for (std::size_t i = 0; i < targets.size();) {
      if (targets[i]->scan != scan_no && tree) {
        close_slots(*targets[i], true);
        targets[i] = std::move(targets.back());
        targets.pop_back();
      } else {
        ++i;
      }
    }
    for (const auto& t : targets) {  // not (yet) Python: looked at again soon, a few times
      if (!t->ok && !t->gone && t->probes < kProbeScans) scan_requested = true;
    }
    publish_targets();
    // The next scan: a scan of a machine with many processes costs more, so it never takes
    // over 2 % of this thread (new processes are found sooner: adopt_new_pids).
    const std::int64_t cost = mono_ns() - now - probe_ns;  // the scan's own, without probes
    next_scan_ns = now + std::clamp<std::int64_t>(50 * cost, kMinScanNs, kMaxScanNs);
    last_scan_ns = now;
    last_scan_cost_ns = cost;
  }

  Target* add_target(int pid) {
    targets.push_back(std::make_unique<Target>());
    Target* t = targets.back().get();
    t->pid = pid;
    t->own = pid == ::getpid();
    t->slots.reserve(64);
    t->auxv = read_auxv(pid);
    t->scan = scan_no;
    probe(*t);
    return t;
  }

  // The parent of `pid` from /proc/PID/stat; -1 when it cannot be read.
  int ppid_of(int pid) const {
    const std::string path = proc_root + "/" + std::to_string(pid) + "/stat";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[1024];
    const ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return -1;
    const std::string_view text(buf, static_cast<std::size_t>(n));
    const auto rp = text.rfind(')');
    if (rp == std::string_view::npos || rp + 4 >= text.size()) return -1;
    int ppid = -1;
    std::from_chars(text.data() + rp + 4, text.data() + text.size(), ppid);
    return ppid;
  }

  // Processes created with pids in [first, last] whose parent is followed: followed from now
  // (the few new pids read, not all of /proc: a forked worker is read from its first 10 ms).
  void adopt_new_pids(int first, int last) {
    bool added = false;
    for (int pid = first; pid <= last; ++pid) {
      const int ppid = ppid_of(pid);
      if (ppid <= 0) continue;
      bool parent = false, known = false;
      for (const auto& x : targets) {
        parent = parent || (x->pid == ppid && !x->gone);
        known = known || x->pid == pid;  // found by a full scan already: never read twice
      }
      if (parent && !known && targets.size() >= kMaxProcesses) {
        processes_capped.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      if (parent && !known) {
        add_target(pid);
        added = true;
      }
    }
    if (added) publish_targets();
  }

  void publish_targets() {
    std::vector<std::pair<int, std::string>> why;
    std::uint64_t reading = 0;
    for (const auto& t : targets) {
      if (t->ok && !t->gone) {
        ++reading;
      } else if (!t->read) {  // one read before it exited was not skipped
        why.emplace_back(t->pid, t->why.empty() ? "exited" : t->why);
      }
    }
    processes.store(reading, std::memory_order_relaxed);
    std::lock_guard lock(pub_mu);
    skipped = std::move(why);
  }

  // -- one process ----------------------------------------------------------------------------

  void failed(Target& t, int err) noexcept {
    reads_failed.fetch_add(1, std::memory_order_relaxed);
    if (err == ESRCH) {
      t.gone = true;
      t.ok = false;
      t.why = "exited";
    }
  }

  // Copied ranges of the target's data stack: [lo, hi) at chunk_buf[at].
  struct Copied {
    std::uint64_t lo, hi;
    const std::uint8_t* data;  // the copy of [lo, hi)
  };
  static constexpr std::size_t kMaxChunks = 32;
  std::array<Copied, kMaxChunks> copied{};
  std::size_t n_copied = 0, copy_used = 0;

  // The copy of [addr, addr + n) when one range copied holds all of it; else nullptr. Written
  // without addr + n: a hostile pointer near 2^64 must not wrap into a copied range.
  const std::uint8_t* in_copy(std::uint64_t addr, std::uint64_t n) const noexcept {
    for (std::size_t i = 0; i < n_copied; ++i) {
      const Copied& c = copied[i];
      if (addr >= c.lo && c.hi >= c.lo && n <= c.hi - c.lo && addr - c.lo <= c.hi - c.lo - n) {
        return c.data + (addr - c.lo);
      }
    }
    return nullptr;
  }

  // Copies the data-stack chunk at `chunk` (its header says its size) into the room left;
  // returns the chunk before it (0 when none, or when it could not be copied).
  std::uint64_t copy_chunk(Target& t, std::uint64_t chunk) noexcept {
    const std::size_t room = kChunkCopy - copy_used;
    const auto header = static_cast<std::size_t>(L.chunk_data);
    if (n_copied == kMaxChunks || room <= header) return 0;
    // A chunk is at least 16 KiB (_PY_DATA_STACK_CHUNK_SIZE): read that much, or what is left
    // of the room, then the rest if its header says it is larger.
    std::size_t n = std::min<std::size_t>(room, 16 * 1024);
    int err = 0;
    std::uint8_t* at = chunk_buf.data() + copy_used;
    if (!read_remote(t.pid, chunk, at, n, &err)) {
      failed(t, err);
      return 0;
    }
    const std::uint64_t size = u64_at(at, L.chunk_size_field);
    if (size > n && room > n) {
      const std::size_t more = static_cast<std::size_t>(std::min<std::uint64_t>(size, room)) - n;
      if (!read_remote(t.pid, chunk + n, at + n, more, &err)) {
        failed(t, err);
        return 0;
      }
      n += more;
    }
    copied[n_copied++] = Copied{chunk, chunk + n, at};
    copy_used += n;
    return u64_at(at, L.chunk_previous);
  }

  // Walks one thread state (already in tstate_buf): its frames' codes, leaf first, into `codes`.
  // The current frame pointer and the current data-stack chunk come in one read; an older
  // chunk (deep recursion) is copied whole when the walk first reaches past the ones copied; a
  // frame in none of them (a generator's, a coroutine's) is read alone. When anything was read
  // after the first read, the current frame pointer is read again: a thread that moved on in
  // between may have given a torn stack, which is dropped (counted in `torn`).
  void walk_thread(Target& t, int tid) {
    const std::uint8_t* tb = tstate_buf.data();
    const std::uint64_t cframe = u64_at(tb, L.tstate_cframe);
    const std::uint64_t chunk = u64_at(tb, L.tstate_datastack_chunk);
    const std::uint64_t top = u64_at(tb, L.tstate_datastack_top);
    Walk w{tid, codes.size(), codes.size(), false};
    if (cframe == 0) {
      walks.push_back(w);
      return;
    }
    const std::uint64_t frame_at = cframe + static_cast<std::uint64_t>(L.cframe_current_frame);
    std::uint64_t frame = 0;
    iovec local[2] = {{&frame, 8}, {chunk_buf.data(), 0}};
    iovec remote[2] = {{reinterpret_cast<void*>(frame_at), 8}, {nullptr, 0}};
    n_copied = copy_used = 0;
    unsigned long n_iov = 1;
    if (chunk != 0 && top > chunk && top - chunk <= kChunkCopy) {
      local[1].iov_len = remote[1].iov_len = static_cast<std::size_t>(top - chunk);
      remote[1].iov_base = reinterpret_cast<void*>(chunk);
      n_iov = 2;
    }
    const ssize_t got = ::process_vm_readv(t.pid, local, n_iov, remote, n_iov, 0);
    if (got < 8) {
      failed(t, got < 0 ? errno : EFAULT);
      w.failed = true;
      walks.push_back(w);
      return;
    }
    std::uint64_t older = 0;  // the chunk before the ones copied
    if (n_iov == 2 && static_cast<std::size_t>(got) == 8 + local[1].iov_len) {
      copied[n_copied++] = Copied{chunk, top, chunk_buf.data()};
      copy_used = local[1].iov_len;
      older = u64_at(chunk_buf.data(), L.chunk_previous);
    }
    walk_frames(t, w, frame_at, frame, older);
  }

  // Walks the frames of one thread from `frame` (read at `frame_at`) with copied[0, n_copied)
  // set up; `older` is the chunk before the ones copied (0: none).
  void walk_frames(Target& t, Walk& w, std::uint64_t frame_at, std::uint64_t frame,
                   std::uint64_t older) {
    const std::uint64_t first = frame;
    const auto fsize = static_cast<std::uint64_t>(L.frame_size);
    bool later_reads = false;
    bool cut = false;  // deeper than kMaxDepth: the leaf side kept
    std::size_t steps = 0;
    LoopCheck loop;
    while (frame != 0 && steps++ < 2 * kMaxDepth) {
      if (codes.size() - w.begin >= kMaxDepth) {
        truncated.fetch_add(1, std::memory_order_relaxed);
        cut = true;
        break;
      }
      if (loop.repeats(frame)) break;  // a chain that loops: dropped below
      const std::uint8_t* f = in_copy(frame, fsize);
      while (f == nullptr && older != 0) {  // deeper than the chunks copied so far
        later_reads = true;
        older = copy_chunk(t, older);
        f = in_copy(frame, fsize);
      }
      if (f == nullptr) {
        int err = 0;
        later_reads = true;
        extra_reads.fetch_add(1, std::memory_order_relaxed);
        if (!read_remote(t.pid, frame, frame_buf.data(), fsize, &err)) {
          failed(t, err);
          w.failed = true;
          break;
        }
        f = frame_buf.data();
      }
      const std::uint64_t code = u64_at(f, L.frame_code);
      const auto owner = static_cast<std::int64_t>(f[L.frame_owner]);
      if (owner != L.owner_cstack && code != 0) codes.push_back(code);
      frame = u64_at(f, L.frame_previous);
    }
    if (frame != 0 && !cut && !w.failed) {
      // A loop, or 2 * kMaxDepth frames without kMaxDepth codes: not a stack a thread has.
      torn.fetch_add(1, std::memory_order_relaxed);
      w.failed = true;
    }
    if (later_reads && !w.failed) {
      std::uint64_t again = 0;
      int err = 0;
      if (!read_remote(t.pid, frame_at, &again, 8, &err)) {
        failed(t, err);
        w.failed = true;
      } else if (again != first) {
        torn.fetch_add(1, std::memory_order_relaxed);
        w.failed = true;
      }
    }
    w.end = codes.size();
    walks.push_back(w);
  }

  // The thread states of an interpreter whose list starts at `head`, into ts_bufs; returns how
  // many. The first interpreter's list of the previous round is read in one call, and kept when
  // each state's `next` still names the following one; else the list is followed one by one.
  // At most `room` of them (what is left of kMaxThreads for this process this round).
  std::size_t read_thread_states(Target& t, std::uint64_t head, bool keep_list, std::size_t room) {
    const std::size_t size = tstate_buf.size();
    auto& list = t.thread_list;
    if (keep_list && !list.empty() && list[0] == head && list.size() <= std::min(kIovBatch, room)) {
      const std::size_t n = list.size();
      if (ts_bufs.size() < n * size) ts_bufs.resize(n * size);  // more threads than before
      for (std::size_t i = 0; i < n; ++i) {
        local_iov[i] = {ts_bufs.data() + i * size, size};
        remote_iov[i] = {reinterpret_cast<void*>(list[i]), size};
      }
      const ssize_t got = ::process_vm_readv(t.pid, local_iov.data(), n, remote_iov.data(), n, 0);
      bool same = got == static_cast<ssize_t>(n * size);
      for (std::size_t i = 0; same && i < n; ++i) {
        same = u64_at(ts_bufs.data() + i * size, L.tstate_next) == (i + 1 < n ? list[i + 1] : 0);
      }
      if (same) {
        threads_read.fetch_add(n, std::memory_order_relaxed);
        return n;
      }
    }
    list.clear();
    std::uint64_t ts = head;
    int err = 0;
    LoopCheck loop;
    while (ts != 0) {
      if (list.size() == room) {  // the rest left out this round
        threads_capped.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      if (loop.repeats(ts)) {  // a list that loops (hostile, or torn by a change): none read
        torn.fetch_add(1, std::memory_order_relaxed);
        list.clear();
        return 0;
      }
      const std::size_t i = list.size();
      if (ts_bufs.size() < (i + 1) * size) ts_bufs.resize((i + 1) * size);
      if (!read_remote(t.pid, ts, ts_bufs.data() + i * size, size, &err)) {
        failed(t, err);
        break;
      }
      list.push_back(ts);
      ts = u64_at(ts_bufs.data() + i * size, L.tstate_next);
    }
    const std::size_t n = list.size();
    threads_read.fetch_add(n, std::memory_order_relaxed);
    if (!keep_list) list.clear();  // another interpreter's: not kept
    return n;
  }

  // Walks the `n` thread states in ts_bufs. One call reads, for up to kBatchThreads threads, the
  // current frame pointer and the current data-stack chunk of each (when it fits a slot of
  // kSlotBytes); a thread whose reads did not all succeed is walked alone (walk_thread).
  static constexpr std::size_t kBatchThreads = 64;
  static constexpr std::size_t kSlotBytes = 32 * 1024;
  void walk_threads(Target& t, std::size_t n) {
    const std::size_t size = tstate_buf.size();
    const std::size_t m = std::min(n, kBatchThreads);
    if (chunk_all.size() < m * kSlotBytes) chunk_all.resize(m * kSlotBytes);  // more threads
    std::size_t k = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const std::uint8_t* tb = ts_bufs.data() + i * size;
      const std::uint64_t cframe = u64_at(tb, L.tstate_cframe);
      const std::uint64_t chunk = u64_at(tb, L.tstate_datastack_chunk);
      const std::uint64_t top = u64_at(tb, L.tstate_datastack_top);
      batch[i] = BatchThread{cframe == 0 ? 0 : cframe + static_cast<std::uint64_t>(L.cframe_current_frame),
                             0, chunk, top, k, 0, false};
      if (cframe == 0) continue;
      local_iov[k] = {&batch[i].frame, 8};
      remote_iov[k++] = {reinterpret_cast<void*>(batch[i].frame_at), 8};
      if (chunk != 0 && top > chunk && top - chunk <= kSlotBytes) {
        local_iov[k] = {chunk_all.data() + i * kSlotBytes, static_cast<std::size_t>(top - chunk)};
        remote_iov[k++] = {reinterpret_cast<void*>(chunk), static_cast<std::size_t>(top - chunk)};
        batch[i].chunk_copied = true;
      }
      batch[i].iov_end = k;
    }
    ssize_t got = 0;
    if (k > 0) got = ::process_vm_readv(t.pid, local_iov.data(), k, remote_iov.data(), k, 0);
    if (got < 0) {
      if (errno == ESRCH) {
        failed(t, ESRCH);
        return;
      }
      got = 0;
    }
    // Partial transfers stop at an iovec that failed: the iovecs before it are whole.
    std::size_t whole = 0, bytes = 0;
    while (whole < k && bytes + local_iov[whole].iov_len <= static_cast<std::size_t>(got)) {
      bytes += local_iov[whole++].iov_len;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t* tb = ts_bufs.data() + i * size;
      const auto tid = static_cast<int>(u64_at(tb, L.tstate_native_thread_id));
      if (tid <= 0 || (t.own && left_out(tid))) continue;  // no thread, or one left out
      const BatchThread* b = i < m ? &batch[i] : nullptr;
      if (b != nullptr && b->frame_at == 0) {  // no frame: an empty walk
        walks.push_back(Walk{tid, codes.size(), codes.size(), false});
        continue;
      }
      if (b == nullptr || b->iov_end > whole) {  // past the batch, or a read of it failed
        std::memcpy(tstate_buf.data(), tb, size);
        walk_thread(t, tid);
        continue;
      }
      n_copied = copy_used = 0;
      std::uint64_t older = b->chunk;  // copied whole by walk_frames when reached
      if (b->chunk_copied) {
        const std::uint8_t* copy = chunk_all.data() + i * kSlotBytes;
        copied[n_copied++] = Copied{b->chunk, b->top, copy};
        older = u64_at(copy, L.chunk_previous);
      }
      Walk w{tid, codes.size(), codes.size(), false};
      walk_frames(t, w, b->frame_at, b->frame, older);
    }
  }

  // Reads one str object; -1 when it cannot.
  std::int32_t read_string(Target& t, std::uint64_t addr) {
    int err = 0;
    const auto header = static_cast<std::size_t>(L.unicode_compact_size);
    if (!read_remote(t.pid, addr, str_buf.data(), header, &err)) {
      failed(t, err);
      return -1;
    }
    std::size_t need = 0;
    long n = unicode_utf8(str_buf.data(), header, L, utf8_buf.data(), utf8_buf.size(), &need);
    if (n == -2 && need <= kMaxString) {
      if (!read_remote(t.pid, addr, str_buf.data(), need, &err)) {
        failed(t, err);
        return -1;
      }
      n = unicode_utf8(str_buf.data(), need, L, utf8_buf.data(), utf8_buf.size(), &need);
    }
    if (n < 0) return intern_string("<unreadable>");
    return intern_string(std::string_view(utf8_buf.data(), static_cast<std::size_t>(n)));
  }

  // Reads back the fields of every code object of this round (batched); a code whose fields
  // match its cache entry keeps its frame, another one is read anew.
  void resolve_codes(Target& t) {
    uniq.assign(codes.begin(), codes.end());
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    for (std::size_t at = 0; at < uniq.size();) {
      const std::size_t n = std::min(kIovBatch, uniq.size() - at);
      for (std::size_t i = 0; i < n; ++i) {
        local_iov[i] = {code_buf.data() + i * code_len, code_len};
        remote_iov[i] = {reinterpret_cast<void*>(uniq[at + i] + code_lo), code_len};
      }
      const ssize_t got = ::process_vm_readv(t.pid, local_iov.data(), n, remote_iov.data(), n, 0);
      // Partial transfers stop at an iovec that failed: those before it are whole.
      const std::size_t whole = got < 0 ? 0 : static_cast<std::size_t>(got) / code_len;
      for (std::size_t i = 0; i < std::min(whole, n); ++i) {
        const std::uint8_t* c = code_buf.data() + i * code_len;  // holds [code_lo, +code_len)
        const auto lo = static_cast<std::int64_t>(code_lo);
        const std::uint64_t qual = u64_at(c, L.code_qualname - lo);
        const std::uint64_t file = u64_at(c, L.code_filename - lo);
        std::int32_t line;
        std::memcpy(&line, c + (L.code_firstlineno - lo), 4);
        CodeEntry& e = t.codes[uniq[at + i]];  // allocates for a code object seen first
        if (e.frame < 0 || e.qualname != qual || e.filename != file || e.line != line) {
          const std::int32_t fn = read_string(t, qual);
          const std::int32_t fl = read_string(t, file);
          if (fn < 0 || fl < 0) {
            e.frame = -1;
            continue;
          }
          e = CodeEntry{qual, file, line, intern_frame(fn, fl, line), 0};
        }
        e.validated = round;
      }
      if (whole < n) {
        failed(t, got < 0 ? errno : EFAULT);
        at += whole + 1;  // skip the one that failed
      } else {
        at += n;
      }
    }
  }

  ThreadSlot& slot_for(Target& t, int tid, std::int64_t now) {
    for (auto& s : t.slots) {
      if (s.tid == tid) return s;
    }
    t.slots.push_back(ThreadSlot{});  // a thread seen first: allocation allowed
    ThreadSlot& s = t.slots.back();
    s.tid = tid;
    if (!t.own) {
      const std::string path = proc_root + "/" + std::to_string(t.pid) + "/task/" +
                               std::to_string(tid) + "/schedstat";
      s.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    s.name_at = now - kNameRefreshNs;
    return s;
  }

  void refresh_name(Target& t, ThreadSlot& s, std::int64_t now) {
    if (now - s.name_at < kNameRefreshNs) return;
    s.name_at = now;
    const std::string path = proc_root + "/" + std::to_string(t.pid) + "/task/" +
                             std::to_string(s.tid) + "/comm";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[64];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    ::close(fd);
    if (n <= 0) return;
    std::size_t len = static_cast<std::size_t>(n);
    while (len > 0 && buf[len - 1] == '\n') --len;
    s.name = intern_string(std::string_view(buf, len));
  }

  void push(const StackSample& s) noexcept {
    const std::uint64_t h = head.load(std::memory_order_relaxed);  // ours alone
    // acquire pairs with drain()'s release of tail: the slot we overwrite has been copied.
    if (h - tail.load(std::memory_order_acquire) >= ring.size()) {
      dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ring[h & mask] = s;
    head.store(h + 1, std::memory_order_release);  // publishes the slot to drain()
  }

  void sample_target(Target& t) {
    const std::int64_t mono = mono_ns();
    std::uint64_t interp = 0;
    int err = 0;
    if (!read_remote(t.pid, t.runtime + static_cast<std::uint64_t>(L.runtime_interpreters_head),
                     &interp, 8, &err)) {
      failed(t, err);
      scan_requested = true;  // it may have exec'd: probed again at the next scan
      return;
    }
    walks.clear();
    std::size_t states = 0;  // thread states read in this process, all interpreters
    codes.clear();
    const std::size_t ihead = static_cast<std::size_t>(std::max(L.interp_next, L.interp_threads_head)) + 8;
    std::uint8_t ib[256];
    for (int n_interp = 0; interp != 0 && n_interp < 16 && ihead <= sizeof ib; ++n_interp) {
      if (!read_remote(t.pid, interp, ib, ihead, &err)) {
        failed(t, err);
        break;
      }
      const std::uint64_t head = u64_at(ib, L.interp_threads_head);
      const std::size_t n = read_thread_states(t, head, n_interp == 0, kMaxThreads - states);
      states += n;
      walk_threads(t, n);
      interp = u64_at(ib, L.interp_next);
    }
    if (t.gone) return;
    ++round;
    resolve_codes(t);
    const std::int64_t now = mono_ns();
    ++t.mark;  // marks the slots of threads seen in this round
    for (const Walk& w : walks) {
      ThreadSlot& slot = slot_for(t, w.tid, now);
      slot.seen = t.mark;
      const std::int64_t cpu = t.own ? own_thread_cpu_ns(w.tid) : (slot.fd >= 0 ? schedstat_ns(slot.fd) : -1);
      std::int64_t delta = -1;
      if (cpu >= 0 && slot.has_prev) delta = std::max<std::int64_t>(0, cpu - slot.prev_cpu);
      if (cpu >= 0) {
        slot.prev_cpu = cpu;
        slot.has_prev = true;
      }
      if (w.failed || w.end == w.begin) continue;  // no stack to name (a torn read, no Python frame)
      stack_scratch.clear();
      bool whole = true;
      for (std::size_t i = w.end; i-- > w.begin;) {  // root first
        const auto it = t.codes.find(codes[i]);
        if (it == t.codes.end() || it->second.frame < 0 || it->second.validated != round) {
          whole = false;
          break;
        }
        stack_scratch.push_back(it->second.frame);
      }
      if (!whole) continue;
      refresh_name(t, slot, now);
      const std::int32_t stack = intern_stack(stack_scratch.data(), stack_scratch.size());
      push(StackSample{mono, delta, t.pid, w.tid, stack, slot.name});
      t.read = true;
      samples.fetch_add(1, std::memory_order_relaxed);
    }
    close_slots(t, false);
  }

  // The last field of /proc/loadavg is the latest pid the kernel handed out: read every 10 ms
  // (a kept fd), the pids created since are looked at (adopt_new_pids).
  int loadavg_fd = -1;
  std::int64_t next_pid_check_ns = 0;
  int last_pid_seen = 0;
  bool scan_requested = false;  // pids wrapped, or a process's reads failed: rescan soon
  // The latest pid handed out (0 when unknown).
  int latest_pid() noexcept {
    if (loadavg_fd < 0) return 0;
    char buf[128];
    const ssize_t n = ::pread(loadavg_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return false;
    std::size_t end = static_cast<std::size_t>(n);
    while (end > 0 && (buf[end - 1] == '\n' || buf[end - 1] == ' ')) --end;
    std::size_t begin = end;
    while (begin > 0 && buf[begin - 1] != ' ') --begin;
    int pid = 0;
    std::from_chars(buf + begin, buf + end, pid);
    return pid;
  }

  std::int64_t last_scan_ns = 0, last_scan_cost_ns = 0;

  void sample_round() {
    const std::int64_t t0 = mono_ns();
    if (tree && t0 >= next_pid_check_ns && last_scan_ns != 0) {
      next_pid_check_ns = t0 + kPidCheckNs;
      const int latest = latest_pid();
      if (latest > last_pid_seen && last_pid_seen > 0 && latest - last_pid_seen <= kMaxNewPids) {
        adopt_new_pids(last_pid_seen + 1, latest);
      } else if (latest != last_pid_seen && last_pid_seen > 0) {
        scan_requested = true;  // pids wrapped around, or many new ones: the full scan
      }
      last_pid_seen = latest;
    }
    // A full scan when due, or sooner when asked, but at most 5 % of this thread.
    if (t0 >= next_scan_ns || (scan_requested && t0 - last_scan_ns >= 20 * last_scan_cost_ns)) {
      if (last_scan_ns == 0) last_pid_seen = latest_pid();  // the first: pids from here on
      scan(t0);
    }
    for (auto& t : targets) {
      if (t->ok && !t->gone) sample_target(*t);
    }
    ticks.fetch_add(1, std::memory_order_relaxed);
    busy_ns.fetch_add(mono_ns() - t0, std::memory_order_relaxed);
  }
};

StackSampler::StackSampler(const StroboscopePyLayout& layout, int root_pid, bool tree,
                           std::int64_t interval_ns, std::size_t capacity, std::string proc_root)
    : impl_(std::make_unique<Impl>(layout, root_pid, tree, interval_ns, capacity,
                                   std::move(proc_root))) {}

StackSampler::~StackSampler() { stop(); }

void StackSampler::start() {
  if (thread_.joinable()) return;
  impl_->stop.store(false, std::memory_order_relaxed);  // no thread reads it yet
  thread_ = std::thread([this] { loop(); });
}

void StackSampler::stop() noexcept {
  if (!thread_.joinable()) return;
  impl_->stop.store(true, std::memory_order_release);  // pairs with loop()'s acquire
  impl_->stop_word.fetch_add(1, std::memory_order_release);
  futex_wake_all(&impl_->stop_word);
  thread_.join();
}

void StackSampler::sample_once() { impl_->sample_round(); }

void StackSampler::forget_thread_after_fork() noexcept {
  new (&thread_) std::thread();  // the parent's thread does not exist in the child
  impl_->cpu_clock_valid.store(false, std::memory_order_relaxed);
}

bool StackSampler::skip_thread(int tid) noexcept {
  if (tid <= 0) return false;
  if (impl_->left_out(tid)) return true;
  for (auto& slot : impl_->skip) {
    int free = 0;
    if (slot.compare_exchange_strong(free, tid, std::memory_order_relaxed)) return true;
  }
  return false;
}

void StackSampler::unskip_thread(int tid) noexcept {
  if (tid <= 0) return;
  for (auto& slot : impl_->skip) {
    int was = tid;
    slot.compare_exchange_strong(was, 0, std::memory_order_relaxed);
  }
}

void StackSampler::loop() noexcept {
  Impl& m = *impl_;
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  register_own_thread();  // stroboscope's own: out of proc.cpu_pct
  clockid_t clock{};
  if (pthread_getcpuclockid(pthread_self(), &clock) == 0) {
    m.cpu_clock.store(clock, std::memory_order_relaxed);
    m.cpu_clock_valid.store(true, std::memory_order_release);  // the id above is valid
  }
  std::int64_t deadline = mono_ns();
  for (;;) {
    const std::uint32_t word = m.stop_word.load(std::memory_order_acquire);
    if (m.stop.load(std::memory_order_acquire)) break;
    const std::int64_t now = mono_ns();
    if (now < deadline) {
      futex_wait_until(&m.stop_word, word, deadline);
      continue;  // re-check stop and the time
    }
    try {
      m.sample_round();
    } catch (...) {
      // Only allocation can throw (something new seen while out of memory): the round is lost.
      m.reads_failed.fetch_add(1, std::memory_order_relaxed);
    }
    deadline += m.interval_ns;
    const std::int64_t end = mono_ns();
    if (end >= deadline) {  // late: skip the deadlines passed, never bunch them
      const std::int64_t skip = (end - deadline) / m.interval_ns + 1;
      m.missed.fetch_add(static_cast<std::uint64_t>(skip), std::memory_order_relaxed);
      deadline += skip * m.interval_ns;
    }
  }
  timespec ts{};
  if (m.cpu_clock_valid.load(std::memory_order_relaxed) && clock_gettime(clock, &ts) == 0) {
    m.cpu_done_ns.fetch_add(static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec,
                            std::memory_order_relaxed);
  }
  m.cpu_clock_valid.store(false, std::memory_order_release);
  unregister_own_thread();
}

std::size_t StackSampler::drain(StackSample* out, std::size_t max) noexcept {
  Impl& m = *impl_;
  const std::uint64_t t = m.tail.load(std::memory_order_relaxed);  // ours alone
  const std::uint64_t h = m.head.load(std::memory_order_acquire);  // the slots before h are written
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(h - t, max));
  for (std::size_t i = 0; i < n; ++i) out[i] = m.ring[(t + i) & m.mask];
  m.tail.store(t + n, std::memory_order_release);  // the producer may reuse these slots now
  return n;
}

void StackSampler::published(std::size_t strings_from, std::size_t stacks_from,
                             std::vector<std::string>* strings, std::vector<StackFrameRow>* rows,
                             std::size_t* stacks_now) {
  Impl& m = *impl_;
  std::lock_guard lock(m.pub_mu);
  for (std::size_t i = strings_from; i < m.strings.size(); ++i) strings->push_back(m.strings[i]);
  for (std::size_t s = stacks_from; s < m.stack_begin.size(); ++s) {
    const std::size_t b = m.stack_begin[s];
    const std::size_t e = s + 1 < m.stack_begin.size() ? m.stack_begin[s + 1] : m.stack_pool.size();
    for (std::size_t i = b; i < e; ++i) {
      const FrameKey& f = m.frames[static_cast<std::size_t>(m.stack_pool[i])];
      rows->push_back(StackFrameRow{static_cast<std::int32_t>(s), static_cast<std::int32_t>(i - b),
                                    f.function, f.file, f.line});
    }
  }
  *stacks_now = m.stack_begin.size();
}

StackStats StackSampler::stats() const {
  const Impl& m = *impl_;
  StackStats s;
  s.ticks = m.ticks.load(std::memory_order_relaxed);
  s.missed_ticks = m.missed.load(std::memory_order_relaxed);
  s.samples = m.samples.load(std::memory_order_relaxed);
  s.threads_read = m.threads_read.load(std::memory_order_relaxed);
  s.reads_failed = m.reads_failed.load(std::memory_order_relaxed);
  s.extra_frame_reads = m.extra_reads.load(std::memory_order_relaxed);
  s.truncated = m.truncated.load(std::memory_order_relaxed);
  s.torn = m.torn.load(std::memory_order_relaxed);
  s.threads_capped = m.threads_capped.load(std::memory_order_relaxed);
  s.processes_capped = m.processes_capped.load(std::memory_order_relaxed);
  s.dropped = m.dropped.load(std::memory_order_relaxed);
  s.processes = m.processes.load(std::memory_order_relaxed);
  s.busy_ns = m.busy_ns.load(std::memory_order_relaxed);
  s.thread_cpu_ns = m.cpu_done_ns.load(std::memory_order_relaxed);
  // acquire pairs with loop()'s release: the clock id is valid while the flag is set.
  if (m.cpu_clock_valid.load(std::memory_order_acquire)) {
    timespec ts{};
    if (clock_gettime(m.cpu_clock.load(std::memory_order_relaxed), &ts) == 0) {
      s.thread_cpu_ns += static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    }
  }
  std::lock_guard lock(m.pub_mu);
  s.stacks = m.stack_begin.size();
  s.frames = m.frames.size();
  s.skipped = m.skipped;
  return s;
}

}  // namespace stroboscope::py_stacks
