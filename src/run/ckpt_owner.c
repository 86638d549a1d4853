// A checkpoint directory has one writer, and a run never replaces checkpoints
// it was not told to (run.h, ts_run_claim_ckpt_dir).
//
// The lock is a POSIX record lock (fcntl) on DIR/tessera.lock, which NFS and
// the other shared file systems a cluster uses carry between hosts, so a
// duplicated job on another node is refused as one on this node is; the file
// also says who holds it (host and pid), for the message. The lock goes with
// the process, however it ends: a killed run leaves no stale lock.
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run/run.h"

static int lock_fd = -1; // held open for the life of the process

static int take_lock(const char *dir) {
  char path[4200], holder[256] = "";
  if ((size_t)snprintf(path, sizeof path, "%s/tessera.lock", dir) >= sizeof path)
    return ts_fail(TS_EUSAGE, "--ckpt-dir %s: path too long", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
  struct stat st;
  if (fd < 0)
    return ts_fail(TS_ERUNTIME, "--ckpt-dir %s: cannot write there: %s", dir, strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return ts_fail(TS_ERUNTIME, "--ckpt-dir %s: its tessera.lock is not a regular file", dir);
  }
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
  if (fcntl(fd, F_SETLK, &fl) != 0) {
    const int e = errno;
    const ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
    holder[n > 0 ? n : 0] = 0;
    holder[strcspn(holder, "\n")] = 0;
    close(fd);
    if (e == EACCES || e == EAGAIN)
      return ts_fail(TS_ERUNTIME, "--ckpt-dir %s is in use by another run (%s): one directory, "
                     "one run", dir, holder[0] ? holder : "its lock is held");
    return ts_fail(TS_ERUNTIME, "--ckpt-dir %s: cannot lock %s: %s", dir, path, strerror(e));
  }
  char host[128] = "?", line[256];
  gethostname(host, sizeof host - 1);
  const int len = snprintf(line, sizeof line, "host %s, pid %ld\n", host, (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
    const int e = errno;
    close(fd);
    return ts_fail(TS_ERUNTIME, "--ckpt-dir %s: cannot write there: %s", dir, strerror(e));
  }
  lock_fd = fd;
  return TS_OK;
}

int ts_run_claim_ckpt_dir(const ts_config *cfg) {
  if (!cfg->ckpt_dir[0] || lock_fd >= 0) return TS_OK;
  int rc = ts_run_mkdir_p(cfg->ckpt_dir);
  if (!rc) rc = take_lock(cfg->ckpt_dir);
  if (rc || cfg->resume) return rc;
  char path[4200];
  const int64_t last = ts_run_latest_own_checkpoint(cfg->ckpt_dir, path, sizeof path);
  if (last <= 0) return TS_OK;
  if (!cfg->restart)
    return ts_fail(TS_EUSAGE, "--ckpt-dir %s holds checkpoints up to step %" PRId64 ": --resume "
                   "continues that run, --restart removes them and starts over", cfg->ckpt_dir,
                   last);
  // --restart: every checkpoint a run wrote is removed (the latest first, so
  // that an interrupted removal never leaves an older one looking latest);
  // other files, links and lookalike names stay
  for (int64_t s; (s = ts_run_latest_own_checkpoint(cfg->ckpt_dir, path, sizeof path)) > 0;)
    if (unlink(path) != 0)
      return ts_fail(TS_ERUNTIME, "--restart: cannot remove %s: %s", path, strerror(errno));
  return TS_OK;
}
