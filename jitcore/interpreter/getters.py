"""``operator.attrgetter(...)(obj)`` with its attribute reads made as the program's ``getattr`` makes them.

Invariants: the result and the errors are C's (``attrgetter_call`` in Modules/_operator.c): one positional
argument and no keyword, each name read in turn, a dotted name attribute by attribute, one name's value
or the tuple of all; every read goes through the interpreter's attribute protocol and the run's load hook.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import operator

from jitcore.interpreter.attributes import load_attr, loaded
from jitcore.interpreter.callbacks import active_run

__all__ = ["ATTRGETTER_CALL", "attrgetter_call"]

ATTRGETTER_CALL = operator.attrgetter.__call__  # the lookaside key (calls.py looks it up for a getter)


# Note [An attribute getter reads as getattr]
# ``operator.attrgetter("scale")(cfg)`` (a sort key, ``map(attrgetter("n"), items)``) is C reading the
# attribute natively: no Python runs for an instance dict's value, so neither the jit's net nor its load
# hook saw the read, and the value was a constant of the trace (a cached call returned the first call's
# ``cfg.scale`` after the caller changed it). The getter's names (from its ``__reduce__``, as pickling
# reads them) are read here the way ``getattr`` is.
def attrgetter_call(getter: operator.attrgetter, /, *args: object, **kwargs: object) -> object:
    """``getter(*args, **kwargs)`` (the Note above)."""
    if kwargs or len(args) != 1:
        return getter(*args, **kwargs)  # (C's own error)
    run = active_run()
    obj = args[0]
    names = getter.__reduce__()[1]
    values = tuple(_dotted(run, obj, name) for name in names)
    return values[0] if len(values) == 1 else values


def _dotted(run: object, obj: object, name: str) -> object:
    for part in name.split("."):
        obj = loaded(run, obj, part, load_attr(run, obj, part))
    return obj
