"""The source tree's shape, checked (tests/structure.sh; docs/ARCHITECTURE.md).

1. Every strategy of the registry (src/strategies.def) is named in
   docs/DISTRIBUTED.md and docs/ARCHITECTURE.md, every codec
   (src/codecs.def) in docs/COMPRESSION.md and docs/ARCHITECTURE.md:
   a new one is documented where a reader looks.
2. No function outside the kernels (src/cpu/, src/gpu/) is over 100 lines:
   a long function is split into its named steps.
3. The model's internals (src/model/model_impl.h) are private to src/model/:
   no other file reaches them, directly or through the headers it includes.
   Strategies see the model through the io structs of the attention and
   layer seams (src/cp/strategy.h), codecs through the stage
   boundary's (src/boundary/boundary.h), which src/model/ fills.
4. No strategy is told apart by its table's address (`cp == &ts_cp_...`):
   variants of one strategy carry their differences as data (`opts`).
5. The folders of src/ are layers: no two include each other's headers,
   directly or around a cycle (the files at the top, tessera.h and the two
   registries, are the public API every layer may include).

usage: python3 tests/structure.py SRCDIR
"""
import glob
import os
import re
import sys

MAX_LINES = 100
KERNEL_DIRS = ("src/cpu/", "src/gpu/")
MODEL_IMPL = "src/model/model_impl.h"

def strip_c(text):
    """text with comments, strings and character literals emptied (newlines kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


def long_functions(path):
    """(name, first line, lines) of each top-level function body over MAX_LINES."""
    lines = strip_c(open(path, encoding="utf-8").read()).split("\n")
    out, depth, start = [], 0, None
    for i, line in enumerate(lines):
        if depth == 0 and "{" in line and start is None:
            head = " ".join(lines[max(0, i - 3) : i + 1])
            # a function's body: after a parameter list, not an initialiser or a type
            if ")" in head and "=" not in line and not re.match(
                r"\s*(typedef|struct|enum|union|static const|const)\b", line
            ):
                start = i
        depth += line.count("{") - line.count("}")
        if depth == 0 and start is not None:
            if i - start + 1 > MAX_LINES:
                decl = start  # the declaration's first line: the one at column 0
                while decl > 0 and lines[decl][:1] in (" ", "\t", ")"):
                    decl -= 1
                m = re.search(r"(\w+)\s*\(", lines[decl])
                name = m.group(1) if m else "?"
                out.append((name, start + 1, i - start + 1))
            start = None
    return out


def quoted_includes(path):
    """The files a source includes with quotes, resolved as the build does (its folder, then src/)."""
    out = []
    for name in re.findall(r'^#\s*include\s*"([^"]+)"', open(path, encoding="utf-8").read(), flags=re.M):
        for cand in (os.path.join(os.path.dirname(path), name), os.path.join("src", name)):
            if os.path.exists(cand):
                out.append(os.path.normpath(cand))
                break
    return out


def closure(path, includes):
    """Every file path includes, directly or through another."""
    seen, todo = set(), [path]
    while todo:
        for g in includes.get(todo.pop(), []):
            if g not in seen:
                seen.add(g)
                todo.append(g)
    return seen


def folder_of(path):
    """The layer a source belongs to: its folder under src/ ("api" for the files at the top)."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else "api"


def folder_cycles(includes):
    """The groups of folders that include each other in a cycle (Tarjan's components of
    more than one folder), each with the includes that close it."""
    edges = {}
    for path, incs in includes.items():
        for g in incs:
            a, b = folder_of(path), folder_of(g)
            if a != b:
                edges.setdefault(a, {}).setdefault(b, f"{path} includes {g}")
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(comp)

    for v in sorted({folder_of(p) for p in includes}):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:
        if len(comp) > 1:
            why = [edges[a][b] for a in sorted(comp) for b in sorted(edges.get(a, {})) if b in comp]
            out.append((sorted(comp), why))
    return out


def registry_names(path, macro):
    return re.findall(r"^" + macro + r"\(\w+,\s*\"([^\"]+)\"", open(path).read(), flags=re.M)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "."
    os.chdir(src)
    failures, checked = [], 0

    # each registry, and the pages that must name every entry of it
    registries = [
        ("src/strategies.def", "TS_CP", ("docs/DISTRIBUTED.md", "docs/ARCHITECTURE.md")),
        ("src/codecs.def", "TS_BOUNDARY", ("docs/COMPRESSION.md", "docs/ARCHITECTURE.md")),
    ]
    nnames = 0
    for registry, macro, pages in registries:
        names = registry_names(registry, macro)
        nnames += len(names)
        if len(names) < 2:
            failures.append(f"{registry}: no entries found: the pattern is out of date")
        for page in pages:
            text = open(page, encoding="utf-8").read()
            for name in names:
                checked += 1
                # the name as a word of its own ("ring" inside "ring-zigzag" does not count)
                if not re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", text):
                    failures.append(f"{page} does not name '{name}' of {registry}")

    files = sorted(
        glob.glob("src/**/*.c", recursive=True)
        + glob.glob("src/**/*.cc", recursive=True)
        + glob.glob("src/**/*.cu", recursive=True)
    )
    for path in files:
        if path.startswith(KERNEL_DIRS):
            continue
        checked += 1
        for name, first, n in long_functions(path):
            failures.append(f"{path}:{first}: {name} is {n} lines (at most {MAX_LINES}: split it into its steps)")

    sources = sorted(glob.glob("src/**/*.[ch]", recursive=True) + glob.glob("src/**/*.c[cu]", recursive=True))
    includes = {path: quoted_includes(path) for path in sources}
    for path in sources:
        if path.startswith("src/model/"):
            continue
        checked += 1
        if MODEL_IMPL in closure(path, includes):
            via = [g for g in includes[path] if g == MODEL_IMPL or MODEL_IMPL in closure(g, includes)]
            failures.append(f"{path} reaches {MODEL_IMPL} (through {', '.join(via)}): "
                            "reach the model through a seam's io struct")

    # the folders are layers: none includes a header of a folder that includes its own
    checked += 1
    for comp, why in folder_cycles(includes):
        failures.append(f"folders {', '.join(comp)} include each other: {'; '.join(why[:4])}")

    # nor does a test, a benchmark or a tool
    for path in sorted(glob.glob("tests/**/*.[ch]", recursive=True) + glob.glob("bench/**/*.[ch]", recursive=True)
                       + glob.glob("tools/**/*.[ch]", recursive=True)):
        checked += 1
        if re.search(r'#\s*include\s*"[^"]*model_impl\.h"', open(path, encoding="utf-8").read()):
            failures.append(f"{path} includes {MODEL_IMPL}: use the public API (tessera.h) or a seam's io")

    # variants as data: a comparison with a strategy table's address
    for path in sources:
        checked += 1
        for n, line in enumerate(strip_c(open(path, encoding="utf-8").read()).split("\n"), 1):
            if re.search(r"[!=]=\s*&ts_cp_\w+|&ts_cp_\w+\s*[!=]=", line):
                failures.append(f"{path}:{n}: a strategy told apart by its table's address: "
                                "give the variants `opts`")

    for f in failures:
        print("FAIL:", f)
    print(f"{checked} checks, {len(failures)} failed; {nnames} registry names")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
