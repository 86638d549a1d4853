// The next token from a position's logits (tessera sample, docs/SAMPLING.md):
// temperature, top-k and top-p (nucleus) filtering, and one draw of the
// counter-based generator keyed by (seed, the token's position), so that a
// sample depends on nothing but the seed, the logits and the position.
#ifndef TS_SAMPLER_H
#define TS_SAMPLER_H
#include <stdint.h>

typedef struct {
  float temperature; // 0: greedy (the highest logit, the lowest id on a tie)
  int top_k;         // keep the k most probable ids; 0: all
  float top_p;       // keep the fewest most probable ids whose mass reaches p; 1: all
  uint64_t seed;
} ts_sampling;

// TS_EUSAGE naming the flag (--temperature, --top-k, --top-p) when a value is
// out of range: temperature >= 0, top_k >= 0, 0 < top_p <= 1.
int ts_sampling_check(const ts_sampling *s);

// Scratch for V ids: malloc'd by ts_sampler_init, freed by ts_sampler_free.
typedef struct {
  double p; // unnormalised probability
  int id;
} ts_sample_cand;
typedef struct {
  int V;
  ts_sample_cand *cand; // the ids, ordered by probability when a filter is on
} ts_sampler;
int ts_sampler_init(ts_sampler *sm, int V);
void ts_sampler_free(ts_sampler *sm);

// The token at position pos drawn from logits (V floats), into *token; its
// log-probability under the distribution it was drawn from before top-k and
// top-p cut it, softmax(logits / temperature) (temperature 0: softmax(logits)),
// into *logprob. TS_ERUNTIME when a logit is not finite.
int ts_sample_next(ts_sampler *sm, const ts_sampling *s, const float *logits, uint64_t pos,
                   int *token, double *logprob);
#endif
