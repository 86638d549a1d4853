#!/usr/bin/env python3
"""Writes data/recall-T<seq>.txt: a synthetic long-range recall task.

The file is one stream of lines in groups of three, two definitions then a query:

    KDQ=2786       definition: a random key (capital letters) gets a random value
    AET=8721       another definition
    ?OKZ=4681      query: the value of a key defined between --near*T and --far*T
                   bytes earlier (by default T/2 to T)

Training samples windows at any byte offset, so the task cannot rely on
alignment. Instead every query looks back a distance chosen so that, inside a
window of T bytes, its definition is in view exactly when the query sits late
enough in the window. A query's value can then only be predicted by attending
from late in the window back across at least half of it; a model that only sees
the recent past must guess the 4 digits (ln 10 nats each).

Rules that keep the task well posed:
  * groups have a fixed length P in bytes, and the line rhythm never changes;
  * a key is never reused within about 2T bytes, so in any window a key is
    defined at most once and a query has a single answer;
  * each definition is asked for at most once (a second query would be a short
    cut: it repeats the answer closer by); half are never asked for;
  * the query of a group asks for a definition chosen uniformly among those not
    yet asked for whose look-back (its first byte to the query's last answer
    digit) lies in [near*T, far*T], never more than T.

The generator prints the numbers DATA.md quotes: the per-byte loss of an ideal
predictor that attends across the whole window, and of one that cannot see
the definitions (both estimated over random windows, as training samples them).

    python3 data/gen_recall.py                            # data/recall-T256.txt
    python3 data/gen_recall.py --seq 4096 --size 2000000  # data/recall-T4096.txt
"""
import argparse
import hashlib
import math
import os
import sys

from splitmix import SplitMix64  # data/splitmix.py, next to this script

DIGITS = 4  # value length
GROUP = 2   # definitions per query: half the definitions are never asked for


Rng = SplitMix64


class Layout:
    """Byte geometry of the stream for a context length T."""

    def __init__(self, T, near, far):
        self.T = T
        # Key length: the smallest (>= 2 letters) whose key space is at least 16x
        # the number of keys that must stay distinct (those of the last ~2T bytes).
        k = 2
        while True:
            P = GROUP * (k + DIGITS + 2) + (k + DIGITS + 3)  # GROUP x "K=V\n", "?K=V\n"
            excl = GROUP * (-(-2 * T // P) + 1)
            if 26 ** k >= 16 * excl:
                break
            k += 1
        self.k, self.P, self.excl = k, P, excl
        self.n_keys = 26 ** k
        self.def_len = k + DIGITS + 2
        self.q_off = GROUP * self.def_len           # the query line in a group
        self.ans_off = self.q_off + 1 + k + 1       # its first answer digit
        # Look-back range in bytes, from a definition's first byte to the last answer digit.
        self.lo = math.ceil(near * T)
        self.hi = math.floor(far * T)

    def def_start(self, d):
        return (d // GROUP) * self.P + (d % GROUP) * self.def_len

    def last_answer(self, g):
        return g * self.P + self.ans_off + DIGITS - 1

    def classify(self, pos):
        """What the byte at stream position pos is: (kind, group, definition index)."""
        g, off = divmod(pos, self.P)
        if off < self.q_off:
            i, o = divmod(off, self.def_len)
            d = g * GROUP + i
            if o < self.k:
                return "defkey", g, d
            if self.k < o < self.k + 1 + DIGITS:
                return "defval", g, d
            return "punct", g, d
        o = off - self.q_off
        if 1 <= o <= self.k:
            return "qkey", g, None
        if self.ans_off <= off < self.ans_off + DIGITS:
            return "answer", g, None
        return "punct", g, None

    def key_text(self, key):
        s = []
        for _ in range(self.k):
            s.append(chr(65 + key % 26))
            key //= 26
        return "".join(s)


def generate(lay, seed, size):
    """Returns (text, queries); queries[g] = (target definition, eligible definitions).

    Definitions are numbered in stream order, GROUP per group. The query of group g
    asks for a definition not asked for before (otherwise the earlier query would
    be a short cut) whose look-back is within [lo, hi] bytes, chosen uniformly.
    """
    rng = Rng(seed)
    n_groups = -(-size // lay.P)
    # Groups generated but not written, so the first written queries have targets.
    warm = -(-lay.hi // lay.P) + 1
    keys, values, queries = [], [], []
    recent = {}  # key -> index of its latest definition
    asked = set()
    first = 0  # oldest definition that can still be in range
    for g in range(warm + n_groups):
        for _ in range(GROUP):
            d = len(keys)
            while True:
                key = rng.below(lay.n_keys)
                last = recent.get(key)
                if last is None or d - last >= lay.excl:
                    break
            recent[key] = d
            keys.append(key)
            values.append(rng.below(10 ** DIGITS))
        end = lay.last_answer(g)
        while end - lay.def_start(first) > lay.hi:
            first += 1
        eligible = [d for d in range(first, len(keys))
                    if end - lay.def_start(d) >= lay.lo and d not in asked]
        if not eligible:
            if g < warm:
                queries.append((None, []))
                continue
            raise ValueError("no definition left to ask for: widen --near/--far")
        t = eligible[rng.below(len(eligible))]
        asked.add(t)
        queries.append((t, eligible))
    out = []
    for g in range(warm, warm + n_groups):
        for d in range(g * GROUP, (g + 1) * GROUP):
            out.append("%s=%0*d\n" % (lay.key_text(keys[d]), DIGITS, values[d]))
        t = queries[g][0]
        out.append("?%s=%0*d\n" % (lay.key_text(keys[t]), DIGITS, values[t]))
    # Renumber so that definition 0 is the first one written.
    base = warm * GROUP
    shifted = [(t - base, [d - base for d in el]) for t, el in queries[warm:]]
    return "".join(out), shifted


def ideal_losses(lay, queries, n_windows, seed):
    """Mean loss per target byte of two ideal predictors on random windows.

    A window is T+1 bytes [s, s+T]; byte s+t+1 is predicted from bytes s..s+t.
    Punctuation and the rhythm of the lines cost nothing once learned. A
    definition costs ln(keys it could still be) + 4 ln 10. With its definition in
    view, a query's key costs ln(number of definitions it could ask for) and its
    answer nothing; with the definition out of view the key costs more and the
    answer 4 ln 10. "blind" is the same predictor when no definition is ever in
    view (attention shorter than the look-back). Bytes of a line cut by the
    window start are charged as if the line were whole (a small approximation).
    Returns (recall, blind, fraction of queries answerable).
    """
    T, k = lay.T, lay.k
    rng = Rng(seed ^ 0x5EED)
    n_bytes = len(queries) * lay.P
    recall = blind = 0.0
    count = answerable = asked = 0
    for _ in range(n_windows):
        s = rng.below(n_bytes - T - 1)
        first_seen = -(-s // lay.P) * GROUP  # about the first definition in view
        for pos in range(s + 1, s + T + 1):
            kind, g, d = lay.classify(pos)
            if kind == "defkey":
                seen = min(max(0, d - first_seen), lay.excl)
                c = math.log(lay.n_keys - seen) / k
                recall += c
                blind += c
            elif kind == "defval":
                recall += math.log(10)
                blind += math.log(10)
            elif kind in ("qkey", "answer"):
                t, eligible = queries[g]
                in_view = lay.def_start(t) >= s
                if kind == "answer":
                    recall += 0.0 if in_view else math.log(10)
                    blind += math.log(10)
                    if pos == lay.last_answer(g):
                        asked += 1
                        answerable += in_view
                else:
                    others = lay.n_keys - max(0, (g + 1) * GROUP - first_seen)
                    n = len(eligible)
                    if in_view:
                        recall += math.log(n) / k
                    else:
                        v = sum(1 for e in eligible if lay.def_start(e) >= s)
                        recall += -math.log((n - v) / n / others) / k
                    blind += math.log(others) / k
            count += 1
    return recall / count, blind / count, answerable / max(1, asked)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=256, help="context length T the task is built for")
    ap.add_argument("--size", type=int, default=1000000, help="bytes (rounded up to whole pairs)")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--near", type=float, default=0.5,
                    help="shortest look-back, as a fraction of T")
    ap.add_argument("--far", type=float, default=1.0, help="longest look-back, as a fraction of T")
    ap.add_argument("--windows", type=int, default=None,
                    help="random windows for the loss estimate (default 2^19/T, 0 = skip)")
    ap.add_argument("--out", default=None, help="default: data/recall-T<seq>.txt")
    args = ap.parse_args()
    if args.seq < 64 or args.size <= 0 or not 0.0 <= args.near < args.far <= 1.0:
        ap.error("need --seq >= 64, --size > 0 and 0 <= --near < --far <= 1")
    lay = Layout(args.seq, args.near, args.far)
    if args.size < 4 * (args.seq + lay.P):
        ap.error("--size %d is too small for --seq %d" % (args.size, args.seq))
    out = args.out or os.path.join(here, "recall-T%d.txt" % args.seq)
    try:
        text, queries = generate(lay, args.seed, args.size)
    except ValueError as e:
        ap.error(str(e))
    data = text.encode("ascii")
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, out)  # no partial file under the real name
    print("%s: %d bytes, sha256 %s" % (out, len(data), hashlib.sha256(data).hexdigest()))
    sizes = [len(el) for _, el in queries]
    look = [lay.last_answer(g) - lay.def_start(t) for g, (t, _) in enumerate(queries)]
    print("T %d: groups of %d bytes (%d definitions, 1 query), %d-letter keys (%d),"
          " no key reused within %d definitions" % (args.seq, lay.P, GROUP, lay.k,
                                                   lay.n_keys, lay.excl))
    print("  look-back %d..%d bytes (mean %.1f); %d..%d definitions to choose from (mean %.2f)"
          % (min(look), max(look), sum(look) / len(look), min(sizes), max(sizes),
             sum(sizes) / len(sizes)))
    windows = args.windows if args.windows is not None else max(16, (1 << 19) // args.seq)
    if windows > 0:
        recall, blind, frac = ideal_losses(lay, queries, windows, args.seed)
        full = (GROUP * (math.log(lay.n_keys - lay.excl) + DIGITS * math.log(10))
                + sum(math.log(n) for n in sizes) / len(sizes)) / lay.P
        print("  ideal loss, nats/byte over random windows of T: %.3f attending across the"
              " window, %.3f without (%.1f%% of queries answerable)" % (recall, blind, 100 * frac))
        print("  with every definition in view (unbounded context): %.3f" % full)
    return 0


if __name__ == "__main__":
    sys.exit(main())
