"""Tensor subclasses written as people write them, not for jitcore, differentially against eager.

- subclasses without ``__torch_dispatch__`` (a plain ``class T(torch.Tensor)``, a logging or
  rewriting ``__torch_function__``, ``nn.Parameter``): traced on the data, the user's class on top;
- wrapper subclasses without the flatten protocol (``LoggingTensor``, ``MaskedTensor``): traced with a
  protocol derived from their attributes;
- Python object behaviour of subclass values while traced: ``__slots__``, ``super()``, class
  attributes read through ``type(self)``, ``object.__init__``;
- a subclass whose values hold storage and define ``__torch_dispatch__``: run eagerly (JC-J002).
Each test compares values, exact output types and, where it matters, what the subclass's own code
saw on a warm call.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import torch
from subclass_checks import protocol_calls
from torch.masked import masked_tensor
from torch.masked.maskedtensor.core import MaskedTensor
from torch.testing._internal.logging_tensor import LoggingTensor, capture_logs
from torch.utils._pytree import tree_map

import jitcore

warnings.filterwarnings("ignore", message="The PyTorch API of MaskedTensors")


def _same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _same(a, e)
    elif type(expected).__name__ == "MaskedTensor":
        torch.testing.assert_close(actual.get_mask(), expected.get_mask())
        mask = expected.get_mask()
        torch.testing.assert_close(actual.get_data()[mask], expected.get_data()[mask])
    elif isinstance(expected, LoggingTensor):
        torch.testing.assert_close(actual.elem, expected.elem)
    elif isinstance(expected, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            torch.testing.assert_close(actual, expected)
    else:
        assert actual == expected


def _check(fn: Any, *args: Any, calls: int = 3) -> Any:
    expected = fn(*args)
    jitted = jitcore.jit(fn)
    for _ in range(calls):
        _same(jitted(*args), expected)
    return jitted


# --- subclasses the dispatcher never sees --------------------------------------------------------------
class Plain(torch.Tensor):
    pass


class Logged(torch.Tensor):
    """Counts its __torch_function__ calls and has methods and class attributes of its own."""

    calls: list[str] = []
    SCALE = 3.0

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        cls.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})

    def doubled(self) -> torch.Tensor:
        return self * 2

    @property
    def scaled(self) -> torch.Tensor:
        return self * type(self).SCALE


class Rewriting(torch.Tensor):
    """A __torch_function__ that changes what add computes (a subtract), as eagerly."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in (torch.add, torch.Tensor.add, torch.Tensor.__add__):
            func = torch.sub
        return super().__torch_function__(func, types, args, kwargs or {})


def test_plain_subclass_keeps_its_class_through_operations() -> None:
    x = torch.randn(3, 4).as_subclass(Plain)
    _check(lambda a: ((a * 2).sin() + 1, a.sum(dim=0), a.shape[0]), x)


def test_torch_function_subclass_runs_its_methods_and_class_attributes() -> None:
    x = torch.randn(4).as_subclass(Logged)
    y = torch.randn(4)
    def program(a: torch.Tensor, b: torch.Tensor) -> Any:
        return (a.doubled() + b).cos(), a.scaled, isinstance(a, Logged), type(a) is Logged

    jitted = _check(program, x, y)
    assert jitted.misses == 1


def test_torch_function_runs_while_tracing_and_its_log_is_replayed() -> None:
    """A cached call runs the recorded operations on the data, not __torch_function__; what it wrote
    into Python state (its log) is replayed, so the log reads as eagerly (before, it stayed empty)."""
    x = torch.randn(4).as_subclass(Logged)
    jitted = jitcore.jit(lambda a: (a * 2).exp())
    jitted(x)
    Logged.calls.clear()
    out = jitted(x)
    replayed = list(Logged.calls)
    Logged.calls.clear()
    (x * 2).exp()
    assert replayed == Logged.calls and replayed and type(out) is Logged
    assert jitted.misses == 1


def test_torch_function_that_rewrites_the_call() -> None:
    x = torch.randn(5).as_subclass(Rewriting)
    _check(lambda a, b: a + b, x, torch.ones(5))


def test_subclass_made_inside_with_as_subclass() -> None:
    _check(lambda t: (t.as_subclass(Plain) * 3, t.as_subclass(Logged).doubled()), torch.randn(3))


def test_parameter_is_a_parameter_while_traced() -> None:
    p = torch.nn.Parameter(torch.randn(2, 2))

    def f(w: torch.Tensor) -> Any:
        return (w @ w if isinstance(w, torch.nn.Parameter) else w), type(w).__name__

    _check(f, p)


def test_torch_function_subclass_under_grad() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return (a.doubled() * a).sum()

    x = torch.randn(4, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_(True)
    f(x_eager.as_subclass(Logged)).backward()
    jitted = jitcore.jit(f)
    out = jitted(x.as_subclass(Logged))
    out.backward()
    assert type(out) is Logged
    torch.testing.assert_close(x.grad, x_eager.grad)


# --- wrapper subclasses without the flatten protocol ------------------------------------------------------
class Noted(torch.Tensor):
    """A plain subclass whose instances carry Python attributes: one in a slot, one in the dict."""

    __slots__ = ["log"]


def test_attributes_of_a_plain_subclass_input_are_state() -> None:
    """``x.scale`` and a slot field of an input: read as eagerly, a changed value is a miss, and a
    value the program stores there is on the caller's tensor after every call."""

    def f(x):
        x.log = x.log + [len(x.log)]
        return x * x.scale + len(x.log)

    def make():
        t = torch.arange(3.0).as_subclass(Noted)
        t.log, t.scale = [], 2.0
        return t

    jitted = jitcore.jit(f)
    eager_x, jit_x = make(), make()
    for i in range(4):
        if i == 2:
            eager_x.scale = jit_x.scale = 3.0
        _same(jitted(jit_x), f(eager_x))
        assert jit_x.log == eager_x.log
    assert jitcore.cache_misses(jitted) >= 2


def test_attributes_set_on_a_wrapper_subclass_input_are_set_on_the_callers_value() -> None:
    """Writes to a traceable subclass input: its flatten context (torch's
    ConstantExtraMetadataTensor.add_constant) and an inner tensor replaced (``x.a = x.a * 2`` on a
    TwoTensor) happen on the caller's value after every call, as eagerly."""
    from torch.testing._internal.custom_tensor import ConstantExtraMetadataTensor
    from torch.testing._internal.two_tensor import TwoTensor

    def bump(x):
        x.add_constant(3)
        return x.elem * 2

    eager_x, jit_x = (ConstantExtraMetadataTensor(torch.arange(3.0)) for _ in range(2))
    jitted = jitcore.jit(bump)
    for _ in range(3):
        _same(jitted(jit_x), bump(eager_x))
        assert jit_x.constant_attribute == eager_x.constant_attribute

    def double_a(x):
        x.a = x.a * 2
        return x.b + 1

    eager_t, jit_t = (TwoTensor(torch.ones(3), torch.full((3,), 3.0)) for _ in range(2))
    jitted = jitcore.jit(double_a)
    for _ in range(3):
        _same(jitted(jit_t), double_a(eager_t))
        _same(jit_t.a, eager_t.a)
    assert jitcore.cache_misses(jitted) == 1


def test_redispatch_function_in_torch_function() -> None:
    """torch's own RedispatchTensor (a slot for its call log, ``torch.overrides.redispatch_function``
    in its ``__torch_function__``)."""
    from torch.testing._internal.common_subclass import RedispatchTensor

    x = RedispatchTensor(torch.randn(3, 3))
    for program in (lambda t: t * 2 + 1, lambda t: (t @ t.t()).sum(), lambda t: t.clone().view(-1)[:3]):
        _check(program, x)


def test_disabled_torch_function_impl_called_directly() -> None:
    """``torch._C._disabled_torch_function_impl(func, types, args, kwargs)`` called by a program: its
    ops are recorded (run natively on the shadows they were computed but lost: the trace named
    tensors it never made)."""
    from torch.testing._internal.two_tensor import TwoTensor

    def program(t):
        doubled = torch._C._disabled_torch_function_impl(torch.mul, (TwoTensor,), (t, 2), {})
        return torch._C._disabled_torch_function_impl(torch.Tensor.add, (TwoTensor,), (doubled, t), {})

    _check(program, TwoTensor(torch.randn(3, 3), torch.randn(3, 3)))
    _check(program, torch.randn(2).as_subclass(Plain))  # no conversion: a plain tensor comes back


def test_logging_tensor_is_traced_with_a_derived_protocol() -> None:
    def program(a, b):
        return (a * 2).sin() + b, (a @ a.t()).sum()

    x, y = LoggingTensor(torch.randn(3, 4)), torch.randn(3, 4)
    jitted = _check(program, x, y)
    assert jitcore.cache_hits(jitted) == 2  # the cached calls run the inner tensors' operations only
    assert "elem" in str(jitcore.last_traces(jitted)[-1])
    logger = logging.getLogger("LoggingTensor")
    level, propagate = logger.level, logger.propagate
    try:
        with capture_logs() as eager_logs:  # leaves the logger at INFO, not propagating
            program(x, y)
        with capture_logs() as jit_logs:  # the logger's level is guarded: enabled, it logs as eagerly
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (an eager entry: its handler formats traced tensors)
                jitted(x, y)
    finally:
        logger.setLevel(level)
        logger.propagate = propagate
    def ops(logs: list[str]) -> list[str]:
        return [line.split(" = ", 1)[1].split("(")[0] for line in logs]

    # the call ends as eager's (its trace stopped where the handler formats a traced tensor; what the
    # library's handler logged while tracing stays logged: library code's effects happen then)
    assert len(eager_logs) == 6 and ops(jit_logs)[-6:] == ops(eager_logs)


def test_logging_tensor_made_inside_the_function() -> None:
    _check(lambda t: LoggingTensor(t).cos() * 2, torch.randn(3))


def test_masked_tensor_pointwise_softmax_and_made_inside() -> None:
    mask = torch.tensor([[True, False, True, True], [False, True, True, False]])
    m = masked_tensor(torch.randn(2, 4), mask)
    _check(lambda t: t * 2 + 1, m)
    _check(lambda t: torch.softmax(t, -1), m)
    _check(lambda d, k: masked_tensor(d, k).sin(), torch.randn(2, 4), mask)


@pytest.mark.parametrize("program", [
    lambda t: (t * 2).sum(),
    lambda t: t.amax(),
    lambda t: t.sum(dim=1),
    lambda t: t.mean() + 1,
    lambda t: torch.amax(t, 0, keepdim=True),
], ids=["sum", "amax", "sum-dim", "mean", "amax-keepdim"])
def test_masked_tensor_reductions_are_traced(program: Any) -> None:
    """Note [Torch functions that are not overridable] (dispatch/resolver.py): MaskedTensor's reductions
    call ``torch.masked.sum(self, mask=...)``, which eager never offers to ``__torch_function__``; handed
    to it, its default branch made the plain result a MaskedTensor with ``as_subclass`` (an eager entry).
    A warm call runs neither of its protocol methods, except the prologue's stride query."""
    jitted = jitcore.jit(program)
    masks = [[[True, False, True], [False, True, True]]] * 2 + [[[False, False, True], [False, False, False]]]
    for i, mask in enumerate(masks):
        m = masked_tensor(torch.randn(2, 3), torch.tensor(mask))
        with protocol_calls(MaskedTensor, inherited=True) as calls:
            out = jitted(m)
        _same(out, program(m))
        if i:
            assert set(calls) <= {"aten.sym_stride.default"}, calls
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
    assert jitted.fallback_reason is None


def test_derived_protocol_guards_the_structure() -> None:
    """Another mask pattern or a non-tensor attribute's value is another specialization."""
    jitted = jitcore.jit(lambda t: t * 2)
    a = LoggingTensor(torch.randn(3))
    _same(jitted(a), a * 2)
    b = LoggingTensor(torch.randn(2, 2))
    _same(jitted(b), b * 2)
    assert jitted.misses == 2


# --- Python object behaviour of subclass values ------------------------------------------------
class Slotted(torch.Tensor):
    """A traceable wrapper with __slots__, super().__init__() and class attributes through type(self)."""

    __slots__ = ("elem",)
    FACTOR = 2.0

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Slotted:
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem: torch.Tensor) -> None:
        super().__init__()
        self.elem = elem

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Slotted:
        return Slotted(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        def unwrap(t: Any) -> Any:
            return t.elem * cls.FACTOR / cls.FACTOR if isinstance(t, Slotted) else t

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda t: cls(t) if isinstance(t, torch.Tensor) else t, out)

    def scale(self) -> torch.Tensor:
        return self.elem * type(self).FACTOR


def _unwrapped(out: Any) -> Any:
    return tree_map(lambda t: ("Slotted", t.elem) if isinstance(t, Slotted) else t, out)


@pytest.mark.parametrize("program", [
    lambda s: (s + 1) * s,
    lambda s: (s.scale(), type(s) is Slotted, isinstance(s, Slotted), s.FACTOR, s.elem.shape),
    lambda s: Slotted.elem.__get__(s) * 2 + type(s).__dict__["elem"].__get__(s, Slotted),
])
def test_slots_super_and_class_attributes_of_an_input(program: Any) -> None:
    s = Slotted(torch.randn(3, 4))
    expected = _unwrapped(program(s))
    jitted = jitcore.jit(program)
    for _ in range(2):
        got = _unwrapped(jitted(s))
        assert str(got) == str(expected) or torch.testing.assert_close(got, expected) is None


def test_slotted_subclass_made_inside() -> None:
    def f(t: torch.Tensor) -> Any:
        s = Slotted(t)
        return s * 3, s.scale()

    t = torch.randn(3)
    expected = _unwrapped(f(t))
    got = _unwrapped(jitcore.jit(f)(t))
    torch.testing.assert_close(got[1], expected[1])
    assert got[0][0] == "Slotted"
    torch.testing.assert_close(got[0][1], expected[0][1])


def test_slot_descriptor_applied_to_values_made_inside_and_inputs() -> None:
    """``Slotted.elem.__set__``/``__get__``/``__delete__`` on traced subclass values, as eagerly (on an
    input, the field set is the caller's after the call)."""

    def f(s: Slotted, t: torch.Tensor) -> Any:
        made = Slotted(t)
        Slotted.elem.__set__(made, t * 3)
        Slotted.elem.__set__(s, Slotted.elem.__get__(s) + 1)
        missing = Slotted(t)
        Slotted.elem.__delete__(missing)
        try:
            Slotted.elem.__get__(missing)
        except AttributeError as error:
            message = str(error)
        return Slotted.elem.__get__(made) + s.elem, message

    eager_s, jit_s = Slotted(torch.arange(3.0)), Slotted(torch.arange(3.0))
    jitted = jitcore.jit(f)
    for _ in range(2):
        t = torch.randn(3)
        (got, got_message), (expected, expected_message) = jitted(jit_s, t), f(eager_s, t)
        torch.testing.assert_close(got, expected)
        assert got_message == expected_message
        torch.testing.assert_close(jit_s.elem, eager_s.elem)


# --- subclasses that run eagerly ---------------------------------------------------------------
class StorageDispatch(torch.Tensor):
    """Holds storage of its own (``_make_subclass``) and defines __torch_dispatch__: no protocol."""

    @staticmethod
    def __new__(cls, t: torch.Tensor) -> StorageDispatch:
        return torch.Tensor._make_subclass(cls, t)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        with torch._C._DisableTorchDispatch():
            return func(*args, **(kwargs or {}))


def test_storage_subclass_with_dispatch_runs_eagerly_with_a_warning() -> None:
    x = StorageDispatch(torch.randn(3))
    f = lambda a: (a * 2).sin()  # noqa: E731
    jitted = jitcore.jit(f)
    with pytest.warns(UserWarning, match="runs eagerly for this call.*JC-J002|runs eagerly for this call"):
        out = jitted(x)
    torch.testing.assert_close(out, f(x))
    assert isinstance(jitted.fallback_reason, jitcore.errors.EagerOnlySubclass)
    torch.testing.assert_close(jitted(torch.ones(3)), f(torch.ones(3)))  # plain inputs are traced
    assert [entry.eager_reason is not None for entry in jitted.entries] == [True, False]
    torch.testing.assert_close(jitted(x), f(x))  # the eager entry answers (Note [Eager entries])
    assert jitcore.cache_misses(jitted) == 2


class ItemReading(torch.Tensor):
    """A wrapper whose __torch_dispatch__ reads a value (``.item()``), as a codebook's lookup does."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: torch.Tensor) -> ItemReading:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype, device=data.device)

    def __init__(self, data: torch.Tensor, scale: torch.Tensor) -> None:
        self.data_ = data
        self.scale = scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["data_", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> ItemReading:
        return ItemReading(inner["data_"], inner["scale"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        def plain(t: Any) -> Any:
            return t.data_ * t.scale.item() if isinstance(t, ItemReading) else t

        return func(*tree_map(plain, args), **tree_map(plain, kwargs or {}))


def test_value_read_inside_torch_dispatch_is_read_and_checked() -> None:
    """Note [Reads inside a subclass's code]: the scale is read while tracing; it only scales tensors, so
    it is a number of the computation (Note [A number a subclass's item reads], dispatch/resolver.py):
    another scale is the same entry, also with ``fullgraph=True`` (Note [Reads inside a subclass's code
    under fullgraph]). Under grad it is checked on every call instead
    (tests/dispatch/test_dispatch_value_reads.py)."""
    f = lambda a, b: (a + b).sin()  # noqa: E731
    jitted = jitcore.jit(f)
    for scale in (3.0, 3.0, 2.0, 3.0):
        x = ItemReading(torch.randn(4), torch.tensor(scale))
        torch.testing.assert_close(jitted(x, torch.ones(4)), f(x, torch.ones(4)))
    assert jitted.fallback_reason is None
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)
    fullgraph = jitcore.jit(f, fullgraph=True)
    for scale in (3.0, 3.0, 2.0):
        x = ItemReading(torch.randn(4), torch.tensor(scale))
        torch.testing.assert_close(fullgraph(x, torch.ones(4)), f(x, torch.ones(4)))
    assert (jitcore.cache_misses(fullgraph), jitcore.cache_hits(fullgraph)) == (1, 2)
