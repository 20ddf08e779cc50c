"""ci/check_includes.py: private headers stay in their folder; every project
header a core or binding file includes is used there."""

from __future__ import annotations

import pathlib

from ci import check_includes

ROOT = pathlib.Path(__file__).resolve().parents[2]


def tree(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


HEADER = "#pragma once\nnamespace x {\nstruct Router { int id; };\nvoid remove_router(int key);\n}\n"


def test_a_used_include_and_a_headers_own_cpp_pass(tmp_path):
    root = tree(tmp_path, {
        "reference/src/router.h": HEADER,
        "reference/src/router.cpp": '#include "router.h"\nint unrelated;\n',
        "reference/src/install.cpp": '#include "router.h"\nvoid f() { x::remove_router(1); }\n',
    })
    assert check_includes.check(root) == []


def test_an_include_nothing_uses_is_reported(tmp_path):
    root = tree(tmp_path, {
        "reference/src/router.h": HEADER,
        # the header's names only in a comment and a string: not a use
        "reference/src/native_op.cpp": ('#include "router.h"\n// Router\n'
                                        'const char* s = "remove_router";\n'),
    })
    assert check_includes.check(root) == [
        'reference/src/native_op.cpp: includes "router.h" but uses nothing it declares']


def test_a_private_header_included_outside_its_folder_is_reported(tmp_path):
    root = tree(tmp_path, {
        "reference/src/router.h": HEADER,
        "reference/bench/bench.cpp": '#include "router.h"\nx::Router r;\n',
        "reference/python/src/binding.h": '#include "router.h"\nx::Router r;\n',
    })
    problems = check_includes.check(root)
    assert len(problems) == 2
    assert problems[0].startswith("reference/bench/bench.cpp: includes reference/src/router.h")
    assert problems[1].startswith("reference/python/src/binding.h: includes reference/src/router.h")


def test_the_repository_keeps_both_contracts():
    assert check_includes.check(ROOT) == []
