// tessera sample: text from a checkpoint (docs/SAMPLING.md). The model comes
// from the checkpoint as for tessera eval; the prompt is encoded with the
// tokenizer, fed to the incremental decoder (src/model/decode.c), and each
// next token drawn by the sampler (src/text/sampler.h) and fed back. Nothing is
// printed until every token is made, so a failure leaves no partial output.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/util.h"
#include "run.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

// Prompt files larger than this are refused: no context holds that many tokens.
#define PROMPT_FILE_MAX (64u << 20)

// The prompt file's bytes, malloc'd into *text (NUL-terminated).
static int read_prompt_file(const char *path, char **text, size_t *len) {
  *text = NULL;
  const char *why = "";
  FILE *f = ts_fopen_regular(path, "rb", &why);
  if (!f) return ts_fail(TS_ERUNTIME, "--prompt-file %s: cannot open: %s", path, why);
  char *buf = malloc(PROMPT_FILE_MAX + 1);
  size_t n = buf ? fread(buf, 1, PROMPT_FILE_MAX + 1, f) : 0;
  const int err = ferror(f);
  fclose(f);
  if (!buf) return ts_fail(TS_ERUNTIME, "out of memory");
  if (err) {
    free(buf);
    return ts_fail(TS_ERUNTIME, "--prompt-file %s: read error", path);
  }
  if (n > PROMPT_FILE_MAX) {
    free(buf);
    return ts_fail(TS_EUSAGE, "--prompt-file %s: larger than %u MiB", path, PROMPT_FILE_MAX >> 20);
  }
  buf[n] = '\0';
  *text = buf;
  *len = n;
  return TS_OK;
}

// s[0, n) as a JSON string: UTF-8 as is, '"', '\\' and control bytes escaped,
// and each byte that is not part of a valid UTF-8 sequence as U+FFFD (a
// bytes tokenizer can make any byte; the ids are the exact record).
static int utf8_len(const unsigned char *s, size_t n) {
  const unsigned char c = s[0];
  int len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                                                   : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (len == 0 || (size_t)len > n) return 0;
  for (int i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  // no overlong three- or four-byte forms, surrogates or code points above U+10FFFF
  if (len == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f))) return 0;
  if (len == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))) return 0;
  return len;
}

static void write_json_text(FILE *out, const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  fputc('"', out);
  for (size_t i = 0; i < n;) {
    const int len = utf8_len(s + i, n - i);
    if (len == 0) {
      fputs("\\ufffd", out);
      i++;
    } else if (s[i] == '"' || s[i] == '\\') {
      fprintf(out, "\\%c", s[i++]);
    } else if (s[i] < 0x20 || s[i] == 0x7f) {
      fprintf(out, "\\u%04x", s[i++]);
    } else {
      fwrite(s + i, 1, (size_t)len, out);
      i += (size_t)len;
    }
  }
  fputc('"', out);
}

static void write_ids(FILE *out, const char *key, const int32_t *ids, size_t n) {
  fprintf(out, "\"%s\":[", key);
  for (size_t i = 0; i < n; i++) fprintf(out, "%s%" PRId32, i ? "," : "", ids[i]);
  fputc(']', out);
}

// The shortest decimal that reads back as x (a flag's value as it was given).
static void shortest_float(char *buf, size_t cap, float x) {
  for (int prec = 6; prec <= 9; prec++) {
    snprintf(buf, cap, "%.*g", prec, (double)x);
    if (strtof(buf, NULL) == x) return;
  }
}

// One JSON object: the settings, the ids, each generated token's
// log-probability (sampler.h) and the continuation's text.
static void write_json(FILE *out, const ts_sample_opts *o, const ts_tokenizer *tok,
                       int64_t step, const int32_t *ids, size_t np, size_t ng,
                       const double *logprob, const char *text, size_t text_len) {
  char path[6 * 4096 + 3], temp[32], top_p[32];
  json_escape(path, sizeof path, o->ckpt);
  shortest_float(temp, sizeof temp, o->temperature);
  shortest_float(top_p, sizeof top_p, o->top_p);
  fprintf(out, "{\"ckpt\":%s,\"step\":%" PRId64 ",\"tokenizer\":\"%s\",\"seed\":%" PRIu64
               ",\"temperature\":%s,\"top_k\":%d,\"top_p\":%s,",
          path, step, ts_tokenizer_kind(tok), o->seed, temp, o->top_k, top_p);
  write_ids(out, "prompt_ids", ids, np);
  fputc(',', out);
  write_ids(out, "ids", ids + np, ng);
  fputs(",\"logprobs\":[", out);
  for (size_t i = 0; i < ng; i++) fprintf(out, "%s%.17g", i ? "," : "", logprob[i]);
  fputs("],\"text\":", out);
  write_json_text(out, text, text_len);
  fputs("}\n", out);
}

// The prompt as ids, checked against the model: *ids (malloc'd, room for
// `more` ids after them) and *n.
static int encode_prompt(const ts_sample_opts *o, const ts_tokenizer *tok, const ts_config *cfg,
                         int32_t **ids, size_t *n) {
  char *file = NULL;
  const char *text = o->prompt;
  size_t len = text ? strlen(text) : 0;
  const char *flag = o->prompt ? "--prompt" : "--prompt-file";
  int rc = o->prompt ? TS_OK : read_prompt_file(o->prompt_file, &file, &len);
  if (rc) return rc;
  if (!o->prompt) text = file;
  int32_t *enc = NULL;
  if (len == 0) rc = ts_fail(TS_EUSAGE, "%s: empty (the model needs a token to start from)", flag);
  if (!rc) rc = ts_tokenizer_encode(tok, text, len, &enc, n);
  free(file);
  if (!rc && *n == 0)
    rc = ts_fail(TS_EUSAGE, "%s: encodes to no tokens (the model needs one to start from)", flag);
  if (!rc && *n >= (size_t)cfg->seq)
    rc = ts_fail(TS_EUSAGE, "%s: %zu tokens leave no room in the checkpoint's context of %d",
                 flag, *n, cfg->seq);
  if (!rc && (size_t)o->tokens > (size_t)cfg->seq - *n)
    rc = ts_fail(TS_EUSAGE,
                 "--tokens %d: the prompt's %zu tokens and %d more exceed the checkpoint's "
                 "context of %d positions (at most %zu more)",
                 o->tokens, *n, o->tokens, cfg->seq, (size_t)cfg->seq - *n);
  int32_t *all = rc ? NULL : realloc(enc, (*n + (size_t)o->tokens) * sizeof *all);
  if (!rc && !all) rc = ts_fail(TS_ERUNTIME, "out of memory");
  if (rc) {
    free(enc);
    return rc;
  }
  *ids = all;
  return TS_OK;
}

// Feeds the prompt, then draws and feeds o->tokens tokens: ids[np, np + tokens)
// and their log-probabilities.
static int generate(ts_model *m, const ts_sample_opts *o, int32_t *ids, size_t np,
                    double *logprob) {
  const int V = ts_model_config(m)->vocab;
  const ts_sampling s = {o->temperature, o->top_k, o->top_p, o->seed};
  ts_decoder *d = NULL;
  ts_sampler sm = {0};
  float *logits = malloc((size_t)V * sizeof *logits);
  int *feed = malloc(np * sizeof *feed);
  int rc = logits && feed ? TS_OK : ts_fail(TS_ERUNTIME, "out of memory");
  if (!rc) rc = ts_sampler_init(&sm, V);
  if (!rc) rc = ts_decoder_create(m, &d);
  for (size_t i = 0; !rc && i < np; i++) feed[i] = ids[i];
  if (!rc) rc = ts_decoder_feed(d, feed, (int)np, logits, 0);
  for (int i = 0; !rc && i < o->tokens; i++) {
    int next;
    rc = ts_sample_next(&sm, &s, logits, np + (size_t)i, &next, &logprob[i]);
    if (!rc) ids[np + (size_t)i] = next;
    if (!rc && i + 1 < o->tokens) rc = ts_decoder_feed(d, &next, 1, logits, 0);
  }
  ts_decoder_free(d);
  ts_sampler_free(&sm);
  free(logits);
  free(feed);
  return rc;
}

int ts_sample(const ts_config *cfg_in, const ts_sample_opts *o, FILE *out) {
  const ts_sampling s = {o->temperature, o->top_k, o->top_p, o->seed};
  int rc = ts_sampling_check(&s);
  if (!rc && o->tokens < 1) rc = ts_fail(TS_EUSAGE, "--tokens %d: must be >= 1", o->tokens);
  if (rc) return rc;
  ts_run_setup_threads(cfg_in, 1);
  ts_run_ckpt ck;
  ts_tokenizer *tok = NULL;
  ts_model *m = NULL;
  int32_t *ids = NULL;
  double *logprob = NULL;
  char *text = NULL;
  size_t np = 0, text_len = 0;
  if ((rc = ts_run_open_checkpoint(o->ckpt, cfg_in, 0, 1, 1, &ck))) return rc;
  ts_config cfg = ck.cfg;
  if (cfg.compress != TS_COMPRESS_NONE) { // decode.c runs no boundary codec
    rc = ts_fail(TS_ERUNTIME, "checkpoint %s: a model with stage-boundary compression "
                              "(--compress %s) cannot be sampled",
                 o->ckpt, ts_compress_names[cfg.compress]);
    goto done;
  }
  // the tokenizer the checkpoint's data was made with (its record), or the
  // named copy of it; without a record, the named one or bytes
  if ((rc = ts_run_open_ckpt_tokenizer(&ck, o->tokenizer, &tok))) goto done;
  if ((rc = encode_prompt(o, tok, &cfg, &ids, &np))) goto done;
  // One sequence; the memory options keep the model's own activations
  // (which the decoder does not use) small, and change no bit.
  cfg.batch = 1;
  cfg.checkpoint = cfg.fused_ce = cfg.tiled_mlp = 1;
  if ((rc = ts_model_create(&cfg, &m))) { // the model is the checkpoint's: say which
    rc = ts_run_restate(o->ckpt, "tessera.config");
    goto done;
  }
  // what the checkpoint does not hold comes from the seed, as in training: a
  // codec's frozen bases and tables (SSN's U and T, MAPL's P_s)
  ts_model_init(m, cfg.seed);
  if ((rc = ts_run_load_checkpoint(m, NULL, NULL, 0, &ck))) goto done;
  logprob = malloc((size_t)o->tokens * sizeof *logprob);
  if (!logprob) {
    rc = ts_fail(TS_ERUNTIME, "out of memory");
    goto done;
  }
  if ((rc = generate(m, o, ids, np, logprob))) goto done;
  // text: the prompt and its continuation, decoded as one sequence (a
  // tokenizer may join pieces across the seam); JSON: the continuation
  const size_t from = o->json ? np : 0, n = np + (size_t)o->tokens - from;
  if ((rc = ts_tokenizer_decode(tok, ids + from, n, &text, &text_len))) goto done;
  if (o->json) {
    write_json(out, o, tok, ck.step, ids, np, (size_t)o->tokens, logprob, text, text_len);
  } else {
    fwrite(text, 1, text_len, out);
    fputc('\n', out);
  }
  if (fflush(out) || ferror(out)) rc = ts_fail(TS_ERUNTIME, "writing the sample: output error");
done:
  free(text);
  free(logprob);
  free(ids);
  ts_model_free(m);
  ts_tokenizer_free(tok);
  ts_run_close_checkpoint(&ck);
  return rc;
}
