"""The behaviour catalogue (conformance/catalogue.toml) and its checks."""

from __future__ import annotations

import ast
import pathlib
import re
import tomllib
from dataclasses import dataclass

CONFORMANCE = pathlib.Path(__file__).resolve().parents[1]
CATALOGUE = CONFORMANCE / "catalogue.toml"
SEEDS = CONFORMANCE / "seeds.txt"

PROFILES = {"registry", "platform"}
LEVELS = ("required", "recommended")
SIDES = {"cpp", "python"}
ID = re.compile(r"^[a-z]+\.[a-z0-9-]+$")


@dataclass(frozen=True)
class Behaviour:
    id: str
    title: str
    statement: str
    profile: str
    tags: tuple[str, ...]
    seeds: tuple[str, ...]
    implied: bool
    level: str          # "required" or "recommended" (see catalogue.toml)
    level_reason: str   # why, where the seeds do not say; "" otherwise
    sides: tuple[str, ...]
    requires: tuple[str, ...]


def load(path: pathlib.Path = CATALOGUE) -> dict[str, Behaviour]:
    with path.open("rb") as f:
        entries = tomllib.load(f)["behaviour"]
    catalogue: dict[str, Behaviour] = {}
    for entry in entries:
        behaviour = Behaviour(
            id=entry["id"], title=entry["title"], statement=entry["statement"],
            profile=entry["profile"], tags=tuple(entry["tags"]), seeds=tuple(entry["seeds"]),
            implied=entry["implied"], level=entry["level"],
            level_reason=entry.get("level_reason", ""), sides=tuple(entry["sides"]),
            requires=tuple(entry["requires"]),
        )
        if behaviour.id in catalogue:
            raise ValueError(f"duplicate behaviour id {behaviour.id!r}")
        catalogue[behaviour.id] = behaviour
    return catalogue


def seed_tests(path: pathlib.Path = SEEDS) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def spec_tests(spec: pathlib.Path) -> list[str]:
    """Class.test_name of every test in an upstream test file."""
    tree = ast.parse(spec.read_text())
    return [f"{cls.name}.{fn.name}" for cls in tree.body if isinstance(cls, ast.ClassDef)
            for fn in cls.body if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")]


def problems(catalogue: dict[str, Behaviour], seeds: list[str]) -> list[str]:
    """Everything wrong with the catalogue itself."""
    found = []
    for b in catalogue.values():
        if not ID.match(b.id):
            found.append(f"{b.id}: ids look like 'area.behaviour-name'")
        if b.profile not in PROFILES:
            found.append(f"{b.id}: profile {b.profile!r} is not one of {sorted(PROFILES)}")
        if not b.sides or not set(b.sides) <= SIDES:
            found.append(f"{b.id}: sides {b.sides} must be a non-empty subset of {sorted(SIDES)}")
        if not b.tags:
            found.append(f"{b.id}: no feature tags")
        if b.level not in LEVELS:
            found.append(f"{b.id}: level {b.level!r} is not one of {list(LEVELS)}")
        if b.implied and not b.level_reason:
            found.append(f"{b.id}: an implied behaviour needs a level_reason")
        if b.level == "recommended" and not b.level_reason:
            found.append(f"{b.id}: a recommended behaviour needs a level_reason")
        if b.implied != (not b.seeds):
            found.append(f"{b.id}: implied must be true exactly when it names no seed test")
        for seed in b.seeds:
            if seed not in seeds:
                found.append(f"{b.id}: seed {seed!r} is not a test of the seed file")
    named = {s for b in catalogue.values() for s in b.seeds}
    found += [f"seed test {s} maps to no behaviour" for s in seeds if s not in named]
    return found


# ---- traceability: which tests name which behaviours --------------------------

PY_MARK = re.compile(r"@behaviour\(([^)]*)\)")
CPP_MARK = re.compile(r"BEHAVIOUR\(([^)]*)\)")
STRING = re.compile(r"\"([^\"]+)\"")


def python_references(root: pathlib.Path) -> dict[str, list[str]]:
    """behaviour id -> test files naming it with @behaviour(...)."""
    refs: dict[str, list[str]] = {}
    for path in sorted(root.glob("test_*.py")):
        for args in PY_MARK.findall(path.read_text()):
            for bid in STRING.findall(args):
                refs.setdefault(bid, []).append(path.name)
    return refs


def cpp_references(root: pathlib.Path) -> dict[str, list[str]]:
    refs: dict[str, list[str]] = {}
    for path in sorted(root.glob("*.cpp")):
        for args in CPP_MARK.findall(path.read_text()):
            for bid in STRING.findall(args):
                refs.setdefault(bid, []).append(path.name)
    return refs


def traceability_problems(catalogue: dict[str, Behaviour], python: dict[str, list[str]],
                          cpp: dict[str, list[str]]) -> list[str]:
    found = []
    for side, refs in (("python", python), ("cpp", cpp)):
        for bid in sorted(refs):
            if bid not in catalogue:
                found.append(f"{side} test in {refs[bid][0]} names unknown behaviour {bid!r}")
        for b in catalogue.values():
            if side in b.sides and b.id not in refs:
                found.append(f"{b.id} is expressible in {side} but no {side} test names it")
            if side not in b.sides and b.id in refs:
                found.append(f"{b.id} is not marked expressible in {side}, yet {refs[b.id][0]} tests it")
    return found
