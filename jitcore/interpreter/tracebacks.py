"""Tracebacks that show the user's interpreted frames, not the interpreter's.

Invariants:
- An exception raised in or passing through an interpreted frame gets one traceback entry for that frame
  (file, line, columns and function name of the instruction that raised), as CPython would add; a re-raise
  (bare ``raise``, RERAISE) adds none (Note [A re-raise adds no traceback entry] in loop.py).
- The entry is a real traceback object (``TracebackType(tb_next, frame object, lasti, lineno)``) over a real
  frame object whose code carries the user's file name, function name, ``co_firstlineno`` and the
  instruction's line/column span in every code unit, whose globals are the frame's, and whose locals are
  the user's locals at the raise (``f_locals``: the bound ones, cells by their contents), kept alive as long
  as the entry lives (Note [Traceback frame objects]).
- Leading interpreter-internal entries are removed before an entry is added, and at every boundary where
  an exception leaves the interpreter, so the user never sees ``jitcore/interpreter`` frames.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import os
import sys
from types import CellType, CodeType, FunctionType, TracebackType
from typing import TYPE_CHECKING

from jitcore.diagnostics.tracebacks import entries, fake_traceback, source_frame, svarint, varint
from jitcore.interpreter.frame import NULL

if TYPE_CHECKING:
    from jitcore.interpreter.frame import Frame
    from jitcore.interpreter.hooks import Hooks
    from jitcore.interpreter.run import Run

__all__ = ["DRIVEN_CODES", "add_frame", "caller_stand_in", "is_internal", "last_index", "reraised_traceback",
           "restore_hidden", "strip_internal", "user_traceback"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_INTERNAL_NAMES = ("<jitcore binder>",)


_TEMPLATES: dict[tuple[int, int], CodeType] = {}  # (locals, arguments among them) -> raiser code
_VALUES = "<jitcore values>"  # the raiser's free variable: not an identifier, so no user local is named so


def _raiser_template(count: int, arguments: int) -> CodeType:
    """``raiser()``: stores ``values[1 + i]`` (``values``: its free variable) into its local ``i`` unless it
    is ``values[0]`` (the unbound marker; an argument, bound by its default, is then deleted), empties its
    free variable and returns its own frame (``values[-1]`` is ``sys._getframe``)."""
    template = _TEMPLATES.get((count, arguments))
    if template is None:
        store = "            if v[{0}] is not v[0]:\n                l{0} = v[{0}]\n"
        unbind = "            else:\n                del l{0}\n"
        stores = "".join(store.format(i) + (unbind.format(i) if i <= arguments else "")
                         for i in range(1, count + 1))
        source = (f"def make(v):\n    def raiser():\n        nonlocal v\n        try:\n{stores}"
                  "            return v[-1]()\n        finally:\n            del v\n    return raiser\n")
        namespace: dict = {}
        exec(compile(source, "<jitcore raiser>", "exec"), namespace)  # noqa: S102
        template = _TEMPLATES[count, arguments] = namespace["make"](None).__code__
    return template


_TracebackType = TracebackType
_FunctionType = FunctionType
_CellType = CellType
_getframe = sys._getframe
_NULL = NULL


def is_internal(filename: str) -> bool:
    """Whether a code object's file belongs to the interpreter itself."""
    return filename.startswith(_PACKAGE_DIR) or filename in _INTERNAL_NAMES


# id(a generator driver's code) -> (that code, the interpreted code it drives), filled by generators.py: kept
# here so that an id is never reused (and so that add_frame knows a driver's entry)
DRIVEN_CODES: dict[int, tuple[CodeType, CodeType]] = {}


def strip_internal(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without its leading interpreter-internal entries (a caller stand-in's among them)."""
    while tb is not None:
        code = tb.tb_frame.f_code
        filename = code.co_filename
        # is_internal, inlined
        if not filename.startswith(_PACKAGE_DIR) and filename not in _INTERNAL_NAMES and \
                id(code) not in _STAND_IN_CODES:
            break
        tb = tb.tb_next
    return tb


# Note [A caller stand-in]
# C code that looks at the Python frame calling it finds the innermost native one: for a call made by an
# interpreted frame, an opcode handler of the interpreter. ``warnings.warn(..., stacklevel=2)`` at the top
# level of a module imported by interpreted code (a deprecation warned at import) then named jitcore's file,
# line and module (its filters, its ``__warningregistry__``: a DeprecationWarning of ``__main__``'s import was
# ignored). IMPORT_NAME therefore calls ``__import__`` through a stand-in for the frame: a function whose code
# carries the frame's file, name and the instruction's line in every code unit (as a raiser's does, Note
# [Traceback frame objects]) and whose globals are the frame's, made once per instruction. Its traceback
# entry is dropped with the interpreter's own (``strip_internal``): the frame's entry stands for it.
_STAND_IN_TEMPLATE = compile("def stand_in(callee, args):\n    return callee(*args)\n",
                             "<jitcore stand-in>", "exec").co_consts[0]
_STAND_IN_CODES: set[int] = set()  # ids of the stand-ins' codes, each kept alive by its CodeInfo


def caller_stand_in(frame: Frame) -> FunctionType:
    """A native function standing for ``frame`` at its current instruction: ``stand_in(callee, args)`` calls
    ``callee(*args)`` from a frame with the frame's file, function name, line and globals (Note [A caller
    stand-in])."""
    index = frame.index - 1 if frame.index else 0
    made = frame.info.stand_ins.get(index)
    if made is None:
        code = frame.code
        inst = frame.instructions[index]
        units = len(_STAND_IN_TEMPLATE.co_code) // 2
        lineno = inst.lineno if inst.lineno is not None or not _has_lines(frame) else frame.position().lineno
        columns = (inst.end_lineno, inst.col, inst.end_col) if inst.lineno is not None else (None, None, None)
        table = _linetable(units, code.co_firstlineno, lineno, *columns)
        stand_in = _STAND_IN_TEMPLATE.replace(
            co_filename=code.co_filename, co_name=code.co_name, co_qualname=code.co_qualname,
            co_firstlineno=code.co_firstlineno, co_linetable=table)
        _STAND_IN_CODES.add(id(stand_in))  # its code lives as long as the CodeInfo: the id is never reused
        made = frame.info.stand_ins[index] = FunctionType(stand_in, frame.globals)
    elif made.__globals__ is not frame.globals:  # the same code run over other globals (exec)
        made = frame.info.stand_ins[index] = FunctionType(made.__code__, frame.globals)
    return made


def add_frame(frame: Frame, exc: BaseException, always: bool, leaving: bool = False) -> None:
    """Give ``exc`` a traceback entry for ``frame`` on top of its (stripped) traceback.

    Args:
        frame: the interpreted frame the exception is passing through.
        exc: the exception.
        always: add an entry even if the traceback already starts with this frame's last entry (an explicit
            ``raise exc`` in the same frame adds one in CPython; a bare re-raise does not).
        leaving: the exception leaves ``frame`` (no handler of its own runs): its entry's frame holds the
            frame's locals, final now (Note [Traceback frame objects]).
    """
    tb = user_traceback(exc.__traceback__)
    if not always and tb is not None and id(tb) == getattr(frame, "tb_entry", 0):  # (unset: no entry yet)
        exc.__traceback__ = tb
        return
    hooks = frame.run.hooks
    hidden = None
    if tb is not None and hooks.host_files and tb.tb_frame.f_code.co_filename.startswith(hooks.host_files):
        tb, hidden = _without_hooks(tb, hooks)
    entry = _entry(frame, tb, leaving)
    # only the id: holding the entry would keep the exception's frames alive after the user dropped it
    frame.tb_entry = id(entry)
    exc.__traceback__ = entry
    if hidden:  # Note [The hooks' traceback entries]
        kept = frame.run.hidden
        if len(kept) >= _HIDDEN_KEPT:
            del kept[next(iter(kept))]
        kept[id(entry)] = (id(tb), entry.tb_lasti, hidden)


# Note [The hooks' traceback entries]
# Code that provides the run's hooks (the jit: a torch op's lookaside, an opaque call's watch, a subclass's
# dispatch) stands between an interpreted frame and what the frame called, so an exception raised there, or
# raised below by C or by code the hooks ran, carries the hooks' traceback entries (and those of the
# library machinery they drive: torch's dispatch-mode and ``_dynamo.disable`` wrappers) after the program's.
# CPython shows none of them: C's ``PyErr_Display`` (``_testcapi.exception_print``), ``traceback.walk_tb``
# and every printer of the program listed ``jit/interpretation.py _opaque_call`` ... after the program's
# frames (test_traceback's CPythonTracebackErrorCaretTests jitted). The interpreted frame's entry is
# therefore made over the traceback without them (``_without_hooks``: the hooks' entries anywhere in it,
# and a run of the callees' entries between two of theirs; a trailing run of the callees' is code that
# raised as it would eagerly, and stays; an entry of the hooks' code that runs the program's code where
# eager runs a library's frame is shown as that frame, ``host_stand_in``: torch's ``Function.apply`` above
# an ``autograd.Function``'s ``forward``). The hooks' own reading of an error that leaves the interpreter
# (the jit's error reports: was it raised in jitcore's code, in a subclass's flatten protocol) needs those
# entries: the run keeps them, for the last few entries made that way, and an exception leaving the
# outermost run (``interpret``, ``interpret_code``) has them put back where they were (``restore_hidden``);
# the boundary the jit returns through hides them from the caller as before. The walk stops at the entry of
# an interpreted frame (a raiser's), whose tail was seen to when that entry was made, and nothing is put
# back as an exception leaves a nested run (``Run.call``): a RecursionError through ~500 nested ``repr()``
# calls the hooks made, each a ``Run.call``, was walked, put back and hidden again whole at every level
# (test_io's PyBufferedReaderTest.test_recursive_repr jitted: 0.8 s -> over 120 s,
# /tmp/cpy53-probes/p9_recursive_repr.py). The run holds no frame for this: a finished frame holds its
# locals and, through ``f_back``, its callers' (the interpreter's, holding an opaque call's arguments; once
# they return, the program's own frames' locals too), which would then outlive the exception the program
# dropped (an object handed to a C call that raised, freed eagerly once the handler ran). An entry made
# that way is known by its id, the id of the entry under it and its instruction; the hidden entries, by
# their code, instruction and line, and are made again as ``fake_traceback`` makes entries (the same file,
# name, line and span; not the same code object: the jit's boundary knows its registered stand-ins by file
# and name, ``diagnostics.boundary.eager_stand_in``).
_HIDDEN_KEPT = 32


def _without_hooks(tb: TracebackType, hooks: Hooks) \
        -> tuple[TracebackType | None, list[tuple[int, list[tuple[CodeType, int, int]]]]]:
    """``tb`` without the hooks' entries (files under ``hooks.host_files``) and the runs of
    ``hooks.host_callees``' entries between two of them, a hooks' entry that has a stand-in
    (``hooks.host_stand_in``) shown as it; the entries kept above the last one dropped are copies (``tb`` is
    left as it is).

    Returns:
        the entries shown, linked, and the runs dropped: ``(k, entries)`` for a run that followed the k-th
        entry shown (0: none), each entry as its code, ``tb_lasti`` and ``tb_lineno``.
    """
    host, callees, stand_in = hooks.host_files, hooks.host_callees, hooks.host_stand_in
    found: list[TracebackType] = []
    while tb is not None and _VALUES not in tb.tb_frame.f_code.co_freevars:
        found.append(tb)  # (up to an interpreted frame's entry, a raiser's: what is under it was seen to)
        tb = tb.tb_next
    keep = [True] * len(found)
    stand_ins: dict[int, TracebackType] = {}  # the hooks' entries shown as an entry eager has there
    machinery: list[int] = []  # the callees' entries since the hooks' last one
    after_hooks = False
    for i, entry in enumerate(found):
        filename = entry.tb_frame.f_code.co_filename
        if filename.startswith(host) or is_internal(filename):
            keep[i] = False
            shown = None if stand_in is None else stand_in(entry.tb_frame.f_code)
            if shown is not None:
                stand_ins[i] = shown
            for j in machinery:
                keep[j] = False
            machinery.clear()
            after_hooks = True
        elif after_hooks and callees and filename.startswith(callees):
            machinery.append(i)
        else:
            machinery.clear()
            after_hooks = False
    shared = len(found)  # the entries from here on are all kept: their chain is shared as it is
    while shared and keep[shared - 1]:
        shared -= 1
    head = found[shared] if shared < len(found) else tb
    for i in range(shared - 1, -1, -1):
        entry = found[i] if keep[i] else stand_ins.get(i)
        if entry is not None:
            head = _TracebackType(head, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    dropped: list[tuple[int, list[tuple[CodeType, int, int]]]] = []
    count = 0
    for i, entry in enumerate(found):
        if keep[i]:
            count += 1
            continue
        where = (entry.tb_frame.f_code, entry.tb_lasti, entry.tb_lineno)
        if dropped and dropped[-1][0] == count:
            dropped[-1][1].append(where)
        else:
            dropped.append((count, [where]))
        count += i in stand_ins  # shown after the entry it stands for
    return head, dropped


def restore_hidden(run: Run, exc: BaseException) -> None:
    """Put the hooks' entries (Note [The hooks' traceback entries]) back into ``exc``'s traceback, where
    they were, as ``exc`` leaves ``run``."""
    hidden = run.hidden
    if not hidden:
        return
    tb = exc.__traceback__
    while tb is not None:
        made = hidden.get(id(tb))
        if made is not None and made[0] == id(tb.tb_next) and made[1] == tb.tb_lasti:
            del hidden[id(tb)]
            chain = [tb]
            below = tb.tb_next
            while below is not None:
                chain.append(below)
                below = below.tb_next
            for count, dropped in reversed(made[2]):
                if count < len(chain):
                    made_again = entries(fake_traceback(source_frame(*where) for where in dropped))
                    after = chain[count]
                    made_again[-1].tb_next = after.tb_next
                    after.tb_next = made_again[0]
        tb = tb.tb_next


# Note [A throw into a generator not started]
# ``gen.throw(exc)``, ``coro.throw(exc)`` or an ``agen.athrow(exc)`` awaitable first sent to, before the
# generator started, raises ``exc`` in the generator's frame at its start: CPython's traceback has the
# generator's entry at its ``def`` line (its ``f_locals`` the arguments). An interpreted generator's driver
# (generators.py) never runs the frame then: the exception comes out of the driver's first instruction with
# the driver's entry only, internal. Such an entry (a driver's code, its interpreted frame at index 0: never
# run; any other exception leaving a driver has its entry stripped by the driver's own ``except`` clause,
# Note [The driver's traceback entry] in generators.py) becomes the generator's entry when the exception
# reaches an interpreted frame, whatever called ``throw``/``send`` in between (the interpreter's handlers,
# C's athrow awaitable). A native caller the exception leaves to (``map(g.throw, ...)`` run by C) still sees
# the driver's entry.
def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``strip_internal(tb)``, where the entry of a driver whose frame never ran is that frame's (Note [A
    throw into a generator not started])."""
    while tb is not None:
        code = tb.tb_frame.f_code
        filename = code.co_filename
        if not filename.startswith(_PACKAGE_DIR) and filename not in _INTERNAL_NAMES and \
                id(code) not in _STAND_IN_CODES:
            break
        if id(code) in DRIVEN_CODES:
            frame = tb.tb_frame.f_locals.get("frame")
            if frame is not None and frame.index == 0:
                return _entry(frame, strip_internal(tb.tb_next), True)
        tb = tb.tb_next
    return tb


def reraised_traceback(frame: Frame, exc: BaseException, leaving: bool) -> TracebackType | None:
    """The traceback of ``exc`` re-raised in ``frame`` (Note [A re-raise adds no traceback entry] in loop.py):
    its own without the interpreter's entries; where it leaves the frame starting with an entry the frame
    gave an exception it caught (made without locals: the frame ran on), that entry made again at the same
    instruction with the frame's final locals, as CPython's frame object holds them once the frame is gone
    (Note [Traceback frame objects]: an exception passing through a ``with`` or ``finally`` block)."""
    tb = strip_internal(exc.__traceback__)
    if leaving and tb is not None:
        code = tb.tb_frame.f_code
        for key, made in frame.info.raisers.items():
            if type(key) is tuple and len(key) == 2 and not key[1] and made[0].__code__ is code:  # no locals
                index = frame.index
                left_at = frame.instructions[last_index(frame)].lineno
                frame.index = key[0] + 1
                try:
                    tb = _entry(frame, tb.tb_next, True, left_at)
                finally:
                    frame.index = index
                frame.tb_entry = id(tb)
                break
    return tb


# Note [Traceback frame objects]
# A traceback entry needs a real frame object (``tb_frame``: printing reads its code and globals and, with
# ``tb_lasti``, the code's positions). It is made by calling a "raiser", a function whose code carries the
# user's file, name and position in every code unit (the jinja2 ``fake_traceback`` idea), made once per
# instruction that raises (``CodeInfo.raisers``) and returning its own frame. For a frame the exception
# leaves (no handler of its own runs), its locals are named as the user's and it is called with their
# values, final now, so ``tb_frame.f_locals`` is what CPython's dead frame holds (``traceback``'s
# ``capture_locals``, ``pdb.post_mortem``, pytest's ``--showlocals``, ``clear_frames``), and the entry keeps
# them alive as CPython's keeps its frames' (test_exceptions' test_memory_error_cleanup). A frame whose
# locals are a dict (a class body, ``exec``) passes that dict's string keys; a module's frame passes none
# (CPython's ``f_locals`` there is the module's globals, which ``f_globals`` already gives). A frame that
# handles the exception runs on: CPython's entry is the live frame, whose later rebinding (``obj = None``)
# releases what the locals held (test_exceptions' testExceptionCleanupState); values taken at the raise
# would keep it, so that entry's frame has no locals, until the frame re-raises the exception out of itself
# (a ``with``, a ``finally``): the entry is then made again with the final locals (``reraised_traceback``).
# An entry is then one ``TracebackType(...)`` call;
# raising through the raiser and catching the exception cost ~5,000 more machine instructions per entry. The
# raiser is called inside ``_MAKER``, a generator suspended between calls and holding nothing then: a
# finished frame's ``f_back`` is its caller, and called from here the raiser's would be this module's frames,
# all of them made into frame objects as they return (~7,000 machine instructions) and kept alive by the
# entry. (One frame object per instruction, shared by all its entries, would be cheaper still but keeps no
# locals alive.)


def entry_here(frame: Frame) -> TracebackType:
    """A traceback entry of its own for ``frame`` at its current instruction (CPython's
    ``_PyTraceBack_FromFrame``: 3.13's ``except*`` gives it to the group wrapping a naked exception)."""
    return _entry(frame, None, False)


def _entry(frame: Frame, tb_next: TracebackType | None, leaving: bool,
           left_at: int | None | bool = False) -> TracebackType:
    """The entry of ``frame`` at its current instruction; ``left_at``: the line of the instruction a frame
    that ran on after the raise left from (None: no line), if not that one (Note [A frame's last line])."""
    global _MAKER
    index = frame.index - 1 if frame.index else 0
    if leaving:
        names, values = _locals(frame)
        key = index if frame.locals is None else (index, names)
    else:  # the frame runs on (a handler of its own): values taken now would outlive what it rebinds
        names, values, key = (), (), (index, ())
    if left_at is not False:
        key = (index, names, left_at)
    raisers = frame.info.raisers
    made = raisers.get(key)
    if made is None or made[0].__globals__ is not frame.globals:
        made = raisers[key] = _raiser(frame, names, left_at)
    prototype = made[0]
    raiser = _FunctionType(prototype.__code__, prototype.__globals__, None, prototype.__defaults__,
                           (_CellType((_NULL, *values, _getframe)),))
    if prototype.__kwdefaults__ is not None:
        raiser.__kwdefaults__ = prototype.__kwdefaults__
    try:
        tb_frame = _MAKER.send(raiser)
    except ValueError:  # the maker is running (in another thread, or below a signal handler)
        tb_frame = raiser()
    except StopIteration:  # an asynchronous exception (KeyboardInterrupt) ended the maker while it ran
        _MAKER = _new_maker()
        tb_frame = _MAKER.send(raiser)
    return _TracebackType(tb_next, tb_frame, 0, made[1])


def _locals(frame: Frame) -> tuple[tuple[str, ...], list]:
    """The names of ``frame``'s locals and their values (NULL: unbound; a cell's contents, NULL if empty)."""
    if frame.locals is None:
        names, cells = _slots(frame)
        values = frame.fast
        if cells:
            values = list(values)
            for i in cells:
                if type(values[i]) is CellType:
                    values[i] = _contents(values[i])
        return names, values
    if frame.locals is frame.globals:
        return (), []
    keys = tuple(key for key in frame.locals if type(key) is str)
    return keys, [frame.locals[key] for key in keys]


def _slots(frame: Frame) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The names of ``frame``'s fast locals and the indices of those that are cells or free variables,
    kept on its code's ``CodeInfo`` (``local_slots``)."""
    info = frame.info
    slots = info.local_slots
    if slots is None:
        code = frame.code
        names = tuple(code._varname_from_oparg(i) for i in range(info.nlocalsplus))
        cells = set(code.co_cellvars) | set(code.co_freevars)
        slots = info.local_slots = names, tuple(i for i, name in enumerate(names) if name in cells)
    return slots


def _contents(cell: CellType) -> object:
    try:
        return cell.cell_contents
    except ValueError:
        return _NULL


def _frame_maker():
    box = []
    raiser = yield
    while True:
        box.append(raiser())
        del raiser
        raiser = yield box.pop()


def _new_maker():
    maker = _frame_maker()
    next(maker)
    return maker


_MAKER = _new_maker()


def _raiser(frame: Frame, names: tuple[str, ...], left_at: int | None | bool = False) \
        -> tuple[FunctionType, int]:
    """The raiser of the current instruction of ``frame`` with locals ``names`` (Note [Traceback frame
    objects]) and the ``tb_lineno`` of its entries (-1: no line)."""
    inst = frame.instructions[max(frame.index - 1, 0)]
    lineno = inst.lineno
    if lineno is None and _has_lines(frame):
        lineno = frame.position().lineno
    code = _raiser_code(frame, names, left_at)
    prototype = FunctionType(code, frame.globals, None, (None,) * code.co_argcount, (CellType(None),))
    if code.co_kwonlyargcount:  # (Note [A raiser's signature])
        prototype.__kwdefaults__ = dict.fromkeys(
            code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount])
    return prototype, -1 if lineno is None else lineno


def last_index(frame: Frame) -> int:
    """The index of the instruction ``frame`` last ran, CPython's ``f_lasti``, when an exception leaves its
    current instruction (Note [A frame's last line]): that instruction, or, for a RERAISE with an argument,
    the index it finds on the stack (the one that raised into its handler: CPython's RERAISE sets ``f_lasti``
    back to it, and a handler given ``lasti`` is given this one)."""
    index = frame.index - 1
    inst = frame.instructions[index]
    if inst.opname == "RERAISE" and inst.arg and len(frame.stack) >= inst.arg:
        lasti = frame.stack[-inst.arg]  # (the exception is popped already)
        if type(lasti) is int:
            return lasti
    return index


# Note [A frame's last line]
# CPython's traceback entry holds the frame object itself: once the frame is gone, ``tb_frame.f_lineno`` is
# the line of the last instruction it ran, while ``tb_lineno`` stays the raise's. For a frame the exception
# leaves at once they are the same line; for one that ran a handler or a ``finally`` first and then left by
# re-raising it (an ``except`` clause that does not match, the end of a ``finally``), f_lineno is the
# re-raise's line (None where that instruction has no location: the re-raise closing an ``except*``), or,
# for a RERAISE with an argument (a handler's cleanup), the line of the instruction whose index the handler
# was given (``lasti``), to which CPython's RERAISE sets ``f_lasti`` back (``last_index``). The
# entry made again there (``reraised_traceback``) gets a raiser whose first code unit (``tb_lasti`` 0: the
# entry's positions for ``traceback``) keeps the raise's span and whose other units, where the raiser's
# frame ends (its ``f_lineno``), carry the re-raise's line (test_exceptions' PEP626Tests).


# Note [A raiser's signature]
# The entry of a frame the exception left holds the frame's locals under the user's names; the raiser's code
# also declares the user's arguments as its own (``co_argcount``, ``co_posonlyargcount``,
# ``co_kwonlyargcount``, the ``*args`` and ``**kwargs`` flags, in ``co_varnames`` order), so
# ``inspect.getargvalues(tb.tb_frame)`` (pdb's ``args``, IPython's and cgitb's frame headers) answers the
# user's call. The raiser is therefore called with no arguments (defaults bind them; an argument the user
# deleted is deleted again) and reads the values from its free variable, a new cell per entry (the raiser's
# code is shared by every thread), which it empties, so ``f_locals`` does not show it.
_ARGUMENT_FLAGS = 0x04 | 0x08 | 0x10  # CO_VARARGS, CO_VARKEYWORDS, CO_NESTED


def _raiser_code(frame: Frame, names: tuple[str, ...], left_at: int | None | bool) -> CodeType:
    code = frame.code
    signature = frame.locals is None and bool(names)  # the fast locals, the arguments first
    argcount, posonly, kwonly = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount) \
        if signature else (0, 0, 0)
    flags = code.co_flags & _ARGUMENT_FLAGS if signature else 0
    arguments = argcount + kwonly + bool(flags & 0x04) + bool(flags & 0x08)
    template = _raiser_template(len(names), arguments)
    units = len(template.co_code) // 2
    inst = frame.instructions[max(frame.index - 1, 0)]
    if inst.lineno is None:
        # an artificial instruction: report the nearest line, as CPython's tracebacks do; only a code object
        # without any line information gets "no location" (f_lineno None)
        table = _linetable(units, code.co_firstlineno,
                           frame.position().lineno if _has_lines(frame) else None, None, None, None)
    elif left_at is False or left_at == inst.lineno:
        table = _linetable(units, code.co_firstlineno, inst.lineno, inst.end_lineno, inst.col, inst.end_col)
    else:  # the raise's span where the entry reads it (tb_lasti 0), the line left at where f_lineno does
        table = _linetable(1, code.co_firstlineno, inst.lineno, inst.end_lineno, inst.col, inst.end_col) + \
            _linetable(units - 1, inst.lineno, left_at, None, None, None)
    return template.replace(co_filename=code.co_filename, co_name=code.co_name, co_qualname=code.co_qualname,
                            co_firstlineno=code.co_firstlineno, co_linetable=table, co_varnames=names,
                            co_freevars=(_VALUES,), co_argcount=argcount, co_posonlyargcount=posonly,
                            co_kwonlyargcount=kwonly,
                            co_flags=template.co_flags & ~_ARGUMENT_FLAGS | flags)


def _has_lines(frame: Frame) -> bool:
    return any(inst.lineno is not None for inst in frame.instructions)


def _linetable(units: int, first: int, lineno: int | None, end_lineno: int | None, col: int | None,
               end_col: int | None) -> bytes:
    """A 3.11 location table giving each of the raiser's ``units`` code units the span
    ``lineno:col-end_lineno:end_col`` (relative to the user's ``co_firstlineno``, so ``f_lineno`` and
    ``f_code.co_firstlineno`` both match)."""
    out = b""
    remaining = units
    delta = 0 if lineno is None else lineno - first
    while remaining:
        units = min(remaining, 8)  # an entry covers at most 8 code units
        remaining -= units
        head = 0x80 | (units - 1)
        if lineno is None:
            out += bytes([head | (15 << 3)])  # no location: CPython reports f_lineno None
        elif col is None or end_col is None or end_lineno is None:
            out += bytes([head | (13 << 3)]) + svarint(delta)  # line only, no columns
        else:
            out += (bytes([head | (14 << 3)]) + svarint(delta) + varint(end_lineno - lineno)
                    + varint(col + 1) + varint(end_col + 1))
        delta = 0
    return out
