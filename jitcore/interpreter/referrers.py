"""``gc.get_referrers`` called by interpreted code: the program's referrers, not the interpreter's.

Invariants:
- The answer holds what the native answer would: the program's objects that refer to the arguments, and
  the generator object where an interpreted generator's frame refers to them (CPython traverses a
  generator's frame through the generator).
- It never holds the interpreter's own containers (a frame's fast locals and value stack, the argument
  tuples and lists of calls in flight) nor a ``Frame``: the empty slot of an unbound local (``NULL``) they
  hold would reach the program (Note [Referrers of the interpreter's own]).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import gc
import types

from jitcore.interpreter.frame import Frame
from jitcore.interpreter.tracebacks import DRIVEN_CODES

__all__ = ["get_referrers"]

_GENERATOR_CODE = {types.GeneratorType: "gi_code", types.CoroutineType: "cr_code",
                   types.AsyncGeneratorType: "ag_code"}


# Note [Referrers of the interpreter's own]
# CPython's ``gc.get_referrers(x)`` visits the objects the collector tracks; a running frame's locals and
# value stack are not such an object, so a local of a running function is no referrer (test_asyncio's
# ``test_future_cancelled_exception_refcycles`` asserts ``gc.get_referrers(exc) == []``). An interpreted
# frame keeps them in lists (``Frame.fast``, ``Frame.stack``), and a call in flight keeps its arguments in a
# tuple or list only native frames hold: the native answer listed them, with the ``NULL`` of unbound locals
# in them, which a loop over the answer then stored in a local (read back as unbound: UnboundLocalError in
# unittest's formatting of the failed assertion). Such a container is left out: a list that is a ``Frame``'s
# ``fast`` or ``stack``, and a tuple or list that nothing the collector tracks holds but such temporaries
# (the program's own containers are held by a frame's lists or its other objects). A ``Frame`` (its
# ``exc_value``, its ``result``) and its lists stand for the generator object driving it, if any, as
# CPython's generator holds its frame; a function's frame for nothing.
def get_referrers(*objs: object) -> list:
    """``gc.get_referrers(*objs)`` without the interpreter's containers (Note [Referrers of the
    interpreter's own])."""
    found = gc.get_referrers(*objs)
    out: list = []
    for referrer in found:
        kind = type(referrer)
        if kind is Frame:
            _add_generators(referrer, out)
        elif kind is list or kind is tuple:
            frames = _frames_holding(referrer)
            if frames:
                for frame in frames:
                    _add_generators(frame, out)
            elif _held(referrer, found, out, _DEPTH):
                out.append(referrer)
        else:
            out.append(referrer)
    return out


_DEPTH = 4  # how many containers deep an interpreter's temporary may sit (3.11 wraps call arguments twice)


def _frames_holding(container: list | tuple) -> list[Frame]:
    """The frames whose fast locals or value stack ``container`` is."""
    return [owner for owner in gc.get_referrers(container) if type(owner) is Frame and
            (owner.fast is container or getattr(owner, "stack", None) is container)]


def _held(container: list | tuple, found: list, out: list, depth: int) -> bool:
    """Whether an object the collector tracks, other than the interpreter's temporaries, holds
    ``container``: a frame's locals or stack, a program's object, or a container so held."""
    for owner in gc.get_referrers(container):
        if owner is found or owner is out:
            continue
        kind = type(owner)
        if kind is Frame:
            return True
        if kind is not list and kind is not tuple:
            return True
        if depth == 0 or _frames_holding(owner) or _held(owner, found, out, depth - 1):
            return True
    return False


def _add_generators(frame: Frame, out: list) -> None:
    """Append the interpreted generator objects that drive ``frame`` to ``out`` (once)."""
    for owner in gc.get_referrers(frame):
        attribute = _GENERATOR_CODE.get(type(owner))
        if attribute is not None and id(getattr(owner, attribute)) in DRIVEN_CODES and \
                not any(owner is seen for seen in out):
            out.append(owner)
