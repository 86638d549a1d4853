// `tessera plot`: run logs as an SVG line chart, written by hand so that
// looking at a run needs nothing but the trainer.
//
// Each run is one <g class="run"> holding one <path class="loss"> (a vertex
// per step record with a finite loss; a non-finite one breaks the line) and
// one <circle class="val"> per eval record with a finite val_loss, so a
// script can count what was drawn. The logs are read with the reader of
// tessera compare (logread.h) and refused as it refuses them.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/util.h"
#include "logread.h"
#include "plot.h"
#include "tessera.h"

// ---------------------------------------------------------------------------
// The data: per run, its loss and validation-loss points in log order.
typedef struct {
  double x, y;
} point;

typedef struct {
  point *p;
  long n, cap;
} points;

typedef struct {
  const char *path;
  points loss, val;
} series;

static int points_add(points *ps, double x, double y) {
  if (ps->n == ps->cap) {
    long cap = ps->cap ? 2 * ps->cap : 256;
    point *p = realloc(ps->p, (size_t)cap * sizeof *p);
    if (p == NULL) return ts_fail(TS_ERUNTIME, "out of memory reading the logs");
    ps->p = p;
    ps->cap = cap;
  }
  ps->p[ps->n++] = (point){x, y};
  return TS_OK;
}

// A result of a record as a double: the decimal field, else its %a twin (the
// reader has checked both forms). 0 when the record has neither.
static int record_value(const json_value *rec, const char *name, const char *hex, double *v) {
  const json_value *d = json_get(rec, name), *h = json_get(rec, hex);
  if (d) return *v = d->num, 1;
  if (h) return *v = strtod(h->str, NULL), 1;
  return 0;
}

// Tokens per step from the config record: the global batch times the
// sequence length, both positive integers.
static int tokens_per_step(const ts_log_reader *r, double *out) {
  const json_value *model = json_get(&r->config, "model");
  const json_value *b = model ? json_get(model, "batch") : NULL;
  const json_value *t = model ? json_get(model, "seq") : NULL;
  uint64_t vb, vt;
  if (!b || !t || json_u64(b, &vb) || json_u64(t, &vt) || vb == 0 || vt == 0)
    return ts_fail(TS_EUSAGE,
                   "%s: no config record with the model's batch and seq before its first "
                   "step (needed for --x tokens)", r->path);
  *out = (double)vb * (double)vt;
  return TS_OK;
}

static int read_series(series *s, const ts_plot_options *opt) {
  ts_log_reader r;
  int rc = ts_log_reader_open(&r, s->path);
  if (rc != TS_OK) return rc;
  double scale = 1.0;
  int scaled = 0;
  for (;;) {
    int got = ts_log_reader_next(&r);
    if (got < 0) {
      rc = -got;
      break;
    }
    if (got == 0) {
      if (s->loss.n == 0 && s->val.n == 0)
        rc = ts_fail(TS_EUSAGE, "%s: no step or eval records to plot", s->path);
      break;
    }
    if (strcmp(r.type, "final") == 0) continue;
    if (opt->x_tokens && !scaled) {
      if ((rc = tokens_per_step(&r, &scale)) != TS_OK) break;
      scaled = 1;
    }
    const int is_step = strcmp(r.type, "step") == 0;
    const char *name = is_step ? "loss" : "val_loss";
    double y;
    if (!record_value(&r.rec, name, is_step ? "loss_hex" : "val_loss_hex", &y)) {
      rc = ts_fail(TS_EUSAGE, "%s:%ld: %s record has no \"%s\"", s->path, r.lineno, r.type, name);
      break;
    }
    // a diverged step (NaN, inf) is not drawn, nor a loss a log axis cannot
    // show, nor a point at a step that is no number
    const double x = r.step * scale;
    if (!isfinite(y) || !isfinite(x) || (opt->log_y && y <= 0)) y = NAN;
    if ((rc = points_add(is_step ? &s->loss : &s->val, x, y)) != TS_OK) break;
  }
  ts_log_reader_close(&r);
  return rc;
}

// ---------------------------------------------------------------------------
// Axes: a range covering the data, widened to round tick values.
typedef struct {
  double lo, hi; // the range drawn
  double tick[64];
  int n_tick;
  int log;
} axis;

// 1, 2, 2.5 or 5 times a power of ten, near range / 6: about six ticks.
static double nice_step(double range) {
  double raw = range / 6, mag = pow(10, floor(log10(raw))), f = raw / mag;
  return mag * (f < 1.5 ? 1 : f < 2.25 ? 2 : f < 3.5 ? 2.5 : f < 7.5 ? 5 : 10);
}

// integral: steps and tokens, whose ticks are whole numbers (not 2.5, 7.5).
static void linear_axis(axis *a, double lo, double hi, int integral) {
  if (integral && lo > 0) lo = 0; // counted from the start of training
  if (!(hi > lo)) { // one value: a little room around it
    const double pad = lo != 0 ? fabs(lo) * 0.05 : 1;
    lo -= pad, hi += pad;
  }
  double step = nice_step(hi - lo);
  if (integral) step = fmax(1, floor(step));
  a->lo = floor(lo / step) * step;
  a->hi = ceil(hi / step) * step;
  a->log = 0;
  a->n_tick = 0;
  for (long k = lround(a->lo / step); a->n_tick < 64; k++) {
    double v = k * step;
    if (v > a->hi + step * 1e-9) break;
    a->tick[a->n_tick++] = fabs(v) < step * 1e-9 ? 0 : v;
  }
}

// Round values for a log axis: the k-th of the mantissas m[0..nm) times
// powers of ten (m[0] = 1).
static double nice_value(long k, const double *m, long nm) {
  const long d = k >= 0 ? k / nm : -((-k + nm - 1) / nm);
  return m[k - nm * d] * pow(10, (double)d);
}

// Within one decade, ticks at 1, 1.5, 2, 2.5, 3, 4 ... times its power of ten;
// over more, at 1, 2, 5; over many, at the powers of ten alone.
static void log_axis(axis *a, double lo, double hi) {
  static const double fine[] = {1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8}, coarse[] = {1, 2, 5};
  const double *m = hi / lo < 10 ? fine : coarse;
  const long nm = m == fine ? 10 : 3;
  long k = (long)floor(log10(lo)) * nm; // nice_value(k) <= lo
  while (nice_value(k + 1, m, nm) <= lo) k++;
  long j = k + 1;
  while (nice_value(j, m, nm) < hi) j++;
  a->lo = nice_value(k, m, nm);
  a->hi = nice_value(j, m, nm);
  a->log = 1;
  a->n_tick = 0;
  const int decades_only = j - k > 12;
  for (long i = k; i <= j && a->n_tick < 64; i++)
    if (!decades_only || i % nm == 0 || i == k || i == j)
      a->tick[a->n_tick++] = nice_value(i, m, nm);
}

// Tick labels: big values with k, M, G; as few decimals as tell the ticks apart.
static void tick_labels(const axis *a, char labels[][32]) {
  double top = fmax(fabs(a->lo), fabs(a->hi)), div = 1;
  const char *suffix = "";
  if (top >= 1e10) div = 1e9, suffix = "G";
  else if (top >= 1e7) div = 1e6, suffix = "M";
  else if (top >= 1e4) div = 1e3, suffix = "k";
  int dec = 0;
  for (; dec < 6; dec++) {
    int exact = 1;
    for (int i = 0; i < a->n_tick && exact; i++) {
      const double v = a->tick[i] / div;
      char buf[32];
      snprintf(buf, sizeof buf, "%.*f", dec, v);
      exact = fabs(strtod(buf, NULL) - v) <= 1e-9 * fmax(1, fabs(v));
    }
    if (exact) break;
  }
  for (int i = 0; i < a->n_tick; i++) {
    double v = a->tick[i] / div;
    if (v == 0) snprintf(labels[i], 32, "0");
    else snprintf(labels[i], 32, "%.*f%s", dec, v, suffix);
  }
}

// ---------------------------------------------------------------------------
// Drawing.
enum { WIDTH = 800, HEIGHT = 500, LEFT = 70, RIGHT = 24, TOP = 44, BOTTOM = 56 };
#define PLOT_W (WIDTH - LEFT - RIGHT)
#define PLOT_H (HEIGHT - TOP - BOTTOM)

// Colours a reader can tell apart (the "tableau 10" set); after ten, dashed.
static const char *const colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_COLOURS ((int)(sizeof colours / sizeof colours[0]))

static double to_px(const axis *a, double v, double px0, double len) {
  double f = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
                    : (v - a->lo) / (a->hi - a->lo);
  return px0 + f * len;
}
static double px_x(const axis *a, double x) { return to_px(a, x, LEFT, PLOT_W); }
static double px_y(const axis *a, double y) { return to_px(a, y, TOP + PLOT_H, -PLOT_H); }

// Text as XML character data: the five special characters escaped, control
// characters (which XML 1.0 cannot hold) and, in a string that is not UTF-8
// (a file name is any bytes), every non-ASCII byte shown as '?'.
static void xml_text(FILE *f, const char *s) {
  const int utf8 = json_utf8_valid(s);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&apos;", f); break;
    default: fputc(*p < 0x20 || (*p >= 0x80 && !utf8) ? '?' : *p, f);
    }
  }
}

// The legend's name of a run: its path as given, the end of it when long.
static const char *short_name(const char *path) {
  size_t n = strlen(path);
  if (n <= 48) return path;
  const char *p = path + n - 45;
  while (((unsigned char)*p & 0xc0) == 0x80) p++; // not inside a UTF-8 character
  return p;
}

static void draw_axes(FILE *f, const axis *ax, const axis *ay, const ts_plot_options *opt) {
  char lx[64][32], ly[64][32];
  tick_labels(ax, lx);
  tick_labels(ay, ly);
  fprintf(f, "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n");
  for (int i = 0; i < ax->n_tick; i++)
    fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n", px_x(ax, ax->tick[i]),
            TOP, px_x(ax, ax->tick[i]), TOP + PLOT_H);
  for (int i = 0; i < ay->n_tick; i++)
    fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>\n", LEFT,
            px_y(ay, ay->tick[i]), LEFT + PLOT_W, px_y(ay, ay->tick[i]));
  fprintf(f, "</g>\n<g class=\"axes\" stroke=\"#000\" stroke-width=\"1\">\n"
             "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\"/>\n",
          LEFT, TOP, PLOT_W, PLOT_H);
  for (int i = 0; i < ax->n_tick; i++)
    fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n", px_x(ax, ax->tick[i]),
            TOP + PLOT_H, px_x(ax, ax->tick[i]), TOP + PLOT_H + 5);
  for (int i = 0; i < ay->n_tick; i++)
    fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\"/>\n", LEFT - 5,
            px_y(ay, ay->tick[i]), LEFT, px_y(ay, ay->tick[i]));
  fprintf(f, "</g>\n<g class=\"ticks\" fill=\"#000\">\n");
  for (int i = 0; i < ax->n_tick; i++)
    fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
            px_x(ax, ax->tick[i]), TOP + PLOT_H + 19, lx[i]);
  for (int i = 0; i < ay->n_tick; i++)
    fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", LEFT - 8,
            px_y(ay, ay->tick[i]) + 4, ly[i]);
  fprintf(f, "</g>\n<text class=\"xlabel\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
          LEFT + PLOT_W / 2, HEIGHT - 14, opt->x_tokens ? "tokens" : "step");
  fprintf(f, "<text class=\"ylabel\" x=\"18\" y=\"%d\" text-anchor=\"middle\" "
             "transform=\"rotate(-90 18 %d)\">loss (nats per token%s)</text>\n",
          TOP + PLOT_H / 2, TOP + PLOT_H / 2, ay->log ? ", log scale" : "");
}

static void draw_run(FILE *f, const series *s, int i, const axis *ax, const axis *ay) {
  const char *colour = colours[i % N_COLOURS];
  const char *dash = i >= N_COLOURS ? " stroke-dasharray=\"6 3\"" : "";
  fprintf(f, "<g class=\"run\" data-file=\"");
  xml_text(f, s->path);
  fprintf(f, "\">\n<path class=\"loss\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s d=\"",
          colour, dash);
  int pen_down = 0, drawn = 0;
  for (long k = 0; k < s->loss.n; k++) {
    const point *p = &s->loss.p[k];
    if (isnan(p->y)) {
      pen_down = 0;
      continue;
    }
    fprintf(f, "%s%c%.2f %.2f", drawn++ ? " " : "", pen_down ? 'L' : 'M', px_x(ax, p->x),
            px_y(ay, p->y));
    pen_down = 1;
  }
  fprintf(f, "\"/>\n");
  for (long k = 0; k < s->val.n; k++) {
    const point *p = &s->val.p[k];
    if (isnan(p->y)) continue;
    fprintf(f, "<circle class=\"val\" cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\" "
               "stroke=\"#fff\"/>\n", px_x(ax, p->x), px_y(ay, p->y), colour);
  }
  fprintf(f, "</g>\n");
}

// Top right, inside the plot (where falling losses leave room): what the line
// and the markers are, then the runs by colour.
static void draw_legend(FILE *f, const series *s, int n) {
  size_t longest = strlen("validation loss");
  for (int i = 0; i < n; i++)
    if (strlen(short_name(s[i].path)) > longest) longest = strlen(short_name(s[i].path));
  const int row = 17, w = 40 + (int)longest * 7, h = (n + 2) * row + 8;
  const int x = LEFT + PLOT_W - w - 10, y = TOP + 10;
  fprintf(f, "<g class=\"legend\">\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
             "fill=\"#fff\" fill-opacity=\"0.85\" stroke=\"#999\"/>\n", x, y, w, h);
  int ty = y + row;
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\" stroke-width=\"1.5\"/>"
             "<text x=\"%d\" y=\"%d\">training loss</text>\n",
          x + 8, ty - 4, x + 30, ty - 4, x + 36, ty);
  ty += row;
  fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"3.5\" fill=\"#444\"/>"
             "<text x=\"%d\" y=\"%d\">validation loss</text>\n", x + 19, ty - 4, x + 36, ty);
  for (int i = 0; i < n; i++) {
    ty += row;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"%s/>"
               "<text x=\"%d\" y=\"%d\">", x + 8, ty - 4, x + 30, ty - 4, colours[i % N_COLOURS],
            i >= N_COLOURS ? " stroke-dasharray=\"6 3\"" : "", x + 36, ty);
    xml_text(f, short_name(s[i].path));
    fprintf(f, "</text>\n");
  }
  fprintf(f, "</g>\n");
}

static void draw(FILE *f, const series *s, int n, const axis *ax, const axis *ay,
                 const ts_plot_options *opt) {
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
             "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n"
             "<text class=\"title\" x=\"%d\" y=\"26\" text-anchor=\"middle\" font-size=\"16\">",
          WIDTH, HEIGHT, WIDTH, HEIGHT, WIDTH, HEIGHT, WIDTH / 2);
  xml_text(f, opt->title && opt->title[0] ? opt->title : "training and validation loss");
  fprintf(f, "</text>\n");
  draw_axes(f, ax, ay, opt);
  for (int i = 0; i < n; i++) draw_run(f, &s[i], i, ax, ay);
  draw_legend(f, s, n);
  fprintf(f, "</svg>\n");
}

// ---------------------------------------------------------------------------
static int write_svg(const char *out, const series *s, int n, const axis *ax, const axis *ay,
                     const ts_plot_options *opt) {
  char tmp[4200];
  if (ts_temp_path(tmp, sizeof tmp, out) != 0)
    return ts_fail(TS_EUSAGE, "--out %s: path too long", out);
  FILE *f = fopen(tmp, "w");
  if (f == NULL) return ts_fail(TS_ERUNTIME, "cannot write %s: %s", out, strerror(errno));
  draw(f, s, n, ax, ay, opt);
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, out) != 0) {
    int e = errno;
    remove(tmp);
    return ts_fail(TS_ERUNTIME, "cannot write %s: %s", out, strerror(e ? e : EIO));
  }
  return TS_OK;
}

int ts_plot_logs(const char *const *paths, int n, const char *out, const ts_plot_options *opt) {
  series *s = calloc((size_t)n, sizeof *s);
  if (s == NULL) return ts_fail(TS_ERUNTIME, "out of memory");
  int rc = TS_OK;
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  for (int i = 0; i < n && rc == TS_OK; i++) {
    s[i].path = paths[i];
    rc = read_series(&s[i], opt);
    for (int k = 0; k < 2 && rc == TS_OK; k++) {
      const points *ps = k ? &s[i].val : &s[i].loss;
      for (long j = 0; j < ps->n; j++) {
        if (isnan(ps->p[j].y)) continue;
        x_lo = fmin(x_lo, ps->p[j].x), x_hi = fmax(x_hi, ps->p[j].x);
        y_lo = fmin(y_lo, ps->p[j].y), y_hi = fmax(y_hi, ps->p[j].y);
      }
    }
  }
  if (rc == TS_OK && !(y_lo <= y_hi))
    rc = ts_fail(TS_EUSAGE, "nothing to plot: no finite%s loss in %s", opt->log_y ? ", positive" : "",
                 n == 1 ? paths[0] : "the logs");
  if (rc == TS_OK) {
    axis ax, ay;
    linear_axis(&ax, x_lo, x_hi, 1);
    if (opt->log_y) log_axis(&ay, y_lo, y_hi);
    else linear_axis(&ay, y_lo, y_hi, 0);
    rc = write_svg(out, s, n, &ax, &ay, opt);
  }
  for (int i = 0; i < n; i++) free(s[i].loss.p), free(s[i].val.p);
  free(s);
  return rc;
}
