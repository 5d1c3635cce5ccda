// The doorbell of an events directory (shared_events.hpp): a begin in a process of the command
// asks the recorder's sampler for a row. Both sides of one futex word shared between processes:
// ring_doorbell() on the producer's push path, EventsDoorbell's waiter thread in the recorder.
//
// The protocol (the flag at kOffBellWaiting, the futex word at kOffBellRings):
//   waiter: raise the flag (seq_cst); ask for a row; sleep while the word is the one it saw.
//   begin:  load the flag (seq_cst); if up, take it down (exchange): the one begin that took it
//           bumps the word and wakes the waiter (FUTEX_WAKE); every other begin does nothing.
// So a begin costs one load while nobody needs waking (the waiter is asking for a row, or a begin
// already woke it), and the command makes one system call per sleep of the waiter, not one per
// begin. None is left without a row asked after it: a begin that finds the flag down comes,
// in the single order of seq_cst operations, before the waiter raises it again, and the waiter
// raises it before it asks for its next row, so that row is asked after the begin was written;
// a begin that finds it up either takes it (and wakes the waiter, which asks again) or lost it to
// one that did. A wake is never lost: the word is bumped before FUTEX_WAKE, and the kernel
// compares it with the value the waiter saw before it lets the waiter sleep.
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

#include "stroboscope/shared_events.hpp"

namespace stroboscope {
namespace {

static_assert(std::atomic_ref<std::uint32_t>::is_always_lock_free,
              "the doorbell's words are shared between processes: they must be lock-free");

std::atomic_ref<std::uint32_t> bell_word(char* bell, std::size_t offset) noexcept {
  return std::atomic_ref<std::uint32_t>(*reinterpret_cast<std::uint32_t*>(bell + offset));
}

// Not FUTEX_PRIVATE_FLAG: the word is in a file mapped by other processes.
void wake(char* bell) noexcept {
  (void)::syscall(SYS_futex, bell + sev::kOffBellRings, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

void ring_doorbell(char* bell) noexcept {
  auto waiting = bell_word(bell, sev::kOffBellWaiting);
  // seq_cst (a plain load on x86): the Dekker pair of the waiter's seq_cst raise, see above.
  if (waiting.load(std::memory_order_seq_cst) == 0) return;
  // seq_cst: one begin takes the flag down; the others find it down and go on.
  if (waiting.exchange(0, std::memory_order_seq_cst) == 0) return;
  // seq_cst: the bump is ordered after the exchange, before the waiter's next compare.
  bell_word(bell, sev::kOffBellRings).fetch_add(1, std::memory_order_seq_cst);
  wake(bell);
}

EventsDoorbell::EventsDoorbell(const std::string& dir, std::function<void()> on_ring)
    : path_(dir + "/" + sev::kDoorbellName), on_ring_(std::move(on_ring)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + path_);
  const auto fail = [this](int err) {
    ::unlink(path_.c_str());
    ::close(fd_);
    return std::system_error(err, std::generic_category(), "cannot set up " + path_);
  };
  if (::fchmod(fd_, 0600) != 0) throw fail(errno);
  if (const int rc = ::posix_fallocate(fd_, 0, sev::kBellBytes); rc != 0) throw fail(rc);
  void* map = ::mmap(nullptr, sev::kBellBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (map == MAP_FAILED) throw fail(errno);
  bell_ = static_cast<char*>(map);
  std::memcpy(bell_, sev::kBellMagic, sizeof sev::kBellMagic);
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    ::munmap(bell_, sev::kBellBytes);
    throw fail(EAGAIN);
  }
}

EventsDoorbell::~EventsDoorbell() {
  stop();
  ::munmap(bell_, sev::kBellBytes);
  ::close(fd_);
}

void EventsDoorbell::stop() noexcept {
  // release: the thread's acquire load sees it after the wake below.
  if (stop_.exchange(true, std::memory_order_acq_rel)) {
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
    return;
  }
  // The bump before the wake: a waiter about to sleep on the old value does not (the kernel
  // compares it), one asleep is woken.
  bell_word(bell_, sev::kOffBellRings).fetch_add(1, std::memory_order_seq_cst);
  wake(bell_);
  if (thread_.joinable()) thread_.join();
  // Nobody waits any more: the command's begins stop ringing (relaxed: a begin that still sees
  // the old flag only makes a wake nobody hears).
  bell_word(bell_, sev::kOffBellWaiting).store(0, std::memory_order_relaxed);
}

void EventsDoorbell::run() noexcept {
  auto rings = bell_word(bell_, sev::kOffBellRings);
  auto waiting = bell_word(bell_, sev::kOffBellWaiting);
  std::uint32_t seen = rings.load(std::memory_order_acquire);
  // seq_cst: the Dekker pair of ring_doorbell()'s load. From here on a begin wakes us.
  waiting.store(1, std::memory_order_seq_cst);
  while (!stop_.load(std::memory_order_acquire)) {
    // No timeout: stop() bumps the word and wakes us like a begin does.
    if (rings.load(std::memory_order_seq_cst) == seen) {
      (void)::syscall(SYS_futex, bell_ + sev::kOffBellRings, FUTEX_WAIT, seen, nullptr, nullptr,
                      0);
    }
    // acquire: pairs with the bump (seq_cst) of the begin that woke us.
    const std::uint32_t now = rings.load(std::memory_order_acquire);
    if (now == seen) continue;  // a spurious wake, or EINTR: sleep again
    seen = now;
    if (stop_.load(std::memory_order_acquire)) break;
    // Raised again before the row is asked for (seq_cst: see ring_doorbell()): a begin written
    // from here on wakes us once more, so none is left with only a row taken before it.
    waiting.store(1, std::memory_order_seq_cst);
    wakes_.fetch_add(1, std::memory_order_relaxed);  // a statistic
    on_ring_();
  }
}

}  // namespace stroboscope
