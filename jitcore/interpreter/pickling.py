"""``pickle.dumps``/``pickle.dump`` of an object graph that reaches an instance of a Python class, by the
standard library's pure-Python pickler, interpreted, so its reads are the program's.

Invariants:
- the bytes and the errors are C's: ``pickle._Pickler`` writes what ``_pickle.Pickler`` writes (Note [The
  Python pickler writes C's bytes]); arguments that do not bind to its signature get C's own error, and
  where the Python pickler refuses (PicklingError), the program gets C's exception (Note [C's words for
  what cannot be pickled]); a bad protocol is C's error, checked first;
- ``pickle.dump`` calls the program's ``file.write`` once, with all the bytes, and not at all where the
  pickling is refused (Note [pickle.dump writes the file once]);
- a graph of built-in values only (numbers, text, bytes, lists, tuples, dicts, sets, and instances of
  classes written in C, but for the C iterators that may hold the interpreter's stand-ins: Note [A
  reduction shows what the program gave]) is pickled by C: the interpreter's hooks see those values where
  the program read them, and C reads nothing of them that a Python attribute read would;
- the walk deciding it looks at no more than ``_WALKED`` objects; past that the Python pickler runs.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import collections
import inspect
import io
import pickle
import types

from jitcore.interpreter.callbacks import active_run
from jitcore.interpreter.calls import call, call_function, opaque
from jitcore.interpreter.protocols import has_python_index, index
from jitcore.interpreter.stand_in_reductions import STAND_IN_HOLDERS

__all__ = ["built_in_values", "dump", "dumps", "save_global"]

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (or type())
_WALKED = 10_000
_C_DUMPS, _C_DUMP = pickle.dumps, pickle.dump
_PY_DUMPS, _PY_DUMP = pickle._dumps, pickle._dump  # noqa: SLF001 - the pure-Python pickler's entry points
_SIGNATURES = {_PY_DUMPS: inspect.signature(_PY_DUMPS), _PY_DUMP: inspect.signature(_PY_DUMP)}
_PICKLER_FILE = pickle.__file__


# Note [The Python pickler writes C's bytes]
# ``pickle.dumps(obj)`` of a caller's object is C's pickler calling C's ``object.__reduce_ex__``, which
# reads the instance dict, the slots and ``copyreg``'s results natively: nothing of it reached the jit's
# hooks, so a cached call returned the first call's bytes after the caller changed an attribute (a
# wrong answer). Interpreting the standard library's pure-Python pickler (``pickle._dumps``) makes every
# read of the object the program's: ``obj.__reduce_ex__(protocol)`` goes to the interpreter's own
# (jitcore/interpreter/reductions.py), whose reads of ``__dict__`` and of slots are told to the run, and
# the dicts and lists it then iterates are the program's state, guarded. Its bytes are C's: compared
# for protocols 0 to 5 over instances with dicts, slots, both, ``__getstate__``, ``__reduce__``,
# ``__getnewargs__``/``__getnewargs_ex__``, dataclasses, enums, dict and list subclasses, OrderedDict,
# SimpleNamespace, defaultdict, Counter, deque, recursion and shared references, large ints, floats,
# long text and bytes (which C and Python both frame), classes and functions by name: identical bytes
# and errors in all 216 cases (/tmp/cread46-probes/pk_equal.py, tests/interpreter/test_interp_pickling.py).
# It is slower (interpreted while tracing), so a graph of built-in values alone stays with C.
def dumps(*args: object, **kwargs: object) -> object:
    """``pickle.dumps(obj, protocol=None, *, fix_imports=True, buffer_callback=None)`` (the Note above)."""
    run = active_run()
    arguments = _arguments(_PY_DUMPS, args, kwargs)
    if arguments is not None and _index_protocol(run, arguments):
        args, kwargs = (), arguments
    if arguments is None or built_in_values(arguments["obj"]):
        return opaque(run, _C_DUMPS, args, kwargs)  # (with arguments that do not bind: C's own error)
    _check_protocol(run, arguments)
    return _pickled(run, arguments)


# Note [pickle.dump writes the file once]
# C's ``pickle.dump(obj, file)`` pickles into its own buffer and writes it to ``file`` at the end, one
# ``file.write(bytes)``; the Python pickler writes every opcode as it goes. Interpreted, a graph refused
# part-way left the opcodes before the refusal in the file where C writes nothing (protocol 0: 116 bytes,
# 2: 56, 4: 2; /tmp/cpy50-probes/pkfile.py), and a file that counts its writes saw dozens of calls. So
# ``dump`` is ``dumps`` followed by one call of the program's ``file.write``, looked up (through the
# program's ``__getattr__`` if any) after C's check of the protocol and before the pickling, in C's order;
# no ``write`` attribute is C's TypeError. The one difference left: C also writes early where a single
# str/bytes payload or a protocol 4+ frame passes 64 KiB (several writes of the same bytes in all, and
# those pieces stay written if the pickling is refused after them); here the bytes come in one write.
def dump(*args: object, **kwargs: object) -> object:
    """``pickle.dump(obj, file, protocol=None, *, fix_imports=True, buffer_callback=None)`` (the Note
    above)."""
    run = active_run()
    arguments = _arguments(_PY_DUMP, args, kwargs)
    if arguments is not None and _index_protocol(run, arguments):
        args, kwargs = (), arguments
    if arguments is None or built_in_values(arguments["obj"]):
        return opaque(run, _C_DUMP, args, kwargs)  # (with arguments that do not bind: C's own error)
    _check_protocol(run, arguments)
    write = _file_write(run, arguments.pop("file"))
    call(run, write, (_pickled(run, arguments),), None)
    return None


# Note [A protocol given by its __index__]
# C reads the protocol with ``PyLong_AsLong``, which asks an object that is no int for its ``__index__``
# (natively: under the jit a call run eagerly, 'C code called P.__index__'); the Python pickler compares it
# with ints instead ("'<' not supported between instances of 'P' and 'int'", where C pickles). So an
# object with a Python ``__index__`` is made its int here, interpreted, once, before anything else C does
# with the arguments (C binds them first: arguments that do not bind never reach ``__index__``), and the
# int is what C and the Python pickler are given. An int subclass is its own value, as for C.
def _index_protocol(run: object, arguments: dict) -> bool:
    """Whether ``arguments``' protocol had a Python ``__index__``, now replaced by the int it gave (the Note
    above)."""
    protocol = arguments.get("protocol")
    if protocol is None or not has_python_index(run, protocol):
        return False
    arguments["protocol"] = index(run, protocol)
    return True


def _check_protocol(run: object, arguments: dict) -> None:
    """C's error for a protocol C refuses (``'str' object cannot be interpreted as an integer``, ``pickle
    protocol must be <= 5``), which C checks first; the Python pickler compares it with ints instead."""
    opaque(run, _C_DUMPS, (None,), {"protocol": arguments.get("protocol")})


def _file_write(run: object, file: object) -> object:
    """``file.write`` as the program looks it up, C's TypeError where it has none."""
    try:
        return call(run, getattr, (file, "write"), None)
    except AttributeError:
        pass
    raise TypeError("file must have a 'write' attribute")


def _pickled(run: object, arguments: dict) -> object:
    """The Python pickler's bytes for ``dumps``'s ``arguments``, or C's exception where it refuses."""
    try:
        return _python_dumps(run, arguments)
    except (pickle.PicklingError, IndexError, _LocalName) as error:  # (IndexError: an empty __newobj__ list)
        refusal = error
    if type(refusal) is _LocalName:  # (Note [A local name refused first]; raised here: no context)
        raise _c_refusal(run, {**arguments, "obj": _Reduced(refusal.name)}) or AttributeError(refusal.name)
    frame = _raised_in(refusal)
    if frame is None or frame.f_code.co_filename != _PICKLER_FILE:
        raise refusal  # the program's own (a reducer's): C lets it through as it is
    if type(refusal) is IndexError and frame.f_code.co_name != "save_reduce":
        raise refusal
    if frame.f_code.co_name == "save_reduce" and str(refusal).endswith("args has the wrong class") and \
            isinstance(frame.f_locals.get("cls"), type):
        raise refusal  # C's words too: C checks the same ``__class__`` of a class it finds a type
    if frame.f_code.co_name == "save_global" and ": it's not the same object as " in str(refusal):
        raise refusal  # C's words too, the object's repr taken once
    refused = _refused_alone(frame, str(refusal))
    if refused is not None:
        arguments = {**arguments, "obj": refused}
    raise _c_refusal(run, arguments) or refusal


def _refused_alone(frame: object, message: str) -> object:
    """What C can be asked about in place of the whole graph for the Python pickler's refusal in ``frame``
    (Note [C's words for what cannot be pickled]): the class or function ``save_global`` refused, or a
    ``_Reduced`` giving the malformed result of a reducer; None otherwise."""
    name, local = frame.f_code.co_name, frame.f_locals
    found_as = (local.get("module_name"), local.get("name"))
    if name == "save_global" and all(type(part) is str for part in found_as):
        tail = f": it's not found as {found_as[0]}.{found_as[1]}"
        if message.startswith("Can't pickle ") and message.endswith(tail):  # a name not found (a class's too)
            return _Named(found_as[1], found_as[0], message[len("Can't pickle "):-len(tail)])
    if name == "save_global" and issubclass(type(local.get("obj")), (types.FunctionType, type)):
        return local["obj"]  # C saves a class or function running no code
    if name == "save" and "rv" in local:  # not a str or a tuple, or a tuple of another length
        return _Reduced(local["rv"])
    if name == "save_reduce" and "__newobj" not in message:  # (the class checks are against the object's)
        return _Reduced((local["func"], local["args"]))
    return None


# Note [A local name refused first]
# C's ``save_global`` splits the global's name (a reducer's string, or a class's or function's
# ``__qualname__``) and refuses one with a ``<locals>`` part before anything else ("Can't pickle local
# object 'f.<locals>.g'"; 3.13: "Can't get local object ..."): it neither looks the object's module up
# (``whichmodule`` reads its ``__module__``) nor takes its ``repr``. The Python pickler looks the name up in
# the module first and, failing, words its refusal with the object's ``%r``: a program's ``__repr__`` (an
# instance's, or a metaclass's for a local class) and a ``__module__`` property ran where eagerly they do
# not (/tmp/cpy54-probes/p1_local_names.py, 3.11 and 3.13). So ``pickle._Pickler.save_global`` is looked
# aside: for a pickler ``dumps`` made (``_PICKLERS``), C's check comes first, and a local name leaves the
# pickling as ``_LocalName``, after which C is asked about an object whose ``__reduce_ex__`` gives that name,
# for its words; any other call (a pickler of the program's) is the Python function, interpreted. The
# pickler is made and run here step by step as ``pickle._dumps`` does (a function of jitcore's own would
# run natively under the jit, which runs jitcore's code natively). A name not found otherwise is C's refusal
# with the object's ``repr`` taken once, by the Python pickler's refusal (``_Named``), a class's with a
# metaclass ``__repr__`` too (C, asked about the class itself, ran that ``__repr__`` a second time).
class _LocalName(Exception):  # noqa: N818 - not an error: the pickling leaves with it, refused in C's words
    """A global's name with a ``<locals>`` part, met by ``save_global`` (the Note above)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


_PICKLERS: list = []  # the picklers ``_pickled`` runs, innermost last
_SAVE_GLOBAL = pickle._Pickler.save_global  # noqa: SLF001


def save_global(*args: object, **kwargs: object) -> object:
    """``pickle._Pickler.save_global(self, obj, name=None)``, interpreted, with C's first check of a local
    name for a pickler ``dumps`` made (Note [A local name refused first])."""
    run = active_run()
    if not kwargs and len(args) in (2, 3) and any(pickler is args[0] for pickler in _PICKLERS):
        obj, name = args[1], args[2] if len(args) == 3 else None
        if name is None:  # (read as the Python pickler and C read it, once)
            name = call(run, getattr, (obj, "__qualname__", None), None)
        if name is None:
            name = call(run, getattr, (obj, "__name__"), None)
        if issubclass(type(name), str) and "<locals>" in str.split(name, "."):
            raise _LocalName(name)
        args = (args[0], obj, name)
    return call_function(run, _SAVE_GLOBAL, args, kwargs)  # (not ``call``: it would come back here)


def _python_dumps(run: object, arguments: dict) -> bytes:
    """``pickle._dumps(**arguments)``: its pickler made and run interpreted, known to ``save_global`` (Note
    [A local name refused first])."""
    file = io.BytesIO()
    options = {"fix_imports": arguments.get("fix_imports", True),
               "buffer_callback": arguments.get("buffer_callback")}
    pickler = call(run, pickle._Pickler, (file, arguments.get("protocol")), options)  # noqa: SLF001
    _PICKLERS.append(pickler)
    try:
        call(run, pickle._Pickler.dump, (pickler, arguments["obj"]), None)  # noqa: SLF001
    finally:
        _PICKLERS.pop()
    return file.getvalue()


class _Reduced:
    """An object whose ``__reduce_ex__`` gives ``result`` (a reducer's, malformed), run natively by C with
    none of the program's code: C's checks of it name no class of the object (its words, on 3.11 and 3.13:
    /tmp/cpy52-probes/cmsg.py)."""

    __slots__ = ("result",)

    def __init__(self, result: object) -> None:
        self.result = result

    def __reduce_ex__(self, protocol: object) -> object:
        return self.result


class _Named:
    """An object whose ``__reduce_ex__`` gives the global ``name`` a reducer gave, whose ``__module__`` is
    the module the Python pickler looked it up in and whose ``repr`` is the object's as its refusal showed
    it: C, asked about it, looks the name up as for the object and words its refusal as for the object
    (Note [C's words for what cannot be pickled])."""

    def __init__(self, name: str, module: str, shown: str) -> None:
        self.__dict__.update(name=name, shown=shown, __module__=module)

    def __reduce_ex__(self, protocol: object) -> object:
        return self.__dict__["name"]

    def __repr__(self) -> str:
        return self.__dict__["shown"]


def _raised_in(error: BaseException) -> object:
    """The frame of the innermost entry of ``error``'s traceback, None where it has none."""
    entry = error.__traceback__
    while entry is not None and entry.tb_next is not None:
        entry = entry.tb_next
    return None if entry is None else entry.tb_frame


# Note [C's words for what cannot be pickled]
# The Python pickler refuses what C's refuses, in other words: a local class or function is C's
# AttributeError "Can't pickle local object 'f.<locals>.C'" (3.13: "Can't get local object ...") where
# the Python pickler raises PicklingError "Can't pickle <class ...>: it's not found as ...", and C's
# "attribute lookup X on m failed", "import of module 'm' failed", "__reduce__ must return a string or
# tuple" and the like have Python twins worded otherwise. Where the Python pickler raises PicklingError,
# C's pickler is asked for its error on the same object (``dumps`` for both entry points: it writes no
# file) and that is raised; its words are the version's own. Checked natively on 15 refusals (local
# classes, instances and functions, lambdas, renamed and unimportable classes, bad ``__reduce__`` results,
# locks, generators, modules, frames) times protocols 0, 2, 4, 5: the same type and text as C's on 3.11 and
# 3.13 (/tmp/cpy50-probes/pkerr2.py). C is asked about the one object the Python pickler refused where that
# is ``save_global``'s class or function (saved by C running none of the program's code), or about a
# stand-in whose ``__reduce_ex__`` gives the malformed result a reducer gave (not a tuple, a tuple of
# another length, a first item not callable, a second not a tuple), so the graph's ``__reduce__``/
# ``__reduce_ex__``/``__getstate__`` run once, as eagerly (they ran twice: the interpreted pickler's, then
# C's natively; /tmp/cpy52-probes/p2b.py, p2c.py); a PicklingError the program's own code raised (a
# reducer's) is the program's, raised as it is, as C lets it through. A ``__newobj__`` argument list of
# another class is refused in C's words by the Python pickler itself (the same ``__class__`` compared with
# a class), raised as it is. A reducer's global name not found: C's words show the object's ``repr``
# ("Can't pickle <R object at 0x...>: attribute lookup nope on __main__ failed"), so C is asked about a
# stand-in whose ``repr`` is the text the Python pickler's refusal showed (``repr`` runs once, as eagerly),
# whose ``__module__`` is the module it looked in, and whose ``__reduce_ex__`` gives the same name; C
# looks it up there as it would for the object (/tmp/cpy53-probes/p3_words.py: the module and name forms
# C words otherwise, on 3.11 and 3.13). A name found that is another object is refused in C's words by the
# Python pickler itself, raised as it is. A local name, ``'f.<locals>.g'``, C refuses before it takes the
# object's ``repr``: Note [A local name refused first].
def _c_refusal(run: object, arguments: dict) -> BaseException | None:
    """The exception C's ``pickle.dumps`` raises for the object and options of ``dumps``'s ``arguments``,
    None where it pickles them (Note [C's words for what cannot be pickled])."""
    try:
        opaque(run, _C_DUMPS, (), arguments)
    except Exception as error:  # noqa: BLE001 - C's refusal, whatever its type, is what the program sees
        return error
    return None


def _arguments(python: object, args: tuple, kwargs: dict) -> dict | None:
    """``args`` and ``kwargs`` bound to the pure-Python entry point's parameters, None where they do not
    bind."""
    try:
        return dict(_SIGNATURES[python].bind(*args, **kwargs).arguments)
    except TypeError:
        return None


def built_in_values(obj: object) -> bool:
    """Whether ``obj`` and everything the containers of C among it hold (lists, tuples, dicts, sets,
    deques, OrderedDicts, a ``SimpleNamespace``'s dict) are instances of classes written in C (none of a
    class statement's), within ``_WALKED`` objects."""
    stack, seen = [obj], set()
    while stack:
        value = stack.pop()
        t = type(value)
        if t.__flags__ & _HEAPTYPE or t in STAND_IN_HOLDERS:  # (stand_in_reductions.py)
            return False
        items = _items(value)
        if items is not None and id(value) not in seen:
            seen.add(id(value))
            if len(seen) + len(stack) > _WALKED:
                return False
            stack.extend(items)
    return True


def _items(value: object) -> list | None:
    """What a built-in container holds (a dict's keys and values), None for anything else."""
    t = type(value)  # (not isinstance: a weakref proxy to a dict says its __class__ is dict)
    if issubclass(t, dict):
        return [*dict.keys(value), *dict.values(value)]
    if issubclass(t, (list, tuple, set, frozenset, collections.deque)):
        return list(value)
    if issubclass(t, types.SimpleNamespace):
        return _items(object.__getattribute__(value, "__dict__"))
    return None
