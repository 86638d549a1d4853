// What the strategies share beyond their table (strategy.h): the
// projections and rotations several use (cp.c), the LSS family's
// attention (lss.c), and the Megatron family's layers (megatron.c).
#ifndef TS_CP_H
#define TS_CP_H
#include <stddef.h>
#include <stdint.h>

#include "strategy.h"
#include "tessera.h"

// ---- pieces several strategies share (cp.c) --------------------------------------------
// Chunks r and 2N-1-r of 2N (ring-zigzag, lss-zigzag): every rank does the
// same causal attention work.
void ts_cp_zigzag_positions(int n, int r, int T, ts_cp_runs *out);
// Q of the rank's rows (all heads, one call per head per leaf) from io->x
// into q, rotated (LLaMA).
void ts_cp_project_q(const ts_attn_io *io, float *q);
// K and V of the rank's rows from io->x into k, v; K rotated.
void ts_cp_project_kv(const ts_attn_io *io, float *k, float *v);
// RoPE on the rank's rows (io->ntok, nh heads, row stride ld) at its runs'
// positions; nothing for GPT.
void ts_cp_rope(const ts_attn_io *io, float *x, int nh, int ld);

// ---- the LSS family (lss.c; its balanced layout: lss_zigzag.c) --------------------------
// What tells the variants apart (each table's `opts`): the ablations
// concatenate the attention outputs of the group (lss-fused, lss-basic), and
// gather K and V separately, un-fused (lss-basic, lss-unfused).
typedef struct {
  int concat, separate_kv;
} ts_lss_opts;
extern const ts_lss_opts ts_lss_plain, ts_lss_fused, ts_lss_basic, ts_lss_unfused;
static inline const ts_lss_opts *ts_lss_opts_of(const ts_attn_io *io) { return io->cp->opts; }
// The ablations' concatenation: the group's attention outputs gathered (in
// rank order: rank q's rows are its block, whatever positions they hold), the
// rank going on from its own rows of them (io->scratch: the group's rows);
// and its backward, the gradient of the whole output reduce-scattered.
int ts_lss_concat_forward(const ts_attn_io *io, float *att);
int ts_lss_concat_backward(const ts_attn_io *io, float *datt);

// A rank's queries, its runs (rows k·len on: run k at position runs->pos[k]),
// against the whole sequence's keys k, v: one kernel call per run, of `rank`
// (ts_cp_attn_shape) with Tq and q0 set to the run's. lse is (H, len) run
// after run. The model's lss and lss-zigzag and bench/attention's --layout
// make exactly these calls.
void ts_lss_attention_forward(const ts_backend *be, ts_ws *ws, const ts_attn_shape *rank,
                              const ts_cp_runs *runs, float *att, float *lse, const float *q,
                              const float *k, const float *v);
// The backward: run k's dQ into its rows, its partials of dK and dV over every
// key row at dk + k·dkv_run, dv + k·dkv_run. TS_OK, or an error (out of memory).
int ts_lss_attention_backward(const ts_backend *be, ts_ws *ws, const ts_attn_shape *rank,
                              const ts_cp_runs *runs, float *dq, float *dk, float *dv,
                              size_t dkv_run, float *dsum, const float *datt, const float *q,
                              const float *k, const float *v, const float *att,
                              const float *lse);
// ---- the Megatron tensor split (megatron.c; the LSS paper's baseline: megatron_2022.c) ---
// What tells the variants apart (each table's `opts`). recompute: keep nothing
// of a layer but its input (one slot of activations for all layers); the
// backward runs the layer's forward again, collectives included, before its
// own. attn_forward / attn_backward: the attention of the rank's heads on the
// gathered sequence, q, k, v, att (T, Kl) as `as` says; NULL: the backend's
// tiled kernels. attn_forward leaves in *probs (probs not NULL: the replay)
// what the backward reads, which attn_backward frees; both return TS_OK or an
// error (attn_backward: nonzero, reported once the backward's collectives are done).
typedef struct {
  int recompute;
  int (*attn_forward)(const ts_attn_io *at, const ts_attn_shape *as, float *att, const float *q,
                      const float *k, const float *v, float **probs);
  int (*attn_backward)(const ts_attn_io *at, const ts_attn_shape *as, float *dq, float *dk,
                       float *dv, const float *datt, const float *q, const float *k,
                       const float *v, float *probs);
} ts_megatron_opts;
extern const ts_megatron_opts ts_megatron_plain;
// Its table's functions, which the variants' tables share.
int ts_megatron_check(const ts_config *cfg, ts_layout *lay);
int ts_megatron_split(const ts_attn_io *io, const ts_tensor *t, ts_cp_block *out);
void ts_megatron_sizes(const ts_attn_io *io, ts_cp_sizes *out);
int ts_megatron_create(const ts_attn_io *io, const ts_seq_shard *sp, void **state);
size_t ts_megatron_bytes(const ts_attn_io *io);
void ts_megatron_traffic(const ts_attn_io *io, const ts_seq_shard *sp, ts_comm_count *fwd,
                         ts_comm_count *bwd);
void ts_megatron_incall(const ts_attn_io *io, const ts_seq_shard *sp, ts_cp_incall *out);
void ts_megatron_destroy(const ts_attn_io *io);
int ts_megatron_layer_forward(const ts_layer_io *io);
int ts_megatron_layer_backward(const ts_layer_io *io);
#endif
