"""The text of a traced tensor: ``repr``, ``str``, ``format`` and ``print`` of a tensor show its values.

While tracing, a tensor is a proxy without values, and its own text (``TensorProxy(t0, "cpu f32[6]")``)
is jitcore's. A program that turns a tensor into text (returns ``repr(x)``, prints ``x`` on every step,
formats it into a message) saw that text: a wrong answer, and a ``print`` that ran only while tracing.
Such a call now stops tracing with UnsupportedOperationError (JC-T001): without ``fullgraph`` the call
runs eagerly (Note [Eager entries], jit/api.py), as torch.compile breaks its graph at ``print``.

Invariant: the check is made where the program calls a text builtin (``Pass._opaque_call``), where the
interpreter makes such a C call for the program's instruction (a container's text: Note [A container's
text]), where
the interpreter calls a proxy's ``__repr__`` itself (an f-string's ``!r``, a Python ``__repr__`` calling
``repr(self.weight)``), and where C code the program called reaches ``Tensor.__format__`` or
``Tensor.__repr__`` through ``__torch_function__`` (``"{}".format(x)``: langctx/torch.py), which must
never make them symbols (a symbol of ``Tensor.__format__`` ran on fake tensors from then on, and
``f"{loss:.2f}"`` of a 0-dim tensor raised in every later trace). ``"%s" % x`` is ``str.__mod__``, a text
function the program calls (its C code calls ``str`` on the proxy). jitcore's own messages call them
natively, outside ``__torch_function__``, and keep the proxy's text. A ``print`` of anything else is
replayed on every call (jit/printing.py), and the text of a plain tensor that requires no grad, printed
(``print(x)``) or made by an f-string field, ``str(x)`` or ``repr(x)``, is made on each call from a
snapshot the computation takes (``shown_snapshot``; a TextProxy field, jitcore/proxies/text.py): it
refuses only where the program needs the characters while tracing.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from types import FunctionType
from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.ir import tree_has
from jitcore.proxies import TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = [
    "TENSOR_TEXT_METHODS", "own_text", "own_text_of_call", "refuse_text", "refuse_text_of_tensors",
    "shown_snapshot", "text_lookasides",
]

_TEXT_FUNCTIONS = frozenset(map(id, (repr, str, ascii, format, print, object.__format__, object.__str__,
                                     object.__repr__, str.__mod__)))  # by identity: some are unhashable
TENSOR_TEXT_METHODS = (torch.Tensor.__format__, torch.Tensor.__repr__)
_PERCENT = frozenset(map(id, (operator.mod, operator.imod)))


def refuse_text_of_tensors(fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    """Raise JC-T001 when ``fn`` turns a traced tensor among its arguments into text (``str % values``
    included, as the interpreter calls ``operator.mod`` for a tuple or dict of values)."""
    text = id(fn) in _TEXT_FUNCTIONS or (id(fn) in _PERCENT and bool(args) and type(args[0]) is str)
    if text and tree_has((args, kwargs), TensorProxy):
        refuse_text(getattr(fn, "__qualname__", str(fn)))


# Note [A container's text]
# ``repr(x)`` or ``f"{x}"`` of a traced tensor is seen where the program makes it. A container's text is
# made by C: ``f"{[x]}"``, ``f"{d!r}"``, a dataclass's generated ``__repr__`` (``f"...{self.losses!r}"``)
# and a namedtuple's (``"(a=%r, b=%r)" % self``) are C calls the interpreter makes for the program's own
# instruction (``Hooks.native_call``), and C called each traced tensor's native ``__repr__``: the text
# said ``TensorProxy(t0, ...)`` on every call, a wrong answer (``x * len(repr(state))``). The interpreter's
# native calls are checked as the program's calls of text functions are; ``operator.mod`` of a str
# template is ``str % values``.


def refuse_text(name: str) -> None:
    """Raise JC-T001: ``name`` would turn a traced tensor into text."""
    raise UnsupportedOperationError(
        f"{name}() of a traced tensor shows its values, which are not known while tracing",
        hints=("return the tensor and turn it into text outside the jitted function",),
    )


def _traced_tensor(value: Any) -> bool:
    """Whether ``value`` is a traced tensor, asked of its type: ``isinstance`` would read ``__class__``
    through the ``__getattribute__`` of any object of the program's it is asked about."""
    return issubclass(type(value), TensorProxy)


def shown_snapshot(value: Any) -> TensorProxy | None:
    """A plain traced tensor whose text each call can make from its own tensor: its snapshot, cloned into
    the computation where the text is made (an in-place op after it must not change the text); None
    for any other value (Note [A tensor the program prints], jit/printing.py)."""
    if not _traced_tensor(value) or value.python_type is not torch.Tensor or value.requires_grad:
        return None
    return current_run().call(torch.clone, value)


def _proxy_repr(self: TensorProxy) -> str:
    own = _own_repr(self.python_type)
    if own is not None and id(self) not in _IN_OWN_REPR:  # Note [A plain subclass's own repr]
        run = current_run()
        _IN_OWN_REPR.add(id(self))
        try:
            return run.call(own, self) if run is not None else own(self)
        finally:
            _IN_OWN_REPR.discard(id(self))
    refuse_text("repr")
    return ""  # not reached


_IN_OWN_REPR: set[int] = set()  # the proxies whose class's own __repr__ is running


# Note [A plain subclass's own repr]
# The proxy of a subclass without ``__torch_dispatch__`` (proxies/typed.py) keeps jitcore's ``__repr__``
# (jitcore's messages show it), so ``repr(x)`` of a subclass whose class defines ``__repr__`` in
# Python (``Units(3 m)``, a shape and dtype) reached the proxy's and ran the call eagerly; a wrapper
# subclass's own ``__repr__`` was already interpreted. The class's method is interpreted instead, as
# eagerly. One that shows the values reads them (``tolist()``) or runs eagerly: its
# ``super().__repr__()`` reaches the proxy's own again, which then refuses (torch's text of the values).
# torch's classes (``nn.Parameter``'s ``__repr__`` prints the data) are not the program's.
def _own_repr(cls: type) -> FunctionType | None:
    """The ``__repr__`` a program's tensor subclass ``cls`` defines in Python, else None."""
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == "torch":
            return None
        method = vars(klass).get("__repr__")
        if type(method) is FunctionType:
            return method
    return None


def own_text(value: Any) -> Any:
    """``str(value)`` of a traced tensor whose class writes its text with its own ``__repr__`` in Python
    (and no ``__str__`` of its own), that method interpreted as eagerly; None for any other value (Note
    [A subclass's own text in print and str])."""
    if not _traced_tensor(value):
        return None
    cls = value.python_type
    if _own_repr(cls) is None or any("__str__" in vars(klass) for klass in _own_classes(cls)):
        return None
    return _proxy_repr(value)


def own_text_of_call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``own_text`` of the tensor that ``str(w)``, ``format(w)``, ``format(w, "")`` or
    ``object.__format__(w, "")`` (``f"{w}"``) turns into text; None for any other call."""
    if kwargs or not args or not _traced_tensor(args[0]):
        return None
    if (fn is str and len(args) == 1) or (fn is format and (len(args) == 1 or args[1:] == ("",))) \
            or (fn is object.__format__ and args[1:] == ("",)):
        return own_text(args[0])
    return None


def _own_classes(cls: type) -> list[type]:
    """The classes of ``cls``'s MRO before torch's."""
    classes = []
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] == "torch":
            break
        classes.append(klass)
    return classes


# Note [A subclass's own text in print and str]
# ``print(w)`` and ``str(w)`` of a tensor subclass whose class writes ``__repr__`` in Python (a quantized
# weight's ``Int8W(shape=(6, 4), dtype=torch.float32)``) show that text eagerly: torch's ``Tensor`` has no
# ``__str__`` of its own, so ``object.__str__`` calls the class's ``__repr__``. ``repr(w)`` already ran it
# interpreted (Note [A plain subclass's own repr]); ``print(w)`` and ``str(w)`` refused as a tensor's text
# (JC-T001), so the call ran eagerly from its first call, the class's dispatch with it on every call. Its
# text is now its ``__repr__``'s, interpreted: a text built from metadata is a constant of the entry (the
# metadata is guarded), one built from values reads them (checked per call, as a read is).


def text_lookasides() -> dict[Any, Callable[..., Any]]:
    """What the interpreter calls instead of a proxy's own ``__repr__`` when the program reaches it (a
    subclass's own ``__repr__`` is interpreted instead: interpreter/protocols.py ``_stood_for_method``)."""
    return {TensorProxy.__repr__: _proxy_repr, SubclassTensorProxy.__repr__: _proxy_repr}
