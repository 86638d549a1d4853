"""What the bench/*_report.py scripts share: reading a results folder (manifest, setup,
meta files, JSONL run logs), medians, markdown formatting, and writing outputs and PNG
plots atomically (a reader never sees half a file).

A report script imports it from its own folder, so it runs from the repository root
or from bench/ alike:

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import benchlib
"""
import argparse
import json
import os
import re
import statistics
import sys

LOADED_CORES = 0.1     # other processes above this many cores on average: flagged
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))    # the repository


class ReportError(Exception):
    pass


# ---- command line -------------------------------------------------------------------

def arg_parser(doc, results):
    """The options every report takes: --results (default results), --img-dir, --md,
    --json, --no-plots; doc is the script's docstring, shown by --help."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=results)
    ap.add_argument("--img-dir", default="docs/img")
    ap.add_argument("--md", help="markdown output (default RESULTS/report.md)")
    ap.add_argument("--json", help="summary output (default RESULTS/summary.json)")
    ap.add_argument("--no-plots", action="store_true")
    return ap


def output_paths(a):
    """(results folder, markdown path, summary path) of the parsed options, absolute."""
    results = os.path.abspath(a.results)
    return (results, a.md or os.path.join(results, "report.md"),
            a.json or os.path.join(results, "summary.json"))


# ---- reading ------------------------------------------------------------------------

def read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def read_kv(path):
    """A file of "key value" lines (setup.txt, NAME.meta) as a dict of strings."""
    out = {}
    for line in (read(path, "") or "").splitlines():
        k, _, v = line.partition(" ")
        if k:
            out[k] = v.strip()
    return out


def median(xs):
    return statistics.median(xs) if xs else None


def manifest_lines(results, script, width):
    """The data lines of RESULTS/manifest.tsv (after its heading line) split at tabs,
    each checked for width fields; blank lines skipped. script names the benchmark that
    writes the manifest."""
    text = read(os.path.join(results, "manifest.tsv"))
    if text is None:
        raise ReportError("%s/manifest.tsv: missing (run %s first)" % (results, script))
    out = []
    for line in text.splitlines()[1:]:
        if not line.strip():
            continue
        f = line.split("\t")
        if len(f) != width:
            raise ReportError("manifest.tsv: bad line %r" % line)
        out.append(f)
    return out


def shown_command(cmd, root):
    """A recorded command line as a report shows it: no machine's paths. Paths inside
    the repository are relative to it; a tessera binary elsewhere is $TESSERA."""
    cmd = cmd.strip().replace(root + "/", "")
    return re.sub(r"(^|\s)/\S*/tessera(?=\s|$)", r"\1$TESSERA", cmd)


def run_command(results, name, root):
    """The command line of a run (NAME.cmd) as reports show it (shown_command)."""
    return shown_command(read(os.path.join(results, name + ".cmd"), "") or "", root)


def load_log(results, name):
    """A completed run's meta file and log: (meta, config record, step records).
    A missing or unreadable log, a failed exit, fewer than 2 step records or no final
    record raise ReportError naming the run."""
    base = os.path.join(results, name)
    meta = read_kv(base + ".meta")
    text = read(base + ".jsonl")
    if text is None:
        raise ReportError("%s: no run log (%s.jsonl)" % (name, base))
    try:
        recs = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as e:
        raise ReportError("%s: unreadable run log: %s" % (name, e))
    cfg = next((r for r in recs if r.get("type") == "config"), None)
    steps = [r for r in recs if r.get("type") == "step"]
    if meta.get("rc", "0") != "0":
        raise ReportError("%s: exit status %s" % (name, meta.get("rc")))
    if cfg is None or len(steps) < 2:
        raise ReportError("%s: run log has %d step records (need 2 or more)" % (name, len(steps)))
    if not any(r.get("type") == "final" for r in recs):
        raise ReportError("%s: run log has no final record (the run did not complete)" % name)
    return meta, cfg, steps


def others_cores(meta):
    """(wall seconds of the run, cores other processes took on average during it, rounded
    to 0.01, or None when the meta file lacks the figures)."""
    wall_s = float(meta.get("wall_s", 0) or 0)
    others = None
    if wall_s > 0 and "machine_busy_s" in meta and "own_cpu_s" in meta:
        others = max(0.0, float(meta["machine_busy_s"]) - float(meta["own_cpu_s"])) / wall_s
    return wall_s, round(others, 2) if others is not None else None


def model_name(setup):
    """The model preset of setup.txt with its extra flags."""
    return setup.get("model", "?") + ((" " + setup["model_flags"]) if setup.get("model_flags") else "")


def setup_cores(setup):
    return int(setup.get("cores") or os.cpu_count() or 1)


# ---- formatting -------------------------------------------------------------------

def fmt_ms(x):
    if x is None:
        return "—"
    return "%.0f" % x if x >= 100 else ("%.1f" % x if x >= 1 else "%.2f" % x)


def fmt_bytes(b):
    if b is None:
        return "—"
    if b == 0:
        return "0"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return "%.2f %s" % (b / div, unit)
    return "%d B" % b


def flag(x):
    """" †" when other processes took more than LOADED_CORES cores during the run."""
    return " †" if x.get("others_cores") is not None and x["others_cores"] > LOADED_CORES else ""


def table(head, align, rows):
    """A markdown table: a heading row, an alignment row, and the rows of cells."""
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def shown(path, root):
    """A path as the report shows it: relative to the repository when inside it, else
    its file name alone (no machine's folders in a committed report)."""
    p = os.path.abspath(path)
    return os.path.relpath(p, root) if p.startswith(root + os.sep) else os.path.basename(p)


# ---- writing ------------------------------------------------------------------------

def write_atomic(path, content):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(content)
    os.replace(tmp, path)


def save_fig(fig, path):
    """A matplotlib figure as a PNG, written to a temporary name and renamed."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    os.replace(tmp, path)


def write_report(md, md_path, summary, json_path):
    """Prints the markdown lines and writes them to md_path, the summary to json_path."""
    text = "\n".join(md)
    print(text)
    write_atomic(md_path, text + "\n")
    write_atomic(json_path, json.dumps(summary, indent=1) + "\n")


def run_main(main, script):
    """Runs main(); a ReportError becomes one line on stderr, prefixed by the script's
    name, and exit status 1."""
    try:
        sys.exit(main())
    except ReportError as e:
        print("%s: %s" % (script, e), file=sys.stderr)
        sys.exit(1)
