// The loss sum of a sequence group's sequences from its ranks' segment sums
// (segment_sum.h): shared by a rank's share of the batch (shard.c) and a
// pipeline stage under --sp (pipeline.c).
#include "segment_sum.h"

#include <stdlib.h>
#include <string.h>

#include "exact/tree.h"
#include "tessera.h"

// out[j]: the tree over the group's ranks of their x[j], j < n (one
// all-gather; group NULL: x itself).
static int group_columns(ts_comm *group, const float *x, int n, float *out) {
  const int N = group ? group->size : 1;
  float *all = malloc((size_t)N * n * sizeof(float)), *col = malloc((size_t)N * sizeof(float));
  int rc = !all || !col ? ts_fail(TS_ERUNTIME, "out of memory") : TS_OK;
  if (!rc && group) rc = ts_comm_allgather(group, x, all, (size_t)n * sizeof(float), -1);
  if (!rc && !group) memcpy(all, x, (size_t)n * sizeof(float));
  for (int j = 0; j < n && !rc; j++) {
    for (int r = 0; r < N; r++) col[r] = all[(size_t)r * n + j];
    out[j] = ts_tree_sum(col, (size_t)N);
  }
  free(all);
  free(col);
  return rc;
}

// For ranks of two runs (lss-zigzag): lsums holds the first runs' sums of
// the nb sequences, then the second runs'; seqsum[j], sequence j's, is the
// tree over the ranks of each, added (src/model/run_partials.c).
static int run_pairs_columns(ts_comm *seq, const float *lsums, int nb, float *seqsum) {
  float *cols = malloc((size_t)2 * nb * sizeof(float));
  int rc = cols ? group_columns(seq, lsums, 2 * nb, cols) : ts_fail(TS_ERUNTIME, "out of memory");
  for (int j = 0; j < nb && !rc; j++) seqsum[j] = cols[j] + cols[nb + j];
  free(cols);
  return rc;
}

int ts_segment_sequence_sums(ts_comm *seq, const float *lsums, int nb, int runs, float *seqsum) {
  return runs == 2 ? run_pairs_columns(seq, lsums, nb, seqsum)
                   : group_columns(seq, lsums, nb, seqsum);
}

int ts_segment_loss_sum(ts_comm *seq, const float *lsums, int nb, int runs, float *out) {
  float *seqsum = malloc((size_t)nb * sizeof(float));
  int rc = seqsum ? ts_segment_sequence_sums(seq, lsums, nb, runs, seqsum)
                  : ts_fail(TS_ERUNTIME, "out of memory");
  if (!rc) *out = ts_tree_sum(seqsum, (size_t)nb);
  free(seqsum);
  return rc;
}
