// The loss sum of a sequence group's sequences, from each rank's sums of
// its segments: the serial tree's order (docs/EXACTNESS.md R3).
#ifndef TS_SEGMENT_SUM_H
#define TS_SEGMENT_SUM_H
#include "comm/comm.h"

// The loss sum of nb sequences from each rank's segment sums lsums[nb]: one
// all-gather over the sequence group, then per sequence the tree over its
// segments, then the tree over the sequences. runs 2 (a rank of two runs
// summed apart, lss-zigzag): lsums[2·nb] holds the first runs' sums, then
// the second runs'; per sequence the tree over each, added. seq NULL: one
// rank, lsums itself.
int ts_segment_loss_sum(ts_comm *seq, const float *lsums, int nb, int runs, float *out);
// Each of the nb sequences' loss sum alone, into seqsum[nb]: the tree over
// the group's ranks, per run (the sums before the tree over the sequences).
int ts_segment_sequence_sums(ts_comm *seq, const float *lsums, int nb, int runs, float *seqsum);
#endif
