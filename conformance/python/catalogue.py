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
DEVICES = CONFORMANCE / "devices.toml"

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


@dataclass(frozen=True)
class Device:
    """A device the suites run at (devices.toml): its dispatch keys and, for
    a device other than cpu, the behaviours its runs check."""
    name: str
    backend_key: str
    autograd_key: str
    autocast_key: str
    behaviours: tuple[str, ...]


def load_devices(path: pathlib.Path = DEVICES) -> dict[str, Device]:
    with path.open("rb") as f:
        entries = tomllib.load(f)["device"]
    return {e["name"]: Device(e["name"], e["backend_key"], e["autograd_key"], e["autocast_key"],
                              tuple(e["behaviours"])) for e in entries}


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


# ---- features: what a test uses against what its behaviours declare ----------

# An adapter member or fixture a test uses -> the feature it needs. A use
# guarded in the test itself (`"runtime-init" in impl.features`,
# `supports("runtime-init")`) does not count.
PY_FEATURE_USES = {
    "native-op-meta": re.compile(r"\.native_op\(|_native\.\{"),
    "runtime-init": re.compile(r"try_initialize_runtime="),
    "unconditional-hatch": re.compile(r"\.unconditional_masked\("),
    "dynamo-shortcut": re.compile(r"\.in_reentrant_call\(|declining_cond_noting_the_guard\("),
    "namespaces": re.compile(r"\bnamespaces\b|\.allow_namespace\(|\bNS2?\b|\bMISSING_NS\b"),
    "torch-front-ends": re.compile(r"\.serve_torch_front_ends\("),
    "native-predicates": re.compile(r"\.predicates_module\("),
}
CPP_FEATURE_USES = {
    "native-op-meta": re.compile(r"\.native_op\("),
    "unconditional-hatch": re.compile(r"\.unconditional_masked\("),
    "namespaces": re.compile(r"\bkTestNamespace\b|\bkSecondTestNamespace\b|\bkMissingNamespace\b|\bns[12]\(\)"),
    # A thread the test joins at once (test_call_discipline.cpp's
    # on_a_thread_joined) runs beside nothing: no concurrency to need.
    "concurrent-control-plane": re.compile(r"std::thread"),
}
REQUIRE_FEATURE = re.compile(r"REQUIRE_FEATURE\(\"([^\"]+)\"\)")


def _guarded(body: str, feature: str) -> bool:
    return any(guard in body for guard in (f'"{feature}" in impl.features', f'"{feature}" not in impl.features',
                                           f'supports("{feature}")'))


def python_test_bodies(root: pathlib.Path) -> list[tuple[str, list[str], str]]:
    """(file::test, behaviour ids, source) of every test function."""
    out = []
    for path in sorted(root.glob("test_*.py")):
        text = path.read_text()
        for fn in ast.parse(text).body:
            if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test_"):
                continue
            ids = [bid for d in fn.decorator_list if "behaviour" in (ast.get_source_segment(text, d) or "")
                   for bid in STRING.findall(ast.get_source_segment(text, d) or "")]
            out.append((f"{path.name}::{fn.name}", ids, ast.get_source_segment(text, fn) or ""))
    return out


def cpp_test_bodies(root: pathlib.Path) -> list[tuple[str, list[str], str]]:
    out = []
    for path in sorted(root.glob("test_*.cpp")):
        parts = re.split(r"(?=^TEST_P\(Conformance, )", path.read_text(), flags=re.M)
        for part in parts[1:]:
            name = part[len("TEST_P(Conformance, "):].split(")", 1)[0]
            ids = [bid for args in CPP_MARK.findall(part) for bid in STRING.findall(args)]
            out.append((f"{path.name}::{name}", ids, part))
    return out


def feature_problems(catalogue: dict[str, Behaviour], python_root: pathlib.Path,
                     cpp_root: pathlib.Path) -> list[str]:
    """A test that uses a feature its behaviours do not require (it would
    run, and fail, against an implementation without it), and a C++ test
    that does not REQUIRE_FEATURE what its behaviours require (the C++ side
    has no collection hook that skips by the catalogue)."""
    found = []
    for side, bodies, uses in (("python", python_test_bodies(python_root), PY_FEATURE_USES),
                               ("cpp", cpp_test_bodies(cpp_root), CPP_FEATURE_USES)):
        for test, ids, body in bodies:
            declared = {f for bid in ids if bid in catalogue for f in catalogue[bid].requires}
            checked = set(REQUIRE_FEATURE.findall(body))
            for feature, pattern in uses.items():
                if pattern.search(body) and not _guarded(body, feature) and feature not in declared:
                    found.append(f"{side} test {test} uses feature {feature!r}, which none of "
                                 f"{ids} requires")
            if side == "cpp":
                for feature in sorted(declared - checked):
                    found.append(f"cpp test {test} does not REQUIRE_FEATURE({feature!r}), "
                                 f"which {ids} require")
    return found


# ---- devices: what a run at another device checks ------------------------------

CPP_DEVICE_TEST = re.compile(r"^TEST_P\(Conformance, Device", re.M)


def device_test_references(python_root: pathlib.Path, cpp_root: pathlib.Path) -> dict[str, set[str]]:
    """behaviour id -> the sides ("python", "cpp") that have a device test
    naming it (Python: a test taking the `device` fixture; C++: a test named
    Device...)."""
    refs: dict[str, set[str]] = {}
    for path in sorted(python_root.glob("test_*.py")):
        text = path.read_text()
        for fn in ast.parse(text).body:
            if isinstance(fn, ast.FunctionDef) and "device" in [a.arg for a in fn.args.args]:
                for d in fn.decorator_list:
                    for bid in STRING.findall(ast.get_source_segment(text, d) or ""):
                        refs.setdefault(bid, set()).add("python")
    for test, ids, body in cpp_test_bodies(cpp_root):
        if CPP_DEVICE_TEST.match(body):
            for bid in ids:
                refs.setdefault(bid, set()).add("cpp")
    return refs


def device_problems(catalogue: dict[str, Behaviour], devices: dict[str, Device],
                    refs: dict[str, set[str]]) -> list[str]:
    """Each behaviour a device lists exists and has a device test on every
    side where it is expressible; each device test's behaviours are listed
    by every device other than cpu (else its results there would be lost)."""
    found = []
    if "cpu" not in devices:
        found.append("devices.toml has no cpu device (the default)")
    for device in devices.values():
        if device.name == "cpu":
            continue
        for bid in device.behaviours:
            if bid not in catalogue:
                found.append(f"devices.toml: {device.name} lists unknown behaviour {bid!r}")
                continue
            for side in catalogue[bid].sides:
                if side not in refs.get(bid, set()):
                    found.append(f"{bid} is listed for device {device.name} but no {side} device "
                                 f"test names it")
        for bid in sorted(refs):
            if bid in catalogue and bid not in device.behaviours:
                found.append(f"a device test names {bid!r}, which devices.toml does not list for "
                             f"{device.name}")
    return found


def check_all(spec: pathlib.Path | None = None) -> list[str]:
    """Every problem of the catalogue and of both suites' traceability (check.py's
    and the harness's check); with `spec`, seeds.txt against that file too."""
    behaviours = load()
    seeds = seed_tests()
    found = problems(behaviours, seeds)
    if spec is not None:
        actual = spec_tests(spec)
        if sorted(actual) != sorted(seeds):
            found.append(f"seeds.txt differs from {spec}: missing {sorted(set(actual) - set(seeds))}, "
                         f"extra {sorted(set(seeds) - set(actual))}")
    found += traceability_problems(
        behaviours, python_references(CONFORMANCE / "python"),
        cpp_references(CONFORMANCE / "cpp"))
    found += feature_problems(behaviours, CONFORMANCE / "python", CONFORMANCE / "cpp")
    found += device_problems(behaviours, load_devices(), device_test_references(
        CONFORMANCE / "python", CONFORMANCE / "cpp"))
    return found
