"""Which Python dunders only read: code that may run more often than the program asked, unseen.

A ``__hash__`` or ``__eq__`` of the program's class may be called more often by jitcore than by CPython:
rerun natively by C after it ran interpreted (hashed_inserts.py), or asked of a stored key whose hash C
keeps (hashes.py). That is unobservable only where the dunder's own code writes nothing.

Invariants:
- ``reads_only(code, globals)`` is True only for code whose instructions load (locals, constants,
  attributes, globals), compare, compute, build tuples, jump, and call builtins from a short list not
  shadowed in ``globals``; anything else (a store outside its locals, a call of a method or of another
  function) answers False;
- the answer for a code object is computed once (``dis``) and kept.
"""

from __future__ import annotations

import builtins
import dis
import sys
from types import CodeType

__all__ = ["reads_only"]


# Note [Only a dunder that writes nothing is rerun]
# A ``__hash__`` that counts its calls (``calls[0] += 1``) run twice, interpreted then natively, counted
# twice on every call, the cached ones too (the interpreted write replayed, the native one made while
# tracing: /tmp/hash47-probes/counting_hash.py, a wrong answer). C may rerun only a dunder whose own code
# reads: its instructions are loads (of its locals, constants, attributes, globals), comparisons,
# arithmetic, tuples, jumps, and calls of the builtins below (not shadowed by its module); a store
# outside its locals, a call of anything else (a method, a function) makes the C call run eagerly. What
# a builtin it calls runs in turn (``hash(self.inner)``: the inner object's ``__hash__``) is not looked
# into (left, docs/user-guide.md). The same test decides whether a stored key's ``__hash__`` may be asked
# for the hash C keeps (Note [A stored key's hash, asked again], hashes.py).
_READING_OPS = frozenset({
    "RESUME", "NOP", "CACHE", "EXTENDED_ARG", "NOT_TAKEN", "LOAD_FAST", "LOAD_FAST_CHECK",
    "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW", "LOAD_FAST_BORROW_LOAD_FAST_BORROW", "LOAD_CONST",
    "LOAD_SMALL_INT", "LOAD_DEREF", "COPY_FREE_VARS", "MAKE_CELL", "LOAD_GLOBAL", "LOAD_ATTR", "STORE_FAST",
    "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "BUILD_TUPLE", "COMPARE_OP", "IS_OP", "CONTAINS_OP",
    "BINARY_OP", "BINARY_SUBSCR", "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "TO_BOOL", "COPY", "SWAP",
    "POP_TOP", "PRECALL", "CALL", "KW_NAMES", "RETURN_VALUE", "RETURN_CONST", "JUMP_FORWARD",
    "JUMP_BACKWARD", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE", "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP",
})
_READING_BUILTINS = ("hash", "isinstance", "type", "len", "id", "tuple", "frozenset", "int", "str", "bool",
                     "abs")
_BUILTINS = {name: getattr(builtins, name) for name in _READING_BUILTINS}
_RERUN_GLOBALS: dict[CodeType, tuple[str, ...] | None] = {}


def _builtins_called(code: CodeType) -> tuple[str, ...] | None:
    """The builtins ``code`` calls where its own code only reads, else None."""
    if code not in _RERUN_GLOBALS:
        names: set[str] | None = set()
        for inst in dis.get_instructions(code):
            if inst.opname not in _READING_OPS or (inst.opname == "LOAD_ATTR" and sys.version_info >= (3, 12)
                                                   and inst.arg & 1):  # (a method's load)
                names = None
                break
            if inst.opname == "LOAD_GLOBAL" and inst.arg & 1:  # (a NULL pushed: a global called)
                if inst.argval not in _BUILTINS:
                    names = None
                    break
                names.add(inst.argval)
        _RERUN_GLOBALS[code] = None if names is None else tuple(names)
    return _RERUN_GLOBALS[code]


def reads_only(code: CodeType, globals_: dict) -> bool:
    """Whether ``code``, run with ``globals_``, only reads (Note [Only a dunder that writes nothing is
    rerun])."""
    names = _builtins_called(code)
    return names is not None and all(globals_.get(name, _BUILTINS[name]) is _BUILTINS[name] for name in names)
