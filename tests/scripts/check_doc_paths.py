#!/usr/bin/env python3
"""Every repository path the user's and the developer's documents cite exists.

    python3 tests/scripts/check_doc_paths.py [ROOT]     # ROOT: the repository (default: this file's ../..)
    python3 tests/scripts/check_doc_paths.py --self-test

Reads README.md and docs/*.md. A citation is a `code span` or a Markdown link target that looks like a path
of the repository: it starts with one of the repository's top-level folders (core/, ops/, tests/, ...) or
is a top-level file (CMakeLists.txt, halfgrad.h). A span may name several paths ("cpu/gemm.*" matches
any extension; "ops/kernels/<family>.h" with <...> stands for a pattern and is left alone; a trailing
":123" or "#anchor" is dropped). A folder must exist as a folder, a file as a file. A Markdown link to an anchor
(`[x](#section)`, `[x](docs/AMP.md#section)`) must name a heading of that page, as GitHub makes the anchor: the
heading lowercased, punctuation other than '-' and '_' dropped, spaces made '-'."""
import glob
import os
import re
import sys

CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
TOKEN = re.compile(r"[A-Za-z0-9_.*/{},+-]+")


def top_level(root):
    names = set()
    for n in os.listdir(root):
        if n.startswith(".") or n.startswith("build"):
            continue
        names.add(n + "/" if os.path.isdir(os.path.join(root, n)) else n)
    return names


FILE_NAME = re.compile(r"^[A-Za-z0-9_*-]+\.(h|cpp|cu|py|sh|md|json)$")


def candidates(text, tops):
    """(path, line) pairs: the tokens of code spans and link targets that start with a top-level name, and
    in a table row whose first cell is a folder (`core/`), the bare file names of its other cells."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        folder = re.fullmatch(r"`([A-Za-z0-9_/]+/)`", cells[0]) if cells else None
        if folder and folder.group(1).split("/")[0] + "/" in tops:
            for cell in cells[1:]:
                for m in CODE.finditer(cell):
                    for tok in TOKEN.findall(m.group(1)):
                        if FILE_NAME.match(tok):
                            out.append((folder.group(1) + tok, lineno))
        spans = [m.group(1) for m in CODE.finditer(line)] + [m.group(1) for m in LINK.finditer(line)]
        for span in spans:
            if "<" in span or "://" in span:
                continue
            for tok in TOKEN.findall(span):
                tok = tok.split("#")[0].rstrip(".,")
                tok = re.sub(r":\d+(-\d+)?$", "", tok)
                while tok.startswith("../"):
                    tok = tok[3:]
                if not tok or tok.startswith("/"):
                    continue
                head = tok.split("/")[0] + ("/" if "/" in tok else "")
                if head in tops and (tok in tops or "/" in tok):
                    out.append((tok, lineno))
    return out


def expand(path):
    """a/{b,c}.h -> [a/b.h, a/c.h] (shell brace expansion, one level at a time)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [q for alt in m.group(1).split(",") for q in expand(path[:m.start()] + alt + path[m.end():])]


def exists(root, path):
    if "{" in path:
        return all(exists(root, p) for p in expand(path))
    full = os.path.join(root, path)
    if "*" in path:
        return bool(glob.glob(full))
    if path.endswith("/"):
        return os.path.isdir(full)
    return os.path.exists(full)


HEADING = re.compile(r"^#{1,6} +(.+?) *#*$")
ANCHOR_LINK = re.compile(r"\]\(([^)\s#]*\.md|)#([^)\s]+)\)")


def anchors(text):
    """The anchors of a page's headings (outside fenced code), GitHub's way; a repeated one gets -1, -2, ..."""
    seen, out, fenced = {}, set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link in a heading keeps its text
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def anchor_problems(root, doc, text):
    problems = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in ANCHOR_LINK.finditer(line):
            target = os.path.normpath(os.path.join(os.path.dirname(doc), m.group(1))) if m.group(1) else doc
            if not os.path.exists(target):
                continue  # a missing page is the path check's to report
            if m.group(2) not in anchors(open(target, encoding="utf-8").read()):
                problems.append(f"{os.path.relpath(doc, root)}:{lineno} links to #{m.group(2)} in "
                                f"{os.path.relpath(target, root)}, which has no such heading")
    return problems


def check(root):
    tops = top_level(root)
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    problems, cited = [], 0
    for doc in docs:
        if not os.path.exists(doc):
            continue
        rel = os.path.relpath(doc, root)
        base = os.path.dirname(rel)
        text = open(doc, encoding="utf-8").read()
        for path, lineno in candidates(text, tops):
            cited += 1
            # a link in docs/ is relative to docs/ (../core/x.h was stripped to core/x.h above)
            if not exists(root, path) and not (base and exists(root, os.path.join(base, path))):
                problems.append(f"{rel}:{lineno} cites `{path}`, which does not exist")
        problems += anchor_problems(root, doc, text)
    for p in problems:
        print("check_doc_paths: " + p)
    print(f"check_doc_paths: {len(docs)} documents, {cited} path citations, {len(problems)} problem(s)")
    return not problems


def self_test():
    import shutil
    import tempfile
    tmp = tempfile.mkdtemp()
    try:
        os.makedirs(os.path.join(tmp, "core"))
        os.makedirs(os.path.join(tmp, "docs"))
        open(os.path.join(tmp, "core", "a.h"), "w").write("")
        open(os.path.join(tmp, "core", "a.cpp"), "w").write("")
        open(os.path.join(tmp, "README.md"), "w").write("`core/a.h`, `core/a.*`, [x](core/a.cpp), `core/<x>.h`, "
                                                        "`core/a.{h,cpp}`\n")
        open(os.path.join(tmp, "docs", "ARCHITECTURE.md"), "w").write("[a](../core/a.h:3), `core/`\n")
        ok = check(tmp)
        open(os.path.join(tmp, "docs", "ARCHITECTURE.md"), "w").write("`core/gone.h`\n")
        missing_caught = not check(tmp)
        open(os.path.join(tmp, "docs", "ARCHITECTURE.md"), "w").write("`core/a.h/`\n")
        folder_caught = not check(tmp)
        open(os.path.join(tmp, "docs", "ARCHITECTURE.md"), "w").write("`core/a.{h,hpp}`\n")
        folder_caught = folder_caught and not check(tmp)
        open(os.path.join(tmp, "docs", "ARCHITECTURE.md"), "w").write("| `core/` | `a.h` (x), `b.h` |\n")
        missing_caught = missing_caught and not check(tmp)
        open(os.path.join(tmp, "docs", "ARCHITECTURE.md"), "w").write("## 2. Why F16 underflows\n[a](#2-why-f16-underflows)"
                                                                      " [b](../README.md)\n")
        ok = ok and check(tmp)
        open(os.path.join(tmp, "docs", "ARCHITECTURE.md"), "w").write("## Threads\n[a](#cpus-and-threads)\n")
        missing_caught = missing_caught and not check(tmp)
    finally:
        shutil.rmtree(tmp)
    if not (ok and missing_caught and folder_caught):
        print(f"check_doc_paths self-test FAILED: clean passed={ok}, missing caught={missing_caught}, "
              f"file-as-folder caught={folder_caught}")
        return False
    print("check_doc_paths self-test: existing paths and anchors pass; a missing file, a file cited as a folder and a "
          "link to a missing heading fail")
    return True


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(0 if self_test() else 1)
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    sys.exit(0 if check(os.path.normpath(root)) else 1)
