/*
 * The floor: the least work that reads the seed metric set from /proc, in plain C.
 *
 * Every file is opened once; each iteration re-reads it with one pread(fd, buf, size, 0) into a
 * fixed buffer and does a minimal parse that still yields the values a monitor reports (the
 * numbers a sampler would turn into CPU %, memory %, bytes sent/received, RSS, threads), plus
 * statvfs("/") for disk %. Nothing is allocated in the loop. A volatile sink keeps the compiler
 * from dropping the parse.
 *
 * Variants (all measured in one run, interleaved batch by batch so drift hits them alike):
 *   seed     /proc/stat, /proc/meminfo, /proc/net/dev, /proc/PID/stat, /proc/PID/statm, statvfs
 *   full     seed + /proc/PID/status + /proc/PID/io (what the opt-in process_io source adds)
 *   process  /proc/PID/stat, statm (stroboscope's process source alone)
 * and each item alone, to set beside stroboscope's per-source split.
 *
 * Usage: floor [--pid PID] [--batches N] [--batch-ms MS]
 * PID defaults to "self" (this program). Prints one JSON object: median ns per iteration of each
 * variant and item over the batches.
 *
 * Timer mode: floor --tick-ns NS --seconds S [--variant seed|full|process|none] [--pid PID]
 * wakes on absolute CLOCK_MONOTONIC deadlines NS apart (clock_nanosleep, 1 ns timer slack) for S
 * seconds (or until SIGTERM/SIGINT) and reads the variant's files on each tick, skipping deadlines
 * already passed as stroboscope's sampler does; prints ticks taken and missed and the lateness
 * percentiles. This is the floor for sampling on time on this machine.
 *
 * Build: cc -O2 -o floor floor.c
 *
 * Library mode (cc -O2 -shared -fPIC -DFLOOR_LIBRARY -o libfloor.so floor.c): the timer loop as a
 * function, floor_thread_run(), that a benchmark calls through ctypes from a thread of its own
 * process (ctypes releases the GIL for the call), so the bare wake and the naive sampler run in
 * the process under test, beside its interpreter, as stroboscope's sampler thread does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE 65536
#define MAX_BATCHES 101

static volatile uint64_t g_sink;

static char g_buf[BUF_SIZE + 1];

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Reads the whole file at offset 0 into g_buf, NUL-terminated. Returns the length, or -1. */
static ssize_t read_at0(int fd) {
  ssize_t n;
  do {
    n = pread(fd, g_buf, BUF_SIZE, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  g_buf[n] = '\0';
  return n;
}

/* Parses an unsigned decimal at *p (skipping blanks first) and advances *p past it. */
static uint64_t next_u64(const char** p) {
  const char* s = *p;
  while (*s == ' ' || *s == '\t') ++s;
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + (uint64_t)(*s++ - '0');
  *p = s;
  return v;
}

/* Value after "key" (which includes its ':'), searched from the start of a line. */
static uint64_t keyed_value(const char* text, const char* key) {
  size_t klen = strlen(key);
  const char* s = text;
  while (s != NULL && *s != '\0') {
    if (strncmp(s, key, klen) == 0) {
      const char* v = s + klen;
      return next_u64(&v);
    }
    s = strchr(s, '\n');
    if (s != NULL) ++s;
  }
  return 0;
}

/* /proc/stat: the first line's jiffies, summed (total) and idle + iowait. */
static uint64_t parse_stat(void) {
  const char* p = g_buf + 3; /* "cpu" */
  uint64_t total = 0, idle = 0;
  for (int i = 0; i < 10; ++i) {
    uint64_t v = next_u64(&p);
    total += v;
    if (i == 3 || i == 4) idle += v;
  }
  return total ^ (idle << 1);
}

/* /proc/meminfo: MemTotal (the first line) and MemAvailable. */
static uint64_t parse_meminfo(void) {
  return keyed_value(g_buf, "MemTotal:") ^ keyed_value(g_buf, "MemAvailable:");
}

/* /proc/net/dev: received and transmitted bytes summed over every interface but lo. */
static uint64_t parse_net_dev(void) {
  const char* s = strchr(g_buf, '\n');
  if (s != NULL) s = strchr(s + 1, '\n'); /* two header lines */
  uint64_t recv = 0, sent = 0;
  while (s != NULL && *++s != '\0') {
    const char* name = s;
    while (*name == ' ') ++name;
    const char* colon = strchr(name, ':');
    if (colon == NULL) break;
    const char* p = colon + 1;
    if (!(colon - name == 2 && name[0] == 'l' && name[1] == 'o')) {
      recv += next_u64(&p);
      for (int i = 0; i < 7; ++i) next_u64(&p);
      sent += next_u64(&p);
    }
    s = strchr(p, '\n');
  }
  return recv ^ (sent << 1);
}

/* /proc/PID/stat: utime, stime, num_threads and rss (fields 14, 15, 20, 24 of proc(5)). */
static uint64_t parse_pid_stat(void) {
  const char* p = strrchr(g_buf, ')');
  if (p == NULL) return 0;
  p += 2;  /* ") " */
  ++p;     /* state */
  uint64_t f[25] = {0};
  for (int i = 4; i <= 24; ++i) {
    while (*p == ' ') ++p;
    if (*p == '-') ++p; /* tpgid, priority, nice may be negative; the sign does not matter here */
    f[i] = next_u64(&p);
  }
  return f[14] + f[15] + (f[20] << 8) + (f[24] << 16);
}

/* /proc/PID/statm: size and resident pages. */
static uint64_t parse_statm(void) {
  const char* p = g_buf;
  uint64_t size = next_u64(&p);
  return size ^ (next_u64(&p) << 1);
}

/* /proc/PID/status: voluntary and involuntary context switches. */
static uint64_t parse_status(void) {
  return keyed_value(g_buf, "voluntary_ctxt_switches:") ^
         keyed_value(g_buf, "nonvoluntary_ctxt_switches:");
}

/* /proc/PID/io: bytes read from and written to storage. */
static uint64_t parse_io(void) {
  return keyed_value(g_buf, "read_bytes:") ^ keyed_value(g_buf, "write_bytes:");
}

enum Item { kStat, kMeminfo, kNetDev, kPidStat, kStatm, kStatvfs, kStatus, kIo, kNumItems };

static const char* const kItemNames[kNumItems] = {
    "/proc/stat",      "/proc/meminfo",     "/proc/net/dev",  "/proc/PID/stat",
    "/proc/PID/statm", "statvfs(/)",        "/proc/PID/status", "/proc/PID/io"};

static int g_fd[kNumItems];

static uint64_t do_item(int item) {
  if (item == kStatvfs) {
    struct statvfs sv;
    if (statvfs("/", &sv) != 0) return 0;
    uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
    uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    uint64_t free_ = (uint64_t)sv.f_bfree * sv.f_frsize;
    /* used % as psutil.disk_usage computes it, scaled to an integer */
    uint64_t used = total - free_;
    return (used + avail) != 0 ? used * 10000 / (used + avail) : 0;
  }
  if (read_at0(g_fd[item]) <= 0) return 0;
  switch (item) {
    case kStat: return parse_stat();
    case kMeminfo: return parse_meminfo();
    case kNetDev: return parse_net_dev();
    case kPidStat: return parse_pid_stat();
    case kStatm: return parse_statm();
    case kStatus: return parse_status();
    case kIo: return parse_io();
    default: return 0;
  }
}

struct Variant {
  const char* name;
  int n;
  int items[kNumItems];
};

/* The variants first, then each item alone (filled in main). */
static struct Variant g_variants[3 + kNumItems] = {
    {"seed", 6, {kStat, kMeminfo, kNetDev, kPidStat, kStatm, kStatvfs}},
    {"full", 8, {kStat, kMeminfo, kNetDev, kPidStat, kStatm, kStatvfs, kStatus, kIo}},
    {"process", 2, {kPidStat, kStatm}},
};
static const int kNumVariants = 3 + kNumItems;

static void run_variant(const struct Variant* v, int64_t iters) {
  uint64_t acc = 0;
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < v->n; ++k) acc += do_item(v->items[k]);
  }
  g_sink += acc;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int cmp_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return (x > y) - (x < y);
}

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

static void sleep_until(int64_t deadline_ns) {
  struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !g_stop) {
  }
}

struct TimerResult {
  int64_t ticks_taken, ticks_missed, lateness_p50_ns, lateness_p99_ns, lateness_max_ns;
  int64_t cost_total_ns, cpu_ns, elapsed_ns;
};

static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The timer loop: sample the variant on deadlines tick_ns apart for `seconds` (or until g_stop). */
static int timer_loop(const struct Variant* v, int64_t tick_ns, double seconds,
                      struct TimerResult* out) {
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  size_t cap = (size_t)(seconds * 1e9 / (double)tick_ns) + 16;
  int64_t* late = malloc(cap * sizeof *late);
  if (late == NULL) return 1;
  size_t taken = 0;
  uint64_t missed = 0, acc = 0;
  int64_t cost_total = 0;
  int64_t cpu0 = thread_cpu_ns();
  int64_t start = now_ns(), deadline = start, end = start + (int64_t)(seconds * 1e9);
  for (;;) {
    int64_t now = now_ns();
    if (now < deadline) {
      sleep_until(deadline);
      now = now_ns();
    }
    if (now >= end || taken == cap || g_stop) break;
    late[taken++] = now - deadline;
    for (int k = 0; k < v->n; ++k) acc += do_item(v->items[k]);
    int64_t done = now_ns();
    cost_total += done - now;
    deadline += tick_ns;
    if (done >= deadline) {
      int64_t skipped = (done - deadline) / tick_ns + 1;
      deadline += skipped * tick_ns;
      missed += (uint64_t)skipped;
    }
  }
  out->cpu_ns = thread_cpu_ns() - cpu0;
  out->elapsed_ns = now_ns() - start;
  g_sink += acc;
  qsort(late, taken, sizeof *late, cmp_i64);
  out->ticks_taken = (int64_t)taken;
  out->ticks_missed = (int64_t)missed;
  out->lateness_p50_ns = taken ? late[taken / 2] : 0;
  out->lateness_p99_ns = taken ? late[taken * 99 / 100] : 0;
  out->lateness_max_ns = taken ? late[taken - 1] : 0;
  out->cost_total_ns = cost_total;
  free(late);
  return 0;
}

/* Opens the files of every item for `pid` ("self" or a number); 0, or 1 with a message. */
static int open_items(const char* pid) {
  char path[256];
  const char* files[kNumItems] = {"/proc/stat", "/proc/meminfo", "/proc/net/dev", "stat",
                                  "statm",      NULL,            "status",        "io"};
  for (int i = 0; i < kNumItems; ++i) {
    if (g_fd[i] > 0) close(g_fd[i]);
    g_fd[i] = -1;
    if (files[i] == NULL) continue;
    if (files[i][0] == '/') {
      snprintf(path, sizeof path, "%s", files[i]);
    } else {
      snprintf(path, sizeof path, "/proc/%s/%s", pid, files[i]);
    }
    g_fd[i] = open(path, O_RDONLY | O_CLOEXEC);
    if (g_fd[i] < 0) {
      fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
      return 1;
    }
    ssize_t n = read_at0(g_fd[i]);
    if (n < 0 || n >= BUF_SIZE) {
      fprintf(stderr, "cannot read %s whole into %d bytes\n", path, BUF_SIZE);
      return 1;
    }
  }
  return 0;
}

static const struct Variant kNone = {"none", 0, {0}};

static const struct Variant* find_variant(const char* name) {
  if (strcmp(name, "none") == 0) return &kNone;
  for (int k = 0; k < 3; ++k) {
    if (strcmp(name, g_variants[k].name) == 0) return &g_variants[k];
  }
  return NULL;
}

#ifdef FLOOR_LIBRARY
/* Runs the timer loop on the calling thread, reading `variant` (seed|full|process|none) of
 * `pid` ("self": this process) every tick_ns for `seconds`. out[8]: ticks taken, missed,
 * lateness p50, p99, max (ns), the loop's summed tick cost (ns), this thread's CPU time (ns),
 * elapsed (ns). Returns 0, or nonzero for a bad variant or a file that cannot be read.
 * floor_thread_stop() ends a running loop early. One loop at a time per process. */
int floor_thread_run(const char* variant, const char* pid, long long tick_ns, double seconds,
                     long long* out) {
  const struct Variant* v = find_variant(variant);
  if (v == NULL || tick_ns <= 0 || seconds <= 0) return 2;
  if (open_items(pid) != 0) return 1;
  g_stop = 0;
  struct TimerResult r;
  if (timer_loop(v, tick_ns, seconds, &r) != 0) return 1;
  long long vals[8] = {r.ticks_taken, r.ticks_missed, r.lateness_p50_ns, r.lateness_p99_ns,
                       r.lateness_max_ns, r.cost_total_ns, r.cpu_ns, r.elapsed_ns};
  memcpy(out, vals, sizeof vals);
  return 0;
}

void floor_thread_stop(void) { g_stop = 1; }
#else
/* Timer mode: sample the variant on deadlines tick_ns apart for `seconds`; print JSON. */
static int run_timer(const struct Variant* v, int64_t tick_ns, double seconds) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal; /* no SA_RESTART: the sleep returns EINTR and the loop ends */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  struct TimerResult r;
  if (timer_loop(v, tick_ns, seconds, &r) != 0) return 1;
  printf("{\"variant\": \"%s\", \"tick_ns\": %lld, \"seconds\": %.3f, \"ticks_taken\": %lld, "
         "\"ticks_missed\": %lld, \"lateness_p50_ns\": %lld, \"lateness_p99_ns\": %lld, "
         "\"lateness_max_ns\": %lld, \"cost_mean_ns\": %.1f}\n",
         v->name, (long long)tick_ns, (double)r.elapsed_ns / 1e9, (long long)r.ticks_taken,
         (long long)r.ticks_missed, (long long)r.lateness_p50_ns, (long long)r.lateness_p99_ns,
         (long long)r.lateness_max_ns,
         r.ticks_taken ? (double)r.cost_total_ns / (double)r.ticks_taken : 0.0);
  return 0;
}

int main(int argc, char** argv) {
  const char* pid = "self";
  const char* variant = "process";
  int batches = 9;
  double batch_ms = 30.0, seconds = 3.0;
  int64_t tick_ns = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--pid") == 0 && i + 1 < argc) {
      pid = argv[++i];
    } else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc) {
      batches = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--batch-ms") == 0 && i + 1 < argc) {
      batch_ms = atof(argv[++i]);
    } else if (strcmp(argv[i], "--tick-ns") == 0 && i + 1 < argc) {
      tick_ns = atoll(argv[++i]);
    } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = atof(argv[++i]);
    } else if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
      variant = argv[++i];
    } else {
      fprintf(stderr,
              "usage: %s [--pid PID] [--batches N] [--batch-ms MS]\n"
              "       %s --tick-ns NS --seconds S [--variant seed|full|process|none] [--pid PID]\n",
              argv[0], argv[0]);
      return 2;
    }
  }
  if (batches < 1 || batches > MAX_BATCHES || batch_ms <= 0) {
    fprintf(stderr, "--batches must be 1..%d and --batch-ms > 0\n", MAX_BATCHES);
    return 2;
  }

  if (open_items(pid) != 0) return 1;
  for (int i = 0; i < kNumItems; ++i) {
    struct Variant* v = &g_variants[3 + i];
    v->name = kItemNames[i];
    v->n = 1;
    v->items[0] = i;
  }
  if (tick_ns > 0) {
    const struct Variant* v = find_variant(variant);
    if (v == NULL || seconds <= 0) {
      fprintf(stderr, "--variant must be seed, full, process or none and --seconds > 0\n");
      return 2;
    }
    return run_timer(v, tick_ns, seconds);
  }

  /* Calibrate: iterations per batch so that one batch of each variant takes about batch_ms. */
  int64_t iters[3 + kNumItems];
  for (int v = 0; v < kNumVariants; ++v) {
    int64_t n = 16;
    for (;;) {
      int64_t t0 = now_ns();
      run_variant(&g_variants[v], n);
      int64_t dt = now_ns() - t0;
      if (dt > 5000000 || n > (int64_t)1 << 30) {
        iters[v] = (int64_t)((double)n * batch_ms * 1e6 / (double)dt);
        if (iters[v] < 1) iters[v] = 1;
        break;
      }
      n *= 2;
    }
  }

  static double per_iter[3 + kNumItems][MAX_BATCHES];
  for (int b = 0; b < batches; ++b) {
    for (int v = 0; v < kNumVariants; ++v) {
      int64_t t0 = now_ns();
      run_variant(&g_variants[v], iters[v]);
      int64_t dt = now_ns() - t0;
      per_iter[v][b] = (double)dt / (double)iters[v];
    }
  }

  printf("{\"pid\": \"%s\", \"batches\": %d, \"ns_per_iter\": {", pid, batches);
  for (int v = 0; v < kNumVariants; ++v) {
    qsort(per_iter[v], (size_t)batches, sizeof(double), cmp_double);
    double med = batches % 2 == 1
                     ? per_iter[v][batches / 2]
                     : 0.5 * (per_iter[v][batches / 2 - 1] + per_iter[v][batches / 2]);
    printf("%s\"%s\": %.1f", v == 0 ? "" : ", ", g_variants[v].name, med);
  }
  printf("}, \"sink\": %llu}\n", (unsigned long long)(g_sink & 0xff));
  return 0;
}
#endif
