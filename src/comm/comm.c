// Backend-independent half of the communicator: the counting wrappers, the
// group of one, the chunk layout of reductions and the counters' JSON form.
#include "comm.h"
#include "comm_tree.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tessera.h"

const char *const ts_comm_kind_names[TS_COMM_NKINDS] = {
    "allreduce", "reduce_scatter", "allgather", "alltoall", "sendrecv", "bcast", "barrier",
};

// ---- the group of one -----------------------------------------------------------------
static void serial_destroy(ts_comm *c) { (void)c; }
static const ts_comm_ops serial_ops = {.name = "serial", .destroy = serial_destroy};

int ts_comm_serial(ts_comm **out) {
  ts_comm *c = calloc(1, sizeof *c);
  if (!c) return ts_fail(TS_ERUNTIME, "out of memory");
  c->ops = &serial_ops;
  c->rank = 0;
  c->size = 1;
  *out = c;
  return TS_OK;
}

void ts_comm_free(ts_comm *c) {
  if (!c) return;
  if (c->ops && c->ops->destroy) c->ops->destroy(c);
  free(c->layer);
  free(c);
}

// ---- layout of reductions ------------------------------------------------------------
void ts_comm_chunk(size_t n, int P, int r, size_t *off, size_t *len) {
  size_t base = n / (size_t)P, rem = n % (size_t)P, ur = (size_t)r;
  *off = ur * base + (ur < rem ? ur : rem);
  *len = base + (ur < rem ? 1 : 0);
}

uint64_t ts_comm_tree_bytes(size_t n, int P, int r) {
  // The reduce-scatter's swaps (comm_tree.h): each sends one set of chunks
  // and receives another (the all-gather's mirror the same).
  uint64_t floats = 0;
  for (int k = 0; k < ts_comm_tree_nrounds(P, 0); k++) {
    ts_comm_swap q;
    for (int at = 0; ts_comm_tree_next(P, r, k, &at, &q);) {
      floats += ts_comm_tree_floats(n, P, q.send, q.stride);
      floats += ts_comm_tree_floats(n, P, q.recv, q.stride);
    }
  }
  return floats * sizeof(float);
}

uint64_t ts_comm_gather_bytes(size_t bytes, int P) {
  return P > 1 ? 2 * (uint64_t)(P - 1) * bytes : 0;
}

uint64_t ts_comm_allreduce_bytes(size_t n, int P, int r) {
  uint64_t bytes = 0;
  for (size_t o = 0; o < n && P > 1; o += ts_comm_allreduce_piece)
    bytes += 2 * ts_comm_tree_bytes(n - o < ts_comm_allreduce_piece ? n - o
                                                                    : ts_comm_allreduce_piece,
                                    P, r);
  return bytes;
}

size_t ts_comm_pack_tree(size_t n, int P) {
  if (P < 2 || n == 0) return 0;
  const size_t most = ts_comm_tree_max_floats(n, P);
  return (most < TS_COMM_TREE_PIECE ? most : TS_COMM_TREE_PIECE) + 1;
}

size_t ts_comm_pack_2d(size_t n, int P) { return P < 2 ? 0 : (size_t)P * n; }

size_t ts_comm_buffer_bytes(const ts_comm *c) {
  return c && c->size > 1 && c->ops && c->ops->buffer_bytes ? c->ops->buffer_bytes(c) : 0;
}

void ts_comm_tally(ts_comm_count *counts, ts_comm_kind kind, uint64_t bytes) {
  counts[kind].calls++;
  counts[kind].bytes += bytes;
}


// ---- counting ----------------------------------------------------------------------
static int count(ts_comm *c, ts_comm_kind kind, uint64_t bytes, int layer) {
  c->total[kind].calls++;
  c->total[kind].bytes += bytes;
  if (layer < 0) return TS_OK;
  if (layer >= c->nlayer) {
    int n = layer + 1 > 2 * c->nlayer ? layer + 1 : 2 * c->nlayer;
    ts_comm_count *l = realloc(c->layer, (size_t)n * TS_COMM_NKINDS * sizeof *l);
    if (!l) return ts_fail(TS_ERUNTIME, "out of memory (communication counters)");
    memset(l + (size_t)c->nlayer * TS_COMM_NKINDS, 0,
           (size_t)(n - c->nlayer) * TS_COMM_NKINDS * sizeof *l);
    c->layer = l;
    c->nlayer = n;
  }
  ts_comm_count *e = &c->layer[(size_t)layer * TS_COMM_NKINDS + kind];
  e->calls++;
  e->bytes += bytes;
  return TS_OK;
}

void ts_comm_reset_counts(ts_comm *c) {
  c->seconds = 0.0;
  memset(c->total, 0, sizeof c->total);
  if (c->layer) memset(c->layer, 0, (size_t)c->nlayer * TS_COMM_NKINDS * sizeof *c->layer);
}

ts_comm_count ts_comm_total(const ts_comm *c, ts_comm_kind kind) { return c->total[kind]; }
double ts_comm_seconds(const ts_comm *c) { return c->seconds; }

// Runs a backend operation after its counting (rc), timing it.
#define TIMED(c, rc, call)                                                                 \
  do {                                                                                    \
    if (rc) return rc;                                                                    \
    double t0_ = ts_now();                                                                \
    int r_ = (call);                                                                      \
    (c)->seconds += ts_now() - t0_;                                                       \
    return r_;                                                                            \
  } while (0)

ts_comm_count ts_comm_layer(const ts_comm *c, ts_comm_kind kind, int layer) {
  ts_comm_count z = {0, 0};
  if (layer < 0 || layer >= c->nlayer) return z;
  return c->layer[(size_t)layer * TS_COMM_NKINDS + kind];
}

// ---- the operations ------------------------------------------------------------------
int ts_comm_barrier(ts_comm *c) {
  if (c->size == 1) return TS_OK;
  int rc = count(c, TS_COMM_BARRIER, 0, -1);
  TIMED(c, rc, c->ops->barrier(c));
}

int ts_comm_allgather(ts_comm *c, const void *send, void *recv, size_t bytes, int layer) {
  if (c->size == 1) {
    if (send != recv && bytes) memmove(recv, send, bytes);
    return TS_OK;
  }
  int rc = count(c, TS_COMM_ALLGATHER, ts_comm_gather_bytes(bytes, c->size), layer);
  TIMED(c, rc, c->ops->allgather(c, send, recv, bytes));
}

int ts_comm_alltoall(ts_comm *c, const void *send, void *recv, size_t bytes, int layer) {
  if (c->size == 1) {
    if (send != recv && bytes) memmove(recv, send, bytes);
    return TS_OK;
  }
  int rc = count(c, TS_COMM_ALLTOALL, ts_comm_gather_bytes(bytes, c->size), layer);
  TIMED(c, rc, c->ops->alltoall(c, send, recv, bytes));
}

int ts_comm_alltoall_2d(ts_comm *c, const float *send, const ts_block2d *s, float *recv,
                        const ts_block2d *r, int layer) {
  const size_t n = ts_block2d_floats(s);
  if (n != ts_block2d_floats(r))
    return ts_fail(TS_ERUNTIME, "all-to-all: blocks of %zu floats sent, %zu received", n,
                   ts_block2d_floats(r));
  if (c->size == 1) { // the one block, from one layout to the other
    for (size_t i = 0; i < n; i++) recv[ts_block2d_at(r, i)] = send[ts_block2d_at(s, i)];
    return TS_OK;
  }
  uint64_t bytes = (uint64_t)n * sizeof(float);
  int rc = count(c, TS_COMM_ALLTOALL, ts_comm_gather_bytes(bytes, c->size), layer);
  TIMED(c, rc, c->ops->alltoall_2d(c, send, s, recv, r));
}

int ts_comm_sendrecv(ts_comm *c, const void *send, size_t sbytes, int dst, void *recv,
                     size_t rbytes, int src, int layer) {
  if (dst >= c->size || src >= c->size)
    return ts_fail(TS_ERUNTIME, "sendrecv: rank %d or %d outside a group of %d", dst, src,
                   c->size);
  if (c->size == 1) {
    // to oneself: the message is the copy
    if (dst == 0 && src == 0) {
      if (sbytes != rbytes)
        return ts_fail(TS_ERUNTIME, "sendrecv to self: %zu bytes sent, %zu expected", sbytes,
                       rbytes);
      if (send != recv && sbytes) memmove(recv, send, sbytes);
    } else if (dst == 0 || src == 0) {
      return ts_fail(TS_ERUNTIME, "sendrecv to self: a send without its receive");
    }
    return TS_OK;
  }
  uint64_t b = (dst >= 0 ? sbytes : 0) + (src >= 0 ? rbytes : 0);
  int rc = count(c, TS_COMM_SENDRECV, b, layer);
  TIMED(c, rc, c->ops->sendrecv(c, send, sbytes, dst, recv, rbytes, src));
}

int ts_comm_send(ts_comm *c, const void *buf, size_t bytes, int dst, int layer) {
  return ts_comm_sendrecv(c, buf, bytes, dst, NULL, 0, -1, layer);
}

int ts_comm_recv(ts_comm *c, void *buf, size_t bytes, int src, int layer) {
  return ts_comm_sendrecv(c, NULL, 0, -1, buf, bytes, src, layer);
}

int ts_comm_bcast(ts_comm *c, void *buf, size_t bytes, int root, int layer) {
  if (c->size == 1) return TS_OK;
  // counted as a flat broadcast: the root sends to everyone, the rest receive
  uint64_t b = c->rank == root ? (uint64_t)(c->size - 1) * bytes : bytes;
  int rc = count(c, TS_COMM_BCAST, b, layer);
  TIMED(c, rc, c->ops->bcast(c, buf, bytes, root));
}

int ts_comm_reduce_scatter_tree(ts_comm *c, float *buf, size_t n, int layer) {
  if (c->size == 1) return TS_OK;
  int rc = count(c, TS_COMM_REDUCE_SCATTER, ts_comm_tree_bytes(n, c->size, c->rank), layer);
  TIMED(c, rc, c->ops->reduce_scatter_tree(c, buf, n));
}

// An all-reduce sums each element over the ranks by the same tree whatever
// the vector around it, so a long one goes to the backend in pieces: the same
// bits, and packing space (the backends' own) for one piece instead of a
// gradient-sized copy kept for the whole run. One call, its bytes summed.
size_t ts_comm_allreduce_piece = (size_t)1 << 24;

static int allreduce_pieces(ts_comm *c, float *buf, size_t n) {
  int rc = TS_OK;
  for (size_t o = 0; o < n && !rc; o += ts_comm_allreduce_piece)
    rc = c->ops->allreduce_tree(c, buf + o, n - o < ts_comm_allreduce_piece
                                                ? n - o : ts_comm_allreduce_piece);
  return rc;
}

int ts_comm_allreduce_tree(ts_comm *c, float *buf, size_t n, int layer) {
  if (c->size == 1) return TS_OK;
  int rc = count(c, TS_COMM_ALLREDUCE, ts_comm_allreduce_bytes(n, c->size, c->rank), layer);
  TIMED(c, rc, allreduce_pieces(c, buf, n));
}

int ts_comm_allreduce_fast(ts_comm *c, float *buf, size_t n, int layer) {
  if (c->size == 1) return TS_OK;
  // MPI picks its own algorithm; counted as the bandwidth-optimal one (the
  // same bytes as the tree when the group is a power of two).
  int rc = count(c, TS_COMM_ALLREDUCE, 2 * ts_comm_tree_bytes(n, c->size, c->rank), layer);
  TIMED(c, rc, c->ops->allreduce_fast(c, buf, n));
}

// ---- JSON ------------------------------------------------------------------------------
__attribute__((format(printf, 4, 5)))
static int put(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *len, *len < cap ? cap - *len : 0, fmt, ap);
  va_end(ap);
  if (k < 0 || *len + (size_t)k >= cap) return -1;
  *len += (size_t)k;
  return 0;
}

// {"kind":{"calls":..,"bytes":..},...} of the kinds with calls, for one set of counts.
static int kinds_json(const ts_comm_count *k, char *buf, size_t cap, size_t *len) {
  int first = 1;
  if (put(buf, cap, len, "{")) return -1;
  for (int i = 0; i < TS_COMM_NKINDS; i++) {
    if (!k[i].calls) continue;
    if (put(buf, cap, len, "%s\"%s\":{\"calls\":%llu,\"bytes\":%llu}", first ? "" : ",",
            ts_comm_kind_names[i], (unsigned long long)k[i].calls,
            (unsigned long long)k[i].bytes))
      return -1;
    first = 0;
  }
  return first; // 1: nothing written inside the braces
}

int ts_comm_counts_json(ts_comm *const *comms, int n, char *buf, size_t cap) {
  ts_comm_count tot[TS_COMM_NKINDS];
  memset(tot, 0, sizeof tot);
  int nlayer = 0;
  for (int g = 0; g < n; g++) {
    if (!comms[g]) continue;
    for (int i = 0; i < TS_COMM_NKINDS; i++) {
      tot[i].calls += comms[g]->total[i].calls;
      tot[i].bytes += comms[g]->total[i].bytes;
    }
    if (comms[g]->nlayer > nlayer) nlayer = comms[g]->nlayer;
  }
  size_t len = 0;
  int empty = kinds_json(tot, buf, cap, &len);
  if (empty < 0) return -1;
  int any_layer = 0;
  for (int l = 0; l < nlayer; l++) {
    ts_comm_count k[TS_COMM_NKINDS];
    memset(k, 0, sizeof k);
    int used = 0;
    for (int g = 0; g < n; g++)
      for (int i = 0; i < TS_COMM_NKINDS && comms[g]; i++) {
        ts_comm_count e = ts_comm_layer(comms[g], (ts_comm_kind)i, l);
        k[i].calls += e.calls;
        k[i].bytes += e.bytes;
        used |= e.calls != 0;
      }
    if (!used) continue;
    if (put(buf, cap, &len, "%s\"%d\":", any_layer ? "," : (empty ? "\"layers\":{" : ",\"layers\":{"),
            l))
      return -1;
    if (kinds_json(k, buf, cap, &len) < 0 || put(buf, cap, &len, "}")) return -1;
    any_layer = 1;
  }
  if (any_layer && put(buf, cap, &len, "}")) return -1;
  if (put(buf, cap, &len, "}")) return -1;
  return (int)len;
}
