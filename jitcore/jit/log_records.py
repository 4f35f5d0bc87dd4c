"""The program's logging calls: recorded while tracing, made on every call as eagerly.

``logger.info("step %d loss %.4f", step, loss.item())`` inside a jitted function logs on every eager
call: a record stamped with that call's time, formatted by the handlers the logger has then, written
to their streams and files. While tracing, the pass's lookaside for ``Logger._log`` (which every
level method, ``Logger.log``, ``exception`` and ``LoggerAdapter`` reach) does not log; it records the
call as an ``Effect`` of kind ``"log"`` (jitcore/jit/effects.py), in program order among the prints
(jitcore/jit/printing.py). After each run of the computation the entry makes the record with
``logger.makeRecord`` (the caller's file, line and function as ``findCaller`` finds them in the
interpreted frames) and passes it to ``logger.handle``: handlers, filters, formatters, the record's
time and thread are each call's own. Whether the logger is enabled for the level
(``Logger.isEnabledFor``, also when the program asks it) is guarded, so ``setLevel`` between calls
is a miss, as eager would then log otherwise.

What a record can carry: the message and arguments as values whose text cannot change between the
call and the log (None, numbers, strings, bytes, ranges, paths, dtypes, devices, enums, classes, and
tuples, lists, sets and dicts of those), numbers read from tensors and dynamic numbers (each call's
value), and text made from them. A tensor (its text shows values), any other object (its
``__str__`` could read state the program changes later), ``exc_info``, ``stack_info`` and a
``stacklevel`` beyond the jitted function are refused with UnsupportedOperationError (JC-T001):
without ``fullgraph`` that call runs eagerly.

A library's tensor subclass or mode that logs the ops its ``__torch_dispatch__`` is given (torch's
``LoggingTensor``, ``LoggingTensorMode``) logs traced tensors: such records are replayed too, with
each call's tensors (Note [A library's dispatch logs its ops]).

Invariant: a replayed record is the record eager makes for a call taking the same path, but for its
``created``/``msecs``/``relativeCreated`` (the replay's time) and the order relative to torch's
computation (records are made after it, as prints are).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import logging
import pathlib
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.interpreter.calls import call_function
from jitcore.jit.effects import Effect
from jitcore.jit.texts import percent_of_tensors
from jitcore.prologue import Path, Root
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.text import TextProxy

__all__ = ["LogRecords"]

_LOGGING_FILE = logging.Logger._log.__code__.co_filename  # noqa: SLF001 - logging's _srcfile
_PLAIN = (type(None), bool, int, float, complex, str, bytes, range, slice, type(Ellipsis), pathlib.PurePath,
          torch.dtype, torch.device, torch.layout, torch.memory_format, NumberProxy, TextProxy,
          types.FunctionType, types.BuiltinFunctionType, torch._ops.OpOverload,  # noqa: SLF001
          torch._ops.OpOverloadPacket)  # noqa: SLF001 - an aten op a dispatch logs


@dataclasses.dataclass(frozen=True, slots=True)
class _EnabledCheck:
    """A prologue ``check``: None while ``logger.isEnabledFor(level)`` answers as while tracing."""

    logger: logging.Logger
    level: int
    expected: bool

    def __call__(self) -> str | None:
        if self.logger.isEnabledFor(self.level) == self.expected:
            return None
        return f"logger {self.logger.name!r} is {'no longer' if self.expected else 'now'} enabled for " \
               f"{logging.getLevelName(self.level)}"


@dataclasses.dataclass(frozen=True, slots=True)
class _NoHandlersCheck:
    """A prologue ``check``: None while a record of ``logger`` at ``level`` reaches no handler."""

    logger: logging.Logger
    level: int

    def __call__(self) -> str | None:
        if not _handlers(self.logger, self.level):
            return None
        return f"logger {self.logger.name!r} now has handlers for {logging.getLevelName(self.level)}"


class LogRecords:
    """The logging calls of one pass, appended to ``effects`` (the prints' list: one program order)."""

    def __init__(self, effects: list[Effect], guard: Callable[..., None],
                 untracked: Callable[[Any], bool]) -> None:
        """Args:
            effects: the pass's print effects (records join them in program order).
            guard: ``Provenance.guard``.
            untracked: whether a frame is subclass code whose effects happen while tracing only
                (``Pass._untracked_subclass_code``: a library's, or any under the grad transform).
        """
        self.effects = effects
        self._guard = guard
        self._untracked = untracked
        self._checked: set[tuple[int, int]] = set()
        self._unhandled: set[tuple[int, int]] = set()  # (logger, level) checked to reach no handler
        # the handlers that exist as the pass begins: any other was made by the program
        self._callers_handlers: weakref.WeakSet[logging.Handler] = weakref.WeakSet(
            h for ref in list(logging._handlerList) if (h := ref()) is not None)  # noqa: SLF001

    def in_dispatch(self) -> bool:
        """Whether a library's subclass dispatch logged a record in this pass so far."""
        return any(e.kind == "dispatch_log" for e in self.effects)

    def lookasides(self) -> dict[Any, Callable[..., Any]]:
        return {logging.Logger.isEnabledFor: self._is_enabled_for, logging.Logger._log: self._log}  # noqa: SLF001

    def _is_enabled_for(self, logger: logging.Logger, level: int) -> bool:
        enabled = logging.Logger.isEnabledFor(logger, level)
        key = (id(logger), level)
        if key not in self._checked and isinstance(level, int):
            self._checked.add(key)
            check = _EnabledCheck(logger, level, enabled)
            self._guard(Path(Root("bound", f"logging.getLogger({logger.name!r}).isEnabledFor", check)).call(),
                        "check", None)
        return enabled

    def _log(self, logger: logging.Logger, level: int, msg: Any, args: tuple, exc_info: Any = None,
             extra: Any = None, stack_info: bool = False, stacklevel: int = 1) -> None:
        run = current_run()
        frames = [f for f in reversed(run.frames) if not _internal(f.code.co_filename)] if run else []
        call = f"logger {logger.name!r}'s {logging.getLevelName(level).lower()}()"
        library = bool(frames) and self._untracked(frames[0])  # Note [A library's dispatch logs its ops]
        if library and not self._reaches_callers_handlers(logger, level, call):
            return call_function(run, _LOG_INTERPRETED, (logger, level, msg, args),
                                 {"exc_info": exc_info, "extra": extra, "stack_info": stack_info,
                                  "stacklevel": stacklevel})
        if exc_info or stack_info:
            _refuse(call, "with exc_info or stack_info (a traceback of this call's frames)")
        if not library and _unreplayable(args) is not None and _unreplayable(args, True) is None:
            # Note [A record's tensor arguments]: its only arguments that cannot be carried are tensors
            text = _message(msg, args)
            msg, args = (msg, args) if text is None else (text, ())
        for value in (msg, args, extra):
            bad = _unreplayable(value, library)
            if bad is not None:
                kind = getattr(bad, "python_type", type(bad)).__qualname__
                _refuse(call, f"with a {kind} argument, whose text a later call could not make as eagerly",
                        isinstance(bad, torch.Tensor))
        pathname, lineno, func = _caller(logger, stacklevel, call, frames)
        if extra is not None:  # its keys are checked as eagerly (KeyError for "message", "asctime", ...)
            logger.makeRecord(logger.name, level, pathname, lineno, msg, args, None, func, dict(extra), None)
        path = Path(Root("bound", f"logging.getLogger({logger.name!r})", logger))
        kind = "dispatch_log" if library else "log"
        self.effects.append(Effect(path, kind, (level, pathname, lineno, func), [msg, args, extra]))

    def _reaches_callers_handlers(self, logger: logging.Logger, level: int, call: str) -> bool:
        """Whether a record of ``logger`` at ``level`` reaches handlers of the caller's (that exist as the
        pass begins) rather than handlers the program made (``capture_logs()`` entered inside it);
        both: refused."""
        handlers = _handlers(logger, level)
        callers = [h in self._callers_handlers for h in handlers]
        if any(callers) and not all(callers):
            _refuse(call, "from a tensor subclass's dispatch, reaching handlers of the caller's and "
                    "handlers the function made")
        if not any(callers) and (id(logger), level) not in self._unhandled:
            self._unhandled.add((id(logger), level))  # a later call whose caller adds one must record
            check = _NoHandlersCheck(logger, level)
            self._guard(Path(Root("bound", f"logging.getLogger({logger.name!r}) handlers", check)).call(),
                        "check", None)
        return any(callers)


# Note [A library's dispatch logs its ops]
# ``with capture_logs() as logs: out = jf(LoggingTensor(x), LoggingTensor(y))`` logs one record per op
# that LoggingTensor's ``__torch_dispatch__`` is given (``logger.info(name, args, kwargs, out)``), and
# the handler formats the tensors by identity and metadata (``$2: f32[3] = aten.mul.Tensor($0, $1)``).
# A library's subclass code is otherwise taken as it is while tracing (``Pass._untracked_subclass_code``),
# so the records were made while tracing only: a cached call logged nothing. Where the record reaches
# handlers of the caller's (that exist when the pass begins), it is an effect of kind
# ``"dispatch_log"``, made after each run of the computation like the program's own records, its
# tensors the computation's outputs (one object per traced value and call, so the handler's ids repeat
# as eagerly). Where it reaches only handlers the program makes (``capture_logs()`` entered inside the
# function, whose list the program returns), it is made while tracing, as before, and the prologue
# checks that the logger still reaches no handler; both kinds at once are refused (JC-T001).
# Under autograd such an entry runs pass 1 itself under torch's autograd (``pass_1_under_autograd``):
# the class's dispatch runs and logs on every call, its backward's ops too, and the effects are not
# made (``Effects.dispatch_runs``); where pass 1 cannot run so, and for a backward inside the function
# (whose ops the pass would run, and log, natively), the call runs eagerly (JC-J002) with its reason.
def _handlers(logger: logging.Logger, level: int) -> list[logging.Handler]:
    """The handlers a record of ``logger`` at ``level`` is handed to (``Logger.callHandlers``)."""
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        found += [h for h in current.handlers if level >= h.level]
        current = current.parent if current.propagate else None
    if not found and logging.lastResort is not None and level >= logging.lastResort.level:
        found.append(logging.lastResort)
    return found


def _unreplayable(value: Any, library: bool = False) -> Any:
    """The first leaf of ``value`` a record cannot carry (see the module docstring), else None; a
    ``library``'s dispatch may log traced tensors (Note [A library's dispatch logs its ops])."""
    if isinstance(value, _PLAIN) or isinstance(value, (enum.Enum, type)):
        return None
    if library and isinstance(value, TensorProxy):
        return None
    if type(value) in (tuple, list, set, frozenset, torch.Size):
        return next((bad for v in value if (bad := _unreplayable(v, library)) is not None), None)
    if type(value) is dict:
        leaves = (v for kv in value.items() for v in kv)
        return next((bad for v in leaves if (bad := _unreplayable(v, library)) is not None), None)
    return value


# Note [A record's tensor arguments]
# ``logger.info("val %s", x)``, ``x`` a tensor (plain or a subclass): the handler's ``record.getMessage()``
# formats ``msg % args`` when the record is handled, which is during the call eagerly, so the text shows
# ``x``'s values at the log call. Such a record was refused (JC-T001), and the call ran eagerly: the
# subclass's dispatch on every call (/tmp/zoo55-probes/p_pct.py). Its message is formatted where the
# program logs it instead, each tensor's ``%s``/``%r`` text as the f-string field ``{x}`` makes it
# (``percent_of_tensors``, jit/texts.py): a TextProxy made from each call's tensors (a snapshot, as
# print's: Note [A tensor the program prints], jit/printing.py), in program order. The record carries
# that text as its ``msg`` and no ``args``: what ``getMessage()`` gives, and every handler's output, is
# eager's; a filter reading ``record.args`` sees ``()``. A width or a precision (``%30s``) pads or cuts that
# text as ``%`` does (Note [A tensor's text with a width], jit/texts.py). Where the formatting cannot be made
# so (a tensor that requires grad, a template that raises), the record is refused as before.
def _message(msg: Any, args: Any) -> str | TextProxy | None:
    """``msg % args`` as ``LogRecord.getMessage`` makes it, each tensor's text made from each call's
    values (Note [A record's tensor arguments]); None (the record refused, as before) where it cannot
    be."""
    if type(msg) is not str or type(args) is not tuple:
        return None
    if len(args) == 1 and isinstance(args[0], collections.abc.Mapping) and args[0]:
        args = args[0]  # LogRecord.__init__'s own rule: one mapping argument is the mapping
    try:
        text = percent_of_tensors(msg, args)
    except Exception:  # noqa: BLE001 - a text jitcore cannot make, or eager's handler reports the error
        return None
    return text if isinstance(text, (str, TextProxy)) else None


def _caller(logger: logging.Logger, stacklevel: int, call: str, frames: list[Any]) -> tuple[str, int, str]:
    """``Logger.findCaller``'s answer, from the interpreted ``frames`` (innermost first, logging's own
    left out)."""
    if type(logger).findCaller is not logging.Logger.findCaller:
        _refuse(call, "of a logger class with its own findCaller")
    if not (type(stacklevel) is int and 1 <= stacklevel <= len(frames)):
        _refuse(call, f"with stacklevel={stacklevel!r}, which names a frame outside the jitted function")
    pos = frames[stacklevel - 1].position()
    return pos.filename, pos.lineno or 0, pos.function_name


# ``Logger._log`` as a function of its own, which the pass does not look aside: interpreted, as any code
_LOG_INTERPRETED = types.FunctionType(logging.Logger._log.__code__, logging.Logger._log.__globals__,  # noqa: SLF001
                                      "_log", logging.Logger._log.__defaults__)  # noqa: SLF001


def _internal(filename: str) -> bool:
    return filename == _LOGGING_FILE or ("importlib" in filename and "_bootstrap" in filename)


def _refuse(call: str, why: str, tensor: bool = False) -> None:
    raise UnsupportedOperationError(
        f"{call} {why}, which jitcore cannot make again on a cached call",
        hints=("log a number (loss.item()) rather than the tensor" if tensor else
               "log outside the jitted function, or pass plain values",),
    )
