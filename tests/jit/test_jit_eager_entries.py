"""Calls jitcore cannot trace run eagerly and become eager entries (Note [Eager entries],
jitcore/jit/api.py), differentially against eager: tensors that are not strided (sparse, quantized,
mkldnn, strided nested tensors) as inputs or made inside, calls jitcore cannot record (JC-T001).
The error that stops the pass is never caught by the program's own ``except`` (its ``finally`` clauses
and ``with`` exits run), and the thread's settings are put back after it."""

from __future__ import annotations

import collections
import dataclasses
import warnings

import pytest
import torch
from jit_helpers import check, check_eager_entry

import jitcore
from jitcore.errors import EagerOnlyValue, UnsupportedOperationError

_INPUTS = {
    "sparse_coo": (
        lambda: torch.randn(3, 3).to_sparse(), lambda x: (x * 2).to_dense(), "layout torch.sparse_coo"
    ),
    "sparse_csr": (lambda: torch.randn(3, 3).to_sparse_csr(), lambda x: x.to_dense() + 1, "torch.sparse_csr"),
    "quantized": (
        lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8),
        lambda x: x.dequantize() * 2,
        "a quantized tensor",
    ),
    "mkldnn": (lambda: torch.randn(4).to_mkldnn(), lambda x: x.to_dense() * 2, "torch._mkldnn"),
    "nested_strided": (
        lambda: torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]),
        lambda x: x.sin().unbind()[1],
        "a nested tensor",
    ),
}


@pytest.mark.parametrize("kind", sorted(_INPUTS))
def test_an_untraced_tensor_argument_runs_eagerly(kind: str) -> None:
    make, fn, match = _INPUTS[kind]
    torch.manual_seed(0)
    check_eager_entry(fn, make(), error=EagerOnlyValue, match=match)


def test_dense_calls_stay_traced_next_to_a_sparse_entry() -> None:
    def f(x, s):
        return x * 2 + s.to_dense()

    jf = jitcore.jit(f)
    x = torch.randn(3, 3)
    check(f, x, x.clone(), jfn=jf)
    with pytest.warns(UserWarning, match="runs eagerly"):
        check(f, x, x.to_sparse(), jfn=jf)
    check(f, x, x.clone(), jfn=jf)
    traced, eager = jf.entries
    assert traced.eager_reason is None and isinstance(eager.eager_reason, EagerOnlyValue)
    assert jitcore.cache_hits(jf) == 1  # the third call: the traced entry


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x.to_sparse() * 2).to_dense(),
        lambda x: torch.sparse.mm(x.to_sparse(), x),
        lambda x: (x.to_sparse_csr() @ x).sum(0),
    ],
    ids=["to_sparse", "sparse_mm", "csr_matmul"],
)
def test_a_sparse_tensor_made_inside_runs_eagerly(fn) -> None:
    check_eager_entry(fn, torch.randn(3, 3), error=EagerOnlyValue, match="layout torch.sparse")


# Note [Quantized tensors made inside] (jitcore/langctx/shadows.py): the fake kernel gave ``int_repr`` a
# float shadow, and tracing raised NotImplementedError where eager computes.
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.quantize_per_tensor(x, 0.1, 10, torch.quint8).int_repr(),
        lambda x: torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0, 1, 2]), 0,
                                             torch.qint8).dequantize() * 2,
        lambda x: torch.quantize_per_tensor_dynamic(x, torch.quint8, False).q_zero_point() + x,
    ],
    ids=["int_repr", "per_channel", "dynamic"],
)
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_a_quantized_tensor_made_inside_runs_eagerly(fn) -> None:
    check_eager_entry(fn, torch.randn(3, 3), error=EagerOnlyValue, match="makes a quantized tensor")


def test_the_stop_never_reaches_the_programs_except() -> None:
    """Eager raises nothing at ``to_sparse``: the program's handler must not run (it did: wrong answer)."""

    def f(x):
        try:
            r = (x.to_sparse() * 2).to_dense()
        except Exception:
            return x * 0
        return r + 1

    def g(x):
        try:
            return torch.nested.nested_tensor([x, x], layout=torch.jagged).sin().values()
        except Exception:
            return x

    for fn in (f, g):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check(fn, torch.randn(3, 3))


def test_the_thread_settings_are_put_back_after_a_stop_inside_no_grad() -> None:
    def f(x):
        with torch.no_grad():
            try:
                return (x.to_sparse() * 2).to_dense()
            finally:
                x.add_(0)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(f, torch.randn(3, 3, requires_grad=True).detach())
    assert torch.is_grad_enabled()


def test_with_exits_run_for_the_stop() -> None:
    """A stop inside ``with DisableTorchFunctionSubclass()`` (torch's own code does this) exits it: the
    thread's torch-function state was left disabled when the stop skipped the exit."""

    def f(x):
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
            return (x.to_sparse() * 2).to_dense()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(f, torch.randn(3, 3))
    assert torch._C._is_torch_function_enabled()  # noqa: SLF001


def test_a_with_exit_that_raises_at_the_stop_does_not_replace_it() -> None:
    """unittest's ``assertRaisesRegex(TypeError, ...)`` exit saw the refusal (a TypeError with jitcore's
    message) and raised AssertionError, which left the call in the refusal's place (test_dataclasses'
    test_slots_with_wrong_init_subclass jitted): the exit's error is dropped, the call runs eagerly
    (Note [Refusals pass bare excepts])."""
    import unittest

    case = unittest.TestCase()

    def f(x):
        with case.assertRaisesRegex(TypeError, "missing 1 required positional argument: 'arg'"):
            class Sub(_NeedsArg):  # the program's __init_subclass__, which C runs: refused
                pass
        return x * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(f, torch.randn(3, 3))


class _NeedsArg:
    def __init_subclass__(cls, arg: int) -> None:
        cls.arg = arg


@dataclasses.dataclass
class _Log:
    losses: list


_Pair = collections.namedtuple("_Pair", "a b")


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: len(repr(x * 2)),  # the characters, needed while tracing
        lambda x: f"{x * 2}" == "tensor([0., 2., 4., 6.])",
        lambda x: "%s" % (x * 2),  # noqa: UP031 - the C path under test
        lambda x: (print([x * 2]), x + 1)[1],  # inside another argument: the pass would make the text
        lambda x: repr(x.requires_grad_()),  # its text names its autograd node
        # a container's text, made by C for an f-string field or a Python __repr__ (the interpreter's
        # native calls): Note [A container's text]
        lambda x: f"{[x * 2]}",
        lambda x: f"{ {'k': (x * 2, 1)}!r}",
        lambda x: repr(_Log([x * 2])),  # a dataclass's generated __repr__: f"...{self.losses!r}"
        lambda x: x * len(repr(_Log([x]))),
        lambda x: repr(_Pair(x * 2, 1)),  # a namedtuple's __repr__: "(a=%r, b=%r)" % self
        lambda x: f"{[_Log([x * 2])]}",
    ],
    ids=["len_of_repr", "compared", "percent", "print_in_a_list", "requires_grad", "fstring_list",
         "fstring_dict_repr", "dataclass_repr", "dataclass_repr_length", "namedtuple_repr",
         "fstring_list_of_dataclasses"],
)
def test_the_text_of_a_tensor_runs_eagerly(fn, capsys) -> None:
    """A traced tensor's text was jitcore's (``TensorProxy(t0, "cpu f32[4]")``): a wrong answer. Where the
    program needs the characters while tracing, the call runs eagerly."""
    expected, printed = fn(torch.arange(4.0)), capsys.readouterr().out
    jfn = jitcore.jit(fn)
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert str(jfn(torch.arange(4.0))) == str(expected)
        assert capsys.readouterr().out == printed  # printed on every call, as eagerly
    assert isinstance(jfn.fallback_reason, UnsupportedOperationError)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: repr(x * 2),
        lambda x: str(x * 2),
        lambda x: f"{x * 2}",
        lambda x: f"{x * 2!r}|{x!s}|{x.sum()}|{x.sum()!r}",
        lambda x: "{} and {!r}".format(x * 2, x),  # noqa: UP032 - the C path under test
        lambda x: format(x),
        lambda x: "y: " + str(x * 2) + "!",
    ],
    ids=["repr", "str", "fstring", "fstring_conversions", "str_format", "format", "concatenated"],
)
def test_the_text_of_a_tensor_that_leaves_the_program_is_made_on_each_call(fn) -> None:
    """Returned (or printed, or stored), a plain tensor's text is made from each call's tensor by torch
    (Note [A tensor the program prints], jit/printing.py): one entry, no eager entry."""
    jfn = jitcore.jit(fn)
    for k in range(3):
        x = torch.arange(4.0) * (k - 1.5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert jfn(x) == fn(x)
    assert (jitcore.cache_misses(jfn), jfn.fallback_reason) == (1, None)


def test_the_text_of_a_number_read_from_a_tensor_stays_traced() -> None:
    """``f"{loss:.2f}"`` of a 0-dim tensor reads its value (checked on every call). It raised in every
    trace after a ``"{}".format(x)`` somewhere had made ``Tensor.__format__`` a symbol."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jitcore.jit(lambda x: "{}".format(x * 2))(torch.arange(4.0))  # noqa: UP032 - the C path under test
    check(lambda x: f"{x.sum():.2f}", torch.arange(4.0))


def test_an_unrecordable_call_runs_eagerly() -> None:
    """A tensor hook (JC-T001) on the caller's tensor inside the function: eagerly registered on every
    call (hooks on tensors the function computes are traced: tests/jit/test_jit_hooks_inside.py)."""
    seen = []

    def f(x):
        y = x * 2
        x.register_hook(lambda g: seen.append(g.sum().item()))
        y.sum().backward()
        return x.grad

    jf = jitcore.jit(f)
    for i in range(3):
        x = torch.full((3,), float(i), requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert torch.equal(jf(x), torch.full((3,), 2.0))
    assert seen == [6.0, 6.0, 6.0]
    assert isinstance(jf.fallback_reason, UnsupportedOperationError) and jitcore.cache_hits(jf) == 2
    with pytest.raises(UnsupportedOperationError, match="register_hook"):
        jitcore.jit(f, fullgraph=True)(torch.ones(3, requires_grad=True))


def test_a_trace_function_installed_inside_runs_eagerly():
    """``sys.settrace`` inside: the interpreter's frames are not CPython's, so a trace function would
    see none of them (JC-I001). Without ``fullgraph`` the call runs eagerly; it raised before."""
    import sys

    from jitcore.interpreter.errors import UnsupportedConstruct

    seen: list[str] = []

    def f(x):
        sys.settrace(lambda frame, event, arg: seen.append(event))
        y = x + 1
        sys.settrace(None)
        return y * 2

    check_eager_entry(f, torch.ones(2), error=UnsupportedConstruct, match="sys.settrace")


class _Scale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


_SCRIPTED = {
    "script_linear": lambda: torch.jit.script(torch.nn.Linear(4, 2)),
    "trace_sequential": lambda: torch.jit.trace(
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.randn(1, 4)),
    "script_user_module": lambda: torch.jit.script(_Scale()),
}


@pytest.mark.parametrize("kind", sorted(_SCRIPTED))
def test_a_torchscript_module_runs_eagerly(kind: str) -> None:
    """A TorchScript module's method reads its parameters inside TorchScript, where jitcore cannot
    guard them (Note [TorchScript methods], langctx/torch.py). A scripted or traced nn.Linear raised
    inside TorchScript while tracing; now the call is an eager entry, values and gradients as eagerly,
    also after the module's weights are replaced."""
    torch.manual_seed(0)
    module = _SCRIPTED[kind]()

    def f(x):
        return module(x).sin()

    jf = check_eager_entry(f, torch.randn(3, 4), error=UnsupportedOperationError, match="TorchScript module")
    x = torch.randn(3, 4)
    jf(x).sum().backward()
    got = [p.grad.clone() for p in module.parameters()]
    module.zero_grad()
    f(x).sum().backward()
    assert all(torch.equal(g, p.grad) for g, p in zip(got, module.parameters()))
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(2)
    assert torch.equal(jf(x), f(x))


@torch.jit.script
def _scripted_gelu(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w) + 1


def test_a_torchscript_function_is_traced() -> None:
    """A TorchScript function holds no state: it runs natively on the traced tensors and its aten ops
    are recorded, an entry like any other."""

    def f(x, w):
        return _scripted_gelu(x, w).sum(-1)

    jf = jitcore.jit(f)
    for _ in range(3):
        x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
        check(f, x, w, jfn=jf)
    assert jf.fallback_reason is None
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 2)


class _Dying:
    pass


def _makes_a_sparse_tensor(x: torch.Tensor) -> tuple:
    y = x.to_sparse()
    return (y * 2).to_dense(), _Dying()  # JC-J002 at y * 2: the call runs eagerly


def test_a_kept_reason_frees_the_callers_objects_and_still_names_the_line() -> None:
    """Note [A kept reason holds no frames]: the reason an eager entry keeps held its traceback, whose
    frames led (``f_back``) to the caller's frame and its locals: the caller's objects of that call
    outlived it, where eager frees them when the caller returns. A report of the reason still names the
    user's line."""
    import gc
    import weakref

    from jitcore.debug.report import render_report

    def caller(fn: object) -> weakref.ref:
        out = fn(torch.ones(2))
        return weakref.ref(out[1])

    jitted = jitcore.jit(_makes_a_sparse_tensor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alive = []
        for fn in (_makes_a_sparse_tensor, jitted):
            ref = caller(fn)
            gc.collect()
            alive.append(ref() is not None)
    assert alive == [False, False]
    assert jitted.fallback_reason is not None and jitted.fallback_reason.__traceback__ is None
    assert "return (y * 2).to_dense(), _Dying()" in render_report(jitted.fallback_reason)
