"""Lists a traced program only appends to: guarded by type, not by length or contents.

A log the program appends to on every call (``losses.append(float(loss))``) would make every call a
new cache entry if its length or contents were guarded: the next call finds a longer list. When the
program cannot read the list, only the list's type matters; the appends are effects replayed onto
whatever list each call finds (jitcore/jit/effects.py, ``extend``). Two places prove it cannot:
- ``only_appended_to(frame)``: a read of a list from state (an attribute, a global) whose value is
  consumed by looking ``append``/``extend`` up on it, the next instruction;
- ``appended_parameters(fn)``: parameters of the jitted function that its own bytecode only ever loads
  to look ``append``/``extend`` up on them: never stored, deleted, captured by a closure, passed on,
  returned, or reachable through ``locals()``, ``vars()``, ``eval``/``exec`` or frame objects.

- ``subscripted_by(frame)``: a read of a dict from state whose value is consumed by subscripting it
  with a constant (``self.log["losses"].append``), or by ``get`` with a constant (an instance's
  ``self.__dict__.get("_mode_key")``): the dict is guarded by its type and that key, and the item
  read is bound on its own (a list there only appended to: its type).
Invariant: a list or dict so read is not read any other way through that load; a later read of it
(the program iterating the dict, ``len(self.losses)``) binds it again, with the guards of the contents
the call started with (``StateSnapshots.first_state``), not the ones the program's appends made.
"""

from __future__ import annotations

import dis
import functools
import inspect
import types
from typing import Any

__all__ = ["appended_parameters", "only_appended_to", "subscripted_by"]

_APPENDING = frozenset({"append", "extend"})
_LOOKUPS = frozenset({"LOAD_METHOD", "LOAD_ATTR"})
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"})
# Names through which code can reach its own locals without loading them.
_FRAME_ACCESS = frozenset({"locals", "vars", "eval", "exec", "_getframe", "currentframe", "stack",
                           "f_locals"})


def only_appended_to(frame: Any) -> bool:
    """Whether the value the current load pushes is consumed by looking ``append``/``extend`` up on
    it (the next instruction), so the program cannot read the list through it."""
    instructions = frame.info.instructions
    following = instructions[frame.index] if frame.index < len(instructions) else None
    return following is not None and following.opname in _LOOKUPS and following.argval in _APPENDING


# What may consume ``d[k]`` with ``d`` and the constant ``k`` on the stack: a read, a store, a delete, or
# the read-and-store of ``d[k] += 1`` (``COPY 2; COPY 2; BINARY_SUBSCR``).
_SUBSCRIPTS = frozenset({"BINARY_SUBSCR", "STORE_SUBSCR", "DELETE_SUBSCR"})
_KEYS = (str, int)


def subscripted_by(frame: Any) -> Any:
    """The constant key, when the value the current load pushes is consumed by subscripting it with
    that key (``self.log["losses"].append(x)``, ``self.stats["n"] += 1``) or by looking it up with
    ``get`` (``self.__dict__.get("_dispatch_key", None)``, torch's ``TorchDispatchMode.__exit__``), so
    the program cannot read any other item through it; None otherwise."""
    instructions = frame.info.instructions
    i = frame.index
    if i + 1 < len(instructions) and instructions[i].opname in _LOOKUPS and instructions[i].argval == "get" \
            and instructions[i + 1].opname == "LOAD_CONST" and type(instructions[i + 1].argval) in _KEYS:
        return instructions[i + 1].argval
    if i + 1 >= len(instructions) or instructions[i].opname != "LOAD_CONST" \
            or type(instructions[i].argval) not in _KEYS:
        return None
    following = instructions[i + 1]
    if following.opname == "COPY" and i + 3 < len(instructions) and following.arg == 2 \
            and instructions[i + 2].opname == "COPY" and instructions[i + 2].arg == 2:
        following = instructions[i + 3]
    return instructions[i].argval if following.opname in _SUBSCRIPTS else None


def appended_parameters(fn: Any) -> frozenset[str]:
    """The parameters of ``fn`` (a Python function, or a module's ``forward``) that its bytecode
    only appends to (see the module doc)."""
    target = getattr(fn, "forward", fn)
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    return _appended(code) if isinstance(code, types.CodeType) else frozenset()


@functools.cache
def _appended(code: types.CodeType) -> frozenset[str]:
    if _FRAME_ACCESS & set(code.co_names) or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return frozenset()
    count = code.co_argcount + code.co_kwonlyargcount
    candidates = set(code.co_varnames[:count]) - set(code.co_cellvars)
    instructions = list(dis.get_instructions(code))
    for i, inst in enumerate(instructions):
        names = inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)
        touched = candidates.intersection(n for n in names if isinstance(n, str))
        if not touched or not inst.opname.startswith(("LOAD_FAST", "STORE_FAST", "DELETE_FAST")):
            continue
        following = instructions[i + 1] if i + 1 < len(instructions) else None
        appended = (inst.opname in _LOADS and len(names) == 1 and following is not None
                    and following.opname in _LOOKUPS and following.argval in _APPENDING)
        if not appended:
            candidates -= touched
    return frozenset(candidates)
