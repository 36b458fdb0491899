#!/usr/bin/env python3
"""Code the documents print is code a test compiles and runs.

    python3 tests/scripts/check_doc_snippets.py [ROOT]     # ROOT: the repository (default: this file's ../..)

A test marks the lines a document prints with `// <doc path> snippet begin` and `// <doc path> snippet end`
(for example `// docs/AMP.md snippet begin`). Those lines, their common indentation removed and trailing
blanks ignored, must appear in that document as consecutive lines, so a snippet edited in one place and not
the other fails here. Exits 1 naming each snippet that is missing, 0 otherwise (and says how many matched)."""
import glob
import os
import re
import sys

BEGIN = re.compile(r"^\s*// (\S+\.md) snippet begin\s*$")
END = re.compile(r"^\s*// (\S+\.md) snippet end\s*$")


def dedent(lines):
    body = [l for l in lines if l.strip()]
    pad = min((len(l) - len(l.lstrip(" ")) for l in body), default=0)
    return [l[pad:].rstrip() for l in lines]


def snippets(path):
    out, doc, buf, start = [], None, [], 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if doc is None:
                m = BEGIN.match(line)
                if m:
                    doc, buf, start = m.group(1), [], n
            elif END.match(line):
                out.append((doc, start, dedent(buf)))
                doc = None
            else:
                buf.append(line)
    if doc is not None:
        out.append((doc, start, None))  # never closed
    return out


def main(root):
    problems, found = [], 0
    for path in sorted(glob.glob(os.path.join(root, "tests", "**", "*.cpp"), recursive=True)):
        for doc, line, body in snippets(path):
            found += 1
            where = f"{os.path.relpath(path, root)}:{line}"
            if body is None:
                problems.append(f"{where}: the snippet for {doc} has no end marker")
                continue
            doc_path = os.path.join(root, doc)
            if not os.path.isfile(doc_path):
                problems.append(f"{where}: {doc} does not exist")
                continue
            with open(doc_path, encoding="utf-8") as f:
                text = [l.rstrip() for l in f.read().split("\n")]
            n = len(body)
            if not any(text[i:i + n] == body for i in range(len(text) - n + 1)):
                problems.append(f"{where}: its {n} lines do not appear together in {doc}; the first is: {body[0]!r}")
    for p in problems:
        print(p)
    print(f"check_doc_snippets: {found} snippet(s), {len(problems)} problem(s)")
    return 1 if problems or found == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")))
