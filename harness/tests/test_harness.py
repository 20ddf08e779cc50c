"""Tests of the harness itself: the command line (bad --impl forms, help
without a build, labels, paths) and the errors-first check: an
implementation that cannot load is named with the fix before anything runs
(what a run reports is test_reports.py's)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

from harness import main, preflight, with_root_on_path

BUILD = pathlib.Path(os.environ.get("BUILD_DIR", "build"))
BUILD = BUILD if BUILD.is_absolute() else ROOT / BUILD


# ---- --impl forms -------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("nonexistent", "not of the form module:factory (no colon)"),
    ("mypkg.adapter:", "'' is not a Python name"),
    (":make", "'' is not a Python module path"),
    ("my pkg:make", "'my pkg' is not a Python module path"),
    ("mypkg..adapter:make", "is not a Python module path"),
    ("reference,adapters.reference:make", "names one implementation twice"),
    (",", "names no implementation"),
])
def test_bad_impl_forms_are_refused_with_the_reason(text, expected):
    with pytest.raises(main.UsageError) as info:
        main.parse_impls(text)
    assert expected in str(info.value)


def test_shipped_names_and_their_full_specs_are_the_same_implementation():
    (by_name,) = main.parse_impls("reference")
    (by_spec,) = main.parse_impls("adapters.reference:make")
    assert (by_name.python, by_name.cpp) == (by_spec.python, by_spec.cpp) == (
        "adapters.reference:make", "conformance/cpp/conformance_reference")


def without_torch(tmp_path) -> dict[str, str]:
    """os.environ with a torch that refuses to import first on the path: what
    makes an answer slow is importing torch (seconds) or building, so a run
    that must answer at once is checked for neither, not timed (the machine
    is shared)."""
    poison = tmp_path / "poison"
    (poison / "torch").mkdir(parents=True, exist_ok=True)
    (poison / "torch" / "__init__.py").write_text("raise SystemExit('imported torch')\n")
    return dict(os.environ, PYTHON=sys.executable,
                PYTHONPATH=os.pathsep.join(filter(None, [str(poison), os.environ.get("PYTHONPATH")])))


def test_no_name_runs_another_implementations_cpp_suite():
    # Labels used to come from the module's last segment: these ran the reference's C++ suite.
    impls = main.parse_impls("adapters.reference:nope,mypkg.reference:make,upstream")
    assert [i.cpp for i in impls] == [None, None, None]


def test_a_bad_impl_fails_in_a_second_before_setup_or_build(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "harness" / "run"), "--impl", "nonexistent"],
                          cwd=tmp_path, capture_output=True, text=True, env=without_torch(tmp_path))
    assert proc.returncode == 2
    assert "--impl 'nonexistent'" in proc.stderr and "module:factory" in proc.stderr
    assert "ci/setup" not in proc.stdout + proc.stderr and "meson" not in proc.stdout
    assert "imported torch" not in proc.stderr


# ---- labels ---------------------------------------------------------------------


def test_labels_are_the_adapters_own_names():
    impls = main.parse_impls("reference,mypkg.adapter:make")
    main.assign_labels(impls, {"adapters.reference:make": "reference", "mypkg.adapter:make": "mine"})
    assert [i.label for i in impls] == ["reference", "mine"]


def test_adapters_sharing_a_name_are_labelled_by_their_full_path():
    impls = main.parse_impls("a.adapter:make,b.adapter:make,upstream")
    main.assign_labels(impls, {"a.adapter:make": "adapter", "b.adapter:make": "adapter",
                               "adapters.upstream:make": "upstream"})
    assert [i.label for i in impls] == ["a.adapter:make", "b.adapter:make", "upstream"]
    # ... and their logs and reports do not overwrite each other.
    assert len({i.file_stem for i in impls}) == 3


# ---- loading adapters: the real exception and the fix -----------------------------


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    pkg = tmp_path / "fakeimpl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "adapter.py").write_text(
        "class A:\n    name = 'fake'\n    description = 'a fake'\n    features = frozenset()\n"
        "def make():\n    return A()\n"
        "def broken():\n    raise RuntimeError('no device found')\n"
        "def nameless():\n    return object()\n")
    (pkg / "needs_dep.py").write_text("import dependency_that_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m.startswith("fakeimpl")]:
        del sys.modules[name]


def test_a_package_not_on_the_path_names_the_module_and_the_fix():
    found = preflight.check_adapter("mypkg_not_there.adapter:make")
    assert not found["ok"]
    assert found["error"] == "ModuleNotFoundError: No module named 'mypkg_not_there'"
    assert "import mypkg_not_there.adapter" in found["tried"]
    assert "PYTHONPATH" in found["fix"]


def test_a_missing_dependency_of_the_adapter_is_told_apart(fake_package):
    found = preflight.check_adapter("fakeimpl.needs_dep:make")
    assert "dependency_that_is_not_installed" in found["error"]
    assert "install it" in found["fix"] and "PYTHONPATH" not in found["fix"]


def test_a_missing_factory_lists_what_the_module_has(fake_package):
    found = preflight.check_adapter("fakeimpl.adapter:nope")
    assert not found["ok"] and "has no callable 'nope'" in found["error"]
    assert "make" in found["fix"] and "broken" in found["fix"]


def test_a_raising_factory_reports_its_exception(fake_package):
    found = preflight.check_adapter("fakeimpl.adapter:broken")
    assert found["error"] == "RuntimeError: no device found"
    assert "adapter.py" in found["where"]


def test_an_adapter_without_a_name_is_refused(fake_package):
    found = preflight.check_adapter("fakeimpl.adapter:nameless")
    assert not found["ok"] and "no `name`" in found["error"]


def test_a_good_adapter_gives_its_name(fake_package):
    found = preflight.check_adapter("fakeimpl.adapter:make")
    assert found["ok"] and found["name"] == "fake"


def test_nothing_runs_when_an_implementation_cannot_load(tmp_path):
    assert (BUILD / "build.ninja").exists(), f"this test runs the harness on the build in {BUILD}"
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "harness", "--build", str(BUILD),
                           "--results", str(results), "--impl", "reference,mypkg.adapter:make"],
                          cwd=tmp_path, env=with_root_on_path(os.environ), capture_output=True, text=True)
    assert proc.returncode == 2
    assert "cannot load implementation 'mypkg.adapter:make'" in proc.stderr
    assert "ModuleNotFoundError: No module named 'mypkg'" in proc.stderr
    assert "fix: put your package on PYTHONPATH" in proc.stderr
    assert "nothing was run" in proc.stderr
    assert not list(results.glob("*.log")) and not list(results.glob("*.xml"))


# ---- --help -------------------------------------------------------------------------


def test_help_answers_at_once_on_a_fresh_clone(tmp_path):
    """A copy of the tracked files: no build, no install; --help must not make either."""
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z", "harness", "conformance", "ci"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, clone / rel)
    env = without_torch(tmp_path)
    proc = subprocess.run(["bash", str(clone / "harness" / "run"), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "imported torch" not in proc.stderr
    assert not (clone / "build").exists()
    text = proc.stdout
    assert text.startswith("usage: harness/run")
    for option in ("--impl", "--build", "--results", "--spec", "--coverage", "--mutants", "--only",
                   "--upstream-tests"):
        assert f"  {option}" in text, option
    assert "--check-args" not in text
    assert "examples:" in text
    for mode in ("--impl reference,upstream", "--impl mypkg.adapter:make", "--coverage", "--mutants",
                 "--upstream-tests"):
        assert f"./harness/run {mode}" in text or f"run {mode}" in text, mode


def test_every_option_has_help():
    for action in main.parser()._actions:
        assert action.help, action.option_strings


# ---- paths ----------------------------------------------------------------------------


def test_paths_are_taken_from_the_callers_directory(tmp_path, monkeypatch):
    (tmp_path / "test_registry.py").write_text("")
    monkeypatch.chdir(tmp_path)
    args = main.parser().parse_args(["--upstream-tests", "test_registry.py", "--results", "out",
                                     "--build", "../b"])
    main.resolve_paths(args)
    assert args.upstream_tests == tmp_path / "test_registry.py"
    assert args.results == tmp_path / "out"
    assert args.build == tmp_path.parent / "b"


def test_a_missing_file_is_named_with_the_directory_it_was_looked_in(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "harness" / "run"), "--upstream-tests", "nothere.py"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2
    assert str(tmp_path / "nothere.py") in proc.stderr


def test_upstream_tests_need_numpy_and_say_so():
    args = main.parser().parse_args(["--upstream-tests", __file__])
    modules = main.suite_modules(args)
    assert "numpy" in modules["torch.testing._internal.common_utils"]




# ---- upstream's test file as a judge of the Python layer's mutants -------------


@pytest.mark.parametrize("extra, refused", [
    (["--mutants", "auto", "--mutate", "python", "--own-tests"], False),
    (["--mutants", "auto", "--mutate", "python"], True),
    (["--mutants", "auto", "--mutate", "cpp", "--own-tests"], True),
    (["--mutants"], True),
])
def test_upstream_tests_judge_mutants_only_beside_the_python_layers_own_tests(tmp_path, extra, refused):
    (tmp_path / "test_registry.py").write_text("")
    args = main.parser().parse_args(["--upstream-tests", str(tmp_path / "test_registry.py"), *extra])
    args.implementations = main.parse_impls(args.impl)
    if refused:
        with pytest.raises(main.UsageError, match="--own-tests"):
            main.resolve_paths(args)
    else:
        main.resolve_paths(args)


def test_the_upstream_judge_runs_the_file_against_upstream_compat_leaving_out_what_fails_unmutated(tmp_path):
    """The judge's baseline names the tests that fail on the unmutated
    reference and leaves them out; a test that then fails (here through an
    environment variable standing for a mutant) kills, named by the file."""
    from harness import staging
    from harness.mutation import mutant_runner, mutants
    assert (BUILD / "build.ninja").exists(), f"this test stages the package built in {BUILD}"
    upstream_file = tmp_path / "spec" / "test_upstream_like.py"
    upstream_file.parent.mkdir()
    upstream_file.write_text(
        "import os\n"
        "import torch._native.registry as registry\n"
        "from native_registry import upstream_compat\n\n"
        "def test_the_module_is_the_references_compat():\n"
        "    assert registry is upstream_compat and callable(registry.register_op_override)\n\n"
        "def test_broken_before_any_mutant():\n"
        "    assert False\n\n"
        "def test_what_a_mutant_breaks():\n"
        "    assert os.environ.get('STANDS_FOR_A_MUTANT') != '1'\n")
    env = staging.environment_for(staging.stage_package(BUILD, tmp_path / "pkg"))
    target = mutant_runner.Target("python", [], {}, env=env, needs_build=False)
    ws, out = mutants.Workspace(tmp_path / "ws"), tmp_path / "out"
    out.mkdir()
    judge = mutant_runner.upstream_judge(upstream_file, target, ws, out)
    assert judge is not None and judge.failing == ["test_broken_before_any_mutant"]
    assert judge.run(out, env, ws)[0] == []
    failed, _ = judge.run(out, {**env, "STANDS_FOR_A_MUTANT": "1"}, ws)
    assert failed == ["upstream test_upstream_like.py::test_what_a_mutant_breaks"]
    target.upstream = judge
    assert target.own_tests_reach_uncovered
