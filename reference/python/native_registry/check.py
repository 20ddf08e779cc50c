"""``check_overrides``: opcheck for overrides.

For each installed override graph (or the graphs of one op), each sample
input and each node of the router's chain whose cond accepts the sample, the
node's impl is checked against the op itself:

- ``outputs``: the impl's outputs (and the arguments the schema lets it write)
  against the op's own kernel at the graph's key, ``torch.testing.assert_close``
  at the dtype's tolerances, dtype, shape and device included;
- ``inputs_unchanged``: arguments the schema marks immutable keep their values
  and their version counter;
- ``aliasing``: a return the schema declares an alias of an argument is one, and
  any other return shares no storage with an argument;
- ``fake``: the node's ``_native`` op under ``FakeTensorMode`` gives the shape and
  dtype the impl gives;
- ``gradients``: for a graph below autograd, gradients through the op (routed to
  the node, so through the op's autograd formula) against the op's kernel's;
- ``compile``: ``torch.compile(backend="aot_eager")`` gives the eager result;
- ``export``: ``torch.export`` then ``run_decompositions(native_decomp_table())``
  gives the eager result.

The op's own kernel (the "fallback") is reached by disabling the op's
overrides inside a snapshot, under ``_unconditional_masked()``, and restoring
the snapshot, which puts registry and dispatcher back exactly. While that
window is open (one per graph, a few kernel calls long) other threads calling
the op get the op's own kernel: a correct result, not the override's. Nothing
else changes the registry: impls are called directly, and a node's runtime is
initialised only after its cond accepted a sample.

``python -m native_registry.check MODULE[:FUNCTION]`` imports a registrar (and
calls FUNCTION), installs what it registered and prints the report.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from . import _C
from . import registry
from .compile_routing import _reaches_key

__all__ = ["CHECKS", "CheckReport", "CheckResult", "check_overrides", "main"]

CHECKS: tuple[str, ...] = (
    "outputs", "inputs_unchanged", "aliasing", "fake", "gradients", "compile", "export")

# Per sample, what a check found (a finding): None (passed), a str (failed:
# why), or _Skip (not applicable to this sample: why).


class _Skip(str):
    """A sample a check cannot judge, with why."""


# ---- the report -----------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """One check of one node: 'pass' (every applicable sample), 'fail' (at
    ``sample``, the first that failed) or 'skip' (no applicable sample: ``detail``
    says why)."""

    graph: tuple[str, str, str]
    node_id: str
    dsl_name: str
    check: str
    status: str
    sample: str | None = None
    detail: str = ""

    def where(self) -> str:
        lib, op, key = self.graph
        return f"{lib}::{op}/{key}"


@dataclass
class CheckReport:
    """Every (node, check) result; ``failures`` the failed ones; ``str()`` the table."""

    results: list[CheckResult] = field(default_factory=list)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def result(self, node_id: str, check: str) -> CheckResult:
        """The result of ``check`` for the node ``node_id``."""
        for r in self.results:
            if r.node_id == node_id and r.check == check:
                return r
        raise KeyError(f"no result for node {node_id!r}, check {check!r}")

    def __str__(self) -> str:
        head = ("graph", "node", "check", "result", "detail")
        rows = [(r.where(), f"{r.node_id} ({r.dsl_name})", r.check, r.status.upper(),
                 ": ".join(x for x in (r.sample, " ".join(r.detail.split())) if x))
                for r in self.results]
        widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(head[:-1])]
        lines = []
        previous: tuple[str, str] | None = None
        for row in [head, *rows]:
            shown = list(row)
            if previous == (row[0], row[1]) and row is not head:
                shown[0], shown[1] = "", ""  # one graph and node per block
            previous = (row[0], row[1])
            lines.append("  ".join(c.ljust(w) for c, w in zip(shown, widths)) + "  " + shown[-1])
        counts = {s: sum(r.status == s for r in self.results) for s in ("pass", "fail", "skip")}
        if not self.results:
            lines.append("(no installed override graph)")
        lines.append(f"{len(self.results)} checks: {counts['pass']} passed, "
                     f"{counts['fail']} failed, {counts['skip']} skipped")
        return "\n".join(line.rstrip() for line in lines)


# ---- samples ----------------------------------------------------------------------


@dataclass
class _Sample:
    index: int
    args: tuple          # the torch.library form: trailing defaults left out
    kwargs: dict         # keyword-only arguments not at their default
    text: str


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"{dtype}{list(value.shape)}" + ("" if value.is_contiguous() else " strided")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_describe_value(v) for v in value) + "]"
    return repr(value)


def _describe(index: int, op_name: str, args: tuple, kwargs: dict) -> str:
    parts = [_describe_value(a) for a in args] + [f"{k}={_describe_value(v)}"
                                                  for k, v in kwargs.items()]
    return f"sample {index} {op_name}({', '.join(parts)})"


def _fits(jit_type: Any, value: Any) -> bool:
    """Whether a value can stand where the schema has `jit_type` (tensors
    checked; other types left to the op, which raises for the fallback too)."""
    kind = jit_type.kind()
    if kind == "TensorType":
        return isinstance(value, torch.Tensor)
    if kind == "OptionalType":
        return value is None or _fits(jit_type.getElementType(), value)
    if kind == "ListType" and jit_type.getElementType().kind() in ("TensorType", "OptionalType"):
        return isinstance(value, (list, tuple)) and all(
            _fits(jit_type.getElementType(), v) for v in value)
    return not isinstance(value, torch.Tensor) or value.dim() == 0


def _at_default(argument: Any, value: Any) -> bool:
    if not argument.has_default_value() or isinstance(value, torch.Tensor):
        return False
    default = argument.default_value
    if isinstance(value, bool) != isinstance(default, bool):
        return False  # True == 1, but a bool is no int default
    try:
        return bool(value == default)
    except Exception:  # a value that does not compare: keep it
        return False


def _bind(schema: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | str:
    """The sample as a torch.library kernel of the op gets it (trailing
    arguments at their default left out, keyword-only ones as keywords unless
    at their default), or why it does not fit the schema."""
    params = list(schema.arguments)
    positional = [p for p in params if not p.kwarg_only]
    if len(args) > len(positional):
        return f"{len(args)} positional arguments, the schema takes {len(positional)}"
    values = {p.name: v for p, v in zip(positional, args)}
    names = {p.name for p in params}
    for name, value in kwargs.items():
        if name not in names:
            return f"no argument {name!r} in the schema"
        if name in values:
            return f"argument {name!r} given twice"
        values[name] = value
    for p in params:
        if p.name not in values:
            if not p.has_default_value():
                return f"argument {p.name!r} missing"
        elif not _fits(p.type, values[p.name]):
            return f"argument {p.name!r} is {type(values[p.name]).__name__}, the schema has {p.type}"
    out_args = [values.get(p.name, p.default_value if p.has_default_value() else None)
                for p in positional]
    while positional and (positional[-1].name not in values or _at_default(
            positional[-1], values[positional[-1].name])) and positional[-1].has_default_value():
        positional.pop()
        out_args.pop()
    out_kwargs = {p.name: values[p.name] for p in params
                  if p.kwarg_only and p.name in values and not _at_default(p, values[p.name])}
    return tuple(out_args), out_kwargs


def _op_db_samples(overload: Any, device: torch.device, per_dtype: int) -> list[tuple]:
    """The first `per_dtype` samples of each dtype from the OpInfos of this
    aten op (op_db: torch's own test inputs) that fit its schema, as
    (args, kwargs)."""
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as exc:  # it needs torch's test-only dependencies (expecttest, ...)
        raise RuntimeError(
            f"the default samples come from torch's op_db, which could not be imported ({exc}); "
            "install what it needs or pass samples=") from exc

    base = overload._schema.name.split("::", 1)[1].rstrip("_")
    taken: list[tuple] = []
    for info in (i for i in op_db if i.aten_name == base or i.name == base):
        for dtype in sorted(info.supported_dtypes(device.type), key=str):
            of_dtype: list[tuple] = []
            try:
                with warnings.catch_warnings():
                    # ComplexHalf and the like warn that they are experimental.
                    warnings.simplefilter("ignore", UserWarning)
                    for sample in info.sample_inputs(device, dtype):
                        if len(of_dtype) >= per_dtype:
                            break
                        args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
                        if not isinstance(_bind(overload._schema, args, kwargs), str):
                            of_dtype.append((args, kwargs))
            except Exception:  # an OpInfo's generator that fails on this dtype: what it gave
                pass
            taken.extend(of_dtype)
    return taken


def _caller_samples(samples: Iterable) -> Iterator[tuple]:
    for item in samples:
        if all(hasattr(item, a) for a in ("input", "args", "kwargs")):  # a SampleInput
            yield (item.input, *item.args), dict(item.kwargs)
        elif (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], (tuple, list))
              and isinstance(item[1], dict)):
            yield tuple(item[0]), dict(item[1])
        else:
            raise TypeError("samples must be SampleInputs or (args, kwargs) pairs (a tuple or "
                            f"list and a dict), got {type(item).__name__}: {item!r:.200}")


def _clone(value: Any) -> Any:
    return pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), value)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


def _flat_args(schema: Any, args: tuple, kwargs: dict) -> list:
    """A call's value of each schema argument, in the schema's order: the
    positionals, then the rest by name (None where not given)."""
    return list(args) + [kwargs.get(a.name) for a in schema.arguments[len(args):]]


def _alias_annotation(ret: Any) -> str:
    """A schema return's type with its alias annotation, e.g. 'Tensor(a!)'."""
    return (f"{ret.type}({'|'.join(sorted(ret.alias_info.before_set))}"
            f"{'!' if ret.alias_info.is_write else ''})")


# ---- one graph --------------------------------------------------------------------


def _first_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _compare(actual: Any, expected: Any, what: str) -> str | None:
    if not isinstance(actual, (list, tuple)):
        actual = (actual,)
    if not isinstance(expected, (list, tuple)):
        expected = (expected,)
    if len(actual) != len(expected):
        return f"{what}: {len(actual)} outputs, the op gives {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        try:
            torch.testing.assert_close(a, e, equal_nan=True)
        except Exception as exc:  # AssertionError, or a TypeError for values of other types
            detail = " ".join(str(exc).split())
            return f"{what} {i}: {detail[:300]}"
    return None


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values, NaN equal to NaN."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_complex():
        a, b = torch.view_as_real(a.resolve_conj()), torch.view_as_real(b.resolve_conj())
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def _storage_key(t: torch.Tensor) -> int | None:
    if t.numel() == 0 or t.is_meta:
        return None  # no storage to share
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return None


class _Graph:
    """The checks of one graph: samples, conds, the fallback's results, nodes."""

    def __init__(self, key: tuple[str, str, str], overload: Any, raw_samples: list[tuple],
                 checks: tuple[str, ...], compile_samples: int) -> None:
        self.key = key
        self.overload = overload
        self.schema = overload._schema
        self.checks = checks
        self.compile_samples = compile_samples
        self.op_name = f"{key[0]}::{key[1]}"
        self.samples: list[_Sample] = []
        self.unfit: list[str] = []
        for index, (args, kwargs) in enumerate(raw_samples):
            bound = _bind(self.schema, args, kwargs)
            if isinstance(bound, str):
                self.unfit.append(f"sample {index}: {bound}")
                continue
            if not _reaches_key(overload, key[2], *bound):
                self.unfit.append(f"sample {index}: it would not reach {key[2]} in eager")
                continue
            self.samples.append(_Sample(index, *bound, _describe(index, self.op_name, *bound)))
        self.mutable = {i for i, a in enumerate(self.schema.arguments) if a.is_write}
        self.chain = list(_C.published_chain(key))
        self.runtime: dict[str, str | None] = {}  # node_id -> None (ready) or why not
        self.grad_weights: dict[int, list] = {}

    # -- the router's view ---------------------------------------------------------

    def _accepts(self, handle: Any, sample: _Sample) -> bool | str:
        """The cond's answer, or why it could not give one (it raised)."""
        cond = handle.cond_fn
        try:
            if cond is None:
                return True
            if isinstance(cond, _C.predicates.Predicate):
                name, overload = self.schema.name, self.schema.overload_name
                return bool(cond.evaluate_on_call(name, overload, _clone(sample.args),
                                                  _clone(sample.kwargs)))
            return bool(cond(*_clone(sample.args), **_clone(sample.kwargs)))
        except Exception as exc:
            return f"cond raised {_first_error(exc)}"

    def _runtime_ready(self, handle: Any) -> str | None:
        """Asked once per node, and only for a node whose cond accepted."""
        if handle.node_id not in self.runtime:
            init = handle.try_initialize_runtime
            why = None
            if init is not None:
                try:
                    if not init():
                        why = "try_initialize_runtime() says the runtime is unavailable"
                except Exception as exc:
                    why = f"try_initialize_runtime() raised {_first_error(exc)}"
            self.runtime[handle.node_id] = why
        return self.runtime[handle.node_id]

    def route(self) -> None:
        """Per sample: the nodes whose cond accepts, the node the router picks."""
        self.accepted: dict[str, list[_Sample]] = {h.node_id: [] for h in self.chain}
        self.cond_errors: dict[str, tuple[_Sample, str]] = {}
        self.pick: dict[int, str] = {}
        for sample in self.samples:
            for handle in self.chain:
                answer = self._accepts(handle, sample)
                if isinstance(answer, str):
                    self.cond_errors.setdefault(handle.node_id, (sample, answer))
                    continue
                if not answer or self._runtime_ready(handle) is not None:
                    continue
                self.accepted[handle.node_id].append(sample)
                self.pick.setdefault(sample.index, handle.node_id)

    # -- gradients ---------------------------------------------------------------------

    def _gradients(self, sample: _Sample) -> Any:
        """Gradients of a weighted sum of the floating outputs, through the op
        (routed or not, as the registry stands); the weights are drawn once
        per sample, so that both runs use the same."""
        args, kwargs = _clone(sample.args), _clone(sample.kwargs)
        leaves = [t for t in _tensors((args, kwargs)) if t.is_floating_point() or t.is_complex()]
        for t in leaves:
            t.requires_grad_(True)
        outs = [t for t in _tensors(self.overload(*args, **kwargs))
                if t.requires_grad and (t.is_floating_point() or t.is_complex())]
        if not outs:
            return _Skip("no output depends differentiably on the inputs")
        weights = self.grad_weights.setdefault(sample.index, [
            torch.randn(o.shape, dtype=o.dtype, device=o.device,
                        generator=torch.Generator(o.device).manual_seed(i))
            for i, o in enumerate(outs)])
        grads = torch.autograd.grad(outs, leaves, weights, allow_unused=True)
        return [g.detach() if g is not None else torch.zeros_like(t).detach()
                for g, t in zip(grads, leaves)]

    def _why_no_gradients(self) -> str | None:
        if self.key[2].startswith("Autograd"):
            return f"the impl sits at {self.key[2]}, at autograd: its gradients are its own"
        if self.mutable:
            return "the op writes an argument in place"
        return None

    # -- phase 1: what the overrides do (the registry as it stands) ---------------------

    def _run_impl(self, handle: Any, sample: _Sample) -> dict[str, Any]:
        """Runs the impl once on fresh copies. Aliasing and fake are judged at
        once (no tensor op involved); outputs and inputs_unchanged later, with
        the overrides off (see judge)."""
        args, kwargs = _clone(sample.args), _clone(sample.kwargs)
        flat_args = _flat_args(self.schema, args, kwargs)
        before = [(_clone(v), [t._version for t in _tensors(v)]) for v in flat_args]
        try:
            out = handle.impl_fn(*args, **kwargs)
        except Exception as exc:
            why = f"the impl raised {_first_error(exc)}"
            return {"outputs": why, "inputs_unchanged": _Skip(why), "aliasing": _Skip(why),
                    "fake": _Skip(why)}
        found: dict[str, Any] = {
            "outputs": lambda: self._judge_outputs(sample, out, flat_args),
            "inputs_unchanged": lambda: self._unchanged(flat_args, before),
            "aliasing": self._aliasing(out, flat_args),
        }
        if "fake" in self.checks:
            found["fake"] = self._fake(handle, sample, out)
        return found

    def _unchanged(self, flat_args: list, before: list) -> str | None:
        for i, (value, (copy, versions)) in enumerate(zip(flat_args, before)):
            if i in self.mutable:
                continue
            name = self.schema.arguments[i].name
            for now, then, version in zip(_tensors(value), _tensors(copy), versions):
                # The version counter sees a write that left the values as
                # they were; the values, a write around the counter.
                same = _same_values(now, then)
                if now._version != version or not same:
                    return (f"argument {name!r}, which the schema marks immutable, was written "
                            f"(values {'unchanged' if same else 'changed'}, version "
                            f"{version} -> {now._version})")
        return None

    def _aliasing(self, out: Any, flat_args: list) -> str | None:
        outs = out if isinstance(out, (list, tuple)) else (out,)
        returns = list(self.schema.returns)
        if len(outs) != len(returns):
            return _Skip(f"{len(outs)} outputs, the schema returns {len(returns)}")
        storages: dict[int, str] = {}
        sets: dict[str, list[torch.Tensor]] = {}
        for arg, value in zip(self.schema.arguments, flat_args):
            for t in _tensors(value):
                key = _storage_key(t)
                if key is not None:
                    storages.setdefault(key, arg.name)
                if arg.alias_info is not None:
                    for alias_set in arg.alias_info.before_set:
                        sets.setdefault(alias_set, []).append(t)
        for i, (ret, value) in enumerate(zip(returns, outs)):
            if not isinstance(value, torch.Tensor):
                continue
            key = _storage_key(value)
            if ret.alias_info is None:
                if key is not None and key in storages:
                    return (f"output {i} shares storage with argument {storages[key]!r}; the "
                            "schema declares a fresh tensor")
                continue
            targets = [t for s in ret.alias_info.before_set for t in sets.get(s, [])]
            if key is not None and targets and all(_storage_key(t) != key for t in targets):
                return (f"output {i} is no alias of the argument the schema ties it to "
                        f"({_alias_annotation(ret)})")
            if ret.alias_info.is_write and targets and not any(value is t for t in targets):
                return (f"output {i} is not the argument it writes ({_alias_annotation(ret)}): "
                        "another tensor came back")
        return None

    def _fake(self, handle: Any, sample: _Sample, out: Any) -> Any:
        from torch._subclasses.fake_tensor import FakeTensorMode

        native = getattr(getattr(torch.ops._native, handle.node_id, None), "default", None)
        if native is None:
            return _Skip(f"no _native op {handle.node_id} (the node is not installed)")
        copies = (_clone(sample.args), _clone(sample.kwargs))
        try:
            with FakeTensorMode() as mode:
                fake_args, fake_kwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, copies)
                fake_out = native(*fake_args, **fake_kwargs)
        except Exception as exc:
            return f"the _native op under FakeTensorMode raised {_first_error(exc)}"
        real, fake = _tensors(out), _tensors(fake_out)
        if len(real) != len(fake):
            return f"{len(real)} tensors from the impl, {len(fake)} from the fake"
        for i, (r, f) in enumerate(zip(real, fake)):
            if r.shape != f.shape or r.dtype != f.dtype:
                return (f"output {i}: impl {_describe_value(r)}, fake {_describe_value(f)} "
                        f"(the _native op's meta)")
        return None

    def _eager(self, sample: _Sample) -> Any:
        """The op called as a user calls it: through the router."""
        try:
            return self.overload(*_clone(sample.args), **_clone(sample.kwargs))
        except Exception as exc:
            return _Skip(f"the routed eager call raised {_first_error(exc)}")

    def _compiled(self, sample: _Sample) -> Any:
        eager = self._eager(sample)
        # A code object of its own: Dynamo caches per code object, and a
        # shared one would reach its recompile limit and run eagerly unseen.
        namespace = {"op": self.overload}
        code = compile("def call(args, kwargs):\n    return op(*args, **kwargs)\n",
                       f"<native_registry.check {self.op_name} {sample.index}>", "exec")
        exec(code, namespace)
        fn = torch.compile(namespace["call"], backend="aot_eager", fullgraph=True, dynamic=False)
        try:
            got = fn(_clone(sample.args), _clone(sample.kwargs))
        except Exception as exc:
            return f"torch.compile(backend='aot_eager') raised {_first_error(exc)}"
        return eager if isinstance(eager, _Skip) else (
            lambda: _compare(got, eager, "compiled output (against eager)"))

    def _exported(self, sample: _Sample) -> Any:
        eager = self._eager(sample)
        leaves, spec = pytree.tree_flatten((_clone(sample.args), _clone(sample.kwargs)))
        tensor_at = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
        overload = self.overload

        class Call(torch.nn.Module):
            def forward(self, *tensors: torch.Tensor) -> Any:
                values = list(leaves)
                for i, t in zip(tensor_at, tensors):
                    values[i] = t
                args, kwargs = pytree.tree_unflatten(values, spec)
                return overload(*args, **kwargs)

        inputs = tuple(leaves[i] for i in tensor_at)
        try:
            with warnings.catch_warnings():
                # torch 2.13's own export code trips its pytree deprecation.
                warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
                program = torch.export.export(Call(), inputs).run_decompositions(
                    registry.native_decomp_table())
                got = program.module()(*_clone(inputs))
        except Exception as exc:
            return f"torch.export with native_decomp_table() raised {_first_error(exc)}"
        return eager if isinstance(eager, _Skip) else (
            lambda: _compare(got, eager, "exported output (against eager)"))

    def collect(self, handle: Any) -> dict[str, list[tuple[_Sample | None, Any]]]:
        """Per check, (sample, finding) in sample order: None passed, a str
        failed, a _Skip did not apply, a callable is judged with the
        overrides off (it compares with tensor ops, which the overrides
        under test would otherwise serve)."""
        node_id = handle.node_id
        findings: dict[str, list[tuple[_Sample | None, Any]]] = {c: [] for c in self.checks}
        if node_id in self.cond_errors and "outputs" in self.checks:
            # A raising cond fails the eager call that reaches it.
            findings["outputs"].append(self.cond_errors[node_id])
        accepted = self.accepted[node_id]
        per_call = [c for c in ("outputs", "inputs_unchanged", "aliasing", "fake")
                    if c in self.checks]
        for sample in accepted:
            if per_call:
                found = self._run_impl(handle, sample)
                for c in per_call:
                    findings[c].append((sample, found.get(c)))
        routed = [s for s in accepted if self.pick.get(s.index) == node_id]
        not_picked = _Skip("an earlier node of the chain takes every sample this cond accepts")
        if "gradients" in self.checks:
            why = self._why_no_gradients()
            for sample in routed:
                if why:
                    findings["gradients"].append((sample, _Skip(why)))
                    continue
                try:
                    grads = self._gradients(sample)
                except Exception as exc:
                    grads = f"gradients through the routed op raised {_first_error(exc)}"
                findings["gradients"].append((sample, grads if isinstance(grads, str) else (
                    lambda sample=sample, grads=grads: self._judge_gradients(sample, grads))))
            if accepted and not routed:
                findings["gradients"].append((None, not_picked))
        for check, run in (("compile", self._compiled), ("export", self._exported)):
            if check in self.checks:
                for sample in routed[:self.compile_samples]:
                    findings[check].append((sample, run(sample)))
                if accepted and not routed:
                    findings[check].append((None, not_picked))
        return findings

    # -- phase 2: the op's own kernel, and the verdicts (every override off) ----------------

    @contextlib.contextmanager
    def overrides_off(self) -> Iterator[None]:
        """Every installed override disabled (unconditional ones too) inside a
        snapshot, restored on exit: the op's own kernel answers, and the
        comparisons' own tensor ops are not served by the overrides under test."""
        keys = sorted({k[2] for k in _C.router_keys()})
        saved = registry.snapshot()
        try:
            with registry._unconditional_masked():
                registry.deregister_op_overrides(disable_dispatch_keys=keys)
                yield
        finally:
            registry.restore(saved)

    def fallback(self) -> None:
        """The op's own kernel's outputs (and gradients) for every accepted
        sample; run inside overrides_off()."""
        self.expected: dict[int, Any] = {}
        self.expected_grads: dict[int, Any] = {}
        wanted = {s.index: s for handle in self.chain for s in self.accepted[handle.node_id]}
        for index, sample in wanted.items():
            args, kwargs = _clone(sample.args), _clone(sample.kwargs)
            try:
                out = self.overload(*args, **kwargs)
                # What the op wrote, keyword-only arguments (out=) included.
                written = _flat_args(self.schema, args, kwargs)
                self.expected[index] = (out, [written[i] for i in sorted(self.mutable)])
            except Exception as exc:
                self.expected[index] = _Skip(f"the op's own kernel raised {_first_error(exc)}")
            if index in self.grad_weights:
                try:
                    self.expected_grads[index] = self._gradients(sample)
                except Exception as exc:
                    self.expected_grads[index] = _Skip(
                        f"the op's own gradients raised {_first_error(exc)}")

    def _judge_outputs(self, sample: _Sample, out: Any, flat_args: list) -> Any:
        expected = self.expected.get(sample.index)
        if isinstance(expected, _Skip):
            return expected
        exp_out, exp_written = expected
        why = _compare(out, exp_out, "output")
        if why:
            return why
        for i, e in zip(sorted(self.mutable), exp_written):
            if i < len(flat_args):
                why = _compare(flat_args[i], e, f"argument {self.schema.arguments[i].name!r} "
                                                "as written")
                if why:
                    return why
        return None

    def _judge_gradients(self, sample: _Sample, grads: list) -> Any:
        """`grads`: the routed call's gradients. collect() judges only those
        _gradients() returned, having drawn the sample's weights, so
        fallback() computed the op's own for the sample too."""
        expected = self.expected_grads[sample.index]
        if isinstance(expected, _Skip):
            return expected
        return _compare(grads, expected, "gradient")

    def judge(self, handle: Any, findings: dict[str, list]) -> list[CheckResult]:
        """The results of one node's checks; run inside overrides_off()."""
        node_id = handle.node_id

        def result(check: str, status: str, sample: str | None = None,
                   detail: str = "") -> CheckResult:
            return CheckResult(self.key, node_id, handle.dsl_name, check, status, sample,
                               str(detail))

        accepted = self.accepted[node_id]
        why_none = None
        if self.runtime.get(node_id) is not None:
            why_none = self.runtime[node_id]
        elif not self.samples:
            why_none = "no sample fits the op's schema at this key" + (
                f" ({self.unfit[0]}, ...)" if self.unfit else "")
        elif not accepted and node_id not in self.cond_errors:
            why_none = f"the cond declined all {len(self.samples)} samples"
        if why_none is not None:
            return [result(c, "skip", None, why_none) for c in self.checks]

        results = []
        for check in self.checks:
            entries = []
            for sample, finding in findings[check]:
                if callable(finding):
                    try:
                        finding = finding()
                    except Exception as exc:  # a comparison that could not run
                        finding = f"the comparison raised {_first_error(exc)}"
                entries.append((sample, finding))
            failed = next(((s, f) for s, f in entries
                           if f is not None and not isinstance(f, _Skip)), None)
            passed = sum(f is None for _, f in entries)
            if failed is not None:
                results.append(result(check, "fail", failed[0].text, failed[1]))
            elif passed:
                noun = "sample" if len(entries) == 1 else "samples"
                results.append(result(check, "pass", None, f"{passed} of {len(entries)} {noun}"
                                      if passed != len(entries) else f"{passed} {noun}"))
            else:
                why = next((f for _, f in entries if isinstance(f, _Skip)),
                           "the cond accepted no sample" if not accepted else "no sample")
                results.append(result(check, "skip", None, why))
        return results


# ---- the entry point ----------------------------------------------------------------


def _parse_op(op: Any) -> tuple[str | None, str]:
    """(namespace or None for any, op symbol with its overload)."""
    if isinstance(op, torch._ops.OpOverload):
        schema = op._schema
        lib, name = schema.name.split("::", 1)
        return lib, name + (f".{schema.overload_name}" if schema.overload_name else "")
    if isinstance(op, torch._ops.OpOverloadPacket):
        lib, name = op._qualified_op_name.split("::", 1)
        return lib, name
    if not isinstance(op, str):
        raise TypeError(f"op must be an OpOverload or a str like 'aten::mul.Tensor', got "
                        f"{type(op).__name__}: {op!r}")
    if not op or op.count("::") > 1 or op.startswith("::") or op.endswith("::"):
        raise ValueError(f"op must name an op like 'aten::mul.Tensor' or 'mul.Tensor', got {op!r}")
    if "::" in op:
        lib, name = op.split("::")
        return lib, name
    return None, op


def _symbol_matches(symbol: str, wanted: str) -> bool:
    # 'mul' names mul.default, as upstream's op symbols do.
    return symbol == wanted or symbol == f"{wanted}.default" or f"{symbol}.default" == wanted


def check_overrides(
    op: Any = None,
    *,
    samples: Iterable | None = None,
    device: str | torch.device = "cpu",
    checks: Iterable[str] = CHECKS,
    samples_per_dtype: int = 2,
    compile_samples: int = 1,
) -> CheckReport:
    """Check every installed override graph (or those of ``op``) against its op.

    Args:
        op: None (every installed graph), an ``OpOverload``, or a name
            ("aten::mul.Tensor", or "mul.Tensor" in any namespace).
        samples: an iterable of ``SampleInput``s or ``(args, kwargs)`` pairs, used
            for every graph checked; by default, per op, the first
            ``samples_per_dtype`` samples of each dtype from the OpInfos of that
            aten op in ``torch.testing._internal.common_methods_invocations.op_db``
            (samples that do not fit the overload's schema left out), on ``device``.
        device: where the default samples are made.
        checks: a subset of :data:`CHECKS`.
        samples_per_dtype: how many default samples per dtype (CPU time).
        compile_samples: how many samples per node compile and export try (each
            is a compilation).

    Returns a :class:`CheckReport`: one result per node of each checked graph
    and check. The registry and the dispatcher are as they were on return.

    Raises:
        TypeError: ``op``, ``samples`` or ``checks`` of the wrong type.
        ValueError: an unknown check, a bad device, a non-positive count, or an
            ``op`` with no installed override graph.
    """
    if isinstance(checks, str):
        checks = (checks,)
    checks = tuple(checks)
    for name in checks:
        if name not in CHECKS:
            raise ValueError(f"unknown check {name!r}; the checks are {', '.join(CHECKS)}")
    checks = tuple(c for c in CHECKS if c in checks)  # the table's order, once each
    for name, value in (("samples_per_dtype", samples_per_dtype),
                        ("compile_samples", compile_samples)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device {device!r} is not a torch device: {exc}") from None
    if samples is not None:
        if isinstance(samples, (str, bytes)) or not isinstance(samples, Iterable):
            raise TypeError(f"samples must be an iterable of SampleInputs or (args, kwargs) "
                            f"pairs, got {type(samples).__name__}")
        samples = list(_caller_samples(samples))

    installed = list(_C.router_keys())
    keys = installed
    if op is not None:
        lib, symbol = _parse_op(op)
        keys = [k for k in installed
                if (lib is None or k[0] == lib) and _symbol_matches(k[1], symbol)]
        if not keys:
            registered = [k for k in _C.graph_keys()
                          if (lib is None or k[0] == lib) and _symbol_matches(k[1], symbol)]
            raise ValueError(
                f"op {op!r} has no installed override graph" + (
                    f" (registered at {', '.join(k[2] for k in registered)}, not installed: "
                    "register_all_overrides() first)" if registered else ""))

    report = CheckReport()
    default_samples: dict[Any, list[tuple]] = {}
    for key in sorted(keys):
        overload = registry._resolve_overload(key[0], key[1])
        chain = list(_C.published_chain(key))
        if overload is None:
            for handle in chain:
                report.results.extend(CheckResult(key, handle.node_id, handle.dsl_name, c, "skip",
                                                  None, "the op is not in the dispatcher")
                                      for c in checks)
            continue
        if samples is None and overload not in default_samples:
            default_samples[overload] = _op_db_samples(overload, device, samples_per_dtype)
        graph = _Graph(key, overload, samples if samples is not None else default_samples[overload],
                       checks, compile_samples)
        graph.route()
        pending = [(handle, graph.collect(handle)) for handle in chain]
        with graph.overrides_off():
            graph.fallback()
            for handle, findings in pending:
                report.results.extend(graph.judge(handle, findings))
        routed_ids = {h.node_id for h in chain}
        for node in registry.graph(*key):
            if node.node_id not in routed_ids:
                report.results.extend(CheckResult(
                    key, node.node_id, node.dsl_name, c, "skip", None,
                    "not in the router's chain (disabled by the filters, or new since the "
                    "graph's install)") for c in checks)
    return report


# ---- python -m native_registry.check ----------------------------------------------------


def _load(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    if not attr:
        return module
    value: Any = module
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m native_registry.check",
        description="Import a registrar (MODULE, and call FUNCTION), install what it "
                    "registered, check each override against its op and print the report. "
                    "Exit status 1 when a check failed.")
    parser.add_argument("registrar", metavar="MODULE[:FUNCTION]")
    parser.add_argument("--op", help="check only this op's graphs ('aten::mul.Tensor')")
    parser.add_argument("--device", default="cpu", help="where default samples are made")
    parser.add_argument("--checks", default=",".join(CHECKS),
                        help=f"comma-separated, of: {', '.join(CHECKS)}")
    parser.add_argument("--samples", metavar="MODULE:NAME",
                        help="an iterable of SampleInputs or (args, kwargs) pairs, or a "
                             "function returning one (default: op_db's samples)")
    parser.add_argument("--samples-per-dtype", type=int, default=2)
    parser.add_argument("--compile-samples", type=int, default=1)
    options = parser.parse_args(argv)
    with registry.scoped():
        try:
            registrar = _load(options.registrar)
            if options.registrar.partition(":")[2]:
                if not callable(registrar):
                    parser.error(f"{options.registrar} is not callable")
                registrar()
            samples = None
            if options.samples:
                samples = _load(options.samples)
                if callable(samples):
                    samples = samples()
        except (ImportError, AttributeError) as exc:
            parser.error(f"cannot load {options.registrar} or its samples: {exc}")
        registry.register_all_overrides()
        report = check_overrides(
            options.op, samples=samples, device=options.device,
            checks=[c.strip() for c in options.checks.split(",") if c.strip()],
            samples_per_dtype=options.samples_per_dtype, compile_samples=options.compile_samples)
    print(report)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
