"""List arguments the jitted function only appends to, directly or through functions it passes them to that
only append to them.

``appended_parameters`` (jit/appends.py) refuses a parameter passed on (``record(log, loss)``): the callee
could do anything with the list. ``helper_appended_parameters(fn)`` proves from the bytecode of the function
and of such a callee that nothing else happens: the callee is a global of the function's module (a plain
Python function the function never rebinds), a free variable, a function the program defines, or a method
of the bound ``self``, called with the parameter as one of its arguments (by position or keyword), and its
own parameter there is one it only appends to (``appended_parameters`` of the callee).
Invariant: such a parameter is bound as a list argument only appended to (``MeasuredLists.bind_argument``):
the callee appends to the program's own list, whose appends are replayed onto the caller's list; the pass
guards the global, the free variable and the method it calls by identity where it loads them, so another
function there is another entry.
"""

from __future__ import annotations

import dis
import functools
import inspect
import sys
import types
from typing import Any

from jitcore.jit.appends import appended_parameters, parameter_uses
from jitcore.jit.pending_keys import is_push

__all__ = ["helper_appended_parameters"]

_APPENDING = frozenset({"append", "extend"})
_LOOKUPS = frozenset({"LOAD_METHOD", "LOAD_ATTR"})
_SIMPLE_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_CONST", "LOAD_DEREF", "LOAD_SMALL_INT"})
_CALL = "PRECALL" if "PRECALL" in dis.opmap else "CALL"  # 3.11 counts a call's arguments in its PRECALL
_UNFOLLOWED = frozenset({"CALL_FUNCTION_EX", "RETURN_VALUE", "RETURN_CONST"})
_LOCAL_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK"})
_NAME_LOADS = {"LOAD_FAST": "local", "LOAD_FAST_CHECK": "local", "LOAD_DEREF": "cell"}  # a callee's load
_FARTHEST = 256  # instructions searched back for the callee
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

# Note [Helpers called otherwise than positionally by a global name]
# ``record(x.max(), log, h(x.min()))``, ``record(v=x, log=log)``, ``self.record(log, v)``, and a function
# the program defines (``def note(log, v): ...; note(log, x)``) or its enclosing function does (a free
# variable): each bound the list whole, so every call traced again (20 in 20: /tmp/eff52-probes/
# helper_appends_probe.py f2, local_helpers.py). The callee is now the nearest one before the load whose
# pushes (a global with its NULL, a local or a free variable with ``PUSH_NULL``, a method looked up on a
# local) no instruction between takes: each is one of the argument expressions' (the table of Note [An
# argument no later instruction reaches], which says how deep it reaches, no jump), so the load is among
# that call's arguments, at the depth above the callee it finds; the call is the first whose count is that
# of the items above the callee (``KW_NAMES``/``CALL_KW``'s names give the keywords, the last arguments).
# The function called is the global's value, the free variable's (both guarded by identity where the pass
# loads them), the code a local is made from (stored once, right from ``MAKE_FUNCTION``: always that code),
# or the method the class of the bound ``self`` holds (a plain function found in its MRO, not shadowed in
# the instance's ``__dict__``, no ``__getattribute__`` of the class's, ``self`` never stored; the pass
# guards the lookup). Its parameter at that position, or of that keyword (``self`` first for a method),
# must be one it only appends to.
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
    owner = getattr(target, "__self__", None) if isinstance(target, types.MethodType) else None
    found = set()
    for parameter, sites in callees.items():
        if all(_appends_to(_callee(kind, ref, function, owner), slot, kind == "method")
               for kind, ref, slot in sites):
            found.add(parameter)
    if "len" in globals_:  # ``len`` is not the builtin there: a measured parameter reads the list whole
        found -= _measured(code)
    return frozenset(found)


def _callee(kind: str, ref: Any, function: types.FunctionType, owner: Any) -> Any:
    """The function a call site calls (Note [Helpers called otherwise than positionally by a global name]):
    the global's value, the free variable's, a function made of the local's code (for its analysis only),
    or the method the bound ``self``'s class holds; None where it is none of them."""
    code, globals_ = function.__code__, function.__globals__
    if kind == "global":
        return globals_.get(ref)
    if kind == "module":  # ``heapq.heappush``: a module's function (Note [A list argument only pushed onto])
        module = globals_.get(ref[0])
        return getattr(module, ref[1], None) if type(module) is types.ModuleType else None
    if kind == "cell":  # a free variable (the enclosing function's local): its value now, guarded as read
        if ref not in code.co_freevars or function.__closure__ is None:
            return None
        try:
            return function.__closure__[code.co_freevars.index(ref)].cell_contents
        except ValueError:  # an empty cell
            return None
    if kind == "local":  # closure cells of its own: the function is read, never called
        return types.FunctionType(ref, globals_, ref.co_name, None,
                                  tuple(types.CellType() for _ in ref.co_freevars))
    if owner is None or ref[0] != code.co_varnames[0] or code.co_argcount < 1:
        return None  # ``self`` must be the bound method's first parameter (never stored: ``_callees``)
    cls = type(owner)
    if cls.__getattribute__ is not object.__getattribute__:  # its own lookup could find anything
        return None
    if ref[1] in getattr(owner, "__dict__", {}):
        return None
    for klass in cls.__mro__:
        if ref[1] in vars(klass):
            method = vars(klass)[ref[1]]
            return method if type(method) is types.FunctionType else None
    return None


def _appends_to(callee: Any, slot: int | str, bound: bool) -> bool:
    """Whether ``callee``'s parameter at ``slot`` (a position among the call's arguments, or a keyword) is
    one it only appends to; ``bound``: a method, whose ``self`` comes first."""
    if is_push(callee):  # Note [A list argument only pushed onto], jit/pending_keys.py: the list first
        return slot == 0 and not bound
    if type(callee) is type:  # Note [A list argument passed to a class's __init__]
        init = _plain_init(callee)
        return init is not None and not bound and _appends_to(init, slot, True)
    if type(callee) is not types.FunctionType:
        return False
    code = callee.__code__
    if code.co_flags & _RESUMABLE:
        return False
    if isinstance(slot, int):
        position = slot + bound
        if position >= code.co_argcount:
            return False
        name = code.co_varnames[position]
    else:
        named = code.co_varnames[code.co_posonlyargcount + bound:code.co_argcount + code.co_kwonlyargcount]
        if slot not in named:
            return False
        name = slot
    return name in appended_parameters(callee)


# Note [A list argument passed to a class's __init__]
# ``raise E(log)`` with ``E.__init__`` appending to its argument (``log.append("init"); super().__init__()``):
# the parameter was passed to a call of a class, so the list was bound whole and every call traced again
# (20 in 20: /tmp/eff55-probes/item1.py). A class whose metaclass is ``type`` (no ``__call__`` of its own),
# whose ``__new__`` is C's (``object``'s, or an exception's: no Python ``__new__`` on its MRO) and whose
# ``__init__`` is a plain function only appending to its parameter there (``self`` first) is such a helper.
# ``object.__new__`` keeps nothing of its arguments; an exception's ``__new__`` keeps them as its ``args``
# until its ``__init__`` calls ``BaseException.__init__`` (``super().__init__()``): while it holds the
# program's copy, a read of it would read the copy, not the caller's list. So such an ``__init__`` must not
# name ``args``, and an exception that still holds the copy when the pass ends (``MeasuredLists.note_made``,
# ``check_made``) asks for a pass that binds the list whole (Note [Containers reached twice]).
def _plain_init(cls: type) -> Any:
    """The ``__init__`` of ``cls`` where calling the class is calling it on a new object that holds none of
    its arguments (or an exception's ``args``): Note [A list argument passed to a class's __init__]."""
    init = new = None
    for klass in cls.__mro__:
        own = vars(klass)
        if new is None and "__new__" in own:
            new = own["__new__"]
            builtin_exception = issubclass(klass, BaseException) and klass.__module__ == "builtins"
            if klass is not object and not builtin_exception:
                return None
        if init is None and "__init__" in own:
            init = own["__init__"]
    if type(init) is not types.FunctionType or "args" in init.__code__.co_names:
        return None
    return init


@functools.cache
def _callees(code: types.CodeType) -> dict[str, frozenset[tuple[str, Any, int | str]]]:
    """Per parameter whose every use appends, measures or passes it to a helper: the call sites, each
    (kind, what is called, slot) (empty where no parameter is passed to a helper, or one is used
    otherwise)."""
    found = parameter_uses(code)
    if found is None:
        return {}
    candidates, instructions, uses = found
    rebound = {inst.argval for inst in instructions if inst.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")}
    passed: dict[str, set[tuple[str, Any, int | str]]] = {p: set() for p in candidates}
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
                site = _call_site(code, instructions, i, names.index(parameter))
            if site is not None and site[0] == "local":
                site = _local_function(instructions, site)
            if site is not None and site[0] == "method" and _stored(instructions, site[1][0]):
                site = None
            if site is not None and not (site[0] == "global" and site[1] in rebound):
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


def _call_site(code: types.CodeType, instructions: list, i: int,
               which: int) -> tuple[str, Any, int | str] | None:
    """(kind, what is called, slot) where the value the load ``instructions[i]`` pushes ``which``-th (3.13's
    LOAD_FAST_LOAD_FAST pushes two) is an argument of a call of a global, a local or a method of a local
    (Note [Helpers called otherwise than positionally by a global name]); the slot is its position, or
    its keyword."""
    found = _enclosing_callee(instructions, i)
    if found is None:
        return None
    kind, ref, before = found
    position = before + which
    depth = before + (2 if instructions[i].opname == "LOAD_FAST_LOAD_FAST" else 1)  # items above the callee
    for j in range(i + 1, len(instructions)):
        inst = instructions[j]
        if "JUMP" in inst.opname or inst.opname in _UNFOLLOWED:
            return None
        keywords: tuple = ()
        if inst.opname == _CALL and inst.arg == depth:  # a nested call has more items above the callee
            if instructions[j - 1].opname == "KW_NAMES":
                keywords = code.co_consts[instructions[j - 1].arg]
        elif inst.opname == "CALL_KW" and inst.arg == depth - 1 \
                and instructions[j - 1].opname == "LOAD_CONST":  # 3.13: the names' tuple above the arguments
            keywords = instructions[j - 1].argval
        else:
            reach = _reach(inst)  # Note [An argument no later instruction reaches]
            if reach is None or depth - reach < position + 1:
                return None
            try:
                depth += dis.stack_effect(inst.opcode, inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None,
                                          jump=False)
            except ValueError:
                return None
            continue
        if type(keywords) is not tuple or not all(type(k) is str for k in keywords):
            return None
        positional = inst.arg - len(keywords)
        return kind, ref, position if position < positional else keywords[position - positional]
    return None


def _enclosing_callee(instructions: list, i: int) -> tuple[str, Any, int] | None:
    """The nearest callee before ``instructions[i]`` whose arguments the load is among: (kind, what, the
    items above it before the load), each instruction between an argument expression's that leaves it in
    place (Note [Helpers called otherwise than positionally by a global name])."""
    for c in range(i - 1, max(-1, i - _FARTHEST), -1):
        callee = _callee_at(instructions, c)
        if callee is None:
            continue
        kind, ref, after = callee
        depth = 0
        for inst in instructions[after:i]:
            reach = _reach(inst)
            if reach is None or reach > depth or "JUMP" in inst.opname:
                break  # consumes the callee, or no argument expression
            try:
                depth += dis.stack_effect(inst.opcode, inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None,
                                          jump=False)
            except ValueError:
                return None
        else:
            if after <= i:
                return kind, ref, depth
    return None


def _callee_at(instructions: list, c: int) -> tuple[str, Any, int] | None:
    """(kind, what, the index after its pushes) where ``instructions[c]`` begins pushing a callee with its
    NULL or ``self``: a global, a local (``PUSH_NULL`` before it, after it on 3.13), a method of a local, a
    function of a module named by a global."""
    inst = instructions[c]
    following = instructions[c + 1] if c + 1 < len(instructions) else None
    # ``heapq.heappush(...)``: the global with its NULL and the function; or the global, then the function
    # loaded as a method (3.11's LOAD_METHOD, 3.12's LOAD_ATTR with its low bit: a name no import statement
    # of the module binds), which pushes the NULL itself
    method_load = inst.opname == "LOAD_GLOBAL" and following is not None and not inst.arg & 1 and (
        following.opname == "LOAD_METHOD" or following.opname == "LOAD_ATTR" and following.arg & 1
        and sys.version_info >= (3, 12))
    if inst.opname == "LOAD_GLOBAL" and following is not None and (method_load or (
            following.opname == "LOAD_ATTR" and inst.arg & 1
            and not (following.arg & 1 and sys.version_info >= (3, 12)))):
        return "module", (inst.argval, following.argval), c + 2
    if inst.opname == "LOAD_GLOBAL" and not inst.arg & 1 and following is not None \
            and following.opname == "LOAD_ATTR" and not following.arg & 1 and c + 2 < len(instructions) \
            and instructions[c + 2].opname == "PUSH_NULL" and sys.version_info >= (3, 13):  # NULL after it
        return "module", (inst.argval, following.argval), c + 3
    if inst.opname == "LOAD_GLOBAL" and inst.arg & 1:  # with its NULL
        return "global", inst.argval, c + 1
    if following is None:
        return None
    if inst.opname == "PUSH_NULL" and following.opname in _NAME_LOADS and sys.version_info < (3, 13):
        return _NAME_LOADS[following.opname], following.argval, c + 2
    if inst.opname in _NAME_LOADS and following.opname == "PUSH_NULL" and sys.version_info >= (3, 13):
        return _NAME_LOADS[inst.opname], inst.argval, c + 2
    if inst.opname in _LOCAL_LOADS and (following.opname == "LOAD_METHOD" or (
            following.opname == "LOAD_ATTR" and sys.version_info >= (3, 12) and following.arg & 1)):
        return "method", (inst.argval, following.argval), c + 2
    return None


def _local_function(instructions: list,
                    site: tuple[str, Any, int | str]) -> tuple[str, Any, int | str] | None:
    """The site with the code of the function its local holds: the local stored once, right from
    ``MAKE_FUNCTION`` of a constant code (its attributes set after it on 3.13), never deleted; else None."""
    name = site[1]
    stores = [j for j, inst in enumerate(instructions)
              if inst.opname in ("STORE_FAST", "DELETE_FAST", "STORE_FAST_STORE_FAST", "STORE_FAST_LOAD_FAST",
                                 "LOAD_FAST_AND_CLEAR")
              and name in (inst.argval if isinstance(inst.argval, tuple) else (inst.argval,))]
    if len(stores) != 1 or instructions[stores[0]].opname != "STORE_FAST":
        return None
    j = stores[0] - 1
    while j >= 0 and instructions[j].opname == "SET_FUNCTION_ATTRIBUTE":
        j -= 1
    if j < 1 or instructions[j].opname != "MAKE_FUNCTION":
        return None
    made = instructions[j - 1]  # MAKE_FUNCTION's code (3.11 and 3.12 load closures and defaults before it)
    if made.opname != "LOAD_CONST" or not isinstance(made.argval, types.CodeType):
        return None
    return "local", made.argval, site[2]


def _stored(instructions: list, name: str) -> bool:
    """Whether the code stores or deletes the local ``name`` (``self``, whose method is called)."""
    return any(inst.opname.startswith(("STORE_FAST", "DELETE_FAST")) and name in (
        inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)) for inst in instructions)


# Note [An argument no later instruction reaches]
# The instructions after the parameter's load, up to the call, compute the later arguments; none may take
# the parameter's own slot (``record(log * 1)``, ``record(log[0])``, ``record(log + [v])`` hand the callee a
# value made from the list, which reads it: binding it as only appended to would make those reads constants
# of the trace). Net stack effects cannot tell (``log * 1`` pops two and pushes one), so each instruction's
# depth of reach (how many items below the top it pops or reads) comes from a table of the instructions
# argument expressions are made of, and any other instruction gives up: the parameter stays bound whole.
_REACH_ZERO = frozenset({
    "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_CONST", "LOAD_SMALL_INT", "LOAD_GLOBAL",
    "LOAD_DEREF", "PUSH_NULL", "NOP", "CACHE", "EXTENDED_ARG", "KW_NAMES",
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
    if name == "CALL_KW":  # 3.13: the arguments, the names' tuple, the callee and its NULL
        return inst.arg + 3
    return None


