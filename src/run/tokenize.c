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

#include "run/run.h"
#include "util.h"

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

int ts_tokenize(const char *tokenizer, const char *ckpt, const char *in, const char *out,
                int format, int quiet) {
  ts_tokenizer *tok = NULL;
  int rc;
  if (ckpt && ckpt[0]) { // the checkpoint checked as tessera sample checks it
    ts_config base;
    memset(&base, 0, sizeof base);
    ts_config_preset(&base, "tiny");
    ts_config_defaults(&base);
    ts_run_ckpt ck;
    if ((rc = ts_run_open_checkpoint(ckpt, &base, 0, 1, 1, &ck))) return rc;
    rc = ts_run_open_ckpt_tokenizer(&ck, tokenizer, &tok);
    ts_run_close_checkpoint(&ck);
  } else if ((rc = ts_tokenizer_open(tokenizer, &tok))) {
    rc = ts_fail_flag(rc, "--tokenizer", tokenizer);
  }
  if (rc) return rc;
  const int vocab = ts_tokenizer_vocab(tok);
  if (format == TS_DATA_DETECT) format = vocab <= 65536 ? TS_DATA_U16 : TS_DATA_U32;
  if (format == TS_DATA_U16 && vocab > 65536) {
    ts_tokenizer_free(tok);
    return ts_fail(TS_EUSAGE, "--data-format u16: the tokenizer has %d ids, more than 16 bits "
                   "hold; use u32", vocab);
  }
  const int width = format == TS_DATA_U16 ? 2 : 4;
  // --in may be a pipe (/dev/stdin): opened without blocking, so that a FIFO
  // with no writer reads as empty instead of waiting in open() forever
  FILE *fi = NULL, *fo = NULL;
  const int fdi = open(in, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fdi >= 0) {
    const int fl = fcntl(fdi, F_GETFL);
    if (fl >= 0 && fcntl(fdi, F_SETFL, fl & ~O_NONBLOCK) == 0) fi = fdopen(fdi, "rb");
    if (!fi) close(fdi);
  }
  char tmp[4200] = "";
  char *buf = NULL;
  unsigned char *packed = malloc(65536 * 4);
  size_t cap = CHUNK, have = 0;
  uint64_t total = 0, done = 0, tokens = 0;
  struct stat st;
  if (!fi) {
    rc = ts_fail(TS_ERUNTIME, "--in %s: cannot read: %s", in, strerror(errno));
    goto end;
  }
  if (fstat(fileno(fi), &st) == 0 && S_ISREG(st.st_mode)) total = (uint64_t)st.st_size;
  if (ts_temp_path(tmp, sizeof tmp, out)) {
    rc = ts_fail(TS_EUSAGE, "--out %s: path too long", out);
    tmp[0] = 0;
    goto end;
  }
  if (!(fo = fopen(tmp, "wb"))) {
    rc = ts_fail(TS_ERUNTIME, "--out %s: cannot write: %s", out, strerror(errno));
    tmp[0] = 0;
    goto end;
  }
  buf = malloc(cap);
  if (!buf || !packed) {
    rc = ts_fail(TS_ERUNTIME, "out of memory");
    goto end;
  }
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
      rc = ts_fail(TS_ESTOPPED, "tokenize stopped by %s: --out %s not written", ts_run_signal_name(sig),
                   out);
      goto end;
    }
    const size_t got = fread(buf + have, 1, cap - have, fi);
    if (got < cap - have) {
      if (ferror(fi)) {
        rc = ts_fail(TS_ERUNTIME, "--in %s: cannot read: %s", in, strerror(errno));
        goto end;
      }
      eof = 1;
    }
    have += got;
    done += got;
    // whole lines now, the last one's rest with the next read (at the end:
    // a last line without a line break, as it is)
    const char *nl = eof ? (have ? buf + have - 1 : NULL) : memrchr(buf, '\n', have);
    if (!nl && have == cap) { // one line longer than the buffer: a larger one
      char *b = realloc(buf, cap * 2);
      if (!b) {
        rc = ts_fail(TS_ERUNTIME, "out of memory: a line of --in %s is longer than %zu MB", in,
                     cap >> 20);
        goto end;
      }
      buf = b, cap *= 2;
      continue;
    }
    const size_t use = nl ? (size_t)(nl - buf) + 1 : 0;
    int32_t *ids = NULL;
    size_t n = 0;
    if (use) {
      if ((rc = ts_tokenizer_encode(tok, buf, use, &ids, &n))) goto end;
      const int bad = write_ids(fo, ids, n, width, packed);
      free(ids);
      if (bad) {
        rc = ts_fail(TS_ERUNTIME, "--out %s: cannot write: %s", out, strerror(errno));
        goto end;
      }
      tokens += n;
    }
    memmove(buf, buf + use, have - use);
    have -= use;
    if (!quiet && ts_now() - last >= every) {
      progress(in, done, total, tokens, start, end);
      last = ts_now();
    }
  }
  if (!quiet && tty) progress(in, done, total, tokens, start, "\n");
  if (tokens == 0) {
    rc = ts_fail(TS_ERUNTIME, "--in %s: no tokens (the file is empty)", in);
    goto end;
  }
  if (fflush(fo) != 0 || fsync(fileno(fo)) != 0) {
    rc = ts_fail(TS_ERUNTIME, "--out %s: cannot write: %s", out, strerror(errno));
    goto end;
  }
  const int closed = fclose(fo);
  fo = NULL;
  if (closed != 0 || rename(tmp, out) != 0) {
    rc = ts_fail(TS_ERUNTIME, "--out %s: cannot write: %s", out, strerror(errno));
    goto end;
  }
  tmp[0] = 0;
  if (!quiet) {
    printf("tessera tokenize: %" PRIu64 " tokens (%.2f bytes each) from %s into %s, %s, %s "
           "tokenizer, %d ids\n", tokens, (double)done / (double)tokens, in, out,
           ts_data_format_names[format], ts_tokenizer_kind(tok), vocab);
    printf("train on it: tessera train --data %s --data-format %s --vocab %d%s%s ...\n", out,
           ts_data_format_names[format], vocab, ts_tokenizer_path(tok)[0] ? " --tokenizer " : "",
           ts_tokenizer_path(tok));
  }
end:
  ts_run_stop_restore();
  if (fi) fclose(fi);
  if (fo) fclose(fo);
  if (tmp[0]) unlink(tmp);
  free(buf);
  free(packed);
  ts_tokenizer_free(tok);
  return rc;
}
