"""Run: one use of the interpreter (its hooks, its dispatch table, its live frames) and ``current_run()``.

Invariants:
- A Run's dispatch table and loop are chosen once, from which hooks are set; hooks left None cost nothing.
- ``run.frames`` lists the interpreted frames executing now, innermost last (a suspended generator's frame
  is not in it). A run belongs to the thread that created it; ``run.call`` from another thread starts a
  new run with the same hooks.
- The stack of active runs is per thread. ``current_run()`` is the innermost one; runs nest (a lookaside
  may start another run).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from jitcore.interpreter.hooks import Hooks
from jitcore.interpreter.registry import handler_table, hooked_opcodes
from jitcore.interpreter.tracing import traced_loop

if TYPE_CHECKING:
    from types import CodeType

    from jitcore.interpreter.frame import Frame

__all__ = ["ACTIVE", "LIFTED_WATCH", "Run", "active_runs", "current_run", "lift_watch"]

_HOOKED_FIELDS = ("on_load_global", "on_load_deref", "on_load_attr", "on_load_subscr", "on_contains",
                  "item_key", "on_store", "format_field")
_TABLES: dict[frozenset[str], list] = {}


class _ActiveRuns(threading.local):
    def __init__(self) -> None:
        self.stack: list[Run] = []


# Public for the generators' resume path, which reads ``ACTIVE.stack`` (= ``active_runs()``) without a call.
ACTIVE = _ActiveRuns()


def active_runs() -> list[Run]:
    """The stack of runs active on this thread, innermost last (the list itself; push/pop in pairs)."""
    return ACTIVE.stack


def current_run() -> Run | None:
    """The innermost active Run on this thread, or None when no interpreted code is running."""
    stack = ACTIVE.stack
    return stack[-1] if stack else None


# Note [A watch of C code is lifted while C calls back into the interpreter]
# A profile function set around one C call to see which Python frames that C code starts (the jit's net,
# Note [Python code a C call ran natively] in jitcore/jit/native_python.py) cares only about the frames
# C starts itself. Where C calls back into the interpreter (``map``'s function, a ``sorted`` key, the
# next value of an interpreted generator that C iterates), every Python call and return the interpreter
# makes while it runs that code was an event of the watch: a C call that resumed an interpreted
# generator cost ~80 us instead of ~10 us (CPython's test_set timed out jitted). A profile function
# marked ``LIFTED_WATCH`` is therefore taken off while the interpreter runs (``Run.call``, the
# generator drivers) and put back when control returns to the C code, which it still watches for the
# frames it starts after. The interpreted code's own C calls are then watched by their own net (under
# the lifted one they went unwatched: a watch already set is never replaced). A profiler's function
# (cProfile's) is not marked: it sees every frame, as before.
LIFTED_WATCH = "jitcore_lifted_while_interpreting"


def lift_watch() -> Callable | None:
    """Take off this thread's profile function if it is a watch of C code marked ``LIFTED_WATCH`` (Note [A
    watch of C code is lifted while C calls back into the interpreter]); returns it, to be put back."""
    profile = sys.getprofile()
    if profile is None or not getattr(profile, LIFTED_WATCH, False):
        return None
    sys.setprofile(None)
    return profile


def _native(fn: Callable, args: tuple, kwargs: dict) -> object:
    """``fn(*args, **kwargs)``: a C call the interpreter makes for the program (``Hooks.native_call``)."""
    return fn(*args, **kwargs)


class Run:
    """The state of one interpretation: hooks, dispatch table, lookasides and the live frame stack.

    Args:
        hooks: the Hooks to consult (``Hooks()`` for none).
    """

    __slots__ = (
        "_resolved",
        "execute",
        "frames",
        "fused",
        "hooked",
        "handlers",
        "hidden",
        "hooks",
        "left",
        "lookasides",
        "lookasides_by_identity",
        "max_depth",
        "native",
        "native_exc",
        "on_opaque_call",
        "plain",
        "raising",
        "unentered",
        "resolve_call",
        "stored_hashes",
        "thread",
        "traceable",
        "type_of",
    )

    def __init__(self, hooks: Hooks) -> None:
        from jitcore.interpreter import loop
        from jitcore.interpreter.lookasides import builtin_lookasides

        self.hooks = hooks
        self.frames: list[Frame] = []
        hooks_set = frozenset(name for name in _HOOKED_FIELDS if getattr(hooks, name) is not None)
        table = _TABLES.get(hooks_set)
        if table is None:
            table = _TABLES[hooks_set] = handler_table(hooks_set)
        self.handlers = table
        self.lookasides = {**builtin_lookasides(), **hooks.lookasides}
        # the keys whose class hashes by Python, by id (Note [A callable hashed by Python is looked up by
        # identity], calls.py)
        self.lookasides_by_identity: dict[int, Callable] | None = None
        self.resolve_call = hooks.resolve_call
        self.on_opaque_call = hooks.on_opaque_call
        self.native = hooks.native_call if hooks.native_call is not None else _native
        self.type_of = hooks.type_of if hooks.type_of is not None else type
        self.max_depth = hooks.max_depth if hooks.max_depth is not None else sys.maxsize
        self.execute = loop.execute_traced if hooks.on_instruction is not None else loop.execute
        # fused instructions (Note [Fused instructions]) unless a hook must see every instruction; the
        # opcodes whose load hooks are set are never fused
        self.fused = hooks.on_instruction is None
        self.hooked = hooked_opcodes(hooks_set)
        self.plain = self.fused and not self.hooked  # executes ``CodeInfo.fused`` (the loop's fast path)
        # no hook sees instructions: a trace function of the program's can (tracing.py); while one is set,
        # frames start in loop.execute_settrace
        self.traceable = self.plain
        if traced_loop(self):
            self.plain, self.execute = False, loop.execute_settrace
        self.raising: tuple | None = None
        # (exception, frame, next): frames it left without a traceback entry (Note [Unwinding at the recursion
        # limit] in loop.py), the latest first
        self.unentered: tuple | None = None
        self.native_exc: BaseException | None = None
        self.left: tuple = ()  # (ids of exception, entry, caller) of the last exceptions that left a frame
        # id(entry) -> (id of the entry under it, its instruction, the hooks' entries dropped under it), for
        # the last few entries given to the program without them (Note [The hooks' traceback entries],
        # tracebacks.py)
        self.hidden: dict[int, tuple[int, int, list[tuple[int, list[tuple[CodeType, int, int]]]]]] = {}
        self._resolved: dict[int, tuple[weakref.ref, Callable | None]] = {}
        # id(dict or set) -> (it, {id(key): (key, hash)}): the hashes C stored for keys this run inserted
        # (Note [A keyed C call, interpreted first], hashed_inserts.py)
        self.stored_hashes: dict[int, tuple[object, dict[int, tuple[object, int]]]] = {}
        self.thread = threading.get_ident()

    def call(self, fn: Callable, *args: object, **kwargs: object) -> object:
        """Call ``fn(*args, **kwargs)`` as the interpreted program would: interpreting Python code.

        Returns:
            what the call returns.

        Raises:
            whatever the call raises (the user's exception object itself).
        """
        from jitcore.interpreter.calls import call

        if threading.get_ident() != self.thread:
            # frames are per thread: a call arriving from another thread gets its own run, same hooks
            return Run(self.hooks).call(fn, *args, **kwargs)
        stack = ACTIVE.stack
        stack.append(self)
        lifted = lift_watch()  # Note [A watch of C code is lifted while C calls back into the interpreter]
        try:
            return call(self, fn, args, kwargs)
        except BaseException as e:
            from jitcore.interpreter.tracebacks import strip_internal

            e.__traceback__ = strip_internal(e.__traceback__)
            raise
        finally:
            stack.pop()
            if lifted is not None:
                sys.setprofile(lifted)

    def resolve(self, fn: object) -> Callable | None:
        """``hooks.resolve_call(fn)``, cached per callable for the life of the run. The cache holds the
        callable weakly (Note [The resolve cache holds callables weakly])."""
        key = id(fn)
        hit = self._resolved.get(key)
        if hit is not None and hit[0]() is fn:
            return hit[1]
        result = self.resolve_call(fn)
        try:
            self._resolved[key] = (weakref.ref(fn), result)
        except TypeError:  # a callable that cannot be referred to weakly is asked again on every call
            pass
        return result

    # Note [The resolve cache holds callables weakly]
    # Holding the callables themselves kept every function the program made while it ran (an inner
    # ``def`` called once per loop iteration, with its closure cells and what they hold) alive until
    # the run ended: ``__del__`` ran late (CPython's test_scope.testLeaks), and a long loop grew the
    # cache by one entry per made function. A dead entry's id may be reused by a new callable: the
    # weak reference then answers another object (or None), and the entry is replaced.

    def __repr__(self) -> str:
        return f"<Run frames={self.frames!r}>"
