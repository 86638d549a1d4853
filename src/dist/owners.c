// Owned runs of the canonical vector and the folds over them (owners.h).
#include "owners.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static int by_at(const void *a, const void *b) {
  const ts_owned_run *x = a, *y = b;
  return x->at < y->at ? -1 : x->at > y->at;
}

int ts_owners_create(ts_comm *group, const ts_tensor *t, int nt, const float *base,
                     const uint64_t *mlocal, uint64_t total, ts_owners *out) {
  memset(out, 0, sizeof *out);
  out->group = group && group->size > 1 ? group : NULL;
  out->total = total;
  const int P = out->group ? group->size : 1, me = out->group ? group->rank : 0;
  // this rank's tensors as maximal runs: consecutive in both orders
  ts_owned_run *mine = calloc((size_t)(nt > 0 ? nt : 1), sizeof *mine);
  if (!mine) return ts_fail(TS_ERUNTIME, "out of memory");
  int n = 0;
  for (int i = 0; i < nt; i++) {
    const uint64_t at = (uint64_t)t[i].at, len = (uint64_t)ts_tensor_numel(&t[i]);
    const uint64_t local = (uint64_t)(t[i].data - base), ml = mlocal ? mlocal[i] : local;
    if (n > 0 && mine[n - 1].at + mine[n - 1].len == at &&
        mine[n - 1].local + mine[n - 1].len == local && mine[n - 1].mlocal + mine[n - 1].len == ml) {
      mine[n - 1].len += len;
      continue;
    }
    mine[n++] = (ts_owned_run){at, len, local, ml, me};
  }
  // every rank's: the counts, then the runs padded to the largest count
  int *counts = calloc((size_t)P, sizeof *counts), rc = TS_OK, most = 0;
  ts_owned_run *all = NULL;
  if (!counts) rc = ts_fail(TS_ERUNTIME, "out of memory");
  if (!rc && out->group) rc = ts_comm_allgather(group, &n, counts, sizeof n, -1);
  if (!rc && !out->group) counts[0] = n;
  for (int q = 0; !rc && q < P; q++) most = counts[q] > most ? counts[q] : most;
  if (!rc && !(all = calloc((size_t)P * (most ? most : 1), sizeof *all)))
    rc = ts_fail(TS_ERUNTIME, "out of memory");
  if (!rc) {
    ts_owned_run *pad = calloc((size_t)(most ? most : 1), sizeof *pad);
    if (!pad) rc = ts_fail(TS_ERUNTIME, "out of memory");
    else {
      memcpy(pad, mine, (size_t)n * sizeof *pad);
      rc = out->group ? ts_comm_allgather(group, pad, all, (size_t)most * sizeof *pad, -1)
                      : (memcpy(all, pad, (size_t)most * sizeof *pad), TS_OK);
      free(pad);
    }
  }
  if (!rc) { // compact, then in canonical order
    int k = 0;
    for (int q = 0; q < P; q++)
      for (int j = 0; j < counts[q]; j++) all[k++] = all[(size_t)q * most + j];
    qsort(all, (size_t)k, sizeof *all, by_at);
    uint64_t end = 0;
    for (int j = 0; j < k && !rc; j++) {
      if (all[j].at != end)
        rc = ts_fail(TS_ERUNTIME, "model state: elements [%llu, %llu) are %s", (unsigned long long)
                     (all[j].at < end ? all[j].at : end), (unsigned long long)(all[j].at < end ? end : all[j].at),
                     all[j].at < end ? "owned twice" : "owned by no rank");
      end = all[j].at + all[j].len;
    }
    if (!rc && end != total)
      rc = ts_fail(TS_ERUNTIME, "model state: the ranks own %llu of %llu elements",
                   (unsigned long long)end, (unsigned long long)total);
    out->n = k;
  }
  free(mine);
  free(counts);
  if (rc) {
    free(all);
    out->n = 0;
    return rc;
  }
  out->run = all;
  return TS_OK;
}

void ts_owners_free(ts_owners *o) {
  free(o->run);
  memset(o, 0, sizeof *o);
}

int ts_owners_fold(const ts_owners *o, void *state, size_t bytes, ts_fold_fn *fn, void *ctx) {
  const int me = o->group ? o->group->rank : 0;
  int rc = TS_OK;
  for (int j = 0; j < o->n && !rc; j++) {
    const ts_owned_run *r = &o->run[j];
    if (r->rank != me) continue;
    // the state from the previous run's owner, and on to the next run's
    if (j > 0 && o->run[j - 1].rank != me)
      rc = ts_comm_recv(o->group, state, bytes, o->run[j - 1].rank, -1);
    if (rc) break;
    fn(state, r, ctx);
    if (j + 1 < o->n && o->run[j + 1].rank != me)
      rc = ts_comm_send(o->group, state, bytes, o->run[j + 1].rank, -1);
  }
  if (!rc && o->group && o->n > 0) rc = ts_comm_bcast(o->group, state, bytes, o->run[o->n - 1].rank, -1);
  return rc;
}
