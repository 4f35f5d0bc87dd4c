"""Standard-library modules the interpreter calls while a program runs, as private copies.

Note [Builtins snapshot] (jitcore/interpreter/__init__.py) keeps a program's replacement of a builtin
(``builtins.len = lambda x: 7``) away from the interpreter's own modules. Pure-Python library modules
the interpreter calls at run time (``dis`` decodes each code object the first time it is called) look
builtins up in the live ``builtins`` module, so a swapped ``len`` broke decoding (CPython's
test_dynamic). Invariant: a module returned here is a separate instance of the library module, executed
with the snapshot as its ``__builtins__``; it is used for its functions only, never to compare classes
with the public module's.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import importlib.util
from types import ModuleType

__all__ = ["private_copy"]


def private_copy(name: str) -> ModuleType:
    """A fresh instance of the library module ``name`` whose code resolves builtins in the snapshot."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__builtins__"] = __builtins__
    spec.loader.exec_module(module)
    return module
