"""Numbers read from tensors (``t.item()``) through the grad transform's replay: names where they can be.

The grad transform replays pass 1 natively on shadows (jitcore/transforms/grad.py), where a number is a
value. A number pass 1 read with ``item()`` and kept as a name (jitcore/jit/value_reads.py) would
then be a constant of the forward, checked on every call: a training step whose optimizer reads its
step count (``step_t.item()`` in Adam's ``_single_tensor_adam``) would miss the cache on every step.
So such a number stays a name in the forward where autograd records nothing of it:
- arithmetic on names (``1 - beta1 ** step``) is copied as recorded;
- a call that takes names where torch takes a value, with no input that requires grad under grad
  mode, is replayed with their values and the names put back into the aten calls the recording mode
  sees (Note [Numbers through a subclass's dispatch], jitcore/langctx/scalars.py);
- a call that takes names with an input that requires grad (``y * x.sum().item()``) is replayed with a
  stand-in for each: an unbacked SymFloat or SymInt of the replay's own ShapeEnv, which the forward's and
  the backward's records hold, each then its name (Note [A read number under grad]);
- anywhere else (C++ used the value) the value is used and the read's check is added to the forward,
  as it was for every read before; so is every read of a replay whose stand-ins failed (the grad
  transform is run again without them: jit_hook.py).

Invariants:
- a name stays in the forward only if every read it is computed from is such a number (no dynamic
  input the entry made a constant);
- a read whose value the forward relies on anywhere is checked (``checks``), after the forward's
  records, as pass 1's checks were;
- the backward holds such a name only where the forward computes it (among the saved values), and only
  where the stand-ins' ShapeEnv assumed nothing of them (``assumed_nothing``): no guard, no runtime
  assert, no narrowed range, as a value torch decided nothing with; but for a split Function's int,
  whose stand-in is backed and what torch assumed of it a condition the split's call checks (Note [A
  split Function's int as a size]).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import optree
import sympy
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

from jitcore.dispatch.resolver import dispatched_numbers, number_leaves
from jitcore.errors import DataDependentError
from jitcore.ir import BoundSymbol, Symbol, tree_has
from jitcore.langctx.scalars import aten_name
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.transforms.symbolic_sizes import SizesNotRewritten

__all__ = ["Assumed", "ReplayedNumbers", "stand_ins_of"]


class Assumed:
    """What torch assumed of a split Function's int stand-ins, which are backed (Note [A split Function's
    int as a size]): each condition a sympy boolean over the stand-ins' symbols, true for the traced
    values. Given as ``stand_ins`` to the grad transform; sealed once the split is made, after which a
    later backward that assumes more raises ``SizesNotRewritten`` (nothing would check it)."""

    def __init__(self) -> None:
        self.conditions: list[Any] = []
        self.names: dict[sympy.Symbol, NumberProxy] = {}
        self.sealed = False

    def found(self, conditions: list[Any], names: dict[sympy.Symbol, NumberProxy]) -> None:
        if self.sealed and not set(conditions) <= set(self.conditions):
            raise SizesNotRewritten("a later backward assumed more of a split Function's number")
        if not self.sealed:
            self.conditions, self.names = conditions, names


class ReplayedNumbers:
    """The read numbers of one replay: which stay names, and the checks of those that do not."""

    def __init__(self, reads: Sequence[tuple[NumberProxy, BoundSymbol]], *,
                 stand_ins: bool | Assumed = False) -> None:
        """Args:
            reads: the numbers pass 1 read and kept as names, each with its check.
            stand_ins: names given to a call under grad are stand-ins (Note [A read number under grad]);
                an ``Assumed``: an int's stand-in is backed by its value, and what torch assumed of the
                stand-ins goes there instead of raising (Note [A split Function's int as a size]).
        """
        self._assumed = stand_ins if isinstance(stand_ins, Assumed) else None
        self._checks = {id(number): check for number, check in reads}
        self._needed: dict[int, BoundSymbol] = {}
        self._made: set[int] = set()  # numbers the forward computes by a copied record (a read's)
        self._stand_ins: dict[int, tuple[NumberProxy, Any]] | None = {} if stand_ins else None
        self._env: ShapeEnv | None = None  # the stand-ins' own, made with the first
        self._ranges: dict[sympy.Symbol, Any] = {}  # each stand-in's range as made

    def made(self, output: Any) -> None:
        """The numbers among a record's ``output`` that the forward computes (the record is copied)."""
        self._made.update(id(n) for n in optree.tree_leaves(output, none_is_leaf=True)
                          if isinstance(n, NumberProxy))

    def checked(self, value: Any) -> Any:
        """What a copied check (``check_read``) compares for ``value``: a number's name where the forward
        computes it, so the check compares each call's value (Note [A check of a specialized read]).

        Raises:
            DataDependentError: the forward does not compute the number (arithmetic on a read it
                specialized): no check of it could be made; pass 1 runs under torch's autograd.
        """
        if not isinstance(value, NumberProxy) or self.symbolic(value) or id(value) in self._made:
            return value
        raise DataDependentError(f"the check of {value.name}, a number read from a tensor: the forward "
                                 "does not compute it")

    # Note [A check of a specialized read]
    # A number pass 1 read (``n = t.sum().tolist()``) and specialized (``z.split([n, 12 - n])`` under
    # grad needs its value) has its check recorded in pass 1: ``check_read(site, 5, int, n0)``. Replayed
    # with the other records' lookup, the name became its value (``check_read(site, 5, int, 5)``): a
    # check that always passed, and a call with another count ran the entry's split sizes: a wrong
    # loss and wrong gradients (a mixture of experts' ``expert_size.tolist()`` in training). The copied
    # check keeps the name the copied read defines.

    def symbolic(self, value: Any) -> bool:
        """Whether ``value`` is a number computed from kept reads only."""
        return isinstance(value, NumberProxy) and all(id(root) in self._checks for root in value.roots)

    def lookup(self, number: NumberProxy) -> Any:
        """What the forward uses for ``number``: its name, or its value."""
        return number if self.symbolic(number) else number.value

    def is_arithmetic(self, bsym: BoundSymbol) -> bool:
        """A record of arithmetic on names: it makes only kept numbers, from no tensor."""
        outputs = optree.tree_leaves(bsym.output, none_is_leaf=True)
        return bool(outputs) and all(self.symbolic(o) for o in outputs) \
            and not tree_has((bsym.args, bsym.kwargs), TensorProxy)

    def needs(self, number: NumberProxy) -> Any:
        """``number``'s value, with the checks of the reads it comes from added."""
        for root in number.roots:
            check = self._checks.get(id(root))
            if check is not None:
                self._needed.setdefault(id(root), check)
        return number.value

    def checks(self) -> list[BoundSymbol]:
        """The checks of the reads whose values the forward relies on."""
        return list(self._needed.values())

    @contextlib.contextmanager
    def passing(self, mode: Any, symbol: Symbol, args: tuple, kwargs: dict) -> Iterator[tuple[tuple, dict]]:
        """The native replay's arguments, numbers as values; for the ``with`` body ``mode`` puts the
        names back where the aten calls take them unchanged (``ShadowDispatchMode._with_numbers``)."""
        if not tree_has((args, kwargs), NumberProxy):
            yield args, kwargs
            return
        leaves = optree.tree_leaves((args, kwargs), none_is_leaf=True)
        if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in leaves):
            yield optree.tree_map(self._value, (args, kwargs), none_is_leaf=True)
            return
        args, kwargs, named = dispatched_numbers(symbol, args, kwargs, self.needs)
        saved = mode.numbers, mode.named, mode.numbers_of
        mode.numbers, mode.named, mode.numbers_of = named, set(), aten_name(symbol)
        try:
            yield args, kwargs
            for number in number_leaves(named):
                if id(number) not in mode.named:  # C++ used its value some other way
                    self.needs(number)
        finally:
            mode.numbers, mode.named, mode.numbers_of = saved

    def _value(self, value: Any) -> Any:
        if not isinstance(value, NumberProxy):
            return value
        if self._stand_ins is not None and self.symbolic(value) and type(value.value) in (int, float):
            return self._stand_in(value)
        return self.needs(value)

    def _stand_in(self, number: NumberProxy) -> Any:
        """The unbacked SymFloat or SymInt that stands for ``number`` in calls under grad."""
        found = self._stand_ins.get(id(number))
        if found is None:
            if self._env is None:  # backed ints: neither 0 and 1 nor equal values made constants or one
                self._env = ShapeEnv(specialize_zero_one=False, duck_shape=False)
                _OWNERS[id(self._env)] = self
            env = self._env
            if type(number.value) is float:
                symbolic = env.create_unbacked_symfloat()
            elif self._assumed is not None:  # Note [A split Function's int as a size]
                symbol = env.create_symbol(number.value, ConstantSource(f"jitcore_{number.name}"),
                                           DimDynamic.DYNAMIC, positive=None, do_not_specialize_zero_one=True)
                symbolic = env.create_symintnode(symbol, hint=number.value)
            else:
                symbolic = env.create_unbacked_symint()
            self._ranges[symbolic.node.expr] = env.var_to_range.get(symbolic.node.expr)
            found = self._stand_ins[id(number)] = (number, symbolic)
        return found[1]

    def stand_in(self, number: NumberProxy) -> Any:
        """The stand-in of ``number``, a number computed from stand-ins' names (Note [Python arithmetic
        on a split Function's numbers], function_numbers.py): a fresh one, named by it."""
        return self._stand_in(number)

    def standing_for(self, value: Any) -> NumberProxy | None:
        """The name ``value`` (one of this replay's stand-ins) stands for; None for any other value."""
        if type(value) not in (torch.SymFloat, torch.SymInt) or value.node.shape_env is not self._env:
            return None
        expr = value.node._expr  # noqa: SLF001 - the symbol itself: ``expr`` applies replacements
        return next((number for number, symbolic in self._stand_ins.values()
                     if symbolic.node._expr == expr), None)  # noqa: SLF001

    def stood_in(self) -> bool:
        """Whether a call was given a stand-in."""
        return bool(self._stand_ins)

    def names(self) -> dict[sympy.Symbol, NumberProxy]:
        """Each stand-in's symbol and the name it stands for."""
        return {symbolic.node._expr: number  # noqa: SLF001 - the symbol, not what replaced it
                for number, symbolic in (self._stand_ins or {}).values()}

    def assumed_nothing(self) -> None:
        """Raises SizesNotRewritten where torch decided something with a stand-in (a guard, a runtime
        assert, a replacement, a narrowed range): the backward would rely on it unchecked."""
        env = self._env
        if env is None:
            return
        asserted = any(env.deferred_runtime_asserts.values())
        narrowed = any(env.var_to_range.get(s) != r for s, r in self._ranges.items())
        if self._assumed is not None:  # Note [A split Function's int as a size]
            self._assumed.found(_assumptions(env, self._ranges), self.names())
            return
        if env.guards or asserted or env.replacements or narrowed:
            raise SizesNotRewritten("torch assumed something of a number read from a tensor under grad")


def _assumptions(env: ShapeEnv, ranges: dict[sympy.Symbol, Any]) -> list[Any]:
    """Everything ``env`` assumed of its symbols, each as a condition that holds for their hints: its
    guards, runtime asserts, replacements (``Eq(s, 3)``) and the ranges narrowed since ``ranges``."""
    found = [g.expr for g in env.guards]
    found += [ra.expr for ras in env.deferred_runtime_asserts.values() for ra in ras]
    found += [sympy.Eq(symbol, target) for symbol, target in env.replacements.items()]
    for symbol, made in ranges.items():
        now = env.var_to_range.get(symbol)
        if now is None or now == made:
            continue
        if _finite(now.lower):
            found.append(sympy.Ge(symbol, now.lower))
        if _finite(now.upper):
            found.append(sympy.Le(symbol, now.upper))
    return list(dict.fromkeys(found))


# Note [A split Function's int as a size]
# ``F.apply(x, s)`` whose forward makes TwoTensor values of ``x.reshape(s, -1)``, ``x[:s]``,
# ``x.repeat(s, 1)`` or ``x.new_zeros(s, 6)``, ``s`` an int the entry keeps dynamic
# (/tmp/ao53-probes/p4_fn_edges.py ``size``): the split's stand-in for ``s`` was unbacked, torch guarded
# on it (``Eq(Mod(24, s), 0)``), and the record stayed: 1 to 3 TwoTensor dispatches on every warm call.
# A split's int stand-in is backed instead (a symbol of the stand-ins' ShapeEnv with the traced value as
# its hint; neither 0 and 1 nor equal values made constants or one symbol), so torch decides as it would
# with the value and writes down what it assumed: its guards, runtime asserts, replacements (``s = 3``
# where it had to specialize) and narrowed ranges. ``assumed_nothing`` hands those to the split's
# ``Assumed`` instead of raising; the split makes them one ``Condition`` over its numbers
# (``assumed_conditions``, function_numbers.py), which ``SplitCall`` computes on every call, running
# ``apply`` natively where it is false, as for a comparison the forward made. Pass 1 guarded the same ops
# with the entry's own symbols, so the entry's calls agree. The sizes the split's traces hold are the
# stand-ins' expressions, rewritten as arithmetic on the names (``rewrite_sizes``). A float's stand-in
# stays unbacked: a value torch decides with still keeps the record. A backward derived later (another
# tangent kind) that assumes more raises: nothing would check it.
def _finite(bound: Any) -> bool:
    from torch.utils._sympy.numbers import int_oo

    return bool(bound.is_finite) and bound not in (int_oo, -int_oo)  # int_oo counts itself finite


def stand_ins_of(value: Any) -> ReplayedNumbers | None:
    """The replay whose stand-in ``value`` is (None: ``value`` is no stand-in of a live replay)."""
    if type(value) not in (torch.SymFloat, torch.SymInt):
        return None
    return _OWNERS.get(id(value.node.shape_env))


# each stand-ins' ShapeEnv (by id) -> its replay's numbers, while they live
_OWNERS: weakref.WeakValueDictionary[int, ReplayedNumbers] = weakref.WeakValueDictionary()


# Note [A read number under grad]
# ``y * x.sum().item()`` with ``x`` a wrapper subclass (a TwoTensor) that requires grad: pass 1 keeps the
# number a name, as without grad (Note [A number a subclass's item reads], dispatch/resolver.py), but the
# replay ran ``mul`` with its value, for autograd records the number in the backward too
# (``mul(grad, 1.0969)``), and checked it: one entry per value (5 misses in 5 calls; without grad, 1).
# The replay hands such a call a stand-in instead: an unbacked SymFloat (SymInt for an int) of a ShapeEnv
# of its own. The fake tensors and autograd carry it as they carry a symbolic size, so the forward records
# ``mul(y, zuf0)`` and the backward ``mul(grad, zuf0)``; ``rewrite_sizes`` (symbolic_sizes.py) makes each
# the name, which the forward computes and the backward takes among the saved values. Where torch had to
# decide something with the value (``pow``'s backward compares its exponent with 0; ``dropout``'s ``p``;
# a size), the stand-in raises or leaves a guard or assert in the ShapeEnv (``assumed_nothing``), and
# the grad transform runs again with values, each read checked, as before (jit_hook.py).
