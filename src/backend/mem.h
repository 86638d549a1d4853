// Tracked memory: the intermediate buffers of the phases whose peak the
// papers tabulate (UPipe paper Tables 2 and 7: the attention block; ALST and
// UPipe §2.4: the MLP and the loss). A phase's peak is the largest number of
// bytes live at once while it ran: buffers taken with ts_mem_alloc, plus
// buffers owned elsewhere that the phase declares live with ts_mem_hold (its
// input, its outputs, the model's preallocated buffers it works in).
// One process, one thread: called outside parallel regions.
#ifndef TS_MEM_H
#define TS_MEM_H
#include <stddef.h>

typedef enum {
  TS_PHASE_NONE = -1,
  TS_PHASE_ATTN_FWD = 0,
  TS_PHASE_ATTN_BWD,
  TS_PHASE_MLP_FWD,
  TS_PHASE_MLP_BWD,
  TS_PHASE_LOSS, // the LM head and the cross-entropy, forward and backward
  TS_NPHASES
} ts_phase;

// "attn_fwd", "attn_bwd", "mlp_fwd", "mlp_bwd", "loss"
extern const char *const ts_phase_names[TS_NPHASES];

void *ts_mem_alloc(size_t bytes); // 64-byte aligned, uninitialised; NULL when out of memory
void ts_mem_free(void *p);        // NULL is fine
void ts_mem_hold(size_t bytes);
void ts_mem_release(size_t bytes);
// Starts attributing to `phase` (TS_PHASE_NONE: to none) from the bytes live now.
void ts_mem_phase(ts_phase phase);
size_t ts_mem_peak(ts_phase phase); // since the last reset
void ts_mem_reset_peaks(void);
// The most bytes taken with ts_mem_alloc live at once since the last reset,
// in any phase: the buffers that exist only inside a call, beyond the ones
// it declares with ts_mem_hold (the strategies' `incall`, strategy.h).
size_t ts_mem_alloc_peak(void);
size_t ts_mem_live(void);
#endif
