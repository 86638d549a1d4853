#!/usr/bin/python3
"""Builds an English text corpus from the reStructuredText sources that Debian's
documentation packages ship, and its SentencePiece token files (docs/DATA.md).

    /usr/bin/python3 data/debian_docs.py                 # into data/debian-docs/
    /usr/bin/python3 data/debian_docs.py --check         # the outputs match MANIFEST.json

Steps: `apt-get download` each package into a temporary folder (or take the .deb files
of --debs), unpack it with `dpkg-deb -x`, keep its English .rst sources (Python's
html/_sources/*.rst.txt, the kernel's Documentation/**/*.rst[.gz] but its translations),
clean them lightly (line ends, trailing blanks, runs of blank lines), split whole documents
into train and validation by a hash of their package and path, learn a SentencePiece
model on the training text (spm_train), encode both splits with `tessera tokenize`, and
record every input and output, with its sha256, in MANIFEST.json. Standard library only;
no absolute path goes into an output.
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "debian-docs")
DEFAULT_PACKAGES = ["python3.11-doc", "linux-doc-6.1"]
# spm_train's settings (docs/TOKENIZER.md explains each); one thread and a fixed seed so
# that the model is the same bytes on every run of the same input
# (learned on a seeded sample of 400,000 lines of the training text, 28% of the 1.41
# million lines of the default packages: all of them take several times as long)
SPM_FLAGS = ["--model_type=unigram", "--character_coverage=0.9999", "--byte_fallback=true",
             "--split_digits=true", "--num_threads=1", "--random_seed=1",
             "--input_sentence_size=400000", "--shuffle_input_sentence=true",
             "--max_sentence_length=16384"]
OUTPUTS = ["train.txt", "val.txt", "tokenizer.model", "tokenizer.vocab", "train.bin", "val.bin"]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def deb_field(deb, field):
    out = subprocess.run(["dpkg-deb", "-f", deb, field], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def download(packages, into):
    """apt-get download each package into `into`; the .deb paths, in package order."""
    subprocess.run(["apt-get", "download", "-q"] + packages, cwd=into, check=True,
                   stdout=subprocess.DEVNULL)
    debs = []
    for p in packages:
        found = sorted(f for f in os.listdir(into) if f.startswith(p + "_") and f.endswith(".deb"))
        if len(found) != 1:
            sys.exit("debian_docs.py: apt-get download %s left %d .deb files" % (p, len(found)))
        debs.append(os.path.join(into, found[0]))
    return debs


# Which files of a package are its English reStructuredText sources, and their
# names inside it (the name keys the split; it is relative to the package's root).
def is_source(rel):
    if "/translations/" in rel:  # the kernel's zh_CN, ja_JP, it_IT, ... trees
        return False
    return rel.endswith(".rst.txt") or rel.endswith(".rst") or rel.endswith(".rst.gz")


def read_source(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


BLANKS = re.compile(r"\n{3,}")


def clean(text):
    """Line ends to \\n, tabs kept, trailing blanks cut, at most one blank line in a row."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return BLANKS.sub("\n\n", text).strip("\n")


def in_val(package, rel, percent):
    """A document is validation when the hash of its name falls in the first `percent` of 100."""
    h = hashlib.sha256(("%s/%s" % (package, rel)).encode()).digest()
    return int.from_bytes(h[:8], "big") % 100 < percent


def documents(deb, root):
    """(name, text) of the package's English sources, sorted by name."""
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    docs = []
    for d, _, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            rel = os.path.relpath(path, root)
            if is_source(rel) and not os.path.islink(path):
                text = clean(read_source(path))
                if text:
                    docs.append((rel, text))
    docs.sort()
    return docs


def count_tokens(path, width):
    return os.path.getsize(path) // width


def build(args):
    tessera = args.tessera or shutil.which("tessera")
    if not tessera:
        sys.exit("debian_docs.py: no tessera binary: give --tessera PATH (the build's ./tessera)")
    for tool in ("dpkg-deb", "spm_train"):
        if not shutil.which(tool):
            sys.exit("debian_docs.py: %s is not on PATH (scripts/install-deps installs it)" % tool)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="debian-docs-") as tmp:
        if args.debs:
            debs = sorted(os.path.join(args.debs, f) for f in os.listdir(args.debs) if f.endswith(".deb"))
            if not debs:
                sys.exit("debian_docs.py: --debs %s: no .deb files" % args.debs)
        else:
            debs = download(args.packages, tmp)
        sources, train, val = [], [], []
        for i, deb in enumerate(debs):
            pkg = deb_field(deb, "Package")
            docs = documents(deb, os.path.join(tmp, "x%d" % i))
            nval = 0
            for rel, text in docs:
                v = in_val(pkg, rel, args.val_percent)
                (val if v else train).append(text)
                nval += v
            src = deb_field(deb, "Source") or pkg
            sources.append({"package": pkg, "version": deb_field(deb, "Version"),
                            "source": src.split(" ")[0], "deb": os.path.basename(deb),
                            "deb_sha256": sha256_file(deb), "documents": len(docs),
                            "val_documents": nval, "text_bytes": sum(len(t.encode()) for _, t in docs)})
            print("%s %s: %d documents" % (pkg, sources[-1]["version"], len(docs)), flush=True)
    if not train or not val:
        sys.exit("debian_docs.py: the split left %d training and %d validation documents"
                 % (len(train), len(val)))
    # documents end with a line break and are separated by a blank line
    for name, docs in (("train.txt", train), ("val.txt", val)):
        with open(os.path.join(out, name + ".tmp"), "w", encoding="utf-8", newline="\n") as f:
            f.write("\n\n".join(docs) + "\n")
        os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))
    # the tokenizer, learned on the training split alone; run in the output folder so
    # that nothing it writes names a path above it
    subprocess.run(["spm_train", "--input=train.txt", "--model_prefix=tokenizer",
                    "--vocab_size=%d" % args.vocab] + SPM_FLAGS, cwd=out, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if args.quiet else None)
    width = 2 if args.vocab <= 65536 else 4
    fmt = "u16" if width == 2 else "u32"
    for split in ("train", "val"):
        subprocess.run([os.path.abspath(tessera), "tokenize", "--tokenizer", "tokenizer.model",
                        "--in", split + ".txt", "--out", split + ".bin", "--data-format", fmt,
                        "--quiet"], cwd=out, check=True)
    files = {}
    for name in OUTPUTS:
        p = os.path.join(out, name)
        files[name] = {"bytes": os.path.getsize(p), "sha256": sha256_file(p)}
    for split in ("train", "val"):
        files[split + ".bin"]["tokens"] = count_tokens(os.path.join(out, split + ".bin"), width)
    manifest = {
        "what": "English reStructuredText sources of Debian documentation packages "
                "(data/debian_docs.py, docs/DATA.md)",
        "packages": sources,
        "split": {"rule": "a document is validation when the first 8 bytes of "
                          "sha256(package/path), big-endian, mod 100 < val_percent",
                  "val_percent": args.val_percent, "train_documents": len(train),
                  "val_documents": len(val)},
        "tokenizer": {"tool": "spm_train", "vocab_size": args.vocab,
                      "flags": ["--input=train.txt", "--model_prefix=tokenizer",
                                "--vocab_size=%d" % args.vocab] + SPM_FLAGS},
        "data_format": fmt,
        "files": files,
        "train": "tessera train --data data/debian-docs/train.bin --val-data "
                 "data/debian-docs/val.bin --data-format %s --vocab %d --tokenizer "
                 "data/debian-docs/tokenizer.model" % (fmt, args.vocab),
    }
    with open(os.path.join(out, "MANIFEST.json.tmp"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(os.path.join(out, "MANIFEST.json.tmp"), os.path.join(out, "MANIFEST.json"))
    print("train: %d documents, %d bytes, %d tokens; val: %d documents, %d bytes, %d tokens"
          % (len(train), files["train.txt"]["bytes"], files["train.bin"]["tokens"], len(val),
             files["val.txt"]["bytes"], files["val.bin"]["tokens"]))


def check(args):
    """Every output the manifest lists is there with its size and sha256; each token file
    holds the tokens it says. Exit 1 naming the first that differs."""
    out = os.path.abspath(args.out)
    try:
        with open(os.path.join(out, "MANIFEST.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("debian_docs.py --check: %s: %s" % (os.path.join(args.out, "MANIFEST.json"), e))
    width = 2 if manifest.get("data_format") == "u16" else 4
    bad = []
    for name in OUTPUTS:
        want = manifest["files"].get(name)
        p = os.path.join(out, name)
        if want is None:
            bad.append("%s: not in the manifest" % name)
        elif not os.path.exists(p):
            bad.append("%s: missing" % name)
        elif os.path.getsize(p) != want["bytes"] or sha256_file(p) != want["sha256"]:
            bad.append("%s: its bytes are not the manifest's (sha256 %s)" % (name, sha256_file(p)))
        elif "tokens" in want and count_tokens(p, width) != want["tokens"]:
            bad.append("%s: %d tokens, the manifest says %d" % (name, count_tokens(p, width), want["tokens"]))
    if bad:
        sys.exit("debian_docs.py --check: " + "; ".join(bad))
    print("debian_docs.py --check: %d files match MANIFEST.json" % len(OUTPUTS))


def usage(msg):
    print("debian_docs.py: " + msg, file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output folder (default data/debian-docs)")
    ap.add_argument("--packages", nargs="+", default=DEFAULT_PACKAGES,
                    help="Debian packages to download (default: %s)" % " ".join(DEFAULT_PACKAGES))
    ap.add_argument("--debs", help="take the .deb files of this folder instead of downloading")
    ap.add_argument("--vocab", type=int, default=4096, help="SentencePiece pieces (default 4096)")
    ap.add_argument("--val-percent", type=int, default=2,
                    help="percent of the documents held out for validation (default 2)")
    ap.add_argument("--tessera", help="the tessera binary that encodes the text (default: on PATH)")
    ap.add_argument("--check", action="store_true", help="check the outputs against MANIFEST.json")
    ap.add_argument("--quiet", action="store_true", help="no spm_train log")
    args = ap.parse_args()
    # usage errors: one line, exit 2
    if not 1 <= args.val_percent <= 50:
        usage("--val-percent %d: must be in [1, 50]" % args.val_percent)
    if args.vocab < 300:
        usage("--vocab %d: must be >= 300 (byte fallback takes 256 pieces)" % args.vocab)
    check(args) if args.check else build(args)


if __name__ == "__main__":
    main()
