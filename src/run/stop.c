// Stopping a training run on SIGTERM, SIGINT or SIGHUP (run.h;
// docs/CHECKPOINTS.md, "Stopping"): what a cluster sends before it pre-empts
// a job, what Ctrl-C and a closed terminal send. The run finishes the step it
// is in, writes that step's checkpoint and stops (train.c); a second signal
// ends the process at once.
//
// The handler only records the signal: anything more (printing, writing a
// checkpoint) is not async-signal-safe and would run in the middle of
// whatever the signal interrupted. The step loop reads the record once per
// step, after the optimizer update, where stopping leaves a consistent state.
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

static const int stop_signals[] = {SIGTERM, SIGINT, SIGHUP};
#define N_STOP ((int)(sizeof stop_signals / sizeof stop_signals[0]))

// The first signal received (0: none). sig_atomic_t, written only by the
// handler, read by the step loop: the one kind of object a handler may set.
// The signal may land on any thread (OpenMP's, MPI's); every thread sees the
// same memory, and volatile makes the loop read it afresh.
static volatile sig_atomic_t stop_signo;
static volatile sig_atomic_t announce; // write the acknowledgement (rank 0, not --quiet)
static struct sigaction saved[N_STOP];
static int installed;

// Fixed strings: formatting is not async-signal-safe, write(2) is.
static void say(const char *s) {
  ssize_t k = write(STDERR_FILENO, s, strlen(s));
  (void)k; // nothing to do if stderr is gone
}

static const char *signal_name(int signo) {
  return signo == SIGTERM ? "SIGTERM" : signo == SIGINT ? "SIGINT" : signo == SIGHUP ? "SIGHUP"
                                                                                      : "signal";
}

static void on_signal(int signo) {
  if (stop_signo) {
    // A second signal: whoever sends it does not want to wait for the step.
    // A checkpoint being written is left as its temporary file, which the
    // next run removes; the checkpoints already renamed into place are whole.
    say("tessera: ");
    say(signal_name(signo));
    say(" again: exiting at once\n");
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signo, &dfl, NULL);
    raise(signo); // delivered when the handler returns: the status says "killed by signo"
    return;
  }
  stop_signo = signo;
  if (announce) {
    say("tessera: ");
    say(signal_name(signo));
    say(": stopping after this step (a second signal exits at once)\n");
  }
}

void ts_run_stop_install(int ack) {
  stop_signo = 0;
  announce = ack;
  if (installed) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < N_STOP; i++) sigaddset(&sa.sa_mask, stop_signals[i]);
  // SA_RESTART: reads and writes the signal interrupts carry on instead of
  // failing with EINTR (the log, a checkpoint, the data file).
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < N_STOP; i++) {
    // A signal ignored when the process started (nohup's SIGHUP, a shell's
    // background job's SIGINT) stays ignored, as its starter asked.
    if (sigaction(stop_signals[i], NULL, &saved[i]) == 0 && saved[i].sa_handler == SIG_IGN)
      continue;
    sigaction(stop_signals[i], &sa, NULL);
  }
  installed = 1;
}

void ts_run_stop_restore(void) {
  if (!installed) return;
  for (int i = 0; i < N_STOP; i++) sigaction(stop_signals[i], &saved[i], NULL);
  installed = 0;
}

int ts_run_stop_requested(void) { return stop_signo; }

static int stopped_by;

void ts_run_stopped(int signo) { stopped_by = signo; }

int ts_train_stop_signal(void) { return stopped_by; }

const char *ts_run_signal_name(int signo) { return signal_name(signo); }
