"""Floats of a tensor subclass input's ``__tensor_flatten__`` ctx that changed between calls: dynamic
numbers of the next trace, as a float argument or a float of state that changed is.

Invariants:
- only a ``float`` entry of a ctx built of dicts, lists and tuples (or a ctx that is a float) is made
  dynamic, and only where a
  prologue pinned the ctx and the call's ctx differs from it in such floats alone (same class, inner
  tensors, structure and other entries): an int there is a size, a block size or a bit width, the
  structure itself, and stays pinned;
- such an entry is reached by the path ``value.__tensor_flatten__()[1][...]`` (``ctx_path``), kept among
  the pass's counters (``Provenance.counters``), bound once per pass as a dynamic number, and the
  ``flatten`` guard expects ``FLOAT`` there (jitcore/prologue/ctx_numbers.py);
- a class with its own ``__metadata_guard__``, a ctx holding outer sizes (``SizedContext``) or
  constants (``WithConstants``) keeps its ctx pinned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from jitcore.prologue import Path, inlined_guards
from jitcore.prologue.ctx_numbers import FLOAT, AnyFloat
from jitcore.prologue.guards import same_ctx
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.protocol import replaced_at, tensor_flatten

__all__ = ["bind_ctx_numbers", "changed_ctx_numbers", "ctx_path"]


# Note [A float of a flatten ctx that changes between calls]
# A quantized tensor keeps its scale in its ``__tensor_flatten__`` ctx (``["data"], {"scale": s}``),
# which the ``flatten`` guard compared by value: a weight whose scale changed every call (a scale
# recomputed from each batch's amax, a learning-rate-like factor) traced every call (20 misses in 20
# calls). When a miss finds an entry whose ``flatten`` guard differs from the call's ctx in float
# entries only, those entries are dynamic numbers of the next trace (``changed_ctx_numbers``, as
# ``changed_state_numbers`` does for a float of state): the value the pass rebuilds for the input gets
# a ``NumberProxy`` in its ctx, so what the class's ``__tensor_unflatten__`` and ``__torch_dispatch__``
# compute with it is recorded on the name (``mul(data, scale)``), and a subclass output whose ctx holds
# it is rebuilt with each call's number. Soundness is the dynamic number's: where the code needs the
# value itself (a branch, a size, a C call, a comparison it cannot record) the number specializes and
# is guarded by value at its path, as before (an entry per value, never a wrong one).
def ctx_path(path: Path) -> Path:
    """The path of the ctx ``__tensor_flatten__`` gives for the value at ``path``."""
    return path.attr("__tensor_flatten__").call().index(1)


def changed_ctx_numbers(prologues: list[Any], args: tuple, kwargs: dict) -> frozenset[Path]:
    """The paths of float ctx entries (under ``ctx_path``) that some prologue's ``flatten`` guard pins
    to another float while the call's ctx is otherwise the same (the Note above)."""
    found: set[Path] = set()
    for prologue in prologues:
        for guard in _with_grouped(prologue.guards):
            if guard.kind != "flatten" or any(s.kind == "call" for s in guard.path.steps):
                continue
            cls, names, expected = guard.expected
            if getattr(cls, "__metadata_guard__", None) is not None \
                    or type(expected) not in (dict, list, tuple, float, AnyFloat):
                continue
            try:
                value = guard.path.get(args, kwargs)
                if type(value) is not cls:
                    continue
                got_names, got = tensor_flatten(value)
            except Exception:  # noqa: BLE001 - the call has no such value: the guard says so
                continue
            places = _float_places(expected, got, ctx_path(guard.path)) if tuple(got_names) == names else None
            found.update(places or ())
    return frozenset(found)


def _with_grouped(guards: tuple[Any, ...]) -> Iterator[Any]:
    """``guards``, with a grouped check replaced by the guards it stands for (a jitted module's
    ``self.weight``: Note [Module state as one check], jit/module_guards.py)."""
    for guard in guards:
        yield from inlined_guards(guard) or (guard,)


def _float_places(expected: Any, got: Any, path: Path) -> list[Path] | None:
    """The paths below ``path`` where ``got`` holds another float than ``expected``; None where the two
    differ in anything else."""
    if type(expected) is float and type(got) is float:
        return [path] if expected != got and got == got else []
    if type(expected) is AnyFloat:
        return [] if type(got) is float else None
    if type(expected) is dict and type(got) is dict:
        if list(expected) != list(got):
            return None
        return _joined([_float_places(v, got[k], path.key(k)) for k, v in expected.items()])
    if type(expected) in (list, tuple) and type(got) is type(expected):
        if len(expected) != len(got):
            return None
        return _joined([_float_places(v, g, path.index(i)) for i, (v, g) in enumerate(zip(expected, got))])
    return [] if same_ctx(expected, got) else None


def _joined(parts: list[list[Path] | None]) -> list[Path] | None:
    return None if any(p is None for p in parts) else [path for part in parts for path in part]


# Note [A ctx number its class cannot rebuild with]
# The value the pass rebuilds for the input is made by the class's ``__tensor_unflatten__``/``__init__``
# run natively, with the number proxies in its ctx. A class that hands the number to C there
# (``self.scale_t = torch.tensor(scale)``: 'Could not infer dtype of NumberProxy') cannot be rebuilt so:
# the numbers are then specialized (each guarded by value at its path, which pins the ctx as the
# ``flatten`` guard did before) and the value is rebuilt from the caller's ctx: an entry per value, as
# before, never an error eager does not raise.
def bind_ctx_numbers(ctx: Any, guarded: Any, path: Path, counters: frozenset[Path],
                     bind: Callable[[float, Path], NumberProxy]) -> tuple[Any, Any, list[NumberProxy]]:
    """``ctx`` with each float entry that ``counters`` names under ``ctx_path(path)`` bound by ``bind``
    (a dynamic number), ``guarded`` (the snapshot the ``flatten`` guard expects) with ``FLOAT`` there,
    and the numbers bound; the two unchanged where none is."""
    root = ctx_path(path)
    prefix = len(root.steps)
    numbers: list[NumberProxy] = []
    for place in sorted((c for c in counters if c.root == root.root and c.steps[:prefix] == root.steps),
                        key=lambda c: c.describe()):
        keys = tuple(step.value for step in place.steps[prefix:])
        try:
            value = _value_at(ctx, keys)
        except (KeyError, IndexError, TypeError):
            continue
        if type(value) is not float:
            continue
        number = bind(value, place)
        numbers.append(number)
        ctx = replaced_at(ctx, keys, lambda _old, number=number: number)
        guarded = replaced_at(guarded, keys, lambda _old: FLOAT)
    return ctx, guarded, numbers


def _value_at(tree: Any, keys: tuple) -> Any:
    for key in keys:
        if type(tree) not in (dict, list, tuple):
            raise TypeError(key)
        tree = tree[key]
    return tree
