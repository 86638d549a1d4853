// Ranks agree before they work (run.h): every rank compares what it was given
// and what it found with rank 0's, so that ranks started with different
// flags, data or checkpoints stop at once with one line saying which rank
// differs and in what, instead of hanging in a collective that does not
// match or finishing with a silently different result. What they were given
// is the whole configuration, field by field as config_json.c's table lists
// it (a field added there is compared here, or says why each rank may hold
// its own), the layout, the device and the precision. They also compare
// their arithmetic (run/fingerprint.h): a rank built or set up to compute
// other bits would make the exact layouts differ from the serial run.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/json.h"
#include "base/util.h"
#include "dist/grid.h"
#include "fingerprint.h"
#include "run.h"

#define NLAYOUT 10
// every field of ts_layout is one of layout_flags' (a new one: add it there)
_Static_assert(sizeof(ts_layout) == NLAYOUT * sizeof(int), "ts_layout: a field agree.c lacks");

// What a rank says about itself: the same size on every rank, gathered from
// all. The configuration goes as a digest of its form; the forms themselves
// are gathered only when a digest differs, to name the flag.
typedef struct {
  uint64_t config_digest;      // FNV-1a of ts_config_agreement_json's form
  uint64_t config_len;         // its length (0: the rank could not say)
  int layout[NLAYOUT];         // the layout's settings, in layout_flags' order
  char device[16];             // --device: the backend's name
  char precision[16];          // --precision
  char data[96];               // its token counts and digest (ts_run_data_id)
  char tokenizer[24];          // --tokenizer: its model's digest ("" none)
  int64_t ckpt_step;           // --resume, --init-from: the checkpoint's step (0: none)
  char ckpt_crc[12];           // and its header's checksum
  ts_arith arith;              // the bits its kernels compute
} statement;

static const char *const layout_flags[NLAYOUT] = {
    "--dp", "--sp", "--pp", "--sp-mode", "--upipe-u", "--upipe-schedule", "--microbatches",
    "--schedule", "--ulysses-degree", "--zero"};

// A layout setting as its flag says it.
static void layout_value(int i, int v, char *out, size_t cap) {
  if (i == 3 && v >= 0 && v < TS_SP_NMODES) snprintf(out, cap, "%s", ts_sp_mode_names[v]);
  else if (i == 5 && (v == 0 || v == 1)) snprintf(out, cap, "%s", v ? "gqa" : "natural");
  else if (i == 7 && (v == 0 || v == 1)) snprintf(out, cap, "%s", v ? "1f1b" : "gpipe");
  else snprintf(out, cap, "%d", v);
}

// The digest of this run's tokenizer record (tokenizer_record.c), which
// names the file by its absolute path: a copy elsewhere is the same one.
static void tokenizer_digest(char *out, size_t cap) {
  const char *id = ts_run_tokenizer_id();
  json_value v;
  json_error err;
  out[0] = 0;
  if (!id[0] || json_parse(&v, id, strlen(id), JSON_ANY_BYTES, &err)) return;
  const json_value *d = json_get(&v, "digest");
  snprintf(out, cap, "%s", d && d->type == JSON_STRING ? d->str : "?");
  json_free(&v);
}

// form: this rank's configuration as the ranks compare it (malloc'd).
static int state(statement *st, char **form, const ts_config *cfg, const ts_layout *lay,
                 const ts_data *data, const ts_run_ckpt *ck) {
  memset(st, 0, sizeof *st);
  if (!(*form = malloc(TS_CONFIG_JSON_MAX))) return ts_fail(TS_ERUNTIME, "out of memory");
  int rc = ts_config_agreement_json(cfg, *form, TS_CONFIG_JSON_MAX);
  if (rc) return rc;
  st->config_len = strlen(*form);
  st->config_digest = ts_fnv1a64(TS_FNV_OFFSET, *form, st->config_len);
  const int l[NLAYOUT] = {lay->dp, lay->sp, lay->pp, (int)lay->sp_mode, lay->upipe_u,
                          lay->upipe_sched, lay->microbatches, lay->schedule,
                          lay->ulysses_degree, lay->zero};
  memcpy(st->layout, l, sizeof l);
  snprintf(st->device, sizeof st->device, "%s", ts_backend_current()->name);
  snprintf(st->precision, sizeof st->precision, "%s", ts_backend_precision_name());
  if (!ts_run_data_id()[0]) ts_run_checkpoint_data(data);
  snprintf(st->data, sizeof st->data, "%s", ts_run_data_id());
  tokenizer_digest(st->tokenizer, sizeof st->tokenizer);
  if (ck && ck->ck) {
    const char *crc = ts_ckpt_meta(ck->ck, "tessera.header_crc32");
    st->ckpt_step = ck->step;
    snprintf(st->ckpt_crc, sizeof st->ckpt_crc, "%s", crc ? crc : "");
  }
  if (ts_arith_fingerprint(&st->arith)) return ts_fail(TS_ERUNTIME, "out of memory");
  return TS_OK;
}

// The flag in which rank q differs from rank 0 and both values; 0: none.
// forms: every rank's configuration form (NULL when all digests agree).
static int flag_differs(const statement *all, const char *forms, size_t stride, int q,
                        ts_config_difference *d) {
  const statement *a = &all[0], *b = &all[q];
  memset(d, 0, sizeof *d);
  if (forms && (a->config_digest != b->config_digest || a->config_len != b->config_len) &&
      ts_config_agreement_difference(forms, forms + (size_t)q * stride, d))
    return 1;
  for (int i = 0; i < NLAYOUT; i++)
    if (a->layout[i] != b->layout[i]) {
      snprintf(d->flag, sizeof d->flag, "%s", layout_flags[i]);
      layout_value(i, a->layout[i], d->a, sizeof d->a);
      layout_value(i, b->layout[i], d->b, sizeof d->b);
      return 1;
    }
  const char *const names[2] = {"--device", "--precision"};
  const char *const va[2] = {a->device, a->precision}, *const vb[2] = {b->device, b->precision};
  for (int i = 0; i < 2; i++)
    if (strcmp(va[i], vb[i])) {
      snprintf(d->flag, sizeof d->flag, "%s", names[i]);
      snprintf(d->a, sizeof d->a, "%s", va[i]);
      snprintf(d->b, sizeof d->b, "%s", vb[i]);
      return 1;
    }
  return 0;
}

// The first way rank q's inputs differ from rank 0's, into what; 0: none.
static int input_differs(const statement *a, const statement *b, int q, char *what, size_t cap) {
  if (strcmp(a->data, b->data)) {
    snprintf(what, cap, "the data: rank 0 read %s, rank %d %s", a->data, q, b->data);
    return 1;
  }
  if (strcmp(a->tokenizer, b->tokenizer)) {
    snprintf(what, cap, "the tokenizer: rank 0's model has digest %s, rank %d's %s", a->tokenizer,
             q, b->tokenizer);
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
  char *form = NULL, *forms = NULL;
  statement *mine = malloc(sizeof *mine), *all = malloc((size_t)n * sizeof *all);
  int rc = mine && all ? state(mine, &form, cfg, lay, data, ck)
                       : ts_fail(TS_ERUNTIME, "out of memory");
  // a rank that cannot say must still take part: its statement then differs
  if (rc && mine) {
    memset(mine, 0xff, sizeof *mine);
    mine->config_len = 0;
  }
  int arc = mine && all ? ts_mpi_allgather_raw(mine, all, sizeof *mine) : rc;
  if (!rc) rc = arc;
  // A configuration that differs: every rank's form, to name the flag. All
  // ranks see the same digests, so all take this second step or none does.
  size_t stride = 0;
  int differ = 0;
  for (int q = 1; q < n && !arc; q++) {
    differ |= all[q].config_digest != all[0].config_digest || all[q].config_len != all[0].config_len;
    if (all[q].config_len + 1 > stride) stride = all[q].config_len + 1;
  }
  if (!arc && differ) {
    if (all[0].config_len + 1 > stride) stride = all[0].config_len + 1;
    char *padded = calloc(1, stride);
    forms = padded ? malloc((size_t)n * stride) : NULL;
    if (padded && form && mine->config_len) memcpy(padded, form, mine->config_len);
    int frc = forms ? ts_mpi_allgather_raw(padded, forms, stride)
                    : ts_fail(TS_ERUNTIME, "out of memory");
    free(padded);
    if (!rc) rc = frc;
  }
  ts_config_difference d;
  char what[512];
  for (int q = 1; q < n && !rc; q++)
    if (flag_differs(all, forms, stride, q, &d))
      rc = ts_fail_everywhere(TS_EUSAGE, "rank %d differs from rank 0 in %s (rank 0: %s, rank %d: "
                              "%s): every rank must be started with the same flags", q, d.flag,
                              d.a, q, d.b);
  for (int q = 1; q < n && !rc; q++)
    if (input_differs(&all[0], &all[q], q, what, sizeof what))
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
  free(forms);
  free(form);
  free(mine);
  free(all);
  return rc;
}

// What rank 0 alone did (claiming the checkpoint directory), made every
// rank's verdict: its code and message travel to all, so that a refusal ends
// every rank with rank 0's one line and exit code, instead of rank 0 aborting
// the world while the others wait in the next collective.
int ts_run_root_verdict(int rc) {
  const int n = ts_mpi_world_size();
  if (n == 1) return rc;
  typedef struct {
    int32_t rc;
    char msg[508];
  } verdict;
  verdict mine = {0}, *all = malloc((size_t)n * sizeof *all);
  if (ts_mpi_world_rank() == 0 && rc) {
    mine.rc = rc;
    snprintf(mine.msg, sizeof mine.msg, "%s", ts_errmsg());
  }
  if (!all) return ts_fail(TS_ERUNTIME, "out of memory");
  int arc = ts_mpi_allgather_raw(&mine, all, sizeof mine);
  if (!arc && all[0].rc) arc = ts_fail_everywhere(all[0].rc, "%s", all[0].msg);
  free(all);
  return arc ? arc : rc;
}
