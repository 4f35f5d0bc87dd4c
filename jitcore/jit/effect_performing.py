"""How each kind of ``Effect`` (jit/effects.py) is performed on the object it changes, after a run of the
computation: attribute and slot writes, item writes, list/deque/buffer/set contents, pushes, a dict's order,
cells, a tensor's ``.grad``, and the program's prints, log records and warnings.

Invariant: ``perform`` changes ``target`` exactly as the program's own statement did in the pass, through
the type's own storage (an instance's ``__dict__``, a slot's descriptor, ``dict``/``list``/``set`` methods
of the base type), never through a Python ``__setattr__``/``__setitem__`` of the object's class: those ran
in the pass, and the diff recorded what they left.
"""

from __future__ import annotations

import collections
import heapq
import warnings
from typing import TYPE_CHECKING, Any

from jitcore.jit import set_ops
from jitcore.jit.object_states import BUFFERS, MISSING, buffer_type, is_slot, set_slot

if TYPE_CHECKING:
    from jitcore.jit.effects import Effect

__all__ = ["emit_record", "emit_warning", "perform", "print_line"]


def perform(effect: Effect, target: Any, value: Any, dispatch_runs: bool = False) -> None:
    kind = effect.kind
    if kind == "setattr":  # the instance dict was diffed: it is written as the traced __setattr__ left it
        if isinstance(target, type):
            type.__setattr__(target, effect.key, value)
        elif is_slot(type(target), effect.key):  # a typed proxy's dict held the tensor's slot field
            set_slot(target, effect.key, value)
        else:
            vars(target)[effect.key] = value
    elif kind == "delattr":
        if isinstance(target, type):
            type.__delattr__(target, effect.key)
        elif is_slot(type(target), effect.key):
            set_slot(target, effect.key, MISSING)
        else:
            del vars(target)[effect.key]
    elif kind == "setslot":
        set_slot(target, effect.key, value)
    elif kind == "delslot":
        set_slot(target, effect.key, MISSING)
    elif kind == "setitem":
        target[effect.key] = value
    elif kind == "setitem_at":
        target[value[0]] = value[1]
    elif kind == "heappush":  # the key: heappush or bisect.insort_right/left (Note [An item only pushed])
        (effect.key or heapq.heappush)(target, value)
    elif kind == "add":  # the key: each op in program order (Note [A set's changes in program order])
        set_ops.perform(target, effect.key, value)
    elif kind == "delitem":
        del target[effect.key]
    elif kind == "extend":
        if isinstance(target, collections.deque):
            target.extend(value)
        else:
            (buffer_type(target) if isinstance(target, BUFFERS) else list).extend(target, value)
    elif kind == "contents":
        if isinstance(target, BUFFERS):
            buffer_type(target).__setitem__(target, slice(None), value)
        elif isinstance(target, list):
            target[:] = value
        elif isinstance(target, collections.deque):
            target.clear()
            target.extend(value)
        else:
            target.clear()
            target.update(value)
    elif kind == "order":
        for key in (k for k in value if dict.__contains__(target, k)):
            if isinstance(target, collections.OrderedDict):
                collections.OrderedDict.move_to_end(target, key)
            else:
                dict.__setitem__(target, key, dict.pop(target, key))  # to the end
    elif kind == "cell":
        target.cell_contents = value
    elif kind == "grad":
        target.grad = value
    elif kind == "print":
        print_line(effect, target, value)
    elif kind == "log" or kind == "dispatch_log" and not dispatch_runs:
        emit_record(effect, target, value)
    elif kind == "warn":
        emit_warning(effect, target, value)


def print_line(effect: Effect, stream: Any, pieces: list) -> None:
    """Perform a ``"print"`` effect: its pieces (text, or this call's numbers) to ``stream``."""
    sep, end, flush = effect.key
    print(*pieces, sep=sep, end=end, file=stream, flush=flush)


def emit_warning(effect: Effect, module_globals: dict, value: list) -> None:
    """Perform a ``"warn"`` effect: ``warn_explicit`` as ``warnings.warn`` calls it, with the registry the
    blamed module holds now."""
    category, filename, lineno, module = effect.key
    registry = module_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(value[0], category, filename, lineno, module, registry)


def emit_record(effect: Effect, logger: Any, value: list) -> None:
    """Perform a ``"log"`` effect: the record made and handled as ``Logger._log`` does."""
    level, pathname, lineno, func = effect.key
    msg, args, extra = value
    logger.handle(logger.makeRecord(logger.name, level, pathname, lineno, msg, tuple(args), None, func, extra,
                                    None))
