// A checkpoint directory has one writer, and a run never replaces checkpoints
// it was not told to (run.h, ts_run_claim_ckpt_dir).
//
// The lock is a POSIX record lock (fcntl) on DIR/tessera.lock, which NFS and
// the other shared file systems a cluster uses carry between hosts, so a
// duplicated job on another node is refused as one on this node is; the file
// also says who holds it (host and pid), for the message. The lock goes with
// the process, however it ends: a killed run leaves no stale lock.
//
// The directory also says which run lineage it belongs to: DIR/tessera.identity
// holds the lineage's run id, the digest and the whole of its configuration,
// the host and pid that started it and its first step. A fresh run (or
// --restart) starts a lineage; a resumed run continues the directory's, held
// to the same configuration as its checkpoint, and every checkpoint records
// the run id (its "tessera.run"), so that --keep-last removes only the
// lineage's own (checkpoint.c).
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "base/util.h"
#include "dist/grid.h"
#include "run.h"

static int lock_fd = -1; // held open for the life of the process
// this run's lineage (its checkpoints' run id); "" before the claim
static char lineage[TS_RUN_ID_LEN + 1];

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

const char *ts_run_lineage(void) { return lineage; }

int ts_run_id_valid(const char *s) {
  return strlen(s) == TS_RUN_ID_LEN && strspn(s, "0123456789abcdef") == TS_RUN_ID_LEN;
}

// A new run id: random bytes (when the system gives them) folded with the
// host, the pid and the time, so that two runs started at once differ.
static void new_run_id(char *out, size_t cap) {
  unsigned char r[8] = {0};
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, r, sizeof r) < 0) memset(r, 0, sizeof r);
    close(fd);
  }
  char host[128] = "";
  gethostname(host, sizeof host - 1);
  struct timespec ts = {0, 0};
  clock_gettime(CLOCK_REALTIME, &ts);
  const long pid = (long)getpid();
  uint64_t h = ts_fnv1a64(TS_FNV_OFFSET, r, sizeof r);
  h = ts_fnv1a64(h, host, strlen(host));
  h = ts_fnv1a64(h, &pid, sizeof pid);
  h = ts_fnv1a64(h, &ts, sizeof ts);
  snprintf(out, cap, "%016" PRIx64, h);
}

// The digest of what a lineage computes: the configuration's computation
// (ts_config_computation_json, without the memory options) but for --steps,
// the one setting a resume may change (checkpoint.c, check_resume_config).
static int config_digest(const ts_config *cfg, char *out, size_t cap) {
  ts_config c = *cfg;
  c.steps = 0;
  char *js = malloc(TS_CONFIG_JSON_MAX);
  if (!js) return ts_fail(TS_ERUNTIME, "out of memory");
  const int rc = ts_config_computation_json(&c, 0, js, TS_CONFIG_JSON_MAX);
  if (!rc) snprintf(out, cap, "%016" PRIx64, ts_fnv1a64(TS_FNV_OFFSET, js, strlen(js)));
  free(js);
  return rc;
}

// text written to DIR/name through a temporary file of this process, synced
// and renamed into place, the directory synced after.
static int write_atomically(const char *dir, const char *name, const char *text) {
  char path[4200], tmp[4300];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path ||
      ts_temp_path(tmp, sizeof tmp, path))
    return ts_fail(TS_EUSAGE, "--ckpt-dir %s: path too long", dir);
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return ts_fail(TS_ERUNTIME, "--ckpt-dir %s: cannot write %s: %s", dir, tmp,
                             strerror(errno));
  const size_t n = strlen(text);
  int err = write(fd, text, n) == (ssize_t)n ? 0 : errno ? errno : EIO;
  if (!err && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) {
    unlink(tmp);
    return ts_fail(TS_ERUNTIME, "--ckpt-dir %s: cannot write %s: %s", dir, path, strerror(err));
  }
  const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) fsync(dfd), close(dfd);
  return TS_OK;
}

// DIR/tessera.identity for the lineage id (its first step `first`), the
// configuration last, as the one member that is an object.
static int write_identity(const char *dir, const ts_config *cfg, const char *id, int64_t first) {
  char digest[TS_RUN_ID_LEN + 1], host[128] = "?", qhost[800];
  gethostname(host, sizeof host - 1);
  json_escape(qhost, sizeof qhost, host);
  int rc = config_digest(cfg, digest, sizeof digest);
  const size_t cap = 2 * TS_CONFIG_JSON_MAX;
  char *text = rc ? NULL : malloc(cap), *cj = rc ? NULL : malloc(TS_CONFIG_JSON_MAX);
  if (!rc && (!text || !cj)) rc = ts_fail(TS_ERUNTIME, "out of memory");
  if (!rc) rc = ts_config_to_json(cfg, cj, TS_CONFIG_JSON_MAX);
  if (!rc) {
    snprintf(text, cap, "{\"run_id\":\"%s\",\"config_digest\":\"%s\",\"host\":%s,\"pid\":%ld,"
             "\"first_step\":%" PRId64 ",\"started\":%lld,\"config\":%s}\n", id, digest, qhost,
             (long)getpid(), first, (long long)time(NULL), cj);
    rc = write_atomically(dir, TS_RUN_IDENTITY, text);
  }
  if (!rc) snprintf(lineage, sizeof lineage, "%s", id);
  free(text);
  free(cj);
  return rc;
}

// A directory's identity as read back: its lineage, digest and configuration.
typedef struct {
  char run_id[TS_RUN_ID_LEN + 1], digest[TS_RUN_ID_LEN + 1];
  char *config; // the configuration's JSON text (malloc'd)
} identity;

// The index after the object that starts at text[at] (a document the JSON
// reader accepted, so its braces and strings are well formed).
static size_t object_end(const char *text, size_t at) {
  int depth = 0, in_str = 0;
  for (size_t i = at; text[i]; i++) {
    if (in_str) {
      if (text[i] == '\\' && text[i + 1]) i++;
      else if (text[i] == '"') in_str = 0;
    } else if (text[i] == '"') {
      in_str = 1;
    } else if (text[i] == '{') {
      depth++;
    } else if (text[i] == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return at;
}

// The n bytes of text as an identity into out: NULL, or what is wrong with them.
static const char *parse_identity(const char *text, size_t n, identity *out) {
  json_value v;
  json_error err;
  if (json_parse(&v, text, n, JSON_NONFINITE | JSON_ANY_BYTES, &err)) return "not JSON";
  const json_value *id = json_get(&v, "run_id"), *dg = json_get(&v, "config_digest");
  const json_value *cfg = json_get(&v, "config");
  const char *why = NULL;
  if (v.type != JSON_OBJECT) why = "not a JSON object";
  else if (json_find_duplicate(&v)) why = "a key appears twice";
  else if (!id || id->type != JSON_STRING || !ts_run_id_valid(id->str))
    why = "its run_id is not 16 lowercase hex digits";
  else if (!dg || dg->type != JSON_STRING || !ts_run_id_valid(dg->str))
    why = "its config_digest is not 16 lowercase hex digits";
  else if (!cfg || cfg->type != JSON_OBJECT)
    why = "it has no config object";
  if (!why) {
    const size_t end = object_end(text, cfg->pos);
    snprintf(out->run_id, sizeof out->run_id, "%s", id->str);
    snprintf(out->digest, sizeof out->digest, "%s", dg->str);
    if ((out->config = malloc(end - cfg->pos + 1))) {
      memcpy(out->config, text + cfg->pos, end - cfg->pos);
      out->config[end - cfg->pos] = 0;
    } else {
      why = "out of memory";
    }
  }
  json_free(&v);
  return why;
}

// DIR/tessera.identity read and checked (TS_ERUNTIME naming it when it is
// not one tessera writes); *absent 1 when there is none.
static int read_identity(const char *dir, identity *out, int *absent) {
  char path[4200];
  const char *why = "";
  *absent = 0;
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, TS_RUN_IDENTITY) >= sizeof path)
    return ts_fail(TS_EUSAGE, "--ckpt-dir %s: path too long", dir);
  FILE *f = ts_fopen_regular(path, "r", &why);
  if (!f && errno == ENOENT) {
    *absent = 1;
    return TS_OK;
  }
  if (!f) return ts_fail(TS_ERUNTIME, "--ckpt-dir %s: cannot read %s: %s", dir, path, why);
  const size_t cap = 2 * TS_CONFIG_JSON_MAX;
  char *text = malloc(cap + 1);
  const size_t n = text ? fread(text, 1, cap + 1, f) : 0;
  const int err = ferror(f);
  fclose(f);
  if (!text) return ts_fail(TS_ERUNTIME, "out of memory");
  why = err ? "cannot be read" : n > cap ? "too large" : NULL;
  if (!why) {
    text[n] = 0;
    why = parse_identity(text, n, out);
  }
  free(text);
  if (why)
    return ts_fail(TS_ERUNTIME, "--ckpt-dir %s: %s is not a run identity tessera writes (%s); "
                   "remove it if no run owns the directory", dir, path, why);
  return TS_OK;
}

// --resume from ck: the directory's lineage continued. Its identity must be
// of the run ck continues: the same configuration (as --resume holds the
// checkpoint's, --steps aside) and, when ck records one, the same run id. A
// directory without one (made before identities, or ck copied into a new
// directory) takes ck's lineage, or a new one when ck records none.
static int continue_lineage(const ts_config *cfg, const ts_run_ckpt *ck) {
  const char *dir = cfg->ckpt_dir;
  char ckid[TS_RUN_ID_LEN + 1], mine[TS_RUN_ID_LEN + 1], what[8500];
  const int has = ts_run_ckpt_run_id(ck->ck, ckid, sizeof ckid) == 1;
  identity idn = {.config = NULL};
  int absent = 0, rc = read_identity(dir, &idn, &absent);
  if (!rc && absent) {
    if (!has) new_run_id(ckid, sizeof ckid);
    return write_identity(dir, cfg, ckid, ck->step);
  }
  snprintf(what, sizeof what, "the run that owns --ckpt-dir %s (%s/%s)", dir, dir,
           TS_RUN_IDENTITY);
  if (!rc) rc = config_digest(cfg, mine, sizeof mine);
  // another digest: the field that differs named (a digest alone would not
  // say which); a tessera that writes other fields may differ in none
  if (!rc && strcmp(mine, idn.digest)) rc = ts_run_check_recorded_config(cfg, idn.config, what);
  if (!rc && has && strcmp(ckid, idn.run_id))
    rc = ts_fail(TS_EUSAGE, "--resume: checkpoint %s is of run %s, but --ckpt-dir %s belongs to "
                 "run %s (its %s): resume that checkpoint in a new --ckpt-dir",
                 ts_ckpt_path(ck->ck), ckid, dir, idn.run_id, TS_RUN_IDENTITY);
  if (!rc) snprintf(lineage, sizeof lineage, "%s", idn.run_id);
  free(idn.config);
  return rc;
}

int ts_run_claim_ckpt_dir(const ts_config *cfg, const ts_run_ckpt *ck) {
  if (!cfg->ckpt_dir[0] || lock_fd >= 0) return TS_OK;
  int rc = ts_run_mkdir_p(cfg->ckpt_dir);
  if (!rc) rc = take_lock(cfg->ckpt_dir);
  if (rc) return rc;
  if (cfg->resume && ck && ck->ck) return continue_lineage(cfg, ck);
  char path[4200], id[TS_RUN_ID_LEN + 1];
  const int64_t last = ts_run_latest_own_checkpoint(cfg->ckpt_dir, path, sizeof path);
  if (last > 0 && !cfg->restart)
    return ts_fail(TS_EUSAGE, "--ckpt-dir %s holds checkpoints up to step %" PRId64 ": --resume "
                   "continues that run, --restart removes them and starts over", cfg->ckpt_dir,
                   last);
  // --restart: every checkpoint a run wrote is removed (the latest first, so
  // that an interrupted removal never leaves an older one looking latest);
  // other files, links and lookalike names stay
  for (int64_t s; (s = ts_run_latest_own_checkpoint(cfg->ckpt_dir, path, sizeof path)) > 0;)
    if (unlink(path) != 0)
      return ts_fail(TS_ERUNTIME, "--restart: cannot remove %s: %s", path, strerror(errno));
  // a fresh run (--restart, --init-from too) starts a lineage
  new_run_id(id, sizeof id);
  return write_identity(cfg->ckpt_dir, cfg, id, 0);
}

int ts_run_share_lineage(void) {
  const int n = ts_mpi_world_size();
  if (n == 1) return TS_OK;
  char mine[24] = {0}, *all = malloc((size_t)n * sizeof mine);
  if (!all) return ts_fail(TS_ERUNTIME, "out of memory");
  snprintf(mine, sizeof mine, "%s", lineage);
  const int rc = ts_mpi_allgather_raw(mine, all, sizeof mine);
  if (!rc) snprintf(lineage, sizeof lineage, "%.*s", TS_RUN_ID_LEN, all); // rank 0's
  free(all);
  return rc;
}
