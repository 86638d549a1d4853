// Runs a kernel's grid on the host (cuda_emu.h): blocks one after another,
// the threads of a block as fibers on the launching thread. A fiber runs
// until it waits (__syncthreads, a warp shuffle) or ends; then the next
// ready fiber in schedule order runs. Fibers and not one OS thread per CUDA
// thread: a barrier then costs a context switch per thread instead of a trip
// through the kernel's scheduler (the thread version took minutes for the
// attention tests alone), the schedule is the same on every run, and a
// barrier no thread can pass is detected instead of hanging.
//
// On x86-64 a switch is a few instructions of our own (stack_switch below):
// ucontext's swapcontext saves the signal mask with a system call on every
// switch, which was two thirds of an emulated training run's time. Other
// machines use ucontext.
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <vector>

#include "cuda_emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define TS_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_EMU_ASAN 1
#endif
#endif
#ifdef TS_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

uint3 ts_emu_thread_idx, ts_emu_block_idx;
dim3 ts_emu_block_dim, ts_emu_grid_dim;

namespace {

// Per fiber. The kernels keep rows of floats in locals (a few KiB); the rest
// is room for libm and for a message printed from inside a kernel.
constexpr size_t STACK = 256 << 10;
constexpr unsigned WARP = 32;

enum State { READY, AT_SYNC, AT_SHFL, DONE }; // READY includes running

#if defined(__x86_64__)
#define TS_EMU_OWN_SWITCH 1
// Saves the callee-saved registers and the SSE and x87 control words on the
// running stack, stores its pointer in *from and continues on the stack
// `to`, which was saved the same way (or laid out so by start_fiber).
extern "C" void ts_emu_stack_switch(void **from, void *to);
asm(".text\n"
    ".globl ts_emu_stack_switch\n"
    ".type ts_emu_stack_switch, @function\n"
    "ts_emu_stack_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size ts_emu_stack_switch, .-ts_emu_stack_switch\n");
struct Context {
  void *sp; // where ts_emu_stack_switch saved it
};
#else
struct Context {
  ucontext_t uc;
};
#endif

struct Fiber {
  Context ctx;
  char *stack; // STACK bytes above a guard page
  uint3 idx;
  unsigned lane, warp;
  State state;
  void *fake_stack; // ASan's, while switched out
};

struct Warp {
  uint32_t lanes;   // the lanes the block has (its last warp may be partial)
  uint32_t live;    // lanes that have not ended
  uint32_t arrived; // lanes waiting at the current shuffle
  uint32_t mask;    // that shuffle's mask
  void *site;       // and where it is called from
  int parity;       // the slot row it uses: two rows, so a lane may write the
                    // next shuffle's value before a slow lane read this one's
  uint32_t slot[2][WARP];
};

struct Runner {
  // Grown to the largest block; stacks are kept, contexts made afresh for
  // every block (so moving them when the vector grows is harmless).
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  unsigned n;             // threads of the current block
  unsigned live, at_sync; // threads not ended; threads at __syncthreads
  void *sync_site;        // the __syncthreads they wait at
  int cur = -1;           // the running fiber; -1: the launching code
  bool reversed;
  bool busy;
  Context home; // the launching code, while fibers run
  void *home_fake;
  const void *home_bottom;
  size_t home_size;
  void (*body)(void *);
  void *ctx;
};
Runner R;

[[noreturn]] void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "tessera CUDA emulator: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (R.cur >= 0) {
    const Fiber &f = R.fibers[R.cur];
    fprintf(stderr, " (thread (%u, %u, %u) of block (%u, %u, %u))", f.idx.x, f.idx.y, f.idx.z,
            ts_emu_block_idx.x, ts_emu_block_idx.y, ts_emu_block_idx.z);
  }
  fprintf(stderr, "\n");
  fflush(stderr);
  abort();
}

// Fiber i of schedule position p.
int at(unsigned p) { return (int)(R.reversed ? R.n - 1 - p : p); }
unsigned pos(int i) { return R.reversed ? R.n - 1 - (unsigned)i : (unsigned)i; }

// The next ready fiber after the running one in schedule order, or -1.
int next_ready(void) {
  unsigned start = R.cur >= 0 ? pos(R.cur) + 1 : 0;
  for (unsigned k = 0; k < R.n; k++) {
    int i = at((start + k) % R.n);
    if (i != R.cur && R.fibers[i].state == READY) return i;
  }
  return -1;
}

// Switches from the running fiber (or the launching code) to fiber `to` (or,
// -1, back to the launching code); returns when the caller is resumed.
void switch_to(int to) {
  const int me = R.cur;
  Fiber *self = me >= 0 ? &R.fibers[me] : nullptr;
  Context *from = self ? &self->ctx : &R.home;
  Context *dest = to >= 0 ? &R.fibers[to].ctx : &R.home;
#ifdef TS_EMU_ASAN
  // A fiber that ended passes no save slot: ASan drops its fake stack.
  void **save = self ? (self->state == DONE ? nullptr : &self->fake_stack) : &R.home_fake;
  if (to >= 0) __sanitizer_start_switch_fiber(save, R.fibers[to].stack, STACK);
  else __sanitizer_start_switch_fiber(save, R.home_bottom, R.home_size);
#endif
  R.cur = to;
#ifdef TS_EMU_OWN_SWITCH
  ts_emu_stack_switch(&from->sp, dest->sp);
#else
  if (swapcontext(&from->uc, &dest->uc) != 0) die("swapcontext failed");
#endif
#ifdef TS_EMU_ASAN
  __sanitizer_finish_switch_fiber(self ? self->fake_stack : R.home_fake, nullptr, nullptr);
#endif
  R.cur = me;
  if (self) ts_emu_thread_idx = self->idx;
}

// The running fiber waits (or has ended): run the next ready one.
void yield(void) { switch_to(next_ready()); }

void release_sync(void) {
  for (unsigned i = 0; i < R.n; i++)
    if (R.fibers[i].state == AT_SYNC) R.fibers[i].state = READY;
  R.at_sync = 0;
}

void thread_ends(void) {
  Fiber &f = R.fibers[R.cur];
  Warp &w = R.warps[f.warp];
  const uint32_t bit = 1u << f.lane;
  if (w.arrived && (w.mask & bit))
    die("a thread ended while its warp waits for it at a shuffle (mask %#x)", w.mask);
  f.state = DONE;
  w.live &= ~bit;
  R.live--;
  if (R.at_sync && R.at_sync == R.live) release_sync();
}

void fiber_main(void) {
#ifdef TS_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  ts_emu_thread_idx = R.fibers[R.cur].idx;
  R.body(R.ctx);
  thread_ends();
  yield(); // never comes back
  die("an ended thread was resumed");
}

char *new_stack(void) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void *p = mmap(nullptr, STACK + page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) die("no memory for a thread's stack");
  // a kernel that overflows its stack faults here instead of corrupting another's
  if (mprotect(p, page, PROT_NONE) != 0) die("mprotect failed");
  return (char *)p + page;
}

// A fresh context for f on its stack, entering fiber_main.
#ifdef TS_EMU_OWN_SWITCH
// The stack is laid out as ts_emu_stack_switch leaves one: from the top, a
// null return address for fiber_main (which never returns), fiber_main's
// address for the switch's `ret`, six zero registers and the control words
// of the launching thread. fiber_main then starts as if called, with the
// stack pointer 8 past a 16-byte boundary.
void start_fiber(Fiber &f) {
  uint64_t *top = (uint64_t *)(f.stack + STACK); // 16-byte aligned
  uint64_t *sp = top - 9;
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpucw));
  memset(sp, 0, 9 * sizeof *sp);
  memcpy(sp, &mxcsr, 4);
  memcpy((char *)sp + 4, &fpucw, 2);
  sp[7] = (uint64_t)(uintptr_t)&fiber_main;
  f.ctx.sp = sp;
}
#else
// Apart from the loop that calls it: getcontext returns twice, like setjmp.
__attribute__((noinline)) void start_fiber(Fiber &f) {
  if (getcontext(&f.ctx.uc) != 0) die("getcontext failed");
  f.ctx.uc.uc_stack.ss_sp = f.stack;
  f.ctx.uc.uc_stack.ss_size = STACK;
  f.ctx.uc.uc_link = nullptr;
  makecontext(&f.ctx.uc, fiber_main, 0);
  // The context has its stack now. ASan's swapcontext clears the shadow of the
  // whole stack a context names on every switch to it (most of a sanitizer
  // run's time); the switches tell ASan about the stacks instead (switch_to).
  // A fiber's frames are all popped when it ends, so its stack is clean for
  // the next block.
  f.ctx.uc.uc_stack.ss_sp = nullptr;
  f.ctx.uc.uc_stack.ss_size = 0;
}
#endif

void run_block(void) {
  const unsigned bx = ts_emu_block_dim.x, by = ts_emu_block_dim.y;
  for (unsigned t = 0; t < R.n; t++) {
    Fiber &f = R.fibers[t];
    f.idx = {t % bx, t / bx % by, t / (bx * by)};
    f.lane = t % WARP;
    f.warp = t / WARP;
    f.state = READY;
    f.fake_stack = nullptr;
    start_fiber(f);
  }
  for (unsigned w = 0; w < R.warps.size(); w++) {
    unsigned k = R.n - w * WARP < WARP ? R.n - w * WARP : WARP;
    Warp &wp = R.warps[w];
    wp.lanes = wp.live = k == WARP ? 0xffffffffu : (1u << k) - 1;
    wp.arrived = wp.mask = 0;
    wp.parity = 0;
  }
  R.live = R.n;
  R.at_sync = 0;
  switch_to(at(0));
  // back when no fiber is ready: all ended, or they wait for each other
  if (R.live) {
    unsigned shfl = 0;
    for (unsigned i = 0; i < R.n; i++) shfl += R.fibers[i].state == AT_SHFL;
    die("block (%u, %u, %u) cannot go on: %u threads wait at __syncthreads, %u at a warp "
        "shuffle, %u have ended",
        ts_emu_block_idx.x, ts_emu_block_idx.y, ts_emu_block_idx.z, R.at_sync, shfl, R.n - R.live);
  }
}

} // namespace

// Threads meet at one barrier by where they call it from: a __syncthreads
// under a condition that differs between the block's threads is undefined
// on the device (it may hang), not a barrier with a different meeting point.
void __syncthreads(void) {
  if (R.cur < 0) die("__syncthreads outside a kernel");
  void *site = __builtin_return_address(0);
  if (R.at_sync == 0) R.sync_site = site;
  else if (site != R.sync_site)
    die("the threads of a block wait at different __syncthreads (under a condition that "
        "differs between them)");
  R.fibers[R.cur].state = AT_SYNC;
  if (++R.at_sync == R.live) {
    release_sync();
    return;
  }
  yield();
}

// The lanes in mask must all call the same shuffle (the same place in the
// code) with the same mask, as on the device.
uint32_t ts_emu_shfl_xor(unsigned mask, uint32_t bits, int lane_mask) {
  if (R.cur < 0) die("a warp shuffle outside a kernel");
  void *site = __builtin_return_address(0);
  Fiber &f = R.fibers[R.cur];
  Warp &w = R.warps[f.warp];
  const uint32_t bit = 1u << f.lane;
  if (!(mask & bit)) die("a lane shuffles with a mask (%#x) that leaves it out", mask);
  if (mask & ~w.lanes) die("a shuffle's mask (%#x) names lanes the block lacks", mask);
  if (mask & ~w.live) die("a shuffle's mask (%#x) names lanes that have ended", mask);
  if (w.arrived == 0) {
    w.mask = mask;
    w.site = site;
  } else if (w.mask != mask) {
    die("the lanes of a warp shuffle with different masks (%#x, %#x)", w.mask, mask);
  } else if (w.site != site) {
    die("the lanes of a warp are at different shuffles (under a condition that differs "
        "between them)");
  }
  const int par = w.parity;
  w.slot[par][f.lane] = bits;
  w.arrived |= bit;
  if (w.arrived == w.mask) { // the last lane in: everyone's value is there
    for (unsigned l = 0; l < WARP; l++)
      if (w.mask >> l & 1u) R.fibers[f.warp * WARP + l].state = READY;
    w.arrived = 0;
    w.parity ^= 1;
  } else {
    f.state = AT_SHFL;
    yield();
  }
  const unsigned src = f.lane ^ (unsigned)lane_mask;
  if (src >= WARP || !(mask >> src & 1u)) die("a shuffle reads lane %u, outside its mask", src);
  return w.slot[par][src];
}

bool ts_emu_check_launch(dim3 grid, dim3 block, size_t shmem) {
  char why[160];
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > INT_MAX || grid.y > 65535 ||
      grid.z > 65535) {
    snprintf(why, sizeof why, "launch with grid (%u, %u, %u)", grid.x, grid.y, grid.z);
    ts_emu_fail(cudaErrorInvalidConfiguration, why);
    return false;
  }
  const uint64_t threads = (uint64_t)block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64) {
    snprintf(why, sizeof why, "launch with block (%u, %u, %u)", block.x, block.y, block.z);
    ts_emu_fail(cudaErrorInvalidConfiguration, why);
    return false;
  }
  if (shmem) die("dynamic shared memory is not emulated");
  return true;
}

void ts_emu_run_grid(dim3 grid, dim3 block, void (*body)(void *), void *ctx) {
  if (R.busy)
    die("a launch while another runs: from inside a kernel, from two threads at once, or after "
        "a kernel was left by a signal (a crash inside it, reported above)");
  R.busy = true;
  R.n = block.x * block.y * block.z;
  while (R.fibers.size() < R.n) {
    R.fibers.emplace_back();
    R.fibers.back().stack = new_stack();
  }
  R.warps.resize((R.n + WARP - 1) / WARP);
  R.body = body;
  R.ctx = ctx;
#ifdef TS_EMU_ASAN
  pthread_attr_t attr;
  void *addr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0 ||
      pthread_attr_getstack(&attr, &addr, &R.home_size) != 0)
    die("cannot find the launching thread's stack");
  pthread_attr_destroy(&attr);
  R.home_bottom = addr;
#endif
  ts_emu_grid_dim = grid;
  ts_emu_block_dim = block;
  const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
  for (uint64_t k = 0; k < nblocks; k++) {
    uint64_t b = R.reversed ? nblocks - 1 - k : k;
    ts_emu_block_idx = {(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                        (unsigned)(b / grid.x / grid.y)};
    run_block();
  }
  R.busy = false;
}

// TS_EMU_SCHEDULE=reversed starts a process with the reversed order, for
// whole runs (tests/tessera_emu) that must log the same bits either way.
static const bool schedule_from_env = [] {
  const char *s = getenv("TS_EMU_SCHEDULE");
  R.reversed = s && strcmp(s, "reversed") == 0;
  return R.reversed;
}();

extern "C" int ts_cuda_emu_schedule(int reversed) {
  int was = R.reversed;
  R.reversed = reversed != 0;
  return was;
}
