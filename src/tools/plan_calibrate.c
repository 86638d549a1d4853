// tessera plan --calibrate LOG (docs/PLAN.md): the compute efficiency the
// plan predicts with, measured on a run instead of assumed. A step's compute
// time in the plan is its FLOPs at --efficiency × --flops; a run log holds
// what that fraction was on its machine: the model's FLOPs a token and the
// roof MFU is measured against (the config record), and for each step the
// busiest rank's time outside the collectives (compute_ms_max, RUN-LOG.md).
//
//   efficiency = flops_per_token × batch × seq × (1 + checkpoint/3) / world
//                / (compute_ms_max × roof)
//
// the median over the steps after the first (which warms the caches and the
// allocator up). For a serial run without --checkpoint it is the run's MFU;
// with --checkpoint the forward run again counts, as the plan counts it.
#include <stdlib.h>
#include <string.h>

#include "logread.h"
#include "tessera.h"

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// A number of obj's member key, or the message naming what is missing.
static int member(const ts_log_reader *r, const json_value *obj, const char *key, double *out) {
  const json_value *v = json_get(obj, key);
  if (!v || v->type != JSON_NUMBER)
    return ts_fail(TS_EUSAGE, "--calibrate %s: the config record has no number \"%s\"", r->path,
                   key);
  *out = v->num;
  return TS_OK;
}

int ts_plan_calibrate(const char *path, double *efficiency, int *steps) {
  ts_log_reader r;
  int rc = ts_log_reader_open(&r, path);
  if (rc) return ts_fail_flag(TS_EUSAGE, "--calibrate", path);
  double *eff = NULL, fpt = 0, roof = 0, world = 0, batch = 0, seq = 0, ckpt = 0;
  int n = 0, cap = 0, seen = 0, got;
  while ((got = ts_log_reader_next(&r)) == 1) {
    if (strcmp(r.type, "step") != 0) continue;
    if (!seen++) { // the config record precedes the first step
      const json_value *model = json_get(&r.config, "model");
      if (r.config.type != JSON_OBJECT || !model) {
        rc = ts_fail(TS_EUSAGE, "--calibrate %s: no config record before the steps", path);
        break;
      }
      if ((rc = member(&r, &r.config, "flops_per_token", &fpt)) ||
          (rc = member(&r, &r.config, "roof_gflops", &roof)) ||
          (rc = member(&r, &r.config, "world", &world)) ||
          (rc = member(&r, model, "batch", &batch)) || (rc = member(&r, model, "seq", &seq)))
        break;
      const json_value *c = json_get(model, "checkpoint"); // written only when on
      ckpt = c && c->type == JSON_NUMBER ? c->num : c && c->type == JSON_TRUE;
      if (!(roof > 0)) {
        rc = ts_fail(TS_EUSAGE, "--calibrate %s: the run measured no roof (a GPU's is not "
                     "measured); give --efficiency instead", path);
        break;
      }
      if (!(fpt > 0) || !(world >= 1) || !(batch >= 1) || !(seq >= 1)) {
        rc = ts_fail(TS_EUSAGE, "--calibrate %s: its config record's flops_per_token, world, "
                     "batch or seq is not positive", path);
        break;
      }
      continue; // the first step warms up
    }
    const json_value *ms = json_get(&r.rec, "compute_ms_max");
    if (!ms || ms->type != JSON_NUMBER || !(ms->num > 0)) {
      rc = ts_fail(TS_EUSAGE, "--calibrate %s: %s has no positive compute_ms_max", path, r.label);
      break;
    }
    if (n == cap) {
      double *grown = realloc(eff, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *eff);
      if (!grown) {
        rc = ts_fail(TS_ERUNTIME, "--calibrate %s: out of memory", path);
        break;
      }
      eff = grown;
    }
    const double flops = fpt * batch * seq * (1.0 + ckpt / 3.0) / world;
    eff[n++] = flops / (ms->num * 1e-3 * roof * 1e9);
  }
  if (got < 0) rc = ts_fail_flag(TS_EUSAGE, "--calibrate", path); // the reader's names the line
  ts_log_reader_close(&r);
  if (!rc && n < 1)
    rc = ts_fail(TS_EUSAGE, "--calibrate %s: needs a run of at least 2 steps (the first is not "
                 "counted), found %d", path, seen);
  if (!rc) {
    qsort(eff, (size_t)n, sizeof *eff, by_value);
    *efficiency = n % 2 ? eff[n / 2] : 0.5 * (eff[n / 2 - 1] + eff[n / 2]);
    *steps = n;
    if (!(*efficiency > 0) || *efficiency > 1.0)
      rc = ts_fail(TS_EUSAGE, "--calibrate %s: its efficiency %.3g is not in (0, 1] (a roof "
                   "measured on another machine?)", path, *efficiency);
  }
  free(eff);
  return rc;
}
