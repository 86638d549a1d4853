// OpenMP's idle threads sleep instead of spinning, unless the user chose.
#ifndef TS_WAIT_POLICY_H
#define TS_WAIT_POLICY_H
// Called first thing in main: where OMP_WAIT_POLICY is unset, sets it to
// passive and runs this program again with the same arguments (libgomp
// reads it only when it loads, before main). Returns when it is set already
// or the program could not be run again (then the policy stays libgomp's).
void ts_wait_policy_passive(char **argv);
#endif
