/*
 * fake_nvml_gpm.c - the GPM part of the fake NVML library (GPU Performance Monitoring: Hopper and
 * newer), #included by fake_nvml.c so that the library stays one compilation unit (the build
 * commands name fake_nvml.c only). See fake_nvml.c and README.md.
 *
 *   gpm <dev> on|off                 whether nvmlGpmQueryDeviceSupport says the GPU supports GPM
 *                                    (default off: a pre-Hopper GPU)
 *   gpm_metric <dev> <id> <v1> [<v2> ...]
 *                                    the k-th successful nvmlGpmMetricsGet on <dev> returns v_k
 *                                    (the last repeats) for metric <id>; a metric id without a
 *                                    gpm_metric line answers NOT_SUPPORTED in its entry
 *
 * Samples are real allocations (nvmlGpmSampleAlloc / nvmlGpmSampleFree), each stamped with
 * CLOCK_MONOTONIC when nvmlGpmSampleGet fills it. nvmlGpmMetricsGet checks that both samples were
 * filled, on the same GPU, the second after the first, and counts pairs less than 100 ms apart
 * (NVML needs more) for fake_nvml_gpm_close_pairs().
 */
#include <time.h>

enum { MAX_GPM_METRICS = 16 };

struct fake_gpm {
  int on;
  unsigned nids;
  unsigned ids[MAX_GPM_METRICS];
  unsigned nvalues[MAX_GPM_METRICS];
  double values[MAX_GPM_METRICS][MAX_VALUES];
  unsigned long long served, close_pairs;
  long long min_gap_ns; /* -1: no pair yet */
};
static struct fake_gpm gpm_state[MAX_DEVICES];
static long long gpm_live_samples;

struct fake_gpm_sample {
  int dev;      /* -1 until filled */
  long long t_ns;
  unsigned long long seq;
};

static void gpm_reset(void) {
  memset(gpm_state, 0, sizeof gpm_state);
  for (int d = 0; d < MAX_DEVICES; ++d) gpm_state[d].min_gap_ns = -1;
}

/* Parses the gpm directives; returns an error, NULL when parsed, or "" when not a gpm line. */
static const char *gpm_parse(const char *cmd, int d, const char *a2, char **save) {
  struct fake_gpm *s = &gpm_state[d];
  if (strcmp(cmd, "gpm") == 0) {
    if (a2 == NULL || (strcmp(a2, "on") != 0 && strcmp(a2, "off") != 0)) {
      return "expected: gpm <dev> on|off";
    }
    s->on = strcmp(a2, "on") == 0;
    return NULL;
  }
  if (strcmp(cmd, "gpm_metric") == 0) {
    unsigned long long id;
    if (!parse_ull(a2, &id) || s->nids == MAX_GPM_METRICS) {
      return "expected: gpm_metric <dev> <id> <v>... (at most 16 metrics)";
    }
    unsigned m = s->nids++;
    s->ids[m] = (unsigned)id;
    for (char *v; (v = strtok_r(NULL, " \t\r\n", save)) != NULL;) {
      char *end = NULL;
      if (s->nvalues[m] == MAX_VALUES) return "more than 64 values";
      s->values[m][s->nvalues[m]++] = strtod(v, &end);
      if (end == v || *end != '\0') return "a gpm value is not a number";
    }
    return s->nvalues[m] == 0 ? "gpm_metric needs at least one value" : NULL;
  }
  return "";
}

#ifndef FAKE_NVML_OLD

static long long mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct {
  unsigned int version, isSupportedDevice;
} fake_gpm_support_t;
typedef struct {
  unsigned int metricId;
  nvmlReturn_t nvmlReturn;
  double value;
  char *shortName, *longName, *unit;
} fake_gpm_metric_t;
typedef struct {
  unsigned int version, numMetrics;
  struct fake_gpm_sample *sample1, *sample2;
  fake_gpm_metric_t metrics[1]; /* numMetrics entries are used */
} fake_gpm_metrics_get_t;

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t h, fake_gpm_support_t *support) {
  FAKE_LOCK;
  struct fake_device *d = device_of(h);
  int rc = begin(d, F_GPM_SUPPORT);
  if (rc != 0) return rc;
  if (support == NULL) return INVALID_ARGUMENT;
  if (support->version != 1) return 25; /* ARGUMENT_VERSION_MISMATCH */
  support->isSupportedDevice = (unsigned)gpm_state[d->index].on;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(struct fake_gpm_sample **sample) {
  FAKE_LOCK;
  if (g.init_count == 0) return UNINITIALIZED;
  if (sample == NULL) return INVALID_ARGUMENT;
  *sample = malloc(sizeof **sample);
  if (*sample == NULL) return 20; /* MEMORY */
  (*sample)->dev = -1;
  gpm_live_samples++;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(struct fake_gpm_sample *sample) {
  FAKE_LOCK;
  if (sample == NULL) return INVALID_ARGUMENT;
  free(sample);
  gpm_live_samples--;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t h, struct fake_gpm_sample *sample) {
  FAKE_LOCK;
  struct fake_device *d = device_of(h);
  int rc = begin(d, F_GPM_SAMPLE_GET);
  if (rc != 0) return rc;
  if (sample == NULL) return INVALID_ARGUMENT;
  if (!gpm_state[d->index].on) return NOT_SUPPORTED;
  sample->dev = d->index;
  sample->t_ns = mono_ns();
  sample->seq = d->calls[F_GPM_SAMPLE_GET];
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmMetricsGet(fake_gpm_metrics_get_t *mg) {
  FAKE_LOCK;
  if (g.init_count == 0) return UNINITIALIZED;
  if (mg == NULL || mg->sample1 == NULL || mg->sample2 == NULL) return INVALID_ARGUMENT;
  if (mg->version != 1) return 25;
  const struct fake_gpm_sample *a = mg->sample1, *b = mg->sample2;
  if (a->dev < 0 || a->dev != b->dev || b->seq <= a->seq) return INVALID_ARGUMENT;
  struct fake_device *d = &g.dev[a->dev];
  int rc = begin(d, F_GPM_METRICS_GET);
  if (rc != 0) return rc;
  struct fake_gpm *s = &gpm_state[d->index];
  long long gap = b->t_ns - a->t_ns;
  if (gap <= 100000000LL) s->close_pairs++;
  if (s->min_gap_ns < 0 || gap < s->min_gap_ns) s->min_gap_ns = gap;
  unsigned long long k = s->served++;
  for (unsigned i = 0; i < mg->numMetrics; ++i) {
    fake_gpm_metric_t *m = &mg->metrics[i];
    m->nvmlReturn = NOT_SUPPORTED;
    m->shortName = m->longName = m->unit = NULL;
    for (unsigned j = 0; j < s->nids; ++j) {
      if (s->ids[j] != m->metricId) continue;
      m->nvmlReturn = SUCCESS;
      m->value = s->values[j][k < s->nvalues[j] ? k : s->nvalues[j] - 1];
    }
  }
  return SUCCESS;
}

#endif /* FAKE_NVML_OLD */

/* For assertions: GPM samples allocated and not freed; pairs less than 100 ms apart on <dev>;
 * the smallest gap between the samples of a pair (ns, -1 before the first pair). */
EXPORT long long fake_nvml_gpm_live_samples(void) { FAKE_LOCK; return gpm_live_samples; }
EXPORT unsigned long long fake_nvml_gpm_close_pairs(unsigned dev) {
  FAKE_LOCK;
  return dev < MAX_DEVICES ? gpm_state[dev].close_pairs : 0;
}
EXPORT long long fake_nvml_gpm_min_gap_ns(unsigned dev) {
  FAKE_LOCK;
  return dev < MAX_DEVICES ? gpm_state[dev].min_gap_ns : -1;
}
