"""Round trips of views in the grad transform's traces: ``t(t(a))`` read as ``a``,
``detach(detach(a))`` made ``detach(a)``, and such view ops whose results nothing reads dropped
(Note [View round trips in a backward]; a forward, such as a jitted training step's, holds them too);
where a trace is left as it is, a forward still loses the views nothing reads (Note [Unread views
in a forward]).

Invariants:
- only ``aten.t`` and ``aten.detach`` are rewritten: views whose result has their input's storage,
  sizes, strides and offset (``t`` twice) or differs from it only in not requiring grad
  (``detach``), and which cannot raise on a tensor;
- a value is read in place of another only as an argument of a later op, never in the trace's
  output: what the backward hands autograd is the same object as before;
- a trace with an op anywhere (subsymbols too) that may change a tensor's metadata is left as it
  is: an in-place op other than an aten op without torch's ``inplace_view`` tag (Note [In-place
  ops and round trips]); the tensor an in-place op writes is never rewritten (it returns it);
- the trace's arguments and output are unchanged: the forward saves the same values;
- a forward trace loses only round trips and ``t``/``detach`` ops that nothing reads; the grad
  transform keeps every op in ``GradTraces.forward_body`` for what recomputes forward values
  (mincut.py, rederive.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

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


# Note [In-place ops and round trips]
# ``t(t(a))`` and ``a`` share storage, sizes, strides and offset, so an in-place op that writes data
# (an optimizer's ``add_`` on a parameter in a jitted training step, ``copy_``, ``mul_``) changes both
# alike, before or after the round trip: reading ``a`` for it stays sound. An in-place op that changes
# a tensor's metadata (``t_``, ``transpose_``, ``resize_``, ``set_``, ``as_strided_``, ``detach_``:
# torch tags each ``inplace_view``) would change one of them only, so a trace holding one is left
# as it is, and so is one holding an in-place op that is not an aten op (its effects are not known
# from a schema). The tensors an in-place op writes (its schema's written arguments: ``self``,
# ``out=``) are not rewritten: the op returns them, and the value its output names must stay the
# object it wrote (``u = t(t(a)); u.add_(b); return u`` returns the view ``u``, not ``a``); its other
# arguments are read like any op's (``p.add_(t(t(g)))`` reads ``g``).
def collapse_view_round_trips(trace: Trace) -> bool:
    """Rewrite ``trace`` (a forward or backward: its arguments and output fixed) in place, as the
    module docstring says; False when it is left as it is (an op that may change metadata)."""
    if any(_may_change_metadata(bsym) for _depth, bsym in walk(trace.bound_symbols)):
        return False
    producers: dict[int, BoundSymbol] = {}  # id(proxy) -> the round-trip op that made it
    read_as: dict[int, Any] = {}  # id(proxy) -> the value later ops read in its place
    rewritten: list[BoundSymbol] = []
    for bsym in trace.bound_symbols:
        args, kwargs = _read(bsym.args, read_as), _read(bsym.kwargs, read_as)
        if "inplace" in bsym.symbol.tags:  # Note [In-place ops and round trips]
            args, kwargs = _written_kept(bsym, args, kwargs)
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
    return True


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


def _may_change_metadata(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` may change a tensor's metadata in place (Note [In-place ops and round trips])."""
    if "inplace" not in bsym.symbol.tags:
        return False
    op = bsym.symbol.fn
    return (not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten"
            or torch.Tag.inplace_view in op.tags)


def _written_kept(bsym: BoundSymbol, args: Any, kwargs: Any) -> tuple[Any, Any]:
    """``args``/``kwargs`` (``bsym``'s, rewritten) with the arguments its aten schema writes as they
    were in ``bsym`` (only aten in-place ops reach here: ``_may_change_metadata``)."""
    schema = bsym.symbol.fn._schema
    written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    names = [a.name for a in schema.arguments]
    kept = tuple(old if i < len(names) and names[i] in written else new
                 for i, (old, new) in enumerate(zip(bsym.args, args)))
    return kept, {k: bsym.kwargs[k] if k in written else v for k, v in kwargs.items()}


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
