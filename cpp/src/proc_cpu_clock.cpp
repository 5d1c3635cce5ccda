// Process CPU time from the kernel's CPU clocks (see proc_cpu_clock.hpp for the three ways).
#include "proc_cpu_clock.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "stroboscope/linux_sources.hpp"

namespace stroboscope {
namespace {

// The registry of own threads (register_own_thread): tids, 0 = a free slot.
constexpr std::size_t kMaxOwnThreads = 64;
std::array<std::atomic<int>, kMaxOwnThreads> g_own_tids{};
std::atomic<std::uint64_t> g_own_gen{0};
// CPU time of own threads that have unregistered, ns: added by each as it leaves, so a sum of
// the registered threads' clocks plus this never falls when one goes (own_ns is read a window
// apart, and a thread gone in between would take its whole time out of the sum).
std::atomic<std::uint64_t> g_own_retired_ns{0};

int this_tid() noexcept { return static_cast<int>(::syscall(SYS_gettid)); }

}  // namespace

void register_own_thread() noexcept {
  const int tid = this_tid();
  for (std::atomic<int>& slot : g_own_tids) {
    int free_slot = 0;
    if (slot.compare_exchange_strong(free_slot, tid, std::memory_order_acq_rel)) {
      g_own_gen.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
  }
}

void unregister_own_thread() noexcept {
  const int tid = this_tid();
  for (std::atomic<int>& slot : g_own_tids) {
    int mine = tid;
    if (slot.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) {
      // Out of the registry first, then into the retired total: a read between the two misses
      // this thread's time for one window (too low, or null where the sum falls), never counts
      // it twice.
      timespec ts{};
      if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
        g_own_retired_ns.fetch_add(static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000U +
                                       static_cast<std::uint64_t>(ts.tv_nsec),
                                   std::memory_order_acq_rel);
      }
      g_own_gen.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
  }
}

namespace detail {

bool is_own_thread(int tid) noexcept {
  for (const std::atomic<int>& slot : g_own_tids) {
    if (slot.load(std::memory_order_acquire) == tid) return true;
  }
  return false;
}

std::uint64_t own_threads_generation() noexcept {
  return g_own_gen.load(std::memory_order_acquire);
}

namespace {

// The kernel's encoding of a CPU clockid (include/linux/posix-timers.h, a stable ABI; glibc's
// clock_getcpuclockid builds the process form the same way): ~id << 3, bit 2 "per thread",
// low bits the clock kind, 2 = CPUCLOCK_SCHED (ns of runtime, user + system).
constexpr clockid_t kCpuClockSched = 2;
constexpr clockid_t kCpuClockPerThread = 4;
clockid_t thread_cpu_clock(int tid) noexcept {
  return static_cast<clockid_t>((~static_cast<unsigned>(tid)) << 3) | kCpuClockPerThread |
         kCpuClockSched;
}

// The layout getdents64(2) fills (struct linux_dirent64).
constexpr std::size_t kMaxDirent = 512;  // > 19 header bytes + a 255-byte name, aligned

struct Dirent64 {
  std::uint64_t ino;
  std::int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

}  // namespace

bool ProcessCpuClock::clock_ns(clockid_t clock, std::uint64_t* out) const noexcept {
  timespec ts{};
  if (gettime_(clock, &ts) != 0) return false;
  *out = static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
  return true;
}

std::int64_t ProcessCpuClock::stamp() const noexcept {
  timespec ts{};
  gettime_(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

ProcessCpuClock::ProcessCpuClock(int pid, const std::string& task_dir, bool live_proc,
                                 GettimeFn gettime, bool include_own)
    : gettime_(gettime), include_own_(include_own) {
  this_process_ = live_proc && pid == static_cast<int>(::getpid());
  if (this_process_) {
    task_fd_ = ::open(task_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (task_fd_ >= 0) {
      mode_.store(Mode::kThreadClocks, std::memory_order_relaxed);
      if (!rescan()) mode_.store(Mode::kNone, std::memory_order_relaxed);
    }
  }
  if (mode() == Mode::kNone && live_proc && ::clock_getcpuclockid(pid, &process_clock_) == 0) {
    std::uint64_t probe = 0;
    if (clock_ns(process_clock_, &probe)) mode_.store(Mode::kProcessClock, std::memory_order_relaxed);
  }
}

ProcessCpuClock::~ProcessCpuClock() {
  if (task_fd_ >= 0) ::close(task_fd_);
}

const char* ProcessCpuClock::interface() const noexcept {
  switch (mode()) {
    case Mode::kThreadClocks: return "clock_gettime(thread CPU clocks of /proc/self/task)";
    case Mode::kProcessClock: return "clock_getcpuclockid";
    case Mode::kNone: break;
  }
  return "/proc/<pid>/stat";
}

bool ProcessCpuClock::rescan() noexcept {
  ++rescans_;
  rescan_due_ = false;
  own_gen_ = own_threads_generation();
  if (::lseek(task_fd_, 0, SEEK_SET) != 0) return false;
  for (std::size_t i = 0; i < n_threads_; ++i) threads_[i].seen = false;
  bool too_many = false;
  for (bool more = true; more;) {
    long n = ::syscall(SYS_getdents64, task_fd_, dirents_.data(), dirents_.size());
    if (n < 0) return false;
    if (n == 0) break;
    // procfs fills the buffer until the next entry does not fit (an entry is at most ~280
    // bytes): a reply with room for one more to spare is the whole listing, and the call that
    // would return 0 is saved (one syscall per tick).
    more = static_cast<std::size_t>(n) + kMaxDirent > dirents_.size();
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const Dirent64*>(dirents_.data() + off);
      off += d->reclen;
      int tid = 0;
      const char* p = d->name;
      if (*p == '\0' || *p == '.') continue;
      for (; *p >= '0' && *p <= '9' && tid < 100'000'000; ++p) tid = tid * 10 + (*p - '0');
      if (*p != '\0' || tid <= 0) continue;
      std::size_t i = 0;
      while (i < n_threads_ && threads_[i].tid != tid) ++i;
      if (i == n_threads_) {
        if (n_threads_ == kMaxThreadClocks) {
          too_many = true;
          continue;
        }
        // A thread found now is counted from now: its time before this scan is not spread
        // into one row (which would read far past 100 % for that thread).
        Thread t{tid, thread_cpu_clock(tid), 0, stamp(), true, false};
        if (!clock_ns(t.clock, &t.last_ns)) continue;  // exited meanwhile
        threads_[n_threads_++] = t;
      } else {
        threads_[i].seen = true;
      }
      Thread& t = threads_[i];
      t.own = tid == reader_tid_ || is_own_thread(tid);
    }
  }
  if (too_many) {
    // One syscall per thread per read is no longer cheap: the process clock (lags by up to one
    // scheduler tick per running thread) from here on.
    if (::clock_getcpuclockid(0, &process_clock_) == 0) {
      mode_.store(Mode::kProcessClock, std::memory_order_relaxed);
      return true;
    }
    return false;
  }
  std::size_t kept = 0;  // drop threads the listing no longer has
  for (std::size_t i = 0; i < n_threads_; ++i) {
    if (threads_[i].seen) threads_[kept++] = threads_[i];
  }
  n_threads_ = kept;
  return n_threads_ > 0;
}

bool ProcessCpuClock::read_threads(CpuReading* out) noexcept {
  bool lost = false;
  std::int64_t moved = 0;
  double busy = 0.0;
  // Stamps chain: stamp, clock, stamp, clock, stamp... so each clock read lies between the
  // stamp before it and the one after it.
  std::int64_t before = stamp();
  out->before_ns = before;
  for (std::size_t i = 0; i < n_threads_; ++i) {
    Thread& t = threads_[i];
    if (t.own && !include_own_) continue;  // read by read_own(), not counted here
    std::uint64_t now = 0;
    const bool read = clock_ns(t.clock, &now);
    const std::int64_t after = stamp();
    if (!read) {
      lost = true;  // exited since the previous read: its time since then is not counted
      before = after;
      continue;
    }
    if (now > t.last_ns) {
      const std::uint64_t ran_ns = now - t.last_ns;
      total_ns_ += ran_ns;
      ++moved;
      // Its CPU time since the previous read was spent between the stamp before that read and
      // the stamp after this one. A thread runs on one CPU at a time: at most 1 (over only by
      // the rate difference of the CPU clocks and CLOCK_MONOTONIC).
      const std::int64_t span = after - t.last_before_ns;
      if (span > 0) busy += std::min(1.0, static_cast<double>(ran_ns) / static_cast<double>(span));
    }
    t.last_ns = now;
    t.last_before_ns = before;
    before = after;
  }
  out->after_ns = before;
  out->ns = total_ns_;
  out->ran = moved;
  out->busy_threads = busy;
  if (lost) rescan_due_ = true;  // a thread exited: its slot goes at the next listing
  return !lost;
}

bool ProcessCpuClock::list_changed() noexcept {
  if (rescan_due_ || own_threads_generation() != own_gen_) return true;
  struct stat st {};
  // procfs gives /proc/<pid>/task a link count of 2 + its threads (proc_task_getattr).
  if (::fstat(task_fd_, &st) != 0) return true;
  return static_cast<std::size_t>(st.st_nlink) != n_threads_ + 2;
}

void ProcessCpuClock::read_own(CpuReading* out) noexcept {
  // The reading thread's own clock (the sampler thread), then each registered thread's. No
  // sampler thread (an inline tick on a caller's thread): nothing of ours to report.
  std::uint64_t total = 0;
  out->own_ok = reader_tid_ != 0 && clock_ns(CLOCK_THREAD_CPUTIME_ID, &total);
  if (this_process_ && out->own_ok) {
    // The retired total first: a thread that unregisters after this load and before its slot
    // is read below is missed once (see unregister_own_thread), never counted twice.
    total += g_own_retired_ns.load(std::memory_order_acquire);
    for (const std::atomic<int>& slot : g_own_tids) {
      const int tid = slot.load(std::memory_order_acquire);
      if (tid == 0 || tid == reader_tid_) continue;
      std::uint64_t ns = 0;
      if (clock_ns(thread_cpu_clock(tid), &ns)) total += ns;  // one that just exited drops out
    }
  }
  out->own_ns = total;
  out->own_at_ns = out->after_ns;
}

bool ProcessCpuClock::read(CpuReading* out, bool want_own) noexcept {
  out->ran = 0;
  out->busy_threads = 0.0;
  out->own_ok = false;
  if (running_ && reader_tid_ == 0) {
    reader_tid_ = this_tid();  // once per run: the sampler thread
    rescan_due_ = true;
  }
  if (mode() == Mode::kThreadClocks) {
    // The listing first, when it may have changed (one fstat otherwise), so a thread born
    // since the previous read is counted from now and proc.threads is current.
    if (list_changed() && !rescan()) mode_.store(Mode::kNone, std::memory_order_relaxed);
    if (mode() == Mode::kThreadClocks) {
      (void)read_threads(out);  // a thread gone since the listing: its last sliver lost
      if (want_own) read_own(out);
      return true;
    }
    // Fell back during the rescan: the process clock starts a new baseline below.
  }
  if (mode() == Mode::kProcessClock) {
    out->before_ns = stamp();
    const bool ok = clock_ns(process_clock_, &out->ns);
    out->after_ns = stamp();
    // Another process: the reading thread alone, the monitor's cost. This process: every read,
    // since own_total_ must be current at each one to leave the own threads out.
    const bool subtract = this_process_ && !include_own_;
    if (want_own || subtract) read_own(out);
    if (subtract && out->own_ok) {
      // Leave the own threads out: the sum of their CPU time since the first read (a new
      // reading thread per run starts its clock at 0: its first delta is taken from there).
      if (own_prev_ok_ && out->own_ns >= own_prev_) own_total_ += out->own_ns - own_prev_;
      own_prev_ = out->own_ns;
      own_prev_ok_ = true;
      out->ns = out->ns > own_total_ ? out->ns - own_total_ : 0;
    }
    return ok;
  }
  return false;
}

}  // namespace detail
}  // namespace stroboscope
