// A timing driver for llm.c's CPU trainer (bench/llmc.sh): built as one translation unit
// with a checkout's train_gpt2.c, included under -DTESTING so that its own main() (fixed
// B, T, paths, periodic validation and sampling) drops out, as its test_gpt2.c does. This
// file calls the trainer's own functions -- gpt2_build_from_checkpoint, gpt2_forward,
// gpt2_zero_grad, gpt2_backward, gpt2_update -- with its main()'s optimizer settings and
// times a step the way that main() does (batch, forward, zero, backward, update between
// two CLOCK_MONOTONIC reads). The batches are tessera's: step s (from 1) takes B windows
// of T+1 tokens of the training split, window j starting at
// ts_rng_below(seed, TS_RNG_DATA, s, j, len - T) (docs/DATA.md, "Windows"), with the
// split's length as tessera computes it for --val-frac.
//
//   llmc_driver CHECKPOINT TOKENS B T STEPS SEED VAL_FRAC
//
// TOKENS is llm.c's token file (a header of 256 int32: 20240520, 1, count; then uint16 ids).
// Prints one line a step: "step N: train loss L (took MS ms)", N from 1 as tessera counts.
#include "train_gpt2.c"
#include "exact/rng.h"

int main(int argc, char **argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: %s CHECKPOINT TOKENS B T STEPS SEED VAL_FRAC\n", argv[0]);
    return 2;
  }
  const int B = atoi(argv[3]), T = atoi(argv[4]), steps = atoi(argv[5]);
  const uint64_t seed = strtoull(argv[6], NULL, 10);
  const float val_frac = strtof(argv[7], NULL); // tessera's --val-frac is a float
  FILE *f = fopen(argv[2], "rb");
  if (!f) { fprintf(stderr, "%s: cannot open\n", argv[2]); return 1; }
  int header[256];
  if (fread(header, sizeof(int), 256, f) != 256 || header[0] != 20240520 || header[1] != 1) {
    fprintf(stderr, "%s: not an llm.c token file (magic 20240520, version 1)\n", argv[2]);
    return 1;
  }
  const size_t n = (size_t)header[2];
  uint16_t *tok = malloc(n * sizeof *tok);
  if (!tok || fread(tok, sizeof *tok, n, f) != n) { fprintf(stderr, "%s: short\n", argv[2]); return 1; }
  fclose(f);
  // the training split: all but the tail of floor(n * val_frac) tokens (src/train/data.c)
  const size_t len = n - (size_t)floor((double)n * (double)val_frac);
  if (len <= (size_t)T) { fprintf(stderr, "%s: %zu training tokens, T=%d\n", argv[2], len, T); return 1; }
  GPT2 model;
  gpt2_build_from_checkpoint(&model, argv[1]);
  int *inputs = malloc((size_t)B * T * sizeof *inputs), *targets = malloc((size_t)B * T * sizeof *targets);
#ifdef OMP
  printf("threads: %d\n", omp_get_max_threads());
#endif
  for (int s = 1; s <= steps; s++) {
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int j = 0; j < B; j++) {
      const size_t at = (size_t)ts_rng_below(seed, TS_RNG_DATA, (uint64_t)s, (uint64_t)j, len - (size_t)T);
      for (int t = 0; t < T; t++) {
        inputs[j * T + t] = tok[at + t];
        targets[j * T + t] = tok[at + t + 1];
      }
    }
    gpt2_forward(&model, inputs, targets, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model);
    gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, s); // train_gpt2.c main()'s settings
    clock_gettime(CLOCK_MONOTONIC, &end);
    const double ms = (end.tv_sec - start.tv_sec) * 1e3 + (end.tv_nsec - start.tv_nsec) / 1e6;
    printf("step %d: train loss %f (took %f ms)\n", s, model.mean_loss, ms);
    fflush(stdout);
  }
  gpt2_free(&model);
  free(tok); free(inputs); free(targets);
  return 0;
}
