"""Symbolic sizes through the grad transform: the forward and backward of an entry with symbolic sizes.

A pass with symbolic sizes ends with ``finish`` (jitcore/jit/shapes.py): each size is a number of the
computation (a size input ``s0`` read from a tensor by the prologue, a count ``n0`` read with
``tolist()``), and each size an op was given is recorded arithmetic on them. The grad transform
replays such a pass on shadows with the pass's SymInts (grad.py), so the records of the forward and
of the backward hold SymInts again (``expand(grad, [s0, 8])``); ``rewrite_sizes`` turns each into the
pass's number or arithmetic on them, as ``finish`` did for pass 1 (Note [Symbolic sizes through the
grad transform]).

Invariants:
- the replay runs under the pass's ShapeEnv, and nothing it assumed is left unchecked: a guard or
  runtime assert that the replay or the backward's recording added after the prologue was built is
  checked at the end of the forward, a replacement of a size input at its start; where they replaced
  a size the forward computes, or narrowed a value range no added guard, assert or replacement names,
  ``SizesNotRewritten`` is raised (the entry then runs pass 1 under torch's autograd, as before);
- a SymInt left in a record is a nested int only (a ragged size: a constant of the trace, as in pass 1);
  any other size without a Python form raises ``SizesNotRewritten``.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optree
import sympy
import torch

from jitcore.ir import BoundSymbol, Trace, TraceContext, tracing
from jitcore.proxies.number import NumberProxy

__all__ = ["Replaced", "SizesNotRewritten", "SizesReplaced", "SymbolicSizes", "condition_check",
           "condition_checks", "map_symbolic", "python_check", "rewrite_sizes"]


class SizesNotRewritten(Exception):
    """The grad transform cannot keep this entry's sizes symbolic; the message says why."""


class SizesReplaced(Exception):
    """The replay replaced a size midway (Note [A size the replay replaced]): the transform is made again,
    the replacement known from its start; ``baseline`` is what the ShapeEnv assumed before the first."""

    def __init__(self, baseline: tuple) -> None:
        super().__init__("the replay replaced a size")
        self.baseline = baseline


@dataclass(frozen=True, slots=True)
class SymbolicSizes:
    """The sizes of a pass with symbolic sizes, as the grad transform replays them.

    Attributes:
        env: the pass's ShapeEnv.
        numbers: ``id(number) -> (number, symbol)`` for each number of pass 1 that names a symbol (a
            size input, a count read from values).
    """

    env: Any
    numbers: dict[int, tuple[NumberProxy, sympy.Symbol]]

    def symint(self, number: Any) -> torch.SymInt | None:
        """The SymInt a pass-1 number stands for in the replay (None: not a size)."""
        found = self.numbers.get(id(number))
        if found is None:
            return None
        _number, symbol = found
        hint = _hints(self.env).get(symbol)
        return self.env.create_symintnode(symbol, hint=None if hint is None else int(hint))

    def names(self) -> dict[sympy.Symbol, NumberProxy]:
        return {symbol: number for number, symbol in self.numbers.values()}

    def state(self) -> tuple:
        """What the ShapeEnv assumes but for its runtime asserts (compared before and after the replay)."""
        env = self.env
        return len(env.guards), dict(env.replacements), dict(env.var_to_range)

    def added(self, assumed: tuple, asserted: list[Any]) -> list[Any]:
        """The guards and runtime asserts added since ``state()`` was ``assumed`` and ``asserts()`` was
        ``asserted``: each is checked at the end of the forward (``condition_checks``).

        Raises:
            SizesNotRewritten: a replacement changed, or a range narrowed for a size no added guard
                or assert names (nothing checks it).
        """
        guards, replacements, ranges = assumed
        known = {id(ra) for ra in asserted}
        added = [*self.env.guards[guards:], *(ra for ra in self.asserts() if id(ra) not in known)]
        named = set().union(*(a.expr.free_symbols for a in (*added, *self.replaced(assumed))))
        named |= {s for s, target in replacements.items() if target.free_symbols & named}  # their aliases
        if any(ranges.get(s) != r and s not in named for s, r in self.env.var_to_range.items()):
            raise SizesNotRewritten("the replay narrowed the range of a size no check names")
        return added

    def replaced(self, assumed: tuple) -> list[Replaced]:
        """The replacements the ShapeEnv made since ``state()`` was ``assumed``, each as the condition
        that it holds (Note [A size the replay replaced]): checked at the start of the forward."""
        _guards, replacements, _ranges = assumed
        return [Replaced(sympy.Eq(symbol, target)) for symbol, target in self.env.replacements.items()
                if symbol not in replacements]  # one replaced before follows its target

    def asserts(self) -> list[Any]:
        """The ShapeEnv's deferred runtime asserts (what torch decided with the counts' traced values)."""
        return [ra for ras in self.env.deferred_runtime_asserts.values() for ra in ras]


@dataclass(frozen=True, slots=True)
class Replaced:
    """A replacement the replay made (``s0 = 5``), as the condition that it holds (``expr``)."""

    expr: sympy.Basic


# Note [A size the replay replaced]
# ``sum(t.sum() for t in x.split(2))`` of a TwoTensor requiring grad, over changing sizes: the backward of
# the last chunk's sum expands the gradient to ``(s0 - 4, 3)``, and torch's broadcast asks whether that
# size is 1; for ``s0 = 5`` it is, the guard ``Eq(s0 - 4, 1)`` makes the ShapeEnv replace ``s0`` by 5, and
# the replay's records hold 5. That replacement was refused ("the replay replaced a size"), and the entry
# ran pass 1 under torch's autograd: 13 to 19 TwoTensor dispatches on every warm call (/tmp/zoo53-probes/
# b14.py). Shadows made before the replacement and after it disagree (the two inner gradients of the
# TwoTensor had strides ``(1, 0)`` and ``(0, 0)``), so such a replay is made again (``SizesReplaced``,
# jit_hook.py), the replacement known from its start, and each replacement is checked at the start of the
# forward (``Eq(s0, 5)``), before any record relies on it, with every guard either replay added: a call
# where it does not hold (``s0 = 6``) goes to another entry, whose replay keeps the size symbolic. That
# trades the dispatch of every warm call for an entry per replaced size; measured (/tmp/ao54-probes/
# b14_time.py, CPU, a loaded machine): a warm call of a traced entry took about half the time of one
# running pass 1 under autograd, and a new entry about a second to trace.
def condition_checks(asserts: list[Any], names: dict[sympy.Symbol, NumberProxy],
                     source: Any) -> list[BoundSymbol]:
    """A check of each of ``asserts`` (guards or runtime asserts: each has an ``expr``) over the numbers
    that name its symbols, as ``finish`` checks the pass's own (Note [Sizes that values decide],
    jitcore/jit/shapes.py): a call on which one does not hold goes to another entry.

    Raises:
        SizesNotRewritten: a condition has a symbol no number names, or no Python form.
    """
    records = []
    for ra in asserts:
        symbols = sorted(ra.expr.free_symbols, key=str)
        if any(s not in names for s in symbols):
            raise SizesNotRewritten(f"the size condition {ra.expr} has a size no number names")
        records.append(condition_check(ra.expr, symbols, [names[s] for s in symbols], source,
                                       SizesNotRewritten))
    return records


def condition_check(condition: sympy.Basic, symbols: list[sympy.Symbol], operands: list[NumberProxy],
                    source: Any, error: type[Exception]) -> BoundSymbol:
    """The record that checks ``condition`` (over ``symbols``, named by ``operands``) on every call,
    as it held for the traced sizes.

    Raises:
        error: the condition has no Python form, or does not hold for the traced sizes.
    """
    from torch.utils._sympy.printers import PythonPrinter

    from jitcore.langctx.reads import READ, ReadSite

    text = PythonPrinter().doprint(condition)
    check = python_check(text, symbols, operands, error)
    site = ReadSite(f"the size condition {text}", source)
    return BoundSymbol(READ, (site, True, check, *operands), {}, None, (), source)


def python_check(text: str, symbols: list[sympy.Symbol], operands: Sequence[NumberProxy],
                 error: type[Exception]) -> Callable[..., Any]:
    """``lambda <symbols>: <text>``, the Python form of a condition torch decided over ``symbols`` (named by
    ``operands``), which must hold for their traced values as it did for torch.

    Raises:
        error: the condition has no Python form, or does not hold for the traced values.
    """
    try:
        check = eval(f"lambda {', '.join(map(str, symbols))}: {text}", {"math": math})  # noqa: S307
        holds = check(*(n.value for n in operands)) is True
    except Exception as exc:  # noqa: BLE001 - a form Python cannot evaluate
        raise error(f"the size condition {text} has no Python form: {exc}") from None
    if not holds:
        raise error(f"the size condition {text} does not hold for the traced values")
    return check


# Note [A size values decided, replayed]
# A boolean mask of a wrapper that requires grad (``x[m].sum()`` of a TwoTensor) is ``aten.index.Tensor``
# on each inner tensor in its dispatch; a symbolic pass names each count where it is computed, after the
# call (``u0 = size_of(t0, 0)``, Note [Sizes that values decide], jit/shapes.py), ``t0`` an inner tensor
# that only the call's resolution makes. Such an entry was kept from this replay, and ran pass 1 under
# torch's autograd, where ``t0`` is undefined: ``pass_1_runs`` said no, the function traced static shapes
# from then on, one entry per count (7 in 7 calls; a plain tensor takes 2); where the count was of a
# top-level value (an int8 wrapper's dispatch dequantizes and indexes a plain tensor), every warm call ran
# the class's ``__torch_dispatch__``. The replay now copies each ``size_of`` into the forward on its own
# tensor (the replay maps a subclass value's inner tensors with it, and its value-shaped op is answered
# with pass 1's output, a shadow sized by the pass's unbacked symbol: replayed_reads.py); its number names
# that symbol from there on, so the backward takes it among the saved values (``expand(grad, [u0])``),
# and what torch decided with the traced count is checked as the pass's own conditions are.


def _hints(env: Any) -> dict:
    return env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val


def _is_nested(env: Any, symbol: sympy.Symbol) -> bool:
    """``symbol`` stands for a nested int (jitcore/jit/ragged.py's ``is_nested_symbol``: the transforms
    do not import the jit)."""
    from torch.utils._sympy.singleton_int import SingletonInt

    return isinstance(_hints(env).get(symbol), SingletonInt)


# Note [Symbolic sizes through the grad transform]
# Under grad, an entry with symbolic sizes of a tensor-subclass program (an NJT multi-head attention
# over changing ragged structures) ran pass 1 under torch's autograd: every cached call ran
# NestedTensor's ``__torch_dispatch__`` (58 calls for the attention). The grad transform needs only
# static shapes where it writes sizes into its records, so it now replays such a pass too: its shadows
# keep the pass's SymInts (the replay's fake mode takes the pass's ShapeEnv), a pass-1 number that
# names a symbol is that symbol's SymInt in the replay, and torch computes the forward's and the
# backward's sizes from them. ``rewrite_sizes`` then makes each SymInt of a record the pass's number
# (``s0``, ``n0``) or recorded arithmetic on them (``n12 = operator.add(n0, n1)``), just before the
# record; the forward takes the size inputs as pass 1 did, and the backward takes the numbers it reads
# among the saved values (``ctx.saved_numbers``, jitcore/transforms/autograd.py). Soundness: the
# prologue was built from the ShapeEnv when the pass finished, so what the replay or the backward's
# recording adds to it would go unchecked: a runtime assert it adds (a split's backward concatenates
# by the counts: ``Eq(u4 + u5 + u6 + u7, u0 + u1 + u2 + u3)``) or a guard (softmax's backward on an
# NJT's values: ``s0 >= 2``) is checked at the end of the forward (``condition_checks``), as the pass's
# own asserts are, and a call where one fails goes to another entry; an entry where they change a
# replacement or narrow a range no such check names, and one that assembles subclass outputs from its
# inputs' inner tensors keep running pass 1 under torch's autograd. Sizes of value-shaped outputs go
# through the replay too (Note [A size values decided, replayed]). A subclass output (a returned NJT)
# is rebuilt at the end of the forward; its tangent's recorded kind has symbolic sizes, which each call
# compares through its own output's kind (Note [Tangent kinds with symbolic sizes],
# jitcore/transforms/tangents.py).
def rewrite_sizes(
    trace: Trace, names: dict[sympy.Symbol, NumberProxy], values: Sequence[Any] = ()
) -> list[Any]:
    """Replace each SymInt in ``trace``'s records by its number or arithmetic on numbers (Note above).

    Returns:
        ``values`` with each SymInt among them so replaced, the arithmetic recorded at the end of
        ``trace`` (Note [Sizes a grad entry returns], grad.py).

    Raises:
        SizesNotRewritten: a size has no Python form here, or a record outputs a symbolic number.
    """
    from jitcore.langctx.python import apply

    pending: list[BoundSymbol] = []
    source: list[Any] = [None]
    context = TraceContext(trace, scopes=[pending], source_provider=lambda: source[0])
    computed: dict[sympy.Expr, Any] = {}

    def value(expr: sympy.Expr) -> Any:
        if expr.is_Integer:
            return int(expr)
        if expr in computed:
            return computed[expr]
        if isinstance(expr, sympy.Symbol):
            found: Any = names.get(expr)
            if found is None:
                raise SizesNotRewritten(f"the size {expr} is no number of the pass")
        elif isinstance(expr, (sympy.Add, sympy.Mul)) and all(a.is_integer for a in expr.args):
            op = operator.add if isinstance(expr, sympy.Add) else operator.mul
            operands = [value(a) for a in expr.args]
            found = operands[0]
            for operand in operands[1:]:
                found = apply(op, found, operand)
        elif type(expr).__name__ in ("FloorDiv", "CleanDiv") and len(expr.args) == 2:
            found = apply(operator.floordiv, *(value(a) for a in expr.args))
        elif type(expr).__name__ in ("Min", "Max"):  # Note [The least of symbolic sizes], langctx/python.py
            operands = [value(a) for a in expr.args]
            found = operands[0]
            for operand in operands[1:]:
                found = apply(builtins.min if type(expr).__name__ == "Min" else builtins.max, found, operand)
        else:
            raise SizesNotRewritten(f"the size {expr} has no Python form jitcore records")
        computed[expr] = found
        return found

    def size(s: torch.SymInt) -> Any:
        env = s.node.shape_env
        expr = env.simplify(s.node.expr)
        if expr.is_number:
            return int(expr)
        if any(_is_nested(env, v) for v in expr.free_symbols):
            return s  # a ragged size: a constant of the trace, as in pass 1 (Note [Nested ints])
        return value(expr)

    def leaf(value: Any) -> Any:
        if type(value) is torch.SymInt:
            return size(value)
        if type(value) is torch.SymFloat and value.node.expr in names:  # Note [A read number under grad]
            return names[value.node.expr]
        raise SizesNotRewritten(f"a record takes {type(value).__name__} {value}")

    def rewritten(bsym: BoundSymbol) -> BoundSymbol:
        if any(type(v) in (torch.SymInt, torch.SymFloat, torch.SymBool)
               for v in optree.tree_leaves(bsym.output, none_is_leaf=True)):
            raise SizesNotRewritten(f"{bsym.symbol.name} outputs a symbolic number")
        args, kwargs = map_symbolic((bsym.args, bsym.kwargs), leaf)
        subsymbols = tuple(rewritten(b) for b in bsym.subsymbols)
        same = all(a is b for a, b in zip(subsymbols, bsym.subsymbols))
        if args is bsym.args and kwargs is bsym.kwargs and same:
            return bsym
        return BoundSymbol(bsym.symbol, args, kwargs, bsym.output, subsymbols, bsym.source, bsym.header)

    records: list[BoundSymbol] = []
    with tracing(context):
        for bsym in trace.bound_symbols:
            source[0] = bsym.source
            new = rewritten(bsym)
            records.extend(pending)
            pending.clear()
            records.append(new)
        found = [map_symbolic(v, leaf) for v in values]
        records.extend(pending)
    trace.bound_symbols[:] = records
    return found


def map_symbolic(tree: Any, leaf: Callable[[Any], Any]) -> Any:
    """``tree`` with each SymInt, SymFloat and SymBool replaced by ``leaf(it)``, walking tuples, lists,
    dicts, slices and torch.Size (a size given as a list of ints: torch takes those too); a container
    with nothing replaced is the very object."""
    if type(tree) in (torch.SymInt, torch.SymFloat, torch.SymBool):
        return leaf(tree)
    if isinstance(tree, (tuple, list)):
        items = [map_symbolic(v, leaf) for v in tree]
        if all(a is b for a, b in zip(items, tree)):
            return tree
        if type(tree) is torch.Size:
            return items
        if type(tree) in (tuple, list) or not hasattr(tree, "_fields"):  # a plain or a tuple subclass
            return type(tree)(items)
        return type(tree)(*items)  # a named tuple (DTensor's TensorMeta)
    if type(tree) is dict:
        items = {k: map_symbolic(v, leaf) for k, v in tree.items()}
        return tree if all(items[k] is v for k, v in tree.items()) else items
    if type(tree) is slice:
        return slice(*(map_symbolic(v, leaf) for v in (tree.start, tree.stop, tree.step)))
    return tree
