// Where the model's kernels run: a backend is a table of the kernels.h
// operations plus how to allocate the buffers they work in (ggml's backend
// struct of function pointers). The model calls its kernels through the
// table it was created with, so the same model code, every parallel strategy
// included, runs on the CPU or on a GPU.
//
// The CUDA backend allocates the model's buffers as CUDA managed memory:
// host code that touches them (the optimizer, the collectives, the
// checkpoints, the tree sums written for the CPU) stays correct, and the
// kernels in this table run on the device. Every operation returns with its
// work finished, so host code may read what it wrote.
#ifndef TS_BACKEND_H
#define TS_BACKEND_H
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "orthogonal.h"

typedef enum { TS_PRECISION_FP32 = 0, TS_PRECISION_BF16 } ts_precision;

typedef struct ts_backend {
  const char *name; // "cpu", "cuda"
  void *(*alloc)(size_t bytes); // NULL when out of memory
  void (*free)(void *p);
  // dst = a + b element-wise (dst may alias either); dst = src.
  void (*add)(float *dst, const float *a, const float *b, int64_t n);
  void (*copy)(void *dst, const void *src, size_t bytes);
  // kernels.h, one for one
  void (*encoder_forward)(float *out, const int *tokens, const float *wte, const float *wpe,
                          int B, int T, int C);
  int (*encoder_backward_wpe)(ts_ws *ws, float *dwpe, const float *dout, int B, int T, int C);
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, int64_t ntok, int C);
  int (*layernorm_backward)(ts_ws *ws, float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int64_t ntok, int C);
  void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w,
                          int64_t ntok, int C);
  int (*rmsnorm_backward)(ts_ws *ws, float *dinp, float *dw, const float *dout,
                          const float *inp, const float *w, const float *rstd, int64_t ntok,
                          int C);
  void (*linear_forward)(float *out, const float *inp, const float *W, const float *b,
                         int64_t ntok, int C, int OC, int rows);
  void (*linear_forward_heads)(float *out, const float *inp, const float *W, const float *b,
                               int64_t ntok, int C, int OC, int hd, int rows);
  void (*linear_forward_head_list)(float *out, int ld, const float *inp, const float *W,
                                   const float *b, const int *heads, int n, int64_t ntok,
                                   int C, int hd, int rows);
  void (*linear_backward_input)(float *dinp, const float *dout, const float *W, int64_t ntok,
                                int C, int OC, int rows, int accumulate);
  int (*linear_backward_weights)(ts_ws *ws, float *dW, float *db, const float *dout,
                                 const float *inp, int64_t ntok, int C, int OC);
  void (*gelu_forward)(float *out, const float *inp, int64_t n);
  void (*gelu_backward)(float *dinp, const float *inp, const float *dout, int64_t n);
  void (*swiglu_forward)(float *h, const float *g, const float *u, int64_t n);
  void (*swiglu_backward)(float *dg, float *du, const float *g, const float *u,
                          const float *dh, int64_t n);
  void (*rope_forward)(float *x, int64_t ntok, int T, int t0, int nh, int dh, int ld,
                       const float *cs);
  void (*rope_backward)(float *dx, int64_t ntok, int T, int t0, int nh, int dh, int ld,
                        const float *cs);
  void (*dropout_apply)(float *x, int64_t n, float p, uint64_t seed, uint32_t purpose,
                        uint64_t step, uint64_t base);
  void (*attention_forward)(ts_ws *ws, float *out, float *lse, const float *q, const float *k,
                            const float *v, const ts_attn_shape *s);
  int (*attention_backward)(ts_ws *ws, float *dq, float *dk, float *dv, float *dsum,
                            const float *dout, const float *q, const float *k, const float *v,
                            const float *out, const float *lse, const ts_attn_shape *s);
  void (*crossentropy_forward)(float *losses, const float *logits, const int *targets,
                               int64_t ntok, int V);
  void (*crossentropy_backward)(float *dlogits, const float *logits, const int *targets,
                                float scale, int64_t ntok, int V);
  // AdamW on one tensor's n floats (optim.h, ts_adamw_elements)
  void (*adamw)(float *p, const float *g, float *m, float *v, int64_t n, float decay,
                float beta1, float beta2, float step_size, float bc2_sqrt, float eps);
  // One Muon update of a 2-D weight (orthogonal.h, ts_muon_update); scratch is
  // the CPU's (ts_ortho_scratch floats), unused by backends with their own.
  void (*muon_update)(float *p, const float *g, float *buf, int rows, int cols, float lr,
                      float wd, float beta, ts_ortho how, int steps, float *scratch);
  // Optional (NULL: the model sums the token embedding's gradient with the
  // CPU's canonical leaf tree, encoder_wte_leaf_scatter). dwte (V, C) (+)= the
  // rows of dout (ntok, C) summed by token, each token's rows in row order.
  void (*embedding_backward)(float *dwte, const float *dout, const int *tokens, int64_t ntok,
                             int V, int C, int accumulate);
  // Optional (NULL: the caller's host loops). part[c] = Σ g[i]² in double over
  // chunk c = [c·chunk, min(n, (c+1)·chunk)), in index order: the CPU's bits
  // (optim.c, the gradient norm). And x[i] *= by (the clip).
  void (*sumsq_chunks)(double *part, const float *g, size_t n, size_t chunk);
  void (*scale)(float *x, size_t n, float by);
  // Optional (NULL: the buffers are in host memory, which the model measures
  // itself). This process's share of the memory its buffers live in (its
  // GPU's, divided among the ranks that share the GPU), and the peak of the
  // bytes allocated with alloc so far.
  size_t (*memory_bytes)(void);
  size_t (*peak_bytes)(void);
} ts_backend;

// The CPU reference (src/cpu/backend_cpu.c): the kernels.h functions.
extern const ts_backend ts_backend_cpu;

// The backend models take when created: the CPU unless set (one device per
// process, chosen once by the command line).
void ts_backend_set(const ts_backend *be);
const ts_backend *ts_backend_current(void);

// The backend for `--device` ("cpu" or "cuda") and `--precision`. The CUDA
// one is set up on first use: it picks GPU local_rank % devices (local_rank:
// this process's index among the MPI ranks on its node, 0 without MPI), so
// with more ranks than GPUs on a node some ranks share one.
// Errors name the flag: a build without CUDA, a machine without a GPU,
// bf16 on the CPU. Returns TS_OK or an error code with a message.
int ts_backend_get(const char *device, ts_precision precision, const ts_backend **out);

// The precision of the last backend ts_backend_get gave ("fp32", "bf16"),
// for the run log.
const char *ts_backend_precision_name(void);

// Whether the process groups move data with NCCL: the CUDA backend with a
// GPU of its own for every rank of the node. Ranks that share a GPU (more
// ranks than GPUs: NCCL refuses two ranks on one device) use MPI over the
// managed buffers instead.
int ts_backend_uses_nccl(void);

// One line per CUDA device ("0: NVIDIA H200, 139.8 GiB, sm_90"), or why there
// are none, into buf; for `tessera info`. Returns the number of devices.
int ts_backend_cuda_describe(char *buf, size_t cap);
#endif
