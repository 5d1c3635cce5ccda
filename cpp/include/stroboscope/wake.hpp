// An interruptible wait on an absolute CLOCK_MONOTONIC deadline: a futex word that other threads
// bump to wake the waiter early (Sampler::request_tick, stop).
//
// FUTEX_WAIT_BITSET takes an absolute timeout on CLOCK_MONOTONIC (FUTEX_CLOCK_REALTIME not set),
// served by the same hrtimer as clock_nanosleep(TIMER_ABSTIME) and subject to the same per-thread
// timer slack, so on the normal path (no wake) it costs what the clock_nanosleep it replaces did:
// one syscall to sleep, one wake-up. The kernel compares the word with the value the waiter saw
// before it sleeps, atomically with queueing it, so a bump between the waiter's check and its
// sleep is never lost: the wait returns at once (EAGAIN).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace stroboscope {

// The futex syscall reads the word as a plain 32-bit int: the atomic must be exactly that.
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// Sleeps until `deadline_ns` (CLOCK_MONOTONIC) unless `*word` differs from `seen` (now or by a
// futex_wake_all before then). Returns early on a signal too; callers re-check their conditions.
inline void futex_wait_until(std::atomic<std::uint32_t>* word, std::uint32_t seen,
                             std::int64_t deadline_ns) noexcept {
  timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000),
              static_cast<long>(deadline_ns % 1'000'000'000)};
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word),
                  FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, seen, &ts, nullptr,
                  FUTEX_BITSET_MATCH_ANY);
}

inline void futex_wake_all(std::atomic<std::uint32_t>* word) noexcept {
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word),
                  FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 0x7fffffff, nullptr, nullptr, 0);
}

// One iteration of a spin-wait: tells the core we are spinning (frees the sibling hyperthread,
// saves power) without giving up the CPU.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace stroboscope
