"""The shell commands of README.md and docs/*.md, run as shown (tests/docs.sh).

Every fenced ```sh block is run, command by command, in a scratch directory
shared by the blocks of one page (in page order, so a block may use the files
an earlier one made), against the built binary: `tessera` and `./tessera` both
name it, `mpiexec` is $MPIEXEC. A command fails the test when it exits
non-zero, or when its comment states what it prints and it prints something
else:

    tessera compare a.jsonl b.jsonl     # prints "identical", exit 0
    tessera compare a.jsonl b.jsonl     # identical
    tessera compare ...                 # first divergence: ...   (exit 1)
    tessera compare --rtol 1e-5 ...     # equal within rtol 1e-05
    tessera train ... --log a.jsonl     # "mlp_fwd":524288,...    (in the log)

An HTML comment on the line before a block (blank lines between allowed) says
when it is not run, and why; the output lists every block not run:

    <!-- docs-test: skip (builds with nvcc: minutes) -->    never run here
    <!-- docs-test: slow (mpiexec -n 4: a minute) -->       run with DOCS_TEST_SLOW=1

usage: python3 tests/docs.py SRCDIR TESSERA_BIN [PAGE...]
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r"<!--\s*docs-test:\s*(skip|slow)\s*\((.+?)\)\s*-->")
# Seconds a command may take: a hang fails, it does not stall make check. The
# longest command (300 steps of mini) takes about 35 s alone on 2 cores, and
# several times that while make -j2 runs the MPI tests beside it.
TIMEOUT = 900


def blocks(page):
    """(line number, mark, reason, [lines]) for each ```sh block of page."""
    out, mark, reason, cur, start = [], None, "", None, 0
    for n, line in enumerate(open(page, encoding="utf-8"), 1):
        s = line.rstrip("\n")
        if cur is not None:
            if s.strip().startswith("```"):
                out.append((start, mark, reason, cur))
                cur, mark, reason = None, None, ""
            else:
                cur.append(s)
            continue
        m = MARK.search(s)
        if m:
            mark, reason = m.group(1), m.group(2)
        elif re.match(r"\s*```sh\s*$", s):
            cur, start = [], n
        elif s.strip():
            mark, reason = None, ""  # a mark belongs to the block right after it
    return out


def commands(lines):
    """(command, expectation comment or None) per logical line; a comment line
    after a command may carry that command's expectation."""
    out, pending = [], ""
    for s in lines:
        if pending:
            s = pending + " " + s.strip()
            pending = ""
        if s.rstrip().endswith("\\"):
            pending = s.rstrip()[:-1]
            continue
        st = s.strip()
        if not st:
            continue
        if st.startswith("#"):
            if out and out[-1][1] is None and expectation(st[1:]):
                out[-1] = (out[-1][0], st[1:].strip())
            continue
        cmd, note = split_comment(st)
        out.append((cmd, note))
    return out


def split_comment(s):
    """The command and its trailing comment (a # outside quotes after a space)."""
    q = None
    for i, c in enumerate(s):
        if q:
            q = None if c == q else q
        elif c in "'\"":
            q = c
        elif c == "#" and i > 0 and s[i - 1] in " \t":
            return s[:i].rstrip(), s[i + 1:].strip()
    return s, None


def expectation(note):
    """(kind, text, exit status) a comment promises, or None for a remark."""
    if note is None:
        return None
    note = note.strip()
    m = re.search(r"\bexit(?: status)? (\d+)", note)
    rc = int(m.group(1)) if m else None
    m = re.match(r'prints "([^"]*)"', note)
    if m:
        return ("stdout", m.group(1), 0 if rc is None else rc)
    for word, want in (("identical", 0), ("same model state", 0), ("equal within", 0),
                       ("first divergence", 1)):
        if note.startswith(word):
            text = note.split("(")[0].split("...")[0].rstrip(" ,:") if word == "equal within" else word
            return ("stdout", text, want if rc is None else rc)
    if note.startswith('"'):  # a fragment of the run log
        return ("log", note, 0 if rc is None else rc)
    return None


def main():
    src, binary, pages = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3:]
    if not pages:
        pages = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    slow = os.environ.get("DOCS_TEST_SLOW") == "1"
    mpiexec = os.environ.get("MPIEXEC") or "mpiexec"
    top = tempfile.mkdtemp(prefix="tessera-docs.")
    bindir = os.path.join(top, "bin")
    os.mkdir(bindir)
    os.symlink(binary, os.path.join(bindir, "tessera"))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    prelude = 'mpiexec() { command %s "$@"; }; ' % mpiexec
    ran = failed = 0
    not_run = []
    try:
        for page in pages:
            name = os.path.relpath(page, src)
            work = os.path.join(top, name.replace("/", "_"))
            os.mkdir(work)
            os.symlink(binary, os.path.join(work, "tessera"))
            os.symlink(os.path.join(src, "data"), os.path.join(work, "data"))
            for line, mark, reason, body in blocks(page):
                if mark == "skip" or (mark == "slow" and not slow):
                    not_run.append("%s:%d: %s (%s)" % (name, line, mark, reason))
                    continue
                for cmd, note in commands(body):
                    ran += 1
                    want = expectation(note)
                    t0 = time.monotonic()
                    try:
                        p = subprocess.run(["bash", "-c", prelude + cmd], cwd=work, env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           timeout=TIMEOUT)
                        rc, out, err = p.returncode, p.stdout.decode(errors="replace"), \
                            p.stderr.decode(errors="replace")
                    except subprocess.TimeoutExpired:
                        rc, out, err = "timeout", "", "ran past %d s" % TIMEOUT
                    took = time.monotonic() - t0
                    why = None
                    if rc != (want[2] if want else 0):
                        tail = (err.strip() or out.strip()).splitlines()[-1:] or [""]
                        why = "exit %s: %s" % (rc, tail[0][:300])
                    elif want and want[0] == "stdout" and not out.startswith(want[1]):
                        why = "printed %r, the page says %r" % (out.strip()[:200], want[1])
                    elif want and want[0] == "log":
                        m = re.search(r"--log\s+(\S+)", cmd)
                        log = open(os.path.join(work, m.group(1))).read() if m else ""
                        frag = want[1].split("  ")[0]
                        if frag not in log:
                            why = "its log does not hold %s" % frag
                    if why:
                        failed += 1
                        print("FAIL: %s:%d: %s: %s (%.1f s)" % (name, line, cmd, why, took))
                    else:
                        print("ok: %s:%d: %s (%.1f s)" % (name, line, cmd, took))
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for s in not_run:
        print("not run: " + s)
    print("%d commands run, %d failed; %d blocks not run%s" %
          (ran, failed, len(not_run), "" if slow else " (DOCS_TEST_SLOW=1 runs the slow ones)"))
    return 1 if failed or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
