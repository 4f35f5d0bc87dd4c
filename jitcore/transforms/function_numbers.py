"""A split Function's forward and backward interpreted: Python arithmetic on its numbers recorded, its
branches checked.

A Function record split alone (function_records.py) is recorded by the grad transform running the user's
forward natively on shadows, each number it takes a stand-in (an unbacked SymFloat or SymInt: Note [A
number a split Function takes]). Python code the forward runs on a number (``math.sqrt(s)``, ``s > 2``)
asked the stand-in for its value, which it has not: the record stayed, and ``apply`` ran natively on
every call. Here the forward runs on jitcore's interpreter, where such code is looked aside (Note
[Python arithmetic on a split Function's numbers]), and so does the backward (Note [A split Function's
backward computing with its numbers]).

Invariants:
- a number the forward computes from stand-ins is the grad transform's record of that computation, done
  by Python as eagerly, with a fresh stand-in of its own (never a formula torch simplified);
- a comparison of such numbers answers the traced outcome, and is a ``Condition`` that the split's call
  checks before it runs the split (another outcome runs ``apply`` natively); once the call holds them
  (``Conditions.sealed``) a comparison raises unless it is one of them: a backward derived later makes
  none nothing would check;
- every other call the forward or backward makes runs natively, with the interpretation it was called in
  current (the recording's subclass dispatch interprets on it).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import math
import operator
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from jitcore.interpreter import Hooks, active_runs, current_run, interpret
from jitcore.langctx.python import apply
from jitcore.prologue import Guard, Path
from jitcore.prologue.guards import Predicate
from jitcore.proxies.number import NumberProxy, formula
from jitcore.transforms.replayed_numbers import stand_ins_of
from jitcore.transforms.symbolic_sizes import SizesNotRewritten, python_check

__all__ = ["Condition", "Conditions", "assumed_conditions", "backward_guards", "evaluate",
           "interpreted_forward"]


@dataclasses.dataclass(frozen=True, slots=True)
class Condition:
    """A comparison the split's forward made of its numbers, and its traced outcome."""

    predicate: NumberProxy
    outcome: bool
    in_backward: bool = False  # the backward's: pass 1 ran no backward, so it guarded none of these


class Conditions(list):
    """The conditions of one split's forward and backward; ``sealed`` once the split's call holds them."""

    sealed = False

    def outcome_of(self, predicate: NumberProxy) -> bool | None:
        """The traced outcome of a condition computing what ``predicate`` computes (the same operations
        on the same numbers), which each call of the split has checked; None where there is none."""
        key = _computes(predicate)
        return next((c.outcome for c in self if _computes(c.predicate) == key), None)


def _computes(number: NumberProxy) -> tuple[tuple[int, ...], str]:
    """What ``number`` computes: its roots, and its formula over them."""
    _compute, text = formula(number)
    return tuple(id(r) for r in number.roots), text([f"r{k}" for k in range(len(number.roots))])


def evaluate(number: Any, values: dict[int, Any]) -> Any:
    """``number``'s value where the numbers keyed (by id) in ``values`` have those values, computed by
    its recorded arithmetic (``made_by``) as the forward computed it."""
    if not isinstance(number, NumberProxy):
        return number
    found = values.get(id(number), values)
    if found is not values:
        return found
    if number.made_by is None:
        raise KeyError(number.name)
    fn, operands = number.made_by
    return fn(*(evaluate(o, values) for o in operands))


def assumed_conditions(conditions: list[Any], names: dict[Any, NumberProxy]) -> list[Condition]:
    """``conditions`` (what torch assumed of a split's backed stand-ins: sympy booleans over their
    symbols, ``names`` the numbers they stand for) as one Condition computed from the split's numbers
    (Note [A split Function's int as a size], replayed_numbers.py); none where there are none.

    Raises:
        SizesNotRewritten: a condition has a symbol no number names, no Python form, or does not hold
            for the traced values.
    """
    from torch.utils._sympy.printers import PythonPrinter

    if not conditions:
        return []
    symbols = sorted(set().union(*(c.free_symbols for c in conditions)), key=str)
    if any(s not in names for s in symbols):
        raise SizesNotRewritten(f"a condition of {conditions} has a symbol no number names")
    text = " and ".join(f"({PythonPrinter().doprint(c)})" for c in conditions)
    operands = tuple(names[s] for s in symbols)
    check = python_check(text, symbols, operands, SizesNotRewritten)
    return [Condition(NumberProxy(f"({text})", True, made_by=(check, operands)), True)]


# Note [Python arithmetic on a split Function's numbers]
# ``F.apply(x, s)`` whose forward computes ``x * math.sqrt(s)`` or branches on ``s > 2`` and makes
# TwoTensor values (/tmp/ao53-probes/p4_fn_edges.py): the record was never split, so every warm call of
# an entry with ``s`` dynamic ran ``apply`` natively, two ``__torch_dispatch__`` calls with it. The split
# runs the forward on the interpreter instead, with lookasides for what Python does with a stand-in: an
# arithmetic operator, a comparison, ``float``/``int`` and the ``math`` functions jitcore records
# (langctx/python.py). Each is the grad transform's record of the same Python operation on the names
# (``n1 = math.sqrt(s)``, exact as eagerly), answered by a fresh stand-in for ``n1``, which torch's ops
# then take as they take ``s`` (``mul(t1, n1)`` once the names are rewritten). A comparison answers the
# traced outcome and is kept as a Condition: ``SplitCall`` computes it from each call's numbers and runs
# ``apply`` natively where it differs (pass 1 guarded the same comparison, so the entry's calls agree).
# Anything else of a stand-in (a helper run natively, torch code deciding with it) still raises, and the
# record stays as before.
_ARITHMETIC = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
}
_COMPARISONS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
                "gt": operator.gt, "ge": operator.ge}
_UNARY = {"neg": operator.neg, "pos": operator.pos, "abs": operator.abs}
_MATH = ("sqrt", "exp", "log", "cos", "sin", "tan", "tanh", "log2", "log10", "log1p", "expm1")


class _Numbers:
    """The lookasides of one call of a split's forward; the conditions they find go to ``conditions``."""

    def __init__(self, conditions: Conditions, outer: Any, in_backward: bool = False) -> None:
        self.conditions = conditions
        self.native = _under(outer)
        self.in_backward = in_backward

    def hooks(self) -> Hooks:
        lookasides: dict[Any, Callable[..., Any]] = {}
        for cls in (torch.SymFloat, torch.SymInt):
            for name, op in {**_ARITHMETIC, **_COMPARISONS}.items():
                for dunder, flipped in ((f"__{name}__", False), (f"__r{name}__", True)):
                    method = vars(cls).get(dunder)
                    if isinstance(method, types.FunctionType):
                        lookasides[method] = self._binary(op, method, flipped)
            for name, op in _UNARY.items():
                method = vars(cls).get(f"__{name}__")
                if isinstance(method, types.FunctionType):
                    lookasides[method] = self._unary(op, method)
        for fn in (*(getattr(math, name) for name in _MATH), builtins.float, builtins.int):
            lookasides[fn] = self._unary(fn, fn)
        return Hooks(lookasides=lookasides, resolve_call=self._native_or_own, on_opaque_call=self.native,
                     native_call=self.native)

    def _native_or_own(self, fn: Any) -> Any:
        """The program's own Python code is interpreted (its arithmetic on numbers is looked aside);
        torch's and jitcore's run natively."""
        module = getattr(fn, "__module__", None) or ""
        if isinstance(fn, types.FunctionType) and not module.startswith(("torch", "jitcore")):
            return None
        return lambda *args, **kwargs: self.native(fn, args, kwargs)

    def _binary(self, op: Any, method: Any, flipped: bool) -> Callable[..., Any]:
        def looked_aside(a: Any, b: Any) -> Any:
            return self._computed(op, (b, a) if flipped else (a, b), method, (a, b))
        return looked_aside

    def _unary(self, op: Any, fallback: Any) -> Callable[..., Any]:
        def looked_aside(*args: Any, **kwargs: Any) -> Any:
            if len(args) != 1 or kwargs:
                return self.native(fallback, args, kwargs)
            return self._computed(op, args, fallback, args)
        return looked_aside

    def _computed(self, op: Any, operands: tuple, fallback: Any, args: tuple) -> Any:
        """``op(*operands)`` as a record of the names where a stand-in is among them (the Note above);
        otherwise ``fallback(*args)``, natively."""
        owners = [stand_ins_of(o) for o in operands]
        owner = next((o for o in owners if o is not None), None)
        names = [o if found is None else found.standing_for(o) for o, found in zip(operands, owners)]
        if owner is None or any(n is None or type(n) not in (NumberProxy, int, float) for n in names):
            return self.native(fallback, args)  # a stand-in with no name here raises, as it did before
        values = [n.value if isinstance(n, NumberProxy) else n for n in names]
        if op is operator.pow and all(type(v) is int for v in values):
            return self.native(fallback, args)  # an int power's type depends on the exponent's sign
        result = apply(op, *names)
        if not isinstance(result, NumberProxy):
            return self.native(fallback, args)
        if type(result.value) is bool:
            if getattr(self.conditions, "sealed", False):  # Note [A backward derived later compares numbers]
                known = self.conditions.outcome_of(result)
                if known is None:  # nothing would check it
                    raise SizesNotRewritten("a backward derived after the split compared the split's numbers")
                return known
            self.conditions.append(Condition(result, result.value, self.in_backward))
            return result.value
        return owner.stand_in(result)


def _under(outer: Any) -> Callable[..., Any]:
    """Runs a callable natively with ``outer`` the current interpretation (a subclass's dispatch the
    call reaches is interpreted on the recording's run, as without the forward's)."""
    def native(fn: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        with _current(outer):
            return fn(*args, **(kwargs or {}))
    return native


@contextlib.contextmanager
def _current(run: Any) -> Iterator[None]:
    stack = active_runs()
    if run is None:
        yield
        return
    stack.append(run)
    try:
        yield
    finally:
        stack.pop()


def interpreted_forward(cls: type) -> tuple[type, Conditions]:
    """A subclass of the Function ``cls`` whose forward and backward run on the interpreter (the Notes
    above and [A split Function's backward computing with its numbers]), and the list their calls add
    their conditions to (``cls`` itself where its forward is no Python function)."""
    conditions = Conditions()
    body: dict[str, Any] = {}
    for name in ("forward", "backward"):
        method = next((vars(c)[name] for c in cls.__mro__ if name in vars(c)), None)
        fn = method.__func__ if isinstance(method, staticmethod) else method
        if not isinstance(fn, types.FunctionType):
            if name == "forward":
                return cls, conditions
            continue
        interpreted = _interpreted(fn, conditions, in_backward=name == "backward")
        body[name] = staticmethod(interpreted) if isinstance(method, staticmethod) else interpreted
    return type(cls.__name__, (cls,), {**body, "__qualname__": cls.__qualname__,
                                       "__module__": cls.__module__}), conditions


# Note [A backward derived later compares numbers]
# A split's output given a gradient of another kind than traced (``(out * tw).sum().backward()``, ``tw`` a
# TwoTensor) has its backward derived again for that kind, once the split is made. A backward branching
# on the number (``ctx.s > 2``) compared it again there, and the sealed list raised: TangentMismatchError
# [JC-G001] where eager computes (/tmp/ao56-probes/p2_rederive.py ``branch``). The comparison is the
# backward's own, made when the split was: every call that runs the split has checked that condition
# (``SplitCall``, and the entry's guard), so the derived backward answers its outcome. A comparison no
# condition computes (a branch on the gradient's type first) still raises: no call would check it.
def _interpreted(fn: Any, conditions: Conditions, *, in_backward: bool) -> Callable[..., Any]:
    def interpreted(*args: Any, **kwargs: Any) -> Any:
        return interpret(fn, _Numbers(conditions, current_run(), in_backward).hooks())(*args, **kwargs)
    return interpreted


# Note [A split Function's backward computing with its numbers]
# ``ctx.s = s`` in the forward and ``g * math.sqrt(ctx.s)`` or ``if ctx.s > 2`` in the backward: the
# backward ran natively on the stand-in, which has no value, so the replay raised and the record stayed
# (``apply`` natively, 2 TwoTensor dispatches per warm call: /tmp/ao55-probes/p3_backward.py). The
# backward runs on the interpreter as the forward does, with the same lookasides: its arithmetic is
# recorded into the backward trace (the number it reads among the saved values), and its comparisons
# are conditions of the same list. They are of the numbers only, so ``SplitCall`` checks them before it
# runs the split, as it checks the forward's: the backward is derived while the split is made, before
# any call. The backward's comparison answers the outcome of the call the split was traced for, which
# pass 1 had not guarded (it runs no backward): a call with the other outcome (``s`` 0.5 where 2.5 was
# traced) ran ``apply`` natively on every call, 2 TwoTensor dispatches each. Each such condition over the
# entry's dynamic numbers is a guard of the entry's prologue too (``backward_guards``), as pass 1 guards
# the forward's own comparisons: a call with the other outcome misses and is traced again, and its
# split's backward takes that outcome. A condition over a number that is no dynamic-number input (a
# read) keeps ``SplitCall``'s check alone.


def backward_guards(conditions: list[Condition],
                    number_inputs: list[tuple[Path, NumberProxy]]) -> list[Guard]:
    """A prologue guard for each comparison a split's backward made of the entry's dynamic numbers (Note
    [A split Function's backward computing with its numbers])."""
    paths = {id(proxy): path for path, proxy in number_inputs}
    guards: list[Guard] = []
    for condition in conditions:
        number = condition.predicate
        if not condition.in_backward or not number.roots or any(id(r) not in paths for r in number.roots):
            continue
        compute, text = formula(number)
        roots = tuple(paths[id(r)] for r in number.roots)
        predicate = Predicate(compute, roots, condition.outcome, text([p.describe() for p in roots]))
        guards.append(Guard(roots[0], "predicate", predicate))
    return guards
