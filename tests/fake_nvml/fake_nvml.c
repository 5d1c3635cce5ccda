/*
 * fake_nvml.c - a scripted stand-in for libnvidia-ml, for tests on machines without a GPU.
 *
 * Build:  cc -shared -fPIC -o libfake_nvml.so fake_nvml.c
 *         cc -shared -fPIC -DFAKE_NVML_OLD -o libfake_nvml_old.so fake_nvml.c   (an old driver)
 * Use:    STROBOSCOPE_NVML_LIBRARY=/path/libfake_nvml.so FAKE_NVML_SCRIPT=/path/scenario.txt
 *
 * It exports the NVML functions stroboscope uses, with C linkage, and declares its own copies of
 * NVML's structs (independently of stroboscope's nvml_api.hpp, so a layout mistake there shows).
 * The FAKE_NVML_OLD build omits every _v2/_v3 symbol, nvmlDeviceGetCurrentClocksEventReasons,
 * nvmlDeviceGetFieldValues and the MIG functions, like a driver from before those existed.
 *
 * The script is read by nvmlInit (the first one after the last nvmlShutdown), so one test
 * process can run many scenarios. No FAKE_NVML_SCRIPT: one GPU with the defaults below.
 *
 * Script format: one directive per line; '#' starts a comment; <dev> is a GPU index; numbers are
 * decimal or 0x-hex; <code> is an NVML return name with or without "NVML_ERROR_"
 * (NOT_SUPPORTED, GPU_IS_LOST, NOT_FOUND, TIMEOUT, ...) or a number.
 *
 *   devices <n>                      number of GPUs (default 1, at most 16)
 *   driver <text>                    nvmlSystemGetDriverVersion (default 550.00.fake)
 *   nvml_version <text>              nvmlSystemGetNVMLVersion (default 12.550.00.fake)
 *   init_error <code>                nvmlInit/nvmlInit_v2 return <code> and do not initialise
 *   name <dev> <text...>             device name (default "Fake GPU <dev>")
 *   uuid <dev> <text>                device UUID (default GPU-00000000-fake-0000-0000-<dev:012>)
 *   set <dev> <key> <v1> [<v2> ...]  the k-th time <key> is served on <dev> it is v_k; the last
 *                                    value repeats. Keys, in NVML's units, with defaults:
 *       util 0, mem_util 0 (%)        nvmlDeviceGetUtilizationRates
 *       mem_total 85899345920, mem_used 1073741824, mem_reserved 0 (bytes),
 *       mem_free (default total - used - reserved)   nvmlDeviceGetMemoryInfo / _v2
 *       temp 40 (C)                   nvmlDeviceGetTemperature
 *       power 100000 (mW)             nvmlDeviceGetPowerUsage, field 186 (POWER_INSTANT)
 *       power_limit 700000 (mW)       nvmlDeviceGetEnforcedPowerLimit, field 190
 *       energy 0 (mJ)                 nvmlDeviceGetTotalEnergyConsumption, field 83
 *       sm_clock 1980, mem_clock 2619, gfx_clock 1980 (MHz)   nvmlDeviceGetClockInfo
 *       fan 30 (%)                    nvmlDeviceGetFanSpeed
 *       clock_reasons 0 (bitmask)     nvmlDeviceGetCurrentClocksEventReasons / ...ThrottleReasons
 *       pcie_tx 0, pcie_rx 0 (bytes)  fields 197 / 198 only
 *       nvlink_tx 0, nvlink_rx 0 (KiB) fields 138 / 139 only, scopeId UINT_MAX (all links) only;
 *                                    NOT_SUPPORTED for any other scope
 *       ecc_corrected 0, ecc_uncorrected 0   nvmlDeviceGetTotalEccErrors, fields 3 / 4
 *   fail <dev> <target> <code> [after <n>]
 *                                    <target> returns <code>; with "after <n>", only once it
 *                                    has succeeded n times. <target> is a key (every way of
 *                                    reading it), a function name (e.g. nvmlDeviceGetFanSpeed;
 *                                    version suffixes share the plain name), "field:<id>" (that
 *                                    entry of nvmlDeviceGetFieldValues) or "samples:<kind>".
 *   cost <dev> <target> <us>         each call of <target> (a function name, version suffix
 *                                    left off, or "field:<id>": per entry of a field-values
 *                                    call) spends <us> of CPU time, like a driver call that
 *                                    busy-waits (on an H200 the energy field took ~2.7 ms)
 *   lost <dev> after <n>             <dev> serves each key n times; the first call that would
 *                                    serve a key an (n+1)-th time returns GPU_IS_LOST, and so
 *                                    does every call to <dev> after it (a GPU lost mid-run).
 *   mig <dev> on [<n>] | mig <dev> off
 *                                    MIG mode (no line: nvmlDeviceGetMigMode is NOT_SUPPORTED).
 *                                    "on" creates n instances (default 1) and makes utilisation,
 *                                    process utilisation and utilisation samples NOT_SUPPORTED.
 *   mig_memory <dev> <instance> <used> <total>   memory of a MIG instance (default 0 / 10 GiB)
 *   process <dev> <pid|self> <bytes> [<sm1> <sm2> ...]
 *                                    a compute process; "self" is the pid of the process that
 *                                    loaded this library. sm values feed
 *                                    nvmlDeviceGetProcessUtilization: the k-th successful call
 *                                    returns one sample per such process with timestamp k*10^6 us
 *                                    and sm v_k (last repeats); a call whose lastSeenTimeStamp is
 *                                    not older than that returns NOT_FOUND.
 *   process_util <dev> <pid|self> <sm>/<mem>/<enc>/<dec> ...
 *                                    like process's sm values, with the memory, encoder and
 *                                    decoder shares too (adds a compute process of 0 bytes when
 *                                    <pid> has none on <dev>)
 *   graphics_process <dev> <pid|self> <bytes>   a graphics process
 *   field_time <dev> <start> <step>  the n-th nvmlDeviceGetFieldValues call (n = 0, 1, ...)
 *                                    stamps its values with timestamp start + n*step (us) and
 *                                    latencyUsec 7; without it the timestamps are 0
 *   energy_clock <dev> <step_us> <mW>[:<us>] ...
 *                                    a counter that moves with CLOCK_MONOTONIC: the power levels
 *                                    (each held <us>, default 1; cycled from mono time 0) are
 *                                    integrated, and the energy counter serves that integral (mJ,
 *                                    floored) at the last multiple of <step_us>; power (unless
 *                                    scripted with set) serves the level at the time of the call
 *   process_info_stride <24|32>      element size the _v3 process functions write (32: the R535
 *                                    drivers that wrote nvmlProcessInfo_v3_t); default 24
 *   samples <dev> <kind> [from <k>] <ts>:<value> ...
 *                                    driver samples for nvmlDeviceGetSamples; kind is power (mW),
 *                                    gpu_util, mem_util, sm_clock or mem_clock. They are visible
 *                                    from the k-th call for that kind on (default 1) and returned
 *                                    when ts > lastSeenTimeStamp (none: NOT_FOUND). A value with
 *                                    a '.' makes that kind's value type DOUBLE, else UNSIGNED_INT.
 *
 * For assertions the library also exports (not NVML):
 *   unsigned long long fake_nvml_calls(unsigned dev, const char* function)  calls so far
 *   unsigned long long fake_nvml_last_seen(unsigned dev)   lastSeenTimeStamp of the latest
 *                                                          nvmlDeviceGetProcessUtilization call
 *   int fake_nvml_init_count(void)                          nvmlInit calls not yet shut down
 *
 * GPM (nvmlGpm*, directives gpm and gpm_metric): see fake_nvml_gpm.c.
 */
#define _GNU_SOURCE /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* NVML is thread-safe, and stroboscope calls it from several threads at once (the gpu source's
 * poll thread, gpu_status() from the caller's): every exported function holds this lock for its
 * whole body (released on return by the cleanup attribute). Recursive: some call others. */
static pthread_mutex_t g_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static void unlock_guard(pthread_mutex_t **m) { pthread_mutex_unlock(*m); }
#define FAKE_LOCK                                                               \
  pthread_mutex_t *fake_guard_ __attribute__((cleanup(unlock_guard))) = &g_lock; \
  pthread_mutex_lock(fake_guard_)

typedef int nvmlReturn_t;
typedef struct fake_device *nvmlDevice_t;

enum {
  SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6,
  INSUFFICIENT_SIZE = 7, GPU_IS_LOST = 15, UNKNOWN = 999
};

/* NVML's structs, declared here for the fake. */
typedef union {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  unsigned short usVal;
} fake_value_t;
typedef struct {
  unsigned int fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  fake_value_t value;
} fake_field_value_t;
typedef struct {
  unsigned long long timeStamp;
  fake_value_t sampleValue;
} fake_sample_t;
typedef struct {
  unsigned int gpu, memory;
} fake_utilization_t;
typedef struct {
  unsigned long long total, free, used;
} fake_memory_t;
typedef struct {
  unsigned int version;
  unsigned long long total, reserved, free, used;
} fake_memory_v2_t;
typedef struct {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
} fake_proc_util_t;

enum { MAX_DEVICES = 16, MAX_VALUES = 64, MAX_PROCS = 64, MAX_SAMPLES = 256, MAX_RULES = 64,
       MAX_MIG = 7, MAX_FIELD_ID = 256, SAMPLE_KINDS = 7, VALUE_TYPE_DOUBLE = 0,
       VALUE_TYPE_UINT = 1, VALUE_TYPE_ULL = 3 };

enum key {
  K_UTIL, K_MEM_UTIL, K_MEM_TOTAL, K_MEM_USED, K_MEM_FREE, K_MEM_RESERVED, K_TEMP, K_POWER,
  K_POWER_LIMIT, K_ENERGY, K_SM_CLOCK, K_MEM_CLOCK, K_GFX_CLOCK, K_FAN, K_CLOCK_REASONS,
  K_PCIE_TX, K_PCIE_RX, K_ECC_CORRECTED, K_ECC_UNCORRECTED, K_NVLINK_TX, K_NVLINK_RX, K_COUNT
};
static const char *const key_names[K_COUNT] = {
    "util", "mem_util", "mem_total", "mem_used", "mem_free", "mem_reserved", "temp", "power",
    "power_limit", "energy", "sm_clock", "mem_clock", "gfx_clock", "fan", "clock_reasons",
    "pcie_tx", "pcie_rx", "ecc_corrected", "ecc_uncorrected", "nvlink_tx", "nvlink_rx"};
static const unsigned long long key_defaults[K_COUNT] = {
    0, 0, 85899345920ULL, 1073741824ULL, 0, 0, 40, 100000, 700000, 0, 1980, 2619, 1980, 30, 0,
    0, 0, 0, 0, 0, 0};

enum fn {
  F_NAME, F_UUID, F_MEMORY, F_MEMORY_V2, F_UTIL, F_TEMP, F_POWER, F_POWER_LIMIT, F_ENERGY,
  F_CLOCK, F_FAN, F_EVENT_REASONS, F_THROTTLE_REASONS, F_ECC, F_FIELD_VALUES, F_COMPUTE_PROCS,
  F_GRAPHICS_PROCS, F_PROC_UTIL, F_SAMPLES, F_MIG_MODE, F_MAX_MIG, F_MIG_HANDLE, F_GPM_SUPPORT,
  F_GPM_SAMPLE_GET, F_GPM_METRICS_GET, F_COUNT
};
static const char *const fn_names[F_COUNT] = {
    "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetClockInfo", "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetSamples", "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleGet", "nvmlGpmMetricsGet"};

/* Sampling types by nvmlSamplingType_t value; empty names are kinds the fake does not serve. */
static const char *const sample_kind_names[SAMPLE_KINDS] = {"power", "gpu_util", "mem_util", "",
                                                            "",      "sm_clock", "mem_clock"};

enum rule_kind { R_KEY, R_FN, R_FIELD, R_SAMPLES };
struct rule {
  int dev, kind, id, code;
  unsigned long long after;
};

struct process {
  unsigned pid;
  unsigned long long bytes;
  int graphics;
  unsigned nsm;
  unsigned sm[MAX_VALUES], mem[MAX_VALUES], enc[MAX_VALUES], dec[MAX_VALUES];
};

struct sample {
  unsigned long long ts, from;
  double value;
};

struct fake_mig {
  int dev, index;
  unsigned long long used, total;
};

struct fake_device {
  int index;
  char name[96], uuid[96];
  unsigned nvalues[K_COUNT];
  unsigned long long values[K_COUNT][MAX_VALUES];
  unsigned long long served[K_COUNT];
  unsigned long long calls[F_COUNT];
  unsigned long long field_requests[MAX_FIELD_ID];
  int lost;
  long long lost_after; /* -1: never */
  int mig_state;        /* -1: unsupported, 0: off, 1: on */
  int mig_count;
  struct fake_mig mig[MAX_MIG];
  unsigned nsamples[SAMPLE_KINDS];
  struct sample samples[SAMPLE_KINDS][MAX_SAMPLES];
  int sample_double[SAMPLE_KINDS];
  unsigned long long sample_calls[SAMPLE_KINDS];
  unsigned long long proc_util_served, last_seen_arg;
  unsigned long long field_time_start, field_time_step, field_calls;
  /* energy_clock: power levels (mW, each held level_us; cycled) and the counter's step (us). */
  unsigned long long energy_step_us, nlevels, cycle_us;
  unsigned long long level_mw[MAX_VALUES], level_us[MAX_VALUES];
};

static struct {
  int init_count;
  int init_error;
  int device_count;
  int stride;
  char driver[80], nvml[80];
  struct fake_device dev[MAX_DEVICES];
  struct process procs[MAX_DEVICES][MAX_PROCS];
  int nprocs_dev[MAX_DEVICES];
  int nrules;
  struct rule rules[MAX_RULES];
  int ncosts;
  struct rule costs[MAX_RULES]; /* "cost" directives: code holds the microseconds */
} g;

static int parse_ull(const char *s, unsigned long long *out);
static struct fake_device *device_of(nvmlDevice_t h);
static int begin(struct fake_device *d, int fn);

#include "fake_nvml_gpm.c" /* GPM: directives gpm, gpm_metric; the nvmlGpm* functions */

/* ---- script ------------------------------------------------------------------------------ */

static int parse_code(const char *s) {
  static const struct { const char *name; int code; } codes[] = {
      {"SUCCESS", 0}, {"UNINITIALIZED", 1}, {"INVALID_ARGUMENT", 2}, {"NOT_SUPPORTED", 3},
      {"NO_PERMISSION", 4}, {"ALREADY_INITIALIZED", 5}, {"NOT_FOUND", 6},
      {"INSUFFICIENT_SIZE", 7}, {"INSUFFICIENT_POWER", 8}, {"DRIVER_NOT_LOADED", 9},
      {"TIMEOUT", 10}, {"IRQ_ISSUE", 11}, {"LIBRARY_NOT_FOUND", 12}, {"FUNCTION_NOT_FOUND", 13},
      {"CORRUPTED_INFOROM", 14}, {"GPU_IS_LOST", 15}, {"RESET_REQUIRED", 16},
      {"OPERATING_SYSTEM", 17}, {"LIB_RM_VERSION_MISMATCH", 18}, {"IN_USE", 19}, {"MEMORY", 20},
      {"NO_DATA", 21}, {"ARGUMENT_VERSION_MISMATCH", 25}, {"NOT_READY", 27}, {"UNKNOWN", 999}};
  if (strncmp(s, "NVML_ERROR_", 11) == 0) s += 11;
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; ++i) {
    if (strcmp(s, codes[i].name) == 0) return codes[i].code;
  }
  char *end = NULL;
  long v = strtol(s, &end, 0);
  return (end != s && *end == '\0') ? (int)v : -1;
}

static int find_name(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; ++i) {
    if (names[i][0] != '\0' && strcmp(s, names[i]) == 0) return i;
  }
  return -1;
}

static int parse_ull(const char *s, unsigned long long *out) {
  char *end = NULL;
  if (s == NULL) return 0;
  *out = strtoull(s, &end, 0);
  return end != s && *end == '\0';
}

static int parse_dev(const char *s) {
  unsigned long long d;
  if (!parse_ull(s, &d) || d >= MAX_DEVICES) return -1;
  return (int)d;
}

/* Parses one line (already without comment); returns an error message or NULL. */
static const char *parse_line(char *line) {
  char *save = NULL;
  char *cmd = strtok_r(line, " \t\r\n", &save);
  if (cmd == NULL) return NULL;
  char *a1 = strtok_r(NULL, " \t\r\n", &save);
  unsigned long long n;
  if (strcmp(cmd, "devices") == 0) {
    if (!parse_ull(a1, &n) || n > MAX_DEVICES) return "devices needs a count of 0..16";
    g.device_count = (int)n;
    return NULL;
  }
  if (strcmp(cmd, "driver") == 0 || strcmp(cmd, "nvml_version") == 0) {
    if (a1 == NULL) return "a version text is missing";
    snprintf(strcmp(cmd, "driver") == 0 ? g.driver : g.nvml, 80, "%s", a1);
    return NULL;
  }
  if (strcmp(cmd, "init_error") == 0) {
    if (a1 == NULL || (g.init_error = parse_code(a1)) < 0) return "init_error needs a code";
    return NULL;
  }
  if (strcmp(cmd, "process_info_stride") == 0) {
    if (!parse_ull(a1, &n) || (n != 24 && n != 32)) return "process_info_stride is 24 or 32";
    g.stride = (int)n;
    return NULL;
  }
  int d = parse_dev(a1);
  if (d < 0) return "a device index 0..15 is expected after the directive";
  struct fake_device *dv = &g.dev[d];
  char *a2 = strtok_r(NULL, " \t\r\n", &save);
  const char *gpm_error = gpm_parse(cmd, d, a2, &save);
  if (gpm_error == NULL || gpm_error[0] != '\0') return gpm_error;
  if (strcmp(cmd, "name") == 0 || strcmp(cmd, "uuid") == 0) {
    if (a2 == NULL) return "a name or uuid text is missing";
    char *rest = save != NULL ? save : "";
    char buf[96];
    if (strcmp(cmd, "name") == 0 && rest[0] != '\0') {
      snprintf(buf, sizeof buf, "%s %s", a2, rest);
      buf[strcspn(buf, "\r\n")] = '\0';
    } else {
      snprintf(buf, sizeof buf, "%s", a2);
    }
    memcpy(strcmp(cmd, "name") == 0 ? dv->name : dv->uuid, buf, sizeof buf);
    return NULL;
  }
  if (strcmp(cmd, "set") == 0) {
    int k = a2 ? find_name(a2, key_names, K_COUNT) : -1;
    if (k < 0) return "unknown key for set";
    dv->nvalues[k] = 0;
    for (char *v; (v = strtok_r(NULL, " \t\r\n", &save)) != NULL;) {
      if (dv->nvalues[k] == MAX_VALUES) return "more than 64 values";
      if (!parse_ull(v, &dv->values[k][dv->nvalues[k]])) return "a value is not a number";
      dv->nvalues[k]++;
    }
    return dv->nvalues[k] == 0 ? "set needs at least one value" : NULL;
  }
  if (strcmp(cmd, "fail") == 0) {
    char *c = strtok_r(NULL, " \t\r\n", &save);
    char *after = strtok_r(NULL, " \t\r\n", &save);
    struct rule r = {d, R_KEY, -1, c ? parse_code(c) : -1, 0};
    if (a2 == NULL || r.code < 0) return "fail needs a target and a code";
    if (after != NULL) {
      if (strcmp(after, "after") != 0 || !parse_ull(strtok_r(NULL, " \t\r\n", &save), &r.after)) {
        return "expected: after <n>";
      }
    }
    if ((r.id = find_name(a2, key_names, K_COUNT)) >= 0) {
      r.kind = R_KEY;
    } else if (strncmp(a2, "field:", 6) == 0 && parse_ull(a2 + 6, &n) && n < MAX_FIELD_ID) {
      r.kind = R_FIELD, r.id = (int)n;
    } else if (strncmp(a2, "samples:", 8) == 0 &&
               (r.id = find_name(a2 + 8, sample_kind_names, SAMPLE_KINDS)) >= 0) {
      r.kind = R_SAMPLES;
    } else {
      char plain[96];
      snprintf(plain, sizeof plain, "%s", a2);
      char *v = strstr(plain, "_v");
      if (v != NULL && strcmp(plain, "nvmlDeviceGetMemoryInfo_v2") != 0) *v = '\0';
      if ((r.id = find_name(plain, fn_names, F_COUNT)) < 0) return "unknown fail target";
      r.kind = R_FN;
    }
    if (g.nrules == MAX_RULES) return "too many fail rules";
    g.rules[g.nrules++] = r;
    return NULL;
  }
  if (strcmp(cmd, "cost") == 0) {
    char *us = strtok_r(NULL, " \t\r\n", &save);
    struct rule r = {d, R_FN, -1, 0, 0};
    if (a2 == NULL || us == NULL || !parse_ull(us, &n) || n > 1000000) {
      return "expected: cost <dev> <function|field:id> <us>";
    }
    r.code = (int)n;
    if (strncmp(a2, "field:", 6) == 0 && parse_ull(a2 + 6, &n) && n < MAX_FIELD_ID) {
      r.kind = R_FIELD, r.id = (int)n;
    } else if ((r.id = find_name(a2, fn_names, F_COUNT)) < 0) {
      return "unknown cost target (a function name without its version suffix, or field:<id>)";
    }
    if (g.ncosts == MAX_RULES) return "too many cost rules";
    g.costs[g.ncosts++] = r;
    return NULL;
  }
  if (strcmp(cmd, "lost") == 0) {
    if (a2 == NULL || strcmp(a2, "after") != 0 ||
        !parse_ull(strtok_r(NULL, " \t\r\n", &save), &n)) {
      return "expected: lost <dev> after <n>";
    }
    dv->lost_after = (long long)n;
    return NULL;
  }
  if (strcmp(cmd, "mig") == 0) {
    if (a2 != NULL && strcmp(a2, "off") == 0) {
      dv->mig_state = 0;
      dv->mig_count = 0;
      return NULL;
    }
    if (a2 == NULL || strcmp(a2, "on") != 0) return "expected: mig <dev> on [n] | off";
    char *cnt = strtok_r(NULL, " \t\r\n", &save);
    n = 1;
    if (cnt != NULL && (!parse_ull(cnt, &n) || n < 1 || n > MAX_MIG)) return "1..7 MIG instances";
    dv->mig_state = 1;
    dv->mig_count = (int)n;
    return NULL;
  }
  if (strcmp(cmd, "mig_memory") == 0) {
    unsigned long long j, used, total;
    if (!parse_ull(a2, &j) || j >= MAX_MIG ||
        !parse_ull(strtok_r(NULL, " \t\r\n", &save), &used) ||
        !parse_ull(strtok_r(NULL, " \t\r\n", &save), &total)) {
      return "expected: mig_memory <dev> <instance> <used> <total>";
    }
    dv->mig[j].used = used;
    dv->mig[j].total = total;
    return NULL;
  }
  if (strcmp(cmd, "process") == 0 || strcmp(cmd, "graphics_process") == 0) {
    if (g.nprocs_dev[d] == MAX_PROCS) return "too many processes";
    struct process *p = &g.procs[d][g.nprocs_dev[d]];
    memset(p, 0, sizeof *p);
    p->graphics = strcmp(cmd, "graphics_process") == 0;
    if (a2 != NULL && strcmp(a2, "self") == 0) {
      p->pid = (unsigned)getpid();
    } else if (parse_ull(a2, &n)) {
      p->pid = (unsigned)n;
    } else {
      return "a pid or 'self' is expected";
    }
    if (!parse_ull(strtok_r(NULL, " \t\r\n", &save), &p->bytes)) return "a byte count is expected";
    for (char *v; (v = strtok_r(NULL, " \t\r\n", &save)) != NULL;) {
      if (p->graphics || p->nsm == MAX_VALUES || !parse_ull(v, &n)) return "bad sm values";
      p->sm[p->nsm++] = (unsigned)n;
    }
    g.nprocs_dev[d]++;
    return NULL;
  }
  if (strcmp(cmd, "energy_clock") == 0) {
    if (!parse_ull(a2, &dv->energy_step_us) || dv->energy_step_us == 0) {
      return "expected: energy_clock <dev> <step_us> <mW>[:<us>] ...";
    }
    dv->nlevels = dv->cycle_us = 0;
    for (char *v; (v = strtok_r(NULL, " \t\r\n", &save)) != NULL;) {
      if (dv->nlevels == MAX_VALUES) return "more than 64 power levels";
      char *colon = strchr(v, ':');
      unsigned long long us = 1;
      if (colon != NULL) *colon = '\0';
      if (!parse_ull(v, &dv->level_mw[dv->nlevels]) ||
          (colon != NULL && (!parse_ull(colon + 1, &us) || us == 0))) {
        return "a power level is <mW> or <mW>:<us> (us > 0)";
      }
      dv->level_us[dv->nlevels++] = us;
      dv->cycle_us += us;
    }
    return dv->nlevels == 0 ? "energy_clock needs at least one power level" : NULL;
  }
  if (strcmp(cmd, "field_time") == 0) {
    if (!parse_ull(a2, &dv->field_time_start) ||
        !parse_ull(strtok_r(NULL, " \t\r\n", &save), &dv->field_time_step)) {
      return "expected: field_time <dev> <start> <step>";
    }
    return NULL;
  }
  if (strcmp(cmd, "process_util") == 0) {
    unsigned pid;
    if (a2 != NULL && strcmp(a2, "self") == 0) {
      pid = (unsigned)getpid();
    } else if (parse_ull(a2, &n)) {
      pid = (unsigned)n;
    } else {
      return "a pid or 'self' is expected";
    }
    struct process *p = NULL;
    for (int i = 0; i < g.nprocs_dev[d]; ++i) {
      if (g.procs[d][i].pid == pid && !g.procs[d][i].graphics) p = &g.procs[d][i];
    }
    if (p == NULL) {
      if (g.nprocs_dev[d] == MAX_PROCS) return "too many processes";
      p = &g.procs[d][g.nprocs_dev[d]++];
      memset(p, 0, sizeof *p);
      p->pid = pid;
    }
    p->nsm = 0;
    for (char *v; (v = strtok_r(NULL, " \t\r\n", &save)) != NULL;) {
      unsigned q[4];
      if (p->nsm == MAX_VALUES || sscanf(v, "%u/%u/%u/%u", &q[0], &q[1], &q[2], &q[3]) != 4) {
        return "expected <sm>/<mem>/<enc>/<dec>";
      }
      p->sm[p->nsm] = q[0], p->mem[p->nsm] = q[1], p->enc[p->nsm] = q[2], p->dec[p->nsm] = q[3];
      p->nsm++;
    }
    return p->nsm == 0 ? "process_util needs at least one sample" : NULL;
  }
  if (strcmp(cmd, "samples") == 0) {
    int k = a2 ? find_name(a2, sample_kind_names, SAMPLE_KINDS) : -1;
    if (k < 0) return "unknown sample kind";
    unsigned long long from = 1;
    for (char *v; (v = strtok_r(NULL, " \t\r\n", &save)) != NULL;) {
      if (strcmp(v, "from") == 0) {
        if (!parse_ull(strtok_r(NULL, " \t\r\n", &save), &from)) return "from needs a number";
        continue;
      }
      char *colon = strchr(v, ':');
      if (colon == NULL || dv->nsamples[k] == MAX_SAMPLES) return "expected <ts>:<value>";
      *colon = '\0';
      struct sample *s = &dv->samples[k][dv->nsamples[k]];
      char *end = NULL;
      if (!parse_ull(v, &s->ts)) return "a sample timestamp is not a number";
      s->value = strtod(colon + 1, &end);
      if (end == colon + 1 || *end != '\0') return "a sample value is not a number";
      if (strchr(colon + 1, '.') != NULL) dv->sample_double[k] = 1;
      s->from = from;
      dv->nsamples[k]++;
    }
    return NULL;
  }
  return "unknown directive";
}

static void reset(void) {
  int count = g.init_count;
  memset(&g, 0, sizeof g);
  gpm_reset();
  g.init_count = count;
  g.device_count = 1;
  g.stride = 24;
  snprintf(g.driver, sizeof g.driver, "550.00.fake");
  snprintf(g.nvml, sizeof g.nvml, "12.550.00.fake");
  for (int d = 0; d < MAX_DEVICES; ++d) {
    struct fake_device *dv = &g.dev[d];
    dv->index = d;
    snprintf(dv->name, sizeof dv->name, "Fake GPU %d", d);
    snprintf(dv->uuid, sizeof dv->uuid, "GPU-00000000-fake-0000-0000-%012d", d);
    dv->lost_after = -1;
    dv->mig_state = -1;
    for (int j = 0; j < MAX_MIG; ++j) {
      dv->mig[j].dev = d;
      dv->mig[j].index = j;
      dv->mig[j].total = 10737418240ULL;
    }
  }
}

/* Loads the scenario; returns 0 or prints why not and returns -1. */
static int load_script(void) {
  reset();
  const char *path = getenv("FAKE_NVML_SCRIPT");
  if (path == NULL || path[0] == '\0') return 0;
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "fake_nvml: cannot open FAKE_NVML_SCRIPT %s\n", path);
    return -1;
  }
  char line[4096];
  int lineno = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    ++lineno;
    line[strcspn(line, "#")] = '\0';
    const char *err = parse_line(line);
    if (err != NULL) {
      fprintf(stderr, "fake_nvml: %s:%d: %s\n", path, lineno, err);
      fclose(f);
      return -1;
    }
  }
  fclose(f);
  return 0;
}

/* ---- serving ----------------------------------------------------------------------------- */

static struct fake_device *device_of(nvmlDevice_t h) {
  for (int d = 0; d < g.device_count; ++d) {
    if (h == &g.dev[d]) return &g.dev[d];
  }
  return NULL;
}

static struct fake_mig *mig_of(nvmlDevice_t h) {
  for (int d = 0; d < g.device_count; ++d) {
    for (int j = 0; j < g.dev[d].mig_count; ++j) {
      if ((void *)h == (void *)&g.dev[d].mig[j]) return &g.dev[d].mig[j];
    }
  }
  return NULL;
}

static int rule_code(int dev, int kind, int id, unsigned long long count) {
  for (int i = 0; i < g.nrules; ++i) {
    const struct rule *r = &g.rules[i];
    if (r->dev == dev && r->kind == kind && r->id == id && count >= r->after) return r->code;
  }
  return 0;
}

/* "cost": the CPU time a call (or one field of a field-values call) spends, spinning on
   CLOCK_THREAD_CPUTIME_ID as a driver that busy-waits would (preemption does not shorten it). */
static void spend(int dev, int kind, int id) {
  for (int i = 0; i < g.ncosts; ++i) {
    const struct rule *r = &g.costs[i];
    if (r->dev != dev || r->kind != kind || r->id != id) continue;
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    const long long until = (long long)t0.tv_sec * 1000000000LL + t0.tv_nsec + r->code * 1000LL;
    do {
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((long long)t.tv_sec * 1000000000LL + t.tv_nsec < until);
  }
}

/* Every device function starts here: counts the call, then applies "lost" and function rules. */
static int begin(struct fake_device *d, int fn) {
  if (g.init_count == 0) return UNINITIALIZED;
  if (d == NULL) return INVALID_ARGUMENT;
  spend(d->index, R_FN, fn);
  unsigned long long c = ++d->calls[fn];
  if (d->lost) return GPU_IS_LOST;
  return rule_code(d->index, R_FN, fn, c - 1);
}

/* Whether serving `k` now would find the GPU lost (and marks it so). */
static int lost_at(struct fake_device *d, int k) {
  if (d->lost_after >= 0 && d->served[k] >= (unsigned long long)d->lost_after) d->lost = 1;
  return d->lost;
}

/* The code a serving of `k` returns now: GPU_IS_LOST, a "fail" rule's code, or 0. */
static int key_code(struct fake_device *d, int k) {
  if (lost_at(d, k)) return GPU_IS_LOST;
  return rule_code(d->index, R_KEY, k, d->served[k]);
}

/* energy_clock: the energy (mW*us) the cycled power levels deliver in [0, t_us], and the
   level (mW) at t_us. */
static unsigned long long clock_energy(const struct fake_device *d, unsigned long long t_us,
                                       unsigned long long *level_mw) {
  unsigned long long whole = 0, cycle = 0, in = t_us % d->cycle_us;
  for (unsigned i = 0; i < d->nlevels; ++i) cycle += d->level_mw[i] * d->level_us[i];
  whole = (t_us / d->cycle_us) * cycle;
  for (unsigned i = 0; i < d->nlevels; ++i) {
    unsigned long long part = in < d->level_us[i] ? in : d->level_us[i];
    whole += d->level_mw[i] * part;
    if (in < d->level_us[i]) {
      *level_mw = d->level_mw[i];
      break;
    }
    in -= d->level_us[i];
  }
  return whole;
}

/* The value of `k` for this serving: the k-th scripted value (the last repeats) or the default;
   with energy_clock, the energy counter (mJ) at the last step on CLOCK_MONOTONIC and (unless
   scripted with set) the power level now. */
static unsigned long long serve(struct fake_device *d, int k) {
  unsigned long long i = d->served[k]++;
  if (d->energy_step_us != 0 && (k == K_ENERGY || (k == K_POWER && d->nvalues[k] == 0))) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long now_us = (unsigned long long)ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
    unsigned long long level = 0;
    if (k == K_POWER) return (clock_energy(d, now_us, &level), level);
    unsigned long long step = now_us / d->energy_step_us * d->energy_step_us;
    return clock_energy(d, step, &level) / 1000000ULL;
  }
  if (d->nvalues[k] == 0) return key_defaults[k];
  return d->values[k][i < d->nvalues[k] ? i : d->nvalues[k] - 1];
}

/* Serves a function that reads one key into an unsigned int or unsigned long long. */
static int serve_one(nvmlDevice_t h, int fn, int k, unsigned int *ui, unsigned long long *ull) {
  struct fake_device *d = device_of(h);
  int rc = begin(d, fn);
  if (rc != 0) return rc;
  if (ui == NULL && ull == NULL) return INVALID_ARGUMENT;
  if ((rc = key_code(d, k)) != 0) return rc;
  unsigned long long v = serve(d, k);
  if (ui != NULL) *ui = (unsigned int)v;
  if (ull != NULL) *ull = v;
  return SUCCESS;
}

/* ---- the NVML API ------------------------------------------------------------------------ */

static nvmlReturn_t do_init(void) {
  if (g.init_count > 0) {
    g.init_count++;
    return SUCCESS;
  }
  if (load_script() != 0) return UNKNOWN;
  if (g.init_error != 0) return g.init_error;
  g.init_count = 1;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit(void) { FAKE_LOCK; return do_init(); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
  FAKE_LOCK;
  if (g.init_count == 0) return UNINITIALIZED;
  g.init_count--;
  return SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t rc) {
  FAKE_LOCK;
  switch (rc) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
  }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
  FAKE_LOCK;
  if (g.init_count == 0) return UNINITIALIZED;
  if (buf == NULL || len < strlen(g.driver) + 1) return INSUFFICIENT_SIZE;
  memcpy(buf, g.driver, strlen(g.driver) + 1);
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned int len) {
  FAKE_LOCK;
  if (g.init_count == 0) return UNINITIALIZED;
  if (buf == NULL || len < strlen(g.nvml) + 1) return INSUFFICIENT_SIZE;
  memcpy(buf, g.nvml, strlen(g.nvml) + 1);
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) {
  FAKE_LOCK;
  if (g.init_count == 0) return UNINITIALIZED;
  if (count == NULL) return INVALID_ARGUMENT;
  *count = (unsigned)g.device_count;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
  FAKE_LOCK;
  if (g.init_count == 0) return UNINITIALIZED;
  if (device == NULL || index >= (unsigned)g.device_count) return INVALID_ARGUMENT;
  *device = &g.dev[index];
  return SUCCESS;
}

static nvmlReturn_t copy_text(nvmlDevice_t h, int fn, char *buf, unsigned len) {
  const char *text = NULL;
  char mig_uuid[96];
  struct fake_mig *m = mig_of(h);
  int rc = begin(m != NULL ? &g.dev[m->dev] : device_of(h), fn);
  if (rc != 0) return rc;
  if (m != NULL) {
    snprintf(mig_uuid, sizeof mig_uuid, "MIG-00000000-fake-%04d-0000-%012d", m->dev, m->index);
    text = fn == F_UUID ? mig_uuid : g.dev[m->dev].name;
  } else {
    text = fn == F_UUID ? device_of(h)->uuid : device_of(h)->name;
  }
  if (buf == NULL || len < strlen(text) + 1) return INSUFFICIENT_SIZE;
  memcpy(buf, text, strlen(text) + 1);
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *buf, unsigned int len) {
  FAKE_LOCK;
  return copy_text(h, F_NAME, buf, len);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *buf, unsigned int len) {
  FAKE_LOCK;
  return copy_text(h, F_UUID, buf, len);
}

/* Memory of a device or a MIG instance: total, reserved, free, used. */
static nvmlReturn_t memory(nvmlDevice_t h, int fn, unsigned long long out[4]) {
  struct fake_mig *m = mig_of(h);
  int rc = begin(m != NULL ? &g.dev[m->dev] : device_of(h), fn);
  if (rc != 0) return rc;
  if (m != NULL) {
    out[0] = m->total, out[1] = 0, out[2] = m->total - m->used, out[3] = m->used;
    return SUCCESS;
  }
  struct fake_device *d = device_of(h);
  static const int keys[] = {K_MEM_TOTAL, K_MEM_RESERVED, K_MEM_USED, K_MEM_FREE};
  for (int i = 0; i < 4; ++i) {
    if ((rc = key_code(d, keys[i])) != 0) return rc;
  }
  out[0] = serve(d, K_MEM_TOTAL);
  out[1] = serve(d, K_MEM_RESERVED);
  out[3] = serve(d, K_MEM_USED);
  out[2] = serve(d, K_MEM_FREE);
  if (d->nvalues[K_MEM_FREE] == 0) { /* default: total - used - reserved */
    out[2] = out[0] > out[3] + out[1] ? out[0] - out[3] - out[1] : 0;
  }
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, fake_memory_t *mem) {
  FAKE_LOCK;
  unsigned long long v[4];
  if (mem == NULL) return INVALID_ARGUMENT;
  int rc = memory(h, F_MEMORY, v);
  if (rc != 0) return rc;
  mem->total = v[0], mem->free = v[2], mem->used = v[3];
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, fake_utilization_t *u) {
  FAKE_LOCK;
  struct fake_device *d = device_of(h);
  int rc = begin(d, F_UTIL);
  if (rc != 0) return rc;
  if (u == NULL) return INVALID_ARGUMENT;
  if (d->mig_state == 1) return NOT_SUPPORTED;
  if ((rc = key_code(d, K_UTIL)) != 0 || (rc = key_code(d, K_MEM_UTIL)) != 0) return rc;
  u->gpu = (unsigned)serve(d, K_UTIL);
  u->memory = (unsigned)serve(d, K_MEM_UTIL);
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned int *t) {
  FAKE_LOCK;
  if (sensor != 0) return INVALID_ARGUMENT;
  return serve_one(h, F_TEMP, K_TEMP, t, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *mw) {
  FAKE_LOCK;
  return serve_one(h, F_POWER, K_POWER, mw, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned int *mw) {
  FAKE_LOCK;
  return serve_one(h, F_POWER_LIMIT, K_POWER_LIMIT, mw, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h, unsigned long long *mj) {
  FAKE_LOCK;
  return serve_one(h, F_ENERGY, K_ENERGY, NULL, mj);
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned int *mhz) {
  FAKE_LOCK;
  int k = type == 0 ? K_GFX_CLOCK : type == 1 ? K_SM_CLOCK : type == 2 ? K_MEM_CLOCK : -1;
  if (k < 0) return INVALID_ARGUMENT;
  return serve_one(h, F_CLOCK, k, mhz, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t h, unsigned int *pct) {
  FAKE_LOCK;
  return serve_one(h, F_FAN, K_FAN, pct, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h,
                                                              unsigned long long *bits) {
  FAKE_LOCK;
  return serve_one(h, F_THROTTLE_REASONS, K_CLOCK_REASONS, NULL, bits);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int error_type, int counter_type,
                                                unsigned long long *count) {
  FAKE_LOCK;
  if (counter_type != 0 && counter_type != 1) return INVALID_ARGUMENT;
  int k = error_type == 0 ? K_ECC_CORRECTED : error_type == 1 ? K_ECC_UNCORRECTED : -1;
  if (k < 0) return INVALID_ARGUMENT;
  return serve_one(h, F_ECC, k, NULL, count);
}

/* Process lists: element layout by version (1: 16 bytes; 2: 24; 3: 24 or the scripted stride). */
static nvmlReturn_t processes(nvmlDevice_t h, int fn, int graphics, int version, unsigned *count,
                              void *infos) {
  struct fake_device *d = device_of(h);
  int rc = begin(d, fn);
  if (rc != 0) return rc;
  if (count == NULL) return INVALID_ARGUMENT;
  unsigned n = 0;
  for (int i = 0; i < g.nprocs_dev[d->index]; ++i) n += g.procs[d->index][i].graphics == graphics;
  if (*count < n || (infos == NULL && n > 0)) {
    *count = n;
    return INSUFFICIENT_SIZE;
  }
  size_t stride = version == 1 ? 16 : version == 2 ? 24 : (size_t)g.stride;
  unsigned char *out = infos;
  unsigned w = 0;
  for (int i = 0; i < g.nprocs_dev[d->index]; ++i) {
    const struct process *p = &g.procs[d->index][i];
    if (p->graphics != graphics) continue;
    unsigned char *e = out + w++ * stride;
    unsigned instance = d->mig_state == 1 ? 0u : 0xFFFFFFFFu;
    unsigned long long cc = 0;
    memset(e, 0, stride);
    memcpy(e, &p->pid, sizeof p->pid);
    memcpy(e + 8, &p->bytes, sizeof p->bytes);
    if (stride >= 24) {
      memcpy(e + 16, &instance, sizeof instance);
      memcpy(e + 20, &instance, sizeof instance);
    }
    if (stride == 32) memcpy(e + 24, &cc, sizeof cc);
  }
  *count = n;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned *c, void *p) {
  FAKE_LOCK;
  return processes(h, F_COMPUTE_PROCS, 0, 1, c, p);
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t h, unsigned *c, void *p) {
  FAKE_LOCK;
  return processes(h, F_GRAPHICS_PROCS, 1, 1, c, p);
}

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, fake_proc_util_t *util,
                                                    unsigned int *count,
                                                    unsigned long long last_seen) {
  FAKE_LOCK;
  struct fake_device *d = device_of(h);
  int rc = begin(d, F_PROC_UTIL);
  if (rc != 0) return rc;
  if (count == NULL) return INVALID_ARGUMENT;
  d->last_seen_arg = last_seen;
  if (d->mig_state == 1) return NOT_SUPPORTED;
  unsigned long long k = d->proc_util_served + 1;
  unsigned long long ts = k * 1000000ULL;
  unsigned n = 0;
  for (int i = 0; i < g.nprocs_dev[d->index]; ++i) n += g.procs[d->index][i].nsm > 0;
  if (n == 0 || ts <= last_seen) {
    *count = 0;
    return NOT_FOUND;
  }
  if (util == NULL || *count < n) {
    *count = n;
    return INSUFFICIENT_SIZE;
  }
  unsigned w = 0;
  for (int i = 0; i < g.nprocs_dev[d->index]; ++i) {
    const struct process *p = &g.procs[d->index][i];
    if (p->nsm == 0) continue;
    unsigned j = (unsigned)(k - 1 < p->nsm ? k - 1 : p->nsm - 1);
    fake_proc_util_t s = {p->pid, ts, p->sm[j], p->mem[j], p->enc[j], p->dec[j]};
    util[w++] = s;
  }
  *count = n;
  d->proc_util_served = k;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t h, int type, unsigned long long last_seen,
                                         int *value_type, unsigned int *count,
                                         fake_sample_t *samples) {
  FAKE_LOCK;
  struct fake_device *d = device_of(h);
  int rc = begin(d, F_SAMPLES);
  if (rc != 0) return rc;
  if (type < 0 || type >= SAMPLE_KINDS || sample_kind_names[type][0] == '\0') {
    return NOT_SUPPORTED;
  }
  if (value_type == NULL || count == NULL) return INVALID_ARGUMENT;
  unsigned long long call = ++d->sample_calls[type];
  if ((rc = rule_code(d->index, R_SAMPLES, type, call - 1)) != 0) return rc;
  if (d->mig_state == 1 && (type == 1 || type == 2)) return NOT_SUPPORTED;
  *value_type = d->sample_double[type] ? VALUE_TYPE_DOUBLE : VALUE_TYPE_UINT;
  unsigned n = 0;
  for (unsigned i = 0; i < d->nsamples[type]; ++i) {
    const struct sample *s = &d->samples[type][i];
    n += s->from <= call && s->ts > last_seen;
  }
  if (n == 0) {
    *count = 0;
    return NOT_FOUND;
  }
  if (samples == NULL || *count < n) {
    *count = n;
    return samples == NULL ? SUCCESS : INSUFFICIENT_SIZE;
  }
  unsigned w = 0;
  for (unsigned i = 0; i < d->nsamples[type]; ++i) {
    const struct sample *s = &d->samples[type][i];
    if (!(s->from <= call && s->ts > last_seen)) continue;
    samples[w].timeStamp = s->ts;
    if (d->sample_double[type]) {
      samples[w].sampleValue.dVal = s->value;
    } else {
      samples[w].sampleValue.ullVal = 0;
      samples[w].sampleValue.uiVal = (unsigned)s->value;
    }
    ++w;
  }
  *count = n;
  return SUCCESS;
}

#ifndef FAKE_NVML_OLD

EXPORT nvmlReturn_t nvmlInit_v2(void) { FAKE_LOCK; return do_init(); }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
  FAKE_LOCK;
  return nvmlDeviceGetCount(count);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
  FAKE_LOCK;
  return nvmlDeviceGetHandleByIndex(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, fake_memory_v2_t *mem) {
  FAKE_LOCK;
  unsigned long long v[4];
  if (mem == NULL) return INVALID_ARGUMENT;
  /* NVML_STRUCT_VERSION(Memory, 2) */
  if (mem->version != ((unsigned)sizeof(fake_memory_v2_t) | (2u << 24))) return 25;
  int rc = memory(h, F_MEMORY_V2, v);
  if (rc != 0) return rc;
  mem->total = v[0], mem->reserved = v[1], mem->free = v[2], mem->used = v[3];
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h,
                                                           unsigned long long *bits) {
  FAKE_LOCK;
  return serve_one(h, F_EVENT_REASONS, K_CLOCK_REASONS, NULL, bits);
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int n, fake_field_value_t *values) {
  FAKE_LOCK;
  static const struct { unsigned id; int key; int type; } fields[] = {
      {186, K_POWER, VALUE_TYPE_UINT},        {190, K_POWER_LIMIT, VALUE_TYPE_UINT},
      {83, K_ENERGY, VALUE_TYPE_ULL},         {197, K_PCIE_TX, VALUE_TYPE_ULL},
      {198, K_PCIE_RX, VALUE_TYPE_ULL},       {3, K_ECC_CORRECTED, VALUE_TYPE_ULL},
      {4, K_ECC_UNCORRECTED, VALUE_TYPE_ULL}, {138, K_NVLINK_TX, VALUE_TYPE_ULL},
      {139, K_NVLINK_RX, VALUE_TYPE_ULL}};
  struct fake_device *d = device_of(h);
  int rc = begin(d, F_FIELD_VALUES);
  if (rc != 0) return rc;
  if (n < 0 || (n > 0 && values == NULL)) return INVALID_ARGUMENT;
  for (int i = 0; i < n; ++i) { /* a GPU lost mid-run fails the whole call */
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; ++f) {
      if (fields[f].id == values[i].fieldId && lost_at(d, fields[f].key)) return GPU_IS_LOST;
    }
  }
  unsigned long long stamp = d->field_time_start + d->field_calls++ * d->field_time_step;
  for (int i = 0; i < n; ++i) {
    fake_field_value_t *v = &values[i];
    v->timestamp = d->field_time_start != 0 ? (long long)stamp : 0;
    v->latencyUsec = d->field_time_start != 0 ? 7 : 0;
    v->nvmlReturn = NOT_SUPPORTED;
    spend(d->index, R_FIELD, (int)v->fieldId);
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; ++f) {
      if (fields[f].id != v->fieldId) continue;
      /* NVLink throughput: the aggregate scope only (a per-link scope is not scripted). */
      if ((fields[f].key == K_NVLINK_TX || fields[f].key == K_NVLINK_RX) &&
          v->scopeId != 0xFFFFFFFFu) {
        break;
      }
      unsigned long long req = v->fieldId < MAX_FIELD_ID ? d->field_requests[v->fieldId]++ : 0;
      int code = rule_code(d->index, R_FIELD, (int)v->fieldId, req);
      if (code == 0) code = key_code(d, fields[f].key);
      v->nvmlReturn = code;
      if (code != 0) break;
      v->valueType = fields[f].type;
      unsigned long long x = serve(d, fields[f].key);
      if (fields[f].type == VALUE_TYPE_UINT) {
        v->value.ullVal = 0;
        v->value.uiVal = (unsigned)x;
      } else {
        v->value.ullVal = x;
      }
      break;
    }
  }
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned *c, void *p) {
  FAKE_LOCK;
  return processes(h, F_COMPUTE_PROCS, 0, 2, c, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *c, void *p) {
  FAKE_LOCK;
  return processes(h, F_COMPUTE_PROCS, 0, 3, c, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t h, unsigned *c,
                                                             void *p) {
  FAKE_LOCK;
  return processes(h, F_GRAPHICS_PROCS, 1, 2, c, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned *c,
                                                             void *p) {
  FAKE_LOCK;
  return processes(h, F_GRAPHICS_PROCS, 1, 3, c, p);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current,
                                         unsigned int *pending) {
  FAKE_LOCK;
  struct fake_device *d = device_of(h);
  int rc = begin(d, F_MIG_MODE);
  if (rc != 0) return rc;
  if (current == NULL || pending == NULL) return INVALID_ARGUMENT;
  if (d->mig_state < 0) return NOT_SUPPORTED;
  *current = *pending = (unsigned)d->mig_state;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned int *count) {
  FAKE_LOCK;
  struct fake_device *d = device_of(h);
  int rc = begin(d, F_MAX_MIG);
  if (rc != 0) return rc;
  if (count == NULL) return INVALID_ARGUMENT;
  if (d->mig_state < 0) return NOT_SUPPORTED;
  *count = MAX_MIG;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned int index,
                                                        nvmlDevice_t *mig) {
  FAKE_LOCK;
  struct fake_device *d = device_of(h);
  int rc = begin(d, F_MIG_HANDLE);
  if (rc != 0) return rc;
  if (mig == NULL || index >= MAX_MIG) return INVALID_ARGUMENT;
  if (d->mig_state != 1 || (int)index >= d->mig_count) return NOT_FOUND;
  *mig = (nvmlDevice_t)(void *)&d->mig[index];
  return SUCCESS;
}

#endif /* FAKE_NVML_OLD */

/* ---- introspection for tests ------------------------------------------------------------- */

EXPORT unsigned long long fake_nvml_calls(unsigned dev, const char *function) {
  FAKE_LOCK;
  if (dev >= MAX_DEVICES || function == NULL) return 0;
  char plain[96];
  snprintf(plain, sizeof plain, "%s", function);
  char *v = strstr(plain, "_v");
  if (v != NULL && strcmp(plain, "nvmlDeviceGetMemoryInfo_v2") != 0) *v = '\0';
  int fn = find_name(plain, fn_names, F_COUNT);
  return fn < 0 ? 0 : g.dev[dev].calls[fn];
}

EXPORT unsigned long long fake_nvml_last_seen(unsigned dev) {
  FAKE_LOCK;
  return dev < MAX_DEVICES ? g.dev[dev].last_seen_arg : 0;
}

EXPORT int fake_nvml_init_count(void) { FAKE_LOCK; return g.init_count; }
