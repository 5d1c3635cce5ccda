// What one system call of the process source costs on this machine: the bare entry and exit,
// the CPU clocks (another thread's, the caller's, the process's), the fstat of the thread list
// and a pread of statm, with the vDSO's monotonic clock for scale. ns per call, 200,000 calls.
//
//   cc -O2 -o syscall_cost bench/syscall_cost.c -lpthread && ./syscall_cost
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { kCalls = 200000 };

static long long mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static volatile pid_t g_other;

static void* sleeper(void* arg) {
  (void)arg;
  g_other = (pid_t)syscall(SYS_gettid);
  for (;;) pause();
  return NULL;
}

#define TIME(label, call)                                          \
  do {                                                             \
    const long long t0 = mono_ns();                                \
    for (int i = 0; i < kCalls; ++i) call;                         \
    printf("%-52s %6lld\n", label, (mono_ns() - t0) / kCalls);     \
  } while (0)

int main(void) {
  pthread_t t;
  pthread_create(&t, NULL, sleeper, NULL);
  while (g_other == 0) usleep(1000);
  // A thread's CPU clock id, as glibc makes it: (~tid << 3) | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED.
  const clockid_t other_clock = (clockid_t)((~(unsigned)g_other << 3) | 4 | 2);
  struct timespec ts;
  struct stat st;
  char buf[256];
  const int task = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
  const int statm = open("/proc/self/statm", O_RDONLY);
  printf("%-52s %6s\n", "call", "ns");
  TIME("getppid() (entry and exit)", syscall(SYS_getppid));
  TIME("clock_gettime, another thread's CPU clock", clock_gettime(other_clock, &ts));
  TIME("clock_gettime(CLOCK_THREAD_CPUTIME_ID)", clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts));
  TIME("clock_gettime(CLOCK_PROCESS_CPUTIME_ID)", clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts));
  TIME("fstat(/proc/self/task)", fstat(task, &st));
  TIME("pread(/proc/self/statm)", pread(statm, buf, sizeof buf, 0));
  TIME("clock_gettime(CLOCK_MONOTONIC) (vDSO)", clock_gettime(CLOCK_MONOTONIC, &ts));
  return 0;
}
