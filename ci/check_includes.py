#!/usr/bin/env python3
"""Checks two contracts of the C++ layout (ci/test runs it; exit 1 on a breach):

1. The core's private headers (reference/src/*.h) and the binding's
   (reference/python/src/*.h) are included only inside their own folder:
   suites, fixtures, benchmarks and adopters reach the core through the
   public headers of reference/include/native_registry/.
2. Every project header a file of those two folders includes (#include
   "...") is used there: the including file names at least one of the
   things the header declares (a type, a function, a constant, a macro), or
   is the header's own .cpp. An include nothing uses is a contract the file
   no longer keeps.

A name-based check, not a compiler's: a header is "used" when one of its
declared names appears in the including file as a word. It errs towards
"used" (a common word declared by a header can hide an unused include), and
never towards a false alarm for code that compiles.

    python3 ci/check_includes.py [ROOT]
"""

from __future__ import annotations

import pathlib
import re
import sys

PRIVATE_FOLDERS = ("reference/src", "reference/python/src")
SOURCES = ("*.cpp", "*.h", "*.cc", "*.hpp")
SKIPPED = ("build", ".git", "subprojects", "results")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
DECLARED = [
    re.compile(r"\b(?:class|struct|union|enum(?:\s+class)?)\s+(\w+)"),
    re.compile(r"\busing\s+(\w+)\s*="),
    re.compile(r"^\s*#\s*define\s+(\w+)", re.M),
    # a function or variable declared at the start of a line: `T name(` / `T name =` /
    # `T name;` / `T name[] = ...`
    re.compile(r"^\s*(?:[\w:<>,*&\s]+?)[\s*&]+(\w+)\s*(?:\[[^\]]*\]\s*)?(?:\(|=|;|\{)", re.M),
]
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
KEYWORDS = {"return", "const", "static", "inline", "constexpr", "virtual", "explicit", "operator",
            "override", "noexcept", "if", "else", "for", "while", "switch", "case", "default",
            "namespace", "public", "private", "protected", "template", "typename", "void"}


def _code(text: str) -> str:
    return STRING.sub('""', COMMENT.sub("", text))


def declared_names(header: pathlib.Path) -> set[str]:
    code = _code(header.read_text())
    names = {m.group(1) for pattern in DECLARED for m in pattern.finditer(code)}
    return names - KEYWORDS


def files_under(root: pathlib.Path) -> list[pathlib.Path]:
    out = []
    for pattern in SOURCES:
        for path in root.rglob(pattern):
            rel = path.relative_to(root).parts
            if not any(part in SKIPPED or part.startswith("build") for part in rel):
                out.append(path)
    return sorted(out)


def check(root: pathlib.Path) -> list[str]:
    problems = []
    private = {folder: {h.name: h for h in (root / folder).glob("*.h")} for folder in PRIVATE_FOLDERS}
    for path in files_under(root):
        rel = path.relative_to(root).as_posix()
        home = next((f for f in PRIVATE_FOLDERS if rel.startswith(f + "/")), None)
        text = path.read_text(errors="replace")
        body = INCLUDE.sub("", _code(text))
        words = set(re.findall(r"\w+", body))
        for included in INCLUDE.findall(text):
            name = pathlib.PurePosixPath(included).name
            for folder, headers in private.items():
                if name in headers and included in (name, f"{folder}/{name}") and home != folder:
                    problems.append(f"{rel}: includes {folder}/{name}, a private header of "
                                    f"{folder}; use the public headers of "
                                    "reference/include/native_registry/")
            if home is None:
                continue
            header = private[home].get(name) if included == name else None
            if header is None or path.stem == header.stem:
                continue  # not a header of this folder, or the header's own .cpp
            if not declared_names(header) & words:
                problems.append(f"{rel}: includes \"{included}\" but uses nothing it declares")
    return problems


def main(argv: list[str]) -> int:
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[1])
    problems = check(root)
    for problem in problems:
        print(f"check_includes: {problem}")
    print(f"check_includes: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
