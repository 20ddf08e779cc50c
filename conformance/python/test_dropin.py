"""What code moved from upstream's registry must find unchanged: the
arguments a cond and an impl receive (eager, compile and export alike), when
try_initialize_runtime runs, which dispatch keys are refused, composite ops,
the mask against snapshots, torch's own front ends and torch 2.13's forms."""

from __future__ import annotations

import re

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from conftest import NS, NS2, behaviour, kernel_receives, run_in_fresh_interpreter

from fixtures.python.torch_fixtures import A, B, STOCK, mul
from fixtures.python.torch_fixtures import MUL_CPU as KEY


def recording_cond(calls: list, answer: bool = False):
    """A cond that declines (or accepts) and records the form of each call:
    tensors as "Tensor", anything else as the object itself."""
    def form(value):
        if isinstance(value, torch.Tensor):
            return "Tensor"
        if isinstance(value, torch.Generator):  # a new wrapper of the same generator each call
            return ("Generator", value.device, value.initial_seed())
        if isinstance(value, (list, tuple)):
            return type(value)(form(v) for v in value)
        return value

    def cond(*args, **kwargs):
        calls.append((tuple(form(a) for a in args), {k: form(v) for k, v in kwargs.items()}))
        return answer
    return cond


def refuses_impl(*args, **kwargs):
    raise AssertionError("impl must not run")


# Each case: (op symbol, a call, the args and kwargs torch.library hands a
# Python kernel for it). Trailing arguments at their defaults are not
# passed; keyword-only ones are keywords; dtype, layout, memory_format,
# device and generator arrive as torch objects.
GENERATOR = torch.Generator().manual_seed(0)
ARGUMENT_CASES = {
    "topk-trailing-defaults": (
        "topk", lambda: torch.topk(torch.arange(5.0), 2), (("Tensor", 2), {})),
    "topk-a-default-before-a-given-one": (
        "topk", lambda: torch.topk(torch.arange(5.0), 2, largest=False),
        (("Tensor", 2, -1, False), {})),
    "add-alpha-1.0-is-not-the-default-1": (
        "add.Tensor", lambda: torch.add(torch.ones(2), torch.ones(2), alpha=1.0),
        (("Tensor", "Tensor"), {"alpha": 1.0})),
    "add-alpha-at-its-default": (
        "add.Tensor", lambda: torch.add(torch.ones(2), torch.ones(2), alpha=1),
        (("Tensor", "Tensor"), {})),
    "sum-keepdim-given": (
        "sum.dim_IntList", lambda: torch.ones(3).sum(dim=[0], keepdim=True),
        (("Tensor", [0], True), {})),
    "sum-dtype-keyword": (
        "sum.dim_IntList", lambda: torch.ones(3).sum(dim=[0], dtype=torch.float64),
        (("Tensor", [0]), {"dtype": torch.float64})),
    "empty-like-layout-device-memory-format": (
        "empty_like",
        lambda: torch.empty_like(torch.ones(2), dtype=torch.float16, layout=torch.strided,
                                 device="cpu", memory_format=torch.contiguous_format),
        # torch's Python binding passes pin_memory=False, which is not the default None
        (("Tensor",), {"dtype": torch.float16, "layout": torch.strided,
                       "device": torch.device("cpu"), "pin_memory": False,
                       "memory_format": torch.contiguous_format})),
    "normal-generator": (
        "normal.Tensor_float", lambda: torch.normal(torch.zeros(2), 1.0, generator=GENERATOR),
        (("Tensor",), {"generator": ("Generator", torch.device("cpu"), 0)})),
}


def torch_library_kernel_sees(op_symbol: str, call) -> tuple:
    """What a torch.library Python kernel at CPU receives for `call` (the
    oracle, from torch), as recorded here."""
    calls = []
    kernel_receives(op_symbol, call, recording_cond(calls))
    return calls[0]



@behaviour("arguments.torch-library-forms")
@pytest.mark.parametrize("case", sorted(ARGUMENT_CASES))
def test_a_cond_gets_the_arguments_a_torch_library_kernel_gets(impl, case):
    op_symbol, call, expected = ARGUMENT_CASES[case]
    calls = []
    impl.register("test_dsl", "aten", op_symbol, "CPU", recording_cond(calls), refuses_impl)
    impl.install("aten", op_symbol, "CPU")
    call()
    assert calls == [expected]
    args, kwargs = calls[0]
    for name, value in kwargs.items():  # the objects themselves, not codes that compare unequal
        assert type(value) is type(expected[1][name]), (name, value)
    assert torch_library_kernel_sees(op_symbol, call) == expected, "the table agrees with torch"


@behaviour("arguments.torch-library-forms")
def test_an_accepting_override_hands_its_impl_the_same_arguments(impl):
    seen = []

    def topk_impl(*args, **kwargs):
        seen.append((len(args), sorted(kwargs)))
        x, k = args
        values, indices = torch.sort(x, descending=True)
        return values[:k], indices[:k]

    def sum_impl(x, dim, keepdim=False, *, dtype=None):
        seen.append(dtype)
        return torch.full((), 7.0, dtype=dtype)

    impl.register("test_dsl", "aten", "topk", "CPU", lambda x, k: True, topk_impl)
    impl.register("test_dsl", "aten", "sum.dim_IntList", "CPU",
                  lambda x, dim, keepdim=False, *, dtype=None: dtype == torch.float64, sum_impl)
    impl.install("aten", "topk", "CPU")
    impl.install("aten", "sum.dim_IntList", "CPU")
    values, _ = torch.topk(torch.arange(5.0), 2)
    assert values.tolist() == [4.0, 3.0]
    assert torch.ones(3).sum(dim=[0], dtype=torch.float64).item() == 7.0
    assert torch.ones(3).sum(dim=[0]).item() == 3.0  # dtype None: the cond declines
    assert seen == [(2, []), torch.float64]


@behaviour("arguments.accepting-cond-hands-its-arguments-on")
def test_the_impl_gets_the_arguments_as_the_accepting_cond_left_them(impl):
    seen = []

    def extending_cond(x, dim, keepdim=False, *, dtype=None):
        dim.append(0)  # the cond changes a list argument, then accepts
        return True

    def sum_impl(x, dim, keepdim=False, *, dtype=None):
        seen.append(list(dim))
        return torch.full((), 7.0)

    impl.register("test_dsl", "aten", "sum.dim_IntList", "CPU", extending_cond, sum_impl)
    impl.install("aten", "sum.dim_IntList", "CPU")
    assert torch.ones(3).sum(dim=[0]).item() == 7.0
    assert seen == [[0, 0]], "the impl did not get the list the cond was given"


class TopkAndSum(torch.nn.Module):
    def forward(self, x):
        return torch.topk(x, 2).values.sum(dim=[0], dtype=torch.float64)


def cond_forms_by_path(impl, path: str) -> list:
    """The forms the two conds saw for TopkAndSum, run by `path`."""
    calls = []
    for op_symbol in ("topk", "sum.dim_IntList"):
        impl.register("test_dsl", "aten", op_symbol, "CPU", recording_cond(calls), refuses_impl)
        impl.install("aten", op_symbol, "CPU")
    x = torch.arange(5.0)
    if path == "eager":
        TopkAndSum()(x)
    elif path == "export":
        torch.export.export(TopkAndSum(), (x,)).run_decompositions(impl.decomp_table())
    else:
        torch._dynamo.reset()
        backend = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                               decompositions=impl.decomp_table())
        torch.compile(TopkAndSum(), backend=backend, fullgraph=True)(x)
        torch._dynamo.reset()
    return calls


@behaviour("arguments.torch-library-forms")
@pytest.mark.parametrize("path", ["compile", "export"])
def test_compile_and_export_routers_hand_the_cond_the_eager_arguments(impl, path):
    with impl.scope():
        eager = cond_forms_by_path(impl, "eager")
    assert eager == [(("Tensor", 2), {}), (("Tensor", [0]), {"dtype": torch.float64})]
    traced = cond_forms_by_path(impl, path)
    # A tracer may consult a cond more than once; each time with eager's form.
    assert {repr(call) for call in traced} == {repr(call) for call in eager}, traced


# ---- try_initialize_runtime ---------------------------------------------------


@behaviour("routing.runtime-asked-each-matched-call")
def test_the_runtime_is_asked_on_every_matched_call_right_before_the_impl(impl):
    events = []

    def cond(a, b):
        events.append("cond")
        return True

    def runtime():
        events.append("runtime")
        return True

    def body(a, b):
        events.append("impl")
        return torch.full_like(a, 3.0)

    impl.register("test_dsl", *KEY, cond, body, try_initialize_runtime=runtime)
    impl.install(*KEY)
    for _ in range(3):
        assert torch.equal(mul(), torch.tensor([3.0, 3.0]))
    assert events == ["cond", "runtime", "impl"] * 3


@behaviour("routing.runtime-asked-each-matched-call", "routing.runtime-unavailable-skips")
def test_an_unavailable_runtime_continues_with_the_next_node_each_call(impl):
    events = []

    def node(name, runtime_answer):
        def cond(a, b):
            events.append(f"{name}.cond")
            return True

        def runtime():
            events.append(f"{name}.runtime")
            return runtime_answer
        return cond, runtime

    cond_a, runtime_a = node("a", False)
    cond_b, runtime_b = node("b", True)
    impl.register("a", *KEY, cond_a, refuses_impl, try_initialize_runtime=runtime_a)
    impl.register("b", *KEY, cond_b, lambda a, b: torch.full_like(a, 5.0),
                  try_initialize_runtime=runtime_b)
    impl.install(*KEY)
    for _ in range(2):
        assert torch.equal(mul(), torch.tensor([5.0, 5.0]))
    assert events == ["a.cond", "a.runtime", "b.cond", "b.runtime"] * 2


# ---- dispatch keys ---------------------------------------------------------------


@behaviour("validation.keys-where-no-kernel-runs")
@pytest.mark.parametrize("key,suggests", [("Dense", "CPU"), ("Sparse", "SparseCPU"),
                                          ("AutogradFunctionality", "AutogradCPU"),
                                          ("Quantized", "QuantizedCPU")])
def test_a_functionality_key_is_refused_naming_usable_keys(impl, key, suggests):
    with pytest.raises(ValueError) as error:
        impl.register("test_dsl", "aten", "mul.Tensor", key, lambda *a, **k: True, refuses_impl)
    assert key in str(error.value) and suggests in str(error.value)
    # The suggestions are a list: a separator at the start, after a space or
    # an opening bracket, or before a closing one, stands for an empty entry.
    assert not re.search(r"(^|[\s(\[{:])[,;]|[,;]\s*($|[)\]};,])", str(error.value)), str(error.value)
    assert impl.graph("aten", "mul.Tensor", key) == []


def install_declining_at(impl, key):
    """A declining override of mul.Tensor at `key`, installed; a CPU call
    still gives the stock result. The fixture checks afterwards that the
    dispatcher is as before."""
    calls = []
    impl.register("test_dsl", "aten", "mul.Tensor", key, recording_cond(calls), refuses_impl)
    impl.install("aten", "mul.Tensor", key)
    assert impl.router_installed("aten", "mul.Tensor", key)
    assert torch.equal(mul(), STOCK)
    if key in ("CPU", "AutogradCPU"):  # keys a plain CPU call passes through
        assert calls == [(("Tensor", "Tensor"), {})]


@behaviour("validation.working-keys-keep-working")
@pytest.mark.parametrize("key", ["CPU", "CUDA", "AutogradCPU", "AutocastCPU", "Python",
                                 "FuncTorchBatched", "Functionalize"])
def test_every_key_that_works_installs_and_tears_down(impl, key):
    install_declining_at(impl, key)


@behaviour("routing.fallback-past-a-fallthrough-key")
@pytest.mark.parametrize("key", ["BackendSelect", "ADInplaceOrView"])
def test_keys_where_mul_falls_through_install_and_tear_down(impl, key):
    """Every call passes these keys (they are always included), and mul's
    entry there is a fallthrough: a declined call must go past it."""
    install_declining_at(impl, key)


# ---- composite ops -----------------------------------------------------------------


@behaviour("validation.composite-implicit-refused-at-backend-key")
@pytest.mark.parametrize("op_symbol", ["matmul", "linear"])
def test_a_composite_implicit_op_is_refused_at_a_backend_key(impl, op_symbol):
    with pytest.raises(ValueError) as error:
        impl.register("test_dsl", "aten", op_symbol, "CPU", lambda *a, **k: False, refuses_impl)
    message = str(error.value)
    assert f"aten::{op_symbol}" in message and "CompositeImplicitAutograd" in message
    assert "AutogradCPU" in message, "the message says where to register instead"
    assert impl.graph("aten", op_symbol, "CPU") == []


@behaviour("routing.composite-implicit-gradients-at-autograd-key")
def test_a_declining_override_of_matmul_at_autograd_cpu_keeps_its_gradients(impl):
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, 2, requires_grad=True)
    (a @ b).sum().backward()
    expected = (a.grad.clone(), b.grad.clone())
    a.grad = b.grad = None
    calls = []
    impl.register("test_dsl", "aten", "matmul", "AutogradCPU", recording_cond(calls), refuses_impl)
    impl.install("aten", "matmul", "AutogradCPU")
    (a @ b).sum().backward()
    assert calls, "the override saw the call"
    assert torch.allclose(a.grad, expected[0]) and torch.allclose(b.grad, expected[1])


# ---- the mask and snapshots ----------------------------------------------------------


@behaviour("unconditional.restore-follows-current-mask")
def test_a_snapshot_taken_inside_the_mask_restores_routing_that_matches_active(impl):
    impl.register("test_dsl", *KEY, None, lambda a, b: torch.full_like(a, 9.0),
                  unconditional_override=True)
    impl.install(*KEY)
    impl.disable(dsl_names=["test_dsl"])
    unconditional = torch.tensor([9.0, 9.0])
    assert torch.equal(mul(), unconditional)
    inner = None
    with impl.unconditional_masked():
        assert torch.equal(mul(), STOCK)
        inner = impl.scope()
        inner.__enter__()  # a snapshot taken while the mask is on
    assert torch.equal(mul(), unconditional)
    inner.__exit__(None, None, None)  # restored with the mask lifted
    node = impl.graph(*KEY)[0]
    assert node.active
    assert torch.equal(mul(), unconditional), "the node says active, so it must route"


@behaviour("unconditional.restore-activates-native-ops-the-mask-let-in")
def test_a_restore_under_a_lifted_mask_activates_the_native_op_of_the_node_it_publishes(impl):
    impl.register("declining_dsl", *KEY, lambda *a, **k: False, lambda a, b: torch.full_like(a, 7.0))
    impl.register("test_dsl", *KEY, None, lambda a, b: torch.full_like(a, 9.0),
                  unconditional_override=True)
    impl.disable(dsl_names=["test_dsl"])
    inner = impl.scope()
    with impl.unconditional_masked():
        impl.install(*KEY)  # routes through the declining override only
        assert torch.equal(mul(), STOCK)
        inner.__enter__()
    inner.__exit__(None, None, None)  # restored with the mask lifted: the unconditional override routes
    unconditional = torch.tensor([9.0, 9.0])
    assert torch.equal(mul(), unconditional)
    node = impl.graph(*KEY)[1]
    assert torch.equal(impl.native_op(node)(torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0])),
                       unconditional), "the override the restored router routes to has no working _native op"


@behaviour("unconditional.restore-routes-graphs-installed-empty-in-the-mask")
def test_a_restore_under_a_lifted_mask_routes_a_graph_installed_with_no_router_inside_it(impl):
    bmm_key = ("aten", "bmm", "CPU")  # sorts before mul.Tensor: its router is kept by the restore
    impl.register("declining_dsl", *bmm_key, lambda *a, **k: False, lambda a, b: torch.zeros(0))
    impl.install(*bmm_key)
    impl.register("test_dsl", *KEY, None, lambda a, b: torch.full_like(a, 9.0),
                  unconditional_override=True)
    impl.disable(dsl_names=["test_dsl"])
    inner = impl.scope()
    with impl.unconditional_masked():
        impl.install(*KEY)  # its chain is empty under the mask
        assert not impl.router_installed(*KEY)
        inner.__enter__()  # a snapshot with no router for the graph
    inner.__exit__(None, None, None)  # restored with the mask lifted
    assert impl.router_installed(*bmm_key)
    node = impl.graph(*KEY)[0]
    assert node.active
    assert torch.equal(mul(), torch.tensor([9.0, 9.0])), "the node says active, so it must route"


@behaviour("unconditional.restore-inside-the-mask")
def test_a_snapshot_taken_before_the_mask_and_restored_inside_it_masks(impl, namespaces):
    """The masked override and the late one on two ops apart from mul.Tensor,
    which both compute with."""
    ns_twice, ns2_twice = namespaces
    masked, unmasked = (NS2, "twice", "CPU"), (NS, "twice", "CPU")
    x = torch.tensor([1.0, 2.0])
    impl.register("u", *masked, None, lambda x: torch.full_like(x, 9.0), unconditional_override=True)
    impl.install(*masked)
    impl.disable(dsl_names=["u"])
    impl.register("d", *unmasked, lambda *a: False, lambda x: torch.full_like(x, 7.0))
    impl.install(*unmasked)
    impl.register("late", *unmasked, lambda *a: True, lambda x: torch.full_like(x, 8.0))  # not routed until an install
    outer = impl.scope()
    outer.__enter__()  # a snapshot taken before the mask
    with impl.unconditional_masked():
        impl.disable(dsl_names=["d"])  # a change for the restore to undo
        outer.__exit__(None, None, None)  # restored with the mask on
        assert torch.equal(ns2_twice(x), x * 3), "the restore brought a masked override back"
        assert torch.equal(ns_twice(x), x * 2), "the restore published the late override"
    assert torch.equal(ns2_twice(x), torch.full_like(x, 9.0))
    assert torch.equal(ns_twice(x), x * 2)


# ---- torch's front ends and torch 2.13's forms ------------------------------------------


@behaviour("frontends.python-native-controls")
def test_torch_backends_python_native_controls_the_registry(impl):
    lines = run_in_fresh_interpreter(impl, """
        impl.serve_torch_front_ends()
        import torch._native.registry as reg
        import torch.backends.python_native as pn
        a, b = torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0])
        reg.register_op_override("triton", "aten", "mul.Tensor", "CPU",
                                 lambda a, b: True, lambda a, b: torch.full_like(a, 7.0))
        reg._register_all_overrides()
        def state():
            print(pn.triton.enabled, torch.mul(a, b).tolist())
        state()
        pn.triton.disable(); state()
        pn.triton.enable(); state()
        with pn.triton.disabled():
            state()
        state()
        pn.disable_operations("mul.Tensor"); state()
        pn.enable_operations("mul.Tensor"); state()
        with pn.operations_disabled("mul.Tensor"):
            state()
        pn.disable_dispatch_keys("CPU"); state()
        pn.enable_dispatch_keys("CPU"); state()
        reg.deregister_op_overrides(disable_dsl_names="triton")
    """)
    on, off = "True [7.0, 7.0]", "False [8.0, 15.0]"
    op_off = "True [8.0, 15.0]"
    assert lines == [on, off, on, off, on, op_off, on, op_off, op_off, on]


@behaviour("compat.torch-2-13-forms")
@pytest.mark.parametrize("form", ["two-positional-then-keywords", "three-positional-then-keywords",
                                  "four-positional-then-keywords", "keywords-without-lib-symbol"])
def test_a_node_made_in_torch_2_13s_other_forms(impl, form):
    cond, body = (lambda a, b: True), (lambda a, b: a)
    make = impl.module._OverrideNode
    if form == "two-positional-then-keywords":
        node = make("test_dsl", "mul.Tensor", dispatch_key="CPU", cond_fn=cond, impl_fn=body,
                    node_id="node_1")
    elif form == "three-positional-then-keywords":
        node = make("test_dsl", "mul.Tensor", "CPU", cond_fn=cond, impl_fn=body, node_id="node_1")
    elif form == "four-positional-then-keywords":
        node = make("test_dsl", "mul.Tensor", "CPU", cond, impl_fn=body, node_id="node_1")
    else:
        node = make(dsl_name="test_dsl", op_symbol="mul.Tensor", dispatch_key="CPU", cond_fn=cond,
                    impl_fn=body, node_id="node_1")
    assert (node.dsl_name, node.op_symbol, node.dispatch_key, node.node_id) == (
        "test_dsl", "mul.Tensor", "CPU", "node_1")
    assert node.cond_fn is cond and node.impl_fn is body
    assert getattr(node, "lib_symbol", "aten") == "aten"  # 2.13's node has none: aten only


@behaviour("compat.torch-2-13-forms")
def test_code_written_for_torch_2_13_runs(impl):
    module = impl.module
    module.register_op_override(backend="test_dsl", lib_symbol="aten", op_symbol="mul.Tensor",
                                dispatch_key="CPU", cond=lambda a, b: True,
                                impl=lambda a, b: torch.full_like(a, 4.0),
                                allow_multiple_override=True)
    impl.install(*KEY)
    assert torch.equal(mul(), torch.tensor([4.0, 4.0]))
    assert [n.dsl_name for n in impl.graph(*KEY)] == ["test_dsl"]
    cond, body = (lambda a, b: True), (lambda a, b: a)
    node = module._OverrideNode("test_dsl", "mul.Tensor", "CPU", cond, body, "node_1")
    assert (node.dsl_name, node.op_symbol, node.dispatch_key, node.node_id) == (
        "test_dsl", "mul.Tensor", "CPU", "node_1")
    assert node.cond_fn is cond and node.impl_fn is body
    assert getattr(node, "lib_symbol", "aten") == "aten"
    assert node.unconditional_override is False and node.active is True


@behaviour("api.upstream-defaults")
def test_register_without_keywords_registers_a_conditional_override(impl):
    impl.module.register_op_override("test_dsl", "aten", "mul.Tensor", "CPU",
                                     lambda a, b: False, lambda a, b: torch.full_like(a, 4.0))
    (node,) = impl.graph(*KEY)
    assert node.unconditional_override is False
    impl.install(*KEY)
    assert torch.equal(mul(), STOCK), "the cond was not asked: registered as unconditional"


@behaviour("api.upstream-defaults")
def test_reorder_without_keywords_leaves_the_routers_until_the_next_install(impl):
    impl.register("first_dsl", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 4.0))
    impl.register("second_dsl", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 5.0))
    impl.install(*KEY)
    assert torch.equal(mul(), torch.full((2,), 4.0))
    impl.module.reorder_graphs_from_user_function(lambda op, key, graph: list(reversed(graph)))
    assert [n.dsl_name for n in impl.graph(*KEY)] == ["second_dsl", "first_dsl"]
    assert torch.equal(mul(), torch.full((2,), 4.0)), "reordering without reregister_overrides installed"
    impl.install(*KEY)
    assert torch.equal(mul(), torch.full((2,), 5.0))


@behaviour("api.upstream-defaults")
def test_the_decomposition_table_without_keywords_holds_the_default_decompositions(impl):
    impl.register("test_dsl", *KEY, lambda a, b: True, lambda a, b: torch.full_like(a, 4.0))
    impl.install(*KEY)
    table = impl.module.native_decomp_table()
    defaults = torch.export.default_decompositions()
    assert torch.ops.aten.mul.Tensor in table
    missing = [op for op in defaults if op not in table and op is not torch.ops.aten.mul.Tensor]
    assert not missing, f"{len(missing)} default decompositions missing, e.g. {missing[:3]}"
