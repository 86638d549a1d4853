// CPU kernels of the reference model: forward/backward pairs, outputs first,
// sizes last. Every kernel follows the exactness contract (docs/EXACTNESS.md):
//   R1  every matrix product is the canonical one (src/cpu/mm.h): one fma
//       chain per element over k ascending, so its bits do not depend on the
//       call's shape, the threads or the CPU; `rows` arguments that still
//       name a block of rows (the leaf, the tile) no longer change a result;
//   R2  attention visits key tiles from the diagonal down with online softmax;
//   R3  sums over tokens are canonical trees over leaves of `leaf` rows.
// Rows are tokens in (batch, position) order; `ntok` = B*T is a multiple of
// the tile and of the leaf, and tiles/leaves never straddle two sequences.
#ifndef TS_KERNELS_H
#define TS_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#include "exact/tree.h"

// Scratch shared by the kernels of one model: per-thread leaf buffers and one
// tree, sized for the largest weight matrix.
typedef struct {
  int tile, leaf;
  int nthreads;
  size_t leaf_cap;    // floats of the largest leaf partial
  float *sumbuf;      // leaf_cap floats: where a tree sum lands before it is split up
  ts_tree tree;       // n = leaf_cap (re-initialised per use with ts_tree_init_n)
  size_t attn_cap;    // floats of attention scratch per thread
  float **attnbuf;    // nthreads buffers
  ts_tree *attntree;  // nthreads trees of 2*tile*dh floats (dK|dV over query tiles)
} ts_ws;

// Per-thread scratch is sized for omp_get_max_threads() now; the kernels run
// their parallel loops on exactly that many threads whatever is set later.
int ts_ws_init(ts_ws *ws, int tile, int leaf, size_t max_leaf_floats, int dh);
void ts_ws_free(ts_ws *ws);
// The workspace's bytes at their most (the memory estimate's count of it):
// the leaf vector, the tree's pool of partials when the largest sum is over
// nleaves leaves (ts_tree_window_peak: about log2 of them, each the size of
// the largest leaf partial), and each thread's attention scratch and tree
// over query_tiles tiles.
size_t ts_ws_bytes(int nthreads, int tile, int dh, size_t max_leaf_floats, int64_t nleaves,
                   int64_t query_tiles);

// Sums per-leaf partials of n floats in canonical order: leaf_fn(ctx, i, out)
// writes leaf i's partial (all n floats) into out; the result goes to `sum`.
// Leaves are computed in parallel, pushed in order.
typedef void (*ts_leaf_fn)(const void *ctx, int64_t leaf_index, float *out);
int ts_leaf_tree_sum(ts_ws *ws, float *sum, size_t n, int64_t nleaves, ts_leaf_fn fn,
                     const void *ctx);
// The same as the backend's leaf_sum: fn's partial is pieces of len[0],
// len[1], ... floats one after another, and piece k's sum goes to dst[k]
// (NULL: dropped). nparts 0: fn(ctx, i, NULL) for every leaf, the leaves'
// work alone. The leaves run on ws->nthreads threads at once; fn finds its
// thread's scratch by omp_get_thread_num(). Returns 0, or -1 when out of memory.
int ts_leaf_sum(ts_ws *ws, float *const *dst, const size_t *len, int nparts, int64_t nleaves,
                ts_leaf_fn fn, const void *ctx);

// ---- encoder -----------------------------------------------------------------------
// out (ntok, C) = wte[tok] + wpe[pos]; tokens (B, T); wpe NULL: wte[tok] alone.
void encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                     int B, int T, int C);
// dwpe (T, C) = canonical tree over (batch, position) leaves of dout rows.
int encoder_backward_wpe(ts_ws *ws, float *dwpe, const float *dout, int B, int T, int C);
// Adds, into leaf partial `out` (V, C), the scatter of dout rows of that leaf by token.
void encoder_wte_leaf_scatter(float *out, const float *dout, const int *tokens,
                              int64_t leaf_index, int leaf, int C);
// dwte (V, C) = dlogitsᵀ · x (the tied LM head's gradient; dlogits NULL: none)
// plus dout's rows scattered by token: one canonical tree over leaves whose
// partial is the leaf's product and then its scatter.
int encoder_backward_wte(ts_ws *ws, float *dwte, const float *dout, const int *tokens,
                         const float *dlogits, const float *x, int64_t ntok, int V, int C);

// ---- layernorm ---------------------------------------------------------------------
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int64_t ntok, int C);
// dinp = backprop of dout (overwrites); dw, db via canonical trees over leaves.
int layernorm_backward(ts_ws *ws, float *dinp, float *dw, float *db, const float *dout,
                       const float *inp, const float *w, const float *mean,
                       const float *rstd, int64_t ntok, int C);

// ---- linear: out = inp · Wᵀ + b, W (OC, C) ------------------------------------------
void linear_forward(float *out, const float *inp, const float *W, const float *b,
                    int64_t ntok, int C, int OC, int rows);
// Same result as linear_forward, head by head (hd output columns each): any
// subset of heads projected alone gives the same bits (R1).
void linear_forward_heads(float *out, const float *inp, const float *W, const float *b,
                          int64_t ntok, int C, int OC, int hd, int rows);
// The same for a list of n heads (heads NULL: 0..n-1), head k's columns of
// the output at k·hd of rows `ld` floats apart (the head-parallel layers
// project any subset of heads into a packed buffer): the same bits per head.
void linear_forward_head_list(float *out, int ld, const float *inp, const float *W,
                              const float *b, const int *heads, int n, int64_t ntok, int C,
                              int hd, int rows);
// dinp = dout · W (beta 0) or dinp += dout · W (accumulate = 1).
void linear_backward_input(float *dinp, const float *dout, const float *W, int64_t ntok,
                           int C, int OC, int rows, int accumulate);
// dW = Σ_leaves dout_leafᵀ · inp_leaf, db = Σ_leaves Σ_rows dout (db may be NULL).
int linear_backward_weights(ts_ws *ws, float *dW, float *db, const float *dout,
                            const float *inp, int64_t ntok, int C, int OC);
// One leaf's weight-gradient partial: out (OC, C) = dout_leafᵀ · inp_leaf.
void linear_weight_leaf(float *out, const float *dout, const float *inp, int64_t leaf_index,
                        int leaf, int C, int OC);

// out (cols) (+)= x (rows, cols)'s rows summed in row order, column by column
// (accumulate 0: from the first row; 1: onto out): the bias gradients' sums.
void column_sum(float *out, const float *x, int64_t rows, int cols, int accumulate);

// ---- general products (matmul.c) ----------------------------------------------------------
// out (M, N; ldc) = op(A) · op(B) (beta 0) or out + op(A) · op(B) (beta 1; no
// other beta), the canonical product (R1) on the OpenMP threads. op(A) is
// (M, K): A is (M, K) with lda, or (K, M) when transA; op(B) is (K, N) likewise.
void matmul(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B,
            int ldb, float beta, float *out, int ldc);

// ---- GeLU (tanh form) -----------------------------------------------------------------
void gelu_forward(float *out, const float *inp, int64_t n);
void gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n);

// ---- dropout -------------------------------------------------------------------------
// Keeps element i when ts_rng_uniform(seed, purpose, step, base + i) >= p and
// scales it by 1/(1-p). In place; p = 0 is the identity.
void dropout_apply(float *x, int64_t n, float p, uint64_t seed, uint32_t purpose,
                   uint64_t step, uint64_t base);

// ---- attention (causal, multi-head) --------------------------------------------------
// q, out (B, Tq, H*dh) hold the query positions [q0, q0 + Tq); k, v (B, Tk, H*dh)
// the key positions [0, Tk), with q0 + Tq <= Tk; lse (B, H, Tq). The serial
// model has Tq = Tk = T, q0 = 0; a sequence-parallel rank holds a segment of
// queries against the whole sequence's keys (docs/ALGORITHMS.md §2). The H heads
// here are heads [h0, h0 + H) of the model's Hg (tensor-split baselines).
// Grouped-query attention: k, v hold Hkv heads (B, Tk, Hkv*dh) and query
// head h reads key/value head h / (H/Hkv); h0 must then be a multiple of
// H/Hkv. Fields left 0 take the serial values (Tq = Tk = T, Hg = H, Hkv = H).
typedef struct {
  int B, T, H, dh;        // T: the full sequence length (dropout indices)
  int tile;
  float dropout;          // on the probabilities
  uint64_t seed, step;    // dropout key
  uint64_t index_base;    // global index of element (b=0,h=0,i=0,j=0) for this layer
  int Tq, q0, Tk;         // query rows, first query position, key rows (per sequence)
  int h0, Hg;             // first head, heads of the model
  int Hkv;                // key/value heads here
  int ldq, ldkv, ldo;     // row strides of q and dq, of k, v, dk and dv, of out and
                          // dout (0: H*dh, Hkv*dh and ldq, i.e. packed rows)
  int k0;                 // k, v hold key positions [k0, k0 + Tk) (ring attention's
                          // blocks; 0 otherwise). Queries see only those keys.
  int dq_acc;             // backward: dq already holds the terms of the keys after
                          // k0 + Tk (the blocks of an exact ring before this one),
                          // and this block's terms are added to it in the serial
                          // order; 0: dq is overwritten
} ts_attn_shape;
// The shape with its defaults filled in (fields left 0 take the serial
// values); every backend's attention starts from it.
static inline ts_attn_shape ts_attn_resolved(const ts_attn_shape *in) {
  ts_attn_shape s = *in;
  if (s.Tq == 0) s.Tq = s.T;
  if (s.Tk == 0) s.Tk = s.T;
  if (s.Hg == 0) s.Hg = s.H;
  if (s.Hkv == 0) s.Hkv = s.H;
  if (s.ldq == 0) s.ldq = s.H * s.dh;
  if (s.ldkv == 0) s.ldkv = s.Hkv * s.dh;
  if (s.ldo == 0) s.ldo = s.ldq;
  return s;
}
void attention_forward(ts_ws *ws, float *out, float *lse, const float *q, const float *k,
                       const float *v, const ts_attn_shape *s);
// attention_forward one block of keys at a time (exact ring attention,
// src/cp/ring.h): calls for the blocks [k0, k0 + Tk) of a descending
// walk (each block's keys before the previous block's) carry each query
// row's online-softmax state from one to the next exactly as the serial
// kernel carries it from one key tile to the next, so the last call leaves
// the serial out and lse. The state: acc (B, Tq, ldo), the unnormalised
// output, and m, l (B, H, Tq), the running max and sum. first: start it
// afresh (acc, m, l are not read); otherwise continue it. last: finish it,
// acc becoming the output and m the lse; otherwise leave it for the next
// block (l is not used when first and last are both set).
void attention_forward_block(ts_ws *ws, float *acc, float *m, float *l, const float *q,
                             const float *k, const float *v, const ts_attn_shape *s, int first,
                             int last);
// dq overwritten (s->dq_acc: added to); dk, dv overwritten for every key row. Under GQA the leaf
// of key tile kt's tree at query tile qt is the sum over the group's query
// heads, in head order, of their (qt, kt) terms; the tree then runs over
// query tiles. Rows that no local
// query sees get -0.0, the exact identity of addition, so that a later sum
// over ranks (reduce-scatter) treats them as empty (R3). Each key tile's
// dK/dV is the canonical tree over the local query tiles, an aligned subtree
// of the serial tree when Tq/tile is a power of two and q0 a multiple of Tq.
// dsum (B, H, Tq) is scratch for rowsum(dout ∘ out).
int attention_backward(ts_ws *ws, float *dq, float *dk, float *dv, float *dsum,
                       const float *dout, const float *q, const float *k, const float *v,
                       const float *out, const float *lse, const ts_attn_shape *s);
// Ring attention's merge of two results over disjoint keys (attention_merge.c):
// out (rows × H heads of dh, row stride ldo), lse (H × rows) ← the merge of
// themselves with (out_b, lse_b) by their log-sum-exp, row by row and head by
// head: out ← out − σ(lse_b − lse)·(out − out_b), lse ← log(e^lse + e^lse_b).
void ring_merge(float *out, float *lse, const float *out_b, const float *lse_b, int rows, int H,
                int dh, int ldo);

// ---- RMSNorm (LLaMA) ------------------------------------------------------------------
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t ntok,
                     int C);
// dinp overwritten; dw via the canonical tree over leaves.
int rmsnorm_backward(ts_ws *ws, float *dinp, float *dw, const float *dout, const float *inp,
                     const float *w, const float *rstd, int64_t ntok, int C);

// ---- rotary position embedding (LLaMA) --------------------------------------------------
// cs (T, dh/2, 2): cos and sin of t·θ^(−2i/dh), computed in double, rounded.
void rope_table(float *cs, int T, int dh, double theta);
// x: ntok rows (sequences of T rows; row r at position t0 + r % T) of nh heads
// of dh features, row stride ld; rotated in place (backward: rotated back).
void rope_forward(float *x, int64_t ntok, int T, int t0, int nh, int dh, int ld, const float *cs);
void rope_backward(float *dx, int64_t ntok, int T, int t0, int nh, int dh, int ld,
                   const float *cs);

// ---- SwiGLU (LLaMA) ----------------------------------------------------------------------
// h = silu(g) ⊙ u, element-wise.
void swiglu_forward(float *h, const float *g, const float *u, int64_t n);
// dg (may alias dh), du from dh.
void swiglu_backward(float *dg, float *du, const float *g, const float *u, const float *dh,
                     int64_t n);

// ---- AdamW (adamw.c) --------------------------------------------------------------------
// The element-wise AdamW update of n floats: p ← p·decay − step_size·m/(√v /
// bc2_sqrt + eps) after the moment updates (the scalars: ts_adamw_scalars).
void ts_adamw_elements(float *p, const float *g, float *m, float *v, int64_t n, float decay,
                       float beta1, float beta2, float step_size, float bc2_sqrt, float eps);

// ---- cross-entropy over V classes ---------------------------------------------------
// losses (ntok) per token; dlogits (ntok, V) = (softmax - onehot) * scale, written in
// place over logits when dlogits == logits is wanted (pass the same pointer).
void crossentropy_forward(float *losses, const float *logits, const int *targets,
                          int64_t ntok, int V);
void crossentropy_backward(float *dlogits, const float *logits, const int *targets,
                           float scale, int64_t ntok, int V);
// Canonical-tree sum of per-token values (leaf partial = in-order sum of its rows).
float token_tree_sum(const float *vals, int64_t ntok, int leaf);
#endif
