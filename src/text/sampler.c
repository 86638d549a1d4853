// The next token from a position's logits (sampler.h). Everything is in
// double, in a fixed order, with tessera's exp and log (exactmath.h), so one
// seed gives the same token and log-probability on every run and machine.
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

#include "exact/exactmath.h"
#include "exact/rng.h"
#include "tessera.h"

int ts_sampling_check(const ts_sampling *s) {
  if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
    return ts_fail(TS_EUSAGE, "--temperature %g: must be >= 0 (0: greedy)",
                   (double)s->temperature);
  if (s->top_k < 0) return ts_fail(TS_EUSAGE, "--top-k %d: must be >= 0 (0: off)", s->top_k);
  if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
    return ts_fail(TS_EUSAGE, "--top-p %g: must be in (0, 1] (1: off)", (double)s->top_p);
  return TS_OK;
}

int ts_sampler_init(ts_sampler *sm, int V) {
  sm->V = V;
  sm->cand = malloc((size_t)V * sizeof *sm->cand);
  if (!sm->cand) return ts_fail(TS_ERUNTIME, "out of memory");
  return TS_OK;
}

void ts_sampler_free(ts_sampler *sm) {
  free(sm->cand);
  sm->cand = NULL;
}

// Probability descending, then id ascending: a total order, so the sort's
// result does not depend on qsort's algorithm.
static int by_prob(const void *va, const void *vb) {
  const ts_sample_cand *a = va, *b = vb;
  if (a->p != b->p) return a->p > b->p ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

int ts_sample_next(ts_sampler *sm, const ts_sampling *s, const float *logits, uint64_t pos,
                   int *token, double *logprob) {
  const int V = sm->V;
  const double tau = s->temperature > 0.0f ? (double)s->temperature : 1.0;
  int best = 0;
  for (int i = 0; i < V; i++) {
    if (!isfinite(logits[i]))
      return ts_fail(TS_ERUNTIME, "the logit of token %d at position %llu is %g", i,
                     (unsigned long long)pos, (double)logits[i]);
    if (logits[i] > logits[best]) best = i;
  }
  // p_i = exp((logit_i − max) / τ), Z their sum in id order
  const double mx = (double)logits[best] / tau;
  double Z = 0.0;
  for (int i = 0; i < V; i++) {
    sm->cand[i] = (ts_sample_cand){ts_exp((double)logits[i] / tau - mx), i};
    Z += sm->cand[i].p;
  }
  int tok = best;
  double p_tok = sm->cand[best].p;
  if (s->temperature > 0.0f) {
    int kept = V;
    if (s->top_k > 0 || s->top_p < 1.0f) {
      qsort(sm->cand, (size_t)V, sizeof *sm->cand, by_prob);
      if (s->top_k > 0 && s->top_k < kept) kept = s->top_k;
    }
    // top-p on what top-k kept: the fewest of them whose mass reaches top_p
    // of theirs (at least one)
    double mass = 0.0;
    for (int r = 0; r < kept; r++) mass += sm->cand[r].p;
    if (s->top_p < 1.0f) {
      const double cut = (double)s->top_p * mass;
      mass = 0.0;
      for (int r = 0; r < kept; r++)
        if ((mass += sm->cand[r].p) >= cut) {
          kept = r + 1;
          break;
        }
    }
    // u uniform in [0, 1) with 53 bits: the first id whose running mass passes u · mass
    const double u = (double)ts_rng_below(s->seed, TS_RNG_SAMPLE, 0, pos, 1ull << 53) /
                     9007199254740992.0;
    const double target = u * mass;
    double run = 0.0;
    int r = 0;
    while (r < kept - 1 && !(target < (run += sm->cand[r].p))) r++;
    tok = sm->cand[r].id;
    p_tok = sm->cand[r].p;
  }
  *token = tok;
  *logprob = ts_log(p_tok) - ts_log(Z);
  return TS_OK;
}
