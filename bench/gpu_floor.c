/* gpu_floor: the raw NVML calls the stroboscope "gpu" source makes per device per read, in a
 * tight loop (SECONDS) and then paced at 1 kHz (SECONDS more). Usage: gpu_floor LIBRARY NDEV
 * SECONDS (NDEV 0 = every GPU). Prints one JSON line. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

typedef int rc_t;
typedef void *hdev;
typedef union { double d; unsigned ui; unsigned long ul; unsigned long long ull;
                long long sll; int si; unsigned short us; } nval;
typedef struct { unsigned id, scope; long long ts, latency; int type; rc_t rc; nval v; } nfield;
typedef struct { unsigned gpu, mem; } nutil;
typedef struct { unsigned long long total, free, used; } nmem1;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nmem2;
typedef struct { unsigned pid; unsigned long long ts; unsigned sm, mem, enc, dec; } nputil;

enum { MAXP = 1024, STRIDE = 32, NF = 7, MAXDEV = 64, MAXMIG = 8 };
static const unsigned kFields[NF] = {186, 190, 83, 197, 198, 3, 4};
enum { C_FIELDS, C_MEM2, C_MEM1, C_UTIL, C_TEMP, C_POWER, C_LIMIT, C_ENERGY, C_CLK_SM,
       C_CLK_MEM, C_CLK_GFX, C_FAN, C_REASONS, C_ECC_C, C_ECC_U, C_COMPUTE, C_GRAPHICS,
       C_PUTIL, C_N };
static const char *const kNames[C_N] = {
    "FieldValues", "MemoryInfo_v2", "MemoryInfo", "UtilizationRates", "Temperature",
    "PowerUsage", "EnforcedPowerLimit", "TotalEnergyConsumption", "ClockInfo(SM)",
    "ClockInfo(MEM)", "ClockInfo(GRAPHICS)", "FanSpeed", "CurrentClocksEventReasons",
    "TotalEccErrors(CORRECTED)", "TotalEccErrors(UNCORRECTED)", "ComputeRunningProcesses",
    "GraphicsRunningProcesses", "ProcessUtilization"};

static struct {
  rc_t (*init)(void);
  rc_t (*count)(unsigned *);
  rc_t (*handle)(unsigned, hdev *);
  rc_t (*fields)(hdev, int, nfield *);
  rc_t (*mem2)(hdev, nmem2 *);
  rc_t (*mem1)(hdev, nmem1 *);
  rc_t (*util)(hdev, nutil *);
  rc_t (*temp)(hdev, int, unsigned *);
  rc_t (*power)(hdev, unsigned *);
  rc_t (*limit)(hdev, unsigned *);
  rc_t (*energy)(hdev, unsigned long long *);
  rc_t (*clock)(hdev, int, unsigned *);
  rc_t (*fan)(hdev, unsigned *);
  rc_t (*reasons)(hdev, unsigned long long *);
  rc_t (*ecc)(hdev, int, int, unsigned long long *);
  rc_t (*compute)(hdev, unsigned *, void *);
  rc_t (*graphics)(hdev, unsigned *, void *);
  rc_t (*putil)(hdev, nputil *, unsigned *, unsigned long long);
  rc_t (*mig_mode)(hdev, unsigned *, unsigned *);
  rc_t (*max_mig)(hdev, unsigned *);
  rc_t (*mig_handle)(hdev, unsigned, hdev *);
} f;

struct dev {
  hdev h;
  int on[C_N];
  int field_on[NF];
  unsigned long long last_seen;
  unsigned char compute[MAXP * STRIDE], graphics[MAXP * STRIDE];
  nputil putil[MAXP];
  hdev mig[MAXMIG];
  int nmig;
};

static struct dev devs[MAXDEV];
static unsigned long long calls, transient, sink;

static void *sym(void *lib, const char *a, const char *b, const char *c) {
  void *p = dlsym(lib, a);
  if (p == NULL && b != NULL) p = dlsym(lib, b);
  if (p == NULL && c != NULL) p = dlsym(lib, c);
  return p;
}

static int unsupported(rc_t rc) {
  return rc == 2 || rc == 3 || rc == 4 || rc == 13 || rc == 22 || rc == 25 || rc == 26;
}
static int passing(rc_t rc) {
  return rc == 6 || rc == 7 || rc == 10 || rc == 19 || rc == 20 || rc == 21 || rc == 23 ||
         rc == 27;
}

/* Like the source: success goes on, unsupported stops asking, passing is counted, else fatal. */
static int check(struct dev *d, int c, rc_t rc) {
  ++calls;
  if (rc == 0) return 1;
  if (unsupported(rc)) {
    d->on[c] = 0;
  } else if (passing(rc)) {
    ++transient;
  } else {
    fprintf(stderr, "gpu_floor: %s failed with NVML code %d\n", kNames[c], rc);
    exit(3);
  }
  return 0;
}

static void read_device(struct dev *d) {
  hdev h = d->h;
  unsigned long long field[NF] = {0};
  int have[NF] = {0};
  if (d->on[C_FIELDS]) {
    nfield fv[NF];
    int which[NF], n = 0;
    for (int i = 0; i < NF; ++i) {
      if (!d->field_on[i]) continue;
      memset(&fv[n], 0, sizeof fv[n]);
      fv[n].id = kFields[i];
      which[n++] = i;
    }
    if (n > 0 && check(d, C_FIELDS, f.fields(h, n, fv))) {
      for (int j = 0; j < n; ++j) {
        if (fv[j].rc == 0) {
          have[which[j]] = 1;
          field[which[j]] = fv[j].type == 1 ? fv[j].v.ui : fv[j].v.ull;
        } else if (unsupported(fv[j].rc)) {
          d->field_on[which[j]] = 0;
        }
      }
    }
  }
  int ok = 0;
  if (d->on[C_MEM2]) {
    nmem2 m;
    memset(&m, 0, sizeof m);
    m.version = (unsigned)sizeof(nmem2) | (2u << 24);
    if (check(d, C_MEM2, f.mem2(h, &m))) ok = 1, sink += m.used;
  }
  if (!ok && !d->on[C_MEM2] && d->on[C_MEM1]) {
    nmem1 m;
    memset(&m, 0, sizeof m);
    if (check(d, C_MEM1, f.mem1(h, &m))) sink += m.used;
  }
  if (d->on[C_UTIL]) {
    nutil u = {0, 0};
    if (check(d, C_UTIL, f.util(h, &u))) sink += u.gpu;
  }
  unsigned ui = 0;
  unsigned long long ull = 0;
  if (d->on[C_TEMP] && check(d, C_TEMP, f.temp(h, 0, &ui))) sink += ui;
  if (!have[0] && d->on[C_POWER] && check(d, C_POWER, f.power(h, &ui))) sink += ui;
  if (!have[1] && d->on[C_LIMIT] && check(d, C_LIMIT, f.limit(h, &ui))) sink += ui;
  if (!have[2] && d->on[C_ENERGY] && check(d, C_ENERGY, f.energy(h, &ull))) sink += ull;
  static const int clk[3][2] = {{C_CLK_SM, 1}, {C_CLK_MEM, 2}, {C_CLK_GFX, 0}};
  for (int i = 0; i < 3; ++i) {
    if (d->on[clk[i][0]] && check(d, clk[i][0], f.clock(h, clk[i][1], &ui))) sink += ui;
  }
  if (d->on[C_FAN] && check(d, C_FAN, f.fan(h, &ui))) sink += ui;
  if (d->on[C_REASONS] && check(d, C_REASONS, f.reasons(h, &ull))) sink += ull;
  if (!have[5] && d->on[C_ECC_C] && check(d, C_ECC_C, f.ecc(h, 0, 0, &ull))) sink += ull;
  if (!have[6] && d->on[C_ECC_U] && check(d, C_ECC_U, f.ecc(h, 1, 0, &ull))) sink += ull;
  unsigned n = MAXP;
  if (d->on[C_COMPUTE] && check(d, C_COMPUTE, f.compute(h, &n, d->compute))) sink += n;
  n = MAXP;
  if (d->on[C_GRAPHICS] && check(d, C_GRAPHICS, f.graphics(h, &n, d->graphics))) sink += n;
  if (d->on[C_PUTIL]) {
    n = MAXP;
    rc_t rc = f.putil(h, d->putil, &n, d->last_seen);
    if (rc == 0) {
      for (unsigned i = 0; i < n && i < MAXP; ++i) {
        if (d->putil[i].ts > d->last_seen) d->last_seen = d->putil[i].ts;
        sink += d->putil[i].sm;
      }
      ++calls;
    } else if (rc == 6) {
      ++calls; /* nothing newer: normal */
    } else {
      check(d, C_PUTIL, rc);
    }
  }
  for (int j = 0; j < d->nmig; ++j) {
    nmem2 m;
    memset(&m, 0, sizeof m);
    m.version = (unsigned)sizeof(nmem2) | (2u << 24);
    if (d->on[C_MEM2] && f.mem2(d->mig[j], &m) == 0) sink += m.used;
    ++calls;
  }
  for (int i = 0; i < NF; ++i) sink += have[i] ? field[i] : 0;
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: gpu_floor LIBRARY NDEV SECONDS\n");
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "gpu_floor: %s\n", dlerror());
    return 2;
  }
  *(void **)&f.init = sym(lib, "nvmlInit_v2", "nvmlInit", NULL);
  *(void **)&f.count = sym(lib, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount", NULL);
  *(void **)&f.handle = sym(lib, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex",
                            NULL);
  *(void **)&f.fields = sym(lib, "nvmlDeviceGetFieldValues", NULL, NULL);
  *(void **)&f.mem2 = sym(lib, "nvmlDeviceGetMemoryInfo_v2", NULL, NULL);
  *(void **)&f.mem1 = sym(lib, "nvmlDeviceGetMemoryInfo", NULL, NULL);
  *(void **)&f.util = sym(lib, "nvmlDeviceGetUtilizationRates", NULL, NULL);
  *(void **)&f.temp = sym(lib, "nvmlDeviceGetTemperature", NULL, NULL);
  *(void **)&f.power = sym(lib, "nvmlDeviceGetPowerUsage", NULL, NULL);
  *(void **)&f.limit = sym(lib, "nvmlDeviceGetEnforcedPowerLimit", NULL, NULL);
  *(void **)&f.energy = sym(lib, "nvmlDeviceGetTotalEnergyConsumption", NULL, NULL);
  *(void **)&f.clock = sym(lib, "nvmlDeviceGetClockInfo", NULL, NULL);
  *(void **)&f.fan = sym(lib, "nvmlDeviceGetFanSpeed", NULL, NULL);
  *(void **)&f.reasons = sym(lib, "nvmlDeviceGetCurrentClocksEventReasons",
                             "nvmlDeviceGetCurrentClocksThrottleReasons", NULL);
  *(void **)&f.ecc = sym(lib, "nvmlDeviceGetTotalEccErrors", NULL, NULL);
  *(void **)&f.compute = sym(lib, "nvmlDeviceGetComputeRunningProcesses_v3",
                             "nvmlDeviceGetComputeRunningProcesses_v2",
                             "nvmlDeviceGetComputeRunningProcesses");
  *(void **)&f.graphics = sym(lib, "nvmlDeviceGetGraphicsRunningProcesses_v3",
                              "nvmlDeviceGetGraphicsRunningProcesses_v2",
                              "nvmlDeviceGetGraphicsRunningProcesses");
  *(void **)&f.putil = sym(lib, "nvmlDeviceGetProcessUtilization", NULL, NULL);
  *(void **)&f.mig_mode = sym(lib, "nvmlDeviceGetMigMode", NULL, NULL);
  *(void **)&f.max_mig = sym(lib, "nvmlDeviceGetMaxMigDeviceCount", NULL, NULL);
  *(void **)&f.mig_handle = sym(lib, "nvmlDeviceGetMigDeviceHandleByIndex", NULL, NULL);
  if (f.init == NULL || f.count == NULL || f.handle == NULL) {
    fprintf(stderr, "gpu_floor: nvmlInit/nvmlDeviceGetCount/GetHandleByIndex missing\n");
    return 2;
  }
  rc_t rc = f.init();
  if (rc != 0) {
    fprintf(stderr, "gpu_floor: nvmlInit failed with NVML code %d\n", rc);
    return 2;
  }
  unsigned count = 0;
  if ((rc = f.count(&count)) != 0) {
    fprintf(stderr, "gpu_floor: nvmlDeviceGetCount failed with NVML code %d\n", rc);
    return 2;
  }
  unsigned ndev = (unsigned)atoi(argv[2]);
  if (ndev == 0) ndev = count;
  if (ndev > count || ndev > MAXDEV) {
    fprintf(stderr, "gpu_floor: %u device(s) asked, NVML sees %u\n", ndev, count);
    return 2;
  }
  void *const have_fn[C_N] = {
      (void *)f.fields, (void *)f.mem2, (void *)f.mem1, (void *)f.util, (void *)f.temp,
      (void *)f.power, (void *)f.limit, (void *)f.energy, (void *)f.clock, (void *)f.clock,
      (void *)f.clock, (void *)f.fan, (void *)f.reasons, (void *)f.ecc, (void *)f.ecc,
      (void *)f.compute, (void *)f.graphics, (void *)f.putil};
  for (unsigned i = 0; i < ndev; ++i) {
    struct dev *d = &devs[i];
    if ((rc = f.handle(i, &d->h)) != 0) {
      fprintf(stderr, "gpu_floor: nvmlDeviceGetHandleByIndex(%u) failed: %d\n", i, rc);
      return 2;
    }
    for (int c = 0; c < C_N; ++c) d->on[c] = have_fn[c] != NULL;
    for (int k = 0; k < NF; ++k) d->field_on[k] = 1;
    unsigned cur = 0, pend = 0, max = 0;
    if (f.mig_mode != NULL && f.mig_mode(d->h, &cur, &pend) == 0 && cur == 1) {
      d->on[C_UTIL] = d->on[C_PUTIL] = 0; /* as the source: no device-level utilisation */
      if (f.max_mig != NULL && f.mig_handle != NULL && f.max_mig(d->h, &max) == 0) {
        for (unsigned j = 0; j < max && d->nmig < MAXMIG; ++j) {
          hdev m;
          if (f.mig_handle(d->h, j, &m) == 0) d->mig[d->nmig++] = m;
        }
      }
    }
  }
  double seconds = atof(argv[3]);
  /* Warm-up: the first reads find what is unsupported, as the source's first reads do. */
  for (int w = 0; w < 3; ++w) {
    for (unsigned i = 0; i < ndev; ++i) read_device(&devs[i]);
  }
  long long t0 = now_ns();
  for (int w = 0; w < 10; ++w) {
    for (unsigned i = 0; i < ndev; ++i) read_device(&devs[i]);
  }
  long long one = (now_ns() - t0) / 10;
  long long per_batch = one > 0 ? 20000000LL / one : 100000;
  if (per_batch < 1) per_batch = 1;
  if (per_batch > 100000) per_batch = 100000;
  enum { MAXB = 400 };
  static long long ns[MAXB];
  int nb = 0;
  unsigned long long reads = 0;
  unsigned long long calls0 = calls;
  long long start = now_ns();
  while (nb < MAXB && (nb < 5 || now_ns() - start < (long long)(seconds * 1e9))) {
    long long b0 = now_ns();
    for (long long r = 0; r < per_batch; ++r) {
      for (unsigned i = 0; i < ndev; ++i) read_device(&devs[i]);
    }
    ns[nb++] = (now_ns() - b0) / per_batch;
    reads += (unsigned long long)per_batch;
  }
  qsort(ns, (size_t)nb, sizeof ns[0], cmp_ll);
  double calls_per_read = (double)(calls - calls0) / (double)reads;

  /* Paced: one read per 1 ms on absolute deadlines with 1 ns timer slack, as the poll thread
   * does: the read timed on its own (caches as a sleeping thread finds them) and the thread's
   * CPU time per read including the sleep and wake-up. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  enum { MAXPACED = 20000 };
  static long long pns[MAXPACED];
  int np = (int)(seconds * 1000.0);
  if (np < 200) np = 200;
  if (np > MAXPACED) np = MAXPACED;
  long long c0 = cpu_ns(), deadline = now_ns();
  for (int i = 0; i < np; ++i) {
    deadline += 1000000LL;
    struct timespec ts = {(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
    long long r0 = now_ns();
    for (unsigned k = 0; k < ndev; ++k) read_device(&devs[k]);
    pns[i] = now_ns() - r0;
  }
  long long paced_cpu = cpu_ns() - c0;
  qsort(pns, (size_t)np, sizeof pns[0], cmp_ll);
  printf("{\"devices\": %u, \"ns_per_read\": %lld, \"min_ns_per_read\": %lld, "
         "\"reads\": %llu, \"batches\": %d, \"paced_reads\": %d, \"paced_read_ns\": %lld, "
         "\"paced_read_p90_ns\": %lld, \"paced_cpu_ns_per_read\": %lld, "
         "\"calls_per_read\": %.2f, \"transient\": %llu, \"mig_instances\": %d, "
         "\"disabled\": [",
         ndev, ns[nb / 2], ns[0], reads, nb, np, pns[np / 2], pns[np * 9 / 10],
         paced_cpu / np, calls_per_read, transient, devs[0].nmig);
  int first = 1;
  for (int c = 0; c < C_N; ++c) {
    if (!devs[0].on[c]) {
      printf("%s\"%s\"", first ? "" : ", ", kNames[c]);
      first = 0;
    }
  }
  printf("], \"sink\": %llu}\n", sink % 1000);
  return 0;
}
