// Why passive: a step is hundreds of short parallel regions (one per kernel
// call). Under libgomp's default policy a thread that reaches a region's end
// spins for a while before it sleeps, which costs nothing on an idle machine
// and a great deal on a shared one: when another process holds a core, the
// spinning thread burns the time slice its partner needs to finish, and every
// barrier waits a scheduler tick. Measured on two cores at the GPT-2 124M
// shape (docs/PERFORMANCE.md): passive is level with the default when the
// machine is quiet and keeps a step within about 2x its quiet time beside one
// busy process, where spinning took about 3x. A user who sets
// OMP_WAIT_POLICY (active, for a dedicated node) keeps it.
#include "run/wait_policy.h"

#include <stdlib.h>
#include <unistd.h>

void ts_wait_policy_passive(char **argv) {
  if (getenv("OMP_WAIT_POLICY")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // not run again (no /proc): carry on under the policy libgomp loaded with
}
