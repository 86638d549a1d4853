// `tessera plot`: the training and validation loss of run logs
// (docs/RUN-LOG.md) drawn as one SVG file, several runs overlaid.
#ifndef TS_PLOT_H
#define TS_PLOT_H

typedef struct {
  int x_tokens;      // 0: against the step; 1: against tokens (step x batch x seq)
  int log_y;         // logarithmic loss axis
  const char *title; // NULL or "": the default title
} ts_plot_options;

// Reads the n logs at paths (each refused like tessera compare refuses it:
// TS_EUSAGE, the message naming the file and line) and writes the drawing to
// out through a temporary name. TS_OK, TS_EUSAGE, or TS_ERUNTIME when out
// cannot be written.
int ts_plot_logs(const char *const *paths, int n, const char *out, const ts_plot_options *opt);
#endif
