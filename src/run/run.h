// What the run commands share (src/run/): threads, the measured roof, batches,
// the loss over a group, the parameter hash, evaluation, and checkpoints.
// Internal to the runs; tessera.h has their public entry points (ts_train,
// ts_eval, ts_dump).
#ifndef TS_RUN_H
#define TS_RUN_H
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "dist/owners.h"
#include "dist/shard.h"
#include "tessera.h"
#include "text/tokenizer.h"
#include "train/ckpt.h"
#include "train/data.h"
#include "train/optim.h"

// Validation windows are keyed by steps far above any training step.
#define TS_EVAL_STEP_BASE (1ull << 39)

// ---- common.c ---------------------------------------------------------------------------
// OpenMP threads (the node's, shared by its local_ranks unless --threads).
void ts_run_setup_threads(const ts_config *cfg, int local_ranks);
// The machine's roof in GFLOP/s for MFU, the faster of ts_mm and (when built
// with it) OpenBLAS's sgemm on a 1024^3 product (0 when it cannot be measured);
// OpenBLAS's rate alone in *blas (0 without it) unless blas is NULL.
double ts_run_sgemm_roof(double *blas);
// The run's data: path (NULL: cfg's validation file alone) and cfg's
// validation file in cfg's format (resolved, or detected here), every token
// id below cfg's vocabulary, each split at least one window of cfg->seq.
int ts_run_open_data(const ts_config *cfg, const char *path, ts_data **out);
// Sequences [b0, b0 + nb) of the batch of `step` from `split`: inputs, targets (nb, T).
int ts_run_load_batch(const ts_data *data, int split, const ts_config *cfg, uint64_t step,
                      int b0, int nb, int *inputs, int *targets);
// The shard's sequences of the batch of `step`, pass after pass (its nb
// sequences from b0, or in rounds those of ts_shard_pass_first).
int ts_run_load_shard(const ts_data *data, int split, const ts_config *cfg, uint64_t step,
                      const ts_shard *sh, int *inputs, int *targets);
// out[i] = the tree over the group's local[i] (NULL group: this rank's), / ntok_global.
int ts_run_combine_loss(ts_comm *group, const float *local, int n, int64_t ntok_global,
                        float *out);
// FNV-1a of every parameter of the canonical model in canonical order (the
// run log's param_hash), folded over the owners of its parts (owners.h).
int ts_run_param_hash(const ts_owners *o, ts_model *m, uint64_t *out);
// Refuses (TS_ERUNTIME) a model whose weight matrices alone, with their
// gradients and (training) the two AdamW moments, exceed 90% of the memory
// they would live in, shared by `share` processes, on the largest of
// `stages` pipeline stages (1: the whole model), the state sharded over
// `shards` ranks at ZeRO stage `zero` (else 1, 0), the layers' matrices
// split over `split` tensor-split ranks (--sp-mode megatron; else 1): before
// anything is allocated (model.c's full estimate needs the parameters
// allocated first).
int ts_run_check_fit(const ts_config *cfg, int training, int share, int stages, int shards,
                     int zero, int split);
// The mean validation loss over cfg->eval_batches fixed batches.
int ts_run_evaluate(ts_shard *sh, const ts_data *data, const ts_config *cfg, ts_comm *group,
                    int *inputs, int *targets, float *out);
// Which windows an evaluation scores: the fixed random ones of cfg->seed
// (training's evaluations), or the validation split tiled from its start in
// consecutive windows of cfg->seq, batch i holding windows [i·B, (i+1)·B)
// (tessera eval --whole-split: the same tokens whatever the seed).
enum { TS_EVAL_RANDOM, TS_EVAL_TILED };
int ts_run_evaluate_windows(ts_shard *sh, const ts_data *data, const ts_config *cfg,
                            ts_comm *group, int windows, int *inputs, int *targets, float *out);
// Whole batches of cfg->batch windows of cfg->seq the tiled validation split
// holds: at most B·T of its tokens are not scored (its first, which no window
// predicts, and the tail that does not fill a batch).
int ts_run_tiled_batches(const ts_data *data, const ts_config *cfg);

// ---- checkpoint.c -----------------------------------------------------------------------
int ts_run_mkdir_p(const char *dir);
// Rank 0's rc (and message) of a step it alone takes, returned on every rank
// (src/run/agree.c); a world of one returns rc.
int ts_run_root_verdict(int rc);
// A checkpoint's tensors (*out, malloc'd; returns their number, -1 when out of
// memory): the canonical model's parameters, then the AdamW moments as
// "adam.m.<name>" and "adam.v.<name>", whatever part of the model m holds;
// data points to m's copy of those it holds (moments: those it owns), NULL
// elsewhere. opt NULL: no moment has data (a reader of the parameters alone
// that holds the file to all).
int ts_run_ckpt_tensors(ts_model *m, ts_adamw *opt, ts_tensor **out);
// step-<step>.safetensors in cfg->ckpt_dir: parameters, AdamW moments, config,
// step (format 2); refused, the previous one kept, when a value is not finite.
// Collective over the owners' group (owners.h; NULL: m is the whole model):
// each rank writes the byte ranges of what it owns into the one file
// (MPI-IO), which is the same file whichever layout wrote it.
// upd[0, nupd): what opt's moments are of, in order (NULL: m's owned
// tensors), for the names in a refusal.
int ts_run_save_checkpoint(const ts_owners *owners, ts_model *m, ts_adamw *opt,
                           const ts_tensor *upd, int nupd, const ts_config *cfg, int64_t step);
// The highest step-*.safetensors in dir (its step; 0 and path "" when none; -1: no dir).
int64_t ts_run_latest_checkpoint(const char *dir, char *path, size_t cap);
// The same among regular files named as tessera names them
// (step-NNNNNNNN.safetensors): checkpoints a run wrote, not links or lookalikes.
int64_t ts_run_latest_own_checkpoint(const char *dir, char *path, size_t cap);
// A checkpoint opened and checked (checkpoint.c): its configuration and step.
typedef struct {
  ts_ckpt *ck;
  ts_config cfg;      // validated like the flags (ts_config_finalize leaves it unchanged)
  int64_t step;       // optimizer steps done, in [1, cfg.steps]
  uint64_t adam_step; // = step
} ts_run_ckpt;

// A checkpoint's run id (its "tessera.run" member's "run_id": the lineage
// that wrote it) into out: 1, or 0 and "" when it records none (written
// before checkpoints did, or format 2), or -1 and a refusal naming the file
// when it is not TS_RUN_ID_LEN lowercase hex digits.
int ts_run_ckpt_run_id(const ts_ckpt *ck, char *out, size_t cap);
// A configuration recorded apart from a checkpoint (a run identity's: JSON as
// ts_config_to_json writes it) held to what --resume holds a checkpoint's to,
// with step 0: TS_EUSAGE naming the flag or field, the record called `what`;
// TS_ERUNTIME when json is no configuration.
int ts_run_check_recorded_config(const ts_config *cfg, const char *json, const char *what);

// ---- ckpt_owner.c -----------------------------------------------------------------------
// A checkpoint directory's identity (docs/CHECKPOINTS.md): the lineage's run
// id, config digest, configuration, host, pid and first step, one JSON line.
#define TS_RUN_IDENTITY "tessera.identity"
#define TS_RUN_ID_LEN 16 // a run id: lowercase hex digits
// Rank 0's claim on --ckpt-dir, before any step: the directory is made and
// locked for this process (a second run on it is refused, naming the
// holder), and a fresh run (no --resume) refuses one that holds checkpoints
// unless --restart, which removes them; it then starts a run lineage (a new
// run id in DIR/tessera.identity). A --resume from ck (its checkpoint open)
// continues the directory's lineage, refused (TS_EUSAGE, one line) when the
// identity's configuration is not this run's (naming the field) or ck is of
// another lineage; a directory without an identity takes ck's. TS_OK, or the
// error.
int ts_run_claim_ckpt_dir(const ts_config *cfg, const ts_run_ckpt *ck);
// Rank 0's lineage made every rank's (a collective; a world of one: nothing),
// for the checkpoints each writes part of.
int ts_run_share_lineage(void);
// The run id of this run's lineage ("" before the claim).
const char *ts_run_lineage(void);
// 1 when s is a run id (TS_RUN_ID_LEN lowercase hex digits).
int ts_run_id_valid(const char *s);

// ---- agree.c ----------------------------------------------------------------------------
// Every rank's configuration (every field but a rank's own:
// ts_config_agreement_json), layout, device and precision, its data (token
// counts and digest), its tokenizer (digest) and on --resume or --init-from
// its checkpoint (step and header checksum; ck NULL or closed: none) compared with rank 0's
// over the world before any work. A difference: TS_EUSAGE on every rank
// alike (ts_fail_everywhere), naming the first rank that differs and the
// flag, or what else, in which it does.
int ts_run_agree(const ts_config *cfg, const ts_layout *lay, const ts_data *data,
                 const ts_run_ckpt *ck);
// Opens path and checks everything in its header before anything is
// allocated: format 2, the configuration (read over base, finalized, fitting
// this machine for training or evaluation, share processes per node, on the
// largest of `stages` pipeline stages), the tensors of its model (names,
// shapes, order), the step and the other counts. TS_ERUNTIME naming the file
// and the field.
int ts_run_open_checkpoint(const char *path, const ts_config *base, int training, int share,
                           int stages, ts_run_ckpt *out);
// --resume: the latest checkpoint of cfg->ckpt_dir opened as above, its name's
// step its own, and its configuration this run's (TS_EUSAGE naming the flag)
// but for --steps, which may grow or shrink to no less than its step. No
// directory or no checkpoint in it: TS_OK with out->ck NULL (a fresh start).
// cfg's data is resolved here (its format, read from the files or taken
// from the checkpoint), and with cfg->data_from_ckpt is the checkpoint's.
int ts_run_open_resume(ts_config *cfg, int share, int stages, ts_run_ckpt *out);
// --init-from: cfg->init_from opened as above, refused (TS_EUSAGE naming the
// field and its flag) unless its architecture is cfg's; the weights are
// loaded later by ts_run_load_checkpoint without an optimizer.
int ts_run_open_init(const ts_config *cfg, int share, int stages, ts_run_ckpt *out);
// --keep-last: removes the checkpoints of dir named as tessera names them
// (step-NNNNNNNN.safetensors, regular files) of this run's lineage (their
// run id is ts_run_lineage's) up to `step` but the `keep` latest, the one of
// `step` among them; a later step's file, a checkpoint of another lineage or
// of none, a file that is no checkpoint, and any other file stay.
int ts_run_prune_checkpoints(const char *dir, int64_t step, int keep);
void ts_run_close_checkpoint(ts_run_ckpt *ck);
// The data this run's checkpoints are written from (their "tessera.data":
// token counts and digest), and on --resume the refusal (TS_EUSAGE) of a
// checkpoint written from other data.
void ts_run_checkpoint_data(const ts_data *data);
// The layout's name (train.c's layout_name) in the checkpoints' "tessera.run".
void ts_run_checkpoint_layout(const char *name);
// What ts_run_checkpoint_data recorded ("" before it): "N+M tokens, digest D".
const char *ts_run_data_id(void);
int ts_run_check_resume_data(const ts_run_ckpt *ck, const ts_data *data);
// The error just made by a check of what the checkpoint at path says about
// `what` (a configuration that no model can be made of, say), restated as
// the file's: "checkpoint PATH: WHAT: message", TS_ERUNTIME.
int ts_run_restate(const char *path, const char *what);
// The model's parameters and (opt not NULL) the AdamW moments and step from
// the checkpoint, which must hold exactly the canonical model's tensors, all
// finite: every tensor (or part) m holds, its copies included, and the
// moments of upd[0, nupd) in that order (what this rank updates: a
// partitioned model's part, a --zero shard; NULL: m's owned tensors), each
// read from its byte ranges alone. opt NULL: the parameters only (evaluation).
int ts_run_load_checkpoint(ts_model *m, ts_adamw *opt, const ts_tensor *upd, int nupd,
                           const ts_run_ckpt *ck);
// The run log cut back to the records up to the checkpoint's step (a resumed
// run's log), its torn last line, if any, dropped. Another run's log is
// refused: one whose configuration record differs from the checkpoint's run
// in what --resume checks, or whose steps end before the checkpoint's.
int ts_run_trim_log(const char *path, const ts_run_ckpt *ck);
// Removes what a killed run left of its temporary files (util.h), in the
// checkpoint directory and next to the log; how many.
int ts_run_remove_stale_temps(const ts_config *cfg);

// ---- ranks.c ----------------------------------------------------------------------------
// Every rank's host and process id, gathered over the world (a collective:
// every rank calls it), so that a launcher's report of a lost process ("PID
// 17390 RUNNING AT vm") maps to a rank. json: [{"rank":0,"host":"vm","pid":17389}, ...]
// for the log; text: "ranks: 0 = pid 17389 on vm, 1 = pid 17390 on vm" for
// the start-up output. Freed with ts_run_free_ranks.
typedef struct {
  char *json, *text;
} ts_run_ranks;
int ts_run_gather_ranks(ts_run_ranks *out);
void ts_run_free_ranks(ts_run_ranks *r);

// ---- tokenizer_record.c -----------------------------------------------------------------
// The tokenizer a run's data was made with (--tokenizer), recorded in its
// checkpoints' "tessera.tokenizer" (docs/TOKENIZER.md) so that text is later
// encoded and decoded with the same one: its kind, the model file (as an
// absolute path), its vocabulary and the FNV-1a digest of its bytes.
#define TS_META_TOKENIZER "tessera.tokenizer"
#define TS_META_CONFIG "tessera.config" // the run's configuration (checkpoint.c)
// Opens cfg->tokenizer_path (none: records nothing) and records it for this
// run's checkpoints: TS_ERUNTIME naming a file that is missing or not a
// model, TS_EUSAGE naming --tokenizer and --vocab when their vocabularies differ.
int ts_run_checkpoint_tokenizer(const ts_config *cfg);
// The record as the checkpoints hold it (JSON), "" when none.
const char *ts_run_tokenizer_id(void);
// --resume: a checkpoint whose recorded tokenizer is another file (by its
// digest) than this run's --tokenizer is refused (TS_EUSAGE); a run without
// --tokenizer continues to record the checkpoint's.
int ts_run_check_resume_tokenizer(const ts_run_ckpt *ck);
// --init-from: a checkpoint trained on text (bytes) for a run on token ids, or
// the other way round, is refused, and so is one whose recorded tokenizer is
// another file (by its digest) than this run's --tokenizer (TS_EUSAGE). After
// ts_run_checkpoint_tokenizer and the data format's resolution.
int ts_run_check_init_source(const ts_run_ckpt *ck, const ts_config *cfg);
// The tokenizer to encode and decode text for an open checkpoint: the file
// `path` when given, else the one it records (neither: bytes). Refused when
// the file is not the recorded tokenizer (its digest differs: TS_EUSAGE
// naming both files), when its vocabulary is not the checkpoint's
// (TS_EUSAGE naming both), and when the recorded file is gone (TS_ERUNTIME
// asking for a copy with --tokenizer).
int ts_run_open_ckpt_tokenizer(const ts_run_ckpt *ck, const char *path, ts_tokenizer **out);

// ---- stop.c -----------------------------------------------------------------------------
// SIGTERM, SIGINT and SIGHUP, while a training run lasts: the first is
// recorded (and, ack set, acknowledged on stderr) for the step loop to stop
// after the step it is in; a second ends the process at once. A signal the
// process was started with ignored stays ignored.
void ts_run_stop_install(int ack);
void ts_run_stop_restore(void);
// The signal received since ts_run_stop_install, 0 when none (this rank's).
int ts_run_stop_requested(void);
// Records the signal the run stopped on, agreed by every rank (ts_train_stop_signal).
void ts_run_stopped(int signo);
const char *ts_run_signal_name(int signo); // "SIGTERM", "SIGINT", "SIGHUP"
#endif
