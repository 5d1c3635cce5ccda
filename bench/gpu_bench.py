"""Benchmark: the cost of one reading of the ``gpu`` source, beside a C floor and pynvml.

One run, per device count, on the fake NVML library (``tests/fake_nvml/fake_nvml.c``, compiled
here with ``cc -shared -fPIC -O2``) and, with ``--real``, on the real ``libnvidia-ml.so.1``:

- stroboscope, polled on its own thread (``Sampler(..., sources={"gpu": ...})``):
  * readings/s achieved when asked for 1 kHz and for 10 kHz (rows whose ``gpu.read_mono_ns`` is
    set; on the fake, the fake's own count of ``nvmlDeviceGetFieldValues`` calls, which is exact);
  * poll-thread CPU per reading: the poll thread's run time (``/proc/self/task/TID/schedstat``)
    over the readings it took. It includes the NVML calls, our per-read work, publishing the
    reading, and one timed sleep/wake-up per reading (the floor has no sleep);
  * tick copy cost: ``stats().sources`` ``read_ns_total / reads`` of the gpu source, i.e. what
    the sampler tick spends copying the latest reading into the row (not the NVML cost);
  * wake-up estimate: the sampler thread's CPU per tick minus its measured cost per tick, the
    price of one timed sleep and wake-up on this machine, to read the intercept against.
- the floor: a small C program, embedded below and compiled with ``cc -O2 ... -ldl``, that
  dlopens the same library and makes exactly the raw NVML calls the source makes per device per
  read (nvml_device.cpp: the field batch, memory, utilisation, temperature, three clocks, fan,
  clock-event reasons, compute and graphics process lists, process utilisation; the older single
  queries only where a field fails), disabling a call the same way when the device says it is
  unsupported. Timed back to back ("tight", median over batches) and paced at 1 kHz with the
  poll thread's kind of sleep ("paced": the read timed on its own, and the thread's CPU per read
  including the sleep and wake-up).
- the inner read: ``NvmlSource::read`` itself, compiled from the repository's C++ sources into a
  small harness (embedded below, ``-O3 -DNDEBUG`` like the Release build) and timed exactly like
  the floor, so "inner ÷ floor" is our per-read overhead beyond the NVML calls, with none of
  the sleep noise the poll-thread numbers carry.
- pynvml (``nvidia-ml-py``, if importable): the same values through pynvml calls, pointed at the
  same library by assigning ``pynvml.nvmlLib = ctypes.CDLL(path)`` before ``nvmlInit()``
  (pynvml's loader only opens ``libnvidia-ml.so.1`` when ``nvmlLib`` is still None). The fake
  has no ``nvmlInitWithFlags``, which ``pynvml.nvmlInit()`` calls; then the library's own
  ``nvmlInit_v2`` is called through the same handle.

On the fake an NVML call costs almost nothing, so the numbers measure our overhead (and
pynvml's); on a real GPU the driver calls dominate. Each measurement runs in a fresh child
process (the fake reads its script at the first ``nvmlInit``).

Usage::

    python bench/gpu_bench.py                 # fake library, 1, 2 and 8 devices
    python bench/gpu_bench.py --real          # also the real libnvidia-ml (1 and all GPUs)
    python bench/gpu_bench.py --real --no-fake
    python bench/gpu_bench.py --devices 1,4 --seconds 3 --json out.json
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
FAKE_SOURCE = REPO / "tests" / "fake_nvml" / "fake_nvml.c"
REAL_LIBRARY = "libnvidia-ml.so.1"

# The batch of nvmlDeviceGetFieldValues, as nvml_source_state.hpp builds it.
FIELD_IDS = (186, 190, 83, 197, 198, 3, 4)  # power instant, limit, energy, PCIe tx/rx, ECC s/d
# NVML codes after which the source stops asking (nvml_internal.hpp, classify()).
UNSUPPORTED_CODES = frozenset({2, 3, 4, 13, 22, 25, 26})
TRANSIENT_CODES = frozenset({6, 7, 10, 19, 20, 21, 23, 27})

FLOOR_C = r"""
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
"""


INNER_CPP = r"""
// gpu_inner: stroboscope's own NvmlSource::read (cpp/src/nvml_device.cpp, compiled here from the
// source tree) on the calling thread, the way the poll thread calls it (clear validity, read into
// a private row), timed like gpu_floor: back to back, then paced at 1 kHz. Leaves out what
// PolledSource adds per reading (publishing the row into the seqlock block, the sleep).
// Usage: gpu_inner NDEV SECONDS (NDEV 0 = every GPU). Prints one JSON line.
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "stroboscope/nvml.hpp"

using stroboscope::NvmlSource;
using stroboscope::NvmlSourceOptions;
using stroboscope::RowWriter;

static long long clk(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  NvmlSourceOptions o;
  const unsigned ndev = (unsigned)atoi(argv[1]);
  for (unsigned i = 0; i < ndev; ++i) o.devices.push_back(i);
  const double seconds = atof(argv[2]);
  NvmlSource src(o);
  const std::size_t n = src.columns().size();
  std::vector<std::uint64_t> cells(n);
  std::vector<std::uint8_t> valid(n);
  auto read = [&] {
    std::memset(valid.data(), 0, n);
    src.read(RowWriter(cells.data(), valid.data(), n), clk(CLOCK_MONOTONIC));
  };
  for (int i = 0; i < 3; ++i) read();
  long long t0 = clk(CLOCK_MONOTONIC);
  for (int i = 0; i < 10; ++i) read();
  const long long one = (clk(CLOCK_MONOTONIC) - t0) / 10;
  const long long per_batch = std::clamp<long long>(one > 0 ? 20000000LL / one : 100000, 1, 100000);
  std::vector<long long> ns;
  const long long start = clk(CLOCK_MONOTONIC);
  while (ns.size() < 400 && (ns.size() < 5 || clk(CLOCK_MONOTONIC) - start < seconds * 1e9)) {
    const long long b0 = clk(CLOCK_MONOTONIC);
    for (long long r = 0; r < per_batch; ++r) read();
    ns.push_back((clk(CLOCK_MONOTONIC) - b0) / per_batch);
  }
  std::sort(ns.begin(), ns.end());
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  const int np = std::clamp((int)(seconds * 1000.0), 200, 20000);
  std::vector<long long> pns(np);
  const long long c0 = clk(CLOCK_THREAD_CPUTIME_ID);
  long long deadline = clk(CLOCK_MONOTONIC);
  for (int i = 0; i < np; ++i) {
    deadline += 1000000LL;
    timespec ts{(time_t)(deadline / 1000000000LL), (long)(deadline % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
    const long long r0 = clk(CLOCK_MONOTONIC);
    read();
    pns[i] = clk(CLOCK_MONOTONIC) - r0;
  }
  const long long paced_cpu = clk(CLOCK_THREAD_CPUTIME_ID) - c0;
  std::sort(pns.begin(), pns.end());
  printf("{\"devices\": %zu, \"columns\": %zu, \"ns_per_read\": %lld, \"batches\": %zu, "
         "\"paced_reads\": %d, \"paced_read_ns\": %lld, \"paced_read_p90_ns\": %lld, "
         "\"paced_cpu_ns_per_read\": %lld, \"transient\": %llu}\n",
         src.device_indices().size(), n, ns[ns.size() / 2], ns.size(), np, pns[np / 2],
         pns[np * 9 / 10], paced_cpu / np, (unsigned long long)src.transient_errors());
  return 0;
}
"""
# The source files the inner harness needs (the gpu source and the NVML loader).
INNER_SOURCES = ("nvml_device.cpp", "nvml_library.cpp", "nvml_status.cpp")


def log(msg: str) -> None:
    """Progress to stderr, so stdout stays the result."""
    print(msg, file=sys.stderr, flush=True)


# ---- building ----------------------------------------------------------------------------------


def compile_fake(workdir: Path) -> Path:
    """Build the fake NVML library into ``workdir``; returns its path."""
    out = workdir / "libfake_nvml.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(FAKE_SOURCE)], check=True)
    return out


def compile_floor(workdir: Path) -> Path:
    """Build the embedded floor program into ``workdir``; returns the executable."""
    src = workdir / "gpu_floor.c"
    src.write_text(FLOOR_C)
    out = workdir / "gpu_floor"
    subprocess.run(["cc", "-O2", "-o", str(out), str(src), "-ldl"], check=True)
    return out


def compile_inner(workdir: Path) -> Path | None:
    """Build the inner harness against the repository's C++ sources; None if that fails.

    Flags as the package's Release build (-O3 -DNDEBUG). It measures the source tree, which is
    what ``pip install .`` built from if the installed package is current.
    """
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        log("no C++ compiler: the inner-read columns are skipped")
        return None
    src = workdir / "gpu_inner.cpp"
    src.write_text(INNER_CPP)
    out = workdir / "gpu_inner"
    cmd = [cxx, "-std=c++20", "-O3", "-DNDEBUG", "-I", str(REPO / "cpp" / "include"), str(src)]
    cmd += [str(REPO / "cpp" / "src" / name) for name in INNER_SOURCES]
    cmd += ["-o", str(out), "-ldl", "-lpthread"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        log(f"the inner harness did not build (its columns are skipped):\n{done.stderr[-2000:]}")
        return None
    return out


def fake_script(devices: int) -> str:
    """A scenario for ``devices`` GPUs, each shared by us (with SM samples) and two others."""
    lines = [f"devices {devices}", "driver 550.00.fake-bench"]
    for d in range(devices):
        lines += [
            f"set {d} util 42 43 44",
            f"set {d} power 250000 260000",
            f"set {d} energy 1000 2000 3000 4000",
            f"process {d} self 1073741824 40 55",
            f"process {d} 4242 2147483648",
            f"graphics_process {d} 4343 1048576",
        ]
    return "\n".join(lines) + "\n"


# ---- measuring (in the child process) ------------------------------------------------------------


def _task_runtime_ns() -> dict[int, int]:
    """CPU run time (ns) of every thread of this process, from schedstat."""
    out: dict[int, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as fh:
                out[int(tid)] = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def _fake_reads(lib: ctypes.CDLL | None) -> int | None:
    """The fake's count of nvmlDeviceGetFieldValues calls on GPU 0 (one per reading)."""
    if lib is None:
        return None
    fn = lib.fake_nvml_calls
    fn.restype = ctypes.c_ulonglong
    fn.argtypes = [ctypes.c_uint, ctypes.c_char_p]
    return int(fn(0, b"nvmlDeviceGetFieldValues"))


def measure_stroboscope(
    interval_s: float, seconds: float, gpus: list[int] | None, fake: ctypes.CDLL | None
) -> dict[str, Any]:
    """Run the gpu source polled every ``interval_s`` for ``seconds``; what it achieved and cost.

    The poll thread is the first thread ``Sampler.start()`` creates (the sampler thread is the
    second); the choice is checked against ``stats().thread_cpu_ns``.
    """
    import stroboscope

    s = stroboscope.Sampler(
        interval_s,
        sources={"gpu": interval_s},
        gpu_samples=False,
        gpus=gpus,
        capacity=1 << 16,
    )
    before = set(_task_runtime_ns())
    reads0 = _fake_reads(fake)
    s.start()
    t0 = time.perf_counter()
    time.sleep(seconds)
    runtimes = _task_runtime_ns()
    reads1 = _fake_reads(fake)
    elapsed = time.perf_counter() - t0
    st = s.stats()
    s.stop()
    new = sorted(t for t in runtimes if t not in before)
    poll_cpu: int | None = None
    sampler_cpu_ok = False
    if len(new) >= 2:
        poll_cpu = runtimes[new[0]]
        sampler_cpu = runtimes[new[1]]
        # thread_cpu_ns is read a moment later than schedstat: allow a little drift.
        sampler_cpu_ok = abs(sampler_cpu - st.thread_cpu_ns) <= 0.2 * st.thread_cpu_ns + 2e6
    table = s.snapshot().to_arrow()
    copied = table.num_rows - table.column("gpu.read_mono_ns").null_count
    lag = None
    if copied:
        import pyarrow.compute as pc

        valid = table.filter(table.column("gpu.read_mono_ns").is_valid())
        lag_ns = pc.subtract(valid.column("mono_ns"), valid.column("gpu.read_mono_ns"))
        lag = float(pc.approximate_median(lag_ns).as_py())
    src = next(x for x in st.sources if x.name == "gpu")
    readings = (reads1 - reads0) if reads0 is not None and reads1 is not None else copied
    ticks = max(int(st.ticks_taken), 1)
    out = {
        "asked_hz": 1.0 / interval_s,
        "seconds": elapsed,
        "readings": readings,
        "readings_counted_by": "fake call count" if reads0 is not None else "rows copied",
        "rows_with_reading": copied,
        "readings_per_s": readings / elapsed,
        "tick_copy_ns": src.read_ns_total / max(src.reads, 1),
        "tick_cost_mean_ns": st.cost_mean_ns,
        "wake_ns_estimate": st.thread_cpu_ns / ticks - st.cost_mean_ns,
        "poll_cpu_ns_per_reading": (poll_cpu / readings) if poll_cpu and readings else None,
        "poll_thread_identified": sampler_cpu_ok,
        "reading_lag_median_ns": lag,
        "source_failures": src.failures,
        "source_reason": src.reason,
        "columns": len(table.column_names),
    }
    s.close()
    del s, table
    gc.collect()
    return out


def pynvml_open(library: str) -> Any:
    """Import pynvml and initialise it on ``library`` (a path or soname); None if not installed.

    ``pynvml._LoadNvmlLibrary`` opens ``libnvidia-ml.so.1`` only while ``pynvml.nvmlLib`` is
    None, so assigning our own ``ctypes.CDLL`` first points every later pynvml call at it.
    """
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlLib = ctypes.CDLL(library)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_FunctionNotFound:
        # No nvmlInitWithFlags (the fake): initialise through the library's own entry point.
        init = getattr(pynvml.nvmlLib, "nvmlInit_v2", None) or pynvml.nvmlLib.nvmlInit
        rc = init()
        if rc != 0:
            raise RuntimeError(f"nvmlInit on {library} returned NVML code {rc}") from None
    return pynvml


def _pynvml_plan(nv: Any, handle: Any) -> list[Callable[[], Any]]:
    """The pynvml calls for the source's values on one device, unsupported ones left out."""
    plan: list[Callable[[], Any]] = []

    def keep(fn: Callable[[], Any]) -> Any:
        try:
            result = fn()
        except nv.NVMLError as exc:
            if exc.value in UNSUPPORTED_CODES:
                return None
            if exc.value not in TRANSIENT_CODES:
                raise
            result = None
        plan.append(fn)
        return result

    fields_ok = [False] * len(FIELD_IDS)
    values = keep(lambda: nv.nvmlDeviceGetFieldValues(handle, list(FIELD_IDS)))
    if values is not None:
        fields_ok = [v.nvmlReturn == 0 for v in values]
    if hasattr(nv, "nvmlMemory_v2"):
        keep(lambda: nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2))
    else:  # an older pynvml: the original struct
        keep(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
    keep(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
    keep(lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
    if not fields_ok[0]:
        keep(lambda: nv.nvmlDeviceGetPowerUsage(handle))
    if not fields_ok[1]:
        keep(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
    if not fields_ok[2]:
        keep(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(handle))
    for clock in (nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_CLOCK_GRAPHICS):
        keep(partial(nv.nvmlDeviceGetClockInfo, handle, clock))
    keep(lambda: nv.nvmlDeviceGetFanSpeed(handle))
    keep(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle))
    for i, kind in ((5, 0), (6, 1)):
        if not fields_ok[i]:
            keep(partial(nv.nvmlDeviceGetTotalEccErrors, handle, kind, 0))
    keep(lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle))
    keep(lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(handle))

    last_seen = [0]

    def proc_util() -> None:
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(handle, last_seen[0])
        except nv.NVMLError_NotFound:
            return
        for sample in samples:
            last_seen[0] = max(last_seen[0], sample.timeStamp)

    keep(proc_util)
    return plan


def measure_pynvml(library: str, devices: int, seconds: float) -> dict[str, Any]:
    """µs per reading of every device through pynvml (median of timed batches)."""
    nv = pynvml_open(library)
    if nv is None:
        return {"skipped": "pynvml is not installed (pip install nvidia-ml-py)"}
    count = nv.nvmlDeviceGetCount()
    n = count if devices == 0 else devices
    plans = [_pynvml_plan(nv, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(n)]

    def read_all() -> None:
        for plan in plans:
            for call in plan:
                try:
                    call()
                except nv.NVMLError as exc:
                    if exc.value not in TRANSIENT_CODES:
                        raise

    for _ in range(3):
        read_all()
    t = time.perf_counter_ns()
    read_all()
    one = max(time.perf_counter_ns() - t, 1)
    per_batch = max(1, int(20e6 / one))
    batches: list[float] = []
    end = time.perf_counter() + seconds
    while len(batches) < 5 or (time.perf_counter() < end and len(batches) < 400):
        t = time.perf_counter_ns()
        for _ in range(per_batch):
            read_all()
        batches.append((time.perf_counter_ns() - t) / per_batch)
    nv.nvmlShutdown()
    return {
        "ns_per_read": statistics.median(batches),
        "calls_per_read": sum(len(p) for p in plans),
        "batches": len(batches),
    }


def worker(opts: dict[str, Any]) -> dict[str, Any]:
    """One device count in this (fresh) process: stroboscope at 1 and 10 kHz, then pynvml."""
    library: str = opts["library"]
    fake = ctypes.CDLL(library) if opts["fake"] else None
    gpus = None if opts["devices"] == 0 else list(range(opts["devices"]))
    res: dict[str, Any] = {}
    res["strobo_1k"] = measure_stroboscope(0.001, opts["seconds"], gpus, fake)
    res["strobo_10k"] = measure_stroboscope(0.0001, opts["seconds"], gpus, fake)
    res["pynvml"] = measure_pynvml(library, opts["devices"], opts["pynvml_seconds"])
    return res


# ---- driving ----------------------------------------------------------------------------------


def _run_json(cmd: list[str], env: dict[str, str], what: str) -> dict[str, Any]:
    """Run ``cmd`` and parse the JSON object on the last line of its stdout."""
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}):\n{done.stderr.strip()[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_case(
    label: str,
    library: str,
    devices: int,
    exes: dict[str, Path | None],
    script: Path | None,
    seconds: float,
) -> dict[str, Any]:
    """Floor, inner harness and worker for one (library, device count); the merged results."""
    env = dict(os.environ)
    env.pop("STROBOSCOPE_NVML_LIBRARY", None)
    env.pop("FAKE_NVML_SCRIPT", None)
    if script is not None:
        env["STROBOSCOPE_NVML_LIBRARY"] = library
        env["FAKE_NVML_SCRIPT"] = str(script)
    short = str(min(seconds, 1.0))
    log(f"[{label}] {devices} GPU(s): floor ...")
    floor_exe = exes["floor"]
    assert floor_exe is not None
    res: dict[str, Any] = {"label": label, "devices": devices}
    res["floor"] = _run_json([str(floor_exe), library, str(devices), short], env, "gpu_floor")
    inner_exe = exes["inner"]
    if inner_exe is not None:
        log(f"[{label}] {devices} GPU(s): inner read ...")
        res["inner"] = _run_json([str(inner_exe), str(devices), short], env, "gpu_inner")
    log(f"[{label}] {devices} GPU(s): stroboscope sampler and pynvml ...")
    opts = {
        "library": library,
        "fake": script is not None,
        "devices": devices,
        "seconds": seconds,
        "pynvml_seconds": min(seconds, 1.0),
    }
    me = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(opts)]
    res.update(_run_json(me, env, "the stroboscope/pynvml worker"))
    return res


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least-squares (intercept, slope) of ys over xs; None with fewer than 2 distinct xs."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def _fmt(v: float | None, scale: float = 1.0, digits: int = 0) -> str:
    return "—" if v is None else f"{v / scale:,.{digits}f}"


def _ratio(a: float | None, b: float | None, digits: int = 1) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:,.{digits}f}"


def print_table(results: list[dict[str, Any]]) -> None:
    """The side-by-side table, then per-GPU fits and what the numbers mean."""
    head = (
        "| library | GPUs | readings/s @1 kHz | readings/s @10 kHz asked | tick copy ns "
        "| poll CPU/reading ns @1 kHz | floor paced CPU/read ns | inner read ns tight "
        "| floor ns tight | inner ÷ floor tight | inner read ns paced | floor ns paced "
        "| inner ÷ floor paced | pynvml µs/read | pynvml ÷ floor tight | pynvml ÷ inner tight |"
    )
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    for r in results:
        a, b, fl, py = r["strobo_1k"], r["strobo_10k"], r["floor"], r["pynvml"]
        inner = r.get("inner", {})
        py_ns = py.get("ns_per_read")
        cells = [
            r["label"],
            str(r["devices"]),
            _fmt(a["readings_per_s"]),
            _fmt(b["readings_per_s"]),
            _fmt(a["tick_copy_ns"]),
            _fmt(a["poll_cpu_ns_per_reading"]),
            _fmt(fl["paced_cpu_ns_per_read"]),
            _fmt(inner.get("ns_per_read")),
            _fmt(fl["ns_per_read"]),
            _ratio(inner.get("ns_per_read"), fl["ns_per_read"], 2),
            _fmt(inner.get("paced_read_ns")),
            _fmt(fl["paced_read_ns"]),
            _ratio(inner.get("paced_read_ns"), fl["paced_read_ns"], 2),
            _fmt(py_ns, 1e3, 1),
            _ratio(py_ns, fl["ns_per_read"], 0),
            _ratio(py_ns, inner.get("ns_per_read"), 0),
        ]
        print("| " + " | ".join(cells) + " |")
    skipped = [r["pynvml"]["skipped"] for r in results if "skipped" in r["pynvml"]]
    if skipped:
        print(f"\npynvml: {skipped[0]}")
    print()
    for label in dict.fromkeys(r["label"] for r in results):
        rows = [r for r in results if r["label"] == label]
        xs = [float(r["devices"]) for r in rows]
        series: list[tuple[str, list[Any]]] = [
            ("inner read tight", [r.get("inner", {}).get("ns_per_read") for r in rows]),
            ("floor tight", [r["floor"]["ns_per_read"] for r in rows]),
            ("inner read paced", [r.get("inner", {}).get("paced_read_ns") for r in rows]),
            ("floor paced", [r["floor"]["paced_read_ns"] for r in rows]),
            ("poll CPU/reading @1 kHz", [r["strobo_1k"]["poll_cpu_ns_per_reading"] for r in rows]),
            ("floor paced CPU/read", [r["floor"]["paced_cpu_ns_per_read"] for r in rows]),
            ("pynvml", [r["pynvml"].get("ns_per_read") for r in rows]),
        ]
        for name, ys in series:
            if any(y is None for y in ys):
                continue
            fit = _fit(xs, [float(y) for y in ys])
            if fit:
                print(f"{label}: {name:24s} ~ {fit[0]:8,.0f} ns + {fit[1]:8,.0f} ns per GPU")
        wake = [r["strobo_1k"]["wake_ns_estimate"] for r in rows]
        first = rows[0]
        print(
            f"{label}: one timed sleep + wake-up here ~ {statistics.median(wake):,.0f} ns "
            f"(sampler thread CPU per tick minus its cost per tick)\n"
            f"{label}: the floor makes {first['floor']['calls_per_read'] / first['devices']:.1f} "
            f"NVML calls per GPU per read; unsupported here: "
            f"{', '.join(first['floor']['disabled']) or 'none'}\n"
            f"{label}: readings counted by {first['strobo_1k']['readings_counted_by']}; poll "
            f"thread identified: {all(r['strobo_1k']['poll_thread_identified'] for r in rows)}\n"
            f"{label}: median age of a reading when a 1 kHz row copies it: "
            + ", ".join(_fmt(r["strobo_1k"]["reading_lag_median_ns"], 1e3) + " us" for r in rows)
        )
    print(
        "\ninner read: stroboscope's NvmlSource::read on one thread (tight: back to back; paced: "
        "one per 1 ms,\n  timed around the read), against the floor making the same NVML calls "
        "the same way.\n"
        "poll CPU/reading: the sampler's poll thread's CPU time over the readings it took: the "
        "read, publishing\n  it, and one timed sleep + wake-up; compare 'floor paced CPU/read' "
        "(the floor's calls paced the same way).\n"
        "tick copy: the sampler tick's mean time in the gpu source (copying the latest reading "
        "into the row),\n  not the NVML cost.\n"
        "On the fake library an NVML call costs ~nothing, so these rows measure our overhead "
        "and pynvml's;\non a real GPU the driver's calls dominate every column."
    )


def main(argv: list[str] | None = None) -> int:
    """Build the fake and the floor, run every case, print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", default="1,2,8", help="fake device counts (default 1,2,8)")
    p.add_argument("--seconds", type=float, default=2.0, help="per stroboscope run (default 2)")
    p.add_argument("--real", action="store_true", help=f"also measure the real {REAL_LIBRARY}")
    p.add_argument("--no-fake", action="store_true", help="skip the fake library")
    p.add_argument("--json", type=Path, help="also write every number to this file")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if shutil.which("cc") is None:
        print("gpu_bench: needs a C compiler (cc) for the floor and the fake library")
        return 1
    try:
        import pynvml  # noqa: F401
    except ImportError:
        log("pynvml not installed: its column is skipped (pip install nvidia-ml-py)")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gpu_bench-") as tmp:
        work = Path(tmp)
        exes: dict[str, Path | None] = {
            "floor": compile_floor(work),
            "inner": compile_inner(work),
        }
        if not args.no_fake:
            fake = compile_fake(work)
            for n in (int(x) for x in args.devices.split(",")):
                script = work / f"fake_{n}.txt"
                script.write_text(fake_script(n))
                results.append(run_case("fake", str(fake), n, exes, script, args.seconds))
        if args.real:
            try:
                real = ctypes.CDLL(REAL_LIBRARY)
            except OSError as exc:
                log(f"--real: cannot load {REAL_LIBRARY}: {exc}")
            else:
                count = ctypes.c_uint(0)
                init = getattr(real, "nvmlInit_v2", None) or real.nvmlInit
                get_count = getattr(real, "nvmlDeviceGetCount_v2", None) or real.nvmlDeviceGetCount
                if init() == 0 and get_count(ctypes.byref(count)) == 0 and count.value > 0:
                    real.nvmlShutdown()
                    for n in sorted({1, count.value}):
                        results.append(run_case("real", REAL_LIBRARY, n, exes, None, args.seconds))
                else:
                    log(f"--real: {REAL_LIBRARY} loads but reports no usable GPU")
    if not results:
        return 1
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
