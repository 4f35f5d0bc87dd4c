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
from jitcore.langctx.jagged_text import jagged_text
from jitcore.langctx.masked_text import masked_lookasides, masked_text
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


def _proxy_repr(self: TensorProxy, *, tensor_contents: Any = None) -> Any:
    if tensor_contents is not None:  # Note [Torch's text around a subclass's own contents]
        return _text_around(self, tensor_contents)
    own = _own_repr(self.python_type)
    if own is not None and id(self) not in _IN_OWN_REPR:  # Note [A plain subclass's own repr]
        return _interpreted_repr(self, own)
    refuse_text("repr")
    return ""  # not reached


def _interpreted_repr(value: TensorProxy, method: FunctionType) -> Any:
    """``method(value)``, the ``__repr__`` of ``value``'s class, interpreted; a ``super().__repr__()``
    inside it reaching the proxy's own again refuses (``_IN_OWN_REPR``)."""
    run = current_run()
    _IN_OWN_REPR.add(id(value))
    try:
        return run.call(method, value) if run is not None else method(value)
    finally:
        _IN_OWN_REPR.discard(id(value))


_IN_OWN_REPR: set[int] = set()  # the proxies whose class's own __repr__ is running


# Note [Torch's text around a subclass's own contents]
# A wrapper subclass's ``__repr__`` is often ``super().__repr__(tensor_contents=f"{self.elem}")`` (torch's
# LoggingTensor, subclass_zoo's classes): ``Tensor.__repr__`` writes the class's name, the contents it is
# given and suffixes from metadata (``dtype=``, ``device=``, ``requires_grad=True``), reading no value.
# The proxy's ``__repr__`` took no ``tensor_contents``: ``repr(x)`` raised TypeError where eager gave its
# text, and ``print(x)`` raised it too. The text around the contents is now torch's own, made from a
# stand-in of the class with the proxy's metadata (``_make_wrapper_subclass``: no storage, none of the
# class's attributes; torch's text code runs no dispatch on it) around a marker, and the contents are put
# in the marker's place: a str, or a TextProxy whose characters each call makes (an inner tensor's
# snapshot). Refused (JC-T001) where the text would depend on what the pass does not know: a value that
# requires grad (``grad_fn=<...>`` names a node of eager's graph), symbolic sizes, a layout other than
# strided, and suffixes after contents made per call (torch breaks the line by the contents' length).
_CONTENTS = "\x00jitcore-tensor-contents\x00"


def _text_around(value: TensorProxy, contents: Any) -> Any:
    """``Tensor.__repr__(value, tensor_contents=contents)`` of a traced tensor (the Note above)."""
    from jitcore.proxies.text import TextProxy  # (a text proxy is made only where such a repr runs)

    if type(contents) is not str and not isinstance(contents, TextProxy):
        refuse_text("repr")
    if value.requires_grad or value.layout is not torch.strided \
            or not all(type(n) is int for n in (*value.shape, *value.stride())):
        refuse_text("repr")
    stand_in = torch.Tensor._make_wrapper_subclass(
        value.python_type, tuple(value.shape), strides=tuple(value.stride()), dtype=value.dtype,
        device=value.device)
    with torch._C.DisableTorchFunctionSubclass():
        text = torch._tensor_str._str(stand_in, tensor_contents=_CONTENTS)
    before, after = text.split(_CONTENTS)
    if type(contents) is str:
        return before + contents + after
    if after != ")":
        refuse_text("repr")
    return TextProxy((before, *contents.parts, after))


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
    if (masked := masked_text(value)) is not None:  # Note [A MaskedTensor's text] (masked_text.py)
        return masked
    if (jagged := jagged_text(value)) is not None:  # Note [A nested jagged tensor's text] (jagged_text.py)
        return jagged
    cls = value.python_type
    wrapper = _wrapper_repr(value)
    if wrapper is not None:  # Note [A wrapper's text made of its inner tensors' text]
        return _interpreted_repr(value, wrapper)
    if _own_repr(cls) is None or any("__str__" in vars(klass) for klass in _own_classes(cls)):
        return None
    return _proxy_repr(value)


# Note [A wrapper's text made of its inner tensors' text]
# ``print(x)`` or ``f"{x}"`` of a TwoTensor shows ``TwoTensor(tensor([...]), tensor([...]))``: its class's
# ``__repr__`` formats ``repr(self.a)`` and ``repr(self.b)``. Such a class of torch's (TwoTensor,
# LoggingTensor, DTensor) was left to the tensor-text refusal (Note [A plain subclass's own repr] keeps
# torch's classes out), so the call ran eagerly from its first call, its dispatch on every call, while
# ``repr(x)`` already interpreted the same method. A wrapper subclass's (one with ``__torch_dispatch__``)
# Python ``__repr__``, torch's included, is now interpreted for ``print`` and ``str``/``format`` too: each
# inner tensor's text is a snapshot the computation takes (a TextProxy field), so every call prints its
# own values, in program order among the other prints (jit/printing.py). What such a ``__repr__`` needs
# while tracing (a nested jagged tensor's offsets, MaskedTensor's ``item()``) is read as any read of the
# program's, or refused as before. A class with its own ``__str__`` keeps the refusal.
_TEXT_READS_VALUES = frozenset((  # torch's classes whose __repr__ reads what a pass does not have
    "torch.masked.maskedtensor.core",  # MaskedTensor: item() of each value (its text: masked_text.py)
    "torch.nested._internal.nested_tensor",  # NestedTensor: its ragged size's name is the pass's
))


def _wrapper_repr(value: Any) -> FunctionType | None:
    """The Python ``__repr__`` of the wrapper subclass ``value`` stands for (its class or a base before
    ``torch.Tensor``, torch's own classes included); None for a plain tensor, a subclass without
    ``__torch_dispatch__``, a class with a ``__str__`` of its own, or a ``__repr__`` written in C."""
    if not isinstance(value, SubclassTensorProxy) or value.python_type.__module__ in _TEXT_READS_VALUES:
        return None
    for klass in value.python_type.__mro__:
        if klass is torch.Tensor or "__str__" in vars(klass):
            return None
        method = vars(klass).get("__repr__")
        if method is not None:
            return method if type(method) is FunctionType else None
    return None


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
    return {TensorProxy.__repr__: _proxy_repr, SubclassTensorProxy.__repr__: _proxy_repr,
            **masked_lookasides()}  # Note [A MaskedTensor's text] (masked_text.py)
