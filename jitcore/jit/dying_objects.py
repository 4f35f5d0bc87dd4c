"""Instances of the program's classes with a Python ``__del__``: a call that makes one runs eagerly.

Invariant: a pass never makes an instance of a class of the program's whose ``__del__`` is the
program's Python code: the call is refused as the class is called, before the instance exists, so its
``__del__`` never runs for the pass (Note [An object whose __del__ is the program's]).
"""

from __future__ import annotations

import types
from typing import Any

from jitcore.errors import UnsupportedOperationError
from jitcore.jit.code_kinds import is_library_file, is_programs_class

__all__ = ["refuse_dying"]


# Note [An object whose __del__ is the program's]
# ``d = Dying(); return x + 1``: eagerly each call's object dies as the call ends and its ``__del__`` runs
# (``DELS.append(1)`` once per call). The pass's object died once, its ``__del__`` run natively and
# unwatched, and no cached call ran it again (eager 3 in 3 calls, jit 1); returned, each call's copy died
# as eager's does, and the pass's own and its trial copy too (4 in 3: /tmp/ana53-probes/p6_wider.py).
# A class of the program's whose ``__del__`` is a Python function outside the libraries is refused when
# the program calls it (``Hooks.on_type_lookup`` of its ``__new__``, jitcore/interpreter/calls.py
# ``call_class``), before the instance exists: the call runs eagerly, whatever the contents of what it
# reads, and ``__del__`` runs once per call as eagerly.
def refuse_dying(obj: Any, t: Any, name: str) -> None:
    """Refuses the call of a class of the program's with a Python ``__del__`` (``Hooks.on_type_lookup``'s
    ``(obj, t, name)``, told ``__new__`` of the class called) (Note [An object whose __del__ is the
    program's])."""
    if name != "__new__" or obj is not t or not isinstance(t, type) or not is_programs_class(t):
        return
    hook = getattr(t, "__del__", None)
    if type(hook) is types.FunctionType and not is_library_file(hook.__code__.co_filename):
        refused = UnsupportedOperationError(
            f"the function makes a {t.__qualname__}, whose __del__ runs when it dies, after the call, "
            "outside jitcore",
        )
        refused.whatever_the_contents = True
        raise refused
