"""Lists a traced program only appends to and measures: guarded by type, not by length or contents.

A log the program appends to on every call (``losses.append(float(loss))``) would make every call a
new cache entry if its length or contents were guarded: the next call finds a longer list. When the
program cannot read the list, only the list's type matters; the appends are effects replayed onto
whatever list each call finds (jitcore/jit/effects.py, ``extend``). These places prove it cannot:
- ``only_appended_to(frame)``: a read of a list from state (an attribute, a global) whose value is
  consumed by looking ``append``/``extend`` up on it, the next instruction;
- ``measured_by_len(frame)``: a read of a list from state that is the one argument of ``len()``; its
  length is a number read per call (``MeasuredLists``, Note [A list's length read per call]);
- ``bind_defaults(provenance, fn, path)``: the same proof for a function of state the program calls (a
  forward hook ``lambda m, i, o, log=log: log.append(...)``): a default list of a parameter only
  appended to (not measured) is guarded by its type (Note [A default list of a function of state]);
- ``appended_parameters(fn)``: parameters of the jitted function that its own bytecode only ever loads
  to look ``append``/``extend`` up on them (or to call ``clear()`` on them, Note [A list the program
  empties]) or to pass them to ``len()`` as its one argument: never
  stored, deleted, captured by a closure, passed on, returned, or reachable through ``locals()``,
  ``vars()``, ``eval``/``exec`` or frame objects (and ``len`` is the builtin in the function's globals);
- ``item_appended_parameters(fn)``: the same for a dict parameter only ever subscripted by constant keys
  (``history["loss"].append(x)``, ``state["model"](x)``): its type and keys guarded, the lists at keys
  only appended to by type, the other items as any argument's (Note [A dict of lists an argument]; bound
  by jit/item_lists.py).

- ``subscripted_by(frame)``: a read of a dict from state whose value is consumed by subscripting it
  with a constant (``self.log["losses"].append``), or by ``get`` with a constant (an instance's
  ``self.__dict__.get("_mode_key")``): the dict is guarded by its type and that key, and the item
  read is bound on its own (a list there only appended to: its type).
- ``keyed_later(frame)``: the same with a key the program computes (``COUNTS[str(func)] += 1``,
  ``d.get(name, 0)``, ``groups.setdefault(k, []).append(v)``): the dict is guarded by its type and its
  keys, and each item read is bound on its own (Note [A dict read at a computed key]).
- ``reads_appended_item(frame, ...)``: a read of a list from state consumed by subscripting it with a
  constant negative index that falls among the items this pass appended to it (``seen.append(v);
  y = seen[-1]``): its type is guarded, the item read is the program's own (Note [An item the program
  appended, read back]).
- ``stored_into(frame)``: a read of a dict from state consumed by a subscript store (``outs[k] = y``):
  its type is guarded, not its keys (Note [A dict only stored into]).
Invariant: a list or dict so read is not read any other way through that load; a later read of it
(the program iterating the dict, indexing the list) binds it again, with the guards of the contents
the call started with (``StateSnapshots.first_state``), not the ones the program's appends made.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's: these run inside the program's pass, which may replace
# one (CPython's test_functools caches ``builtins.len``: Note [Builtins snapshot], jitcore/interpreter)
__builtins__ = dict(vars(__import__("builtins")))

import array
import builtins
import dataclasses
import dis
import functools
import inspect
import sys
import types
from typing import Any

__all__ = ["ANY_KEY", "APPENDABLE", "NestedLists", "appended_parameters", "bind_defaults",
           "empties_at_once", "stack_use", "item_appended_parameters", "keyed_later",
           "measured_by_len",
           "only_appended_to", "parameter_uses", "reads_appended_item", "stored_by_object_setattr",
           "stored_into", "stored_parameters", "subscripted_by", "updated_attribute"]

_APPENDING = frozenset({"append", "extend"})
_CLEARING = frozenset({"clear"})
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


# Note [A buffer only appended to]
# A ``bytearray`` or ``array.array`` of state is guarded item by item (Note [Items C reads natively],
# jit/state_kinds.py), so one the program extends (``buf.extend(b"c")``, ``arr.append(x)``) was found
# longer by every call, which traced again. A load consumed by looking ``append``/``extend`` up on it
# reads none of its items (those methods of the exact built-in types only add items), as for a list:
# its type is guarded (an array's typecode too: it decides what ``append`` accepts), and the items the
# pass added are replayed onto the buffer each call finds (the ``extend`` effect, jit/effects.py, from
# the snapshot diff of its raw bytes). Any other load of it binds it whole, its first state guarded.
APPENDABLE = (list, bytearray, array.array)  # exact types whose ``append``/``extend`` read no item


# Note [A list the program empties]
# ``feats.clear(); feats.append(h)`` on a list of state (a forward hook's feature list refilled per call):
# the load of ``clear`` bound the list whole, so the first call guarded its contents (``holds ()``) and
# the second its length and items: two traces where one does. A load consumed by emptying the list right
# there (``clear`` called with no argument the next instruction, ``del l[:]``, ``l[:] = v`` with ``v``
# already computed) reads none of its items: its type is guarded, and its whole contents when the pass
# ends are replayed onto the list each call finds (the ``contents`` effect, jit/effects.py: whatever it
# held, the call empties it first). Any other load of the list binds it whole, its first state guarded.
# A list parameter whose every use appends to it or empties it at once (``_emptied_parameters``) is an
# argument only appended to (``appended_parameters(fn, emptying=True)``): the program appends to a copy
# of its own, and where the pass empties that copy (``l.clear()`` seen as the C call it is, effects.py's
# ``emptied_list``) the copy's whole contents are replayed onto the caller's list, its appends otherwise.
def empties_at_once(frame: Any) -> bool:
    """Whether the value the current load pushes, a list, is emptied by the instructions right after it
    (Note [A list the program empties])."""
    instructions, i = frame.info.instructions, frame.index
    names = [x.opname for x in instructions[i:i + 4]]
    if names[:1] and names[0] in _LOOKUPS and instructions[i].argval == "clear":
        calls = [x for x in instructions[i + 1:i + 3] if x.opname not in _NOTHING]
        return bool(calls) and calls[0].opname == "CALL" and calls[0].arg == 0
    if names[:1] == ["LOAD_CONST"] and instructions[i].argval == slice(None):  # a constant full slice
        return names[1:2] in (["STORE_SUBSCR"], ["DELETE_SUBSCR"])
    none_pair = names[:2] == ["LOAD_CONST", "LOAD_CONST"] and instructions[i].argval is None \
        and instructions[i + 1].argval is None
    sliced = names[2:3] == ["BUILD_SLICE"] and instructions[i + 2].arg == 2 \
        and names[3:4] in (["STORE_SUBSCR"], ["DELETE_SUBSCR"])
    return none_pair and (names[2:3] == ["STORE_SLICE"] or sliced)


def measured_by_len(frame: Any) -> bool:
    """Whether the value the current load pushes is the one argument of a call of the builtin ``len``,
    so the program reads only its length through it: ``len(hist)``, ``len(self.history)``,
    ``len(self.log.losses)``, ``len(groups[k])`` (the call next, ``LOAD_GLOBAL len`` right before the
    argument's first load, its attribute reads and its subscripts (``len(s["rec"].v)``), and that global the
    builtin)."""
    instructions, i = frame.info.instructions, frame.index
    if i >= len(instructions) or instructions[i].opname not in _CALLS or instructions[i].arg != 1:
        return False
    start = i - 1  # the argument's first load, before its attribute and item reads
    while start > 0:
        if instructions[start].opname == "LOAD_ATTR":
            start -= 1
        elif start >= 2 and instructions[start].opname == "BINARY_SUBSCR" \
                and instructions[start - 1].opname in _KEY_LOADS:
            start -= 2  # ``len(groups[k])``, ``len(s["rec"].v)``: an item at a key loaded by one instruction
        else:
            break
    return (start >= 1 and _loads_len(instructions[start - 1])
            and any(v is builtins.len for v in frame.stack[-3:]))


def _loads_len(instruction: dis.Instruction) -> bool:
    return instruction.opname == "LOAD_GLOBAL" and instruction.argval == "len"


_CALLS = frozenset({"PRECALL", "CALL"})
_KEY_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_CONST", "LOAD_DEREF", "LOAD_SMALL_INT"})


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


# Note [An item the program appended, read back]
# ``seen.append(x.sum().item()); y = x * seen[-1]`` on a list of state: the read bound the list whole, its
# contents guarded, so every call found a longer list and traced again. Where the list as the pass
# holds it is its first state (``StateSnapshots.first_state``) followed by items the pass appended,
# and the read is at a constant negative index among those items, the item read is the program's own
# on every call: the appends are replayed onto the list each call finds (the ``extend`` effect), so
# that list ends with the same items. The list is guarded by its type alone, as one only appended to,
# and the item is the pass's own value (``StateSnapshots.written``). A read reaching past the appended
# items (``seen[-2]`` after one append), or a list changed any other way (``pop``, ``insert``: the first
# state is no longer its prefix), binds the list whole as before.
def reads_appended_item(frame: Any, value: list, first: list) -> bool:
    """Whether the value the current load pushes, a list whose state when the call started is
    ``first``, is consumed by a read at a constant negative index among the items the pass appended
    to it (Note [An item the program appended, read back])."""
    key = subscripted_by(frame)
    instructions, i = frame.info.instructions, frame.index
    if type(key) is not int or key >= 0 or i + 1 >= len(instructions) \
            or instructions[i + 1].opname != "BINARY_SUBSCR" or first is value:
        return False
    held = list(list.__iter__(value))
    return -key <= len(held) - len(first) and all(a is b for a, b in zip(first, held))


# Note [A dict read at a computed key]
# A per-op counter in a dispatch (``COUNTS[str(func)] = COUNTS.get(str(func), 0) + 1``) reads the dict
# at a key computed after the load. Bound whole, the dict was guarded item by item, so a change to any
# other item between calls (another op's count, a key the caller keeps there) traced again on every
# call. Where the load's value is consumed only by ``get`` or by a subscript whose key straight-line
# code computes above it on the stack, the program reads nothing else of the dict through that load:
# its keys are guarded (so whether a key is present is decided as when traced, a KeyError included),
# and the item read is bound on its own (``Pass._load_subscr``: a counter is then a dynamic number).
# ``setdefault`` is such a read too (``logged.setdefault(k, []).append(v)``, Lightning's metric logs):
# whether it stores its default is decided by the guarded keys, a present item is read through the
# subscript hook (jit/dict_reads.py), so a list there only appended to is guarded by its type, and a
# stored default is an item effect replayed on every call that finds the key absent.
# An item read at a key jitcore cannot name binds the dict whole after all (``Provenance.keyed``).
# Instructions the key may be computed with: those below (how many values each takes from the stack),
# none of which jumps or reaches below what it takes; anything else ends the scan with no answer.
_NOTHING = frozenset({"NOP", "PRECALL", "KW_NAMES", "CACHE", "EXTENDED_ARG"})
_PUSH_ONE = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_CONST", "LOAD_DEREF", "LOAD_NAME", "PUSH_NULL",
                       "LOAD_SMALL_INT"})
_ONE_FOR_ONE = frozenset({"UNARY_NEGATIVE", "UNARY_INVERT", "FORMAT_SIMPLE", "CONVERT_VALUE"})
_BUILDS = frozenset({"BUILD_LIST", "BUILD_SET", "BUILD_TUPLE", "BUILD_STRING"})  # ``d.setdefault(k, [])``
_GETTERS = frozenset({"get", "setdefault"})
_SCAN = 32


def stack_use(inst: dis.Instruction) -> tuple[int, int] | None:
    """``(taken, pushed)``: the stack values ``inst`` takes and pushes, for the instructions of the Note
    above (the oparg as the interpreter reads it); None for any other."""
    name, arg = inst.opname, inst.arg or 0
    if name in _NOTHING:
        return 0, 0
    if name in _PUSH_ONE:
        return 0, 1
    if name == "LOAD_FAST_LOAD_FAST":
        return 0, 2
    if name == "LOAD_GLOBAL":  # the low bit: a NULL pushed too (3.11+)
        return 0, 1 + (arg & 1)
    if name == "LOAD_METHOD":
        return 1, 2
    if name == "LOAD_ATTR":  # the low bit: a method load (3.12+)
        return 1, 1 + (arg & 1 if sys.version_info >= (3, 12) else 0)
    if name in _ONE_FOR_ONE:
        return 1, 1
    if name in ("BINARY_OP", "FORMAT_WITH_SPEC"):
        return 2, 1
    if name in _BUILDS:
        return arg, 1
    if name == "BUILD_MAP":
        return 2 * arg, 1
    if name == "FORMAT_VALUE":
        return (2 if arg & 0x04 else 1), 1
    if name == "CALL":
        return arg + 2, 1
    return None


def keyed_later(frame: Any) -> bool:
    """Whether the value the current load pushes is consumed by ``get`` or ``setdefault`` (any key) or by
    a subscript whose key the instructions right after the load compute (Note [A dict read at a computed
    key])."""
    instructions, i = frame.info.instructions, frame.index
    above = 0  # values pushed over the dict
    getter = i < len(instructions) and instructions[i].opname in _LOOKUPS \
        and instructions[i].argval in _GETTERS
    if getter:  # ``d.get(key, default)``, ``d.setdefault(key, default)`` called right there: a method load,
        # then the call taking it
        if stack_use(instructions[i]) != (1, 2):
            return False
        above, i = 1, i + 1  # the pair standing for the dict: what the call takes, with the arguments
    for j in range(i, min(i + _SCAN, len(instructions))):
        inst = instructions[j]
        if getter and inst.opname == "CALL" and inst.arg in (1, 2) and inst.arg + 1 == above:
            return True
        if inst.opname == "BINARY_SUBSCR" and above >= 2:  # a subscript inside the key: ``d[names[k]]``
            above -= 1
            continue
        if inst.opname in _SUBSCRIPTS:
            return above == 1 and not getter  # the dict right under the key
        if inst.opname == "COPY":  # ``d[k] += 1``: both copied, the copies subscripted (as above)
            following = [x.opname for x in instructions[j + 1:j + 3]]
            return above == 1 and not getter and inst.arg == 2 and following[:1] == ["COPY"] \
                and instructions[j + 1].arg == 2 and following[1:] == ["BINARY_SUBSCR"]
        use = stack_use(inst)
        if use is None or use[0] > above:
            return False
        above += use[1] - use[0]
    return False


# Note [A dict only stored into]
# ``outs[next(ids)] = y`` or ``cache[key] = v`` reads the dict only to store into it: what the store does
# does not depend on the keys the dict holds (a present key keeps its place, an absent one goes last, as
# the replayed ``setitem`` does on the dict each call finds). Guarded by its keys, a dict that gains a
# key per call (ids from ``itertools.count()``, a history by step) missed on every call, eager entries
# too. Such a load guards the dict's type only (``stored_into``); a read of the dict through another
# load (``len(d)`` in the key, a later ``d[k]``) binds it again with the guards of its contents.
def stored_into(frame: Any) -> bool:
    """Whether the value the current load pushes is consumed by a ``STORE_SUBSCR`` whose key the
    instructions right after the load compute (Note [A dict only stored into])."""
    return _stored_by(frame.info.instructions, frame.index, 0)


def _stored_by(instructions: list, i: int, above: int) -> bool:
    """Whether the dict under ``above`` values on the stack before ``instructions[i]`` is consumed by a
    ``STORE_SUBSCR`` whose key the instructions from ``i`` on compute."""
    for j in range(i, min(i + _SCAN, len(instructions))):
        inst = instructions[j]
        if inst.opname == "BINARY_SUBSCR" and above >= 2:  # a subscript inside the key: ``d[names[k]]``
            above -= 1
            continue
        if inst.opname in _SUBSCRIPTS:
            return above == 1 and inst.opname == "STORE_SUBSCR"
        use = stack_use(inst)
        if use is None or use[0] > above:
            return False
        above += use[1] - use[0]
    return False


# Note [A dict argument only stored into]
# ``k = Key(); table[k] = x + 1`` on a dict argument: the argument was bound whole, its keys guarded,
# and a table that gains a key per call missed on every call (3 entries in 3 calls:
# /tmp/ana52-probes/left_growing_table.py). A parameter whose every use is a load consumed by a subscript
# store, its key computed right after the load (``stored_into``, proved from the bytecode), reads nothing
# of the dict: it is bound as a list only appended to is (``Provenance.bind_appended_argument``), its type
# guarded, the program storing into a dict of its own whose items are replayed onto the dict each call
# passes (a present key keeps its place and takes the value, a new one goes last, as eagerly). The same
# dict reached another way (passed twice, or a global) asks for a pass that binds it whole (Note
# [Containers reached twice]).
@functools.cache
def _stored_parameters(code: types.CodeType) -> frozenset[str]:
    found = parameter_uses(code)
    if found is None:
        return frozenset()
    candidates, instructions, uses = found
    for i, names, touched in uses:
        inst = instructions[i]
        if inst.opname in _LOADS and len(names) == 1 and _stored_by(instructions, i + 1, 0):
            continue
        if inst.opname == "LOAD_FAST_LOAD_FAST" and names[0] != names[1]:  # 3.13: ``d[k] = v`` of locals
            for name in touched:  # (the other value pushed over it, or it on top)
                if not _stored_by(instructions, i + 1, 1 if name == names[0] else 0):
                    candidates.discard(name)
            continue
        candidates -= touched
    return frozenset(candidates)


def stored_parameters(fn: Any) -> frozenset[str]:
    """The parameters of ``fn`` that its bytecode only stores items into (Note [A dict argument only
    stored into])."""
    target = getattr(fn, "forward", fn)
    function = getattr(target, "__func__", target)
    code = getattr(function, "__code__", None)
    return _stored_parameters(code) if isinstance(code, types.CodeType) else frozenset()


def appended_parameters(fn: Any, *, emptying: bool = False) -> frozenset[str]:
    """The parameters of ``fn`` (a Python function, or a module's ``forward``) that its bytecode
    only appends to and measures with ``len()`` (see the module doc); with ``emptying``, also those it
    empties at once with ``clear()`` and never measures (Note [A list the program empties])."""
    target = getattr(fn, "forward", fn)
    function = getattr(target, "__func__", target)
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return frozenset()
    appended, measured = _appended(code)
    if emptying:
        appended = appended | _emptied_parameters(code)
    if measured and "len" in getattr(function, "__globals__", {}):  # ``len`` is not the builtin there
        return appended - measured
    return appended


@functools.cache
def _emptied_parameters(code: types.CodeType) -> frozenset[str]:
    """The parameters whose every use is appending to them or emptying them at once (``l.clear()``),
    at least one of them emptying (an argument so used: its copy's contents replayed whole)."""
    found = parameter_uses(code)
    if found is None:
        return frozenset()
    candidates, instructions, uses = found
    emptied: set[str] = set()
    for i, names, touched in uses:
        following = _after_a_load(instructions, i, names)
        if _looks_up(following, _APPENDING):
            continue
        calls = [x for x in instructions[i + 2:i + 4] if x.opname not in _NOTHING]
        if _looks_up(following, _CLEARING) and calls and calls[0].opname == "CALL" and calls[0].arg == 0:
            emptied |= touched
            continue
        candidates -= touched
    return frozenset(candidates & emptied)


def item_appended_parameters(fn: Any) -> dict[str, frozenset]:
    """The parameters of ``fn`` that its bytecode only subscripts by constant keys, with the keys whose
    item it only appends to (``history["loss"].append(x)``; ``s["model"](x)`` at another key reads that
    item as any argument's) where there is one (Note [A dict of lists an argument])."""
    target = getattr(fn, "forward", fn)
    function = getattr(target, "__func__", target)
    code = getattr(function, "__code__", None)
    return _items_appended(code) if isinstance(code, types.CodeType) else {}


@functools.cache
def _items_appended(code: types.CodeType) -> dict[str, frozenset]:
    found = parameter_uses(code)
    if found is None:
        return {}
    candidates, instructions, uses = found
    keys: dict[str, set] = {name: set() for name in candidates}
    read: dict[str, set] = {name: set() for name in candidates}  # keys whose item is also used otherwise
    for i, names, touched in uses:
        key, subscript, lookup = (instructions[i + 1:i + 4] + [None, None, None])[:3]
        last = names[-1]  # the value the load pushes last (3.13's LOAD_FAST_LOAD_FAST pushes two)
        alone = (len(names) == 1 and instructions[i].opname in _LOADS) or (
            instructions[i].opname == "LOAD_FAST_LOAD_FAST" and names.count(last) == 1)
        if alone and last in touched and subscript is not None and key.opname == "LOAD_CONST" \
                and type(key.argval) in _KEYS:
            if subscript.opname == "BINARY_SUBSCR":
                appended = lookup is not None and _looks_up(lookup, _APPENDING)
                (keys if appended else read)[last].add(key.argval)
                candidates -= touched - {last}  # a parameter pushed below it is used otherwise
                continue
            if subscript.opname == "STORE_SUBSCR" or _updated_item(instructions, i + 2):
                read[last].add(key.argval)  # ``h["n"] = v``, ``h["n"] += 1``: Note [An item updated in place]
                candidates -= touched - {last}
                continue
        first = names[0]  # 3.13's ``LOAD_FAST_LOAD_FAST (h, i)``: the key's first value loaded with it
        paired = instructions[i].opname == "LOAD_FAST_LOAD_FAST" and first in touched \
            and names.count(first) == 1
        if (alone and last in touched or paired) \
                and _computed_item_appended(instructions, i + 1, above=len(names) - 1 if paired else 0):
            keys[first if paired else last].add(ANY_KEY)  # Note [A list at a computed key appended to]
            candidates -= touched - {first if paired else last}
            continue
        if alone and last in touched and (nested := _nested_default(instructions, i + 1)) is not None:
            keys[last].add(nested)  # ``h.setdefault("a", {}).setdefault(k, []).append(v)``: Note [Lists set
            candidates -= touched - {last}  # by default in a dict set by default]
            continue
        if alone and last in touched and (key := _set_default_list(instructions, i + 1)) is not _NO_KEY:
            keys[last].add(key)  # ``h.setdefault("k", []).append(v)``: Note [A list set by default]
            candidates -= touched - {last}
            continue
        candidates -= touched
    for name in candidates:
        if read[name]:  # Note [A list set by default at a computed key]
            keys[name] -= {k for k in keys[name] if k is ANY_KEY or type(k) is NestedLists
                           and (k.key in read[name] or k.inner is ANY_KEY)}
    return {name: frozenset(keys[name] - read[name]) for name in candidates if keys[name] - read[name]}


# Note [Lists set by default in a dict set by default]
# ``s.setdefault("a", {}).setdefault(k, []).append(v)`` on a dict argument: a method call on the parameter
# bound it whole, every inner list's length guarded, so every call traced again (6 in 6:
# /tmp/eff58-probes/ddarg.py ``setdef_nested``). Looking ``setdefault`` up, a constant key, an empty dict and
# the call with those two, then Note [A list set by default] (or its computed key) on the answer, reads the
# dict at that key only, and the dict there only at the inner key, to append to the list there: the key is
# a ``NestedLists`` whose dict is bound as a dict argument of such lists is (``bind_item_lists``, jit/
# item_lists.py, its own keys guarded). An item at that key also read otherwise binds it whole.
@dataclasses.dataclass(frozen=True, slots=True)
class NestedLists:
    """A dict set by default at the constant ``key`` whose lists at ``inner`` (a constant or ``ANY_KEY``)
    are only appended to (Note [Lists set by default in a dict set by default])."""

    key: Any
    inner: Any


def _nested_default(instructions: list, i: int) -> NestedLists | None:
    """The ``NestedLists`` where ``instructions[i:]`` begin ``.setdefault(k, {}).setdefault(...)`` as Note
    [Lists set by default in a dict set by default] says; else None."""
    at = [j for j in range(i, min(i + 8, len(instructions))) if instructions[j].opname != "PRECALL"][:4]
    if len(at) < 4:
        return None
    lookup, key, empty, call = (instructions[j] for j in at)
    if not _looks_up(lookup, frozenset({"setdefault"})) or key.opname != "LOAD_CONST" \
            or type(key.argval) not in _KEYS or empty.opname != "BUILD_MAP" or empty.arg != 0 \
            or call.opname != "CALL" or call.arg != 2:
        return None
    inner = _set_default_list(instructions, at[-1] + 1)
    return None if inner is _NO_KEY else NestedLists(key.argval, inner)


# Note [A list set by default]
# ``h.setdefault("loss", []).append(x.sum())`` on a dict argument: a method call on the parameter bound the
# dict whole, the list's length guarded, and every call traced again (20 in 20:
# /tmp/eff52-probes/local_helpers.py). Looking ``setdefault`` up, then a constant key, an empty list and the
# call with those two, then looking ``append``/``extend`` up on its answer reads nothing of the dict but
# that key, and nothing of the list: the key is one only appended to (``bind_item_lists``). While it is
# absent the dict's keys (guarded) make that call's entry, the new list a store replayed on the caller's
# dict; once it is there, its list is bound as a list argument only appended to (2 traces in all).
_NO_KEY = object()


def _set_default_list(instructions: list, i: int) -> Any:
    """The constant key of ``.setdefault(k, [])`` whose answer is appended to, starting at ``instructions[i]``
    (Note [A list set by default]); ``_NO_KEY`` for anything else."""
    found = [x for x in instructions[i:i + 6] if x.opname != "PRECALL"][:5]
    if len(found) < 5:
        return _NO_KEY
    lookup, key, empty, call, append = found
    if not _looks_up(lookup, frozenset({"setdefault"})) or key.opname != "LOAD_CONST" \
            or type(key.argval) not in _KEYS or empty.opname != "BUILD_LIST" or empty.arg != 0 \
            or call.opname != "CALL" or call.arg != 2 or not _looks_up(append, _APPENDING):
        return _computed_default_list(instructions, i)
    return key.argval


# Note [A list set by default at a computed key]
# ``groups.setdefault(str(x.shape[0]), []).append(v)`` on a dict argument: the key is computed, so Note [A
# list set by default] did not apply and the dict was bound whole, each list's length guarded: every call
# traced again (20 in 20: /tmp/eff53-probes/wide.py "setdefault computed key"). The key expression is
# straight-line code over the method pair (walked with ``stack_use``; a subscript takes two values), then
# the empty list, the call with those two and the ``append``/``extend`` lookup on its answer: the dict is
# read at that one key only, and what is there is only appended to, whatever the key is. So every list the
# dict holds is a list only appended to (``ANY_KEY``), unless the function also reads an item at a
# constant key (then only the constant keys count, as before). The dict's keys are guarded as for a
# constant key: a call that adds the key is an entry of its own (2 traces in all for one key).
ANY_KEY = object()


def _computed_default_list(instructions: list, i: int) -> Any:
    """``ANY_KEY`` where ``instructions[i:]`` look ``setdefault`` up, compute a key, and append to the
    answer of ``setdefault(key, [])`` (Note [A list set by default at a computed key]); else ``_NO_KEY``."""
    if not _looks_up(instructions[i], frozenset({"setdefault"})) or stack_use(instructions[i]) != (1, 2):
        return _NO_KEY
    above = 0  # the values over the method pair
    for j in range(i + 1, min(i + _SCAN, len(instructions))):
        inst = instructions[j]
        if above == 1 and inst.opname == "BUILD_LIST" and inst.arg == 0:
            rest = [x for x in instructions[j + 1:j + 4] if x.opname != "PRECALL"][:2]
            ours = len(rest) == 2 and rest[0].opname == "CALL" and rest[0].arg == 2 \
                and _looks_up(rest[1], _APPENDING)
            return ANY_KEY if ours else _NO_KEY
        use = (2, 1) if inst.opname == "BINARY_SUBSCR" else stack_use(inst)
        if use is None or use[0] > above:
            return _NO_KEY
        above += use[1] - use[0]
    return _NO_KEY


# Note [A list at a computed key appended to]
# ``metrics[name].append(v)``, ``hist[n % 2].append(y)`` on a ``defaultdict(list)`` (or dict) argument: the
# key is computed, so the dict was bound whole, each list's length guarded, and every call traced again
# (12 in 12: /tmp/eff58-probes/ddarg.py). The key expression is straight-line code after the load (walked
# with ``stack_use``), the subscript takes it with the dict right under it, and the next instruction looks
# ``append``/``extend`` up on the item: the dict is read at that one key only, and the item only appended
# to, whatever the key is, so every list the dict holds is one only appended to (``ANY_KEY``, as Note [A
# list set by default at a computed key]). The dict's keys are guarded: an absent key is a KeyError of a
# dict, or a new empty list of a ``defaultdict(list)`` made in the program's copy, as eagerly, each such
# call an entry of its own.
def _computed_item_appended(instructions: list, i: int, above: int = 0) -> bool:
    """Whether ``instructions[i:]``, after a load of a dict (``above`` values loaded over it with it), compute
    a key, subscript the dict with it and look ``append``/``extend`` up on the item (Note [A list at a
    computed key appended to])."""
    start = above
    for j in range(i, min(i + _SCAN, len(instructions))):
        inst = instructions[j]
        if inst.opname == "BINARY_SUBSCR" and above == 1:
            rest = [x for x in instructions[j + 1:j + 3] if x.opname not in _NOTHING][:1]
            return (j > i or start == 1) and bool(rest) and _looks_up(rest[0], _APPENDING)
        use = (2, 1) if inst.opname == "BINARY_SUBSCR" else stack_use(inst)
        if use is None or use[0] > above:
            return False
        above += use[1] - use[0]
    return False


# Note [An item updated in place]
# ``h["n"] += 1`` compiles to ``LOAD_FAST h; LOAD_CONST "n"; COPY 2; COPY 2; BINARY_SUBSCR; <the right
# side>; BINARY_OP +=; SWAP 3; SWAP 2; STORE_SUBSCR`` (3.11 to 3.13), ``h["n"] = v`` to ``<v>; LOAD_FAST h;
# LOAD_CONST "n"; STORE_SUBSCR``: a read and a store of one constant key. Beside a list at another key
# only appended to (``h["loss"].append(x.sum())``), such a use bound the dict argument whole, the list's
# length guarded, and every call traced again (20 in 20: /tmp/eff52-probes/dict_arg_counter.py). The key
# is an item read like ``h["scale"]`` (bound as in the dict bound whole: a counter there is a dynamic
# number), and the store goes into the program's dict, whose changes are replayed on the caller's.
def _updated_item(instructions: list, i: int) -> bool:
    """Whether ``instructions[i:]`` continue a load of a dict and a constant key as ``d[k] op= v`` does."""
    if i + 2 >= len(instructions) or [x.opname for x in instructions[i:i + 3]] != ["COPY", "COPY",
                                                                                   "BINARY_SUBSCR"] \
            or instructions[i].arg != 2 or instructions[i + 1].arg != 2:
        return False
    for j in range(i + 3, len(instructions) - 2):
        if instructions[j].opname == "SWAP" and instructions[j].arg == 3:
            return instructions[j + 1].opname == "SWAP" and instructions[j + 1].arg == 2 \
                and instructions[j + 2].opname == "STORE_SUBSCR"
    return False


@functools.cache
def _appended(code: types.CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """The parameters only appended to or measured, and those of them measured."""
    found = parameter_uses(code)
    if found is None:
        return frozenset(), frozenset()
    candidates, instructions, uses = found
    measured: set[str] = set()
    stored_back: set[int] = set()  # the stores of ``s += v`` (Note [A list argument extended by +=])
    for i, names, touched in uses:
        if i in stored_back:
            continue
        following = _after_a_load(instructions, i, names)
        if _looks_up(following, _APPENDING) or _extended_by_iadd(instructions, i, following):
            continue
        if (store := _added_in_place(instructions, i, names)) is not None:
            stored_back.add(store)
            candidates -= touched - {names[0]}  # a parameter the right side loads with it is used there
            continue
        if following is not None and following.opname in _CALLS and following.arg == 1 and i >= 1 \
                and _loads_len(instructions[i - 1]):  # ``len(log)``: MeasuredLists.bind_argument
            measured |= touched
            continue
        candidates -= touched
    return frozenset(candidates), frozenset(measured & candidates)


# Note [A list argument extended by +=]
# ``log += [x.sum()]`` on a list parameter compiles to ``LOAD_FAST log; <the right side>; BINARY_OP +=;
# STORE_FAST log`` (3.13: the load may be ``LOAD_FAST_LOAD_FAST (log, x)``, the right side's first value
# loaded with it): the store took the parameter as used otherwise, so its length was guarded and every call
# traced again (20 in 20: /tmp/eff53-probes/wide.py "list += on an argument"). ``list.__iadd__`` extends the
# list and returns it, so for a list argument (the only kind so bound) the statement is an ``extend`` and the
# store puts the same list back. The right side is an expression that leaves the loaded list below it (the
# stack walked with ``stack_use``, never taking it); an augmented assignment is a statement, so the first
# ``BINARY_OP +=`` with one value over the list is this one, and its store must name the same parameter.
# A right side that loads the parameter again (``log += log``) is a use of its own (that load is followed
# by no ``+=`` with one value over it): the parameter is bound whole, as before.
_INPLACE_ADD = 13  # BINARY_OP's oparg for ``+=`` (3.11 to 3.13)


def _added_in_place(instructions: list, i: int, names: tuple) -> int | None:
    """The index of the ``STORE_FAST`` of ``s += v`` where ``instructions[i]`` loads ``s`` to begin it (Note
    [A list argument extended by +=]), else None."""
    load = instructions[i]
    if load.opname not in _LOADS and load.opname != "LOAD_FAST_LOAD_FAST" or names.count(names[0]) != 1:
        return None
    above = len(names) - 1  # the values pushed over the parameter's
    for j in range(i + 1, len(instructions) - 1):
        inst = instructions[j]
        if inst.opname == "BINARY_OP" and inst.arg == _INPLACE_ADD:
            store = instructions[j + 1]
            ours = above == 1 and store.opname == "STORE_FAST" and store.argval == names[0]
            return j + 1 if ours else None
        use = stack_use(inst)
        if use is None or use[0] > above:
            return None
        above += use[1] - use[0]
    return None


# Note [A list argument extended by __iadd__]
# ``s.__iadd__([1])`` on a list parameter: a method call, the list was bound whole, its length guarded: a
# trace per call (20 in 20: /tmp/eff58-probes/why.py ``iadd``). ``list.__iadd__`` extends the list and returns
# it, so with its answer dropped at once (``POP_TOP`` after the call taking the method pair, its one argument
# straight-line code walked with ``stack_use``) it is an ``extend``. A kept answer is the list: a use.
def _extended_by_iadd(instructions: list, i: int, following: Any) -> bool:
    """Whether the load ``instructions[i]`` (followed by ``following``) begins ``s.__iadd__(v)`` whose answer
    is dropped (Note [A list argument extended by __iadd__])."""
    if not _looks_up(following, frozenset({"__iadd__"})) or stack_use(following) != (1, 2):
        return False
    above = 0  # the values over the method pair
    for j in range(i + 2, min(i + _SCAN, len(instructions))):
        inst = instructions[j]
        if inst.opname == "CALL" and inst.arg == above:  # the call taking the method pair
            rest = [x for x in instructions[j + 1:j + 3] if x.opname not in _NOTHING][:1]
            return inst.arg == 1 and rest[:1] != [] and rest[0].opname == "POP_TOP"
        use = stack_use(inst)
        if use is None or use[0] > above:
            return False
        above += use[1] - use[0]
    return False


def _after_a_load(instructions: list, i: int, names: tuple) -> Any:
    """The instruction after ``instructions[i]`` where that one loads one parameter alone, else None."""
    if instructions[i].opname in _LOADS and len(names) == 1 and i + 1 < len(instructions):
        return instructions[i + 1]
    return None


def _looks_up(inst: Any, methods: frozenset[str]) -> bool:
    """Whether ``inst`` looks one of ``methods`` up (on the value loaded before it)."""
    return inst is not None and inst.opname in _LOOKUPS and inst.argval in methods


def parameter_uses(code: types.CodeType) -> tuple[set[str], list, list[tuple[int, tuple, set]]] | None:
    """The parameters a function's bytecode can reach only by name (None where frames, ``locals()`` or
    ``eval`` could reach them, or in a generator), its instructions, and each instruction that loads,
    stores or deletes one of them: its index, the names it names and the parameters among them."""
    if _FRAME_ACCESS & set(code.co_names) or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return None
    count = code.co_argcount + code.co_kwonlyargcount
    candidates = set(code.co_varnames[:count]) - set(code.co_cellvars)
    instructions = list(dis.get_instructions(code))
    uses = []
    for i, inst in enumerate(instructions):
        names = inst.argval if isinstance(inst.argval, tuple) else (inst.argval,)
        touched = candidates.intersection(n for n in names if isinstance(n, str))
        if touched and inst.opname.startswith(("LOAD_FAST", "STORE_FAST", "DELETE_FAST")):
            uses.append((i, names, touched))
    return candidates, instructions, uses


# Note [An attribute updated in place]
# ``s.n += 1`` compiles to ``LOAD_FAST s; COPY 1; LOAD_ATTR n; <the right side>; BINARY_OP +=; SWAP 2;
# STORE_ATTR n`` (3.11 to 3.13): the load of ``s`` is consumed by no attribute instruction but a ``COPY``,
# so the analyses of a parameter used only through its attributes (namespace_arguments.py,
# dataclass_arguments.py) took ``s`` as used otherwise, and a namespace or dataclass argument holding a
# counter and a log (``s.n += 1; s.log.append(x.sum())``) had its items guarded: every call traced again.
# The two copies the ``COPY`` leaves are an attribute read and an attribute store of one name: the right
# side, an expression, leaves the stack below it as it found it, so the store after the first ``SWAP 2``
# followed by ``STORE_ATTR`` of that name (an augmented assignment is a statement: none nests in the
# right side) takes the copy. Only that exact shape counts; any other ``COPY`` of the parameter is a use.
def updated_attribute(instructions: list, i: int) -> str | None:
    """The attribute ``n`` where the load ``instructions[i]`` begins ``s.n op= v`` (Note [An attribute
    updated in place]), else None."""
    if i + 2 >= len(instructions):
        return None
    copy, read = instructions[i + 1], instructions[i + 2]
    if copy.opname != "COPY" or copy.arg != 1 or read.opname != "LOAD_ATTR" \
            or not isinstance(read.argval, str) or read.argval.startswith("__") \
            or (sys.version_info >= (3, 12) and read.arg & 1):  # 3.12's method form of LOAD_ATTR
        return None
    for j in range(i + 3, len(instructions) - 1):
        if instructions[j].opname == "SWAP" and instructions[j].arg == 2:
            store = instructions[j + 1]
            return read.argval if store.opname == "STORE_ATTR" and store.argval == read.argval else None
    return None


# Note [A frozen dataclass's field set]
# ``object.__setattr__(st, "step", st.step + 1)`` (a frozen dataclass's counter) beside ``st.log.append(x)``:
# the parameter was handed to a call, so its list field was bound as an argument list, its length guarded,
# and every call traced again (20 in 20: /tmp/eff52-probes/frozen_dc_log.py). The load of ``st`` right after
# ``object.__setattr__`` is looked up on the global ``object`` and right before a constant name is that
# call's first argument: a store of that field on the copy, replayed as any field store (the builtin
# ``object``: ``field_appended_parameters`` refuses a module that defines its own). A namespace argument so
# set is one used only through its attributes too (jit/namespace_arguments.py, with the same refusal).
def stored_by_object_setattr(instructions: list, i: int) -> str | None:
    """The field ``n`` where the load ``instructions[i]`` is the object of ``object.__setattr__(st, "n", v)``
    (Note [A frozen dataclass's field set]), else None."""
    if i < 2 or i + 2 >= len(instructions):
        return None
    owner, method = instructions[i - 2], instructions[i - 1]
    name, value = instructions[i + 1], instructions[i + 2]
    if owner.opname != "LOAD_GLOBAL" or owner.argval != "object" or method.opname not in _LOOKUPS \
            or method.argval != "__setattr__" or name.opname != "LOAD_CONST" or type(name.argval) is not str \
            or name.argval.startswith("__") or not value.opname.startswith(("LOAD_", "BUILD_", "PUSH_NULL")):
        return None  # (the value's expression begins with a push: nothing took the parameter and the name)
    return name.argval


# Note [A default list of a function of state]
# ``m.register_forward_hook(lambda m, i, o, log=log: log.append(o.sum().item()))``: the program reaches
# the hook through the module's hook dict, and a function so reached is pinned by identity with its
# ``__defaults__`` bound whole, so the list's contents were guarded and every call traced again. The
# function's own bytecode proves what a parameter can do (``_appended``): one only appended to (never
# measured: ``len(log)`` would read the list whole through no hook of the pass) reads nothing of its
# default list, which is then guarded by its type and reached at its own path, so its appends are
# replayed onto the list each call finds. Every other default is bound as before, item by item, and the
# tuple by its type and length (a default replaced or added makes a new entry).
def bind_defaults(provenance: Any, fn: types.FunctionType, path: Any) -> None:
    """Bind ``fn.__defaults__`` and ``fn.__kwdefaults__`` of a function of state at ``path`` (Note [A
    default list of a function of state])."""
    defaults, code, at = fn.__defaults__, fn.__code__, path.attr("__defaults__")
    only_appended: set[str] = set()
    if type(defaults) is tuple and any(type(d) is list for d in defaults):
        appended, measured = _appended(code)
        names = code.co_varnames[code.co_argcount - len(defaults):code.co_argcount]
        only_appended = {n for n, d in zip(names, defaults) if type(d) is list and n in appended - measured}
    if only_appended:
        provenance.guard(at, "type", tuple)
        provenance.guard(at, "len", len(defaults))
        for i, (name, default) in enumerate(zip(names, defaults)):
            if name in only_appended:
                provenance.bind_appended_list(default, at.index(i))
            else:
                provenance.bind_state(default, at.index(i), "defaults")
    else:
        provenance.bind_state(defaults, at, "defaults")
    provenance.bind_state(fn.__kwdefaults__, path.attr("__kwdefaults__"), "kwdefaults")
