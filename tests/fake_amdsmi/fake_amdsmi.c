/* A fake libamd_smi for tests: the amdsmi calls stroboscope makes, serving values scripted in the
 * file named by FAKE_AMDSMI_SCRIPT (read at every amdsmi_init). Loaded by the core through
 * STROBOSCOPE_AMDSMI_LIBRARY, the same path as the real library: no test-only branch in the core.
 *
 * Script lines ('#' starts a comment):
 *   devices N                 number of GPUs (default 1), one socket each (as on MI300 nodes)
 *   init STATUS               amdsmi_init returns STATUS (default 0)
 *   D KEY V1 V2 ...           device D's values for KEY, one per call of its function, the last
 *                             repeated: gfx umc (activity %), mem_used mem_total (bytes), temp
 *                             (C), energy (ticks), energy_ts (ns), resolution (uJ per tick),
 *                             gfx_clock mem_clock (MHz)
 *   D fail FUNCTION STATUS [FIRST [LAST]]
 *                             device D's FUNCTION (an amdsmi name) returns STATUS on its calls
 *                             FIRST..LAST (1-based; default from the first call on, for good)
 * Tests read call counts through fake_amdsmi_calls(device, function).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 16
#define MAX_VALUES 64
#define MAX_FAILS 8

enum { K_GFX, K_UMC, K_MEM_USED, K_MEM_TOTAL, K_TEMP, K_ENERGY, K_ENERGY_TS, K_RESOLUTION,
       K_GFX_CLOCK, K_MEM_CLOCK, K_COUNT };
static const char* const KEYS[K_COUNT] = {"gfx", "umc", "mem_used", "mem_total", "temp", "energy",
                                          "energy_ts", "resolution", "gfx_clock", "mem_clock"};

/* Clock calls are told apart by type, so each has its own count and failures. */
enum { F_ACTIVITY, F_MEM_USAGE, F_MEM_TOTAL, F_TEMP, F_ENERGY, F_CLOCK_GFX, F_CLOCK_MEM, F_UUID,
       F_COUNT };
static const char* const FUNCS[F_COUNT] = {
    "amdsmi_get_gpu_activity",    "amdsmi_get_gpu_memory_usage",
    "amdsmi_get_gpu_memory_total", "amdsmi_get_temp_metric",
    "amdsmi_get_energy_count",    "amdsmi_get_clock_info(GFX)",
    "amdsmi_get_clock_info(MEM)", "amdsmi_get_gpu_device_uuid"};

typedef struct {
  int func;
  uint32_t status;
  unsigned long long first, last;
} Fail;

typedef struct {
  double values[K_COUNT][MAX_VALUES];
  int n[K_COUNT];
  Fail fails[MAX_FAILS];
  int n_fails;
  unsigned long long calls[F_COUNT];
} Device;

static Device devices[MAX_DEVICES];
static unsigned n_devices = 1;
static uint32_t init_status = 0;
static int initialised = 0;

static int index_of(const char* const* names, int count, const char* name) {
  for (int i = 0; i < count; ++i) {
    if (strcmp(names[i], name) == 0) return i;
  }
  return -1;
}

static void load_script(void) {
  memset(devices, 0, sizeof devices);
  n_devices = 1;
  init_status = 0;
  const char* path = getenv("FAKE_AMDSMI_SCRIPT");
  FILE* f = path != NULL ? fopen(path, "r") : NULL;
  if (f == NULL) return;
  char line[1024];
  while (fgets(line, sizeof line, f) != NULL) {
    char* hash = strchr(line, '#');
    if (hash != NULL) *hash = '\0';
    char* tok = strtok(line, " \t\r\n");
    if (tok == NULL) continue;
    if (strcmp(tok, "devices") == 0) {
      n_devices = (unsigned)strtoul(strtok(NULL, " \t\r\n"), NULL, 10);
      if (n_devices > MAX_DEVICES) n_devices = MAX_DEVICES;
      continue;
    }
    if (strcmp(tok, "init") == 0) {
      init_status = (uint32_t)strtoul(strtok(NULL, " \t\r\n"), NULL, 10);
      continue;
    }
    unsigned d = (unsigned)strtoul(tok, NULL, 10);
    char* key = strtok(NULL, " \t\r\n");
    if (d >= MAX_DEVICES || key == NULL) continue;
    Device* dev = &devices[d];
    if (strcmp(key, "fail") == 0) {
      char* fn = strtok(NULL, " \t\r\n");
      char* st = strtok(NULL, " \t\r\n");
      char* first = strtok(NULL, " \t\r\n");
      char* last = strtok(NULL, " \t\r\n");
      int func = fn != NULL ? index_of(FUNCS, F_COUNT, fn) : -1;
      if (func < 0 || st == NULL || dev->n_fails >= MAX_FAILS) continue;
      Fail* x = &dev->fails[dev->n_fails++];
      x->func = func;
      x->status = (uint32_t)strtoul(st, NULL, 10);
      x->first = first != NULL ? strtoull(first, NULL, 10) : 1;
      x->last = last != NULL ? strtoull(last, NULL, 10) : ~0ull;
      continue;
    }
    int k = index_of(KEYS, K_COUNT, key);
    if (k < 0) continue;
    for (char* v = strtok(NULL, " \t\r\n"); v != NULL && dev->n[k] < MAX_VALUES;
         v = strtok(NULL, " \t\r\n")) {
      dev->values[k][dev->n[k]++] = strtod(v, NULL);
    }
  }
  fclose(f);
}

/* The value of KEY for the call-th call (1-based) of its function; 0 when unscripted. */
static double value(const Device* dev, int key, unsigned long long call) {
  if (dev->n[key] == 0) return 0.0;
  unsigned long long i = call - 1;
  if (i >= (unsigned long long)dev->n[key]) i = (unsigned long long)dev->n[key] - 1;
  return dev->values[key][i];
}

/* Counts a call of FUNC on the device behind HANDLE; returns its scripted status (0: serve it). */
static uint32_t enter(void* handle, int func, Device** out, unsigned long long* call) {
  if (!initialised) return 32; /* AMDSMI_STATUS_NOT_INIT */
  Device* dev = (Device*)handle;
  if (dev < devices || dev >= devices + n_devices) return 1; /* AMDSMI_STATUS_INVAL */
  *call = ++dev->calls[func];
  *out = dev;
  for (int i = 0; i < dev->n_fails; ++i) {
    const Fail* x = &dev->fails[i];
    if (x->func == func && *call >= x->first && *call <= x->last) return x->status;
  }
  return 0;
}

uint32_t amdsmi_init(uint64_t flags) {
  if ((flags & (1u << 1)) == 0) return 1; /* stroboscope asks for AMD GPUs */
  load_script();
  if (init_status != 0) return init_status;
  initialised = 1;
  return 0;
}

uint32_t amdsmi_shut_down(void) {
  initialised = 0;
  return 0;
}

uint32_t amdsmi_status_code_to_string(uint32_t status, const char** text) {
  switch (status) {
    case 0: *text = "AMDSMI_STATUS_SUCCESS: Call succeeded"; break;
    case 1: *text = "AMDSMI_STATUS_INVAL: Invalid parameters"; break;
    case 2: *text = "AMDSMI_STATUS_NOT_SUPPORTED: Command not supported"; break;
    case 8: *text = "AMDSMI_STATUS_TIMEOUT: Timeout in API call"; break;
    case 34: *text = "AMDSMI_STATUS_DRIVER_NOT_LOADED: Driver not loaded"; break;
    default: *text = "AMDSMI_STATUS_UNKNOWN_ERROR: An unknown error occurred"; break;
  }
  return 0;
}

uint32_t amdsmi_get_socket_handles(uint32_t* count, void** handles) {
  if (!initialised) return 32;
  if (handles == NULL) {
    *count = n_devices;
    return 0;
  }
  if (*count > n_devices) *count = n_devices;
  for (uint32_t i = 0; i < *count; ++i) handles[i] = &devices[i];
  return 0;
}

uint32_t amdsmi_get_processor_handles(void* socket, uint32_t* count, void** handles) {
  if (!initialised) return 32;
  if (handles == NULL) {
    *count = 1;
    return 0;
  }
  if (*count >= 1) handles[0] = socket;
  *count = 1;
  return 0;
}

uint32_t amdsmi_get_gpu_device_uuid(void* h, unsigned int* length, char* uuid) {
  Device* dev;
  unsigned long long call;
  uint32_t s = enter(h, F_UUID, &dev, &call);
  if (s != 0) return s;
  snprintf(uuid, *length, "fake-amd-%u", (unsigned)(dev - devices));
  return 0;
}

typedef struct {
  uint32_t gfx_activity, umc_activity, mm_activity, reserved[13];
} engine_usage;

uint32_t amdsmi_get_gpu_activity(void* h, engine_usage* info) {
  Device* dev;
  unsigned long long call;
  uint32_t s = enter(h, F_ACTIVITY, &dev, &call);
  if (s != 0) return s;
  memset(info, 0, sizeof *info);
  info->gfx_activity = (uint32_t)value(dev, K_GFX, call);
  info->umc_activity = (uint32_t)value(dev, K_UMC, call);
  return 0;
}

uint32_t amdsmi_get_gpu_memory_usage(void* h, uint32_t type, uint64_t* used) {
  Device* dev;
  unsigned long long call;
  uint32_t s = enter(h, F_MEM_USAGE, &dev, &call);
  if (s != 0) return s;
  if (type != 0) return 2; /* only VRAM is scripted */
  *used = (uint64_t)value(dev, K_MEM_USED, call);
  return 0;
}

uint32_t amdsmi_get_gpu_memory_total(void* h, uint32_t type, uint64_t* total) {
  Device* dev;
  unsigned long long call;
  uint32_t s = enter(h, F_MEM_TOTAL, &dev, &call);
  if (s != 0) return s;
  if (type != 0) return 2;
  *total = (uint64_t)value(dev, K_MEM_TOTAL, call);
  return 0;
}

uint32_t amdsmi_get_temp_metric(void* h, uint32_t sensor, uint32_t metric, int64_t* temp) {
  Device* dev;
  unsigned long long call;
  uint32_t s = enter(h, F_TEMP, &dev, &call);
  if (s != 0) return s;
  if (sensor != 1 || metric != 0) return 2; /* only the current hotspot temperature */
  *temp = (int64_t)value(dev, K_TEMP, call);
  return 0;
}

uint32_t amdsmi_get_energy_count(void* h, uint64_t* ticks, float* resolution, uint64_t* ts) {
  Device* dev;
  unsigned long long call;
  uint32_t s = enter(h, F_ENERGY, &dev, &call);
  if (s != 0) return s;
  *ticks = (uint64_t)value(dev, K_ENERGY, call);
  *resolution = (float)value(dev, K_RESOLUTION, call);
  *ts = (uint64_t)value(dev, K_ENERGY_TS, call);
  return 0;
}

/* The amdsmi 6.1+ layout; the core reads only the first member, the current clock. */
typedef struct {
  uint32_t clk, min_clk, max_clk;
  uint8_t clk_locked, clk_deep_sleep;
  uint32_t reserved[4];
} clk_info;

uint32_t amdsmi_get_clock_info(void* h, uint32_t type, clk_info* info) {
  if (type != 0 && type != 4) return 2; /* GFX and MEM only */
  Device* dev;
  unsigned long long call;
  uint32_t s = enter(h, type == 0 ? F_CLOCK_GFX : F_CLOCK_MEM, &dev, &call);
  if (s != 0) return s;
  memset(info, 0, sizeof *info);
  info->clk = (uint32_t)value(dev, type == 0 ? K_GFX_CLOCK : K_MEM_CLOCK, call);
  return 0;
}

/* For tests: how many times FUNCTION was called on device D since the script was loaded. */
unsigned long long fake_amdsmi_calls(unsigned d, const char* function) {
  int func = index_of(FUNCS, F_COUNT, function);
  if (d >= MAX_DEVICES || func < 0) return 0;
  return devices[d].calls[func];
}

/* For tests: whether amdsmi_init succeeded and amdsmi_shut_down has not been called since. */
int fake_amdsmi_initialised(void) { return initialised; }
