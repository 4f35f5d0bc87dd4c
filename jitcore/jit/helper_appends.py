"""List arguments the jitted function only appends to, directly or through functions of its module it passes
them to that only append to them.

``appended_parameters`` (jit/appends.py) refuses a parameter passed on (``record(log, loss)``): the callee
could do anything with the list. ``helper_appended_parameters(fn)`` proves from the bytecode of the function
and of such a callee that nothing else happens: the callee is a global of the function's module (a plain
Python function the function never rebinds), called positionally with the parameter as one of its leading
arguments, and its own parameter there is one it only appends to (``appended_parameters`` of the callee).
Invariant: such a parameter is bound as a list argument only appended to (``MeasuredLists.bind_argument``):
the callee appends to the program's own list, whose appends are replayed onto the caller's list; the pass
guards the global by identity where it loads it, so another function there is another entry.
"""

from __future__ import annotations

import dis
import functools
import inspect
import types
from typing import Any

from jitcore.jit.appends import appended_parameters, parameter_uses

__all__ = ["helper_appended_parameters"]

_APPENDING = frozenset({"append", "extend"})
_LOOKUPS = frozenset({"LOAD_METHOD", "LOAD_ATTR"})
_SIMPLE_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_CONST", "LOAD_DEREF", "LOAD_SMALL_INT"})
_CALL = "PRECALL" if "PRECALL" in dis.opmap else "CALL"  # 3.11 counts a call's arguments in its PRECALL
_UNFOLLOWED = frozenset({"KW_NAMES", "CALL_FUNCTION_EX", "CALL_KW", "RETURN_VALUE", "RETURN_CONST"})
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


# Note [A list argument passed to a function that appends to it]
# ``def step(log, x): record(log, x.sum())`` with ``def record(log, v): log.append(v)`` in the same module:
# the parameter was passed on, so the list was bound whole, its length guarded, and every call traced again
# (20 in 20, /tmp/eff52-probes/why3.py h2). The call site is read from the bytecode: the parameter loaded
# right after the callee's load (``LOAD_GLOBAL record`` with its NULL) and single-instruction loads of the
# arguments before it (its position), then the first ``CALL n`` where ``n`` items sit above the callee
# (nested calls sit higher), with no jump, keyword names or ``*args`` call between. The callee is the
# function the module's globals hold now (the pass loads the same global and guards it by identity), a
# plain function (not a generator, no ``*args`` at that position) whose parameter there it only appends to;
# the function must not store or delete that global itself. Every other use of the parameter must be an
# append or ``len()`` (the rules of ``appended_parameters``). Anything else leaves the parameter bound
# whole, as before.
def helper_appended_parameters(fn: Any) -> frozenset[str]:
    """The list parameters of ``fn`` only appended to, directly or through functions of its module it passes
    them to (Note [A list argument passed to a function that appends to it])."""
    target = getattr(fn, "forward", fn)
    function = getattr(target, "__func__", target)
    code = getattr(function, "__code__", None)
    globals_ = getattr(function, "__globals__", None)
    if not isinstance(code, types.CodeType) or type(globals_) is not dict:
        return frozenset()
    callees = _callees(code)
    if not callees:
        return frozenset()
    found = set()
    for parameter, names in callees.items():
        if all(_appends_to(globals_.get(name), position) for name, position in names):
            found.add(parameter)
    if "len" in globals_:  # ``len`` is not the builtin there: a measured parameter reads the list whole
        found -= _measured(code)
    return frozenset(found)


def _appends_to(callee: Any, position: int) -> bool:
    if type(callee) is not types.FunctionType:
        return False
    code = callee.__code__
    if code.co_flags & _RESUMABLE or position >= code.co_argcount:
        return False
    name = code.co_varnames[position]
    return name in appended_parameters(callee)


@functools.cache
def _callees(code: types.CodeType) -> dict[str, frozenset[tuple[str, int]]]:
    """Per parameter whose every use appends, measures or passes it to a global: the globals and positions
    (empty where no parameter is passed to a global, or one is used otherwise)."""
    found = parameter_uses(code)
    if found is None:
        return {}
    candidates, instructions, uses = found
    rebound = {inst.argval for inst in instructions if inst.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")}
    passed: dict[str, set[tuple[str, int]]] = {p: set() for p in candidates}
    for i, names, touched in uses:
        following = instructions[i + 1] if len(names) == 1 and i + 1 < len(instructions) else None
        if following is not None and instructions[i].opname.startswith("LOAD_FAST"):
            if following.opname in _LOOKUPS and following.argval in _APPENDING:
                continue
            if following.opname in ("PRECALL", "CALL") and following.arg == 1 and i >= 1 \
                    and instructions[i - 1].opname == "LOAD_GLOBAL" and instructions[i - 1].argval == "len":
                continue  # ``len(log)``: read per call (MeasuredLists)
        for parameter in touched:
            site = None
            if instructions[i].opname.startswith("LOAD_FAST") and names.count(parameter) == 1:
                site = _call_site(instructions, i, names.index(parameter))
            if site is not None and site[0] not in rebound:
                passed[parameter].add(site)
            else:
                candidates.discard(parameter)
    return {p: frozenset(passed[p]) for p in candidates if passed[p]}


@functools.cache
def _measured(code: types.CodeType) -> frozenset[str]:
    instructions = list(dis.get_instructions(code))
    return frozenset(inst.argval for i, inst in enumerate(instructions[1:], 1)
                     if inst.opname.startswith("LOAD_FAST") and instructions[i - 1].opname == "LOAD_GLOBAL"
                     and instructions[i - 1].argval == "len")


def _call_site(instructions: list, i: int, which: int) -> tuple[str, int] | None:
    """(the global called, the argument's position) where the value the load ``instructions[i]`` pushes
    ``which``-th (3.13's LOAD_FAST_LOAD_FAST pushes two) is a positional argument of a call of a global
    (Note [A list argument passed to a function that appends to it])."""
    start, before = i - 1, 0
    while start >= 0 and (instructions[start].opname in _SIMPLE_LOADS
                          or instructions[start].opname == "LOAD_FAST_LOAD_FAST"):
        before += 2 if instructions[start].opname == "LOAD_FAST_LOAD_FAST" else 1
        start -= 1
    callee = instructions[start] if start >= 0 else None
    if callee is None or callee.opname != "LOAD_GLOBAL" or not (callee.arg & 1):  # with its NULL
        return None
    position = before + which
    depth = before + (2 if instructions[i].opname == "LOAD_FAST_LOAD_FAST" else 1)  # items above the callee
    for inst in instructions[i + 1:]:
        if "JUMP" in inst.opname or inst.opname in _UNFOLLOWED:
            return None
        if inst.opname == _CALL and inst.arg == depth:  # a nested call has more items above the callee
            return callee.argval, position
        reach = _reach(inst)  # Note [An argument no later instruction reaches]
        if reach is None or depth - reach < position + 1:
            return None
        try:
            depth += dis.stack_effect(inst.opcode, inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None,
                                      jump=False)
        except ValueError:
            return None
    return None


# Note [An argument no later instruction reaches]
# The instructions after the parameter's load, up to the call, compute the later arguments; none may take
# the parameter's own slot (``record(log * 1)``, ``record(log[0])``, ``record(log + [v])`` hand the callee a
# value made from the list, which reads it: binding it as only appended to would make those reads constants
# of the trace). Net stack effects cannot tell (``log * 1`` pops two and pushes one), so each instruction's
# depth of reach (how many items below the top it pops or reads) comes from a table of the instructions
# argument expressions are made of, and any other instruction gives up: the parameter stays bound whole.
_REACH_ZERO = frozenset({
    "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_CONST", "LOAD_SMALL_INT", "LOAD_GLOBAL",
    "LOAD_DEREF", "PUSH_NULL", "NOP", "CACHE", "EXTENDED_ARG",
})
_REACH_ONE = frozenset({
    "LOAD_ATTR", "LOAD_METHOD", "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "TO_BOOL", "FORMAT_SIMPLE",
    "FORMAT_VALUE",
})
_REACH_TWO = frozenset({
    "BINARY_OP", "BINARY_SUBSCR", "COMPARE_OP", "IS_OP", "CONTAINS_OP", "FORMAT_WITH_SPEC",
})


def _reach(inst: dis.Instruction) -> int | None:
    """How deep below the top ``inst`` pops or reads; None for an instruction not in the table."""
    name = inst.opname
    if name in _REACH_ZERO:
        return 0
    if name in _REACH_ONE:
        return 1
    if name in _REACH_TWO:
        return 2
    if name in ("BUILD_LIST", "BUILD_TUPLE", "BUILD_SET", "BUILD_STRING", "COPY", "SWAP"):
        return inst.arg
    if name == "BUILD_MAP":
        return 2 * inst.arg
    if name == _CALL:  # 3.11's PRECALL takes the arguments, its CALL the callable and NULL left below them
        return inst.arg + 2
    if name == "CALL":
        return 2
    return None


