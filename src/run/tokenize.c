// tessera tokenize: a text file into a file of token ids that --data reads
// (docs/TOKENIZER.md), streamed a few MiB of whole lines at a time, so that
// the input's size is bounded by the disk, not by memory.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "run.h"

#define CHUNK (4u << 20) // bytes of text read at a time (grown for a longer line)

// ids as little-endian uint16 or uint32 (docs/DATA.md) appended to f.
static int write_ids(FILE *f, const int32_t *ids, size_t n, int width, unsigned char *buf) {
  for (size_t at = 0; at < n;) {
    const size_t k = n - at < 65536 ? n - at : 65536;
    for (size_t i = 0; i < k; i++) {
      const uint32_t v = (uint32_t)ids[at + i];
      for (int b = 0; b < width; b++) buf[i * width + b] = (unsigned char)(v >> (8 * b));
    }
    if (fwrite(buf, (size_t)width, k, f) != k) return -1;
    at += k;
  }
  return 0;
}

// One progress line: on a terminal rewritten in place (start "\r"), in a
// log one line each time (end "\n").
static void progress(const char *in, uint64_t done, uint64_t total, uint64_t tokens,
                     const char *start, const char *end) {
  if (total)
    fprintf(stderr, "%stessera tokenize: %s: %3.0f%% (%.1f of %.1f MB), %" PRIu64 " tokens%s",
            start, in, 100.0 * (double)done / (double)total, done / 1e6, total / 1e6, tokens, end);
  else
    fprintf(stderr, "%stessera tokenize: %s: %.1f MB, %" PRIu64 " tokens%s", start, in,
            done / 1e6, tokens, end);
  fflush(stderr);
}

// One run's state, shared by its steps and released in one place (end_job)
// whichever step stopped it.
typedef struct {
  const char *in, *out;
  ts_tokenizer *tok;
  int width;             // bytes of an id in --out: 2 (u16) or 4 (u32)
  FILE *fi, *fo;
  char tmp[4200];        // --out's temporary file until renamed ("": none to remove)
  char *buf;             // text read: whole lines, then a line's start (cap bytes, have held)
  size_t cap, have;
  unsigned char *packed; // ids as bytes on their way to --out
  uint64_t total, done, tokens; // --in's size (0: not known, a pipe), bytes read, ids written
} tokenize_job;

// The tokenizer: a checkpoint's, checked as tessera sample checks it, or
// --tokenizer's file.
static int open_tokenizer(const char *tokenizer, const char *ckpt, ts_tokenizer **tok) {
  int rc;
  if (ckpt && ckpt[0]) {
    ts_config base;
    memset(&base, 0, sizeof base);
    ts_config_preset(&base, "tiny");
    ts_config_defaults(&base);
    ts_run_ckpt ck;
    if ((rc = ts_run_open_checkpoint(ckpt, &base, 0, 1, 1, &ck))) return rc;
    rc = ts_run_open_ckpt_tokenizer(&ck, tokenizer, tok);
    ts_run_close_checkpoint(&ck);
  } else if ((rc = ts_tokenizer_open(tokenizer, tok))) {
    rc = ts_fail_flag(rc, "--tokenizer", tokenizer);
  }
  return rc;
}

// --data-format: u16 when every id fits in 16 bits, unless told; u16 told
// for a vocabulary that does not fit is refused rather than truncated.
static int choose_format(int vocab, int *format) {
  if (*format == TS_DATA_DETECT) *format = vocab <= 65536 ? TS_DATA_U16 : TS_DATA_U32;
  if (*format == TS_DATA_U16 && vocab > 65536)
    return ts_fail(TS_EUSAGE, "--data-format u16: the tokenizer has %d ids, more than 16 bits "
                   "hold; use u32", vocab);
  return TS_OK;
}

// --in for reading, --out's temporary file for writing (renamed over --out
// only when whole: finish_out), and the buffers.
static int open_files(tokenize_job *job) {
  // --in may be a pipe (/dev/stdin): opened without blocking, so that a FIFO
  // with no writer reads as empty instead of waiting in open() forever
  const int fdi = open(job->in, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fdi >= 0) {
    const int fl = fcntl(fdi, F_GETFL);
    if (fl >= 0 && fcntl(fdi, F_SETFL, fl & ~O_NONBLOCK) == 0) job->fi = fdopen(fdi, "rb");
    if (!job->fi) close(fdi);
  }
  job->packed = malloc(65536 * 4);
  job->cap = CHUNK;
  if (!job->fi) return ts_fail(TS_ERUNTIME, "--in %s: cannot read: %s", job->in, strerror(errno));
  struct stat st;
  if (fstat(fileno(job->fi), &st) == 0 && S_ISREG(st.st_mode)) job->total = (uint64_t)st.st_size;
  if (ts_temp_path(job->tmp, sizeof job->tmp, job->out)) {
    job->tmp[0] = 0;
    return ts_fail(TS_EUSAGE, "--out %s: path too long", job->out);
  }
  if (!(job->fo = fopen(job->tmp, "wb"))) {
    job->tmp[0] = 0; // (errno is fopen's still)
    return ts_fail(TS_ERUNTIME, "--out %s: cannot write: %s", job->out, strerror(errno));
  }
  job->buf = malloc(job->cap);
  if (!job->buf || !job->packed) return ts_fail(TS_ERUNTIME, "out of memory");
  return TS_OK;
}

// The whole lines in the buffer's first `use` bytes, encoded and appended
// to --out.
static int encode_lines(tokenize_job *job, size_t use) {
  int32_t *ids = NULL;
  size_t n = 0;
  int rc;
  if ((rc = ts_tokenizer_encode(job->tok, job->buf, use, &ids, &n))) return rc;
  const int bad = write_ids(job->fo, ids, n, job->width, job->packed);
  free(ids);
  if (bad) return ts_fail(TS_ERUNTIME, "--out %s: cannot write: %s", job->out, strerror(errno));
  job->tokens += n;
  return TS_OK;
}

// --in read a chunk at a time and encoded whole lines at a time (a line cut
// by a chunk's end waits for the next read), so memory stays a few MiB
// however long the input.
static int encode_stream(tokenize_job *job, int quiet) {
  // a terminal every second, a log (a batch job's) every 10 s
  const int tty = isatty(fileno(stderr));
  const double every = tty ? 1.0 : 10.0;
  const char *start = tty ? "\r" : "", *end = tty ? "" : "\n";
  double last = ts_now();
  // SIGINT, SIGTERM, SIGHUP: stop between chunks, the temporary file removed
  // (a second signal ends the process at once, as in train)
  ts_run_stop_install(0);
  for (int eof = 0; !eof;) {
    const int sig = ts_run_stop_requested();
    if (sig) {
      ts_run_stopped(sig);
      return ts_fail(TS_ESTOPPED, "tokenize stopped by %s: --out %s not written",
                     ts_run_signal_name(sig), job->out);
    }
    const size_t got = fread(job->buf + job->have, 1, job->cap - job->have, job->fi);
    if (got < job->cap - job->have) {
      if (ferror(job->fi))
        return ts_fail(TS_ERUNTIME, "--in %s: cannot read: %s", job->in, strerror(errno));
      eof = 1;
    }
    job->have += got;
    job->done += got;
    // whole lines now, the last one's rest with the next read (at the end:
    // a last line without a line break, as it is)
    char *const buf = job->buf;
    const size_t have = job->have;
    const char *nl = eof ? (have ? buf + have - 1 : NULL) : memrchr(buf, '\n', have);
    if (!nl && have == job->cap) { // one line longer than the buffer: a larger one
      char *b = realloc(buf, job->cap * 2);
      if (!b)
        return ts_fail(TS_ERUNTIME, "out of memory: a line of --in %s is longer than %zu MB",
                       job->in, job->cap >> 20);
      job->buf = b, job->cap *= 2;
      continue;
    }
    const size_t use = nl ? (size_t)(nl - buf) + 1 : 0;
    int rc;
    if (use && (rc = encode_lines(job, use))) return rc;
    memmove(buf, buf + use, have - use);
    job->have -= use;
    if (!quiet && ts_now() - last >= every) {
      progress(job->in, job->done, job->total, job->tokens, start, end);
      last = ts_now();
    }
  }
  if (!quiet && tty) progress(job->in, job->done, job->total, job->tokens, start, "\n");
  return TS_OK;
}

// --out written through to the disk, then renamed into place: a reader sees
// the old file or the whole new one, never a part.
static int finish_out(tokenize_job *job) {
  if (job->tokens == 0)
    return ts_fail(TS_ERUNTIME, "--in %s: no tokens (the file is empty)", job->in);
  if (fflush(job->fo) != 0 || fsync(fileno(job->fo)) != 0)
    return ts_fail(TS_ERUNTIME, "--out %s: cannot write: %s", job->out, strerror(errno));
  const int closed = fclose(job->fo);
  job->fo = NULL;
  if (closed != 0 || rename(job->tmp, job->out) != 0)
    return ts_fail(TS_ERUNTIME, "--out %s: cannot write: %s", job->out, strerror(errno));
  job->tmp[0] = 0;
  return TS_OK;
}

// What was written, and the train command line that reads it.
static void print_summary(const tokenize_job *job, int format, int vocab) {
  const ts_tokenizer *tok = job->tok;
  printf("tessera tokenize: %" PRIu64 " tokens (%.2f bytes each) from %s into %s, %s, %s "
         "tokenizer, %d ids\n", job->tokens, (double)job->done / (double)job->tokens, job->in,
         job->out, ts_data_format_names[format], ts_tokenizer_kind(tok), vocab);
  printf("train on it: tessera train --data %s --data-format %s --vocab %d%s%s ...\n", job->out,
         ts_data_format_names[format], vocab, ts_tokenizer_path(tok)[0] ? " --tokenizer " : "",
         ts_tokenizer_path(tok));
}

// The end of every run, however far it got: the signals as they were, the
// files closed, a temporary --out left behind removed.
static void end_job(tokenize_job *job) {
  ts_run_stop_restore();
  if (job->fi) fclose(job->fi);
  if (job->fo) fclose(job->fo);
  if (job->tmp[0]) unlink(job->tmp);
  free(job->buf);
  free(job->packed);
  ts_tokenizer_free(job->tok);
}

int ts_tokenize(const char *tokenizer, const char *ckpt, const char *in, const char *out,
                int format, int quiet) {
  tokenize_job job = {.in = in, .out = out};
  int rc = open_tokenizer(tokenizer, ckpt, &job.tok);
  if (rc) return rc;
  const int vocab = ts_tokenizer_vocab(job.tok);
  if ((rc = choose_format(vocab, &format))) {
    ts_tokenizer_free(job.tok);
    return rc;
  }
  job.width = format == TS_DATA_U16 ? 2 : 4;
  rc = open_files(&job);
  if (!rc) rc = encode_stream(&job, quiet);
  if (!rc) rc = finish_out(&job);
  if (!rc && !quiet) print_summary(&job, format, vocab);
  end_job(&job);
  return rc;
}
