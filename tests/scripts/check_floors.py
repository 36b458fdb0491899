#!/usr/bin/env python3
"""No include runs upward: every #include "..." of a library file names a header on its own floor or a
lower one, in the floor order of docs/ARCHITECTURE.md's "Floors" table (read from the document itself,
so the table and this check cannot drift apart).

    python3 tests/scripts/check_floors.py [ROOT]     # ROOT: the repository (default: this file's ../..)
    python3 tests/scripts/check_floors.py --self-test

Also fails when a table row names a path that does not exist, or a library file is on no floor.
Tests, examples and benchmarks are the library's users and may include anything.

And no source file (library, tests, examples, benchmarks, scripts) cites a document outside the repository:
every `name.md` it mentions must be a file of the repository, and the research notes the project
started from (cuda-notes, cpu-notes, amp-anchors) are not."""
import os
import re
import shutil
import sys
import tempfile

LIBRARY = ("core", "autograd", "ops", "cpu", "nn", "optim", "amp", "cuda", "data", "halfgrad.h")
SOURCE = re.compile(r"\.(h|cpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
CITED_DOC = re.compile(r"([A-Za-z0-9_./-]+\.md)\b")
# the research notes, and the design document the project started from cited by name and section ("DESIGN §2")
OUTSIDE_NOTES = re.compile(r"\b(cuda-notes|cpu-notes|amp-anchors|DESIGN(?=\s*§|\s+section|\b))")
CITING = ("core", "autograd", "ops", "cpu", "nn", "optim", "amp", "cuda", "data", "halfgrad.h", "tests", "examples",
          "benchmarks", "scripts", "CMakeLists.txt", ".ci")
CITING_SOURCE = re.compile(r"(\.(h|cpp|cu|cuh|sh|py|txt|cmake)|/run)$")


def check_citations(root):
    """Problems: documents cited by source files that the repository does not have."""
    docs = set()
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and not d.startswith("build")]
        docs.update(n for n in names if n.endswith(".md"))
    problems = []
    for top in CITING:
        full = os.path.join(root, top)
        paths = [full] if os.path.isfile(full) else [os.path.join(d, n) for d, _, ns in os.walk(full) for n in ns]
        for path in paths:
            if not CITING_SOURCE.search(path) and os.path.basename(path) != "CMakeLists.txt":
                continue
            rel = os.path.relpath(path, root)
            if rel == os.path.join("tests", "scripts", "check_floors.py"):
                continue  # names them to look for them
            with open(path, encoding="utf-8", errors="replace") as src:
                for lineno, line in enumerate(src, 1):
                    for m in CITED_DOC.finditer(line):
                        if os.path.basename(m.group(1)) not in docs:
                            problems.append(f"{rel}:{lineno} cites {m.group(1)}, which is not in the repository")
                    m = OUTSIDE_NOTES.search(line)
                    if m:
                        problems.append(f"{rel}:{lineno} cites {m.group(1)}, notes that are not in the repository")
    return problems


# What the user's one include (halfgrad.h) may not pull in, directly or through other headers: the backend
# contract (ops/kernels/ and the elementwise descriptors both backends read, ops/ew.h) and the backends,
# except the CUDA facade headers.
UMBRELLA = "halfgrad.h"
BACKEND_ONLY = ("ops/kernels/", "ops/ew.h", "cpu/", "cuda/")
FACADE = ("cuda/available.h", "cuda/graph.h", "cuda/counters.h")


def check_umbrella(root):
    """Problems: backend headers that halfgrad.h includes, with the chain that reaches each."""
    if not os.path.exists(os.path.join(root, UMBRELLA)):
        return []
    seen, queue, problems = {UMBRELLA: None}, [UMBRELLA], []
    while queue:
        h = queue.pop(0)
        with open(os.path.join(root, h), encoding="utf-8", errors="replace") as src:
            for line in src:
                m = INCLUDE.match(line)
                if not m or m.group(1) in seen or not os.path.exists(os.path.join(root, m.group(1))):
                    continue
                seen[m.group(1)] = h
                queue.append(m.group(1))
    for h in seen:
        if h.startswith(BACKEND_ONLY) and h not in FACADE:
            chain, at = [], h
            while at is not None:
                chain.append(at)
                at = seen[at]
            problems.append(f"{UMBRELLA} pulls in the backend header {h} ({' <- '.join(chain)}); keep the "
                            f"contract and the backends out of the user's headers")
    return problems


def read_floors(root):
    """[(number, name, [path prefixes])] from the table under '## Floors'."""
    text = open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    m = re.search(r"^## Floors\b.*?$(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        sys.exit("check_floors: docs/ARCHITECTURE.md has no '## Floors' section")
    floors = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        paths = re.findall(r"`([^`]+)`", cells[2])
        if not paths:
            sys.exit(f"check_floors: floor {cells[0]} ({cells[1]}) lists no `path`")
        floors.append((int(cells[0]), cells[1], paths))
    if not floors:
        sys.exit("check_floors: the Floors section has no table rows '| n | name | `paths` | ...'")
    numbers = [f[0] for f in floors]
    if numbers != sorted(numbers) or len(set(numbers)) != len(numbers):
        sys.exit(f"check_floors: floor numbers must increase down the table, got {numbers}")
    return floors


def floor_of(path, floors):
    """The floor whose path is the longest prefix of `path` (a folder ends with '/'), or None."""
    best = None
    for number, name, paths in floors:
        for p in paths:
            if path == p or (p.endswith("/") and path.startswith(p)):
                if best is None or len(p) > best[0]:
                    best = (len(p), number, name)
    return None if best is None else best[1:]


def check(root):
    floors = read_floors(root)
    problems = []
    for _, name, paths in floors:
        for p in paths:
            if not os.path.exists(os.path.join(root, p)):
                problems.append(f"the Floors table names `{p}` (floor {name}), which does not exist")
    files = []
    for top in LIBRARY:
        full = os.path.join(root, top)
        if os.path.isfile(full):
            files.append(top)
            continue
        for dirpath, _, names in os.walk(full):
            for n in names:
                if SOURCE.search(n):
                    files.append(os.path.relpath(os.path.join(dirpath, n), root))
    upward = 0
    for f in sorted(files):
        mine = floor_of(f, floors)
        if mine is None:
            problems.append(f"{f} is on no floor: add its folder to the Floors table")
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as src:
            for lineno, line in enumerate(src, 1):
                m = INCLUDE.match(line)
                if not m or m.group(1).split("/")[0] not in LIBRARY:
                    continue
                theirs = floor_of(m.group(1), floors)
                if theirs is None:
                    problems.append(f"{f}:{lineno} includes {m.group(1)}, which is on no floor")
                elif theirs[0] > mine[0]:
                    upward += 1
                    problems.append(f"{f}:{lineno} (floor {mine[0]}, {mine[1]}) includes {m.group(1)} "
                                    f"(floor {theirs[0]}, {theirs[1]}): an upward include")
    cited = check_citations(root)
    problems += cited
    leaks = check_umbrella(root)
    problems += leaks
    for p in problems:
        print("check_floors:", p)
    print(f"check_floors: {len(files)} library files on {len(floors)} floors, {upward} upward include(s), "
          f"{len(cited)} citation(s) of documents outside the repository, {len(leaks)} backend header(s) under "
          f"{UMBRELLA}, {len(problems)} problem(s)")
    return not problems


def self_test():
    """A tree with one upward include and one file on no floor must fail; without them it must pass."""
    tmp = tempfile.mkdtemp()
    try:
        os.makedirs(os.path.join(tmp, "docs"))
        with open(os.path.join(tmp, "docs", "ARCHITECTURE.md"), "w") as d:
            d.write("# x\n## Floors\n| floor | name | paths |\n|---|---|---|\n"
                    "| 1 | core | `core/` |\n| 2 | ops | `ops/` |\n## Next\n")
        for rel, body in (("core/a.h", '#include "core/b.h"\n'), ("core/b.h", ""),
                          ("ops/c.h", '#include "core/a.h"\n')):
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            open(os.path.join(tmp, rel), "w").write(body)
        ok = check(tmp)
        with open(os.path.join(tmp, "core", "b.h"), "w") as b:
            b.write('#include "ops/c.h"\n')
        upward_caught = not check(tmp)
        os.makedirs(os.path.join(tmp, "nn"))
        open(os.path.join(tmp, "nn", "d.h"), "w").write("")
        open(os.path.join(tmp, "core", "b.h"), "w").write("")
        unmapped_caught = not check(tmp)
        os.remove(os.path.join(tmp, "nn", "d.h"))
        open(os.path.join(tmp, "core", "b.h"), "w").write("// as DESIGN.md says\n")
        citation_caught = not check(tmp)
        open(os.path.join(tmp, "core", "b.h"), "w").write("// accumulate in F32 (DESIGN \u00a72)\n")
        citation_caught = citation_caught and not check(tmp)
        open(os.path.join(tmp, "core", "b.h"), "w").write("")
        os.makedirs(os.path.join(tmp, "ops", "kernels"))
        open(os.path.join(tmp, "ops", "kernels", "k.h"), "w").write("")
        open(os.path.join(tmp, "ops", "c.h"), "w").write('#include "ops/kernels/k.h"\n')
        open(os.path.join(tmp, "halfgrad.h"), "w").write('#include "core/a.h"\n')
        umbrella_caught = not check_umbrella(tmp)  # core/a.h -> core/b.h: no backend header
        open(os.path.join(tmp, "halfgrad.h"), "w").write('#include "ops/c.h"\n')
        umbrella_caught = umbrella_caught and len(check_umbrella(tmp)) == 1
    finally:
        shutil.rmtree(tmp)
    if not (ok and upward_caught and unmapped_caught and citation_caught and umbrella_caught):
        print(f"check_floors self-test FAILED: clean tree passed={ok}, upward include caught={upward_caught}, "
              f"unmapped file caught={unmapped_caught}, outside citation caught={citation_caught}, "
              f"backend header under halfgrad.h caught={umbrella_caught}")
        return False
    print("check_floors self-test: a clean tree passes; an upward include, an unmapped file, a citation "
          "of a document outside the repository and a backend header under halfgrad.h fail")
    return True


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(0 if self_test() else 1)
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    sys.exit(0 if check(os.path.normpath(root)) else 1)
