// Tracked memory (mem.h). Each block carries its size in a 64-byte header.
// Blocks come from the current backend (backend.h), so that the phase
// buffers the strategies allocate are ones their kernels can use.
#include "mem.h"

#include "backend.h"

#include <stdlib.h>
#include <string.h>

const char *const ts_phase_names[TS_NPHASES] = {"attn_fwd", "attn_bwd", "mlp_fwd", "mlp_bwd",
                                                "loss"};

#define HEADER 64

static size_t live;
static size_t allocated, allocated_peak; // ts_mem_alloc's alone
static size_t peak[TS_NPHASES];
static ts_phase current = TS_PHASE_NONE;

static void grew(void) {
  if (current != TS_PHASE_NONE && live > peak[current]) peak[current] = live;
}

void *ts_mem_alloc(size_t bytes) {
  char *p = ts_backend_current()->alloc(bytes + HEADER);
  if (p == NULL) return NULL;
  memcpy(p, &bytes, sizeof bytes);
  live += bytes;
  allocated += bytes;
  if (allocated > allocated_peak) allocated_peak = allocated;
  grew();
  return p + HEADER;
}

void ts_mem_free(void *q) {
  if (!q) return;
  char *p = (char *)q - HEADER;
  size_t bytes;
  memcpy(&bytes, p, sizeof bytes);
  live -= bytes;
  allocated -= bytes;
  ts_backend_current()->free(p);
}

void ts_mem_hold(size_t bytes) {
  live += bytes;
  grew();
}

void ts_mem_release(size_t bytes) { live -= bytes; }

void ts_mem_phase(ts_phase phase) {
  current = phase;
  grew();
}

size_t ts_mem_peak(ts_phase phase) { return phase >= 0 && phase < TS_NPHASES ? peak[phase] : 0; }

void ts_mem_reset_peaks(void) {
  memset(peak, 0, sizeof peak);
  allocated_peak = allocated;
}

size_t ts_mem_alloc_peak(void) { return allocated_peak; }

size_t ts_mem_live(void) { return live; }
