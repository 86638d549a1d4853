// OpenMP's environment: tessera's default for idle threads, and the user's
// settings checked like flags (libgomp takes them before main, where a bad
// one crashes or stops the run with a message that names no setting).
#ifndef TS_OMP_ENV_H
#define TS_OMP_ENV_H
// Called first thing in main: where OMP_WAIT_POLICY is unset, sets it to
// passive (and GOMP_SPINCOUNT, where unset, to a short spin) and runs this
// program again with the same arguments (libgomp
// reads it only when it loads, before main). Returns when it is set already
// or the program could not be run again (then the policy stays libgomp's).
void ts_wait_policy_passive(char **argv);
// OMP_NUM_THREADS, OMP_THREAD_LIMIT and OMP_STACKSIZE, where set, checked as
// --threads is: TS_EUSAGE with one line naming the variable, or TS_OK.
int ts_omp_env_check(void);
#endif
