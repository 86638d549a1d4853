// One head of one row of ring attention's merge (kernels.h, ring_merge),
// written once for the host and the device (hd.h): the CPU's and the GPU's
// merge are the same arithmetic, only their expf and log1pf differ.
#ifndef TS_ATTENTION_MERGE_H
#define TS_ATTENTION_MERGE_H
#include <math.h>

#include "base/hd.h"

// o (dh) and its log-sum-exp *la ← their merge with ob and lb.
TS_HD static inline void ts_merge_head(float *o, float *la, const float *ob, float lb, int dh) {
  const float l = *la;
  // σ(lb − l) and the new log-sum-exp, both from exp of a non-positive number
  float sig, lnew;
  if (lb <= l) {
    float e = expf(lb - l);
    sig = e / (1.0f + e);
    lnew = l + log1pf(e);
  } else {
    float e = expf(l - lb);
    sig = 1.0f / (1.0f + e);
    lnew = lb + log1pf(e);
  }
  for (int c = 0; c < dh; c++) o[c] = o[c] - sig * (o[c] - ob[c]);
  *la = lnew;
}
#endif
