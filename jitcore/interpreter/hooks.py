"""The hook interface through which the jit (and debuggers) observe and steer the interpreter.

Invariants:
- ``Hooks`` is immutable: a run decides once, at its start, which handler variants it needs, so a hook left
  as ``None`` costs nothing per instruction.
- Every replacement found through ``lookasides`` or ``resolve_call`` is called natively (not interpreted)
  with exactly the arguments the interpreted program passed, bound ``self`` first for methods.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import CodeType, TracebackType

    from jitcore.interpreter.frame import Frame
    from jitcore.interpreter.instructions import Instruction

__all__ = ["Hooks"]


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callbacks a run consults; see docs/interpreter.md for when each fires.

    Attributes:
        lookasides: canonical callable -> replacement called natively instead of it (one dict lookup per
        call).
        resolve_call: for callables that missed ``lookasides``: a replacement to call natively, or None to
            interpret as usual (return the function itself to run it natively).
        on_opaque_call: performs every call of a callable that is not interpreted: ``(fn, args, kwargs) ->
        result``.
        on_instruction: called before each instruction with ``(frame, instruction)``.
        on_load_global: ``(frame, name, value) -> value`` after LOAD_GLOBAL/LOAD_NAME resolved a
        global/builtin.
        on_load_deref: ``(frame, name, value) -> value`` after LOAD_DEREF/LOAD_CLASSDEREF.
        on_load_attr: ``(frame, obj, name, value) -> value`` after LOAD_ATTR/LOAD_METHOD/getattr().
        on_generic_attr: ``(frame, obj, name, value) -> value`` after ``object.__getattribute__(obj,
            name)`` (a Python ``__getattribute__``'s ``super().__getattribute__(name)``) read a value;
            ``on_load_attr`` where it is not set.
        on_generic_missing: ``(frame, obj, name) -> None`` when ``object.__getattribute__(obj, name)``
            (a Python ``__getattribute__``'s ``super().__getattribute__(name)``) raised AttributeError,
            before the hook's code sees it.
        on_missing_attr: ``(frame, obj, name) -> None`` when LOAD_ATTR/LOAD_METHOD raise
            AttributeError (before the program sees it); only in runs that set ``on_load_attr``.
        on_load_subscr: ``(frame, container, key, value) -> value`` after BINARY_SUBSCR.
        on_contains: ``(frame, container, item) -> answer`` for CONTAINS_OP: an object whose truth is the
            answer of ``item in container`` where the jit gives one (a dynamic number in a dict's keys), or
            NotImplemented for Python's own.
        item_key: ``(frame, container, key) -> key``: the key a dict, set or frozenset is indexed, tested or
            written with in place of the program's (the jit's proxy of a caller's tensor finds the
            caller's tensor, which such containers hash by identity); consulted by BINARY_SUBSCR in runs
            that set ``on_load_subscr``, STORE_SUBSCR in runs that set ``on_store``, CONTAINS_OP in runs
            that set ``on_contains``, and by DELETE_SUBSCR.
        on_store: ``(frame, target, key, kind) -> None`` after STORE_ATTR (``kind`` "attr", ``key`` the name)
            and STORE_SUBSCR (``kind`` "item") stored: the jit notes writes that leave a value the
            same object it was (``self.wait = 0`` over ``0``), which comparing states cannot see.
        store_attr: ``(frame, target, name, value) -> bool`` before STORE_ATTR stores, in runs that set
            ``on_store``: True when it performed ``target.name = value`` itself (the jit's store of
            ``data`` into a caller's tensor), False to leave the store to the interpreter.
        format_field: ``(value, conversion, spec) -> text`` for an f-string field (FORMAT_VALUE; 3.13's
            CONVERT_VALUE, FORMAT_SIMPLE, FORMAT_WITH_SPEC) of a value whose class is not one of Python's
            own, or of a container (tuple, list, dict, set): the field's text, which may be an object of
            the jit's that is not a str (BUILD_STRING then concatenates with ``+``), or NotImplemented for
            Python's formatting. ``conversion`` is
            0 (none), 1 (``!s``), 2 (``!r``) or 3 (``!a``); ``spec`` the format spec ("" for none).
        format_percent: ``(template, values) -> text`` for ``template % values`` with a str template
            (BINARY_OP ``%`` and ``%=``): the text, which may be an object of the jit's, or NotImplemented
            for Python's.
        native_call: ``(fn, args, kwargs) -> result``: performs a C call the interpreter makes itself for
            the program's own operation, where C may call the program's Python code natively (``sorted``'s
            comparisons, a set or dict display's hashes, ``%`` formatting, a comparison of two lists):
            the jit watches it (Note [Python code a C call ran natively], jit/native_python.py).
        on_type_lookup: ``(obj, t, name) -> None`` before a protocol looks up the special method ``name``
            on ``t``, the class of ``obj`` (``a + b``, ``len``, truth, iteration, subscripts, ``with``,
            a call of an instance, ``__getattr__``), for a class not native to the interpreter: what C
            finds on the class and never reads as an attribute (Note [A special method is looked up on
            the class], jit/provenance.py).
        on_made: ``obj -> None`` with each function the program makes (MAKE_FUNCTION; on 3.13 again as
            SET_FUNCTION_ATTRIBUTE gives it its closure; ``types.FunctionType(...)``) and each class a class
            statement makes (``__build_class__``): the jit makes them again for each cached call.
        type_of: ``obj -> class``: the class an object stands for, where it differs from ``type(obj)``
            (the jit's proxies stand for tensors); consulted where CPython's semantics depend on an
            object's type, e.g. whether ``cls(...)`` runs ``__init__`` on what ``__new__`` returned.
        max_depth: the program's frames at most: a call of a Python function that would go deeper raises
            RecursionError in its caller, as CPython's recursion limit does (the jit runs the interpreter
            under a limit of its own and gives the caller's here: Note [The program's recursion limit]).
        host_files: prefixes of the files of the code that provides these hooks (the jit's package): an
            exception raised there, with no cause and chained to nothing of the program's, is one the hooks
            raised as C would, and is chained as C's (Note [An error the hooks translated] in loop.py); the
            program sees no traceback entry of theirs (Note [The hooks' traceback entries] in tracebacks.py).
        host_callees: prefixes of the files of the libraries the hooks call (torch): a run of their entries
            between two entries of the hooks' is the hooks' machinery, hidden from the program with them.
        host_stand_in: ``code -> entry or None``: the traceback entry the program sees in place of a hidden
            entry of the hooks' ``code`` (the frame eager has where the hooks ran the program's code in a
            library's place: the jit's ``Function.apply`` for its lookaside running a Function's forward).
    """

    lookasides: Mapping[object, Callable] = field(default_factory=dict)
    resolve_call: Callable[[object], Callable | None] | None = None
    on_opaque_call: Callable[[Callable, tuple, dict], object] | None = None
    on_instruction: Callable[[Frame, Instruction], None] | None = None
    on_load_global: Callable[[Frame, str, object], object] | None = None
    on_load_deref: Callable[[Frame, str, object], object] | None = None
    on_load_attr: Callable[[Frame, object, str, object], object] | None = None
    on_generic_attr: Callable[[Frame, object, str, object], object] | None = None
    on_generic_missing: Callable[[Frame, object, str], None] | None = None
    on_missing_attr: Callable[[Frame, object, str], None] | None = None
    on_load_subscr: Callable[[Frame, object, object, object], object] | None = None
    on_contains: Callable[[Frame, object, object], object] | None = None
    item_key: Callable[[Frame, object, object], object] | None = None
    on_store: Callable[[Frame, object, object, str], None] | None = None
    store_attr: Callable[[Frame, object, str, object], bool] | None = None
    format_field: Callable[[object, int, object], object] | None = None
    format_percent: Callable[[str, object], object] | None = None
    native_call: Callable[[Callable, tuple, dict], object] | None = None
    on_type_lookup: Callable[[object, type, str], None] | None = None
    on_made: Callable[[object], None] | None = None
    type_of: Callable[[object], type] | None = None
    max_depth: int | None = None
    host_files: tuple[str, ...] = ()
    host_callees: tuple[str, ...] = ()
    host_stand_in: Callable[[CodeType], TracebackType | None] | None = None
