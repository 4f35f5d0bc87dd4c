"""The python language context: arithmetic on dynamic numbers (``jitcore.proxies.number``).

``n * 2`` on a NumberProxy records ``n1 = operator.mul(n, 2)`` and returns a NumberProxy ``n1``
whose value is the product for the call being traced; the computation recomputes it from its input
on every call. ``float(n)``, ``int(n)`` (also of a one-element tensor: read as ``t.item()``),
``abs(n)``, ``round(n, k)``, ``math.cos(n)`` and the other functions of ``_MATH`` in the traced
program do the same through lookasides (``LOOKASIDES``); a comparison (``n % 2 == 0``) gives a
NumberProxy of a bool, whose truth is guarded as a predicate (Note [Predicate guards] in
jitcore/proxies/number.py).

Invariants:
- an operation is recorded only when its result type follows from its operands' types alone (which
  the prologue guards): ``int ** int`` (an int, or a float for a negative exponent) and results
  that are not int or float (``(-1.0) ** 0.5`` is complex) specialize their operands instead;
- the operation runs on the values while tracing, so it raises what Python raises
  (``ZeroDivisionError``) at the same point as eagerly;
- outside a trace everything computes on values (a proxy that escaped into user state is its
  traced value).
"""

from __future__ import annotations

import builtins
import dataclasses
import math
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental import symbolic_shapes

from jitcore.interpreter.callbacks import abs_, list_, max_, min_, number_
from jitcore.interpreter.conversions import math_dunder, real_argument, round_
from jitcore.interpreter.run import current_run
from jitcore.ir import BoundSymbol, Symbol, current_context
from jitcore.proxies.number import SYMBOLIC_NUMBERS, NumberProxy, records_arithmetic
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.proxies.tensor import PlainTensorProxy
from jitcore.proxies.text import TextProxy

__all__ = ["LOOKASIDES", "apply", "member", "members"]

# The math functions of numbers that schedules compute with (a cosine learning-rate schedule).
_MATH = ("cos", "sin", "tan", "acos", "asin", "atan", "cosh", "sinh", "tanh", "exp", "expm1", "log", "log1p",
         "log2", "log10", "sqrt", "floor", "ceil", "trunc", "fabs")
# operations whose bool result is a predicate (Note [Predicate guards])
_PREDICATES = (
    operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge, operator.contains,
)
_PATHS: dict[Callable[..., Any], str] = {
    **{op: f"operator.{op.__name__}" for op in (
        operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
        operator.pow, operator.neg, operator.pos, operator.abs, *_PREDICATES,
        # Note [Bitwise operators of a dynamic number] (jitcore/proxies/number.py)
        operator.lshift, operator.rshift, operator.and_, operator.or_, operator.xor, operator.invert,
    )},
    builtins.float: "builtins.float",
    builtins.int: "builtins.int",
    builtins.round: "builtins.round",
    builtins.min: "builtins.min",  # a size's Min/Max computed per call (jit/shapes.py)
    builtins.max: "builtins.max",
    **{getattr(math, name): f"math.{name}" for name in _MATH},
}
_SYMBOLS: dict[Callable[..., Any], Symbol] = {
    fn: Symbol(id=path, name=path.rsplit(".", 1)[1], langctx="python", fn=fn, path=path, meta=fn)
    for fn, path in _PATHS.items()
}
_MODULES = {"operator": operator, "builtins": builtins, "math": math}


def _sizes_aware(fn: Callable[..., Any], symbolic: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` of ints, ``symbolic`` where a SymInt is among them: a ``min``/``max`` record the grad
    transform's replay runs on the sizes' SymInts (Note [The least of symbolic sizes])."""
    def compute(*args: Any) -> Any:
        return symbolic(*args) if any(type(a) is torch.SymInt for a in args) else fn(*args)

    return compute


for _fn, _symbolic in ((builtins.min, torch.sym_min), (builtins.max, torch.sym_max)):
    _SYMBOLS[_fn] = dataclasses.replace(_SYMBOLS[_fn], fn=_sizes_aware(_fn, _symbolic),
                                        meta=_sizes_aware(_fn, _symbolic))


@records_arithmetic
def apply(fn: Callable[..., Any], *operands: Any) -> Any:
    """``fn(*operands)`` where some operands are NumberProxies: recorded while tracing."""
    context = current_context()
    if any(type(o) in SYMBOLIC_NUMBERS for o in operands):
        return fn(*(_as_size(o, context) for o in operands))  # Note [A dynamic number beside a size]
    values = [o.value if isinstance(o, NumberProxy) else o for o in operands]
    result = fn(*values)
    proxies = [o for o in operands if isinstance(o, NumberProxy)]
    if context is None or not proxies:
        return result
    both_int = fn is operator.pow and all(type(v) in (int, bool) for v in values)
    compared = type(result) is bool and fn in _PREDICATES  # n % 2 == 0 (Note [Predicate guards])
    if (type(result) not in (int, float) and not compared) or both_int:
        for p in proxies:
            p.specialize()
        return result
    roots: dict[int, NumberProxy] = {}
    for p in proxies:
        roots.update((id(r), r) for r in p.roots)
    out = NumberProxy(context.trace.names.fresh("n"), result, tuple(roots.values()),
                      made_by=(fn, operands))
    module = _PATHS[fn].split(".", 1)[0]
    context.trace.imports.setdefault(module, _MODULES[module])
    context.scopes[-1].append(BoundSymbol(_SYMBOLS[fn], tuple(operands), {}, out, (), context.source()))
    return out


# Note [A dynamic number beside a size]
# In a pass with symbolic sizes, a dynamic number meets a size in arithmetic or a comparison: a
# sliding-window cache's ``self.cumulative_length + query_length``, ``kv_length - mask.shape[-1] > 0``
# (``transformers``). The result is a size: the number is taken as its symbolic size, a formula over
# its inputs' symbols (Note [Dynamic numbers as sizes], jitcore/jit/number_sizes.py), so torch computes
# the result and guards what a branch on it assumed, over both the number and the size. A number that
# has no symbolic size is specialized (its value guarded). Both operand orders come here: a SymInt's
# operators return NotImplemented for a NumberProxy, and then the NumberProxy's reflected one runs.
def _as_size(operand: Any, context: Any) -> Any:
    if not isinstance(operand, NumberProxy):
        return operand
    size = context.as_size(operand) if context is not None and context.as_size is not None else None
    return size if size is not None else operand.specialize()


# The containers whose ``in`` is CPython's own, and the constant each is taken as: a frozenset where
# ``in`` hashes (equal numbers hash alike, so the answer is the same), the sequence itself otherwise.
_MEMBERSHIP: dict[Any, Callable[[Any], Any]] = {
    dict.__contains__: frozenset, set.__contains__: frozenset, frozenset.__contains__: frozenset,
    list.__contains__: tuple, tuple.__contains__: tuple, range.__contains__: lambda r: r,
}
_CONSTANTS = (int, float, bool, str, type(None))


def members(container: Any) -> Any:
    """What ``in`` looks at in ``container`` as a constant (a frozenset of a dict's keys or a set's
    elements, a tuple of a list's, a range itself), or None: its ``in`` is not CPython's own, or it
    holds something other than constants (the program's own numbers, objects)."""
    freeze = _MEMBERSHIP.get(getattr(type(container), "__contains__", None))
    if freeze is None:
        return None
    if type(container) is not range and not all(type(e) in _CONSTANTS for e in container):
        return None
    return freeze(container)


def member(item: NumberProxy, container: Any) -> Any:
    """``item in container`` for a container of constants (``last_epoch in self.milestones``, a Counter):
    recorded as ``operator.contains`` of its ``members`` as they are now, a predicate whose truth is
    guarded (Note [Predicate guards]), where hashing would have specialized the number. NotImplemented
    for any other container: Python answers, as it would."""
    frozen = members(container)
    return NotImplemented if frozen is None else apply(operator.contains, frozen, item)


def _read_as(tensor: PlainTensorProxy, protocol: Any) -> Any:
    """``tensor.item()``, which a ``__torch_function__`` (a mode's) is handed as ``protocol``
    (``Tensor.__float__``), the callable eager hands it for ``float(tensor)``."""
    context = current_context()
    if context is None:
        return tensor.item()
    context.called_as = protocol
    try:
        return tensor.item()
    finally:
        context.called_as = None


# Note [float() of a wrapper subclass]
# ``float(x)``/``int(x)`` of a one-element wrapper subclass (TwoTensor's ``x.sum()``) reaches its
# ``__torch_dispatch__`` as ``aten._local_scalar_dense``, as ``x.item()`` does (C's ``Tensor.__float__``
# calls ``item``). Read through ``Tensor.__float__`` it was a value C used, so specialized: an entry per
# value (4 misses in 4 calls where ``x.item()`` and a plain tensor's ``float(x)`` take 1). Where the class
# leaves both ``__torch_function__`` (torch's default, or disabled: a wrapper's default one is skipped,
# dispatch/resolver.py) and the protocol's dunder to torch, it is read as ``item()`` is, a name (Note [A
# number a subclass's item reads], dispatch/resolver.py), converted as a plain tensor's read is.
def _reads_as_item(value: Any, protocol: Any) -> bool:
    """Whether ``float(value)``/``int(value)`` is a read of ``value.item()`` (the Note above)."""
    if type(value) is PlainTensorProxy:
        return not value.dtype.is_complex and value.numel() == 1
    if not isinstance(value, SubclassTensorProxy) or protocol is None or value.dtype.is_complex \
            or value.numel() != 1:
        return False
    cls = value.subclass
    function = getattr(cls.__torch_function__, "__func__", cls.__torch_function__)
    return getattr(cls, protocol.__name__, None) is protocol and function in _DEFAULT_TORCH_FUNCTIONS


_DEFAULT_TORCH_FUNCTIONS = (torch._C._disabled_torch_function_impl, torch.Tensor.__torch_function__.__func__)  # noqa: SLF001


def _converter(cls: type) -> Callable[..., Any]:
    protocol = getattr(torch.Tensor, f"__{cls.__name__}__", None)

    def convert(*args: Any, **kwargs: Any) -> Any:
        # text made from numbers (``float(format(n, ".1f"))``): its characters, as C's float() reads them
        args = tuple(a.specialize() if isinstance(a, TextProxy) else a for a in args)
        if len(args) != 1 or kwargs:
            return cls(*args, **kwargs)
        value = args[0]
        if _reads_as_item(value, protocol):
            value = _read_as(value, protocol)  # float(loss): a read of the value, a name as t.item() is
        if isinstance(value, NumberProxy):
            if type(value.value) is cls:
                return value  # int(n) of an int, float(n) of a float: n itself, as in CPython
            return apply(cls, value)
        result = number_(cls, value)  # a Python __int__/__float__ interpreted (interpreter/callbacks.py)
        if type(result) is cls or (isinstance(result, NumberProxy) and type(result.value) is cls):
            return result
        return cls(value)  # no Python dunder, or a result the builtin converts (or refuses) itself

    convert.__name__ = cls.__name__
    return convert


def _abs(x: Any) -> Any:
    return apply(operator.abs, x) if isinstance(x, NumberProxy) else abs_(x)  # a Python __abs__ interpreted


def _round(number: Any, ndigits: Any = None) -> Any:
    """``round(n)`` (an int) and ``round(n, k)`` (n's type), recorded; ``k`` is specialized."""
    if isinstance(ndigits, NumberProxy):
        ndigits = ndigits.specialize()
    if not isinstance(number, NumberProxy):
        return round_(number, ndigits)  # a Python __round__ interpreted (interpreter/conversions.py)
    return apply(builtins.round, number) if ndigits is None else apply(builtins.round, number, ndigits)


def _math(fn: Callable[..., Any]) -> Callable[..., Any]:
    def compute(*args: Any) -> Any:
        if len(args) == 1 and not issubclass(type(args[0]), NumberProxy):  # its Python dunders interpreted
            if (f := math_dunder(fn.__name__, args[0])) is not None:  # (interpreter/conversions.py)
                return current_run().call(f, args[0])
            args = (real_argument(fn.__name__, args[0]),)
        return apply(fn, *args) if any(issubclass(type(a), NumberProxy) for a in args) else fn(*args)

    compute.__name__ = fn.__name__
    return compute


# Note [The least of symbolic sizes]
# ``min``/``max`` of sizes compares them: torch's ``as_nested_tensor([a, b], layout=torch.jagged)`` takes
# ``min(t.shape[0] for t in tensors)`` and the ``max`` for its seqlen caches, and in a pass with
# symbolic sizes each comparison guarded an order of the lengths (``s1 >= s0``): every call with
# another order traced a new entry. As torch.compile does, ``min``/``max`` of ints and SymInts (no key,
# no default; some SymInt, none a nested int) is ``torch.sym_min``/``sym_max``: a size that is the least
# of them, with no guard; the computation computes it per call (``builtins.min(s0, s1)``, jit/shapes.py).
# Anything else is the interpreter's ``min``/``max``.
def _extreme(interpreted: Callable[..., Any], symbolic: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def compute(*args: Any, **kwargs: Any) -> Any:
        if kwargs or not args:
            return interpreted(*args, **kwargs)
        items = list_(args[0]) if len(args) == 1 else list(args)
        sizes = [i for i in items if type(i) is torch.SymInt]
        if not sizes or any(symbolic_shapes.is_nested_int(i) for i in sizes) or \
                not all(type(i) in (int, torch.SymInt) for i in items):
            return interpreted(items) if len(args) == 1 else interpreted(*args)
        value = items[0]
        for item in items[1:]:
            value = symbolic(value, item)
        return value

    compute.__name__ = interpreted.__name__
    return compute


# Note [torch._check of a number's truth]
# ``torch._check(loss.item() > 0)`` (or of a comparison of dynamic numbers) reaches torch's
# ``expect_true``, which takes a bool or a SymBool and asserts ``type(a) is bool`` of anything else: the
# comparison's NumberProxy failed it, and the call raised AssertionError("Expected bool, got True") where
# eager returned. The truth of such a number is a predicate (Note [Predicate guards],
# jitcore/proxies/number.py): guarded in the prologue, or checked in the computation for a number read
# from a tensor, so ``expect_true`` and ``guard_bool`` of one answer ``bool(a)``; a false one raises
# from ``torch._check`` as eagerly, a cached call whose outcome differs runs another entry.
_EXPECT_TRUE = symbolic_shapes.expect_true
_GUARD_BOOL = symbolic_shapes.guard_bool


def _expect_true(a: Any, skip: int = 0) -> bool:
    return bool(a) if isinstance(a, NumberProxy) else _EXPECT_TRUE(a, skip + 1)


def _guard_bool(a: Any) -> bool:
    return bool(a) if isinstance(a, NumberProxy) else _GUARD_BOOL(a)


# What the traced program's ``float(n)``, ``int(n)``, ``abs(n)`` and ``math.cos(n)`` & co. run instead.
LOOKASIDES: dict[Any, Callable[..., Any]] = {
    _EXPECT_TRUE: _expect_true,
    _GUARD_BOOL: _guard_bool,
    builtins.float: _converter(builtins.float),
    builtins.int: _converter(builtins.int),
    builtins.abs: _abs,
    builtins.round: _round,
    builtins.min: _extreme(min_, torch.sym_min),  # Note [The least of symbolic sizes]
    builtins.max: _extreme(max_, torch.sym_max),
    **{getattr(math, name): _math(getattr(math, name)) for name in _MATH},
}
