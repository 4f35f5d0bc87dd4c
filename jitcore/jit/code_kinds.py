"""What kind of code a tracing pass reaches: torch's, jitcore's, the standard library's, or the user's.

Pure predicates on functions, code objects, file names, modules and attributes, used by the pass's
hooks (jitcore/jit/interpretation.py) to decide what runs natively, what state is taken as constant and
what is bound through provenance:
- ``is_library_file`` / ``is_library_module``: code whose module state is constant (torch, jitcore,
  the standard library); ``TORCH_DIR``, ``STDLIB_DIR``, ``TORCH_MODULES_DIR`` the directories behind it;
- ``is_symbolic_shapes_code``: torch's SymInt methods and sympy, run natively;
- ``is_global_hook_registry``: torch's module-wide hook dicts, the one torch state that changes;
- ``is_torch_builtin``, ``is_unlisted_operation``, ``compiled_original``: kinds of callables;
- ``is_stored_attribute``: whether ``obj.name`` is stored rather than computed;
- ``class_module``: a class's module name, "" where its ``__module__`` is no name.
Invariant: each answer depends only on the arguments and the installed files, never on the pass.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from typing import Any

import sympy
import torch

from jitcore.diagnostics import JITCORE_DIR

__all__ = [
    "STDLIB_DIR", "TORCH_DIR", "TORCH_MODULES_DIR", "class_module", "compiled_original",
    "function_attributes", "is_global_hook_registry",
    "is_library_file", "is_library_module", "is_programs_class", "is_stdlib_container_code",
    "is_stored_attribute", "is_symbolic_shapes_code", "is_torch_builtin", "is_unlisted_operation",
    "written_holder", "written_namespace",
]

TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
STDLIB_DIR = sysconfig.get_paths()["stdlib"] + os.sep
_LIBRARY_DIRS = (TORCH_DIR, JITCORE_DIR, STDLIB_DIR)
TORCH_MODULES_DIR = os.path.join(TORCH_DIR, "nn", "modules") + os.sep


def is_symbolic_shapes_code(fn: Any, code: types.CodeType) -> bool:
    """torch.SymInt's methods and the sympy machinery behind them: they run natively, as in eager,
    so that what they assume about sizes is recorded by the ShapeEnv and nothing else."""
    filename = code.co_filename
    if filename.startswith(_SYMBOLIC_DIRS):
        return True
    return filename == _TORCH_INIT and getattr(fn, "__qualname__", "").startswith(
        ("SymInt.", "SymFloat.", "SymBool.")
    )


_TORCH_INIT = os.path.join(TORCH_DIR, "__init__.py")
_SYMBOLIC_DIRS = (
    os.path.join(TORCH_DIR, "fx", "experimental") + os.sep,
    os.path.join(TORCH_DIR, "utils", "_sympy") + os.sep,
    os.path.dirname(sympy.__file__) + os.sep,
)


def is_global_hook_registry(globals_: dict, name: str) -> bool:
    """torch's module-wide hook dicts (``register_module_forward_hook`` & co.), read by every
    ``Module.__call__``: unlike the rest of torch they change at run time, so they are guarded."""
    return name.startswith("_global_") and globals_.get("__name__") == "torch.nn.modules.module"


def is_torch_builtin(fn: Any) -> bool:
    return isinstance(fn, types.BuiltinFunctionType) and (getattr(fn, "__module__", None) or "").startswith(
        "torch"
    )


def compiled_original(fn: Any) -> Any:
    """The function a ``torch.compile`` wrapper compiles (torchao's 8-bit optimizers compile their
    per-parameter step): interpreted instead, so its ops join the trace (dynamo cannot trace
    jitcore's values), or None. Only a Python function is asked (a user's callable object is not: its
    ``__getattr__`` would run where eagerly nothing reads it)."""
    if type(fn) is not types.FunctionType:
        return None
    original = getattr(fn, "_torchdynamo_orig_callable", None)
    return original if callable(original) else None


def is_unlisted_operation(fn: Any) -> bool:
    """A torch function that is an aten operator of the same name but that torch's overrides do not
    list, so no symbol table has it (the ``torch._foreach_*`` family)."""
    name = getattr(fn, "__name__", "")
    return getattr(torch, name, None) is fn and hasattr(torch.ops.aten, name)


# Note [A caller's object in the standard library's code]
# The standard library's own reads are not program state (logging's caches, a module's registries: its
# module state is constant). The containers it defines in Python are: ``UserDict``, ``UserList``,
# ``WeakSet``, ``WeakValueDictionary`` keep their items in ``self.data``, read and written only by their
# own methods (and ``_collections_abc``'s mixins). Those reads went unbound, so ``len(d)`` was a constant
# of the trace (unguarded) and ``d[k] = v``/``s.add(x)`` wrote into a container never snapshotted: a
# cached call returned the first call's length and replayed no write (a wrong answer). In these modules'
# code, reads of an instance of the caller's or of state, and of the containers they lead to, are bound
# as the program's are (jit/state_reads.py ``_load_attr``/``_load_subscr``). Only there: other library
# objects wrap what a snapshot cannot put back (an asyncio loop's closed sockets: test_asyncgen's
# ``loop.close()`` replayed on a restored loop raised "Invalid file descriptor: -1").
# ``copy.py`` is read alike: ``copy.copy(obj)``/``copy.deepcopy(obj)`` of a caller's object reads its
# instance dict and slots there (Note [A reduction that runs Python], jitcore/interpreter/reductions.py);
# unbound, a cached call copied the first call's values (``copy.deepcopy(cfg).scale`` after the caller
# changed ``cfg.scale``: a wrong answer). And in any standard-library code, an instance of a class of the
# program's (``is_programs_class``: defined outside torch, jitcore and the standard library) is read as
# the program's: ``dataclasses.asdict(cfg)``, ``astuple``, ``replace(cfg, ...)`` read the caller's config
# in dataclasses.py, and a cached call returned the first call's fields after the caller changed one.
_STDLIB_CONTAINER_FILES = frozenset(
    os.path.join(STDLIB_DIR, name)
    for name in ("collections/__init__.py", "_collections_abc.py", "_weakrefset.py", "weakref.py", "copy.py")
)


def is_programs_class(kind: type) -> bool:
    """Whether ``kind`` is a class of the program's: its module is none of the libraries' (torch's,
    jitcore's, the standard library's, a builtin module's)."""
    module = sys.modules.get(getattr(kind, "__module__", None) or "")
    return module is not None and not is_library_module(module)


def is_stdlib_container_code(filename: str) -> bool:
    """Whether ``filename`` defines the standard library's containers written in Python (Note [A caller's
    object in the standard library's code])."""
    return filename in _STDLIB_CONTAINER_FILES


def is_library_file(filename: str) -> bool:
    """Code whose module state is taken as constant: torch, jitcore, the standard library."""
    known = _LIBRARY_FILES.get(filename)
    if known is None:
        if len(_LIBRARY_FILES) >= _LIBRARY_FILES_MAX:  # code compiled under fresh names (prologues, exec)
            _LIBRARY_FILES.clear()
        known = filename.startswith(_LIBRARY_DIRS) or filename.startswith("<frozen ")
        _LIBRARY_FILES[filename] = known
    return known


# Note [Library files remembered]: a tracing pass asks ``is_library_file`` for nearly every global it
# loads and every call C code makes back into Python (tens of thousands of times in the first call of a
# subclass program, whose ``__torch_dispatch__`` runs torch's pytree code per op). The answer depends on
# the file name alone (the directories are fixed at import), so it is remembered per name: one dict
# lookup instead of two prefix tests over four directories. The table is bounded: names made fresh per
# compile (jitcore's own prologues, ``exec`` of generated code) would otherwise grow it without end.
_LIBRARY_FILES: dict[str, bool] = {}
_LIBRARY_FILES_MAX = 4096


# Note [A module's own namespace]
# A module subclass may define ``__dict__`` itself (CPython's test_descr ``test_dir``: a property returning
# a str): ``ModuleType.__getattribute__(module, "__dict__")`` finds that data descriptor first, so reading
# the name raised AttributeError inside jitcore. The module's namespace is the member slot of ``module``.
_MODULE_DICT = vars(types.ModuleType)["__dict__"]


def _namespace(module: types.ModuleType) -> dict:
    """The module's own namespace (Note [A module's own namespace])."""
    return _MODULE_DICT.__get__(module)


# Note [A class's __module__ that is no name]
# ``kind.__module__`` is whatever the class body bound to ``__module__``: a class answering its instances'
# module with a property (``@property def __module__(self)``) has the property there, and the jit's
# ``(kind.__module__ or "").startswith("jitcore")`` raised AttributeError ('property' object has no
# attribute 'startswith') for every jitted call taking, copying or returning such an instance (JC-I002
# where eagerly the program ran: /tmp/cpy54-probes/p3_module_property.py, found pickling one). The name is
# read with ``type``'s own descriptor (no metaclass's code runs) and is "" where it is no ``str``.
_TYPE_MODULE = type.__dict__["__module__"]


def class_module(kind: type) -> str:
    """``kind``'s module name, "" where its ``__module__`` is not a ``str`` (Note [A class's __module__ that
    is no name])."""
    try:
        module = _TYPE_MODULE.__get__(kind)
    except AttributeError:
        return ""
    return module if issubclass(type(module), str) else ""


def module_name(module: types.ModuleType) -> str | None:
    """``module.__name__``, read from the module's namespace: a subclass's ``__getattribute__`` (which
    may log) is the program's, and it never reads the name itself."""
    name = _namespace(module).get("__name__")
    return name if type(name) is str else None


def is_imported_module(module: types.ModuleType) -> bool:
    """Whether ``module`` came from an import (``sys.modules`` holds it, or it has an import spec),
    not made by ``types.ModuleType(name)``."""
    namespace = _namespace(module)
    return sys.modules.get(module_name(module)) is module or namespace.get("__spec__") is not None


# Note [A module's attributes written]
# ``cmod.count += 1`` or ``cmod.last = x * 3`` on a module of the caller's (imported from its files, or a
# ``types.ModuleType`` reached through a global or an argument) stores
# into the module's namespace. Snapshots skipped modules (jit/effects.py ``StateSnapshots.take``), so such a
# store was no effect: it stayed in the module after the pass, the pass's value (a NumberProxy, a
# TensorProxy left in the caller's module), and no cached call made it again (``cmod.value = 7`` held 0
# after a cached call; a counter's second entry wrote its NumberProxy there and the third call raised
# UnboundLocalError). The namespace of such a module is the state snapshotted, at ``path.__dict__``: its
# changes are item effects replayed on the namespace each call's path reaches (a counter's arithmetic on
# the value found, a tensor an output of the computation), and the pass's writes are undone with the rest.
# Stores and reads through the module name it (``StateSnapshots`` translates). A library's module (torch's,
# the standard library's, an installed package's) is constant (docs/user-guide.md); a module the program
# made itself is reached through no path (never snapshotted): its own object, as before.
def written_namespace(module: types.ModuleType) -> dict | None:
    """The namespace whose changes are a reached module's effects (Note [A module's attributes written]);
    None for a library's module."""
    if is_library_module(module):
        return None
    namespace = _namespace(module)
    return namespace if type(namespace) is dict else None


# Note [A function's attributes written]
# A memo written in Python keeps its table and counts on the wrapper function (``wrapper.seen[n] = fn(n);
# wrapper.misses += 1``). Snapshots skipped functions, so the pass's stores stayed in the function (made
# once per pass: a call traced twice counted a miss twice; eager misses 1, 2, 3, jit 2, 4, 5, and the
# answer read the pass's count: /tmp/eff54-probes/memo_attr.py), and no cached call made them again. The
# ``__dict__`` of a function of the program's (not a library's) is the state snapshotted, at
# ``path.__dict__``, as a module's namespace is: its changes are item effects replayed each call, the
# pass's writes undone with the rest.
def function_attributes(fn: types.FunctionType) -> dict | None:
    """The attributes whose changes are a reached function's effects (Note [A function's attributes
    written]); None for a library's function."""
    if is_library_file(fn.__code__.co_filename):
        return None
    attributes = fn.__dict__
    return attributes if type(attributes) is dict else None


def written_holder(obj: Any) -> Any:
    """What holds ``obj``'s attributes as state: a module's namespace (Note [A module's attributes
    written]), a function's ``__dict__`` (Note [A function's attributes written]), else ``obj`` itself."""
    if issubclass(type(obj), types.ModuleType):
        return written_namespace(obj) or obj
    if type(obj) is types.FunctionType:
        return function_attributes(obj) or obj
    return obj


def is_library_module(module: types.ModuleType) -> bool:
    name = module_name(module)
    if name is None:
        return False
    if name == "torch" or name.startswith(("torch.", "jitcore")) or name in sys.builtin_module_names:
        return True
    filename = _namespace(module).get("__file__")
    return type(filename) is str and is_library_file(filename)


def is_stored_attribute(obj: Any, name: str) -> bool:
    """Whether ``obj.name`` is a stored value (instance dict, module, plain class attribute)."""
    if isinstance(obj, types.ModuleType):
        return True
    if isinstance(obj, type):
        for klass in obj.__mro__:
            if name in vars(klass):
                attr = vars(klass)[name]
                return not (hasattr(attr, "__get__") or hasattr(attr, "__set__"))
        return False
    instance_dict = getattr(obj, "__dict__", None)
    if isinstance(instance_dict, dict) and name in instance_dict:
        return not any(hasattr(vars(k).get(name), "__set__") for k in type(obj).__mro__ if name in vars(k))
    for klass in type(obj).__mro__:
        if name in vars(klass):
            attr = vars(klass)[name]
            if isinstance(attr, types.MemberDescriptorType):
                return True  # a __slots__ field: stored on the instance
            return not (hasattr(attr, "__get__") or hasattr(attr, "__set__"))
    return False
