// Ranks agree before they work (run.h): every rank compares what it was given
// and what it found with rank 0's, so that ranks started with different
// flags, data or checkpoints stop at once with one line saying which rank
// differs and in what, instead of hanging in a collective that does not
// match or finishing with a silently different result. They also compare
// their arithmetic (run/fingerprint.h): a rank built or set up to compute
// other bits would make the exact layouts differ from the serial run.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/grid.h"
#include "run/fingerprint.h"
#include "run/run.h"
#include "util.h"

#define AGREE_CONFIG 8192 // the configuration without its paths fits

// What a rank says about itself.
typedef struct {
  char config[AGREE_CONFIG];   // the computation (ts_config_computation_json)
  int layout[10];              // the layout's settings, in layout_flags' order
  char data[96];               // its token counts and digest (ts_run_data_id)
  int64_t ckpt_step;           // --resume, --init-from: the checkpoint's step (0: none)
  char ckpt_crc[12];           // and its header's checksum
  ts_arith arith;              // the bits its kernels compute
} statement;

static const char *const layout_flags[10] = {
    "--dp", "--sp", "--pp", "--sp-mode", "--upipe-u", "--upipe-schedule", "--microbatches",
    "--schedule", "--ulysses-degree", "--zero"};

static int state(statement *st, const ts_config *cfg, const ts_layout *lay, const ts_data *data,
                 const ts_run_ckpt *ck) {
  memset(st, 0, sizeof *st);
  // (the memory options too: a recomputing layer makes collectives of its own)
  int rc = ts_config_computation_json(cfg, 1, st->config, sizeof st->config);
  if (rc) return rc;
  const int l[10] = {lay->dp, lay->sp, lay->pp, (int)lay->sp_mode, lay->upipe_u, lay->upipe_sched,
                     lay->microbatches, lay->schedule, lay->ulysses_degree, lay->zero};
  memcpy(st->layout, l, sizeof l);
  if (!ts_run_data_id()[0]) ts_run_checkpoint_data(data);
  snprintf(st->data, sizeof st->data, "%s", ts_run_data_id());
  if (ck && ck->ck) {
    const char *crc = ts_ckpt_meta(ck->ck, "tessera.header_crc32");
    st->ckpt_step = ck->step;
    snprintf(st->ckpt_crc, sizeof st->ckpt_crc, "%s", crc ? crc : "");
  }
  if (ts_arith_fingerprint(&st->arith)) return ts_fail(TS_ERUNTIME, "out of memory");
  return TS_OK;
}

// The first way rank q's statement differs from rank 0's, into what; 0: none.
static int differs(const statement *a, const statement *b, int q, char *what, size_t cap) {
  char key[64];
  if (strcmp(a->config, b->config)) {
    ts_config_json_difference(a->config, b->config, key, sizeof key);
    snprintf(what, cap, "the configuration: \"%s\" differs", key[0] ? key : "?");
    return 1;
  }
  for (int i = 0; i < 10; i++)
    if (a->layout[i] != b->layout[i]) {
      snprintf(what, cap, "the layout: %s", layout_flags[i]);
      return 1;
    }
  if (strcmp(a->data, b->data)) {
    snprintf(what, cap, "the data: rank 0 read %s, rank %d %s", a->data, q, b->data);
    return 1;
  }
  if (a->ckpt_step != b->ckpt_step || strcmp(a->ckpt_crc, b->ckpt_crc)) {
    snprintf(what, cap, "the checkpoint it starts from: rank 0 found step %" PRId64 " (header %s), "
             "rank %d step %" PRId64 " (header %s)", a->ckpt_step, a->ckpt_crc, q, b->ckpt_step,
             b->ckpt_crc);
    return 1;
  }
  return 0;
}

int ts_run_agree(const ts_config *cfg, const ts_layout *lay, const ts_data *data,
                 const ts_run_ckpt *ck) {
  const int n = ts_mpi_world_size();
  if (n == 1) return TS_OK;
  statement *mine = malloc(sizeof *mine), *all = malloc((size_t)n * sizeof *all);
  int rc = mine && all ? state(mine, cfg, lay, data, ck) : ts_fail(TS_ERUNTIME, "out of memory");
  // a rank that cannot say must still take part: its statement then differs
  if (rc && mine) memset(mine, 0xff, sizeof *mine);
  int arc = mine && all ? ts_mpi_allgather_raw(mine, all, sizeof *mine) : rc;
  if (!rc) rc = arc;
  char what[512];
  for (int q = 1; q < n && !rc; q++)
    if (differs(&all[0], &all[q], q, what, sizeof what))
      rc = ts_fail_everywhere(TS_EUSAGE, "rank %d disagrees with rank 0 on %s: every rank must "
                              "be started with the same flags, data and checkpoints", q, what);
  // Same flags, other bits: the part named is the first that differs.
  for (int q = 1; q < n && !rc; q++) {
    const ts_arith *a = &all[0].arith, *b = &all[q].arith;
    if (a->all == b->all) continue;
    int i = 0;
    while (i < TS_ARITH_NPARTS - 1 && a->part[i] == b->part[i]) i++;
    rc = ts_fail_everywhere(TS_ERUNTIME, "rank %d's arithmetic differs from rank 0's: fingerprint "
                            "0x%016" PRIx64 " vs 0x%016" PRIx64 ", first in its %s (a different "
                            "build, compiler flags, libm, or CPU mode); see docs/PORTABILITY.md",
                            q, b->all, a->all, ts_arith_part_name(i));
  }
  free(mine);
  free(all);
  return rc;
}
