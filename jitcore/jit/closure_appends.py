"""List arguments the jitted function only appends to through closures it makes and only calls or hands out.

``appended_parameters`` (jit/appends.py) refuses a parameter captured by a closure: the closure could do
anything with the list, or outlive the call. ``closure_appended_parameters(fn)`` proves from the bytecode of
the function and of the closures it makes that the list is never read: the parameter's cell is read only
to look ``append``/``extend`` up on the list (in the function and in each closure), or to make a closure
whose code does only that, and each such closure is stored in a local that is only ever called
(``f = lambda g: log.append(g.sum()); f(h)``) or handed out (returned or stored: Note [A closure over a
list argument handed out]).
Invariant: such a parameter is bound as a list argument only appended to (``MeasuredLists.bind_argument``):
the cell holds the program's own list for the pass, whose appends are replayed onto the caller's list; a
closure handed out is made again per call over the caller's list (jit/outputs.py).
"""

from __future__ import annotations

import dis
import functools
import inspect
import sys
import types
from typing import Any

from jitcore.jit.appends import stack_use

__all__ = ["closure_appended_parameters"]

_APPENDING = frozenset({"append", "extend"})
_LOOKUPS = frozenset({"LOAD_METHOD", "LOAD_ATTR"})
_FRAME_ACCESS = frozenset({"locals", "vars", "eval", "exec", "_getframe", "currentframe", "stack",
                           "f_locals"})
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_NULL_AFTER_CALLEE = 1  # 3.13 pushes a call's NULL after the callee, 3.11 and 3.12 before it
_CLOSURE_LOADS = frozenset({"LOAD_CLOSURE", "LOAD_FAST"})  # 3.13 loads a cell for a closure with LOAD_FAST


# Note [A list argument appended to from a closure]
# ``f = lambda g: log.append(g.sum()); f(h)`` with a list argument ``log``: a parameter a closure captures
# was bound whole, its length guarded, so every call traced again (3 entries in 3 calls). Reading the cell
# only to append is as good as reading the local: what matters is that no code can read the list or keep
# the cell past the call. So each use of the parameter in the function must be ``MAKE_CELL``, a
# ``LOAD_DEREF`` consumed by looking ``append``/``extend`` up, or the load of its cell into the closure tuple
# of a ``MAKE_FUNCTION`` whose function goes straight into a local; that local only ever loaded as the
# callee of a call (``PUSH_NULL`` before it, after it on 3.13) and never captured itself; the closure's code
# (not a generator, which would keep the cell in the object its call returns) reads the cell only to
# append, and makes no closure of its own over it. Anything else binds the list whole, as before.
def closure_appended_parameters(fn: Any) -> frozenset[str]:
    """The list parameters of ``fn`` only appended to, directly or through closures it makes and only calls
    (Note [A list argument appended to from a closure])."""
    target = getattr(fn, "forward", fn)
    function = getattr(target, "__func__", target)
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return frozenset()
    found, callees = _closure_appended(code)
    globals_ = getattr(function, "__globals__", {})
    if any(name in globals_ for name in callees):  # Note [A closure handed to sorted as its key]
        return frozenset()
    return found


@functools.cache
def _closure_appended(code: types.CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """The parameters only appended to through closures (or measured by ``len``), and the builtins those
    closures are handed to and ``len`` where it measures one (which must be the builtins where the function
    runs: Note [A closure handed to sorted as its key])."""
    if _FRAME_ACCESS & set(code.co_names) or code.co_flags & _RESUMABLE:
        return frozenset(), frozenset()
    count = code.co_argcount + code.co_kwonlyargcount
    candidates = set(code.co_varnames[:count]) & set(code.co_cellvars)
    if not candidates:
        return frozenset(), frozenset()
    instructions = list(dis.get_instructions(code))
    closures: set[str] = set()  # the locals holding closures made over a candidate
    callees: set[str] = set()  # the builtins closures made over a candidate are handed to as ``key=``
    for i, inst in enumerate(instructions):
        names = _names(inst)
        if candidates.isdisjoint(names) or inst.opname == "MAKE_CELL":
            continue
        if inst.opname == "LOAD_DEREF" and _looks_up_appending(instructions, i + 1):
            continue
        if inst.opname == "LOAD_DEREF" and _measured(instructions, i):  # ``len(log)``: read per call
            callees.add("len")  # (MeasuredLists; the builtin where the function runs)
            continue
        local = _closure_made(instructions, i, code.co_consts) if inst.opname in _CLOSURE_LOADS else None
        if local is None:
            candidates.difference_update(names)
        elif local == _HANDED_OUT:  # Note [A closure over a list argument handed out]
            continue
        elif local.startswith(_KEY_OF):
            callees.add(local[len(_KEY_OF):])
        else:
            closures.add(local)
    if candidates and not all(_only_called(code, instructions, local) for local in closures):
        return frozenset(), frozenset()
    return frozenset(candidates), frozenset(callees)


# Note [A closure handed to sorted as its key]
# ``sorted(xs, key=lambda v: log.append(v) or v)`` with a list argument ``log``: the closure was no local
# only called, so the list was bound whole and every call traced again (20 in 20: /tmp/eff55-probes/
# item1.py "sorted key logs"). ``sorted``, ``min`` and ``max`` call their ``key`` during the call and keep
# nothing of it: a closure made right there as the last keyword argument ``key`` (``KW_NAMES``/``CALL_KW``'s
# names end with it, the call right after the function is made) of a call of the global ``sorted``/``min``/
# ``max`` loaded with its NULL (the positional arguments between the callee and the closure walked with
# ``stack_use``, none taking the callee) is as good as a local only called. The name must be the builtin:
# the function's module defines no global of that name (checked where it is bound, as for ``len``).
# ``xs.sort(key=...)`` is not covered: nothing proves ``xs`` a list.
_KEY_OF = "key of "  # ``_closure_made``'s answer for a closure handed to a builtin: this, then its name
_KEYED_BUILTINS = frozenset({"sorted", "min", "max"})
_SCAN = 32


def _keyed_builtin(instructions: list, i: int, k: int, consts: tuple) -> str | None:
    """The builtin whose ``key=`` the closure made from ``instructions[i]`` to ``instructions[k - 1]`` is
    (Note [A closure handed to sorted as its key]), else None."""
    following = [x for x in instructions[k:k + 3] if x.opname != "PRECALL"]
    if len(following) < 2:
        return None
    names, call = following[0], following[1]
    if names.opname == "KW_NAMES" and call.opname == "CALL":  # 3.11, 3.12
        keywords = consts[names.arg]  # (3.11's dis does not show the names)
    elif names.opname == "LOAD_CONST" and call.opname == "CALL_KW":  # 3.13
        keywords = names.argval
    else:
        return None
    if type(keywords) is not tuple or not keywords or keywords[-1] != "key":
        return None
    positional = call.arg - len(keywords)
    for c in range(i - 1, max(-1, i - _SCAN), -1):
        callee = instructions[c]
        if callee.opname != "LOAD_GLOBAL" or not callee.arg & 1 or callee.argval not in _KEYED_BUILTINS:
            continue
        above = 0
        for inst in instructions[c + 1:i]:
            use = stack_use(inst)
            if inst.opname == "LIST_EXTEND" and inst.arg == 1:
                use = (2, 1)
            if use is None or use[0] > above:
                above = -1
                break
            above += use[1] - use[0]
        if above == positional and len(keywords) == 1:
            return callee.argval
        return None
    return None


def _measured(instructions: list, i: int) -> bool:
    """Whether the cell ``instructions[i]`` loads is the one argument of a call of the global ``len`` (the
    list's length, read per call: Note [A list's length read per call], jit/measured_lists.py)."""
    call = next((x for x in instructions[i + 1:i + 3] if x.opname != "PRECALL"), None)
    before = instructions[i - 1] if i >= 1 else None
    return call is not None and call.opname == "CALL" and call.arg == 1 and before is not None \
        and before.opname == "LOAD_GLOBAL" and before.argval == "len" and bool(before.arg & 1)


def _names(inst: dis.Instruction) -> tuple:
    """The local, cell or free variable names ``inst`` names (two for 3.13's LOAD_FAST_LOAD_FAST)."""
    if not (inst.opname.startswith(("LOAD_FAST", "STORE_FAST", "DELETE_FAST")) or "DEREF" in inst.opname
            or inst.opname in ("MAKE_CELL", "LOAD_CLOSURE")):
        return ()
    return inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)


def _looks_up_appending(instructions: list, i: int) -> bool:
    following = instructions[i] if i < len(instructions) else None
    return following is not None and following.opname in _LOOKUPS and following.argval in _APPENDING


def _closure_made(instructions: list, i: int, consts: tuple) -> str | None:
    """The local a closure goes into, when the cell ``instructions[i]`` loads is one of a closure tuple whose
    function only appends through it and is stored in a local right away (``_KEY_OF`` and the builtin's name
    where it is handed to one as its ``key``: Note [A closure handed to sorted as its key]); None
    otherwise."""
    j = i
    while j < len(instructions) and instructions[j].opname in _CLOSURE_LOADS:
        j += 1
    if j + 2 >= len(instructions) or instructions[j].opname != "BUILD_TUPLE" \
            or instructions[j + 1].opname != "LOAD_CONST" or instructions[j + 2].opname != "MAKE_FUNCTION":
        return None
    inner, name = instructions[j + 1].argval, instructions[i].argval
    k = j + 3
    while k < len(instructions) and instructions[k].opname == "SET_FUNCTION_ATTRIBUTE":
        k += 1
    if not isinstance(inner, types.CodeType) or not _appends_only(inner, name) or k >= len(instructions):
        return None
    if instructions[k].opname != "STORE_FAST":
        keyed = _keyed_builtin(instructions, i, k, consts)  # Note [A closure handed to sorted as its key]
        if keyed is not None:
            return _KEY_OF + keyed
        return _HANDED_OUT if _handed_out(instructions, k, 0) else None
    return instructions[k].argval


def _appends_only(inner: types.CodeType, name: str) -> bool:
    """Whether the closure's code reads the cell ``name`` only to look ``append``/``extend`` up on it."""
    if _FRAME_ACCESS & set(inner.co_names) or inner.co_flags & _RESUMABLE or name not in inner.co_freevars:
        return False
    instructions = list(dis.get_instructions(inner))
    return all(inst.opname == "LOAD_DEREF" and _looks_up_appending(instructions, i + 1)
               for i, inst in enumerate(instructions) if name in _names(inst))


def _only_called(code: types.CodeType, instructions: list, local: str) -> bool:
    """Whether the local ``local`` is only stored by making a closure (``_closure_made``) and only loaded as
    the callee of a call, or to hand the closure out (Note [A closure over a list argument handed out])."""
    if local in code.co_cellvars:
        return False
    for i, inst in enumerate(instructions):
        names = _names(inst)
        if local not in names:
            continue
        if inst.opname == "STORE_FAST" and i >= 1 and instructions[i - 1].opname in (
                "MAKE_FUNCTION", "SET_FUNCTION_ATTRIBUTE"):
            continue
        null = i + _NULL_AFTER_CALLEE if sys.version_info >= (3, 13) else i - 1  # the callee's NULL
        if inst.opname in ("LOAD_FAST", "LOAD_FAST_CHECK") and 0 <= null < len(instructions) \
                and instructions[null].opname == "PUSH_NULL":
            continue
        loads = inst.opname in _LOCAL_LOADS and names.count(local) == 1
        if loads and _handed_out(instructions, i + 1, len(names) - 1 - names.index(local)):
            continue
        return False
    return True


# Note [A closure over a list argument handed out]
# ``f = lambda v: log.append(v); return f, x + 1`` (or ``HOLD.cb = f``) with a list argument ``log``: the
# closure outlives the call, so the argument was bound whole, its length guarded, and every call traced
# again (an eager entry before: Note [A closure over a call's objects], jit/outputs.py). The closure can
# only append to the list, during the call or after it; the function hands it out and reads nothing
# through it. So a closure whose code only appends through the cell may also be loaded to be handed out:
# its value, followed on the stack through straight-line code (``stack_use``; no jump, no other consumer),
# ends in the value returned, or the value of a ``STORE_ATTR``/``STORE_GLOBAL``/``STORE_SUBSCR``, directly
# or inside a tuple or list built for one of those. The pass appends to its own list (replayed onto the
# caller's); the closure handed out is made again per call over the list this call passes
# (jit/outputs.py, ``passed_at``), so what the caller appends through it later reaches its own list, as
# eagerly. The proof is of the function's bytecode: code that reads the handed-out closure's cell
# (``f.__closure__[0].cell_contents``) later in the same call would see the pass's own list.
_LOCAL_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST"})
_HANDED_OUT = "handed out"  # ``_closure_made``'s answer for a closure made and handed out right there
_STORES = {"STORE_GLOBAL": (1, 0), "STORE_NAME": (1, 0), "STORE_ATTR": (2, 1), "STORE_SUBSCR": (3, 2)}


def _handed_out(instructions: list, start: int, depth: int) -> bool:
    """Whether the value ``depth`` places below the top of the stack before ``instructions[start]`` is
    returned or stored as a value, directly or in a tuple or list built for that, by the straight-line
    code from there (Note [A closure over a list argument handed out])."""
    for inst in instructions[start:start + _SCAN]:
        name = inst.opname
        if name == "RETURN_VALUE":
            return depth == 0
        if name in _STORES:
            taken, at = _STORES[name]
            if depth < taken:
                return depth == at
            depth -= taken
            continue
        if name in ("BUILD_TUPLE", "BUILD_LIST") and depth < inst.arg:
            depth = 0  # the container holding it is handed on
            continue
        use = stack_use(inst)
        if use is None or use[0] > depth:
            return False
        depth += use[1] - use[0]
    return False
