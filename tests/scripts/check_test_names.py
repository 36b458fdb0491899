"""Checks the Catch2 test case names under tests/: CTest discovers each case by name (catch_discover_tests), and
CMake splits a name at ';' (its list separator) into two tests that match nothing, which fail on the machines that
run them (the GPU cases only on a GPU). A name must also be unique, and must not start or end with a space.
Usage: check_test_names.py REPO_ROOT | --self-test. Exit status 1 naming each bad case."""
import pathlib
import re
import sys

CASE = re.compile(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def problems(files):
    """files: (path, text) pairs; returns one line per bad name."""
    out, seen = [], {}
    for path, text in files:
        for m in CASE.finditer(text):
            name = "".join(LITERAL.findall(m.group(1)))  # adjacent literals are one name
            line = text.count("\n", 0, m.start()) + 1
            where = f"{path}:{line}"
            if ";" in name:
                out.append(f"{where}: test case name has ';' (CMake splits it in two): {name!r}")
            if name != name.strip():
                out.append(f"{where}: test case name starts or ends with a space: {name!r}")
            if name in seen:
                out.append(f"{where}: test case name already used at {seen[name]}: {name!r}")
            seen.setdefault(name, where)
    return out


def self_test():
    bad = problems([("a.cpp", 'TEST_CASE("x; y", "[t]") {}\nTEST_CASE(" lead", "[t]") {}\n'),
                    ("b.cpp", 'TEST_CASE("ok, fine", "[t]") {}\nTEST_CASE("ok, fine", "[t]") {}\n')])
    assert len(bad) == 3 and "';'" in bad[0] and "space" in bad[1] and "already used at b.cpp:1" in bad[2], bad
    assert problems([("c.cpp", 'TEST_CASE("a \\"quoted\\" name", "[t]") {}\n')]) == []
    assert problems([("d.cpp", 'TEST_CASE("split over "\n          "two literals", "[t]") {}\n')]) == []
    assert "';'" in problems([("e.cpp", 'TEST_CASE("split; over "\n "two", "[t]") {}\n')])[0]
    print("check_test_names: self-test ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1]) / "tests"
    files = [(str(p.relative_to(root.parent)), p.read_text(encoding="utf-8")) for p in sorted(root.rglob("*.cpp"))]
    bad = problems(files)
    for line in bad:
        print(line)
    count = sum(len(CASE.findall(t)) for _, t in files)
    print(f"check_test_names: {count} test cases in {len(files)} files, {len(bad)} problem(s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
