// tessera: exact distributed training of long-sequence transformers.
// Public API: configuration, errors, the model and the run.
#ifndef TESSERA_H
#define TESSERA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// ---------------------------------------------------------------------------
// Errors. Library functions return TS_OK or an error code and leave a one-line
// message in a thread-local buffer; only main() prints it and exits. Control
// characters of what a message quotes (a name read from a file, a path) are
// written as escapes (\n, \xNN), so that it stays one line.
enum {
  TS_OK = 0,
  TS_ERUNTIME = 1, // bad file, I/O, allocation, numerical failure
  TS_EUSAGE = 2,   // bad flag or flag value
  TS_ESTOPPED = 3, // ts_train stopped by a signal after a whole step (ts_train_stop_signal)
};
int ts_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *ts_errmsg(void);
// The same, for an error every rank finds at once with the same message (the
// ranks' agreement at start-up): said once, by rank 0, and no rank is killed.
int ts_fail_everywhere(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Whether the last error was made so.
int ts_error_everywhere(void);
// The last error said again with the flag that named its file: "PATH: why"
// becomes "FLAG PATH: why" (any other message "FLAG PATH: message"), so the
// user reads which flag to fix. Returns code.
int ts_fail_flag(int code, const char *flag, const char *path);

// ---------------------------------------------------------------------------
// Configuration: the model (what is learned) and the run (how it is trained).
typedef enum { TS_GPT = 0, TS_LLAMA = 1 } ts_variant;
enum { TS_OPT_ADAMW = 0, TS_OPT_MUON = 1, TS_OPT_MUON_PE = 2 };
// Stage-boundary compression (docs/ALGORITHMS.md §7): part of the model, so the
// serial run of a compressed model is the reference of its pipelined runs. One
// codec per value, each in its file of src/boundary/ (boundary.h), listed in
// src/codecs.def in this order (the order is the configuration's, so
// checkpoints keep it): none, ssn, mapl, mapl-unconstrained, mapl-vq, mapl-frozen.
typedef enum {
#define TS_BOUNDARY(ID, NAME, TABLE) TS_COMPRESS_##ID,
#include "codecs.def"
#undef TS_BOUNDARY
  TS_COMPRESS_NMODES
} ts_compress_mode;
// The --compress names, in ts_compress_mode order.
extern const char *const ts_compress_names[TS_COMPRESS_NMODES];
// MAPL's anchor, the token-driven offset subtracted before a boundary's
// projector and added back after it (--mapl-anchor; docs/COMPRESSION.md): the
// paper's factorised one (0, the default, so a configuration without the
// field is factorised) and the three ablations of its Table 6.
typedef enum {
  TS_ANCHOR_FACTORISED = 0, // E_s[tok]·P_s: E_s (V × r) learned, P_s (r × d) frozen
  TS_ANCHOR_NONE,           // no anchor: X̂ = Z·A_pᵀ
  TS_ANCHOR_STATIC,         // T[tok]: a seeded table (V × d), frozen, shared by every stage
  TS_ANCHOR_FULL,           // F_s[tok]: a full table (V × d) per stage, learned
  TS_ANCHOR_NKINDS
} ts_mapl_anchor;
// The --mapl-anchor names, in ts_mapl_anchor order.
extern const char *const ts_mapl_anchor_names[TS_ANCHOR_NKINDS];

// How --data (and --val-data) files hold their tokens (src/train/data.h): bytes is 0,
// so a configuration written without the field (every one before it) reads
// bytes; TS_DATA_DETECT, "tell from the file", is what the flag leaves for
// the run to resolve, and never what a run records.
typedef enum {
  TS_DATA_DETECT = -1,
  TS_DATA_BYTES = 0, // each byte a token, vocabulary >= 256
  TS_DATA_U16,       // raw little-endian uint16 ids (nanoGPT's .bin)
  TS_DATA_U32,       // raw little-endian uint32 ids
  TS_DATA_LLMC,      // llm.c's .bin: a 1024-byte header, then uint16 ids
  TS_DATA_NFORMATS
} ts_data_format;
// The --data-format names, in ts_data_format order from TS_DATA_BYTES.
extern const char *const ts_data_format_names[TS_DATA_NFORMATS];

typedef struct {
  // model
  uint64_t seed; // first: no padding anywhere in the struct (tests/test_config checks it)
  char preset[28]; // a preset's name (the longest is far shorter; 28 keeps the struct unpadded)
  ts_variant variant;
  int vocab;    // V
  int d;        // model width
  int n_layer;  // L
  int n_head;   // H
  int n_kv_head; // Hkv: key/value heads (LLaMA's grouped-query attention; GPT: 0, = H)
  float rope_theta; // LLaMA's rotary base θ (GPT: 0)
  int d_ff;     // MLP inner width (4d for GPT)
  int seq;      // T: context length (rows of the positional embedding)
  int tied;     // 1: LM head shares the token embedding
  float dropout;
  // run
  int batch;    // B: sequences per step (global)
  int steps;
  int tile;     // tokens per tile (R1); 0 = default from T
  int leaf;     // tokens per gradient-sum leaf (R3); 0 = default from T
  float lr, min_lr_frac, weight_decay, beta1, beta2, eps, grad_clip;
  int warmup;
  int lr_schedule;   // ts_lr_schedule: the shape after the warmup (cosine 0, the default)
  float decay_frac;  // wsd: the fraction of the post-warmup steps that decays (0 otherwise)
  int optimizer;     // TS_OPT_ADAMW, TS_OPT_MUON (Newton–Schulz), TS_OPT_MUON_PE (Polar Express)
  float muon_lr;     // Muon's peak learning rate (the hybrid optimizers)
  float val_frac;    // fraction of the corpus held out for validation
  int eval_every;    // 0 = never
  int eval_batches;
  int threads;       // OpenMP threads; 0 = all, at most TS_MAX_THREADS
  int fast;          // 0 = exact (default)
  int checkpoint;    // recompute each layer's activations in backward (same bits, less memory)
  int fused_ce;      // LM head + cross-entropy per leaf of rows: no (B·T, V) logits (same bits)
  int tiled_mlp;     // MLP one leaf of rows at a time, recomputed in backward: no (B·T, d_ff)
  // Stage-boundary compression (model fields; all 0 without --compress)
  int compress;         // ts_compress_mode
  int compress_rank;    // r: floats per token that cross a boundary
  int compress_stages;  // S: the model is cut into S stages of n_layer/S layers
  float proj_lr;        // the projectors' peak learning rate (SPEL): 0.1 x Muon's by default
  int vq_groups, vq_rounds, vq_codes; // mapl-vq: G dims per group, R rounds, K codes
  float vq_gamma;       // EMA decay of the codebooks
  float vq_commit;      // commitment-loss weight
  int vq_sync_codes;    // codes per codebook the sender ships to the receiver after a step
  int vq_backward;      // mapl-vq: 1 quantises the boundary gradients too (--vq-backward on)
  float vq_backward_gamma; // EMA decay of the gradient's codebooks (--vq-gamma's by default)
  // mapl-vq's stream into the shared codebook (docs/COMPRESSION.md): one event every
  // vq_stream_every units (0: 1); the unit is the step (vq_stream_microbatches 0) or
  // the microbatch of a step of vq_stream_microbatches (−1 from --vq-stream-unit
  // microbatch until the run's layout fixes it: --dp × --microbatches)
  int vq_stream_every, vq_stream_microbatches;
  int mapl_anchor;      // ts_mapl_anchor (mapl, mapl-vq): factorised (0) unless --mapl-anchor
  int ssn_refresh;      // ssn-confined: steps between refreshes of the basis (-1: never)
  float ssn_refresh_step; // ssn-confined: the refresh's step on the Grassmann manifold
  int data_format;      // ts_data_format of data_path and val_path
  char data_path[4096];
  char val_path[4096];  // validation file; "": the last val_frac of data_path
  char tokenizer_path[4096]; // the tokenizer model the data was made with; "": none said
  char log_path[4096];
  char ckpt_dir[4096];
  char init_from[4096]; // a checkpoint whose weights the run starts from ("": none)
  int ckpt_every;
  int keep_last;        // keep only the latest N checkpoints in ckpt_dir (0: all)
  int resume;
  int restart;          // a fresh run may replace --ckpt-dir's checkpoints (else refused)
  int quiet;
  int log_every;        // a progress line every N steps and after the last (0: every step);
                        // the log has every step. Not in the JSON form, nor keep_last
  // The data was not named (no --data; no --val-frac): on --resume and in
  // tessera eval the checkpoint's recorded corpus is read (its data_path,
  // val_path and format; its val_frac). Not in the JSON form.
  int data_from_ckpt, val_frac_from_ckpt;
} ts_config;

// The learning-rate schedules after the warmup (--lr-schedule; src/train/optim.c,
// docs/MODEL.md): cosine is 0, so a configuration without the field (every
// one before it) is cosine.
typedef enum {
  TS_LR_COSINE = 0,
  TS_LR_LINEAR,
  TS_LR_CONSTANT,
  TS_LR_WSD, // warmup-stable-decay: constant, then linear over the last decay_frac
  TS_LR_NSCHEDULES
} ts_lr_schedule;
// The --lr-schedule names, in ts_lr_schedule order.
extern const char *const ts_lr_schedule_names[TS_LR_NSCHEDULES];
#define TS_WSD_DECAY_FRAC 0.2f // wsd's decay_frac unless --decay-frac says

#define TS_MAX_THREADS 1024 // --threads above this is refused (ts_config_finalize)

// Fills model fields from a preset name ("tiny", "small", "large", ...).
int ts_config_preset(ts_config *cfg, const char *name);
// Run defaults (seed, optimizer, schedule) on top of a preset.
void ts_config_defaults(ts_config *cfg);
// The run's own settings (threads, the files it reads and writes, how often it
// logs, evaluates and checkpoints) set to fixed values, so that what is left
// is the computation: two layouts of one run, or its ranks, must agree on it.
// The data's content is not in it (its paths are): compare that apart.
void ts_config_drop_run_settings(ts_config *cfg);
// The JSON form (ts_config_to_json) of cfg's computation: without its run
// settings (the fields ts_config_drop_run_settings sets are left out), and
// with memory_options 0 without the memory options either
// (--checkpoint, --fused-ce, --tiled-mlp change where values live, not their bits).
int ts_config_computation_json(const ts_config *cfg, int memory_options, char *buf, size_t cap);
// The JSON form of cfg's architecture alone: what its tensors are and what
// they compute (the variant, sizes, heads, rotary base, tied head, the
// boundary codec's shapes; GPT's seq, which sizes wpe), everything else
// fixed. Two configurations whose weights are interchangeable (--init-from)
// have the same.
int ts_config_architecture_json(const ts_config *cfg, char *buf, size_t cap);
// Derives tile/leaf from T when 0 and validates the whole config (TS_EUSAGE).
int ts_config_finalize(ts_config *cfg);
// A lower bound of the model's parameter count from the config alone (its
// weight matrices), for refusing a model that cannot fit before allocating it.
double ts_config_param_floor(const ts_config *cfg);
// Writes the config as one JSON object (no newline) into buf; TS_CONFIG_JSON_MAX
// bytes always suffice.
#define TS_CONFIG_JSON_MAX (6 * 6 * 4096 + 4096) // six paths, each escaped at worst 6x
int ts_config_to_json(const ts_config *cfg, char *buf, size_t cap);
// Reads a config written by ts_config_to_json; every field present is set
// (floats bit-exact via their _hex form); the model fields are required.
int ts_config_from_json(ts_config *cfg, const char *json);
// The run's own settings and memory options alone (what
// ts_config_computation_json leaves out), plus "layout": the layout's name
// when not NULL (a record for people; not read back), and "run_id": the run
// lineage that wrote it when not NULL or "" (docs/CHECKPOINTS.md; --keep-last
// reads it back). A checkpoint's "tessera.run".
int ts_config_run_json(const ts_config *cfg, const char *layout, const char *run_id, char *buf,
                       size_t cap);
// Reads a ts_config_run_json record over cfg; any other field is refused.
int ts_config_run_from_json(ts_config *cfg, const char *json);
// The JSON key of the first field in which two configurations' JSON forms
// (ts_config_to_json's) differ, into key; "" when they do not.
void ts_config_json_difference(const char *a, const char *b, char *key, size_t cap);

// What the ranks of a distributed run must have in common in a field of the
// configuration (ts_run_agree compares them before any work).
typedef enum {
  TS_AGREE_SAME,     // the same value
  TS_AGREE_GIVEN,    // an input known by its content, which the ranks compare apart (the
                     // data's digest, a checkpoint's header): given or not alike, but a
                     // node may hold its copy under another path
  TS_AGREE_PER_RANK, // each rank its own (src/config/config_json.c says why, at the field)
} ts_agreement;
// The form of cfg the ranks compare: every field but the per-rank ones, the
// fields the JSON form leaves out (--keep-last, --log-every) among them, an
// input as whether it was given. JSON; TS_CONFIG_JSON_MAX bytes suffice.
int ts_config_agreement_json(const ts_config *cfg, char *buf, size_t cap);
// The first field in which two such forms differ: the flag that sets it and
// its value in each, as people read them ("given", "not given" for an input).
typedef struct {
  char flag[64];
  char a[160], b[160];
} ts_config_difference;
// 1 and *d when a and b differ, else 0.
int ts_config_agreement_difference(const char *a, const char *b, ts_config_difference *d);
// The fields of ts_config as the JSON form and the ranks' agreement know
// them, in the JSON form's order: the i-th into *out, 0 past the last. They
// are all of its fields (test_config checks that they tile the struct).
typedef struct {
  const char *key;  // in the JSON form
  const char *flag; // the flag that sets it
  size_t offset, size, align;
  int written;         // in the JSON form (logs, checkpoints); 0: compared between ranks only
  ts_agreement agree;
} ts_config_field;
int ts_config_field_at(int i, ts_config_field *out);
// Names of the presets, NULL-terminated.
extern const char *const ts_preset_names[];

// The parallel layout: how many ranks share the work (world = dp × sp × pp).
// It never changes the result, so it is not part of ts_config (nor of its
// JSON form in logs and checkpoints: any layout resumes any other's).
// How a sequence group shares one sequence (docs/ALGORITHMS.md §2–§4): one
// strategy per value, each in its own file of src/cp/ (cp.h), listed
// in the registry src/strategies.def; each table's `summary` says
// what it is (`tessera train --help` prints them).
typedef enum {
#define TS_CP(ID, NAME, TABLE) TS_SP_##ID,
#include "strategies.def"
#undef TS_CP
  TS_SP_NMODES
} ts_sp_mode;
// The --sp-mode names, in ts_sp_mode order.
extern const char *const ts_sp_mode_names[TS_SP_NMODES];
// TS_OK and *out, or TS_EUSAGE naming --sp-mode.
int ts_sp_mode_parse(const char *name, ts_sp_mode *out);

typedef struct {
  int dp; // data-parallel ranks
  int sp; // sequence-parallel ranks
  int pp; // pipeline stages
  ts_sp_mode sp_mode;
  int upipe_u;     // UPipe: heads per stage (0: the default, N: the smallest stages)
  int upipe_sched; // UPipe: 0 natural, 1 gqa, -1 gqa when the model has groups
  int microbatches; // pipeline: microbatches per step (M)
  int schedule;     // pipeline: 0 GPipe, 1 1F1B
  int ulysses_degree; // hybrid strategies: ranks of the inner head-parallel group (0: default)
  int zero;           // ZeRO stage over the replica group (0: none; 1: the optimizer moments sharded)
} ts_layout;
// Checks a layout against a finalized config and the device that runs it
// ("cpu", "cuda"; NULL: "cpu"), TS_EUSAGE naming the flag, and fills in
// UPipe's defaults (upipe_u 0, upipe_sched -1). Every rule a layout follows
// is here: ts_train applies it too, for programs that call it directly.
int ts_layout_check(const ts_config *cfg, ts_layout *lay, const char *device);

// Default tile and leaf for a sequence length (docs/EXACTNESS.md: min(64, T/8), min(256, T/8)).
int ts_default_tile(int T);
int ts_default_leaf(int T);

// ---------------------------------------------------------------------------
// A named view of a float tensor (parameters, gradients, optimizer state).
// The name is the checkpoint format; code that treats tensors by kind (the
// optimizer's groups, a pipeline stage's slice, the boundary codecs) selects
// them by role and index instead, which the model's views carry (a copy of a
// view keeps them: optimizer state views have their parameter's).
typedef enum {
  TS_ROLE_NONE = 0,   // not a model parameter (a batch, the logits, a caller's own)
  TS_ROLE_EMBEDDING,  // "wte": the token embedding (V × d), also the tied head
  TS_ROLE_POSITIONAL, // "wpe": the positional embedding (T × d; GPT)
  TS_ROLE_LAYER,      // "h.l.*": a tensor of layer l = index
  TS_ROLE_FINAL_NORM, // "lnf.w", "lnf.b", "rmsf.w"
  TS_ROLE_HEAD,       // "lm_head" (untied)
  TS_ROLE_ANCHOR,     // "cmp.s.anchor": the anchor table E_s of stage s = index
  TS_ROLE_PROJECTOR,  // "cmp.p.proj": the projector A_p of boundary p = index
  TS_ROLE_VQ_COUNT,   // "cmp.p.vq.count", "cmp.p.vq.sum", "cmp.p.vq.codes",
  TS_ROLE_VQ_SUM,     // "cmp.p.vq.recv": boundary p's codebooks (vq.h)
  TS_ROLE_VQ_CODES,
  TS_ROLE_VQ_RECV,
  TS_ROLE_GVQ_COUNT,  // "cmp.p.gvq.count", … "cmp.p.gvq.recv": the codebooks of boundary
  TS_ROLE_GVQ_SUM,    // p's gradient (mapl-vq --vq-backward on, vq.h), the receiving
  TS_ROLE_GVQ_CODES,  // stage's (p + 1) tensors, of which stage p holds copies
  TS_ROLE_GVQ_RECV,
  TS_ROLE_SUBSPACE,   // "cmp.s.subspace": a codec's shared basis, stage s = index's copy
} ts_role;

#define TS_MAX_DIMS 4
typedef struct {
  char name[64];
  int ndim;
  int64_t shape[TS_MAX_DIMS];
  float *data;
  ts_role role; // what it is (TS_ROLE_NONE but for the model's views)
  int index;    // the layer, stage or boundary of its role; 0 for the others
  // How it adds to the residual stream, for a codec that confines what the
  // stream can hold (boundary.h `confines_stream`): 1 + the axis of length d
  // that indexes its outputs (a layer's output projections and their biases,
  // the embeddings); 0: it writes nothing into the stream itself.
  int writes_stream;
  // A model view's first element in the canonical model's flat vector (the
  // serial model's parameters in canonical order), whatever part of the
  // model this process holds; 0 for the others.
  int64_t at;
} ts_tensor;

// The position of the tensor of a role and index among nt (the first, in
// canonical order), or −1.
static inline int ts_tensor_find(const ts_tensor *t, int nt, ts_role role, int index) {
  for (int i = 0; i < nt; i++)
    if (t[i].role == role && t[i].index == index) return i;
  return -1;
}

static inline int64_t ts_tensor_numel(const ts_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

// ---------------------------------------------------------------------------
// The model: parameters, gradients and activations for one (B, T) shape.
typedef struct ts_model ts_model;

// How many processes share this machine's memory (1 by default; the trainer
// sets the ranks on its node). ts_model_create refuses a model it estimates
// above 90% of the machine's memory divided by them, before it allocates the
// activations.
void ts_model_set_memory_share(int processes);
// How many ranks shard a model's state (--zero: the replica group; 1 by
// default) and the ZeRO stage: the estimate counts the bytes per parameter
// of ts_state_bytes_per_param, and under stages 2 and 3 one layer whole; and
// the data group's size dp (the packing its gradient sum needs).
void ts_model_set_state_shards(int shards, int zero, int dp);
// Bytes of model state per parameter a rank holds (4 values, 4 gradients,
// and when training 8 AdamW moments): the moments' 1/shards under --zero 1,
// the gradients' too under 2, the values' too under 3.
double ts_state_bytes_per_param(int training, int shards, int zero);
// The whole batch: ts_model_create_shard(cfg, 0, cfg->batch, out).
int ts_model_create(const ts_config *cfg, ts_model **out);
// A data-parallel shard: sequences [b_begin, b_begin + b_count) of the global
// batch cfg->batch. Buffers are sized for the shard; dropout masks and the
// loss scale use global indices and the global token count, so the shards'
// gradients, summed in tree order, are the whole batch's bit for bit.
int ts_model_create_shard(const ts_config *cfg, int b_begin, int b_count, ts_model **out);
// A sequence-parallel shard: rank s of the group `comm` (size N) holds
// positions [s·T/N, (s+1)·T/N) of b_count = 1 sequence and runs its layers
// with the group as `mode` says. The model holds one sequence at a time; the
// trainer moves it along its sequences with ts_model_select_sequence.
struct ts_comm;
typedef struct {
  struct ts_comm *comm;
  ts_sp_mode mode;
  int upipe_u, upipe_sched; // as in ts_layout (resolved by ts_layout_check)
  int ulysses_degree;        // as in ts_layout
} ts_seq_shard;
int ts_model_create_seq(const ts_config *cfg, int b_begin, int b_count, const ts_seq_shard *sp,
                        ts_model **out);
// Makes the model's sequences [b_begin, b_begin + its count) of the global
// batch (dropout indices follow).
void ts_model_select_sequence(ts_model *m, int b_begin);
// First position and count of the positions this model holds.
void ts_model_positions(const ts_model *m, int *t_begin, int *t_count);
// The positions as runs: returns their number (1, or 2 under ring-zigzag),
// their first positions in pos[0..n) and their common length in *len.
int ts_model_runs(const ts_model *m, int *pos, int *len);
// A pipeline stage: the model of layers [l0, l1) only (0, L: the whole
// model, as ts_model_create_seq). The first stage (l0 = 0) also runs the
// embeddings; a later one takes its input (rows × d, the previous stage's
// output) from the pointer given before each forward. The last stage
// (l1 = L) runs the final norm, the head and the loss; an earlier one takes
// the gradient of its output before each backward, and returns loss 0.
//
// A stage holds only its own tensors (parameters, gradients, and the
// optimizer state sized by ts_model_num_params), its layers' activations, and
// copies of the few tensors another stage owns but this one reads: a tied
// embedding on the first stage (the last owns it), and a boundary codec's
// tensors on the receiving stage (the sender owns them). Copies have no
// gradient; the pipeline brings them up to date after each step.
int ts_model_create_stage(const ts_config *cfg, int b_begin, int b_count, const ts_seq_shard *sp,
                          int l0, int l1, ts_model **out);
// A rank's memory by kind, in bytes, as creation sizes it before allocating
// (the fit check's count; `tessera plan` reports it).
typedef struct {
  double params;         // values of the parameters it owns (1/shards under --zero 3)
  double grads;          // their gradients (1/shards under --zero 2, 3)
  double optimizer;      // the AdamW moments (1/shards under --zero 1, 2, 3)
  double copies;         // values of tensors held as copies (a tied embedding's, a codec's)
  double activations;    // the model's activation and backward buffers
  double scratch;        // the memory options' per-thread leaves (--fused-ce, --tiled-mlp)
  double codec;          // the stage-boundary codec's activations
  double strategy;       // the gradient plan's second run's partials (lss-zigzag)
  double strategy_state; // the strategy's own state (its `bytes`, from the geometry)
  double transient;      // --zero 2, 3: one layer's gradients (and values) whole while it runs
  double incall;         // the attention calls' own buffers at their most (strategy.h incall)
  double comm_buffers;   // the communicators' packing buffers (comm.h ts_comm_pack_*): the
                         // sequence group's (the strategy's collectives, the gradient sum)
                         // and the data group's (its gradient sum)
  double fit;            // what the fit check compares with the memory: all of the above
  double total;          // the same (kept for the plan's report)
  size_t nparams, ncopy; // parameters it owns, and holds as copies
  size_t nreplicated;    // of those, the ones its sequence group holds alike (all but the
                         // positional rows and a tensor split's blocks): the group's gradient sum
  // where its layers lie in its parameters, for the per-layer sums and
  // gathers of --zero 2 and 3 (ts_model_layer_runs' runs): nlayers of
  // layer_floats each from layers_lo; a tied embedding at [wte_lo, + wte_len)
  size_t layers_lo, layer_floats, wte_lo, wte_len;
  int nlayers;
} ts_mem_estimate;
// The memory of the model ts_model_create_stage would make with these
// arguments, its state sharded over `shards` ranks at ZeRO stage `zero`,
// in a data group of dp ranks, the memory options' leaves for `threads`
// threads: the same rules and sizes, nothing big allocated. Under sequence
// parallelism sp->comm needs only its rank and size (no operations).
int ts_model_estimate_stage(const ts_config *cfg, int b_begin, int b_count, const ts_seq_shard *sp,
                            int l0, int l1, int shards, int zero, int dp, int threads,
                            ts_mem_estimate *out);
// Around each layer's use, for a layout that holds the parameters or the
// gradients in parts (--zero 2 and 3, src/dist/zero.c): `params` before
// a layer's forward and its backward (whole: 1) and after them (may go: 0),
// `grads_done` when a layer's backward has written its whole gradient on
// this rank. Non-zero returns end the pass with that error. `params` sees
// the ends too: layer -1 around the embeddings' forward and backward, layer
// L (the model's layer count) around the head's (final norm, head, loss);
// `grads_done` sees layers only (the ends' gradients are complete at the end
// of the pass). NULL: no hooks.
typedef struct {
  int (*params)(void *ctx, int layer, int whole);
  int (*grads_done)(void *ctx, int layer);
  void *ctx;
} ts_layer_hooks;
void ts_model_set_layer_hooks(ts_model *m, const ts_layer_hooks *hooks);
void ts_model_set_stage_input(ts_model *m, const void *x);
// 1: the model's boundary codec decodes as if its basis were the identity (a
// probe of what the stream holds outside the subspace; boundary.h). 0: as trained.
void ts_model_set_identity_boundaries(ts_model *m, int on);
void ts_model_set_stage_grad(ts_model *m, const void *dy);
const void *ts_model_stage_output(const ts_model *m); // after a forward
const void *ts_model_stage_dinput(const ts_model *m); // after a backward: d(input)
// Bytes per token of a stage's output (backward 0) and of its output's
// gradient coming back (backward 1): d floats, or under --compress r floats
// (Z and dZ), mapl-vq's R·r/G one-byte codes forward (and with
// --vq-backward on, the codes and a float scale back).
size_t ts_model_boundary_bytes(const ts_model *m, int backward);
// A tied head under a pipeline: the first stage has the embedding, the last
// the head. After a microbatch's backward the first stage's
// ts_model_embedding_dgrad is the gradient of the embedding output (rows ×
// d), and after its forward the last stage's ts_model_last_residual is the
// last layer's output. From both, on the last stage, the tied embedding's
// gradient of that microbatch (V × d) into out, by the serial model's own
// leaf tree (head partial and scatter per leaf): the same bits. A rank of
// two runs (ts_model_second_run_grads non-NULL: lss-zigzag) writes its first
// run's partial into out and its second's into out2 (V × d), for the
// sequence group to sum apart and add; out2 is NULL otherwise.
int ts_model_tied_embedding_grad(ts_model *m, const int *inputs, const int *targets,
                                 const float *res_last, const float *d_emb, float *out,
                                 float *out2);
const float *ts_model_last_residual(const ts_model *m);
const float *ts_model_embedding_dgrad(const ts_model *m);
// TS_OK, or the error of the last forward (whose result is then NaN): a
// collective of a sequence-parallel layer can fail.
int ts_model_status(const ts_model *m);
void ts_model_free(ts_model *m);
// Parameters from the counter-based generator keyed by (seed, tensor, index).
void ts_model_init(ts_model *m, uint64_t seed);
// inputs, targets are (B, T) token ids of the shard (B, T_local under --sp). Returns the canonical-tree
// sum of its token losses divided by the global token count (for the whole
// batch: the mean loss). step keys dropout masks; training=0 disables dropout.
float ts_model_forward(ts_model *m, const int *inputs, const int *targets, uint64_t step,
                       int training);
// An observer of the residual stream: during each forward, after layer l − 1
// (0 < l < L, the layers of the model's stage) the model calls
// tap(ctx, l, x, tokens, rows, d) with the stream entering layer l, rows × d,
// before any stage boundary encodes it, and the rows' token ids. It reads and
// changes nothing (tessera eval --activations-out). NULL: none.
typedef void (*ts_residual_tap)(void *ctx, int l, const float *x, const int *tokens,
                                int64_t rows, int d);
void ts_model_set_residual_tap(ts_model *m, ts_residual_tap tap, void *ctx);
// Gradients of the global batch's mean loss with respect to the last forward's
// tokens (for the whole batch: the full gradient) into the gradient buffer.
int ts_model_backward(ts_model *m, uint64_t step);
// The parameter tensors of the model cfg describes (names and shapes, data
// NULL) in canonical order, without making the model: what a checkpoint of
// it holds, checked before its memory is allocated. *out malloc'd; returns
// their number, or -1 (out of memory, or a configuration ts_model_create
// refuses; ts_errmsg says which).
int ts_config_tensors(const ts_config *cfg, ts_tensor **out);
// Named views of the tensors this model owns (a stage's, or all): their
// parameters and gradients, one buffer each, the same layout. The whole
// tensors come in canonical order, then the pieces of a tensor split's
// blocks (each a part of one canonical tensor, its `at` the part's), then a
// sequence-parallel positional table's rows. grads may be NULL.
int ts_model_num_tensors(const ts_model *m);
void ts_model_tensors(ts_model *m, ts_tensor *params, ts_tensor *grads);
size_t ts_model_num_params(const ts_model *m);
// Of those, the floats of the tensor split's blocks (0 without a split):
// the owned elements [np - rows - split, np - rows), rows the positional ones.
size_t ts_model_split_params(const ts_model *m);
float *ts_model_params(ts_model *m);
float *ts_model_grads(ts_model *m);
// The model's layers as runs of those buffers: layer first + k is [lo[k],
// lo[k + 1]) for k < *nlay (0: none; lo has room for n_layer + 1). 0 when
// each layer is one run and they follow one another; 1 when another
// tensor lies between them (*bad: its index in ts_model_tensors), 2 when a
// layer is not one run (*bad: the layer).
int ts_model_layer_runs(const ts_model *m, int *first, int *nlay, size_t *lo, int *bad);
// The copies this model holds of tensors another stage owns (see
// ts_model_create_stage): their number, and their views (parameters only).
int ts_model_num_copies(const ts_model *m);
void ts_model_copies(ts_model *m, ts_tensor *params);
// Copy k's view alone (0 <= k < ts_model_num_copies); 0 when there is no copy k.
int ts_model_copy(ts_model *m, int k, ts_tensor *param);
// The canonical model's table, whatever part of it this model holds: its
// number of tensors and of parameters, and every tensor's name, shape, role
// and offset (`at`) with data NULL.
int ts_model_canonical_tensors(const ts_model *m);
size_t ts_model_canonical_params(const ts_model *m);
void ts_model_canonical_table(const ts_model *m, ts_tensor *out);
// (B, T, V) of the last forward; NULL under --fused-ce, which keeps none.
const float *ts_model_logits(const ts_model *m);
// The canonical-tree sum of the last forward's token losses over the shard:
// an aligned subtree of the global loss tree, for the trainer to combine.
float ts_model_loss_sum(const ts_model *m);
// A rank holding two runs whose sums stay the serial tree (lss-zigzag): the
// second run's gradient partials (the first run's are ts_model_grads), and
// each run's loss sum (the tree over its tokens). NULL, and run 0 the whole
// loss sum, for every other model.
float *ts_model_second_run_grads(ts_model *m);
float ts_model_run_loss_sum(const ts_model *m, int run);
const ts_config *ts_model_config(const ts_model *m);
// Bytes of activations and backward scratch: O(B·T·d) per layer, no T×T term.
size_t ts_model_activation_bytes(const ts_model *m);
// Of those, the CPU kernels' workspace at its most: its leaf vector, the
// canonical trees' pool of partials (one per level of the tree over the
// rows' leaves: it grows as log2 T, not with T) and the attention kernel's
// per-thread scratch; 0 on a GPU.
size_t ts_model_workspace_bytes(const ts_model *m);
// FLOPs per token (docs/ALGORITHMS.md §9): 6 * non-embedding params + 6 * L * T * d.
double ts_model_flops_per_token(const ts_model *m);
// The same for a configuration's whole model (its parameter table, nothing allocated).
double ts_config_flops_per_token(const ts_config *cfg);

// ---------------------------------------------------------------------------
// Incremental decoding (src/model/decode.c, docs/SAMPLING.md): a model of one
// sequence (batch 1, the whole model, no --compress) fed a few tokens at a
// time, its layers' keys and values cached, so that a new token costs one
// leaf of rows and one query tile of attention. The logits of every position
// are the training forward's (ts_model_forward) bit for bit on the CPU.
typedef struct ts_decoder ts_decoder;
int ts_decoder_create(ts_model *m, ts_decoder **out);
void ts_decoder_free(ts_decoder *d);
// Positions fed so far (the next token's position).
int ts_decoder_pos(const ts_decoder *d);
// Feeds tokens[0, n) at the next n positions, which must stay within the
// model's T (TS_EUSAGE otherwise, or for an id outside the vocabulary). all:
// the n positions' logits into logits (n × V); else the last one's (V).
int ts_decoder_feed(ts_decoder *d, const int *tokens, int n, float *logits, int all);

// ---------------------------------------------------------------------------
// Runs (src/run/, compare.c, info.c). Each returns TS_OK or an error code.
// lay NULL: the serial layout. Under MPI the world must be dp × sp × pp ranks.
// SIGTERM, SIGINT or SIGHUP during ts_train: the step under way is finished,
// checkpointed when cfg->ckpt_dir is set, and ts_train returns TS_ESTOPPED
// with the message saying how to resume (docs/CHECKPOINTS.md, "Stopping").
int ts_train(const ts_config *cfg, const ts_layout *lay);
// The signal that stopped the last ts_train (TS_ESTOPPED), 0 when none.
int ts_train_stop_signal(void);
int ts_eval(const ts_config *cfg, const char *ckpt_path);
// What tessera eval does beside the loss. activations_out: a safetensors file
// of the residual stream between layers over the evaluated batches
// (src/run/eval.c, docs/COMPRESSION.md "Geometry"); NULL or "": none.
// identity_boundaries 1: also the loss of the same weights with each
// compressed boundary decoded as if its basis were the identity, and the
// change (docs/COMPRESSION.md, "SSN with a confined stream").
// whole_split 1: score the validation split tiled from its start in
// consecutive windows, as many whole batches as it holds, instead of
// --eval-batches windows drawn from the seed: the same tokens for every
// checkpoint of the data, whatever its seed.
typedef struct {
  const char *activations_out;
  int identity_boundaries;
  int whole_split;
} ts_eval_options;
int ts_eval_with(const ts_config *cfg, const char *ckpt_path, const ts_eval_options *opt);
// tessera tokenize (src/run/tokenize.c, docs/TOKENIZER.md): the text file `in`
// encoded by the tokenizer model file `tokenizer` (with ckpt: the one that
// checkpoint records, or `tokenizer` checked against it) into the token-id
// file `out`, written to a temporary name and renamed; format TS_DATA_U16 or
// TS_DATA_U32, TS_DATA_DETECT: u16 when the vocabulary fits in 16 bits.
int ts_tokenize(const char *tokenizer, const char *ckpt, const char *in, const char *out,
                int format, int quiet);
int ts_info(void);

// tessera plan (src/run/plan.c, docs/PLAN.md): every layout of `ranks`
// ranks judged by train's rules; for each valid one a rank's memory by kind
// (ts_model_estimate_stage), bytes per step by collective and a predicted
// step time, ranked by tokens/s among those that fit.
typedef struct {
  int ranks, ranks_per_node;     // ranks in all, and per node (0: all on one)
  double device_mem;             // bytes per rank (0: this machine's / ranks per node)
  double flops;                  // FLOP/s per rank (0: this machine's measured roof / ranks per node)
  double efficiency;             // the fraction of it the step's compute reaches
  double bw_intra, bw_inter;     // bytes/s each way within a node, between nodes
  double lat_intra, lat_inter;   // seconds per call
  const char *device;            // the layout rules' device ("cpu", "cuda")
  int json, verbose, top;        // output: JSON; refusals' reasons; rows shown (0: 20)
  int only_mode;                 // a ts_sp_mode: its sequence-parallel layouts alone; -1 all
  int only_dp, only_sp, only_pp; // the layouts of these sizes alone (0: any)
  int only_zero;                 // the layouts of this --zero stage alone (-1: any)
  int microbatches_given;        // 1: a pipeline's microbatches are base's, not one a sequence
  int tile, leaf;                // (set by ts_plan: the configuration's as given)
  const char *calibrated_from;   // the run log --efficiency was measured on (NULL: given)
  int calibrated_steps;          // the steps of it the median went over
} ts_plan_opts;
int ts_plan(const ts_config *cfg, const ts_layout *base, const ts_plan_opts *o, FILE *out);
// A public model's published shape (--shape NAME: gpt2-124m ... llama3-70b) over its
// variant's preset; TS_EUSAGE naming the shapes for another name.
int ts_plan_shape(const char *name, ts_config *cfg);
// --calibrate LOG (src/tools/plan_calibrate.c): the median over a run's steps after the
// first of its compute FLOP/s over its roof, the plan's efficiency; *steps the count.
int ts_plan_calibrate(const char *log, double *efficiency, int *steps);
// tessera sample (src/run/sample.c, docs/SAMPLING.md): tokens continuing a
// prompt from the checkpoint's model, printed to out as text (the prompt and
// its continuation) or one JSON object. cfg: the run settings of the flags
// (threads); the model is the checkpoint's.
typedef struct {
  const char *ckpt;
  const char *prompt;      // the prompt's text, or NULL: read prompt_file
  const char *prompt_file;
  const char *tokenizer;   // a tokenizer model file; NULL or "": the one the checkpoint
                           // records (docs/TOKENIZER.md), else bytes
  int tokens;              // how many to generate, >= 1
  float temperature;       // >= 0; 0: greedy
  int top_k;               // >= 0; 0: off
  float top_p;             // in (0, 1]; 1: off
  uint64_t seed;           // the draws' (token by token: seed and position)
  int json;
} ts_sample_opts;
int ts_sample(const ts_config *cfg, const ts_sample_opts *opts, FILE *out);
// Whether two checkpoints hold the same model state (tessera compare on two
// .safetensors files; src/run/checkpoint.c): the same tensors in order and shape, the same data
// byte for byte, the same step, optimizer step and configuration but for the
// run's own settings (paths, threads, logging, evaluation, checkpointing),
// in which layouts of one run differ. Prints "same model state" or the first
// difference to out; 0 same, 1 different, TS_EUSAGE (2) unreadable or damaged.
int ts_compare_checkpoints(const char *path_a, const char *path_b, FILE *out);
// Writes the golden-file set of docs/GOLDEN.md for this config into out_dir.
int ts_dump(const ts_config *cfg, const char *out_dir, int traj_steps);

#define TS_VERSION_STRING PACKAGE_VERSION

#endif
