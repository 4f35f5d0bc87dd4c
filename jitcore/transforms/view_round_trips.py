"""Round trips of views in a backward trace: ``t(t(a))`` read as ``a``, ``detach(detach(a))`` made
``detach(a)``, and such view ops whose results nothing reads dropped (Note [View round trips in a
backward]); in a forward trace, only the dropping (Note [Unread views in a forward]).

Invariants:
- only ``aten.t`` and ``aten.detach`` are rewritten: views whose result has their input's storage,
  sizes, strides and offset (``t`` twice) or differs from it only in not requiring grad
  (``detach``), and which cannot raise on a tensor;
- a value is read in place of another only as an argument of a later op, never in the trace's
  output: what the backward hands autograd is the same object as before;
- a trace with an op tagged ``inplace`` anywhere is left as it is (an in-place op that changes a
  view's metadata would tell the view from its base);
- the trace's arguments and output are unchanged: the forward saves the same values;
- a forward trace loses only ``t``/``detach`` ops that nothing reads; the grad transform keeps every
  op in ``GradTraces.forward_body`` for what recomputes forward values (mincut.py, rederive.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jitcore.ir import BoundSymbol, Proxy, Trace, drop_unread, walk

__all__ = ["collapse_view_round_trips", "drop_unread_views"]

_T = "torch.ops.aten.t.default"
_DETACH = "torch.ops.aten.detach.default"
_ROUND_TRIPS = frozenset((_T, _DETACH))


# Note [View round trips in a backward]
# Autograd's formulas are written for one op each, so a backward chains them with views that undo
# each other: the gradient of ``x @ w.t()`` reads ``w.t().t()`` (the transpose the forward took, and
# the transpose its backward takes), and an op that saved its result (relu) detaches a value that is
# already detached. Eagerly these run in C++ inside autograd's nodes; in a trace each is a Python call
# of the op (about 1.5 us on a CPU), 7 of the 19 ops of a two-Linear MLP's backward. The values are the same
# either way: ``t(t(a))`` has ``a``'s storage, sizes, strides and offset, and ``detach(detach(a))``
# is ``detach(a)``; reading ``a`` where the round trip was read gives every later op the same
# inputs. The trace's output keeps its own values: eager hands autograd's hooks a weight's gradient
# as a view (``t`` of the ``mm``), and so does the backward (4 of those 7 ops stay for that).


def collapse_view_round_trips(trace: Trace) -> None:
    """Rewrite ``trace`` (a backward: its arguments and output fixed) in place, as the module
    docstring says."""
    if any("inplace" in bsym.symbol.tags for _depth, bsym in walk(trace.bound_symbols)):
        return
    producers: dict[int, BoundSymbol] = {}  # id(proxy) -> the round-trip op that made it
    read_as: dict[int, Any] = {}  # id(proxy) -> the value later ops read in its place
    rewritten: list[BoundSymbol] = []
    for bsym in trace.bound_symbols:
        args, kwargs = _read(bsym.args, read_as), _read(bsym.kwargs, read_as)
        if args is not bsym.args or kwargs is not bsym.kwargs:
            bsym = dataclasses.replace(bsym, args=args, kwargs=kwargs)
        if _is_round_trip_step(bsym):
            inner = producers.get(id(bsym.args[0]))
            if inner is not None and inner.symbol.id == bsym.symbol.id:
                if bsym.symbol.id == _T:
                    read_as[id(bsym.output)] = inner.args[0]
                else:
                    bsym = dataclasses.replace(bsym, args=(inner.args[0],))
            producers[id(bsym.output)] = bsym
        rewritten.append(bsym)
    trace.bound_symbols[:] = rewritten
    drop_unread(trace, _is_round_trip_step)  # a view op that cannot raise does nothing else


# Note [Unread views in a forward]
# An op that saves its result for its backward (relu, tanh, sigmoid) leaves in the recorded forward
# a ``detach`` of that result, which the backward reads. saving.py recomputes that cheap view in the
# backward from the result itself, so nothing reads the forward's ``detach`` any more, yet the forward
# ran it: one Python call of the op per such activation on every call (about 1.5 us on a CPU), as did
# views the program takes and never uses. ``drop_unread_views`` drops such ``t``/``detach`` ops from
# the forward the executors run (views that cannot raise where they ran once: nothing else changes).
# Other passes still see them: mincut.py may choose to save such a view, and rederive.py may recompute
# it for a backward of other tangent kinds, so both read ``GradTraces.forward_body``, the forward's
# ops before the drop.
def drop_unread_views(trace: Trace) -> None:
    """Remove from ``trace`` (a forward: its arguments and output fixed) the ``t`` and ``detach`` ops
    whose results nothing reads (Note [Unread views in a forward])."""
    drop_unread(trace, _is_round_trip_step)


def _is_round_trip_step(bsym: BoundSymbol) -> bool:
    return (bsym.symbol.id in _ROUND_TRIPS and len(bsym.args) == 1 and not bsym.kwargs
            and isinstance(bsym.args[0], Proxy) and isinstance(bsym.output, Proxy))


def _read(value: Any, read_as: dict[int, Any]) -> Any:
    """``value`` with each proxy that ``read_as`` names replaced; ``value`` itself when none is."""
    if not read_as:
        return value
    if isinstance(value, Proxy):
        return read_as.get(id(value), value)
    t = type(value)
    if t is tuple or t is list:
        items = [_read(v, read_as) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else t(items)
    if t is dict:
        items = {k: _read(v, read_as) for k, v in value.items()}
        return value if all(items[k] is v for k, v in value.items()) else items
    return value
