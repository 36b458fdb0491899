#!/usr/bin/env python3
"""Every C++ block of README.md and the user's pages in docs/ (AMP, API, BUILD, PERFORMANCE) compiles against the current headers.

    python3 tests/scripts/check_doc_code.py ROOT CXX     # CXX: the C++ compiler (CTest `doc_code` passes CMake's)
    python3 tests/scripts/check_doc_code.py --self-test
    python3 tests/scripts/check_doc_code.py --extract DOC PREFIX   # prints the program whose introducing line
                                                                   # starts with PREFIX (scripts/make_figures.sh runs it)

A block (a ```cpp fence) is a complete program (it has `int main`) and is compiled alone, or it says on the line
before its fence what it is:

    <!-- doc-code: fragment(nn::Sequential& model, Tensor x) -->   statements: the body of a function taking these
    <!-- doc-code: namespace -->                                     declarations at namespace scope (a class)

Fragments and namespace blocks of one document are compiled together in one file that includes <halfgrad.h>
and says `using namespace hg;`. Syntax and types only (-fsyntax-only): nothing is linked or run. Exits 1 naming
each block that does not compile (with the compiler's first errors) or that is partial and does not say so.
"""
import os
import re
import subprocess
import sys
import tempfile

DOCS = ["README.md", os.path.join("docs", "AMP.md"), os.path.join("docs", "API.md"), os.path.join("docs", "BUILD.md"),
        os.path.join("docs", "PERFORMANCE.md")]
MARK = re.compile(r"^<!-- doc-code: (fragment\((.*)\)|namespace) -->$")
PRELUDE = "#include <halfgrad.h>\n#include <iostream>\n#include <memory>\n#include <string>\n#include <vector>\nusing namespace hg;\n"


def blocks(text):
    """[(first line number, kind, params, code)]: kind is 'program', 'fragment', 'namespace' or 'unmarked'."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```cpp":
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            code = "\n".join(lines[i + 1:j])
            mark = MARK.match(lines[i - 1].strip()) if i > 0 else None
            if mark:
                kind, params = ("namespace", "") if mark.group(1) == "namespace" else ("fragment", mark.group(2))
            else:
                kind, params = ("program" if re.search(r"\bint main\s*\(", code) else "unmarked"), ""
            out.append((i + 1, kind, params, code))
            i = j
        i += 1
    return out


def sources(doc, text):
    """[(what, source)] to compile for one document, and problems (unmarked partial blocks)."""
    units, problems, joint = [], [], []
    for n, (line, kind, params, code) in enumerate(blocks(text)):
        where = f"{doc}:{line}"
        if kind == "unmarked":
            problems.append(f"{where}: a partial block (no int main) must say what it is on the line before its "
                            "fence: <!-- doc-code: fragment(DECLS) --> or <!-- doc-code: namespace -->")
        elif kind == "program":
            units.append((where, f'#line {line + 1} "{doc}"\n{code}\n'))
        elif kind == "namespace":
            joint.append(f'#line {line + 1} "{doc}"\n{code}\n')
        else:
            joint.append(f'void doc_block_{n}({params}) {{\n#line {line + 1} "{doc}"\n{code}\n}}\n')
    if joint:
        units.append((f"{doc}: fragments", PRELUDE + "\n".join(joint)))
    return units, problems


def extract(text, prefix):
    """The code of the first complete program whose nearest non-blank line before its fence starts with prefix."""
    lines = text.split("\n")
    for line, kind, _, code in blocks(text):
        before = next((l for l in reversed(lines[:line - 1]) if l.strip()), "")
        if kind == "program" and before.startswith(prefix):
            return code
    raise SystemExit(f"check_doc_code: no program introduced by a line starting {prefix!r}")


def compile_unit(cxx, root, src):
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as f:
        f.write(src)
        path = f.name
    try:
        r = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-I", root, path], capture_output=True, text=True)
        return r.returncode, r.stderr
    finally:
        os.unlink(path)


def self_test():
    text = ("a\n```cpp\nint main() {}\n```\n<!-- doc-code: fragment(Tensor x) -->\n```cpp\nx.sum();\n```\n"
            "<!-- doc-code: namespace -->\n```cpp\nstruct S {};\n```\n```cpp\nfoo();\n```\n")
    kinds = [(k, p) for _, k, p, _ in blocks(text)]
    assert kinds == [("program", ""), ("fragment", "Tensor x"), ("namespace", ""), ("unmarked", "")], kinds
    units, problems = sources("page", text)
    assert len(units) == 2 and len(problems) == 1 and "page:13" in problems[0], (units, problems)
    assert "void doc_block_1(Tensor x) {" in units[1][1] and "struct S {};" in units[1][1]
    assert extract("x\nA program:\n\n```cpp\nint main() { return 1; }\n```\n", "A program") == "int main() { return 1; }"
    print("check_doc_code: self-test passed")


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) == 4 and argv[1] == "--extract":
        return print(extract(open(argv[2], encoding="utf-8").read(), argv[3]))
    if len(argv) != 3:
        raise SystemExit(__doc__)
    root, cxx = argv[1], argv[2]
    problems, count = [], 0
    for doc in DOCS:
        units, found = sources(doc, open(os.path.join(root, doc), encoding="utf-8").read())
        problems += found
        count += sum(src.count("#line") for _, src in units)
        for what, src in units:
            rc, err = compile_unit(cxx, root, src)
            if rc != 0:
                problems.append(f"{what} does not compile:\n" + "\n".join(err.splitlines()[:12]))
    for p in problems:
        print("check_doc_code:", p)
    if problems:
        raise SystemExit(1)
    print(f"check_doc_code: {count} C++ blocks of {', '.join(DOCS)} compile")


if __name__ == "__main__":
    main(sys.argv)
