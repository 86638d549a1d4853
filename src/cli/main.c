// tessera's command line: `tessera <command> [flags]`.
//
// Every flag is one row of a table (name, type, where it goes, which commands
// take it, help text), so parsing, validation and --help cannot drift apart.
// All checks happen before any work: a bad flag costs nothing. Exit codes:
// 0 success, 1 runtime error (or, for compare, "the logs differ"), 2 usage,
// and 128 + the signal's number for a training run stopped by SIGTERM (143),
// SIGINT (130) or SIGHUP (129) after a whole step, as a shell reports a
// process that a signal ended: a scheduler sees the job did not complete.
//
// `train` starts MPI (a world of one without mpiexec). Every rank parses the
// same flags and reaches the same verdict, so usage errors are printed by
// rank 0 and every rank exits 2; a runtime error on any one rank is printed
// with its rank and brings the whole world down (MPI_Abort), never a hang.
#include "config.h"

#include <errno.h>
#include <float.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "base/util.h"
#include "cp/strategy.h"
#include "cpu/isa.h"
#include "dist/grid.h"
#include "run/omp_env.h"
#include "tessera.h"
#include "tools/compare.h"
#include "tools/plot.h"
#include "train/data.h"

// ---------------------------------------------------------------------------
// Commands.
enum {
  C_TRAIN = 1, C_EVAL = 2, C_DUMP = 4, C_COMPARE = 8, C_INFO = 16, C_SAMPLE = 32, C_TOKENIZE = 64,
  C_PLOT = 128, C_PLAN = 256
};

typedef struct cli cli;
typedef struct command command;
// A command's work once its flags are read (pos: the positional arguments):
// the process's exit status.
typedef int (*command_fn)(const command *cmd, cli *c, const char *const *pos, int n_pos);
static int run_train(const command *cmd, cli *c, const char *const *pos, int n_pos);
static int run_eval(const command *cmd, cli *c, const char *const *pos, int n_pos);
static int run_sample(const command *cmd, cli *c, const char *const *pos, int n_pos);
static int run_dump(const command *cmd, cli *c, const char *const *pos, int n_pos);
static int run_compare(const command *cmd, cli *c, const char *const *pos, int n_pos);
static int run_tokenize(const command *cmd, cli *c, const char *const *pos, int n_pos);
static int run_plot(const command *cmd, cli *c, const char *const *pos, int n_pos);
static int run_info(const command *cmd, cli *c, const char *const *pos, int n_pos);
static int run_plan(const command *cmd, cli *c, const char *const *pos, int n_pos);

struct command {
  const char *name;
  int id;
  const char *args;    // after "tessera NAME" in the usage line
  const char *summary; // one line for `tessera --help`
  const char *about;   // a paragraph for `tessera NAME --help`
  const char *example;
  command_fn run;
  int model; // 1: its flags are a model's run (checked as one), on a backend chosen first
};

static const command commands[] = {
    {"train", C_TRAIN, "[flags]", "train a model, logging every step",
     "Trains a GPT-style model on a byte-level corpus or a file of token ids\n"
     "(docs/DATA.md: bytes, nanoGPT's uint16 .bin, raw uint32, llm.c's .bin; from\n"
     "text with a SentencePiece tokenizer: tessera tokenize, docs/TOKENIZER.md).\n"
     "In exact mode (the default) any parallel layout reproduces the serial run bit\n"
     "for bit. --fast is for distributed layouts, where it lets MPI choose its own\n"
     "summation order and ring attention merge its blocks by their log-sum-exp\n"
     "(checked within a tolerance); the serial reference computes the same exact\n"
     "result either way. With --device cuda, fp32 is exact too (the CPU's bits)\n"
     "unless --fast picks cuBLAS's faster products; bf16 is never exact\n"
     "(docs/GPU.md).\n"
     "SIGTERM, SIGINT or SIGHUP stops the run after the step under way, writes that\n"
     "step's checkpoint (with --ckpt-dir) and exits 128 + the signal's number (143,\n"
     "130, 129), saying how to --resume; a second signal exits at once.",
     "tessera train --model mini --steps 200 --data data/corpus.txt --log run.jsonl",
     run_train, 1},
    {"eval", C_EVAL, "--ckpt FILE [flags]", "evaluate a checkpoint on the validation split",
     "Computes the mean validation loss of a checkpoint; the model comes from the\n"
     "checkpoint, the number of batches from the flags, the data from --data or\n"
     "--val-data, else the checkpoint's own (its recorded files, format and\n"
     "--val-frac). Only the validation split is read (--val-data, else the tail of\n"
     "--data); a .bin without llm.c's header is read as the checkpoint's raw token\n"
     "ids unless --data-format says otherwise.",
     "tessera eval --ckpt ckpt/step-00000200.safetensors --eval-batches 16",
     run_eval, 1},
    {"sample", C_SAMPLE, "--ckpt FILE --prompt TEXT [flags]", "generate text from a checkpoint",
     "Continues a prompt with tokens drawn from a checkpoint's model (GPT or LLaMA)\n"
     "and prints the prompt and its continuation as text (docs/SAMPLING.md). Each\n"
     "layer's keys and values are cached, so a token costs one leaf of rows and one\n"
     "query tile of attention, and every position's logits are the training\n"
     "forward's bit for bit. The prompt and the new tokens must fit in the model's\n"
     "context (its --seq): --tokens beyond it is refused. A draw depends only on\n"
     "--seed and the token's position; --temperature 0 is greedy (argmax). --top-k\n"
     "keeps the k most probable tokens, then --top-p the fewest of those whose\n"
     "probability reaches p.",
     "tessera sample --ckpt ckpt/step-00000200.safetensors --prompt 'the model' --tokens 200",
     run_sample, 1},
    {"dump", C_DUMP, "--out DIR [flags]", "write golden reference outputs for a configuration",
     "Writes the initial parameters, one forward/backward pass and a short training\n"
     "trajectory of a configuration into DIR (the files under golden/ and the\n"
     "PyTorch oracle's inputs).",
     "tessera dump --model tiny --out golden/tiny --traj-steps 10",
     run_dump, 1},
    {"compare", C_COMPARE, "A.jsonl B.jsonl [--rtol R] | A.safetensors B.safetensors",
     "compare two run logs (or two checkpoints), report the first divergence",
     "Compares two run logs record by record on their results (losses, gradient\n"
     "norms, learning rates, validation losses, the final parameter hash) and\n"
     "ignores timing, memory and communication. Prints \"identical\" or the first\n"
     "divergence. Given two checkpoints, says whether they hold the same model\n"
     "state: the same tensors and data byte for byte, step and configuration,\n"
     "whatever layout wrote them (the run's own settings, paths and threads, may\n"
     "differ); prints \"same model state\" or the first difference.\n"
     "Exit status: 0 equal, 1 different, 2 unreadable or malformed input.",
     "tessera compare serial.jsonl sp4.jsonl",
     run_compare, 0},
    {"tokenize", C_TOKENIZE, "--tokenizer MODEL --in TEXT --out TOKENS [flags]",
     "turn a text file into a token file with a SentencePiece tokenizer",
     "Encodes a text file with a SentencePiece model (trained with spm_train, see\n"
     "docs/TOKENIZER.md) into a file of token ids that --data reads: raw uint16\n"
     "ids when the vocabulary fits in 16 bits, else uint32. Each line is encoded on\n"
     "its own, as spm_encode does; a model trained with --byte_fallback also keeps\n"
     "the line breaks (its byte token <0x0A>). The input is read a few MiB at a\n"
     "time, the output written to a temporary name and renamed when complete.\n"
     "Then: tessera train --data TOKENS --data-format u16 --vocab V --tokenizer MODEL.\n"
     "With --ckpt the tokenizer is the one that checkpoint was trained with.",
     "tessera tokenize --tokenizer m.model --in text.txt --out tokens.bin",
     run_tokenize, 0},
    {"plot", C_PLOT, "A.jsonl [B.jsonl ...] --out FILE.svg [flags]",
     "draw the training and validation loss of run logs (SVG)",
     "Draws the training loss (a line) and the validation loss (markers) of one or\n"
     "more run logs against the step or the tokens trained on, the runs overlaid\n"
     "and named by their files in the legend, as one SVG file. A log that tessera\n"
     "compare would refuse is refused the same way (exit 2, naming file and line);\n"
     "a non-finite loss (a diverged step) is left out and breaks the line.",
     "tessera plot a.jsonl b.jsonl --out loss.svg --x tokens",
     run_plot, 0},
    {"plan", C_PLAN, "[flags]",
     "every layout of a model on a cluster: memory, bytes and time per step",
     "Enumerates the layouts of --ranks ranks (dp x sp x sp mode x pp x --zero x\n"
     "--checkpoint off and on; given, on alone), refuses those train would refuse (its rules, and\n"
     "each stage's model's), and for the others prints a rank's memory by kind\n"
     "(the fit check's own count), the bytes of a step by collective (the\n"
     "strategies' and the communicator's own counting) and a predicted step\n"
     "time: compute at --efficiency of --flops, communication by latency and\n"
     "bandwidth per link (intra- or inter-node), summed without overlap (and,\n"
     "as the other bound, the larger of the two; --calibrate LOG measures the\n"
     "efficiency on a run). Ranked by tokens/s among the layouts that fit in\n"
     "90% of --device-mem, as the fit check's margin; then the longest --seq\n"
     "the first fits (docs/PLAN.md). --dp, --sp, --pp, --zero and --sp-mode\n"
     "given keep the layouts with those values alone (without --ranks: dp x sp\n"
     "x pp ranks); --microbatches, a pipeline's microbatches (else one a\n"
     "sequence).",
     "tessera plan --shape llama3-8b --seq 65536 --ranks 8 --device-mem 80 --flops 400e12",
     run_plan, 0},
    {"info", C_INFO, "", "show the build: version, compiler, BLAS, MPI, backends",
     "Shows what this binary was built with and the exactness defaults.", "tessera info",
     run_info, 0},
};
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

// ---------------------------------------------------------------------------
// Everything the flags can set: the run configuration plus command options.
struct cli {
  ts_config cfg;
  char device[8];
  char precision[8];
  ts_layout lay; // --dp, --sp, --pp
  char sp_mode[32], schedule[16], compress[24], upipe_schedule[16], optimizer[16];
  char data_format[16], lr_schedule[16], mapl_anchor[16], vq_backward[8], vq_stream_unit[16];
  int val_frac_given; // --val-frac on the command line (refused with --val-data)
  int data_given;     // --data on the command line (else resume and eval read the checkpoint's)
  char ckpt[4096]; // eval, sample, tokenize
  int identity_boundaries; // eval
  int whole_split;         // eval
  int eval_batches_given;  // --eval-batches on the command line (refused with --whole-split)
  char activations_out[4096]; // eval
  // sample
  char prompt[16384], prompt_file[4096], tokenizer[4096];
  int prompt_given; // 1: --prompt, 2: --prompt-file, 3: both (refused)
  int tokens, top_k, json, sample_threads;
  float temperature, top_p;
  uint64_t sample_seed;
  char out[4096];  // dump: a directory; tokenize, plot: the file
  char in[4096];   // tokenize
  char x_axis[8];  // plot
  char title[256];
  int log_y;
  int traj_steps;
  double rtol; // compare
  // plan
  char shape[32];
  int ranks, ranks_per_node, verbose, top;
  int sp_mode_given; // --sp-mode on the command line (plan: that mode's layouts alone)
  // plan: the layout flags on the command line, each a filter of the layouts
  int ranks_given, dp_given, sp_given, pp_given, zero_given, microbatches_given;
  double device_mem, flops, efficiency, bw_intra, bw_inter, lat_intra, lat_inter;
  char calibrate[4096];      // plan: a run log whose measured efficiency replaces --efficiency
};

static void cli_defaults(cli *c) {
  snprintf(c->device, sizeof c->device, "cpu");
  snprintf(c->precision, sizeof c->precision, "fp32");
  c->lay.dp = c->lay.sp = c->lay.pp = c->lay.microbatches = 1;
  c->lay.schedule = 1;
  c->lay.upipe_sched = -1;
  snprintf(c->sp_mode, sizeof c->sp_mode, "lss");
  snprintf(c->schedule, sizeof c->schedule, "1f1b");
  snprintf(c->compress, sizeof c->compress, "none");
  c->traj_steps = 10;
  c->tokens = 100;
  c->temperature = 1.0f;
  c->top_p = 1.0f;
  c->sample_seed = 1;
  c->sample_threads = 1;
  snprintf(c->x_axis, sizeof c->x_axis, "step");
  c->rtol = 0.0;
  c->ranks = 1;
  c->efficiency = 0.0; // not given: --calibrate's, else run_plan's 0.4
  c->bw_intra = 100.0, c->bw_inter = 25.0;
  c->lat_intra = 5.0, c->lat_inter = 10.0;
}

typedef enum { K_INT, K_U64, K_FLOAT, K_DOUBLE, K_STR, K_SET } kind;

typedef struct flag flag;
typedef int (*check_fn)(const flag *f, const char *raw, cli *c);

struct flag {
  const char *name; // with the dashes
  kind kind;
  size_t off, size; // destination inside cli
  int set;          // K_SET: the value stored
  const char *meta; // value placeholder in --help
  const char *help;
  const char *deflt; // default shown in --help; NULL: read from the defaults
  int cmds;          // commands that take it
  int group;         // G_*
  check_fn check;    // extra parse-time checks (refusals, choices)
};

#define AT(member) offsetof(cli, member), sizeof(((cli *)0)->member)

#define TRAIN C_TRAIN
#define TED (C_TRAIN | C_EVAL | C_DUMP)
#define TD (C_TRAIN | C_DUMP)
#define TEDS (TED | C_SAMPLE)

static int check_model(const flag *f, const char *raw, cli *c);
static int check_device(const flag *f, const char *raw, cli *c);
static int check_precision(const flag *f, const char *raw, cli *c);
static int check_parallel(const flag *f, const char *raw, cli *c);
static int check_choice(const flag *f, const char *raw, cli *c);
static int check_compress(const flag *f, const char *raw, cli *c);
static int check_rank(const flag *f, const char *raw, cli *c);
static int check_nonneg(const flag *f, const char *raw, cli *c);
static int check_data_format(const flag *f, const char *raw, cli *c);
static int check_token_format(const flag *f, const char *raw, cli *c);
static int check_prompt(const flag *f, const char *raw, cli *c);
static int check_positive(const flag *f, const char *raw, cli *c);
static int check_x_axis(const flag *f, const char *raw, cli *c);
static int check_shape(const flag *f, const char *raw, cli *c);
static int check_fraction(const flag *f, const char *raw, cli *c);

// Headings of --help, in this order.
enum { G_CMD, G_MODEL, G_TRAIN, G_DATA, G_RUN, G_PAR, G_COMP, G_OUT };
static const char *group_names[] = {"options",
                                    "model",
                                    "training",
                                    "data and evaluation",
                                    "run",
                                    "parallel layout (world = dp x sp x pp ranks, under mpiexec)",
                                    "stage-boundary compression (docs/ALGORITHMS.md section 7)",
                                    "checkpoints and logs"};

static const flag flags[] = {
    // command-specific
    {"--ckpt", K_STR, AT(ckpt), 0, "FILE", "checkpoint to read (required)", "", C_EVAL | C_SAMPLE,
     G_CMD, NULL},
    {"--identity-boundaries", K_SET, AT(identity_boundaries), 1, NULL,
     "a compressed model's probe: also the loss with every boundary's basis the identity, and "
     "the change", "off", C_EVAL, G_CMD, NULL},
    {"--whole-split", K_SET, AT(whole_split), 1, NULL,
     "score the whole validation split, tiled from its start in consecutive --seq windows (as "
     "many whole batches as it holds; not with --eval-batches): the same tokens whatever the "
     "checkpoint's seed", "off: --eval-batches windows drawn from the seed", C_EVAL, G_CMD, NULL},
    {"--activations-out", K_STR, AT(activations_out), 0, "FILE",
     "also write the residual stream entering each layer over the evaluated batches "
     "(safetensors; bench/geometry.py reads it)", "none", C_EVAL, G_CMD, NULL},
    {"--prompt", K_STR, AT(prompt), 0, "TEXT",
     "the text to continue (or --prompt-file, for a longer one)", "", C_SAMPLE,
     G_CMD, check_prompt},
    {"--prompt-file", K_STR, AT(prompt_file), 0, "FILE", "the text to continue, from a file", "",
     C_SAMPLE, G_CMD, check_prompt},
    {"--tokens", K_INT, AT(tokens), 0, "N",
     "tokens to generate, >= 1; prompt + N must fit the model's context", NULL, C_SAMPLE, G_CMD,
     NULL},
    {"--temperature", K_FLOAT, AT(temperature), 0, "T", "divides the logits, >= 0; 0 = greedy",
     NULL, C_SAMPLE, G_CMD, NULL},
    {"--top-k", K_INT, AT(top_k), 0, "K", "keep the K most probable tokens, >= 0; 0 = all",
     NULL, C_SAMPLE, G_CMD, NULL},
    {"--top-p", K_FLOAT, AT(top_p), 0, "P",
     "then keep the fewest whose probability reaches P, in (0, 1]; 1 = all", NULL, C_SAMPLE,
     G_CMD, NULL},
    {"--seed", K_U64, AT(sample_seed), 0, "S", "seed of the draws (with the token's position)",
     NULL, C_SAMPLE, G_CMD, NULL},
    {"--tokenizer", K_STR, AT(tokenizer), 0, "FILE",
     "tokenizer model file; its vocabulary must be the checkpoint's, and when the checkpoint "
     "records one (train --tokenizer) it must be that one", "the recorded one, else bytes",
     C_SAMPLE, G_CMD, NULL},
    {"--json", K_SET, AT(json), 1, NULL,
     "print one JSON object: prompt_ids, ids, logprobs (each new token's log-probability "
     "under softmax(logits / T) before top-k and top-p; T = 0: softmax(logits)), text (the "
     "continuation)", "off", C_SAMPLE, G_CMD, NULL},
    {"--out", K_STR, AT(out), 0, "DIR", "directory for the golden files (required)", "", C_DUMP,
     G_CMD, NULL},
    {"--in", K_STR, AT(in), 0, "TEXT", "text file to encode (required)", "", C_TOKENIZE, G_CMD,
     NULL},
    {"--out", K_STR, AT(out), 0, "TOKENS", "token file to write (required)", "", C_TOKENIZE,
     G_CMD, NULL},
    {"--tokenizer", K_STR, AT(cfg.tokenizer_path), 0, "MODEL",
     "SentencePiece model file (spm_train's .model; required unless --ckpt)", "", C_TOKENIZE,
     G_CMD, NULL},
    {"--ckpt", K_STR, AT(ckpt), 0, "FILE",
     "use the tokenizer this checkpoint was trained with (--tokenizer: a copy of it, checked)",
     "", C_TOKENIZE, G_CMD, NULL},
    {"--data-format", K_STR, AT(data_format), 0, "FMT", "u16 or u32: how the ids are written",
     "u16 when the vocabulary fits, else u32", C_TOKENIZE, G_CMD, check_token_format},
    {"--traj-steps", K_INT, AT(traj_steps), 0, "K", "training steps in the trajectory", NULL,
     C_DUMP, G_CMD, check_nonneg},
    {"--rtol", K_DOUBLE, AT(rtol), 0, "R",
     "compare decimal values within relative tolerance R, 0 = bitwise", NULL, C_COMPARE, G_CMD,
     check_nonneg},
    {"--out", K_STR, AT(out), 0, "FILE", "the SVG file to write (required)", "", C_PLOT, G_CMD,
     NULL},
    {"--x", K_STR, AT(x_axis), 0, "step|tokens",
     "horizontal axis: optimizer steps, or tokens (step x batch x seq)", NULL, C_PLOT, G_CMD,
     check_x_axis},
    {"--title", K_STR, AT(title), 0, "T", "the drawing's title", "training and validation loss",
     C_PLOT, G_CMD, NULL},
    {"--log-y", K_SET, AT(log_y), 1, NULL, "logarithmic loss axis", "off", C_PLOT, G_CMD, NULL},
    {"--shape", K_STR, AT(shape), 0, "NAME",
     "a public model's published shape: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, llama3-8b, "
     "llama3-70b, mapl-150m, mapl-500m, mapl-1b (batch 1; the model flags after it change it)", "none", C_PLAN, G_CMD,
     check_shape},
    {"--ranks", K_INT, AT(ranks), 0, "N", "ranks in all: dp x sp x pp", NULL, C_PLAN, G_CMD,
     check_parallel},
    {"--ranks-per-node", K_INT, AT(ranks_per_node), 0, "N",
     "ranks of a node (a group inside one uses the intra-node link)", "--ranks", C_PLAN, G_CMD,
     check_nonneg},
    {"--device-mem", K_DOUBLE, AT(device_mem), 0, "GiB", "memory of a rank",
     "this machine's / ranks per node", C_PLAN, G_CMD, check_nonneg},
    {"--flops", K_DOUBLE, AT(flops), 0, "F", "FLOP/s of a rank (e.g. 989e12)",
     "this machine's measured roof / ranks per node", C_PLAN, G_CMD, check_nonneg},
    {"--efficiency", K_DOUBLE, AT(efficiency), 0, "E",
     "the fraction of --flops a step's compute reaches, in (0, 1]", "0.4", C_PLAN, G_CMD,
     check_fraction},
    {"--calibrate", K_STR, AT(calibrate), 0, "LOG",
     "the efficiency measured on a run: its log's median compute FLOP/s over its roof "
     "(instead of --efficiency)", "", C_PLAN, G_CMD, NULL},
    {"--bw-intra", K_DOUBLE, AT(bw_intra), 0, "GB/s", "bandwidth each way within a node", NULL,
     C_PLAN, G_CMD, check_fraction},
    {"--bw-inter", K_DOUBLE, AT(bw_inter), 0, "GB/s", "bandwidth each way between nodes", NULL,
     C_PLAN, G_CMD, check_fraction},
    {"--lat-intra", K_DOUBLE, AT(lat_intra), 0, "US", "latency of a call within a node, in µs",
     NULL, C_PLAN, G_CMD, check_nonneg},
    {"--lat-inter", K_DOUBLE, AT(lat_inter), 0, "US", "latency of a call between nodes, in µs",
     NULL, C_PLAN, G_CMD, check_nonneg},
    {"--verbose", K_SET, AT(verbose), 1, NULL, "list the refused layouts with their reasons",
     "off", C_PLAN, G_CMD, NULL},
    {"--top", K_INT, AT(top), 0, "K", "layouts shown, the fastest first", "20", C_PLAN, G_CMD,
     check_nonneg},
    {"--json", K_SET, AT(json), 1, NULL,
     "print one JSON object: every layout, its memory by kind (the first stage's rank 0 and the "
     "largest rank), its collectives per layer and per step, its predicted times", "off", C_PLAN,
     G_CMD, NULL},
    // model
    {"--model", K_STR, AT(cfg.preset), 0, "PRESET",
     "GPT: tiny, mini, small, large; LLaMA: llama-tiny, llama-mini, llama-100m", NULL, TD | C_PLAN, G_MODEL,
     check_model},
    {"--seq", K_INT, AT(cfg.seq), 0, "T", "context length, a multiple of the leaf", "preset", TD | C_PLAN,
     G_MODEL, NULL},
    {"--d", K_INT, AT(cfg.d), 0, "D", "model width", "preset", TD | C_PLAN, G_MODEL, NULL},
    {"--layers", K_INT, AT(cfg.n_layer), 0, "L", "transformer blocks", "preset", TD | C_PLAN, G_MODEL, NULL},
    {"--heads", K_INT, AT(cfg.n_head), 0, "H", "attention heads, must divide --d", "preset", TD | C_PLAN,
     G_MODEL, NULL},
    {"--kv-heads", K_INT, AT(cfg.n_kv_head), 0, "HKV",
     "key/value heads, must divide --heads (LLaMA: grouped-query attention; 0 = --heads)",
     "preset", TD | C_PLAN, G_MODEL, NULL},
    {"--d-ff", K_INT, AT(cfg.d_ff), 0, "F", "MLP inner width", "preset", TD | C_PLAN, G_MODEL, NULL},
    {"--vocab", K_INT, AT(cfg.vocab), 0, "V",
     "vocabulary: token ids 0..V-1, V >= 2 (bytes need V >= 256)", "256", TD | C_PLAN, G_MODEL, NULL},
    {"--rope-theta", K_FLOAT, AT(cfg.rope_theta), 0, "THETA", "rotary embedding base (LLaMA)",
     "10000", TD | C_PLAN, G_MODEL, NULL},
    {"--tied", K_SET, AT(cfg.tied), 1, NULL, "LM head shares the token embedding",
     "for the GPT presets", TD | C_PLAN, G_MODEL, NULL},
    {"--untied", K_SET, AT(cfg.tied), 0, NULL, "separate LM head matrix",
     "for the LLaMA presets", TD | C_PLAN, G_MODEL, NULL},
    {"--dropout", K_FLOAT, AT(cfg.dropout), 0, "P", "dropout probability, in [0, 1)", NULL, TD,
     G_MODEL, NULL},
    {"--tile", K_INT, AT(cfg.tile), 0, "N", "tokens per tile, a power of two", "min(64, T/8)", TD | C_PLAN,
     G_MODEL, NULL},
    {"--leaf", K_INT, AT(cfg.leaf), 0, "N", "tokens per gradient-sum leaf, a power of two",
     "min(256, T/8)", TD | C_PLAN, G_MODEL, NULL},
    // training
    {"--batch", K_INT, AT(cfg.batch), 0, "B", "sequences per step", "preset", TD | C_PLAN, G_TRAIN, NULL},
    {"--steps", K_INT, AT(cfg.steps), 0, "N", "optimizer steps", NULL, TRAIN, G_TRAIN, NULL},
    {"--seed", K_U64, AT(cfg.seed), 0, "S", "seed of initialisation and data sampling", NULL, TD,
     G_TRAIN, NULL},
    {"--lr", K_FLOAT, AT(cfg.lr), 0, "LR", "peak learning rate", NULL, TD, G_TRAIN, NULL},
    {"--min-lr-frac", K_FLOAT, AT(cfg.min_lr_frac), 0, "F",
     "final learning rate as a fraction of --lr", NULL, TD, G_TRAIN, NULL},
    {"--warmup", K_INT, AT(cfg.warmup), 0, "N", "linear warmup steps, then the --lr-schedule",
     NULL, TD, G_TRAIN, NULL},
    {"--lr-schedule", K_STR, AT(lr_schedule), 0, "NAME",
     "after the warmup: cosine or linear from --lr to --min-lr-frac x --lr, constant, or wsd "
     "(warmup-stable-decay: --lr, then linear to the minimum over the last --decay-frac)",
     "cosine", TD, G_TRAIN, check_choice},
    {"--decay-frac", K_FLOAT, AT(cfg.decay_frac), 0, "F",
     "wsd: the fraction of the steps after the warmup that decays, in (0, 1]", "0.2", TD,
     G_TRAIN, check_positive},
    {"--weight-decay", K_FLOAT, AT(cfg.weight_decay), 0, "W", "AdamW weight decay", NULL, TD,
     G_TRAIN, NULL},
    {"--beta1", K_FLOAT, AT(cfg.beta1), 0, "B1", "AdamW first-moment decay, in [0, 1)", NULL, TD,
     G_TRAIN, NULL},
    {"--beta2", K_FLOAT, AT(cfg.beta2), 0, "B2", "AdamW second-moment decay, in [0, 1)", NULL, TD,
     G_TRAIN, NULL},
    {"--eps", K_FLOAT, AT(cfg.eps), 0, "EPS", "AdamW denominator term, > 0", NULL, TD, G_TRAIN,
     NULL},
    {"--optimizer", K_STR, AT(optimizer), 0, "NAME",
     "adamw, or muon / muon-pe: Muon (Newton-Schulz / Polar Express) for the layers' 2-D weights "
     "and AdamW for the rest", "adamw", TD, G_TRAIN, check_choice},
    {"--muon-lr", K_FLOAT, AT(cfg.muon_lr), 0, "LR", "Muon's peak learning rate", "0.02", TD,
     G_TRAIN, NULL},
    {"--grad-clip", K_FLOAT, AT(cfg.grad_clip), 0, "C",
     "clip the global gradient norm at C, 0 = off", NULL, TD, G_TRAIN, NULL},
    // data and evaluation
    {"--data", K_STR, AT(cfg.data_path), 0, "PATH",
     "training data: text (each byte a token) or a file of token ids (eval, --resume: the "
     "checkpoint's unless given)", NULL, TED, G_DATA, NULL},
    {"--data-format", K_STR, AT(data_format), 0, "FMT",
     "bytes, u16 (raw uint16 ids), u32 (raw uint32 ids) or llmc (llm.c's .bin); a .bin without "
     "llm.c's header must name it",
     "detect: llm.c's header, else bytes", TED, G_DATA, check_data_format},
    {"--val-frac", K_FLOAT, AT(cfg.val_frac), 0, "F", "tail of --data held out, in (0, 1)",
     NULL, TED, G_DATA, NULL},
    {"--val-data", K_STR, AT(cfg.val_path), 0, "PATH",
     "validation file, same format (then all of --data trains; not with --val-frac)",
     "none: the tail of --data", TED, G_DATA, NULL},
    {"--tokenizer", K_STR, AT(cfg.tokenizer_path), 0, "MODEL",
     "the SentencePiece model the token data was made with (tessera tokenize): its ids must be "
     "--vocab; recorded in the checkpoints, to decode with the same one", "none", TRAIN, G_DATA,
     NULL},
    {"--eval-every", K_INT, AT(cfg.eval_every), 0, "N",
     "also evaluate every N steps, 0 = only at the end", NULL, TRAIN, G_DATA, NULL},
    {"--eval-batches", K_INT, AT(cfg.eval_batches), 0, "N", "validation batches per evaluation",
     NULL, C_TRAIN | C_EVAL, G_DATA, NULL},
    // run
    {"--exact", K_SET, AT(cfg.fast), 0, NULL, "bitwise reproducible arithmetic", NULL, TD | C_PLAN, G_RUN,
     NULL},
    {"--fast", K_SET, AT(cfg.fast), 1, NULL,
     "library-chosen reduction order in distributed runs; ring attention merges blocks by "
     "log-sum-exp; on a GPU, cuBLAS's products (the fast tier)", NULL, TD | C_PLAN, G_RUN, NULL},
    {"--device", K_STR, AT(device), 0, "cpu|cuda", "where to compute", NULL, TEDS | C_PLAN, G_RUN,
     check_device},
    {"--precision", K_STR, AT(precision), 0, "fp32|bf16",
     "GPU arithmetic: bf16 rounds the operands of products (fp32 weights and accumulation)", NULL,
     TEDS, G_RUN, check_precision},
    {"--threads", K_INT, AT(cfg.threads), 0, "N", "OpenMP threads, 0 = all cores (at most 1024)",
     NULL, TED | C_PLAN, G_RUN, NULL},
    {"--threads", K_INT, AT(sample_threads), 0, "N",
     "OpenMP threads, 0 = all cores (a token's products are one call each: more threads speed "
     "up only its attention)", NULL, C_SAMPLE, G_RUN, NULL},
    {"--quiet", K_SET, AT(cfg.quiet), 1, NULL, "no progress output", "off", TRAIN | C_TOKENIZE,
     G_RUN, NULL},
    {"--log-every", K_INT, AT(cfg.log_every), 0, "N",
     "a progress line every N steps and after the last (the --log file has every step)", "1",
     TRAIN, G_RUN, check_rank},
    {"--checkpoint", K_SET, AT(cfg.checkpoint), 1, NULL,
     "keep only each layer's input; recompute its activations in backward (same bits)", "off",
     TED | C_PLAN, G_RUN, NULL},
    {"--fused-ce", K_SET, AT(cfg.fused_ce), 1, NULL,
     "LM head and cross-entropy one leaf of tokens at a time: no T x V logits (same bits)", "off",
     TED | C_PLAN, G_RUN, NULL},
    {"--tiled-mlp", K_SET, AT(cfg.tiled_mlp), 1, NULL,
     "MLP one leaf of tokens at a time, recomputed in backward: no T x d_ff buffers (same bits)",
     "off", TED | C_PLAN, G_RUN, NULL},
    // parallel layout
    {"--dp", K_INT, AT(lay.dp), 0, "D",
     "data-parallel ranks, any number dividing --batch; batch/D x seq/leaf a power of two "
     "(mpiexec -n D)", NULL, TRAIN | C_PLAN, G_PAR,
     check_parallel},
    {"--sp", K_INT, AT(lay.sp), 0, "N",
     "sequence-parallel ranks: a power of two; --seq splits into N segments (mpiexec -n D*N)",
     NULL, TRAIN | C_PLAN, G_PAR, check_parallel},
    {"--sp-mode", K_STR, AT(sp_mode), 0, "MODE",
     "how the sequence group shares a sequence: one of the strategies listed below",
     NULL, TRAIN, G_PAR, check_choice},
    {"--sp-mode", K_STR, AT(sp_mode), 0, "MODE",
     "plan the sequence-parallel layouts of this strategy alone (train --help lists them)",
     "all", C_PLAN, G_PAR, check_choice},
    {"--upipe-u", K_INT, AT(lay.upipe_u), 0, "U",
     "UPipe: heads per stage, a multiple of --sp dividing the heads", "--sp", TRAIN | C_PLAN, G_PAR,
     check_nonneg},
    {"--upipe-schedule", K_STR, AT(upipe_schedule), 0, "NAME",
     "UPipe: natural (heads in order) or gqa (one head of each group per stage, key/value "
     "heads sent once per round)", "gqa with --kv-heads < --heads", TRAIN | C_PLAN, G_PAR, check_choice},
    {"--ulysses-degree", K_INT, AT(lay.ulysses_degree), 0, "U",
     "usp: ranks of each head-parallel (Ulysses) group, dividing --sp and the key/value heads; "
     "ring attention runs across the --sp/U groups",
     "the largest such U below --sp", TRAIN | C_PLAN, G_PAR, check_nonneg},
    {"--pp", K_INT, AT(lay.pp), 0, "P", "pipeline stages", NULL, TRAIN | C_PLAN, G_PAR, check_parallel},
    {"--zero", K_INT, AT(lay.zero), 0, "S",
     "ZeRO stage over the ranks that hold the same parameters (--dp x --sp): 1 shards the "
     "AdamW moments, 2 the gradients too, 3 the layers' parameters too (each layer gathered "
     "just before use); 2 and 3 on the CPU", "0", TRAIN | C_PLAN, G_PAR,
     check_nonneg},
    {"--microbatches", K_INT, AT(lay.microbatches), 0, "M",
     "microbatches per step: they split each data rank's sequences (the pipeline's; without "
     "--pp, gradient accumulation: run one after another, the same bits as one pass)", NULL,
     TRAIN | C_PLAN, G_PAR, check_parallel},
    {"--schedule", K_STR, AT(schedule), 0, "NAME", "pipeline schedule: gpipe or 1f1b", NULL,
     TRAIN | C_PLAN, G_PAR, check_choice},
    // stage-boundary compression (part of the model: dump and the serial run take it too)
    {"--compress", K_STR, AT(compress), 0, "MODE",
     "stage-boundary compression: none, ssn, mapl, mapl-unconstrained, mapl-vq, mapl-frozen or "
     "ssn-confined",
     "none", TD | C_PLAN,
     G_COMP, check_compress},
    {"--rank", K_INT, AT(cfg.compress_rank), 0, "R",
     "floats per token that cross a boundary, <= d (required with --compress)", "", TD | C_PLAN, G_COMP,
     check_rank},
    {"--compress-stages", K_INT, AT(cfg.compress_stages), 0, "S",
     "stages of the compressed model, S-1 boundaries (serial runs of a pipelined model)", "--pp",
     TD | C_PLAN, G_COMP, check_rank},
    {"--proj-lr", K_FLOAT, AT(cfg.proj_lr), 0, "LR", "the projectors' peak learning rate (SPEL)",
     "0.1 x --muon-lr", TD, G_COMP, NULL},
    {"--mapl-anchor", K_STR, AT(mapl_anchor), 0, "KIND",
     "mapl, mapl-vq: the anchor added back after a boundary: factorised (a learned V x r table "
     "times a frozen r x d one), none, static (a frozen seeded V x d table) or full (a learned "
     "V x d table per stage)", "factorised", TD | C_PLAN, G_COMP, check_choice},
    {"--ssn-refresh", K_INT, AT(cfg.ssn_refresh), 0, "N",
     "ssn-confined: refresh the subspace every N steps on the Grassmann manifold (-1: never)",
     "500", TD, G_COMP, NULL},
    {"--ssn-refresh-step", K_FLOAT, AT(cfg.ssn_refresh_step), 0, "S",
     "ssn-confined: the refresh's step (Frobenius length, in (0, 1])", "0.1", TD, G_COMP, NULL},
    {"--vq-group", K_INT, AT(cfg.vq_groups), 0, "G", "mapl-vq: coordinates per quantised group",
     "2", TD | C_PLAN, G_COMP, check_rank},
    {"--vq-rounds", K_INT, AT(cfg.vq_rounds), 0, "R", "mapl-vq: residual quantisation rounds", "2",
     TD | C_PLAN, G_COMP, check_rank},
    {"--vq-codes", K_INT, AT(cfg.vq_codes), 0, "K", "mapl-vq: codes per codebook, <= 256", "256",
     TD | C_PLAN, G_COMP, check_rank},
    {"--vq-gamma", K_FLOAT, AT(cfg.vq_gamma), 0, "G", "mapl-vq: EMA decay of the codebooks",
     "0.99", TD, G_COMP, NULL},
    {"--vq-commit", K_FLOAT, AT(cfg.vq_commit), 0, "W", "mapl-vq: commitment-loss weight", "1",
     TD, G_COMP, NULL},
    {"--vq-sync-codes", K_INT, AT(cfg.vq_sync_codes), 0, "N",
     "mapl-vq: codes per codebook streamed into the shared copy after each step, in a seeded "
     "order taken in turn (--vq-codes: the whole codebook every step)", "1", TD | C_PLAN,
     G_COMP, check_rank},
    {"--vq-backward", K_STR, AT(vq_backward), 0, "on|off",
     "mapl-vq: quantise the boundary gradients too, each token's dZ as its RMS (a float) and "
     "codes of dZ/RMS in codebooks of their own, streamed like the forward's", "off", TD | C_PLAN, G_COMP,
     check_choice},
    {"--vq-backward-gamma", K_FLOAT, AT(cfg.vq_backward_gamma), 0, "G",
     "mapl-vq --vq-backward on: EMA decay of the gradient's codebooks", "--vq-gamma", TD, G_COMP,
     NULL},
    {"--vq-stream-unit", K_STR, AT(vq_stream_unit), 0, "step|microbatch",
     "mapl-vq: what --vq-stream-every counts; microbatch makes the step's --dp x --microbatches "
     "microbatches part of the model (the serial run with --microbatches M equals any layout of "
     "M)", "step", TD | C_PLAN, G_COMP, check_choice},
    {"--vq-stream-every", K_INT, AT(cfg.vq_stream_every), 0, "N",
     "mapl-vq: stream --vq-sync-codes codes of each codebook into the shared copy once every N "
     "units (the MAPL paper: 5 microbatches)", "1", TD | C_PLAN, G_COMP, NULL},
    // checkpoints and logs
    {"--log", K_STR, AT(cfg.log_path), 0, "FILE", "write the run log (JSONL) to FILE", "none",
     TRAIN, G_OUT, NULL},
    {"--ckpt-dir", K_STR, AT(cfg.ckpt_dir), 0, "DIR", "directory for checkpoints", "none", TRAIN,
     G_OUT, NULL},
    {"--ckpt-every", K_INT, AT(cfg.ckpt_every), 0, "K",
     "checkpoint every K steps, 0 = only at the end", NULL, TRAIN, G_OUT, NULL},
    {"--keep-last", K_INT, AT(cfg.keep_last), 0, "N",
     "keep only the N latest checkpoints of --ckpt-dir, 0 = all", NULL, TRAIN, G_OUT,
     check_nonneg},
    {"--resume", K_SET, AT(cfg.resume), 1, NULL,
     "continue from the latest checkpoint (none yet: start at step 0; without --data, its "
     "recorded data)", "off", TRAIN, G_OUT, NULL},
    {"--restart", K_SET, AT(cfg.restart), 1, NULL,
     "start over in a --ckpt-dir that holds checkpoints: they are removed first (without it "
     "such a directory is refused unless --resume)", "off", TRAIN, G_OUT, NULL},
    {"--init-from", K_STR, AT(cfg.init_from), 0, "FILE",
     "start from this checkpoint's weights (same architecture), with a new optimizer state and "
     "schedule from step 0; not with --resume", "none", TRAIN, G_OUT, NULL},
};
#define N_FLAGS ((int)(sizeof flags / sizeof flags[0]))

// ---------------------------------------------------------------------------
// Strict number parsing: the whole string, in range, nothing else. The
// messages become "tessera CMD: --flag VALUE: <message>".
static int parse_int(const char *s, int *out, const char **why) {
  char *end;
  errno = 0;
  if (*s == '\0' || *s == ' ' || *s == '\t') return *why = "not an integer", -1;
  long v = strtol(s, &end, 10);
  if (*end != '\0') return *why = "not an integer", -1;
  if (errno == ERANGE || v < INT_MIN || v > INT_MAX) return *why = "out of range", -1;
  *out = (int)v;
  return 0;
}

static int parse_u64(const char *s, uint64_t *out, const char **why) {
  char *end;
  errno = 0;
  if (!(*s >= '0' && *s <= '9')) return *why = "not a non-negative integer", -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end != '\0') return *why = "not a non-negative integer", -1;
  if (errno == ERANGE) return *why = "out of range", -1;
  *out = (uint64_t)v;
  return 0;
}

static int parse_double(const char *s, double *out, const char **why) {
  char *end;
  errno = 0;
  if (*s == '\0' || *s == ' ' || *s == '\t') return *why = "not a number", -1;
  double v = strtod(s, &end);
  if (*end != '\0') return *why = "not a number", -1;
  if (errno == ERANGE && fabs(v) > 1.0) return *why = "out of range", -1;
  if (!isfinite(v)) return *why = "not a finite number", -1;
  *out = v;
  return 0;
}

static int parse_float(const char *s, float *out, const char **why) {
  double v;
  if (parse_double(s, &v, why) != 0) return -1;
  if (fabs(v) > FLT_MAX) return *why = "out of range", -1;
  *out = (float)v;
  return 0;
}

// ---------------------------------------------------------------------------
// Parse-time checks for flags whose meaning is more than a number.
static int check_model(const flag *f, const char *raw, cli *c) {
  ts_config scratch;
  memset(&scratch, 0, sizeof scratch);
  return ts_config_preset(&scratch, raw); // its message names --model
}

static int check_device(const flag *f, const char *raw, cli *c) {
  if (strcmp(raw, "cpu") == 0) return TS_OK;
  if (strcmp(raw, "cuda") != 0) return ts_fail(TS_EUSAGE, "--device %s: must be cpu or cuda", raw);
#ifdef TS_HAVE_CUDA
  return TS_OK; // whether a GPU is there is checked when the run starts
#else
  return ts_fail(TS_EUSAGE,
                 "--device cuda: this build has no CUDA backend (configure --enable-cuda)");
#endif
}

static int check_precision(const flag *f, const char *raw, cli *c) {
  if (strcmp(raw, "fp32") == 0 || strcmp(raw, "bf16") == 0) return TS_OK;
  return ts_fail(TS_EUSAGE, "--precision %s: must be fp32 or bf16", raw);
}

static int check_parallel(const flag *f, const char *raw, cli *c) {
  int v = *(const int *)((const char *)c + f->off);
  if (v < 1) return ts_fail(TS_EUSAGE, "%s %s: must be >= 1", f->name, raw);
  // the rest is checked later, against the model and the MPI world
  // (ts_layout_check, ts_grid_check)
  return TS_OK;
}

// Names are checked now so a typo is caught even while the layout is serial.
static int check_choice(const flag *f, const char *raw, cli *c) {
  static const char *schedules[] = {"gpipe", "1f1b", NULL};
  if (strcmp(f->name, "--optimizer") == 0) {
    static const char *names[] = {"adamw", "muon", "muon-pe", NULL};
    for (int i = 0; names[i]; i++)
      if (strcmp(raw, names[i]) == 0) {
        c->cfg.optimizer = i;
        return TS_OK;
      }
    return ts_fail(TS_EUSAGE, "--optimizer %s: must be adamw, muon or muon-pe", raw);
  }
  if (strcmp(f->name, "--upipe-schedule") == 0) {
    if (strcmp(raw, "natural") == 0 || strcmp(raw, "gqa") == 0) {
      c->lay.upipe_sched = raw[0] == 'g';
      return TS_OK;
    }
    return ts_fail(TS_EUSAGE, "--upipe-schedule %s: must be natural or gqa", raw);
  }
  if (strcmp(f->name, "--sp-mode") == 0) {
    return ts_sp_mode_parse(raw, &c->lay.sp_mode);
  }
  if (strcmp(f->name, "--mapl-anchor") == 0) {
    for (int i = 0; i < TS_ANCHOR_NKINDS; i++)
      if (strcmp(raw, ts_mapl_anchor_names[i]) == 0) {
        c->cfg.mapl_anchor = i;
        return TS_OK;
      }
    return ts_fail(TS_EUSAGE, "--mapl-anchor %s: must be factorised, none, static or full", raw);
  }
  if (strcmp(f->name, "--vq-backward") == 0) {
    if (strcmp(raw, "on") == 0 || strcmp(raw, "off") == 0) {
      c->cfg.vq_backward = raw[1] == 'n';
      return TS_OK;
    }
    return ts_fail(TS_EUSAGE, "--vq-backward %s: must be on or off", raw);
  }
  if (strcmp(f->name, "--vq-stream-unit") == 0) {
    if (strcmp(raw, "step") == 0 || strcmp(raw, "microbatch") == 0) {
      c->cfg.vq_stream_microbatches = raw[0] == 'm' ? -1 : 0; // (train: --dp x --microbatches)
      return TS_OK;
    }
    return ts_fail(TS_EUSAGE, "--vq-stream-unit %s: must be step or microbatch", raw);
  }
  if (strcmp(f->name, "--lr-schedule") == 0) {
    for (int i = 0; i < TS_LR_NSCHEDULES; i++)
      if (strcmp(raw, ts_lr_schedule_names[i]) == 0) {
        c->cfg.lr_schedule = i;
        return TS_OK;
      }
    return ts_fail(TS_EUSAGE, "--lr-schedule %s: must be cosine, linear, constant or wsd", raw);
  }
  for (int i = 0; schedules[i]; i++)
    if (strcmp(raw, schedules[i]) == 0) {
      c->lay.schedule = i; // 0 gpipe, 1 1f1b
      return TS_OK;
    }
  return ts_fail(TS_EUSAGE, "%s %s: must be gpipe or 1f1b", f->name, raw);
}

static int check_compress(const flag *f, const char *raw, cli *c) {
  for (int i = 0; i < TS_COMPRESS_NMODES; i++)
    if (strcmp(raw, ts_compress_names[i]) == 0) {
      c->cfg.compress = i;
      return TS_OK;
    }
  return ts_fail(TS_EUSAGE,
                 "--compress %s: must be none, ssn, mapl, mapl-unconstrained, mapl-vq, "
                 "mapl-frozen or ssn-confined", raw);
}

// Counts that must be at least 1 (their ranges against the model are
// checked in ts_config_finalize).
static int check_rank(const flag *f, const char *raw, cli *c) {
  if (*(const int *)((const char *)c + f->off) < 1)
    return ts_fail(TS_EUSAGE, "%s %s: must be >= 1", f->name, raw);
  return TS_OK;
}

static int check_data_format(const flag *f, const char *raw, cli *c) {
  for (int i = 0; i < TS_DATA_NFORMATS; i++)
    if (strcmp(raw, ts_data_format_names[i]) == 0) {
      c->cfg.data_format = i;
      return TS_OK;
    }
  return ts_fail(TS_EUSAGE, "--data-format %s: must be bytes, u16, u32 or llmc", raw);
}

static int check_token_format(const flag *f, const char *raw, cli *c) {
  if (strcmp(raw, "u16") && strcmp(raw, "u32"))
    return ts_fail(TS_EUSAGE, "--data-format %s: tessera tokenize writes u16 or u32", raw);
  return check_data_format(f, raw, c);
}

static int check_prompt(const flag *f, const char *raw, cli *c) {
  (void)raw;
  c->prompt_given |= f->off == offsetof(cli, prompt) ? 1 : 2;
  return TS_OK;
}

static int check_x_axis(const flag *f, const char *raw, cli *c) {
  if (strcmp(raw, "step") == 0 || strcmp(raw, "tokens") == 0) return TS_OK;
  return ts_fail(TS_EUSAGE, "--x %s: must be step or tokens", raw);
}

// The plan's rates (K_DOUBLE): above 0; --efficiency at most 1.
static int check_fraction(const flag *f, const char *raw, cli *c) {
  const double v = *(const double *)((const char *)c + f->off);
  const int fraction = strcmp(f->name, "--efficiency") == 0;
  if (!(v > 0.0) || (fraction && v > 1.0))
    return ts_fail(TS_EUSAGE, "%s %s: must be %s", f->name, raw, fraction ? "in (0, 1]" : "> 0");
  return TS_OK;
}

static int check_shape(const flag *f, const char *raw, cli *c) {
  ts_config scratch;
  memset(&scratch, 0, sizeof scratch);
  return ts_plan_shape(raw, &scratch); // its message names --shape and the shapes
}

static int check_nonneg(const flag *f, const char *raw, cli *c) {
  const void *p = (const char *)c + f->off;
  double v = f->kind == K_INT ? *(const int *)p : *(const double *)p;
  if (v < 0) return ts_fail(TS_EUSAGE, "%s %s: must be >= 0", f->name, raw);
  return TS_OK;
}

// A float that must be above 0 (its 0 is the configuration's "not set").
static int check_positive(const flag *f, const char *raw, cli *c) {
  if (!(*(const float *)((const char *)c + f->off) > 0.0f))
    return ts_fail(TS_EUSAGE, "%s %s: must be > 0", f->name, raw);
  return TS_OK;
}

// ---------------------------------------------------------------------------
// Parsing.

// Stores raw into the flag's field. Returns TS_OK or TS_EUSAGE with a message.
static int store(const flag *f, const char *raw, cli *c) {
  void *p = (char *)c + f->off;
  const char *why = NULL;
  int bad = 0;
  switch (f->kind) {
  case K_INT: bad = parse_int(raw, p, &why); break;
  case K_U64: bad = parse_u64(raw, p, &why); break;
  case K_FLOAT: bad = parse_float(raw, p, &why); break;
  case K_DOUBLE: bad = parse_double(raw, p, &why); break;
  case K_STR:
    // an empty value would read as "not given" (no log, no checkpoints):
    // only a prompt or a title may be empty
    if (!raw[0] && strcmp(f->name, "--prompt") != 0 && strcmp(f->name, "--title") != 0)
      return ts_fail(TS_EUSAGE, "%s: empty value (leave the flag out for its default)", f->name);
    if (strlen(raw) >= f->size) {
      return ts_fail(TS_EUSAGE, "%s: value too long (at most %zu bytes)", f->name, f->size - 1);
    }
    memcpy(p, raw, strlen(raw) + 1);
    break;
  case K_SET: *(int *)p = f->set; break;
  }
  if (bad) return ts_fail(TS_EUSAGE, "%s %s: %s", f->name, raw, why);
  return f->check ? f->check(f, raw, c) : TS_OK;
}

// A name may have a row per command (--seed; --out: dump's directory, the
// file of tokenize and plot): the row of cmd, else its first row (which
// parse_args then refuses for cmd), else NULL.
static const flag *find_flag(const char *name, size_t len, int cmd) {
  const flag *any = NULL;
  for (int i = 0; i < N_FLAGS; i++)
    if (strlen(flags[i].name) == len && strncmp(flags[i].name, name, len) == 0) {
      if (flags[i].cmds & cmd) return &flags[i];
      if (!any) any = &flags[i];
    }
  return any;
}

typedef struct {
  const flag *f;
  const char *value; // NULL for K_SET
} parsed;

// Pass 1: recognise every flag and its value and check the value's syntax
// (into a scratch cli), in argv order; positional arguments go to pos.
// Nothing is applied yet, because the preset must come first.
static int parse_args(const command *cmd, int argc, char **argv, parsed *out, int *n_out,
                      const char **pos, int *n_pos) {
  cli scratch;
  memset(&scratch, 0, sizeof scratch);
  *n_out = *n_pos = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || a[1] == '\0') { // positional ("-" alone too)
      if (cmd->id != C_PLOT && (cmd->id != C_COMPARE || *n_pos == 2))
        return ts_fail(TS_EUSAGE, "unexpected argument '%s'", a);
      pos[(*n_pos)++] = a;
      continue;
    }
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const flag *f = find_flag(a, len, cmd->id);
    if (f == NULL)
      return ts_fail(TS_EUSAGE, "%.*s: unknown flag (see 'tessera %s --help')", (int)len, a,
                     cmd->name);
    if (!(f->cmds & cmd->id))
      return ts_fail(TS_EUSAGE, "%s: not a flag of 'tessera %s' (see 'tessera %s --help')", f->name,
                     cmd->name, cmd->name);
    const char *value = NULL;
    if (f->kind == K_SET) {
      if (eq) return ts_fail(TS_EUSAGE, "%s: takes no value", f->name);
    } else if (eq) {
      value = eq + 1;
    } else {
      // a following flag is not a value: `--log --quiet` is a mistake
      if (i + 1 >= argc)
        return ts_fail(TS_EUSAGE, "%s: missing value (%s)", f->name, f->meta);
      if (strncmp(argv[i + 1], "--", 2) == 0)
        return ts_fail(TS_EUSAGE, "%s: missing value (%s) before %s; a value that begins with "
                       "-- is written %s=VALUE", f->name, f->meta, argv[i + 1], f->name);
      value = argv[++i];
    }
    int rc = store(f, value ? value : "", &scratch);
    if (rc != TS_OK) return rc;
    out[(*n_out)++] = (parsed){f, value};
  }
  return TS_OK;
}

// Settings whose 0 is the configuration's "not given" (the default is filled
// in later) and that no parse-time check refuses at 0: a 0 written on the
// command line would silently be the default, so it is refused; none of them
// has a meaning at 0.
static const char *const zero_means_default[] = {
    "--muon-lr", "--proj-lr", "--vq-gamma", "--vq-commit", "--vq-backward-gamma",
    "--vq-stream-every", "--rope-theta"};

// mapl-vq's settings whose written default is the configuration's 0: the codec's own
// check (ts_boundary_finalize) cannot tell them from "not given", so a value written
// for another codec is refused here, where the flag is seen.
static const char *const vq_only_flags[] = {"--vq-stream-unit", "--vq-backward"};

// What the flags given say, checked against the whole configuration: a 0
// that would read as the default, and a flag the model has no use for (the
// other flags that need a setting are refused where the setting is checked).
static int check_given(const parsed *p, int n, const cli *c) {
  for (int i = 0; i < n; i++) {
    const flag *f = p[i].f;
    for (size_t k = 0; k < sizeof zero_means_default / sizeof zero_means_default[0]; k++)
      if (strcmp(f->name, zero_means_default[k]) == 0 && p[i].value &&
          strtod(p[i].value, NULL) == 0.0)
        return ts_fail(TS_EUSAGE, "%s %s: must be above 0 (leave the flag out for its default)",
                       f->name, p[i].value);
    if (f->off == offsetof(cli, cfg.rope_theta) && c->cfg.variant != TS_LLAMA)
      return ts_fail(TS_EUSAGE, "--rope-theta: only with a LLaMA model (the GPT variant learns "
                     "its positions)");
    for (size_t k = 0; k < sizeof vq_only_flags / sizeof vq_only_flags[0]; k++)
      if (strcmp(f->name, vq_only_flags[k]) == 0 && c->cfg.compress != TS_COMPRESS_MAPL_VQ)
        return ts_fail(TS_EUSAGE, "%s %s: only with --compress mapl-vq", f->name,
                       p[i].value ? p[i].value : "");
    if (f->off == offsetof(cli, cfg.compress_stages) && c->cfg.compress == 0)
      return ts_fail(TS_EUSAGE, "--compress-stages: only with --compress");
  }
  return TS_OK;
}

// Preset (last --model, default tiny), then run defaults, then every flag in order.
static int build(const parsed *p, int n, cli *c) {
  const char *preset = "tiny", *shape = NULL; // (plan: a public model's shape instead)
  for (int i = 0; i < n; i++) {
    if (strcmp(p[i].f->name, "--model") == 0) preset = p[i].value;
    if (strcmp(p[i].f->name, "--shape") == 0) shape = p[i].value;
  }
  memset(c, 0, sizeof *c);
  int rc = shape ? ts_plan_shape(shape, &c->cfg) : ts_config_preset(&c->cfg, preset);
  if (rc != TS_OK) return rc;
  if (shape && preset != NULL && strcmp(preset, "tiny") != 0)
    return ts_fail(TS_EUSAGE, "--shape %s: not with --model %s (one names the model)", shape,
                   preset);
  ts_config_defaults(&c->cfg);
  cli_defaults(c);
  for (int i = 0; i < n; i++) {
    rc = store(p[i].f, p[i].value ? p[i].value : "", c);
    if (rc != TS_OK) return rc;
    if (p[i].f->off == offsetof(cli, cfg.val_frac)) c->val_frac_given = 1;
    if (p[i].f->off == offsetof(cli, cfg.data_path)) c->data_given = 1;
    if (p[i].f->off == offsetof(cli, cfg.eval_batches)) c->eval_batches_given = 1;
    if (p[i].f->off == offsetof(cli, sp_mode)) c->sp_mode_given = 1;
    if (p[i].f->off == offsetof(cli, ranks)) c->ranks_given = 1;
    if (p[i].f->off == offsetof(cli, lay.dp)) c->dp_given = 1;
    if (p[i].f->off == offsetof(cli, lay.sp)) c->sp_given = 1;
    if (p[i].f->off == offsetof(cli, lay.pp)) c->pp_given = 1;
    if (p[i].f->off == offsetof(cli, lay.zero)) c->zero_given = 1;
    if (p[i].f->off == offsetof(cli, lay.microbatches)) c->microbatches_given = 1;
  }
  if ((rc = check_given(p, n, c)) != TS_OK) return rc;
  // the data a resumed run or an evaluation reads unless told: the checkpoint's
  c->cfg.data_from_ckpt = !c->data_given;
  c->cfg.val_frac_from_ckpt = !c->val_frac_given;
  return TS_OK;
}

// ---------------------------------------------------------------------------
// Help.

// The "(default ...)" note of a flag, or "" when there is nothing to say.
static void default_text(const flag *f, const cli *d, char *buf, size_t cap) {
  const void *p = (const char *)d + f->off;
  if (f->deflt) {
    if (strcmp(f->deflt, "preset") == 0) // show the tiny preset's value as an example
      snprintf(buf, cap, "default from --model; tiny: %d", *(const int *)p);
    else if (f->deflt[0])
      snprintf(buf, cap, "default %s", f->deflt);
    else
      buf[0] = '\0'; // required: no default
    return;
  }
  switch (f->kind) {
  case K_INT: snprintf(buf, cap, "default %d", *(const int *)p); break;
  case K_U64: snprintf(buf, cap, "default %llu", (unsigned long long)*(const uint64_t *)p); break;
  case K_FLOAT: snprintf(buf, cap, "default %g", (double)*(const float *)p); break;
  case K_DOUBLE: snprintf(buf, cap, "default %g", *(const double *)p); break;
  case K_STR: snprintf(buf, cap, "default %s", (const char *)p); break;
  case K_SET: snprintf(buf, cap, "%s", *(const int *)p == f->set ? "default" : ""); break;
  }
}

// The layout flags that plan enumerates, and that filter its layouts when
// given: train's rows.
static int plan_filter(const flag *f) {
  return f->off == offsetof(cli, lay.dp) || f->off == offsetof(cli, lay.sp) ||
         f->off == offsetof(cli, lay.pp) || f->off == offsetof(cli, lay.zero);
}

static void command_help(const command *cmd, FILE *out) {
  cli d;
  memset(&d, 0, sizeof d);
  ts_config_preset(&d.cfg, "tiny");
  ts_config_defaults(&d.cfg);
  cli_defaults(&d);
  fprintf(out, "usage: tessera %s%s%s\n\n%s\n", cmd->name, cmd->args[0] ? " " : "", cmd->args,
          cmd->about);
  // flags grouped under their headings, in table order within a group
  for (int g = 0; g < (int)(sizeof group_names / sizeof group_names[0]); g++) {
    int heading = 0;
    for (int i = 0; i < N_FLAGS; i++) {
      const flag *f = &flags[i];
      if (!(f->cmds & cmd->id) || f->group != g) continue;
      if (!heading++) fprintf(out, "\n%s:\n", group_names[g]);
      char left[64], def[128];
      snprintf(left, sizeof left, "%s%s%s", f->name, f->meta ? " " : "", f->meta ? f->meta : "");
      default_text(f, &d, def, sizeof def);
      if (cmd->id == C_PLAN && plan_filter(f)) // train's row, a filter of the plan's layouts
        snprintf(def, sizeof def, "plan: every value; given, the layouts with it alone");
      if (def[0])
        fprintf(out, "  %-22s %s (%s)\n", left, f->help, def);
      else
        fprintf(out, "  %-22s %s\n", left, f->help);
    }
  }
  if (cmd->id == C_TRAIN || cmd->id == C_DUMP) {
    fprintf(out, "\npresets:\n");
    for (const char *const *p = ts_preset_names; *p; p++) {
      ts_config c;
      memset(&c, 0, sizeof c);
      ts_config_preset(&c, *p);
      fprintf(out, "  %-8s d %d, layers %d, heads %d, d-ff %d, seq %d, batch %d\n", *p, c.d,
              c.n_layer, c.n_head, c.d_ff, c.seq, c.batch);
    }
  }
  if (cmd->id == C_TRAIN) { // the registry's strategies (src/strategies.def)
    fprintf(out, "\nsequence-parallel strategies (--sp-mode):\n");
    for (int i = 0; i < TS_SP_NMODES; i++) {
      const ts_cp *cp = ts_cp_get((ts_sp_mode)i);
      fprintf(out, "  %-12s %s%s\n", ts_sp_mode_names[i], cp->summary,
              cp->exact ? " [exact]" : " [tolerance]");
    }
  }
  fprintf(out, "\n  %-22s %s\n", "--help, -h", "show this help");
  fprintf(out, "\nexample:\n  %s\n", cmd->example);
}

static void main_help(FILE *out) {
  fprintf(out, "usage: tessera <command> [flags]\n\n"
               "Trains GPT-style transformers exactly: a distributed run reproduces the serial\n"
               "run bit for bit.\n\ncommands:\n");
  for (int i = 0; i < N_COMMANDS; i++)
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\n  %-10s %s\n  %-10s %s\n\n"
          "Run 'tessera <command> --help' for the flags of a command.\n\n"
          "example:\n  tessera train --model tiny --steps 50 --log run.jsonl\n",
          "--help", "show this help", "--version", "show the version");
}

// ---------------------------------------------------------------------------
// Outputs that are inputs: the log is opened for writing (truncated) at the
// start and checkpoints are written over step-*.safetensors, so an output
// naming an input would destroy it. Refused before any work.

// path's directory and its last component (dir "." for a bare name), with
// trailing slashes dropped ("ck/" is "ck").
static void split_path(const char *path, char *dir, size_t cap, char *base, size_t bcap) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  const char *slash = memrchr(path, '/', n);
  if (!slash) snprintf(dir, cap, ".");
  else snprintf(dir, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  const char *b = slash ? slash + 1 : path;
  snprintf(base, bcap, "%.*s", (int)(path + n - b), b);
}

// Whether a and b name the same file or directory: the same inode when both
// exist (hard links, symbolic links, "./x" and "x" included), else the same
// last component in the same directory.
static int same_file(const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  char da[4096], db[4096], na[4096], nb[4096];
  split_path(a, da, sizeof da, na, sizeof na);
  split_path(b, db, sizeof db, nb, sizeof nb);
  if (strcmp(na, nb) != 0) return 0;
  if (stat(da, &sa) == 0 && stat(db, &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return strcmp(da, db) == 0;
}

// Whether path is, or would be, one of the files `names` (fnmatch) in dir.
// An existing path is followed through its links first: a link named
// data.txt may be dir/config.json.
static int file_in(const char *path, const char *dir, const char *names) {
  char d[4096], base[4096], *real = realpath(path, NULL);
  split_path(real ? real : path, d, sizeof d, base, sizeof base);
  free(real);
  return fnmatch(names, base, FNM_PERIOD) == 0 && same_file(d, dir);
}

static int check_outputs(const command *cmd, const cli *c) {
  const ts_config *cfg = &c->cfg;
  const char *data = cfg->data_path, *log = cfg->log_path, *ck = cfg->ckpt_dir;
  const char *val = cfg->val_path;
  if (cmd->id == C_TRAIN && log[0] && same_file(log, data))
    return ts_fail(TS_EUSAGE, "--log %s: the --data file (it would be overwritten)", log);
  if (cmd->id == C_TRAIN && log[0] && val[0] && same_file(log, val))
    return ts_fail(TS_EUSAGE, "--log %s: the --val-data file (it would be overwritten)", log);
  if (cmd->id == C_TRAIN && log[0] && cfg->tokenizer_path[0] && same_file(log, cfg->tokenizer_path))
    return ts_fail(TS_EUSAGE, "--log %s: the --tokenizer file (it would be overwritten)", log);
  if (cmd->id == C_TRAIN && ck[0] && val[0] &&
      (same_file(val, ck) || file_in(val, ck, "step-*.safetensors*")))
    return ts_fail(TS_EUSAGE,
                   "--val-data %s: a checkpoint of --ckpt-dir %s (it would be overwritten)", val,
                   ck);
  if (cmd->id == C_TRAIN && log[0] && ck[0] && same_file(log, ck))
    return ts_fail(TS_EUSAGE, "--log %s: the --ckpt-dir directory", log);
  if (cmd->id == C_TRAIN && log[0] && ck[0] && file_in(log, ck, "step-*.safetensors*"))
    return ts_fail(TS_EUSAGE, "--log %s: a checkpoint of --ckpt-dir %s (it would be overwritten)",
                   log, ck);
  if (cmd->id == C_TRAIN && ck[0] &&
      (same_file(data, ck) || file_in(data, ck, "step-*.safetensors*")))
    return ts_fail(TS_EUSAGE, "--data %s: a checkpoint of --ckpt-dir %s (it would be overwritten)",
                   data, ck);
  // a run started from a checkpoint of its own --ckpt-dir would write over
  // it (same step) or remove it (--keep-last)
  const char *init = cfg->init_from;
  if (cmd->id == C_TRAIN && init[0] && ck[0] && file_in(init, ck, "step-*.safetensors*"))
    return ts_fail(TS_EUSAGE, "--init-from %s: a checkpoint of --ckpt-dir %s (it would be "
                   "overwritten); give the new run another --ckpt-dir", init, ck);
  if (cmd->id == C_TRAIN && init[0] && log[0] && same_file(log, init))
    return ts_fail(TS_EUSAGE, "--log %s: the --init-from checkpoint (it would be overwritten)",
                   log);
  static const char *const dumped[] = {"config.json", "weights.safetensors", "grads.safetensors",
                                       "result.json"}; // run/dump.c
  for (int i = 0; cmd->id == C_DUMP && i < 4; i++) {
    if (same_file(data, c->out) || file_in(data, c->out, dumped[i]))
      return ts_fail(TS_EUSAGE, "--data %s: a file tessera dump writes into --out %s", data,
                     c->out);
    if (val[0] && (same_file(val, c->out) || file_in(val, c->out, dumped[i])))
      return ts_fail(TS_EUSAGE, "--val-data %s: a file tessera dump writes into --out %s", val,
                     c->out);
  }
  // eval's one output must not be what it reads
  const char *act = c->activations_out;
  if (cmd->id == C_EVAL && act[0]) {
    if (same_file(act, c->ckpt))
      return ts_fail(TS_EUSAGE, "--activations-out %s: the --ckpt file (it would be overwritten)",
                     act);
    if (c->data_given && same_file(act, data))
      return ts_fail(TS_EUSAGE, "--activations-out %s: the --data file (it would be overwritten)",
                     act);
    if (val[0] && same_file(act, val))
      return ts_fail(TS_EUSAGE, "--activations-out %s: the --val-data file (it would be "
                     "overwritten)", act);
  }
  return TS_OK;
}

// ---------------------------------------------------------------------------
// Usage errors are the same on every rank: rank 0 says it once, all exit 2.
// A checkpoint (tessera compare takes two of them, or two logs): a file that
// starts like safetensors (an 8-byte length, then the JSON header's '{'),
// where a run log starts with '{'; unreadable, by its name.
static int is_checkpoint(const char *path) {
  unsigned char head[9];
  const char *why;
  FILE *f = ts_fopen_regular(path, "rb", &why);
  if (f) {
    const size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    return got == sizeof head && head[0] != '{' && head[8] == '{';
  }
  const size_t n = strlen(path), k = strlen(".safetensors");
  return n > k && strcmp(path + n - k, ".safetensors") == 0;
}

// Under mpiexec a rank may refuse its command line while the others accept
// theirs: every rank of a run takes part in one agreement (here, or just
// before the run starts: ranks_accept), so that all exit 2 together.
static int usage_error(const command *cmd) {
  int first, n = ts_mpi_world_size();
  const int bad = cmd->id == C_TRAIN && n > 1 && ts_mpi_active() ? ts_mpi_failed_ranks(1, &first)
                                                                  : n;
  if (bad == n) { // every rank: the same line from all, said once
    if (ts_mpi_world_rank() == 0) fprintf(stderr, "tessera %s: %s\n", cmd->name, ts_errmsg());
  } else {
    fprintf(stderr, "tessera %s: rank %d: %s\n", cmd->name, ts_mpi_world_rank(), ts_errmsg());
  }
  ts_mpi_finalize();
  return 2;
}

// The other side of usage_error's agreement, for the ranks that accepted
// their command line: 0 when every rank did, else 2 (after saying so once).
static int ranks_accept(const command *cmd) {
  int first;
  if (ts_mpi_world_size() == 1 || ts_mpi_failed_ranks(0, &first) == 0) return 0;
  if (ts_mpi_world_rank() == 0)
    fprintf(stderr, "tessera %s: rank %d refused its command line (its message above); no "
                    "rank started\n", cmd->name, first);
  ts_mpi_finalize();
  return 2;
}

// Maps a library result to the exit status, printing its message. With more
// than one rank an error may be this rank's alone while the others wait for
// it in a collective: it is printed with the rank and ends the whole world.
static int finish(const command *cmd, int rc) {
  // Stopped by a signal: every rank stopped after the same step (train.c),
  // so none waits for another; rank 0 says how to resume.
  if (rc == TS_ESTOPPED) {
    if (ts_mpi_world_rank() == 0) fprintf(stderr, "tessera: %s\n", ts_errmsg());
    ts_mpi_finalize();
    return 128 + ts_train_stop_signal();
  }
  if (rc != TS_OK && ts_mpi_world_size() > 1 && ts_error_everywhere()) { // every rank's: once
    if (ts_mpi_world_rank() == 0) fprintf(stderr, "tessera %s: %s\n", cmd->name, ts_errmsg());
    ts_mpi_finalize();
    return rc == TS_EUSAGE ? 2 : 1;
  }
  if (rc != TS_OK && ts_mpi_world_size() > 1) {
    fprintf(stderr, "tessera: rank %d: %s\n", ts_mpi_world_rank(), ts_errmsg());
    fflush(stderr);
    ts_mpi_abort(rc == TS_EUSAGE ? 2 : 1);
  }
  if (rc == TS_EUSAGE) return usage_error(cmd);
  ts_mpi_finalize();
  if (rc == TS_OK) return 0;
  fprintf(stderr, "tessera: %s\n", ts_errmsg());
  return 1;
}

// tessera tokenize: its files checked (none overwrites another), then the run.
static int run_tokenize(const command *cmd, cli *c, const char *const *pos, int n_pos) {
  const char *model = c->cfg.tokenizer_path, *ck = c->ckpt;
  int rc = TS_OK;
  if (!c->in[0]) rc = ts_fail(TS_EUSAGE, "--in TEXT is required");
  else if (!c->out[0]) rc = ts_fail(TS_EUSAGE, "--out TOKENS is required");
  else if (!model[0] && !ck[0])
    rc = ts_fail(TS_EUSAGE, "--tokenizer MODEL (or --ckpt FILE) is required");
  else if (same_file(c->out, c->in))
    rc = ts_fail(TS_EUSAGE, "--out %s: the --in file (it would be overwritten)", c->out);
  else if (model[0] && same_file(c->out, model))
    rc = ts_fail(TS_EUSAGE, "--out %s: the --tokenizer file (it would be overwritten)", c->out);
  else if (ck[0] && same_file(c->out, ck))
    rc = ts_fail(TS_EUSAGE, "--out %s: the --ckpt file (it would be overwritten)", c->out);
  if (rc) return usage_error(cmd);
  return finish(cmd, ts_tokenize(model, ck, c->in, c->out, c->cfg.data_format, c->cfg.quiet));
}

// tessera compare: two logs, or two checkpoints.
static int run_compare(const command *cmd, cli *c, const char *const *pos, int n_pos) {
  if (n_pos != 2) {
    ts_fail(TS_EUSAGE, "needs two run logs (tessera compare A.jsonl B.jsonl)");
    return usage_error(cmd);
  }
  int rc;
  if (is_checkpoint(pos[0]) && is_checkpoint(pos[1]))
    rc = c->rtol != 0.0 ? ts_fail(TS_EUSAGE, "--rtol: checkpoints compare bit for bit")
                        : ts_compare_checkpoints(pos[0], pos[1], stdout);
  else
    rc = ts_compare_logs(pos[0], pos[1], c->rtol, stdout);
  if (rc == 0 || rc == 1) return rc; // equal / different, already printed
  return usage_error(cmd);           // unreadable or malformed: exit 2, like diff(1)
}

// tessera plot: the logs, then the drawing. The SVG must not replace a log.
static int run_plot(const command *cmd, cli *c, const char *const *logs, int n_logs) {
  if (n_logs == 0) {
    ts_fail(TS_EUSAGE, "needs at least one run log (tessera plot A.jsonl --out loss.svg)");
    return usage_error(cmd);
  }
  if (c->out[0] == '\0') {
    ts_fail(TS_EUSAGE, "--out FILE is required");
    return usage_error(cmd);
  }
  for (int i = 0; i < n_logs; i++)
    if (same_file(c->out, logs[i])) {
      ts_fail(TS_EUSAGE, "--out %s: the log %s (it would be overwritten)", c->out, logs[i]);
      return usage_error(cmd);
    }
  const ts_plot_options opt = {strcmp(c->x_axis, "tokens") == 0, c->log_y, c->title};
  const int rc = ts_plot_logs(logs, n_logs, c->out, &opt);
  return rc == TS_EUSAGE ? usage_error(cmd) : finish(cmd, rc);
}

static int run_info(const command *cmd, cli *c, const char *const *pos, int n_pos) {
  return finish(cmd, ts_info());
}

// tessera plan: the model as train reads it (here only finalized: no data,
// no MPI), the cluster from the plan's flags in SI units. The layout flags
// given (--dp, --sp, --pp, --zero, --microbatches) pin the layouts to theirs;
// without --ranks the ranks are the product of the given dp, sp and pp.
static int run_plan(const command *cmd, cli *c, const char *const *pos, int n_pos) {
  if (c->calibrate[0] && c->efficiency > 0) {
    ts_fail(TS_EUSAGE, "--calibrate %s with --efficiency %g: give one", c->calibrate,
            c->efficiency);
    return usage_error(cmd);
  }
  int steps = 0;
  if (c->calibrate[0]) {
    const int rc = ts_plan_calibrate(c->calibrate, &c->efficiency, &steps);
    if (rc) return rc == TS_EUSAGE ? usage_error(cmd) : finish(cmd, rc);
  } else if (!(c->efficiency > 0)) {
    c->efficiency = 0.4; // an assumption; docs/PLAN.md says what our runs measure
  }
  if (c->cfg.compress != TS_COMPRESS_NONE && c->cfg.compress_stages == 0)
    c->cfg.compress_stages = 1; // without --compress-stages: the one-stage model's layouts
  if (!c->ranks_given)
    c->ranks = (c->dp_given ? c->lay.dp : 1) * (c->sp_given ? c->lay.sp : 1) *
               (c->pp_given ? c->lay.pp : 1);
  const ts_plan_opts o = {.ranks = c->ranks, .ranks_per_node = c->ranks_per_node,
                          .device_mem = c->device_mem * 1073741824.0, .flops = c->flops,
                          .efficiency = c->efficiency, .bw_intra = c->bw_intra * 1e9,
                          .bw_inter = c->bw_inter * 1e9, .lat_intra = c->lat_intra * 1e-6,
                          .lat_inter = c->lat_inter * 1e-6, .device = c->device,
                          .json = c->json, .verbose = c->verbose, .top = c->top,
                          .only_mode = c->sp_mode_given ? (int)c->lay.sp_mode : -1,
                          .calibrated_from = c->calibrate[0] ? c->calibrate : NULL,
                          .calibrated_steps = steps,
                          .only_dp = c->dp_given ? c->lay.dp : 0,
                          .only_sp = c->sp_given ? c->lay.sp : 0,
                          .only_pp = c->pp_given ? c->lay.pp : 0,
                          .only_zero = c->zero_given ? c->lay.zero : -1,
                          .microbatches_given = c->microbatches_given};
  return finish(cmd, ts_plan(&c->cfg, &c->lay, &o, stdout));
}

static int run_train(const command *cmd, cli *c, const char *const *pos, int n_pos) {
  int rc = ranks_accept(cmd);
  return rc ? rc : finish(cmd, ts_train(&c->cfg, &c->lay));
}

static int run_eval(const command *cmd, cli *c, const char *const *pos, int n_pos) {
  const ts_eval_options opt = {.activations_out = c->activations_out,
                               .identity_boundaries = c->identity_boundaries,
                               .whole_split = c->whole_split};
  return finish(cmd, ts_eval_with(&c->cfg, c->ckpt, &opt));
}

static int run_sample(const command *cmd, cli *c, const char *const *pos, int n_pos) {
  const ts_sample_opts o = {.ckpt = c->ckpt,
                            .prompt = c->prompt_given == 1 ? c->prompt : NULL,
                            .prompt_file = c->prompt_file,
                            .tokenizer = c->tokenizer,
                            .tokens = c->tokens,
                            .temperature = c->temperature,
                            .top_k = c->top_k,
                            .top_p = c->top_p,
                            .seed = c->sample_seed,
                            .json = c->json};
  return finish(cmd, ts_sample(&c->cfg, &o, stdout));
}

static int run_dump(const command *cmd, cli *c, const char *const *pos, int n_pos) {
  return finish(cmd, ts_dump(&c->cfg, c->out, c->traj_steps));
}

// What needs no command line: none (usage), --help, help COMMAND and
// --version. Returns 1 with *status set when it answered.
static int answered_alone(int argc, char **argv, int *status) {
  const char *name = argc < 2 ? NULL : argv[1];
  *status = 0;
  if (!name) {
    main_help(stderr);
    *status = 2;
  } else if (strcmp(name, "help") == 0 && argc > 2) {
    for (int i = 0; i < N_COMMANDS; i++)
      if (strcmp(argv[2], commands[i].name) == 0) {
        command_help(&commands[i], stdout);
        return 1;
      }
    fprintf(stderr, "tessera: unknown command '%s' (see 'tessera --help')\n", argv[2]);
    *status = 2;
  } else if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
    main_help(stdout);
  } else if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
    printf("tessera %s\n", TS_VERSION_STRING);
  } else {
    return 0;
  }
  return 1;
}

// The environment is input too: TESSERA_ISA picks the path of the exact
// products (same bits on each), and a name this CPU cannot run is refused
// before any work, never ignored, as is an OPENBLAS_CORETYPE whose kernel
// it cannot run (OpenBLAS would die of SIGILL); OpenMP's own settings are checked like
// --threads (libgomp crashes on some). 0, or the exit status.
static int check_environment(void) {
  char isa_err[200];
  if (ts_isa_check_env(isa_err, sizeof isa_err) != 0 ||
      ts_isa_check_blas_env(isa_err, sizeof isa_err) != 0) {
    fprintf(stderr, "tessera: %s\n", isa_err);
    return 2;
  }
  if (ts_omp_env_check() != TS_OK) {
    fprintf(stderr, "tessera: %s\n", ts_errmsg());
    return 2;
  }
  return 0;
}

// The flags into *c and the positional arguments into *pos (the logs of
// compare and plot; the caller frees it). 0, or the exit status.
static int read_flags(const command *cmd, int argc, char **argv, cli *c, const char ***pos,
                      int *n_pos) {
  parsed *p = calloc((size_t)argc + 1, sizeof *p);
  *pos = calloc((size_t)argc + 1, sizeof **pos);
  if (p == NULL || *pos == NULL) {
    free(p);
    free(*pos);
    *pos = NULL;
    ts_mpi_finalize();
    fprintf(stderr, "tessera: out of memory\n");
    return 1;
  }
  int n = 0;
  *n_pos = 0;
  int rc = parse_args(cmd, argc, argv, p, &n, *pos, n_pos);
  if (rc == TS_OK) rc = build(p, n, c);
  free(p);
  if (rc == TS_OK) return 0;
  free(*pos);
  *pos = NULL;
  return usage_error(cmd);
}

// The flags of a model's run that no single flag's check sees: those a
// command requires, and those that exclude each other.
static int check_required(const command *cmd, const cli *c) {
  if ((cmd->id == C_EVAL || cmd->id == C_SAMPLE) && c->ckpt[0] == '\0')
    return ts_fail(TS_EUSAGE, "--ckpt FILE is required");
  if (cmd->id == C_SAMPLE && c->prompt_given != 1 && c->prompt_given != 2)
    return ts_fail(TS_EUSAGE, c->prompt_given ? "--prompt, --prompt-file: give one of them, not both"
                                              : "--prompt TEXT or --prompt-file FILE is required");
  if (cmd->id == C_DUMP && c->out[0] == '\0') return ts_fail(TS_EUSAGE, "--out DIR is required");
  if (cmd->id == C_DUMP && c->cfg.fused_ce)
    return ts_fail(TS_EUSAGE, "--fused-ce: a dump holds the logits, which --fused-ce never keeps; "
                   "dump without it (on the CPU it gives the same bits)");
  // the validation file is the validation split: no fraction of --data is held out
  if (c->cfg.val_path[0] && c->val_frac_given)
    return ts_fail(TS_EUSAGE, "--val-frac: not with --val-data (that file is the validation split "
                   "and all of --data trains)");
  if (c->whole_split && c->eval_batches_given)
    return ts_fail(TS_EUSAGE, "--eval-batches: not with --whole-split (the split's length sets "
                   "the batches)");
  if (c->cfg.init_from[0] && c->cfg.resume)
    return ts_fail(TS_EUSAGE, "--init-from: not with --resume (a resumed run's weights and "
                   "optimizer state are its checkpoint's)");
  return TS_OK;
}

// A model's run, checked whole before anything runs: the configuration, the
// layout on its device, the outputs against the inputs, and the data's
// format where the files say it, or fail to (a .bin that does not): a usage
// error now, said once by rank 0. A file that cannot be read is the run's to
// report, in its order (eval: the checkpoint's format may decide,
// run/eval.c; --resume without --data: the checkpoint's data).
static int check_run(const command *cmd, cli *c) {
  int rc = check_required(cmd, c);
  if (rc) return rc;
  // a pipeline's stages are the compressed model's unless said otherwise
  if (c->cfg.compress != TS_COMPRESS_NONE && c->cfg.compress_stages == 0)
    c->cfg.compress_stages = c->lay.pp;
  if (cmd->id == C_SAMPLE) c->cfg.threads = c->sample_threads;
  rc = ts_config_finalize(&c->cfg);
  if (rc == TS_OK && cmd->id == C_TRAIN) rc = ts_layout_check(&c->cfg, &c->lay, c->device);
  if (rc == TS_OK && cmd->id == C_TRAIN) rc = ts_grid_check(c->lay.dp, c->lay.sp, c->lay.pp);
  if (rc == TS_OK) rc = check_outputs(cmd, c);
  if (rc == TS_OK && cmd->id != C_EVAL && cmd->id != C_SAMPLE &&
      !(c->cfg.resume && c->cfg.data_from_ckpt)) {
    int format;
    int drc = ts_data_resolve(c->cfg.data_path, c->cfg.val_path, c->cfg.data_format, &format);
    if (drc == TS_EUSAGE) rc = drc;
    if (drc == TS_OK) {
      c->cfg.data_format = format;
      rc = ts_data_check_vocab(format, c->cfg.vocab, c->cfg.data_path);
    }
  }
  return rc;
}

// A model's run checked and its backend chosen (after MPI is up, so that
// the ranks of a node take different GPUs). 0, or the exit status.
static int prepare_run(const command *cmd, cli *c) {
  if (check_run(cmd, c) != TS_OK) return usage_error(cmd);
  const ts_backend *be = NULL;
  int rc = ts_backend_get(c->device,
                          strcmp(c->precision, "bf16") == 0 ? TS_PRECISION_BF16 : TS_PRECISION_FP32,
                          c->cfg.fast, &be);
  if (rc == TS_EUSAGE) return usage_error(cmd);
  if (rc != TS_OK) return finish(cmd, rc);
  ts_backend_set(be);
  return 0;
}

int main(int argc, char **argv) {
  ts_wait_policy_passive(argv); // (src/run/omp_env.c: why)
  int rc;
  if (answered_alone(argc, argv, &rc)) return rc;
  const command *cmd = NULL;
  for (int i = 0; i < N_COMMANDS; i++)
    if (strcmp(argv[1], commands[i].name) == 0) cmd = &commands[i];
  if (cmd == NULL) {
    fprintf(stderr, "tessera: unknown command '%s' (see 'tessera --help')\n", argv[1]);
    return 2;
  }
  argc -= 2;
  argv += 2;
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      command_help(cmd, stdout);
      return 0;
    }
  if ((rc = check_environment())) return rc;
  // Before parsing, so that a usage error is printed by rank 0 alone.
  if (cmd->id == C_TRAIN && ts_mpi_init(NULL, NULL) != TS_OK) {
    fprintf(stderr, "tessera: %s\n", ts_errmsg());
    return 1;
  }
  cli c;
  const char **pos;
  int n_pos;
  if ((rc = read_flags(cmd, argc, argv, &c, &pos, &n_pos))) return rc;
  rc = cmd->model ? prepare_run(cmd, &c) : 0;
  if (rc == 0) rc = cmd->run(cmd, &c, pos, n_pos);
  free(pos);
  return rc;
}
