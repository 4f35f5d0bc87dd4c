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
- anywhere else (autograd would keep the value for the backward, C++ used it) the value is used and
  the read's check is added to the forward, as it was for every read before.

Invariants:
- a name stays in the forward only if every read it is computed from is such a number (no dynamic
  input the entry made a constant);
- a read whose value the forward relies on anywhere is checked (``checks``), after the forward's
  records, as pass 1's checks were;
- the backward never holds one of these names (calls that autograd records use values).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import optree
import torch

from jitcore.dispatch.resolver import dispatched_numbers, number_leaves
from jitcore.errors import DataDependentError
from jitcore.ir import BoundSymbol, Symbol, tree_has
from jitcore.langctx.scalars import aten_name
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy

__all__ = ["ReplayedNumbers"]


class ReplayedNumbers:
    """The read numbers of one replay: which stay names, and the checks of those that do not."""

    def __init__(self, reads: Sequence[tuple[NumberProxy, BoundSymbol]]) -> None:
        self._checks = {id(number): check for number, check in reads}
        self._needed: dict[int, BoundSymbol] = {}
        self._made: set[int] = set()  # numbers the forward computes by a copied record (a read's)

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
        return self.needs(value) if isinstance(value, NumberProxy) else value
