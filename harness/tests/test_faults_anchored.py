"""Every seeded fault applies to today's tree (fault_anchor places its `find`
once) and names a behaviour of the catalogue; and a refactor that moves or
re-wraps the code a fault names leaves the fault applying, to the same code."""

from __future__ import annotations

import pathlib
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

from harness.mutation import fault_anchor


def test_every_seeded_fault_applies_once_and_names_a_behaviour():
    faults = tomllib.loads((ROOT / "fixtures/faults/faults.toml").read_text())["fault"]
    behaviours = {b["id"] for b in
                  tomllib.loads((ROOT / "conformance/catalogue.toml").read_text())["behaviour"]}
    problems = []
    names = [f["name"] for f in faults]
    problems += [f"{n}: named twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for f in faults:
        try:
            anchor = fault_anchor.locate(f["file"], f["find"])
        except fault_anchor.AnchorError as e:
            problems.append(f"{f['name']}: {e}")
            continue
        text = (ROOT / anchor.file).read_text()
        if fault_anchor.apply(text, f["find"], f["replace"], anchor.verbatim) == text:
            problems.append(f"{f['name']}: applying it changes nothing")
        if f["breaks"] not in behaviours:
            problems.append(f"{f['name']}: breaks {f['breaks']!r}, not in the catalogue")
    assert problems == []


CORE = """\
void Registry::Impl::restore(const Snapshot& saved) {
  for (const auto& [key, router] : routers_) {
    if (stale(key)) remove_router(key);
  }
}
"""
FIND = "    if (stale(key)) remove_router(key);\n"
REPLACE = "    (void)key;  // FAULT\n"


def tree(tmp_path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_fault_applies_where_it_was_written(tmp_path):
    root = tree(tmp_path, {"reference/src/snapshot.cpp": CORE})
    anchor = fault_anchor.locate("reference/src/snapshot.cpp", FIND, root)
    assert anchor == fault_anchor.Anchor("reference/src/snapshot.cpp", True)
    out = fault_anchor.apply(CORE, FIND, REPLACE, anchor.verbatim)
    assert "(void)key;  // FAULT" in out and "remove_router" not in out


def test_a_fault_follows_its_code_to_another_file_reindented_and_rewrapped(tmp_path):
    moved = ("namespace tables {\nvoid RouterTable::restore(const Snapshot& saved) {\n"
             "    for (const auto& [key, router] : routers_) {\n"
             "        if (stale(key))\n            remove_router(key);\n    }\n}\n}\n")
    root = tree(tmp_path, {"reference/src/snapshot.cpp": "// moved to router_table.cpp\n",
                           "reference/src/tables/router_table.cpp": moved,
                           "reference/tests/test_core.cpp": "// if (stale(key)) remove_router(key);\n"})
    anchor = fault_anchor.locate("reference/src/snapshot.cpp", FIND, root)
    assert anchor == fault_anchor.Anchor("reference/src/tables/router_table.cpp", False)
    out = fault_anchor.apply(moved, FIND, REPLACE, anchor.verbatim)
    assert "remove_router" not in out and "(void)key;  // FAULT" in out
    assert out.startswith("namespace tables {") and out.endswith("    }\n}\n}\n")


def test_python_is_matched_as_written_only(tmp_path):
    layer = "def _reinstall(keys):\n    for key in keys:\n        install(key)\n"
    root = tree(tmp_path, {"reference/python/native_registry/compat.py": layer})
    anchor = fault_anchor.locate("reference/python/native_registry/old.py", "        install(key)\n", root)
    assert anchor == fault_anchor.Anchor("reference/python/native_registry/compat.py", True)
    with pytest.raises(fault_anchor.AnchorError, match="nowhere"):
        fault_anchor.locate("reference/python/native_registry/compat.py", "    install(key)\n        ", root)


def test_a_fault_found_twice_is_stale_and_says_where(tmp_path):
    root = tree(tmp_path, {"reference/src/a.cpp": CORE, "reference/src/b.cpp": CORE})
    with pytest.raises(fault_anchor.AnchorError, match=r"a\.cpp \(1x\), reference/src/b\.cpp \(1x\)"):
        fault_anchor.locate("reference/src/gone.cpp", FIND, root)
