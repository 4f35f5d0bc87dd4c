"""What ``locals()`` and ``frame.f_locals`` give for an interpreted frame, as CPython 3.11 and 3.13 give them.

Invariants:
- before 3.13, a function frame has one locals dict, refreshed from the fast locals at each ``locals()``
  (Note [One locals dict per frame]);
- on 3.13, ``locals()`` is a new snapshot at each call and ``frame.f_locals`` a ``FrameLocalsProxy`` writing
  through to the fast locals, names that are no local's kept on the frame (PEP 667; Note [PEP 667's
  extra locals]);
- a class body's or module's frame answers its namespace dict itself.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import sys
from _thread import get_ident
from collections.abc import Iterator, Mapping
from types import CellType, FrameType

from jitcore.interpreter.frame import NULL, Frame

__all__ = ["FrameLocalsProxy", "f_locals", "frame_locals"]

_MISSING = object()
_IN_REPR: set[tuple[int, int]] = set()  # (frame id, thread id) of the proxies whose repr is being made


def frame_locals(frame: Frame) -> dict:
    """What ``locals()`` returns in ``frame`` (Note [One locals dict per frame])."""
    if frame.locals is not None:
        return frame.locals
    code = frame.code
    if frame.index == 0 and code.co_freevars and frame.function is not None:
        # a generator not started yet has not run its COPY_FREE_VARS, where CPython's has (creating it ran
        # up to RETURN_GENERATOR): its free variables are copied here, as CPython copies them for a frame
        # that has not run it; the copy at the first resume puts the same cells there again
        closure = frame.function.__closure__
        frame.fast[len(frame.fast) - len(closure):] = closure
    cells = set(code.co_cellvars) | set(code.co_freevars)
    out = getattr(frame, "f_locals", None) if _ONE_DICT_PER_FRAME else None
    if out is None:
        out = {}
        if _ONE_DICT_PER_FRAME:
            frame.f_locals = out
    for i, value in enumerate(frame.fast):
        name = code._varname_from_oparg(i)
        if name in cells and isinstance(value, CellType):
            try:
                out[name] = value.cell_contents
                continue
            except ValueError:
                pass
        elif value is not NULL:
            out[name] = value
            continue
        out.pop(name, None)
    extra = getattr(frame, "extra_locals", None)
    if extra:
        out.update(extra)
    return out


# Note [One locals dict per frame]
# Before 3.13, a function frame has one locals dict (CPython's ``frame->f_locals``): ``locals()`` and
# ``frame.f_locals`` return it, refreshed from the fast locals (an unbound one's key removed), and keys that
# are no local's stay in it: ``exec("b = 6")`` writes there, so a later ``locals()["b"]`` is 6, and
# ``locals() is locals()``. 3.13 (PEP 667) returns a new snapshot at each call.
_ONE_DICT_PER_FRAME = sys.version_info < (3, 13)


def f_locals(frame: Frame) -> object:
    """``frame.f_locals`` of ``frame``'s frame object."""
    if frame.locals is None and not _ONE_DICT_PER_FRAME:
        proxy = object.__new__(FrameLocalsProxy)
        proxy._frame = frame
        return proxy
    return frame_locals(frame)


# Note [PEP 667's extra locals]
# On 3.13 ``frame.f_locals[name] = value`` for a name that is no local of the frame's code keeps it in a dict
# of the frame's own (CPython's ``f_extra_locals``; here the Frame's ``extra_locals`` slot, unset until
# then), which the proxy and later ``locals()`` snapshots show after the locals; such a name can be deleted,
# a local cannot ("cannot remove local variables from FrameLocalsProxy").
_REMOVE_LOCAL = "cannot remove local variables from FrameLocalsProxy"


class FrameLocalsProxy:
    """``frame.f_locals`` of an interpreted function frame on 3.13: PEP 667's write-through view of its fast
    locals, with 3.13's ``FrameLocalsProxy`` methods (a Mapping, not a MutableMapping; ``|`` makes a dict)."""

    __slots__ = ("_frame",)
    __hash__ = None  # type: ignore[assignment]

    def __new__(cls, *args: object, **kwargs: object) -> object:
        """``FrameLocalsProxy(frame)`` called by the program (``type(frame.f_locals)(frame)``), as CPython's:
        one positional frame; a native frame gets CPython's own proxy."""
        from jitcore.interpreter.lookasides import FrameProxy

        if len(args) != 1:
            raise TypeError(f"FrameLocalsProxy expected 1 argument, got {len(args)}")
        (frame,) = args
        if type(frame) is not FrameProxy and not isinstance(frame, FrameType):
            raise TypeError(f"expect frame, not {type(frame).__name__}")
        if kwargs:
            raise TypeError("FrameLocalsProxy takes no keyword arguments")
        if type(frame) is not FrameProxy:
            return type(_native_function_locals())(frame)  # CPython's
        proxy = object.__new__(cls)
        proxy._frame = frame._frame  # noqa: SLF001 - the interpreted frame it shows
        return proxy

    def _slot(self, name: object) -> int:
        """The fast-locals index of local ``name`` (bound or not), or -1."""
        code = self._frame.code
        for i in range(len(self._frame.fast)):
            if code._varname_from_oparg(i) == name:
                return i
        return -1

    def __getitem__(self, name: object) -> object:
        return frame_locals(self._frame)[name]

    def __setitem__(self, name: object, value: object) -> None:
        frame = self._frame
        i = self._slot(name)
        if i < 0:
            extra = getattr(frame, "extra_locals", None)
            if extra is None:
                extra = frame.extra_locals = {}
            extra[name] = value
            return
        code, slot = frame.code, frame.fast[i]
        if isinstance(slot, CellType) and (name in code.co_cellvars or name in code.co_freevars):
            slot.cell_contents = value
        else:
            frame.fast[i] = value

    def __delitem__(self, name: object) -> None:
        if self._slot(name) >= 0:
            raise ValueError(_REMOVE_LOCAL)
        extra = getattr(self._frame, "extra_locals", None)
        if extra is None or name not in extra:
            raise KeyError(name)
        del extra[name]

    def __contains__(self, name: object) -> bool:
        return name in frame_locals(self._frame)

    def __iter__(self) -> Iterator[object]:
        return iter(frame_locals(self._frame))

    def __reversed__(self) -> list:
        return list(frame_locals(self._frame))[::-1]  # (3.13's returns a list, not an iterator)

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("cannot pickle 'FrameLocalsProxy' object")  # (so copy.copy and deepcopy refuse it)

    def __reduce__(self) -> object:
        raise TypeError("cannot pickle 'FrameLocalsProxy' object")

    def __len__(self) -> int:
        return len(frame_locals(self._frame))

    def __repr__(self) -> str:
        """A dict's repr of the locals; the proxy inside them (``p = sys._getframe().f_locals``) shows
        ``{...}``, as CPython's reentrant repr does."""
        key = (id(self._frame), get_ident())
        if key in _IN_REPR:
            return "{...}"
        _IN_REPR.add(key)
        try:
            return repr(frame_locals(self._frame))
        finally:
            _IN_REPR.discard(key)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrameLocalsProxy):
            return frame_locals(self._frame) == frame_locals(other._frame)
        if isinstance(other, dict):
            return frame_locals(self._frame) == other
        return NotImplemented

    def __or__(self, other: object) -> object:
        if not isinstance(other, (dict, FrameLocalsProxy)):
            return NotImplemented
        return {**frame_locals(self._frame), **other}

    def __ror__(self, other: object) -> object:
        if not isinstance(other, (dict, FrameLocalsProxy)):
            return NotImplemented
        return {**other, **frame_locals(self._frame)}

    def __ior__(self, other: object) -> FrameLocalsProxy:
        self.update(other)
        return self

    def keys(self) -> list:
        return list(frame_locals(self._frame))

    def values(self) -> list:
        return list(frame_locals(self._frame).values())

    def items(self) -> list:
        return list(frame_locals(self._frame).items())

    def get(self, name: object, default: object = None) -> object:
        return frame_locals(self._frame).get(name, default)

    def copy(self) -> dict:
        return dict(frame_locals(self._frame))

    def update(self, *args: object, **kwargs: object) -> None:
        if kwargs:
            raise TypeError("FrameLocalsProxy.update() takes no keyword arguments")
        if len(args) != 1:
            raise TypeError(f"FrameLocalsProxy.update() takes exactly one argument ({len(args)} given)")
        (other,) = args
        if not isinstance(other, (dict, FrameLocalsProxy)):
            raise TypeError("update() argument must be dict or another FrameLocalsProxy")
        for name, value in other.items():
            self[name] = value

    def setdefault(self, name: object, default: object = None) -> object:
        current = frame_locals(self._frame).get(name, _MISSING)
        if current is not _MISSING:
            return current
        self[name] = default
        return default

    def pop(self, name: object, default: object = _MISSING) -> object:
        if self._slot(name) >= 0:
            raise ValueError(_REMOVE_LOCAL)
        extra = getattr(self._frame, "extra_locals", None)
        if extra is not None and name in extra:
            return extra.pop(name)
        if default is _MISSING:
            raise KeyError(name)
        return default


Mapping.register(FrameLocalsProxy)


def _native_function_locals() -> object:
    return sys._getframe().f_locals  # (3.13: a FrameLocalsProxy of CPython's)
