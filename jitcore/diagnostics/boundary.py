"""The jit's error boundary: what an exception looks like when it leaves a jitted function.

``on_error(jfn, exc)`` runs in ``JittedFunction.__call__``'s ``except`` clause, before a bare
``raise`` (which adds no traceback entry of its own on CPython 3.11). It
- keeps the exception object, type and message;
- maps an error raised while a compiled trace runs back to the user's lines that recorded the
  failing op (the ``<jitcore-computation-...>`` frame's line number names the bound symbol);
- hides jitcore's own frames (the jit, the language contexts, the IR, generated code), unless
  ``jitcore.jit(..., show_internal_frames=True)`` or ``JITCORE_SHOW_INTERNAL_FRAMES=1``;
- adds one PEP 678 note saying what jitcore was doing (``ErrorContext.note``).
Invariant: every frame shown is one CPython would show for the same program run eagerly, plus
library frames (torch's) below the user's innermost frame.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import replace
from types import CodeType, TracebackType
from typing import Any, TypeVar

import torch

from jitcore.diagnostics import JITCORE_DIR
from jitcore.diagnostics.context import ErrorContext, attach, context_of
from jitcore.diagnostics.tracebacks import entries, fake_traceback, link
from jitcore.ir import BoundSymbol, SourceFrame, Trace, print_trace

__all__ = [
    "bound_symbol_at", "eager_stand_in", "is_internal_file", "kept_without_frames", "on_error",
    "replays_backward_errors", "runs_as_function_apply", "show_internal_frames", "traceback_points",
]

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TORCH_OPS = os.path.join(_TORCH_DIR, "_ops.py")
_FLATTEN = os.path.join(JITCORE_DIR, "dispatch", "flatten.py")
_INTERPRETATION = os.path.join(JITCORE_DIR, "jit", "interpretation.py")
_NOTED = "_jitcore_noted"
_POINTS = "_jitcore_points"


def show_internal_frames(jfn: Any) -> bool:
    """Whether ``jfn``'s errors keep jitcore's frames (its option, else ``JITCORE_SHOW_INTERNAL_FRAMES``)."""
    option = getattr(jfn, "show_internal_frames", None)
    if option is not None:
        return bool(option)
    return os.environ.get("JITCORE_SHOW_INTERNAL_FRAMES", "") not in ("", "0")


def is_internal_file(filename: str) -> bool:
    """Whether a frame of ``filename`` is jitcore's (its package, its generated traces)."""
    return filename.startswith((JITCORE_DIR, "<jitcore"))


def on_error(jfn: Any, exc: BaseException) -> None:
    """Prepare ``exc``, about to leave ``jfn``, for the user; see the module docstring."""
    if getattr(exc, _NOTED, False):
        return
    tb = exc.__traceback__
    computation = _computation_entry(tb)
    context = context_of(exc)
    if computation is not None:
        context = _execution_context(jfn, computation)
        _chain_to_handled(exc, context.source)
        replayed = _replayed_backward_error(computation)
        if replayed is not None:  # Note [Errors autograd raised while jitcore derived the backward]
            code = getattr(exc, "code", None)
            phase = "backward-internal" if isinstance(code, str) and code.startswith("JC-I") else "backward"
            context = ErrorContext(phase, jfn._label, context.entry)
            if not show_internal_frames(jfn):
                exc.__traceback__ = _engine_tail(replayed)
        elif not show_internal_frames(jfn):
            below = computation.tb_next
            while below is not None and below.tb_frame.f_code.co_filename == _TORCH_OPS:
                below = below.tb_next  # the aten overload's __call__, which eager never shows
            below = _visible(below)
            exc.__traceback__ = link(fake_traceback(context.source or ()), below)
    elif context is not None or _passes(tb, _INTERPRETATION):
        context = (context or ErrorContext("tracing")).with_attempt(jfn._label, jfn.misses)
        if _in_flatten_protocol(tb):
            context = replace(context, hints=(FLATTEN_HINT,))
        elif context_of(exc) is None and _raised_by_jitcore(exc, tb):
            context = replace(context, hints=(BUG_HINT,))
        if not show_internal_frames(jfn):
            exc.__traceback__ = _visible(tb)
    else:  # the eager fallback, or an error in the jit itself: only the entry point is hidden
        if not show_internal_frames(jfn):
            exc.__traceback__ = _visible(tb)
        return
    attach(exc, context)
    try:
        setattr(exc, _NOTED, True)
    except (AttributeError, TypeError):
        pass
    if not show_internal_frames(jfn):
        _hide_in_chain(exc)
    exc.add_note(context.note())


# Note [Errors autograd raised while jitcore derived the backward]
# Autograd runs the user's ``backward`` and ``__torch_dispatch__`` while jitcore derives the backward
# trace; an error then is re-raised by every later ``backward()`` (``raise_backward_error``), with
# the entries recorded when it was first raised. Eagerly, the same entries follow torch's
# ``_engine_run_backward`` frame: those after that frame are shown, less jitcore's own and the
# torch frames that only lead into jitcore (its recording mode's wrappers).
_ENGINE = os.path.join(_TORCH_DIR, "autograd", "graph.py")


# Code of the layers above whose frames the boundary reads specially; their owners register it when
# they are imported (this package never imports those layers).
_BACKWARD_REPLAYS: set[CodeType] = set()
# The stand-ins for Function.apply are known by their files and names: the interpreter makes the entries it
# hid from the program again over other code objects of the same file and name (Note [The hooks' traceback
# entries], interpreter/tracebacks.py).
_FUNCTION_APPLY_PLACES: set[tuple[str, str]] = set()
F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound=BaseException)


def replays_backward_errors(function: F) -> F:
    """Register ``function`` as the one that re-raises an error autograd raised while jitcore derived
    the backward (the grad transform's ``raise_backward_error``; the Note above)."""
    _BACKWARD_REPLAYS.add(function.__code__)
    return function


def runs_as_function_apply(function: F) -> F:
    """Register ``function`` as running a user's ``autograd.Function.forward`` where eager runs it from
    ``Function.apply`` (whose frame eager shows above ``forward``)."""
    _FUNCTION_APPLY_PLACES.add((function.__code__.co_filename, function.__code__.co_name))
    return function


def _replayed_backward_error(computation: TracebackType) -> TracebackType | None:
    """The entries recorded when autograd first raised, if a registered replay re-raised this error:
    the replay's own entry when none were kept (jitcore's own error, kept without them: Note
    [jitcore's own errors while recording a backward], jitcore/transforms/backward_errors.py)."""
    for entry in entries(computation):
        if entry.tb_frame.f_code in _BACKWARD_REPLAYS:
            return entry.tb_next or entry
    return None


def _engine_tail(recorded: TracebackType | None) -> TracebackType | None:
    """Fresh copies of the entries of ``recorded`` below autograd's engine that eager would show."""
    found = entries(recorded)
    engine = [i for i, e in enumerate(found) if e.tb_frame.f_code.co_filename == _ENGINE]
    tail = found[engine[-1] + 1 :] if engine else found
    kept = []
    for i, entry in enumerate(tail):
        filename = entry.tb_frame.f_code.co_filename
        if is_internal_file(filename):
            continue
        if filename.startswith(_TORCH_DIR):
            above = next((e for e in reversed(tail[:i]) if not _is_torch(e)), None)
            below = next((e for e in tail[i + 1 :] if not _is_torch(e)), None)
            if below is None or _is_internal(below) or (above is not None and _is_internal(above)):
                continue
        kept.append(TracebackType(None, entry.tb_frame, entry.tb_lasti, entry.tb_lineno))
    return link(*kept)


def _is_torch(entry: TracebackType) -> bool:
    return entry.tb_frame.f_code.co_filename.startswith(_TORCH_DIR)


def _is_internal(entry: TracebackType) -> bool:
    return is_internal_file(entry.tb_frame.f_code.co_filename)


def _visible(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without jitcore's entries, nor the library (torch) entries jitcore's code called.

    Torch frames the user's code called stay (eager shows them too); a run of torch frames that
    begins right below a jitcore frame is the machinery jitcore drives (dispatch modes,
    ``torch._dynamo.disable`` wrappers) and is hidden with it.
    """
    kept = []
    below_internal = False
    for entry in entries(tb):
        filename = entry.tb_frame.f_code.co_filename
        if is_internal_file(filename) or (below_internal and filename.startswith(_TORCH_DIR)):
            below_internal = True
            stand_in = eager_stand_in(entry.tb_frame.f_code)
            if stand_in is not None:
                kept.append(stand_in)
            continue
        below_internal = False
        kept.append(entry)
    if kept:
        kept[-1].tb_next = None
    return link(*kept)


def eager_stand_in(code: Any) -> TracebackType | None:
    """The torch frame eager shows where jitcore's ``code`` ran the user's code in its place, if any.

    ``MyFunction.apply(x)`` runs the user's ``forward`` on the interpreter from jitcore's lookaside;
    eagerly it runs from torch's ``Function.apply``, whose frame eager shows above ``forward``.
    """
    if (code.co_filename, code.co_name) not in _FUNCTION_APPLY_PLACES:
        return None
    return fake_traceback([_FUNCTION_APPLY_FRAME]) if _FUNCTION_APPLY_FRAME is not None else None


def _call_site(function: Any) -> SourceFrame | None:
    """The position of ``function``'s first ``f(*args, **kwargs)`` call: ``Function.apply``'s
    ``super().apply(*args, **kwargs)``, where eager's traceback shows that frame."""
    import dis
    import inspect
    import linecache

    code = getattr(function, "__code__", None)
    if code is None:
        return None
    filename = inspect.getsourcefile(function) or code.co_filename
    calls = [
        i
        for i in dis.get_instructions(code)
        if i.opname == "CALL_FUNCTION_EX"
        and i.positions.lineno
        and "super().apply(" in linecache.getline(filename, i.positions.lineno)
    ]
    if not calls:
        return None
    where = calls[0].positions
    return SourceFrame(
        filename, where.lineno, code.co_name, where.end_lineno, where.col_offset, where.end_col_offset
    )


_FUNCTION_APPLY_FRAME = _call_site(torch.autograd.Function.apply.__func__)


def _hide_in_chain(exc: BaseException) -> None:
    seen = {id(exc)}
    linked = exc.__cause__ or exc.__context__
    while linked is not None and id(linked) not in seen:
        seen.add(id(linked))
        linked.__traceback__ = _visible(linked.__traceback__)
        linked = linked.__cause__ or linked.__context__


FLATTEN_HINT = (
    "a tensor subclass input must follow the flatten protocol: __tensor_flatten__() returns "
    "(names of its inner-tensor attributes, ctx) and __tensor_unflatten__(inner, ctx, size, stride) "
    "rebuilds it"
)
_FLATTEN_NAMES = frozenset({"__tensor_flatten__", "__tensor_unflatten__", "_subclass"})


BUG_HINT = (
    "this was raised by jitcore's own code, not by your program or torch: it may be a jitcore bug; "
    "JITCORE_SHOW_INTERNAL_FRAMES=1 shows where (docs/errors/JC-I002.md says what to report)"
)


def _raised_by_jitcore(exc: BaseException, tb: TracebackType | None) -> bool:
    """Whether a non-jitcore exception was raised in jitcore's code, below every user frame."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code.startswith("JC-"):
        return False
    found = entries(tb)
    return bool(found) and found[-1].tb_frame.f_code.co_filename.startswith(JITCORE_DIR)


def _in_flatten_protocol(tb: TracebackType | None) -> bool:
    """Whether the error arose while jitcore flattened or rebuilt a tensor subclass."""
    for entry in entries(tb):
        code = entry.tb_frame.f_code
        if code.co_name in _FLATTEN_NAMES or code.co_filename == _FLATTEN:
            return True
    return False


def _passes(tb: TracebackType | None, filename: str) -> bool:
    return any(t.tb_frame.f_code.co_filename == filename for t in entries(tb))


def _computation_entry(tb: TracebackType | None) -> TracebackType | None:
    """The innermost entry of generated trace code (not a prologue) in ``tb``, if any."""
    found = None
    for t in entries(tb):
        filename = t.tb_frame.f_code.co_filename
        if filename.startswith("<jitcore-") and not filename.startswith("<jitcore-prologue-"):
            found = t
    return found


def _traces_of(cache_entry: Any) -> list[Trace]:
    """The traces whose compiled code a cache entry runs (its passes; a grad pair's forward)."""
    traces = list(getattr(cache_entry, "traces", []))
    grad = getattr(getattr(cache_entry, "computation", None), "traces", None)
    traces += [
        t for t in (getattr(grad, "forward", None), getattr(grad, "backward", None)) if isinstance(t, Trace)
    ]
    return traces


def _execution_context(jfn: Any, entry: TracebackType) -> ErrorContext:
    filename, lineno = entry.tb_frame.f_code.co_filename, entry.tb_lineno
    for cache_entry in getattr(jfn, "entries", []):
        for trace in reversed(_traces_of(cache_entry)):
            found = bound_symbol_at(trace, filename, lineno)
            if found is not None:
                bsym, statement = found
                return ErrorContext(
                    "execution",
                    jfn._label,
                    cache_entry.number,
                    bsym.symbol.id,
                    statement=statement,
                    source=bsym.source,
                )
    return ErrorContext("execution", jfn._label)


# Note [An error the computation raises while the program handled one]
# ``try: raise KeyError / except KeyError: return x[i]``: on a call the cache answers, the compiled
# computation raises the IndexError of ``x[i]``, and no ``except`` clause is running, so the error had
# no ``__context__`` where eager's has the KeyError. The pass records, with each bound symbol's
# innermost user frame, the exception that frame was handling (``SourceFrame.handling``, a copy
# without traceback: the record does not keep the pass's frames alive); an error the computation
# raises at that symbol, chained to nothing, is chained to a new copy of it, as the program's handler
# would have chained it.
# Note [A kept reason holds no frames]
# The error that made a call run eagerly is kept (``jitted.fallback_reason``, an eager entry's
# ``eager_reason``) for as long as the jitted function lives. Its traceback's frames link, through
# ``f_back``, to the frame that called the jitted function, which keeps its locals once it returns: the
# caller's objects of that call (a batch, its activations) outlived it (eager frees them). A kept reason
# drops its traceback, and its chain's; it keeps each entry's code, line and instruction offset, which
# is all a report of it reads (``traceback_points``; jitcore/debug/report.py).
def traceback_points(exc: BaseException) -> list[tuple[CodeType, int, int]]:
    """``(code, line, instruction offset)`` of each entry of ``exc``'s traceback, outermost first, or of
    the traceback it had when kept (Note [A kept reason holds no frames])."""
    kept = getattr(exc, _POINTS, None)
    if kept is not None and exc.__traceback__ is None:
        return kept
    return [(tb.tb_frame.f_code, tb.tb_lineno, tb.tb_lasti) for tb in entries(exc.__traceback__)]


def kept_without_frames(exc: E) -> E:
    """``exc``, to be kept, without the frames of its traceback and its chain's (Note [A kept reason holds
    no frames])."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        chained = pending.pop()
        if chained is None or id(chained) in seen:
            continue
        seen.add(id(chained))
        if chained.__traceback__ is not None:
            try:
                setattr(chained, _POINTS, traceback_points(chained))
            except (AttributeError, TypeError):  # an exception class with __slots__ keeps no points
                pass
            chained.__traceback__ = None
        pending += [chained.__cause__, chained.__context__]
    return exc


def exception_template(exc: BaseException, depth: int = 4) -> BaseException | None:
    """A copy of ``exc`` and the exceptions it chains to (``depth`` of them), without tracebacks;
    None when it cannot be copied."""
    import copy

    try:
        made = copy.copy(exc)
    except Exception:  # noqa: BLE001 - an exception whose arguments do not rebuild it is not copied
        return None
    if type(made) is not type(exc):
        return None
    made.__traceback__ = None
    if depth > 1:
        made.__cause__ = None if exc.__cause__ is None else exception_template(exc.__cause__, depth - 1)
        made.__context__ = None if exc.__context__ is None else exception_template(exc.__context__, depth - 1)
    made.__suppress_context__ = exc.__suppress_context__  # after ``__cause__``, whose setter sets it
    return made


def _chain_to_handled(exc: BaseException, source: tuple[SourceFrame, ...] | None) -> None:
    """Chain an error of the computation to what its symbol's frame was handling (the Note above)."""
    if exc.__context__ is not None or not source or source[-1].handling is None:
        return
    context = exception_template(source[-1].handling)
    if context is not None and context is not exc:
        exc.__context__ = context


def bound_symbol_at(trace: Trace, filename: str, lineno: int) -> tuple[BoundSymbol, str] | None:
    """The top-level bound symbol (and its statement) printed at ``lineno`` of the compiled trace
    ``filename``, if ``trace`` is the trace compiled under that name; else None."""
    printed = print_trace(trace)
    digest = hashlib.sha1(printed.source.encode("utf-8")).hexdigest()[:12]
    bsym = printed.bound_symbol_lines.get(lineno)
    if not filename.endswith(f"-{digest}>") or bsym is None:
        return None
    return bsym, printed.source.splitlines()[lineno - 1].strip().split("  # ")[0]
