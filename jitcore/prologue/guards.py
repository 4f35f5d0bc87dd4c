"""Guards: the facts about a call's inputs and state that a trace relied on.

Each guard is plain data — what it looks at (a Path, or a piece of interpreter state) and what it
expects. Its kind is one entry of the table GUARD_KINDS, which holds the kind's three readings side by
side: ``check`` (what failed, in words: ``args[0].shape[1]: expected 4, got 5``, the miss message),
``render`` (a Python expression that is true when the guard FAILS, compiled into the straight-line
prologue) and ``describe`` (the check as one sentence: explain, the guards log). Invariants:
- every kind has all three; a guard of a kind not in the table cannot be made;
- a guard's ``check`` and its rendered expression agree on every value;
- numbers are compared by type and value, floats also by sign of zero and NaN-ness, so ``-0.0`` never
  passes for ``0.0`` nor ``1`` (int) for ``1.0``;
- expected values that are not plain literals reach generated code as bound constants only.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from jitcore.langctx.python import members
from jitcore.prologue.ctx_numbers import AnyFloat, holds_any_float
from jitcore.prologue.ctx_sizes import SizedContext, resolved
from jitcore.prologue.default_device import default_device
from jitcore.prologue.literals import (
    flat_literal_types,
    freeze_contents,
    is_literal_value,
    same_contents,
    same_keys,
    same_literal,
)
from jitcore.prologue.paths import Path, safe_repr
from jitcore.prologue.shape_guards import shape_check, shape_describe, shape_render
from jitcore.proxies.protocol import WithConstants, ctx_without_layout, tensor_flatten

__all__ = [
    "GUARD_KINDS",
    "STATE_READERS",
    "Guard",
    "GuardKind",
    "GuardKindName",
    "Predicate",
    "StateGuard",
    "TensorSpec",
    "freeze_contents",  # re-exported from literals.py
    "is_literal_value",  # re-exported from literals.py
    "implicit_state",
    "same_ctx",
]

Bind = Callable[[Any], str]


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """The metadata of a tensor input that the trace relied on: its layout (strides and storage
    offset) only when the program asked for it or a recorded op relied on it (None: not checked).
    A size or stride that is symbolic in the trace is None here: ``shape`` guards check it
    (jitcore/prologue/shape_guards.py). ``outer_from_inner``: a nested jagged tensor's outer sizes,
    strides and offset are not read (they follow from its inner tensors, guarded on their own, and
    reading them runs its ``__torch_dispatch__``: Note [Nested ints], jitcore/langctx/shadows.py).
    ``layout_from_inner``: a wrapper whose ``__torch_dispatch__`` answers its strides or storage offset
    (``dispatch_sizes_strides_policy="strides"``: MaskedTensor) has them not read either (``of_subclass``);
    one that answers its sizes too (``"sizes"``) has both flags."""

    type: type
    shape: tuple[int | None, ...]
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool
    strides: tuple[int | None, ...] | None = None
    storage_offset: int | None = None
    outer_from_inner: bool = False
    layout_from_inner: bool = False
    conj: bool = False  # Note [The conjugate and negative bits]
    neg: bool = False

    @classmethod
    def of_nested(cls, t: torch.Tensor) -> TensorSpec:
        """The spec of a nested jagged tensor: its type, dtype, device and grad flag (``shape`` shows
        its static sizes, unchecked)."""
        shape = tuple(s if type(s) is int else None for s in t.shape)
        return cls(type(t), shape, t.dtype, t.device, t.requires_grad, outer_from_inner=True)

    @classmethod
    def of_subclass(cls, t: torch.Tensor) -> TensorSpec:
        """The spec of a wrapper subclass input: with its layout, unless reading the layout runs the
        class's ``__torch_dispatch__``, which a cached call must not run (eager runs it only where
        an op asks). Its answer is then what the class computes from its inner tensors and flatten
        context, which the caller guards (their strides too) instead. A wrapper that answers its sizes
        too (``dispatch_sizes_strides_policy="sizes"``) has neither read (``outer_from_inner``)."""
        with _LayoutAsked() as asked:
            shape = tuple(t.shape)
        if asked.dispatched:
            return cls(type(t), shape, t.dtype, t.device, t.requires_grad, outer_from_inner=True,
                       layout_from_inner=True)
        with _LayoutAsked() as asked:
            t.stride(), t.storage_offset()
        if not asked.dispatched:
            return cls.of(t, with_strides=True)
        return cls(type(t), shape, t.dtype, t.device, t.requires_grad, layout_from_inner=True)

    @classmethod
    def of(cls, t: torch.Tensor, *, with_strides: bool, with_offset: bool | None = None,
           traced: tuple | None = None) -> TensorSpec:
        """The spec of ``t``; sizes and strides symbolic where it was traced (``traced``: its shadow's
        sizes, strides and storage offset as bound) are left to shape guards. ``with_offset`` (default:
        ``with_strides``): whether its storage offset is checked too (Note [Strides apart from the
        storage offset] in jitcore/langctx/layout.py)."""
        shape = tuple(t.shape) if traced is None else _static(t.shape, traced[0])
        bits = {"conj": t.is_conj(), "neg": t.is_neg()}
        if not with_strides:
            return cls(type(t), shape, t.dtype, t.device, t.requires_grad, **bits)
        strides = tuple(t.stride()) if traced is None else _static(t.stride(), traced[1])
        with_offset = with_strides if with_offset is None else with_offset
        offset = t.storage_offset() if with_offset and (traced is None or _is_static(traced[2])) else None
        return cls(type(t), shape, t.dtype, t.device, t.requires_grad, strides, offset, **bits)


# Note [The conjugate and negative bits]
# ``x.conj()`` of a complex tensor and ``x.conj().imag`` are lazy views: the same memory, read through
# a bit (``is_conj()``, ``is_neg()``) that every kernel honours. The values a trace computes are right
# whatever the bits, but what was read of them while tracing is not: ``x.is_conj()`` is a constant of
# the trace, ``x.conj()`` of a conjugate view clears the bit where it set it, and ``view_as_real``
# refuses a conjugate view eagerly. A cached entry traced on a tensor without the bits answered
# ``is_conj() == False`` for a conjugate view (a wrong answer). The bits are part of a tensor input's
# spec, checked by every tensor guard (the C fast path checks them as dispatch keys: a tensor with a
# bit fails it and the Python checks decide, tensor_checks.py).


class _LayoutAsked(TorchDispatchMode):
    """Sees whether reading a tensor's layout reaches a ``__torch_dispatch__`` (``aten.sym_stride``)."""

    dispatched = False

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        self.dispatched = True
        return func(*args, **(kwargs or {}))


def _static(real: tuple, traced: tuple) -> tuple[int | None, ...]:
    return tuple(r if _is_static(s) else None for r, s in zip(real, traced))


def _is_static(size: Any) -> bool:
    """An int, or a SymInt its ShapeEnv has specialized to one (its guards then say nothing of it)."""
    return type(size) is int or size.node.maybe_as_int() is not None


GuardKindName = Literal[
    "type", "len", "keys", "value", "contents", "identity", "absent", "hasattr", "alias", "distinct",
    "storages", "flatten", "tensor", "check", "shape", "predicate", "members", "member",
]


def _no_related(expected: Any) -> tuple[Path, ...]:
    return ()


def _paths(paths: tuple[Path, ...]) -> str:
    return ", ".join(p.describe() for p in paths)


def _qualname(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or safe_repr(obj)


def _an_or_no(expected: tuple[str, bool]) -> str:
    return "an" if expected[1] else "no"


@dataclass(frozen=True, slots=True)
class GuardKind:
    """One kind of guard, its three readings side by side (Note [Guard sentences]).

    Attributes:
        check: ``(value, expected, related values) -> None`` when the value passes, else what was
            expected and what was got (the miss message; a detail starting with ``.`` names an
            attribute of the path: ``.shape[1]: expected 4, got 5``).
        render: ``(variable, expected, bind, related variables) -> Python`` true when the check fails
            (compiled into the prologue; agrees with ``check`` on every value).
        describe: ``(where, expected) -> the check in one sentence`` (explain, the guards log, miss
            messages).
        related: ``expected -> the other paths a relational kind reads`` (() for the rest).
    """

    check: Callable[[Any, Any, tuple], str | None]
    render: Callable[[str, Any, Bind, tuple[str, ...]], str]
    describe: Callable[[str, Any], str]
    related: Callable[[Any], tuple[Path, ...]] = _no_related


# Note [Guard sentences]: every kind of guard is one entry of this table, its check, its rendering and
# its sentence next to each other, so that a new kind cannot be checked without being explained.
# A sentence never shows the raw objects a guard holds (paths hold modules, whose repr runs for pages).
GUARD_KINDS: dict[str, GuardKind] = {}


def _kind(name: GuardKindName, kind: GuardKind) -> None:
    assert name not in GUARD_KINDS, f"guard kind {name} registered twice"
    GUARD_KINDS[name] = kind


# type: the exact type.
_kind("type", GuardKind(
    check=lambda value, expected, _r: None if type(value) is expected
    else f"expected type {expected.__qualname__}, got {type(value).__qualname__}",
    render=lambda v, expected, bind, _r: f"type({v}) is not {bind(expected)}",
    describe=lambda where, expected: f"type({where}) is {_qualname(expected)}",
))
# len: the length of a container.
_kind("len", GuardKind(
    check=lambda value, expected, _r: None if len(value) == expected
    else f"expected length {expected}, got {len(value)}",
    render=lambda v, expected, _b, _r: f"len({v}) != {expected!r}",
    describe=lambda where, expected: f"len({where}) == {expected}",
))


def _keys_check(value: Any, expected: tuple, _related: tuple) -> str | None:
    got = tuple(value.keys())
    if same_keys(got, expected):
        return None
    difference = _keys_difference(expected, got)
    return f"expected keys {safe_repr(list(expected))}, got {safe_repr(list(got))}{difference}"


def _keys_difference(expected: tuple, got: tuple) -> str:
    """What a keys sentence cut short hides: the keys added and removed, or that only the order changed."""
    try:
        added = [k for k in got if k not in expected]
        removed = [k for k in expected if k not in got]
    except Exception:  # noqa: BLE001 - a key whose __eq__ raises: the sentence stays as it is
        return ""
    parts = [f"{word} {safe_repr(keys)}" for word, keys in (("added", added), ("removed", removed)) if keys]
    return f" ({'; '.join(parts)})" if parts else " (the same keys in another order)"


def _keys_render(v: str, expected: tuple, bind: Bind, _related: tuple[str, ...]) -> str:
    if not expected:
        return v
    if all(type(k) is str for k in expected):
        return f"tuple({v}) != {bind(expected)}"
    return f"not {bind(same_keys)}(tuple({v}), {bind(expected)})"


# keys: a dict's keys, in order, by type and value.
_kind("keys", GuardKind(
    _keys_check, _keys_render, lambda where, expected: f"{where} has keys {safe_repr(list(expected))}"
))


def _value_check(value: Any, expected: Any, _related: tuple) -> str | None:
    if same_literal(value, expected):
        return None
    if type(value) is not type(expected):
        return (f"expected {type(expected).__name__} {safe_repr(expected)}, "
                f"got {type(value).__name__} {safe_repr(value)}")
    return f"expected {safe_repr(expected)}, got {safe_repr(value)}"


# value: a literal, by type and value (see is_literal_value).
_kind("value", GuardKind(
    _value_check,
    lambda v, expected, bind, _r: _render_value_failure(v, expected, bind),
    lambda where, expected: f"{where} == {safe_repr(expected)}",
))
# contents: a container of literals, element by element as ``value``.
_kind("contents", GuardKind(
    check=lambda value, expected, _r: None if same_contents(value, expected)
    else f"expected contents {safe_repr(expected)}, got {safe_repr(value)}",
    # an empty container (a module's empty _buffers) needs no call
    render=lambda v, expected, bind, _r: f"len({v}) != 0" if expected == ()
    else f"not {bind(same_contents)}({v}, {bind(expected)})",
    describe=lambda where, expected: f"{where} holds {safe_repr(expected)}",
))
# members: what ``in`` looks at in a container (a dict's keys, a set's or list's elements), as
# ``jitcore.langctx.python.members`` freezes it: a dynamic number tested with ``in`` against it is a
# predicate over these constants (Note [Predicate guards] in jitcore/proxies/number.py).
_kind("members", GuardKind(
    check=lambda value, expected, _r: None if members(value) == expected
    else f"expected members {safe_repr(expected)}, got {safe_repr(members(value))}",
    render=lambda v, expected, bind, _r: f"{bind(members)}({v}) != {bind(expected)}",
    describe=lambda where, expected: f"{where} has the members {safe_repr(expected)}",
))
# member: whether ``expected[0] in`` the container is ``expected[1]`` (a constant the program tested).
_kind("member", GuardKind(
    check=lambda value, expected, _r: None if (expected[0] in value) is expected[1]
    else f"expected {safe_repr(expected[0])} {'' if expected[1] else 'not '}in it",
    render=lambda v, expected, bind, _r: f"({bind(expected[0])} in {v}) is not {expected[1]!r}",
    describe=lambda where, expected: f"{safe_repr(expected[0])} {'in' if expected[1] else 'not in'} {where}",
))
# identity: the same object as while tracing.
_kind("identity", GuardKind(
    check=lambda value, expected, _r: None if value is expected
    else f"expected the object {_short(expected)}, got {_short(value)}",
    render=lambda v, expected, bind, _r: f"{v} is not {bind(expected)}",
    describe=lambda where, expected: f"{where} is the same object as when traced "
    f"({type(expected).__qualname__})",
))
# absent: the mapping lacks the key ``expected`` (a global that must stay unshadowed).
_kind("absent", GuardKind(
    check=lambda value, expected, _r: None if expected not in value
    else f"expected no entry {expected!r}, but one was added",
    render=lambda v, expected, bind, _r: f"{bind(expected)} in {v}",
    describe=lambda where, expected: f"{where} has no entry {safe_repr(expected)}",
))
# hasattr: whether the object has the attribute ``expected[0]`` is ``expected[1]`` (an absence the program
# observed through ``getattr`` with a default or ``hasattr``).
_kind("hasattr", GuardKind(
    check=lambda value, expected, _r: None if hasattr(value, expected[0]) is expected[1]
    else f"expected {_an_or_no(expected)} attribute {safe_repr(expected[0])}",
    render=lambda v, expected, bind, _r: f"{bind(hasattr)}({v}, {bind(expected[0])}) is not {expected[1]!r}",
    describe=lambda where, expected: f"{where} has {_an_or_no(expected)} attribute {safe_repr(expected[0])}",
))
# alias (relational): the same object as at the path ``expected`` (one tensor reached two ways; also pins a
# container that contains itself: Note [Cyclic arguments] in jitcore/jit/provenance.py).
_kind("alias", GuardKind(
    check=lambda value, expected, related: None if value is related[0]
    else f"expected the same object as {expected.describe()}, got another",
    render=lambda v, _e, _b, related: f"{v} is not {related[0]}",
    describe=lambda where, expected: f"{where} is the same object as {expected.describe()}",
    related=lambda expected: (expected,),
))


def _distinct_check(_value: Any, expected: tuple[Path, ...], related: tuple) -> str | None:
    if len({id(v) for v in related}) == len(related):
        return None
    return f"expected {len(related)} different objects at {_paths(expected)}, got aliases"


def _render_distinct_failure(related: tuple[str, ...]) -> str:
    # Note [Distinct inputs as identity tests]: up to six objects (15 pairs), ``a is b or ...`` is
    # about half the cost of building the set of their ids (0.10 against 0.22 us for five tensors) and
    # fails on exactly the same calls: two live objects have the same id exactly when they are the same
    # object. More objects keep the set, whose cost grows linearly.
    if len(related) > 6:
        return f"len({{{', '.join(f'id({r})' for r in related)}}}) != {len(related)}"
    pairs = [f"{a} is {b}" for i, a in enumerate(related) for b in related[i + 1:]]
    return " or ".join(pairs) if pairs else "False"


# distinct (relational): the tensors (or containers, or objects) at the paths ``expected`` are all different
# objects, as while tracing.
_kind("distinct", GuardKind(
    _distinct_check,
    lambda _v, _e, _b, related: _render_distinct_failure(related),
    lambda _where, expected: f"{_paths(expected)} are {len(expected)} different objects "
    "(no input aliases another, as when traced)",
    related=tuple,
))


def _storages_check(_value: Any, expected: tuple, related: tuple) -> str | None:
    got = storage_pattern(related)
    if got == expected[1]:
        return None
    return (f"expected the tensors at {_paths(expected[0])} to share storage as "
            f"{_sharing(expected[1])}, got {_sharing(got)}")


# storages (relational): the tensors at the paths ``expected[0]`` share storages as the pattern
# ``expected[1]`` says (storage_pattern).
_kind("storages", GuardKind(
    _storages_check,
    lambda _v, expected, bind, rel: f"{bind(storage_pattern)}(({', '.join(rel)},)) != {expected[1]!r}",
    lambda _where, expected: f"the tensors at {_paths(expected[0])} share storage as "
    f"while tracing: {_sharing(expected[1])}",
    related=lambda expected: tuple(expected[0]),
))


@dataclass(frozen=True, slots=True, eq=False)
class Predicate:
    """The truth of a number computed from dynamic-number inputs (Note [Predicate guards] in
    jitcore/proxies/number.py): ``compute`` takes the values at ``paths`` and gives the number (it may
    raise, as the program would); ``text`` is the number as an expression over the paths."""

    compute: Callable[..., Any]
    paths: tuple[Path, ...]
    outcome: bool
    text: str

    def holds(self, *values: Any) -> bool:
        try:
            return bool(self.compute(*values)) is self.outcome
        except Exception:  # noqa: BLE001 - the program raises there (n % 0): a miss, traced again
            return False


def _predicate_check(_value: Any, expected: Predicate, related: tuple) -> str | None:
    if expected.holds(*related):
        return None
    return f"expected {expected.text} to be {'true' if expected.outcome else 'false'}, got the opposite"


# predicate (relational): the truth of a number computed from the dynamic numbers at ``expected.paths``
# is ``expected.outcome``, as while tracing (a branch on a counter, not its value).
_kind("predicate", GuardKind(
    _predicate_check,
    lambda _v, expected, bind, related: f"not {bind(expected.holds)}({', '.join(related)})",
    lambda _where, expected: f"{expected.text} is {'true' if expected.outcome else 'false'}",
    related=lambda expected: expected.paths,
))


def _flatten_describe(where: str, expected: tuple) -> str:
    cls, names, ctx = expected
    return (f"{where}.__tensor_flatten__() gives the inner tensors {list(names)} and a ctx equal to "
            f"{safe_repr(ctx)} ({cls.__qualname__})")


# flatten: a tensor subclass's ``__tensor_flatten__`` names and ctx (flatten_failure).
_kind("flatten", GuardKind(
    lambda value, expected, _r: flatten_failure(value, expected),
    lambda v, expected, bind, _r: f"{bind(flatten_failure)}({v}, {bind(expected)}) is not None",
    _flatten_describe,
))


def _tensor_describe(where: str, spec: TensorSpec) -> str:
    words = (f"{where} is a {spec.type.__qualname__} of shape {_dims(spec.shape)}, {spec.dtype}, "
             f"on {spec.device}, requires_grad={spec.requires_grad}")
    if spec.outer_from_inner:
        words += " (its sizes are its inner tensors')"
    if spec.layout_from_inner:
        words += " (its layout is its inner tensors')"
    words += ", a conjugate view" if spec.conj else ""
    words += ", a negative view" if spec.neg else ""
    words += f", strides {_dims(spec.strides)}" if spec.strides is not None else ""
    return words + (f", storage offset {spec.storage_offset}" if spec.storage_offset is not None else "")


# tensor: a TensorSpec (type, shape, dtype, device, requires_grad, the layout where it was relied on).
_kind("tensor", GuardKind(
    lambda value, expected, _r: _tensor_failure(expected, value),
    lambda v, expected, bind, _r: _render_tensor_failure(v, expected, bind),
    _tensor_describe,
))
# check: a grouped check (jitcore/jit/module_guards.py): the path calls it; None, or what failed.
_kind("check", GuardKind(
    check=lambda value, _e, _r: None if value is None else str(value),
    render=lambda v, _e, _b, _r: f"{v} is not None",
    describe=lambda where, _e: f"{where} finds nothing changed (one call checking a group of guards)",
))


# shape (relational): a condition torch's ShapeEnv recorded on symbolic sizes (a ShapeCondition over the
# tensors at its paths; jitcore/prologue/shape_guards.py).
_kind("shape", GuardKind(shape_check, shape_render, shape_describe, related=lambda expected: expected.paths))


@dataclass(frozen=True, slots=True, eq=False)
class Guard:
    """One check on the value a path reaches; ``kind`` names its entry of GUARD_KINDS, whose comments
    say what ``expected`` holds for it. Relational kinds also read the values of other paths
    (``related``)."""

    path: Path
    kind: GuardKindName
    expected: Any

    def __post_init__(self) -> None:
        if self.kind not in GUARD_KINDS:
            raise AssertionError(f"unknown guard kind {self.kind}")

    @property
    def related(self) -> tuple[Path, ...]:
        """The other paths a relational guard reads; () for the rest."""
        return GUARD_KINDS[self.kind].related(self.expected)

    def failure(self, value: Any, related: tuple = ()) -> str | None:
        """None when ``value`` passes; otherwise what was expected and what was got. ``related``: the
        values at ``self.related``."""
        return GUARD_KINDS[self.kind].check(value, self.expected, related)

    def render_failure(self, v: str, bind: Bind, related: tuple[str, ...] = ()) -> str:
        """A Python expression over the variable ``v`` that is true when the guard fails
        (``related``: the variables holding the values at ``self.related``)."""
        return GUARD_KINDS[self.kind].render(v, self.expected, bind, related)

    def describe(self) -> str:
        """The check in one sentence (what explain, the guards log and the prologue's comments say)."""
        return GUARD_KINDS[self.kind].describe(self.path.describe(), self.expected)


def storage_pattern(tensors: tuple) -> tuple[int, ...]:
    """Which tensors share a storage: for each, the index of the first one over the same storage
    (``(0, 1, 0)``: the first and the third share one). Meta tensors have storages of their own too."""
    firsts: dict[int, int] = {}
    return tuple(firsts.setdefault(t.untyped_storage()._cdata, i) for i, t in enumerate(tensors))


def _sharing(pattern: tuple[int, ...]) -> str:
    groups = [i for i, first in enumerate(pattern) if first != i]
    return "all separate" if not groups else ", ".join(f"#{i} with #{pattern[i]}" for i in groups)


def flatten_failure(value: Any, expected: tuple) -> str | None:
    """A tensor subclass's structure: the inner attribute names and ctx ``__tensor_flatten__`` gives
    (ctx compared with the class's ``__metadata_guard__`` when it has one, else with ``==``)."""
    cls, names, ctx = expected
    got_names, got_ctx = tensor_flatten(value)
    if tuple(got_names) != names:
        return f".__tensor_flatten__(): expected inner tensors {list(names)}, got {list(got_names)}"
    if type(ctx) is WithConstants:  # DTensor's device mesh: the computation rebuilds outputs with it
        if type(got_ctx) is not WithConstants or [n for n, _ in ctx[1]] != [n for n, _ in got_ctx[1]]:
            return f".__tensor_flatten__(): expected ctx {ctx!r}, got {got_ctx!r}"
        for (name, constant), (_, got) in zip(ctx[1], got_ctx[1]):
            if got is not constant:
                return f".{name}: expected the object the trace holds ({_short(constant)}), got {_short(got)}"
        ctx, got_ctx = ctx_without_layout(ctx[0]), ctx_without_layout(got_ctx[0])
    if type(ctx) is SizedContext:  # places holding its outer sizes (jitcore/prologue/ctx_sizes.py)
        ctx = resolved(ctx, value)
    metadata_guard = getattr(cls, "__metadata_guard__", None)
    same = metadata_guard(ctx, got_ctx) if metadata_guard is not None else same_ctx(ctx, got_ctx)
    return None if same else f".__tensor_flatten__(): expected ctx {ctx!r}, got {got_ctx!r}"


def same_ctx(a: Any, b: Any) -> bool:
    """Whether two ``__tensor_flatten__`` contexts are the same: literals by type and value (as ``value``
    guards compare), other objects by identity or ``==``; an incomparable ctx never matches."""
    if a is b:
        return True
    if type(a) is AnyFloat:  # a place read per call (jitcore/prologue/ctx_numbers.py)
        return a == b
    if type(a) in (tuple, list) and type(b) is type(a) and holds_any_float(a):
        return len(a) == len(b) and all(same_ctx(x, y) for x, y in zip(a, b))
    if is_literal_value(a) or is_literal_value(b):
        return same_literal(a, b)
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an incomparable ctx never matches
        return False


def _short(obj: Any) -> str:
    text = f"{type(obj).__qualname__} at {id(obj):#x}"
    name = getattr(obj, "__qualname__", None)
    return f"{name} ({text})" if isinstance(name, str) else text


def _render_value_failure(v: str, expected: Any, bind: Bind) -> str:
    t = type(expected)
    if expected is None or t is bool:
        return f"{v} is not {expected!r}"
    if t is int:
        # A huge int has no repr past sys.get_int_max_str_digits(): compare with a bound constant.
        literal = repr(expected) if expected.bit_length() <= 64 else bind(expected)
        return f"type({v}) is not int or {v} != {literal}"
    if t is float:
        if math.isnan(expected):
            return f"type({v}) is not float or {v} == {v}"
        if expected == 0.0:
            sign = math.copysign(1.0, expected)
            return f"type({v}) is not float or {v} != 0.0 or {bind(math.copysign)}(1.0, {v}) != {sign!r}"
        literal = repr(expected) if math.isfinite(expected) else bind(expected)  # repr(inf) is no literal
        return f"type({v}) is not float or {v} != {literal}"
    if t in (torch.dtype, torch.layout, torch.memory_format):
        return f"{v} is not {bind(expected)}"
    if t in (str, bytes, torch.device):
        return f"type({v}) is not {bind(t)} or {v} != {bind(expected)}"
    # a container (tuple, frozenset, Size) or a complex: the traced object itself passes at once
    same = f"{v} is not {bind(expected)} and "  # Note [The traced literal itself]
    types = flat_literal_types(expected) if t is tuple else None
    if types is not None:  # Note [A flat tuple of literals compared in C], prologue/literals.py
        flat = f"type({v}) is not tuple or {v} != {bind(expected)} or tuple(map(type, {v})) != {bind(types)}"
        return f"{same}({flat})"
    # nested tuples, complex, frozensets: exact comparison in Python
    return f"{same}not {bind(same_literal)}({v}, {bind(expected)})"


# Note [The traced literal itself]
# A value guard on a tuple (a function's ``__defaults__``, a tuple the program keeps in its state) keeps
# the tuple that was read while tracing, and on a cached call the path reaches that very object again:
# every such guard of HF Llama's, GPT-2's and BERT's prologues did (15 to 19 each). Checked element by
# element (type, ``==``, the element types; ``same_literal`` for nested ones), the fifteen cost about 10 us
# of Llama's 80 us prologue. The check now starts with ``v is not expected and (...)``: the object it was
# is accepted at once, anything else is checked as before. This decides exactly what the full check
# decides: a literal is immutable all the way down (``is_literal_value``: numbers, strings, bytes, None,
# dtypes, devices, and tuples, frozensets and Sizes of them), so the object itself is still what was
# guarded, and ``same_literal(x, x)`` holds for every literal ``x`` (a NaN is the same literal as a NaN;
# a tuple or frozenset compares an element with itself by identity before ``==``).


def _dims(sizes: tuple) -> str:
    """``(s, 8)``: a shape or strides with its symbolic entries (checked by shape guards) as ``s``."""
    text = ", ".join("s" if d is None else str(d) for d in sizes)
    return f"({text},)" if len(sizes) == 1 else f"({text})"


def _tensor_failure(spec: TensorSpec, t: Any) -> str | None:
    if type(t) is not spec.type:
        return f"expected a {spec.type.__qualname__}, got {type(t).__qualname__}"
    if spec.outer_from_inner:
        shape_differs = False
    else:
        shape_differs = len(t.shape) != len(spec.shape) or any(
            a is not None and a != b for a, b in zip(spec.shape, t.shape))
    if shape_differs:
        for i, (a, b) in enumerate(zip(spec.shape, t.shape)):
            if a is not None and a != b:
                return f".shape[{i}]: expected {a}, got {b}"
        return f".shape: expected {_dims(spec.shape)}, got {list(t.shape)}"
    if t.dtype is not spec.dtype:
        return f".dtype: expected {spec.dtype}, got {t.dtype}"
    if t.device != spec.device:
        return f".device: expected {spec.device}, got {t.device}"
    if t.requires_grad != spec.requires_grad:
        return f".requires_grad: expected {spec.requires_grad}, got {t.requires_grad}"
    if t.is_conj() != spec.conj:
        return f".is_conj(): expected {spec.conj}, got {t.is_conj()}"
    if t.is_neg() != spec.neg:
        return f".is_neg(): expected {spec.neg}, got {t.is_neg()}"
    if spec.strides is not None and any(a is not None and a != b for a, b in zip(spec.strides, t.stride())):
        return f".stride(): expected {_dims(spec.strides)}, got {tuple(t.stride())}"
    if spec.storage_offset is not None and t.storage_offset() != spec.storage_offset:
        return f".storage_offset(): expected {spec.storage_offset}, got {t.storage_offset()}"
    return None


def _render_tensor_failure(v: str, spec: TensorSpec, bind: Bind) -> str:
    parts = [
        f"type({v}) is not {bind(spec.type)}",
        *(() if spec.outer_from_inner else _render_sizes(f"{v}.shape", spec.shape)),
        f"{v}.dtype is not {bind(spec.dtype)}",
    ]
    if spec.device.type == "cpu":
        parts.append(f"not {v}.is_cpu")
    elif spec.device.type == "meta":
        parts.append(f"not {v}.is_meta")
    elif spec.device.type == "cuda" and spec.device.index is not None:
        parts.append(f"{v}.get_device() != {spec.device.index!r} or not {v}.is_cuda")
    else:
        parts.append(f"{v}.device != {bind(spec.device)}")
    parts.append(f"{v}.requires_grad" if not spec.requires_grad else f"not {v}.requires_grad")
    parts.append(f"{v}.is_conj()" if not spec.conj else f"not {v}.is_conj()")
    parts.append(f"{v}.is_neg()" if not spec.neg else f"not {v}.is_neg()")
    if spec.strides is not None:
        parts.extend(_render_sizes(f"{v}.stride()", spec.strides))
    if spec.storage_offset is not None:
        parts.append(f"{v}.storage_offset() != {spec.storage_offset!r}")
    return " or ".join(parts)


def _render_sizes(expr: str, sizes: tuple) -> list[str]:
    """Checks of a shape or strides: one comparison, or one per static entry when some are symbolic."""
    if None not in sizes:
        return [f"{expr} != {sizes!r}"]
    static = (f"{expr}[{i}] != {d}" for i, d in enumerate(sizes) if d is not None)
    return [f"len({expr}) != {len(sizes)}", *static]


# Implicit state a trace depends on: name -> (reader, how generated code reads it; None: call the
# reader bound as a constant). All of it is per thread in torch, and the prologue reads it in the
# calling thread.
STATE_READERS: dict[str, tuple[Callable[[], Any], str | None]] = {
    "grad mode": (torch.is_grad_enabled, "torch.is_grad_enabled()"),
    "inference mode": (torch.is_inference_mode_enabled, "torch.is_inference_mode_enabled()"),
    "default dtype": (torch.get_default_dtype, "torch.get_default_dtype()"),
    "autocast": (torch._C._is_any_autocast_enabled, "torch._C._is_any_autocast_enabled()"),
}
# Read only when the trace creates tensors without tensor inputs (factory calls); read without
# torch.get_default_device()'s cost where it can only answer cpu (Note [Reading the default device]).
DEFAULT_DEVICE = "default device"
STATE_READERS[DEFAULT_DEVICE] = (default_device, None)
# Read only when autocast was on while tracing: which devices cast, to which dtype.
AUTOCAST_SETTINGS = "autocast settings"
_AUTOCAST_DEVICES = ("cpu", "cuda")


def _autocast_settings() -> tuple:
    return tuple(
        (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES
    ) + (torch.is_autocast_cache_enabled(),)


STATE_READERS[AUTOCAST_SETTINGS] = (_autocast_settings, None)
# Read only when the trace met a DTensor: the settings of DTensor's dispatch (Note [DTensor's dispatch
# settings outside the function]).
DTENSOR_SETTINGS = "DTensor dispatch settings"


def _dtensor_settings() -> tuple | None:
    """DTensor's custom op handlers (``loss_parallel()`` installs its loss ops') and whether plain tensors
    may mix with DTensors (``implicit_replication()``); None before torch.distributed.tensor is imported."""
    module = sys.modules.get("torch.distributed.tensor")
    if module is None:
        return None
    dispatcher = module.DTensor._op_dispatcher  # noqa: SLF001 - the settings live there
    return frozenset(dispatcher._custom_op_handlers.items()), dispatcher._allow_implicit_replication  # noqa: SLF001


STATE_READERS[DTENSOR_SETTINGS] = (_dtensor_settings, None)

# Note [DTensor's dispatch settings outside the function]
# ``loss_parallel()`` and ``implicit_replication()`` change what DTensor's C++ dispatch does with an op
# (Note [DTensor's dispatch settings inside the function], dispatch/dtensor.py). A function traced while
# the caller had entered one answered from its cache when later called outside the block, where eager
# raises ("aten.nll_loss_forward.default got mixed torch.Tensor and DTensor"). The settings at the
# call are pinned, as grad mode is: another setting is another entry, traced under it.


def implicit_state(*, creates_tensors: bool) -> list[StateGuard]:
    """Guards pinning the implicit state of the calling thread as it is now (at the end of tracing).

    Args:
        creates_tensors: whether the trace makes tensors without tensor inputs (then the default
            device matters).
    """
    guards = []
    for name, (reader, _expr) in STATE_READERS.items():
        if name == DEFAULT_DEVICE and not creates_tensors:
            continue
        if name == AUTOCAST_SETTINGS and not torch._C._is_any_autocast_enabled():
            continue  # the "autocast" guard already pins "off"
        if name == DTENSOR_SETTINGS and "torch.distributed.tensor" not in sys.modules:
            continue  # no DTensor yet (the pass may import it: its guard is then dropped)
        guards.append(StateGuard(name, reader()))
    return guards


@dataclass(frozen=True, slots=True, eq=False)
class StateGuard:
    """A check of implicit state (grad mode, default dtype, ...) against its value at trace time."""

    name: str
    expected: Any

    def failure(self) -> str | None:
        got = STATE_READERS[self.name][0]()
        return None if got == self.expected else f"{self.name}: expected {self.expected!r}, got {got!r}"

    def describe(self) -> str:
        """The check in one sentence (Note [Guard sentences])."""
        return f"{self.name} is {self.expected!r}"

    def render_failure(self, bind: Bind) -> str:
        reader, expr = STATE_READERS[self.name]
        if expr is None:
            expr = f"{bind(reader)}()"
        if isinstance(self.expected, bool):
            return f"{expr} is not {self.expected!r}"
        if isinstance(self.expected, torch.dtype):
            return f"{expr} is not {bind(self.expected)}"
        return f"{expr} != {bind(self.expected)}"
