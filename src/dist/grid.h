// The process grid: world = dp × sp × pp ranks (docs/RUN-LOG.md run contract).
//
// Rank layout, sequence index fastest: world rank = (pp·dp + d)·sp + s, so a
// sequence group (the ranks that talk every layer) is a run of neighbouring
// ranks, usually on one node. The data group of a rank is the ranks with the
// same (pipeline, sequence) coordinates, ordered by data index, so the
// canonical tree over the data group is the tree over batch shards.
// The pipeline group of a rank is the ranks with the same (data, sequence)
// coordinates, ordered by stage.
#ifndef TS_GRID_H
#define TS_GRID_H
#include <stddef.h>

#include "comm/comm.h"

typedef struct {
  int world_rank, world_size;
  int local_size;               // ranks on this node (they share its cores)
  int dp, sp, pp;               // group sizes
  int dp_rank, sp_rank, pp_rank; // this rank's coordinates
  ts_comm *data;                // the data-parallel group (size dp)
  ts_comm *seq;                 // the sequence-parallel group (size sp)
  ts_comm *pipe;                // the pipeline group (size pp), ordered by stage
  // The replica group: the dp·sp ranks of this rank's stage, which hold the
  // same parameters (but for a sequence-parallel positional table's rows),
  // ordered by (data, sequence) index (--zero shards over it); and the world,
  // ordered by world rank.
  ts_comm *replica;
  ts_comm *world;
  // The model group: the pp·sp ranks of this rank's data index, which hold
  // one copy of the model between them, ordered by (stage, sequence) index.
  ts_comm *model;
} ts_grid;

// MPI's lifetime, for main() only (world_mpi.c). Without mpiexec MPI starts
// as a world of one (MPICH singleton). Queries before init (or without it)
// say rank 0 of 1, and so does every query in a build without MPI
// (world_serial.c), where init starts nothing.
int ts_mpi_init(int *argc, char ***argv); // argc, argv may be NULL
int ts_mpi_active(void);
void ts_mpi_finalize(void);
void ts_mpi_abort(int code);
int ts_mpi_world_rank(void);
int ts_mpi_world_size(void);
// The maximum, minimum and mean over the world of each of n numbers (one
// all-gather, the same figures on every rank): the ranks' compute time
// (busiest, lightest, mean) and the largest peak memory for the run log, and
// whether a rank was asked to stop (train.c). Not part of the training's
// communication, so not counted.
void ts_mpi_spread(const double *v, int n, double *max, double *min, double *mean);
// The sum and the maximum of x over the world (each rank's model state, for
// the run log's memory record; not counted either).
void ts_mpi_sum_max(double x, double *sum, double *max);
// Start-up agreement over the world, not counted (nothing of the training):
// every rank's `bytes` into recv (world size × bytes, in rank order); and how
// many ranks say `failed`, the first of them in *first (-1: none).
int ts_mpi_allgather_raw(const void *send, void *recv, size_t bytes);
int ts_mpi_failed_ranks(int failed, int *first);

// The group of the world's ranks with the same color, ordered by key (a group
// of one rank is the serial communicator), and the number of ranks on this
// node: for ts_grid_create (collective over the world).
int ts_mpi_split(int color, int key, ts_comm **out);
int ts_mpi_local_size(void);

// TS_EUSAGE, naming --dp and the world size, unless dp × sp × pp ranks run.
int ts_grid_check(int dp, int sp, int pp);
// Splits the world into the groups (collective over the world).
int ts_grid_create(int dp, int sp, int pp, ts_grid **out);
void ts_grid_free(ts_grid *g);
void ts_grid_reset_counts(ts_grid *g);
// The counters of all groups, as ts_comm_counts_json writes them.
int ts_grid_counts_json(const ts_grid *g, char *buf, size_t cap);
// Bytes of the packing buffers this rank's groups hold now (comm.h
// ts_comm_buffer_bytes; the step record's state_bytes.comm_buffers).
size_t ts_grid_buffer_bytes(const ts_grid *g);
// Seconds this rank spent in collectives of all groups since the last reset.
double ts_grid_comm_seconds(const ts_grid *g);
#endif
