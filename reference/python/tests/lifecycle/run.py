"""Running a program in a child interpreter and judging what it printed.

`judge` walks the program's steps beside the model (model.py) and returns
the first failure as (signature, detail): a signature names the class of
failure (crash:SIGSEGV:Filter, wrong-answer:Takeover:mul, exit-status:...),
so that distinct classes are told apart and each is shrunk on its own.

Which package the child imports: NR_LIFECYCLE_PACKAGE, a folder holding a
staged native_registry (harness/staging.py), or by default whatever
`import native_registry` gives (the editable install). NR_LIFECYCLE_ASAN=1
runs every child with libasan preloaded (the package must then be an ASan
build, e.g. build-asan-py staged).

Command line (replay one program, or the seed of a failed run):
    python -m lifecycle.run --seed 20261202 --seconds 60     (from reference/python/tests)
    python -m lifecycle.run --program "Program(Header(...), steps=(...))"
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import signal
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

from . import model as M
from . import program as P
from .program import (CallProgram, Coverage, Filter, Fork, Header, Install, JitScope, Mask, Policy,
                      Program, Redefine, Reg, Reorder, Restore, Snapshot, Stats, Takeover,
                      ThreadScope, Threads, Trace)

ROOT = pathlib.Path(__file__).resolve().parents[4]
HARNESS = ROOT / "harness"
CHILD_TIMEOUT = float(os.environ.get("NR_LIFECYCLE_CHILD_TIMEOUT", "90"))
# The wheel's start-up hook: the .pth site-packages runs and the module it
# imports (installed beside the package, not inside it).
EARLY_HOOK = (ROOT / "reference" / "python" / "native_registry_early.pth",
              ROOT / "reference" / "python" / "_native_registry_early.py")


def child_environment() -> dict:
    package = os.environ.get("NR_LIFECYCLE_PACKAGE")
    if package:
        # By its path: this runs from reference/python/tests, where `harness` is not importable.
        spec = importlib.util.spec_from_file_location("harness_staging", HARNESS / "staging.py")
        staging = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(staging)
        env = staging.environment_for(pathlib.Path(package))
        # The editable install's own build folder too, wherever it is (the
        # main checkout's, when this runs from a worktree).
        skip = [f._build_path for f in sys.meta_path if hasattr(f, "_build_path")]
        env["MESONPY_EDITABLE_SKIP"] = os.pathsep.join([env["MESONPY_EDITABLE_SKIP"], *map(str, skip)])
    else:
        env = dict(os.environ)
        # The editable install rebuilds its build folder on import when the
        # C++ changed: here, once, not inside a child's time limit.
        import native_registry  # noqa: F401
    env.pop("NATIVE_REGISTRY_AS_TORCH_NATIVE", None)
    env["PYTHONFAULTHANDLER"] = "1"
    if os.environ.get("NR_LIFECYCLE_ASAN") == "1":
        cxx = os.environ.get("CXX", "g++")
        libs = [subprocess.run([cxx, f"-print-file-name={lib}"], capture_output=True, text=True
                               ).stdout.strip() for lib in ("libasan.so", "libstdc++.so")]
        env.update(LD_PRELOAD=" ".join(libs), PYTHONMALLOC="malloc",
                   ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:print_suppressions=0")
    return env


def universe(program: Program) -> dict:
    """Every answer eager mul and add can give in this program; "raises":
    whether an impl of theirs raises (its own error, then, is an answer too)."""
    value_of = P.values(program)
    out = {key: [M.FALLBACK[key]] for key in ("mul", "add")}
    out["raises"] = False
    for i, step, _ in P.numbering(program):
        if isinstance(step, (Reg, JitScope)) and step.key in ("mul", "add"):
            out[step.key].append(float(value_of[id(step), i]))
            out["raises"] |= isinstance(step, Reg) and step.cond == P.RAISING
    return out


def run_child(program: Program, timeout: float = CHILD_TIMEOUT) -> dict:
    script = P.render(program, universe(program))
    env = child_environment()
    with tempfile.TemporaryDirectory(prefix="nr-lifecycle-") as tmp:
        path = pathlib.Path(tmp) / "program.py"
        if os.environ.get("NR_LIFECYCLE_PACKAGE"):
            # Only the named package: an editable install's finder (whichever
            # checkout `pip install -e` pointed it at last) goes first.
            script = ("import sys\nsys.meta_path[:] = [f for f in sys.meta_path if "
                      "type(f).__module__ != '_native_registry_editable_loader']\n" + script)
        if program.header.early != "off":
            # As site-packages processes the wheel's .pth at start-up.
            (pathlib.Path(tmp) / "site").mkdir()
            for hook_file in EARLY_HOOK:
                shutil.copy2(hook_file, pathlib.Path(tmp) / "site" / hook_file.name)
            script = f"import site\nsite.addsitedir({str(pathlib.Path(tmp) / 'site')!r})\n" + script
            env["NATIVE_REGISTRY_AS_TORCH_NATIVE"] = "1"
        path.write_text(script)
        try:
            proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                                  timeout=timeout, env=env, cwd=tmp)
            rc, stdout, stderr, timed_out = proc.returncode, proc.stdout, proc.stderr, False
        except subprocess.TimeoutExpired as e:
            rc, timed_out = None, True
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            stderr = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    observations = []
    for line in stdout.splitlines():
        if line.startswith("@@"):
            try:
                observations.append(json.loads(line[2:]))
            except ValueError:
                pass
    package = os.environ.get("NR_LIFECYCLE_PACKAGE")
    loaded = next((o[1] for o in observations if o[0] == "loaded"), None)
    if package and loaded is not None and not loaded.startswith(str(pathlib.Path(package).resolve())):
        # never judge another package than the one named
        raise RuntimeError(f"the child imported native_registry from {loaded}, not from {package}")
    return {"rc": rc, "timed_out": timed_out, "observations": observations, "stderr": stderr,
            "script": script}


def _signal_name(rc) -> str:
    if rc is None:
        return "timeout"
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal{-rc}"
    return {134: "SIGABRT", 139: "SIGSEGV"}.get(rc, f"status{rc}")


# Not a failure of the implementation (see judge): reported, never failed on.
DOCUMENTED_HAZARD = "documented-hazard"


class Failure(Exception):
    def __init__(self, signature: str, detail: str) -> None:
        super().__init__(f"{signature}: {detail}")
        self.signature, self.detail = signature, detail


def judge(program: Program, result: dict) -> tuple[str, str] | None:
    """The first failure in a child's run, or None. A child that crashed,
    hung or hit an internal assert is reported as such even where a wrong
    answer came first (the worst bug names the class)."""
    try:
        try:
            _judge(program, result)
        except (IndexError, KeyError, TypeError, ValueError) as e:
            # the observations did not have the shape the judge reads: a
            # child cut short mid-line, or a defect of the judge itself
            import traceback
            raise Failure(f"unreadable-observations:{type(e).__name__}",
                          traceback.format_exc(limit=3)) from None
    except Failure as f:
        stderr = result["stderr"]
        abnormal = (result["timed_out"] or result["rc"] != 0
                    or "INTERNAL ASSERT FAILED" in stderr or "ERROR: AddressSanitizer" in stderr
                    or not any(o[0] == "end" for o in result["observations"]))
        if abnormal and not f.signature.split(":")[0] in (
                "crash", "hang", "internal-assert", "asan", "exit", "exit-with-daemon-threads",
                DOCUMENTED_HAZARD, "unreadable-observations"):
            last = max((o[1] for o in result["observations"] if len(o) > 1 and isinstance(o[1], int)),
                       default=None)
            where = type(P.numbering(program)[last][1]).__name__ if last is not None else "import"
            if any(o[0] == "end" for o in result["observations"]) and not result["timed_out"]:
                # every step ran: the process died on its way out
                where = _exit_place(program)
                return f"{where}:{_signal_name(result['rc'])}", f"(after {f.signature}: {f.detail})"
            kind = ("hang" if result["timed_out"] else
                    "internal-assert" if "INTERNAL ASSERT FAILED" in stderr else
                    "asan" if "ERROR: AddressSanitizer" in stderr else
                    f"crash:{_signal_name(result['rc'])}")
            return f"{kind}:{where}", f"(after {f.signature}: {f.detail})\n{_tail(stderr)}"
        return f.signature, f.detail
    return None


def _exit_place(program: Program) -> str:
    """Where a failure after every step ran happened: on the way out."""
    return "exit-with-daemon-threads" if program.header.daemon_exit else "exit"


def _judge(program: Program, result: dict) -> None:
    obs = result["observations"]
    stderr = result["stderr"]
    by_step: dict = defaultdict(list)
    for o in obs:
        if len(o) > 1 and isinstance(o[1], int):
            by_step[o[1]].append(o)
    kinds = {o[0] for o in obs}

    def first(i, kind):
        return next((o for o in by_step[i] if o[0] == kind), None)

    hazard = [False]

    def died(where: str) -> Failure:
        if hazard[0]:
            # a router put into the dispatcher while threads called the op:
            # LibTorch's own hazard, which the reference documents
            return Failure(f"{DOCUMENTED_HAZARD}:{where}", _tail(stderr))
        if result["timed_out"]:
            return Failure(f"hang:{where}", f"no progress within {CHILD_TIMEOUT:.0f} s")
        if "INTERNAL ASSERT FAILED" in stderr:
            return Failure(f"internal-assert:{where}", _excerpt(stderr, "INTERNAL ASSERT FAILED"))
        if "ERROR: AddressSanitizer" in stderr:
            return Failure(f"asan:{where}", _excerpt(stderr, "ERROR: AddressSanitizer"))
        return Failure(f"crash:{_signal_name(result['rc'])}:{where}", _tail(stderr))

    if "start" not in kinds:
        raise died("import")
    start = next(o for o in obs if o[0] == "start")
    m = M.Model(program.header)
    m.base_stock, m.base_ref = start[1], start[2]
    value_of = P.values(program)
    numbered = P.numbering(program)

    def finished_thread(i, kind, where, hang, what):
        """Step i's record of kind `kind` from a thread it ran (its fields
        from index 2 on); a missing record is the child's death at `where`,
        a thread that never finished a hang named `hang`."""
        o = first(i, kind)
        if o is None:
            raise died(where)
        if o[5]:
            raise Failure(hang, what)
        return o

    def outcome(i, step):
        o = first(i, "step")
        if o is None:
            raise died(type(step).__name__)
        if o[2] == "ok":
            return None
        err = o[3:]
        if not M.is_named(err):
            raise Failure(f"unnamed-exception:{type(step).__name__}", repr(err))
        return err

    def unexpected(step, err):
        raise Failure(f"unexpected-error:{type(step).__name__}", f"{step!r} raised {err}")

    def expect_model_error(step, err, what):
        if err is None:
            raise Failure(f"missed-error:{type(step).__name__}",
                          f"{step!r} succeeded; the model says it must raise ({what})")
        if err[1] != "AttributeError":
            unexpected(step, err)

    def attempt(step, err, operation, partial: bool = False):
        """Runs a model operation; an error is expected exactly where it raises
        ModelError (all or nothing, or, with partial, what it did so far stays)."""
        nonlocal m
        trial = M.copy.deepcopy(m)
        try:
            operation(trial)
        except M.ModelError as e:
            expect_model_error(step, err, e)
            if partial:
                m = trial
            return
        if err is not None:
            unexpected(step, err)
        m = trial

    def model_raises(operation) -> bool:
        try:
            operation(M.copy.deepcopy(m))
        except M.ModelError:
            return True
        return False

    def bound_or_refused(step, err, operation=None) -> bool:
        """A function bound from the replaced module before the takeover: it
        reaches the reference (True: also when it raises where the model says
        the same call through the module raises, the registry's own error,
        which `attempt` then judges) or refuses naming the takeover (False)."""
        if err is None or (operation is not None and model_raises(operation)):
            return True
        if not any(word in err[2] for word in M.TAKEOVER_WORDS):
            raise Failure(f"foreign-error:{type(step).__name__}",
                          f"{step!r} after the takeover raised {err[1]}: {err[2][:200]} "
                          "(neither reaches the registry nor says it was taken over)")
        return False

    def check_calls(i, step, before=None):
        o = first(i, "calls")
        if o is None:
            raise died(f"calls after {type(step).__name__}")
        answers, has_f = o[2], o[3]
        for key, answer in zip(P.KEYS, answers):
            expect, redefines, effect = m.route(key)
            judged = before[key] if before is not None else expect
            if (before is not None and before[key].marker == P.IMPL_ERROR and m.policy == "fallback"
                    and not judged.admits(answer)):
                # a stock impl that raised under torch 2.13's router falls
                # back under the reference's, as the policy set says: the
                # same node takes the call, the setting decides its error
                judged = expect
            if not judged.admits(answer):
                kind = "takeover-changed-answer" if before is not None else "wrong-answer"
                raise Failure(f"{kind}:{type(step).__name__}:{key}",
                              f"after step {i} {step!r}: {key} gave {answer}, expected {judged}")
            m.count(key, effect)
            m.after_call(key, redefines)
        check_notices(i, step, o[4])
        entry = m.decomp_entry_f()
        if isinstance(has_f, list):
            raise Failure("native-decomp-table-raised", f"after step {i} {step!r}: {has_f}")
        if entry is not None and has_f != entry:
            raise Failure("native-decomp-table-entry:f",
                          f"after step {i} {step!r}: lc::f entry {has_f}, expected {entry}")

    def check_notices(i, step, warned):
        """The impl error policy's notices so far (every thread's): one per
        node whose impl raised into a fallback, never two, none for another
        node; every one the model saw fall back among them."""
        raising = {n.value for n in m.nodes.values() if n.raises}
        twice = sorted({v for v in warned if warned.count(v) > 1})
        if twice:
            raise Failure("impl-error-notice-repeated",
                          f"after step {i} {step!r}: RuntimeWarnings for nodes {twice} more than once")
        if any(v not in raising for v in warned):
            raise Failure("impl-error-notice-spurious",
                          f"after step {i} {step!r}: notices for {warned}, raising nodes {sorted(raising)}")
        missing = sorted(m.must_warn - set(warned))
        if missing:
            raise Failure("impl-error-notice-missing",
                          f"after step {i} {step!r}: no RuntimeWarning for nodes {missing} "
                          f"whose impl error fell back (notices: {warned})")
        m.must_warn = set(warned)

    def judge_scope(i, step):
        """A ThreadScope's calls, in the order they ran: each level of the
        nested scopes as it opened, this thread's calls while another thread
        held them all (none of them applies here), each level as they closed."""
        o = finished_thread(i, "scoped", "ThreadScope", "hang:ThreadScope",
                            f"step {i} {step!r}: the scope thread never finished")
        seen, main, errs = o[2:5]
        if errs:
            if not M.is_named(errs[0]):
                raise Failure("unnamed-exception:ThreadScope", repr(errs[0]))
            unexpected(step, errs[0])
        entries = list(step.entries)
        levels = [tuple(entries[:k]) for k in range(len(entries) + 1)]
        still = list(entries)
        closing = []
        for entry in (entries if step.out_of_order else list(reversed(entries))):
            still.remove(entry)
            closing.append(tuple(still))
        timeline = [("opened", off, answers) for off, answers in zip(levels, seen)]
        if step.other_thread:
            timeline.append(("other-thread", (), main[0]))
        timeline += [("closed", off, answers) for off, answers in zip(closing, seen[len(levels):])]
        if len(seen) != len(levels) + len(closing) or (step.other_thread and len(main) != 1):
            raise Failure("unreadable-observations:ThreadScope", f"step {i}: {o!r}")
        for where, off, answers in timeline:
            for key, answer in zip(P.KEYS, answers):
                expect, redefines, effect = m.route(key, off)
                if not expect.admits(answer):
                    kind = "thread-scope-seen-elsewhere" if where == "other-thread" else "wrong-answer"
                    raise Failure(f"{kind}:ThreadScope:{key}",
                                  f"step {i} {step!r}: {where} with {list(off)} disabled: {key} gave "
                                  f"{answer}, expected {expect}")
                m.count(key, effect)
                m.after_call(key, redefines, off)

    def judge_stats(i, step, err):
        if err is not None:
            unexpected(step, err)
        m.stats_on = step.on
        if step.reset:
            m.reset_stats()
        o = first(i, "stats")
        nodes, graphs = o[2], o[3]
        for key in P.KEYS:
            if key in m.stats_unpinned:
                continue
            got = graphs.get(key, [0, 0, 0, 0])
            want = m.graph_counts.get(key, [0, 0, 0, 0])
            if got != want:
                missed = m.raised_calls.get(key, 0)
                if missed and got[1:] == want[1:] and want[0] - got[0] == missed:
                    # its own class: exactly the calls whose impl raised
                    # (policy "raise") are missing from the graph's calls
                    raise Failure(f"stats-graph-calls-miss-impl-errors:{key}",
                                  f"step {i} {step!r}: {key}'s calls {got[0]}, the model counted "
                                  f"{want[0]}, of which {missed} ended in the impl's error")
                raise Failure(f"stats-graph:{key}",
                              f"step {i} {step!r}: {key}'s calls, fallbacks, covered, "
                              f"fell_back_after_error {got}, the model counted {want}")
        key_of = {n.value: n.key for n in m.nodes.values()}
        for value, taken, declined, raised in nodes:
            if key_of.get(value) in m.stats_unpinned:
                continue
            want = m.node_counts.get(value, [0, 0, 0])
            if [taken, declined, raised] != want:
                raise Failure(f"stats-node:{key_of.get(value)}",
                              f"step {i} {step!r}: node {value} taken, declined, raised "
                              f"{[taken, declined, raised]}, the model counted {want}")

    def apply(i, step):
        """Judges one step's own outcome and moves the model; returns the
        answers before a takeover (to judge the calls after it), if any."""
        err = outcome(i, step)
        if isinstance(step, Reg):
            to_ref = step.api == "ref" or m.taken_over
            if step.api == "bound" and m.taken_over and not bound_or_refused(step, err):
                return None
            if err is not None:
                unexpected(step, err)
            nid = m.new_node(step.key, step.dsl, step.cond, value_of[id(step), i])
            (m.ref_graphs if to_ref else m.stock_graphs).setdefault(step.key, []).append(nid)
        elif isinstance(step, Install):
            if step.api == "ref":
                attempt(step, err, M.Model.ref_install_all)
            elif m.taken_over:
                attempt(step, err, lambda t: t.compat_reinstall(list(t.ref_graphs)), partial=True)
            else:
                if err is not None:
                    unexpected(step, err)
                for key in list(m.stock_graphs):
                    # stock_install(): _register_all_overrides, or, once
                    # poisoned, each graph with the filter state
                    m.stock_reinstall(key, filtered=m.poisoned)
        elif isinstance(step, Filter):
            if step.api == "pn" and step.dsl == "user":
                return None
            if step.api == "ref":
                attempt(step, err, lambda t: t.ref_filter(step.dsl, step.disable))
            elif not m.taken_over:
                if err is not None:
                    unexpected(step, err)
                m.stock_filter(step.dsl, step.disable)
            else:
                compat = lambda t: t.compat_filter(step.dsl, step.disable)  # noqa: E731
                if step.api == "bound" and not bound_or_refused(step, err, compat):
                    return None
                attempt(step, err, compat, partial=True)
        elif isinstance(step, Takeover):
            if err is not None:
                unexpected(step, err)
            o = first(i, "takeover")
            total, errs, hung = o[2], o[3], o[4]
            if hung:
                raise Failure("hang:Takeover", f"step {i} {step!r}: a takeover thread never returned")
            for e in errs:
                if not M.is_named(e):
                    raise Failure("unnamed-exception:Takeover", repr(e))
            if step.refused and not m.taken_over and not m.poisoned:
                m.poisoned = True
                m.base_stock += 1  # the refused node, at aten::mul.Tensor/Autograd
            if m.taken_over:
                if errs:
                    unexpected(step, errs[0])
            elif m.poisoned:
                if len(errs) != step.threads:
                    raise Failure("refused-takeover-accepted",
                                  f"step {i} {step!r}: {step.threads - len(errs)} of {step.threads} "
                                  "takeovers succeeded over a node the reference refuses")
                return None
            elif m.refuses_takeover():
                if len(errs) != step.threads or any(e[1] != "TakeoverRefused" for e in errs):
                    raise Failure("takeover-not-refused",
                                  f"step {i} {step!r}: {errs!r}; the model says every takeover "
                                  "is refused (a stock graph never installed where the "
                                  "reference routes, a stock router that disagrees with the "
                                  "stock filters, stock filters that disable a node the "
                                  "reference routes, or a reference graph without a router "
                                  "where a stock router routes)")
                return None  # refused: nothing changed
            else:
                if errs:
                    unexpected(step, errs[0])
                before = m.take_over()
                if total != m.node_count():
                    raise Failure("takeover-node-count",
                                  f"step {i} {step!r}: {total} nodes in the reference, expected "
                                  f"{m.node_count()} (each once)")
                return before
            if total != m.node_count():
                raise Failure("takeover-node-count",
                              f"step {i} {step!r}: {total} nodes, expected {m.node_count()}")
        elif isinstance(step, Reorder):
            warned = first(i, "warned")
            if step.api == "stock" and not m.taken_over:
                if err is not None and m.poisoned and step.reregister and "Alias keys" in err[2]:
                    # torch 2.13's own registry re-registering the Autograd
                    # graph a refused takeover left it (it captures no kernel
                    # at an alias key): not the registry under test, and what
                    # it installed before raising is not modelled
                    return None
                if err is not None:
                    unexpected(step, err)
                if warned is None or warned[2]:
                    return None
                for key in P.KEYS:
                    graph = m.stock_graphs.get(key, [])
                    new = _reordered(m, graph, step.how)
                    changed = new != graph
                    m.stock_graphs[key] = new if graph else graph
                    if changed:
                        m.stock_reinstall(key)
            elif err is None and (warned is None or warned[2]):
                return None
            else:
                attempt(step, err, lambda t: _reorder_reference(t, step))
        elif isinstance(step, Snapshot):
            if err is not None:
                unexpected(step, err)
            m.snapshot()
        elif isinstance(step, Restore):
            if err is not None:
                unexpected(step, err)
            m.restore(step.which)
        elif isinstance(step, Mask):
            if err is not None:
                unexpected(step, err)
            m.mask(step.enter)
        elif isinstance(step, Trace):
            m.unpin_stats()  # tracing may route calls the model does not count
            predicted = m.traced(step.api, step.key)
            stock_own = step.api == "stock" and not m.taken_over
            if err is not None:
                if stock_own and predicted[0] == "eager":
                    return None  # torch 2.13's own table: not the registry under test
                if P.IMPL_ERROR in err[2] and any(n.raises and n.key == step.key
                                                  for n in m.nodes.values()):
                    return None  # a raising impl ran as the trace ran the op: its own error
                unexpected(step, err)
            targets = first(i, "traced")[2]
            own = {"mul.Tensor", "add.Tensor"}
            if predicted[0] == "node" and not any(t not in own for t in targets):
                raise Failure("trace-missed-override",
                              f"step {i} {step!r}: traced {targets}, expected node "
                              f"{m.nodes[predicted[1]].value}'s _native op")
            if predicted[0] == "eager" and any(t not in own for t in targets):
                raise Failure("trace-spurious-override",
                              f"step {i} {step!r}: traced {targets}, expected the plain op")
            m.programs.append(predicted)
        elif isinstance(step, JitScope):
            m.unpin_stats((step.key,))
            if "user" in m.ref_filters:
                # Its node is disabled at registration, so its `_native` op is
                # never defined (upstream defines a node's op only when it
                # installs it): TorchScript cannot name it.
                if err is None or "_user" not in err[2]:
                    raise Failure("wrong-answer:JitScope",
                                  f"step {i}: a disabled node's op was named: {err!r}")
                return None
            if err is not None:
                unexpected(step, err)
            inside = first(i, "jit_inside")
            if inside[2] != float(value_of[id(step), i]):
                raise Failure("wrong-answer:JitScope", f"step {i}: {inside[2]}")
            m.programs.append(("value", float(value_of[id(step), i])))
        elif isinstance(step, CallProgram):
            if not m.programs:
                return None
            m.unpin_stats()
            prog = m.programs[step.which % len(m.programs)]
            o = first(i, "program")
            got = err if err is not None else o[2]
            if prog[0] == "node":
                node = m.nodes[prog[1]]
                # torch's own `_native` op after the takeover: its answer or
                # a named error (never a dangling handle)
                moved = prog[2] == "stock" and m.taken_over
                expect = M.Expect({float(node.value)},
                                  error_ok=moved or not m.live(prog[1]) or node.raises)
                if node.uncertain:
                    expect = M.Expect(anything=True)
            elif prog[0] == "value":
                expect = M.Expect({prog[1]}, error_ok=True)
            elif prog[0] == "eager":
                expect = m.expect(prog[1])[0]
            else:
                expect = M.Expect(anything=True)
            if not expect.admits(got):
                raise Failure("program-wrong-answer",
                              f"step {i} {step!r}: program {prog} gave {got}, expected {expect}")
        elif isinstance(step, Redefine):
            if err is not None:
                unexpected(step, err)
            m.redefine(step.remove_only)
        elif isinstance(step, ThreadScope):
            if err is not None:
                unexpected(step, err)
            judge_scope(i, step)
        elif isinstance(step, Stats):
            judge_stats(i, step, err)
        elif isinstance(step, Coverage):
            if err is not None:
                unexpected(step, err)
            m.coverage = step.how
        elif isinstance(step, Policy):
            if err is not None:
                unexpected(step, err)
            m.policy = step.policy
        elif isinstance(step, Fork):
            if err is not None:
                unexpected(step, err)
            status = first(i, "fork")[2]
            forked = first(i, "forked")
            if status != 0:
                raise Failure("fork-child", f"step {i}: the forked child {status}")
            if forked is None:
                raise Failure("fork-child-silent", f"step {i}: the forked child printed nothing")
            for key, answer in zip(("mul", "add"), forked[2]):
                expect = m.expect(key)[0]
                if not expect.admits(answer):
                    raise Failure(f"wrong-answer:Fork:{key}", f"forked child: {answer}, expected {expect}")
        return None

    pos = 0
    while pos < len(numbered):
        i, step, _ = numbered[pos]
        pos += 1
        if isinstance(step, Threads):
            fresh = m.fresh_routers
            # What each caller's call adds to the stats, in every state the
            # callers may meet: pinned only where it is the same in all.
            effects = {key: [m.route(key)[2]] for key in ("mul", "add")}
            for _ in step.steps:
                j, inner, _ = numbered[pos]
                pos += 1
                skipped = first(j, "skipped") is not None
                if isinstance(inner, Filter) and inner.api != "ref" and skipped != (not m.taken_over):
                    raise Failure("one-registry", f"step {j}: torch._native.registry is "
                                  f"{'not ' if skipped else ''}the reference's, the model says "
                                  f"{'it is' if m.taken_over else 'it is not'}")
                if not skipped:
                    apply(j, inner)
                for key in effects:
                    effects[key].append(m.route(key)[2])
                hazard[0] = m.fresh_routers != fresh
            callers = finished_thread(i, "callers", "Threads", "hang:callers",
                                      f"step {i}: a calling thread never finished")
            sample, bad = callers[2:4]
            if bad:
                kind = "error" if any(len(s) > 2 for s in sample) else "wrong-answer"
                raise Failure(f"callers-{kind}", f"step {i} {step!r}: {bad} bad calls, e.g. {sample}")
            hazard[0] = False
            made = callers[6]
            for key, seen_effects in effects.items():
                shapes = {None if e is None else e.shape() for e in seen_effects}
                if len(shapes) == 1 and None not in shapes:
                    m.must_warn |= seen_effects[0].warns if made[key] else set()
                    if m.stats_on:
                        m.add_counts(key, seen_effects[0], made[key])
                else:
                    m.unpin_stats((key,))
            check_calls(i, step)
            continue
        before = apply(i, step)
        check_calls(i, step, before)
    if "end" not in kinds:
        raise died("exit" if program.header.daemon_exit else "end")
    if result["timed_out"]:
        raise Failure("hang:exit", "the interpreter did not exit")
    where = _exit_place(program)
    if result["rc"] != 0:
        raise Failure(f"{where}:{_signal_name(result['rc'])}", _tail(stderr))
    if "INTERNAL ASSERT FAILED" in stderr or "ERROR: AddressSanitizer" in stderr:
        raise died("end")
    if "Exception ignored" in stderr:
        # An error no caller could catch reached the user's terminal (a
        # callback of ours run while the interpreter finalized): status 0
        # does not make it clean.
        raise Failure(f"{where}:exception-ignored", _excerpt(stderr, "Exception ignored"))


def _reordered(m, graph, how):
    if how == "reverse" or how == "copies_reverse":
        return list(reversed(graph))
    new = []
    for nid in graph:
        node = m.nodes[nid]
        copy_nid = len(m.nodes)
        m.nodes[copy_nid] = M.Node(copy_nid, node.key, node.dsl, "never", node.uncond, node.value,
                                   node.uncertain, node.raises)
        new.append(copy_nid)
    return new


def _reorder_reference(m, step) -> None:
    """The reference's reorder (its own API or the taken-over module's): all
    or nothing; with reregister, every changed graph is installed, and one at
    lc::f while lc::f is not defined makes the whole reorder raise."""
    changed = []
    for key in P.KEYS:
        graph = m.ref_graphs.get(key, [])
        new = _reordered(m, graph, step.how)
        if new != graph:
            m.ref_graphs[key] = new
            changed.append(key)
    if not step.reregister:
        return  # routers keep the chain they publish
    if "f" in changed and m.needs_router("f") and not m.f_defined:
        raise M.ModelError("f")
    for key in changed:
        m.ref_install(key, False)


def _excerpt(text: str, marker: str) -> str:
    at = text.find(marker)
    return text[max(0, at - 200):at + 400]


def _tail(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-12:])


def check(program: Program) -> tuple[tuple[str, str] | None, dict]:
    result = run_child(program)
    return judge(program, result), result


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", help="one program's repr, as a failure prints it")
    parser.add_argument("--show-script", action="store_true", help="print the child script")
    parser.add_argument("--shrink", type=float, metavar="SECONDS",
                        help="if it fails, shrink it for up to SECONDS first (explore.shrink: "
                             "the smallest program found that fails the same way)")
    args = parser.parse_args(argv)
    if args.program:
        program = eval(args.program, {**vars(P), "Program": Program, "Header": Header})
        failure, result = check(program)
        if failure is not None and args.shrink:
            import time

            from .explore import shrink
            program = shrink(program, failure[0], time.monotonic() + args.shrink)
            print(f"shrunk: {program!r}")
            failure, result = check(program)
        if args.show_script:
            print(result["script"])
        print(json.dumps(result["observations"])[:4000])
        print(result["stderr"][-3000:], file=sys.stderr)
        print("FAILURE" if failure else "ok", failure or "")
        return 1 if failure else 0
    parser.error("give --program (or run check_lifecycle.py with NR_LIFECYCLE_SEED)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
