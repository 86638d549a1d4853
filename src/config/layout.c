// The parallel layout (ts_layout, tessera.h): the --sp-mode names and the
// rules a layout must follow to be exact; each strategy adds its own
// (src/cp/strategy.h).
#include <stdio.h>
#include <string.h>

#include "boundary/boundary.h"
#include "cp/strategy.h"
#include "tessera.h"

static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

int ts_sp_mode_parse(const char *name, ts_sp_mode *out) {
  char list[256] = "";
  for (int i = 0; i < TS_SP_NMODES; i++) {
    if (strcmp(name, ts_sp_mode_names[i]) == 0) {
      *out = (ts_sp_mode)i;
      return TS_OK;
    }
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
             i == 0 ? "" : i == TS_SP_NMODES - 1 ? " or " : ", ", ts_sp_mode_names[i]);
  }
  return ts_fail(TS_EUSAGE, "--sp-mode %s: must be %s", name, list);
}

// ---------------------------------------------------------------------------
// The layout. Data parallelism is exact when every rank's gradient leaves
// form an aligned subtree of the serial tree (docs/EXACTNESS.md R3): each rank holds
// batch/dp whole sequences, i.e. (batch/dp)·(seq/leaf) leaves, and that count
// must be a power of two (dp may be any number). --fast lets MPI sum, so it
// needs only whole sequences per rank.
// A strategy's own setting (its `own_flags`), given while another strategy
// runs, is refused naming the strategies that take it.
static int foreign_setting(const ts_layout *lay, const char *flag, int given) {
  if (!given) return TS_OK;
  const ts_cp *cp = lay->sp > 1 ? ts_cp_get(lay->sp_mode) : NULL;
  if (cp && cp->own_flags && strstr(cp->own_flags, flag)) return TS_OK;
  char owners[128] = "";
  for (int i = 0; i < TS_SP_NMODES; i++) {
    const ts_cp *o = ts_cp_get((ts_sp_mode)i);
    if (o->own_flags && strstr(o->own_flags, flag))
      snprintf(owners + strlen(owners), sizeof owners - strlen(owners), "%s%s",
               owners[0] ? " or " : "", o->name);
  }
  return ts_fail(TS_EUSAGE, "%s: only with --sp N --sp-mode %s", flag, owners);
}

// --zero S (docs/ALGORITHMS.md §12): the state sharded over the replica
// group, the dp·sp ranks of a stage that hold the same parameters.
static int check_zero(const ts_config *cfg, const ts_layout *lay) {
  if (lay->zero == 0) return TS_OK;
  if (lay->zero < 0 || lay->zero > 3)
    return ts_fail(TS_EUSAGE, "--zero %d: must be 0, 1, 2 or 3", lay->zero);
  if (lay->dp * lay->sp < 2)
    return ts_fail(TS_EUSAGE, "--zero %d: needs ranks that hold the same parameters to shard "
                   "over (--dp or --sp above 1)", lay->zero);
  if (lay->zero < 2) return TS_OK;
  const ts_boundary *bd = ts_boundary_get(cfg->compress);
  // the confinement after a step projects every stream writer on every
  // replica: stage 3 holds only a shard of each between the passes
  if (lay->zero == 3 && bd && bd->confines_stream)
    return ts_fail(TS_EUSAGE, "--zero 3 with --compress %s: its confinement projects whole "
                   "weights on every replica after the step; use --zero 1 or 2", bd->name);
  // a codec's tensors follow its stage's last layer (boundary.h): under --pp
  // after the stage's layers, ends that stay whole; in one model of several
  // compressed stages between the layers, which stages 2 and 3 hold as one run
  if (lay->pp == 1 && bd && bd->tensors)
    return ts_fail(TS_EUSAGE, "--zero %d with --compress %s: only under --pp (without it the "
                   "codec's tensors lie between the layers, which --zero 2 and 3 shard as one "
                   "run); use --pp %d or --zero 1", lay->zero, ts_compress_names[cfg->compress],
                   cfg->compress_stages);
  // stages 2 and 3 sum a layer's gradient as its backward ends
  // (src/dist/zero.c). Several passes a step (a pipeline's microbatches
  // always) go in rounds of the data group's ranks, each round one aligned
  // run of the serial tree: powers of two
  const int nb = cfg->batch / lay->dp;
  if (nb < 1) return TS_OK; // fewer sequences than data ranks: refused below (check_ranks)
  const int passes = lay->sp > 1 ? nb : lay->microbatches, s = lay->sp > 1 ? 1 : nb / passes;
  const int pow2 = (lay->dp & (lay->dp - 1)) == 0 && s > 0 && (s & (s - 1)) == 0;
  const int rounds = (passes > 1 || lay->pp > 1) && nb % passes == 0; // (else refused below)
  if (rounds && !pow2 && lay->sp > 1)
    return ts_fail(TS_EUSAGE, "--zero %d with --sp %d and %d sequences a data rank: the data "
                   "ranks (--dp %d) must be a power of two, or use --zero 1", lay->zero, lay->sp,
                   nb, lay->dp);
  if (rounds && !pow2)
    return ts_fail(TS_EUSAGE, "--zero %d with --microbatches %d: the data ranks (--dp %d) and a "
                   "microbatch's sequences (%d) must be powers of two, or use --zero 1", lay->zero,
                   passes, lay->dp, s);
  return TS_OK;
}

// The rules of the ranks, the stages and the strategy.
static int check_ranks(const ts_config *cfg, ts_layout *lay) {
  if (lay->dp < 1) return ts_fail(TS_EUSAGE, "--dp %d: must be >= 1", lay->dp);
  if (lay->sp < 1) return ts_fail(TS_EUSAGE, "--sp %d: must be >= 1", lay->sp);
  if (lay->pp < 1) return ts_fail(TS_EUSAGE, "--pp %d: must be >= 1", lay->pp);
  if (lay->microbatches < 1)
    return ts_fail(TS_EUSAGE, "--microbatches %d: must be >= 1", lay->microbatches);
  int rc = foreign_setting(lay, "--ulysses-degree", lay->ulysses_degree != 0);
  if (!rc) rc = foreign_setting(lay, "--upipe-u", lay->upipe_u != 0);
  if (!rc) rc = foreign_setting(lay, "--upipe-schedule", lay->upipe_sched != -1);
  if (rc) return rc;
  if ((rc = check_zero(cfg, lay))) return rc;
  if (cfg->compress != TS_COMPRESS_NONE && lay->pp > 1 && lay->pp != cfg->compress_stages)
    return ts_fail(TS_EUSAGE, "--pp %d with --compress-stages %d: a pipeline's stages are the "
                   "compressed model's stages", lay->pp, cfg->compress_stages);
  if (cfg->compress != TS_COMPRESS_NONE && lay->sp > 1)
    return ts_fail(TS_EUSAGE, "--compress %s with --sp %d: compression runs on the serial, data- "
                   "and pipeline-parallel layouts", ts_compress_names[cfg->compress], lay->sp);
  // whole sequences per data rank, before anything counts them
  if (lay->dp > 1 && cfg->batch % lay->dp != 0)
    return ts_fail(TS_EUSAGE,
                   "--batch %d: must be divisible by --dp %d (each rank holds whole sequences)",
                   cfg->batch, lay->dp);
  if (lay->pp > 1 || lay->microbatches > 1) {
    // Pipeline parallelism (docs/ALGORITHMS.md §6): stages of whole layers; the
    // microbatches split each data rank's sequences, and each must be an
    // aligned power-of-two run of gradient leaves (a subtree). Without --pp
    // they are gradient accumulation: the same microbatches one after another.
    const int P = lay->pp, M = lay->microbatches, nb = cfg->batch / (lay->dp > 0 ? lay->dp : 1);
    if (cfg->n_layer % P != 0)
      return ts_fail(TS_EUSAGE, "--pp %d: the %d layers must divide into %d stages", P,
                     cfg->n_layer, P);
    if (lay->sp > 1 && M != nb && (P > 1 || M > 1))
      return ts_fail(TS_EUSAGE, "--microbatches %d with --sp %d: a microbatch is one sequence "
                     "(a sequence-parallel rank runs its sequences one at a time), so "
                     "--microbatches must be the %d sequences of each data rank%s",
                     M, lay->sp, nb, P > 1 ? "" : ", or 1");
    if (nb % M != 0)
      return ts_fail(TS_EUSAGE, "--microbatches %d: must divide the %d sequences of each data rank",
                     M, nb);
    long long leaves = (long long)(nb / M) * (cfg->seq / cfg->leaf);
    if (!cfg->fast && (leaves & (leaves - 1)) != 0)
      return ts_fail(TS_EUSAGE, "--microbatches %d: each microbatch holds %d sequences x %d "
                                "leaves = %lld gradient leaves, not a power of two",
                     M, nb / M, cfg->seq / cfg->leaf, leaves);
  }
  if (lay->sp > 1) {
    // Sequence parallelism (docs/ALGORITHMS.md §2): rank s holds positions
    // [s·T/N, (s+1)·T/N). Its gradient leaves and its query tiles must each
    // be an aligned power-of-two run, so that its sums (weights over leaves,
    // dK/dV over query tiles) are subtrees of the serial trees.
    const int N = lay->sp, T = cfg->seq;
    if (!cfg->fast && !is_pow2(N))
      return ts_fail(TS_EUSAGE,
                     "--sp %d: must be a power of two (exact sequence parallelism combines the "
                     "segments as a binary tree; --fast lifts this)",
                     N);
    if (T % N != 0 || (T / N) % cfg->tile != 0 || (T / N) % cfg->leaf != 0)
      return ts_fail(TS_EUSAGE,
                     "--seq %d: must split into --sp %d segments of whole tiles (%d) and leaves "
                     "(%d); T/N = %g",
                     T, N, cfg->tile, cfg->leaf, (double)T / N);
    if (!cfg->fast && (!is_pow2((T / N) / cfg->tile) || !is_pow2((T / N) / cfg->leaf)))
      return ts_fail(TS_EUSAGE,
                     "--seq %d with --sp %d: each segment of %d tokens must hold a power of two "
                     "of tiles (%d) and of leaves (%d), so that its sums are subtrees of the "
                     "serial trees",
                     T, N, T / N, cfg->tile, cfg->leaf);
    // the strategy's own rules (src/cp/, strategy.h)
    const ts_cp *cp = ts_cp_get(lay->sp_mode);
    int rc;
    if (!cp) return ts_fail(TS_EUSAGE, "--sp-mode: no strategy %d", (int)lay->sp_mode);
    if (cp->check && (rc = cp->check(cfg, lay))) return rc;
  }
  // Any number of data ranks: the tree over them has empty positions past
  // the last (comm_tree.h), as the serial tree over the batch's leaves has
  // empty leaves past the last, so each rank's aligned subtree sits where
  // the serial tree has it.
  const int D = lay->dp;
  if (D == 1) return TS_OK;
  long long per_rank = (long long)(cfg->batch / D) * (cfg->seq / cfg->leaf);
  if (!cfg->fast && (per_rank & (per_rank - 1)) != 0)
    return ts_fail(TS_EUSAGE,
                   "--batch %d with --dp %d: each rank holds %d sequences x %d leaves = %lld "
                   "gradient leaves, not a power of two, so its sums are not a subtree of the "
                   "serial tree; choose --batch so that batch/dp x seq/leaf is a power of two",
                   cfg->batch, D, cfg->batch / D, cfg->seq / cfg->leaf, per_rank);
  return TS_OK;
}

// What a device has not built: the host-only strategies (strategy.h) and the
// --zero stages that give a layer's host pages back between uses.
static int check_device(const ts_config *cfg, const ts_layout *lay, const char *device) {
  if (strcmp(device, "cpu") == 0) return TS_OK;
  const ts_boundary *bd = ts_boundary_get(cfg->compress);
  if (bd && bd->confines_stream) // the update and the projections are host loops
    return ts_fail(TS_EUSAGE, "--compress %s with --device %s: not built (its optimizer and its "
                   "confinement run on the host)", bd->name, device);
  if (lay->zero >= 2)
    return ts_fail(TS_EUSAGE, "--zero %d with --device %s: not built (stages 2 and 3 give a "
                   "layer's host pages back between uses; use --zero 1)", lay->zero, device);
  if (lay->sp > 1 && ts_cp_get(lay->sp_mode)->host_only)
    return ts_fail(TS_EUSAGE, "--sp-mode %s with --device %s: not built (the exact contiguous LSS modes "
                   "are)", ts_sp_mode_names[lay->sp_mode], device);
  return TS_OK;
}

int ts_layout_check(const ts_config *cfg, ts_layout *lay, const char *device) {
  int rc = check_ranks(cfg, lay);
  if (!rc) rc = check_device(cfg, lay, device ? device : "cpu");
  return rc;
}
