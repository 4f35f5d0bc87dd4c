"""Raising, catching and re-raising; ``with`` blocks; exception groups (``except*``).

Invariants:
- ``frame.exc_value`` mirrors CPython's per-frame exc_info: PUSH_EXC_INFO saves the previous value on the
  stack and POP_EXCEPT restores it.
- A handler that raises on the program's behalf records ``run.raising`` so that the loop chains
  ``__context__`` and adds traceback entries as CPython does for that kind of raise (explicit vs. bare).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import sys

from jitcore.errors import JitcoreError
from jitcore.interpreter.attributes import MISSING, lookup_special
from jitcore.interpreter.calls import call, looked_up
from jitcore.interpreter.frame import Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.loop import unwind
from jitcore.interpreter.registry import handles
from jitcore.interpreter.tracebacks import entry_here

# The exception classes of the builtins module: ``raise ValueError`` calls one directly (what calls.call would
# come to: no Python __new__/__init__) unless a lookaside or the opaque-call hook is to see the call.
_BUILTIN_EXCEPTIONS = frozenset(
    v for v in vars(__import__("builtins")).values() if isinstance(v, type) and issubclass(v, BaseException)
)


def _instantiate(frame: Frame, value: object) -> BaseException:
    if type(value) is type and value in _BUILTIN_EXCEPTIONS:  # (an instance may be unhashable)
        run = frame.run
        if run.on_opaque_call is None and value not in run.lookasides:
            return value()
    if isinstance(value, type) and issubclass(value, BaseException):
        exc = call(frame.run, value, (), None)
        if not isinstance(exc, BaseException):
            raise TypeError(f"calling {value!r} should have returned an instance of BaseException, "
                            f"not {type(exc).__name__}")
        return exc
    if isinstance(value, BaseException):
        return value
    raise TypeError("exceptions must derive from BaseException")


@handles("RAISE_VARARGS", since=(3, 11))
def raise_varargs(frame: Frame, inst: Instruction) -> None:
    """raise (0 args: re-raise the handled exception; 1: raise TOS; 2: raise TOS1 from TOS)."""
    exc = raised_by(frame, inst)
    # Note [Raises caught in their frame]
    # A raise inside a ``try`` is routed to its handler here, by the loop's own ``unwind`` (chaining, the
    # traceback entry, the exception table), without raising natively: raising through this handler and the
    # run loop costs CPython traceback entries and frame objects for both, which ``unwind`` then strips
    # (~10,000 machine instructions per raise). Anything else is raised and unwound by the loop as before,
    # and so is every raise in the tracing loop (tracing.raise_traced: the loop notes the raiser there).
    if inst.arg and frame.info.handler_for(frame.index - 1) is not None and unwind(frame, exc):
        return
    raise exc


def raised_by(frame: Frame, inst: Instruction) -> BaseException:
    """The exception the RAISE_VARARGS ``inst`` raises, noted as the run's ``raising`` (the error of a bare
    ``raise`` with none to re-raise, or of a cause that is no exception, raised instead)."""
    stack = frame.stack
    if inst.arg == 0:
        exc = frame.handled_exception()
        if exc is None:
            exc = frame.run.native_exc
        if exc is None:
            raise RuntimeError("No active exception to reraise")
        frame.run.raising = (exc, False, exc.__context__)
        return exc
    cause = stack.pop() if inst.arg == 2 else MISSING
    exc = _instantiate(frame, stack.pop())
    if cause is not MISSING:
        if cause is None:
            exc.__cause__ = None
        elif isinstance(cause, BaseException) or (
            isinstance(cause, type) and issubclass(cause, BaseException)
        ):
            exc.__cause__ = _instantiate(frame, cause)
        else:
            raise TypeError("exception causes must derive from BaseException")
    frame.run.raising = (exc, True, None)
    return exc


@handles("RERAISE", since=(3, 11))
def reraise(frame: Frame, inst: Instruction) -> None:
    """Re-raise TOS. (CPython also restores f_lasti from the stack if inst.arg; that only matters for a new
    traceback entry, which a re-raise in the frame that caught the exception never adds.)"""
    exc = frame.stack.pop()
    frame.run.raising = (exc, False, exc.__context__)
    raise exc


@handles("PUSH_EXC_INFO", since=(3, 11))
def push_exc_info(frame: Frame, inst: Instruction) -> None:
    """Start handling TOS: push the previously handled exception under it."""
    stack = frame.stack
    exc = stack.pop()
    stack.append(frame.exc_value)
    stack.append(exc)
    frame.exc_value = exc
    if hidden_from_program(exc) and frame.instructions[frame.index].opname == "POP_TOP":
        # a bare ``except:`` (no class to match) catches no error that stops tracing: it leaves through
        # the clause's own cleanup, as a bare ``raise`` there would (Note [Refusals pass bare excepts])
        frame.run.raising = (exc, False, exc.__context__)
        raise exc


@handles("POP_EXCEPT", since=(3, 11))
def pop_except(frame: Frame, inst: Instruction) -> None:
    """Stop handling: restore the previously handled exception from TOS."""
    frame.exc_value = frame.stack.pop()


def check_catchable(match_type: object) -> None:
    """Raise CPython's TypeError unless ``match_type`` is an exception class or a tuple of them."""
    types = match_type if isinstance(match_type, tuple) else (match_type,)
    for t in types:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise TypeError("catching classes that do not inherit from BaseException is not allowed")


# Note [Refusals pass bare excepts]
# An error that stops tracing (``hidden_from_program``: a refusal, JC-T001) must leave the program: the
# call then runs eagerly, where nothing raised it. Typed clauses never match it (``exception_matches``),
# but a bare ``except:`` matches without a class and a ``with`` exit may return a true value
# (``contextlib.suppress(Exception)``): either swallowed the refusal and traced the handler's path for
# every later call (``try: return torch.linalg.inv(a) except: return torch.zeros(1)`` returned zeros
# for an invertible ``a``). A bare clause re-raises it at once, through the clause's own cleanup; a
# ``with`` exit still runs (its state is restored), its answer is taken as False, and an error it raises
# is dropped: unittest's ``assertRaisesRegex(TypeError, ...)`` raised AssertionError at the refusal's
# message, which then left the call in its place (test_dataclasses' test_slots_with_wrong_init_subclass
# jitted: a class whose ``__init_subclass__`` is the program's is refused). A bare clause after typed
# ones (``except KeyError: ... except: ...``, unittest's ``testPartExecutor``) starts at the jump of the
# last class check that missed, so the refusal leaves at the first class check, as falling through all the
# clauses to their RERAISE would (it took the bare clause: /tmp/cpy52-probes/p7_bare.py, eager 2.0, jit 0.0;
# test_traceback's reports printed under ``subTest``).


def hidden_from_program(exc: object) -> bool:
    """Whether no ``except`` clause of the program may catch ``exc``: a jitcore error that stops tracing
    (``JitcoreError.reaches_program`` False; the call then runs eagerly, where nothing raised it). It
    still passes through the program's ``finally`` clauses and ``with`` exits, which restore state."""
    return isinstance(exc, JitcoreError) and not exc.reaches_program


def exception_matches(exc: object, match_type: object) -> bool:
    """Whether ``exc`` is an instance of the (checked) class or tuple of classes ``match_type``."""
    if hidden_from_program(exc):
        return False
    mro = type(exc).__mro__
    if isinstance(match_type, tuple):
        return any(t in mro for t in match_type)
    return match_type in mro


@handles("CHECK_EXC_MATCH", since=(3, 11))
def check_exc_match(frame: Frame, inst: Instruction) -> None:
    """Push whether TOS1 (an exception) matches the class(es) TOS."""
    stack = frame.stack
    match_type = stack.pop()
    check_catchable(match_type)
    exc = stack[-1]
    if hidden_from_program(exc):
        leave_clauses(frame, exc)
    stack.append(exception_matches(exc, match_type))


def leave_clauses(frame: Frame, exc: BaseException) -> None:
    """Raise ``exc``, an error that stops tracing, from an ``except`` clause's class check, through the
    clauses' cleanup: no later clause may be a bare ``except:`` that takes it (Note [Refusals pass bare
    excepts])."""
    frame.run.raising = (exc, False, exc.__context__)
    raise exc


@handles("CHECK_EG_MATCH", since=(3, 11))
def check_eg_match(frame: Frame, inst: Instruction) -> None:
    """except*: split the exception TOS1 by the type TOS into [rest, match] (or push None: no match)."""
    stack = frame.stack
    match_type = stack.pop()
    check_catchable(match_type)
    types = match_type if isinstance(match_type, tuple) else (match_type,)
    if any(issubclass(t, BaseExceptionGroup) for t in types):
        raise TypeError("catching ExceptionGroup with except* is not allowed. Use except instead.")
    exc = stack[-1]
    if exception_matches(exc, match_type):
        match = exc if isinstance(exc, BaseExceptionGroup) else _wrap_naked(frame, exc)
        rest = None
    elif isinstance(exc, BaseExceptionGroup):
        match, rest = _split(exc, match_type)
    else:
        match = rest = None
    if match is None:
        stack.append(None)
        return
    stack[-1] = rest
    stack.append(match)
    frame.exc_value = match


def _wrap_naked(frame: Frame, exc: BaseException) -> BaseExceptionGroup:
    """The group ``except*`` binds for a naked exception: CPython's, made of a tuple (its repr shows one), and
    on 3.13 with a traceback entry of its own at the ``except*`` line."""
    group = BaseExceptionGroup("", (exc,))
    if _WRAPPED_HAS_AN_ENTRY:
        group.__traceback__ = entry_here(frame)
    return group


_WRAPPED_HAS_AN_ENTRY = sys.version_info >= (3, 13)


def _split(exc: BaseExceptionGroup, match_type: object) -> tuple[object, object]:
    """``exc.split(match_type)``; 3.13 checks what a subclass's ``split`` returns (gh-128049)."""
    pair = exc.split(match_type)
    if sys.version_info < (3, 13):
        return pair
    if type(pair) is not tuple:
        raise TypeError(f"{type(exc).__name__}.split must return a tuple, not {type(pair).__name__}")
    if len(pair) < 2:
        raise TypeError(f"{type(exc).__name__}.split must return a 2-tuple, got tuple of size {len(pair)}")
    return pair[0], pair[1]


def _leaf_ids(exc: BaseException, out: set[int]) -> None:
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            _leaf_ids(e, out)
    else:
        out.add(id(exc))


def _same_metadata(a: BaseException, b: BaseException) -> bool:
    return (
        getattr(a, "__notes__", None) is getattr(b, "__notes__", None)
        and a.__traceback__ is b.__traceback__
        and a.__cause__ is b.__cause__
        and a.__context__ is b.__context__
    )


def prep_reraise_star(orig: object, excs: list) -> object:
    """What an ``except*`` block raises: new exceptions plus the re-raised part of ``orig`` (or None)."""
    if not excs:
        return None
    if not isinstance(orig, BaseExceptionGroup):
        return excs[0]
    raised, reraised = [], []
    for e in excs:
        if e is None:
            continue
        (reraised if _same_metadata(e, orig) else raised).append(e)
    ids: set[int] = set()
    for e in reraised:
        _leaf_ids(e, ids)
    reraised_eg = orig.split(lambda leaf: id(leaf) in ids)[0] if ids else None
    if not raised:
        return reraised_eg
    if reraised_eg is not None:
        raised.append(reraised_eg)
    return raised[0] if len(raised) == 1 else ExceptionGroup("", raised)


@handles("PREP_RERAISE_STAR", since=(3, 11), until=(3, 11))
def prep_reraise_star_(frame: Frame, inst: Instruction) -> None:
    """Combine what the except* clauses raised (TOS) with the original exception (TOS1)."""
    stack = frame.stack
    excs = stack.pop()
    orig = stack.pop()
    stack.append(prep_reraise_star(orig, excs))


@handles("BEFORE_WITH", since=(3, 11))
def before_with(frame: Frame, inst: Instruction) -> None:
    """Replace the context manager TOS by its bound __exit__ and push __enter__()."""
    stack = frame.stack
    mgr = stack[-1]
    looked_up(frame.run, mgr, type(mgr), "__enter__", "__exit__")
    enter = lookup_special(mgr, "__enter__")
    if enter is MISSING:
        raise TypeError(f"'{type(mgr).__name__}' object does not support the context manager protocol")
    exit_ = lookup_special(mgr, "__exit__")
    if exit_ is MISSING:
        raise TypeError(f"'{type(mgr).__name__}' object does not support the context manager protocol "
                        "(missed __exit__ method)")
    stack[-1] = exit_
    stack.append(call(frame.run, enter, (), None))


@handles("WITH_EXCEPT_START", since=(3, 11))
def with_except_start(frame: Frame, inst: Instruction) -> None:
    """Push __exit__(type, exc, tb) for the exception TOS; the bound __exit__ is 4 deep."""
    stack = frame.stack
    exc = stack[-1]
    exit_ = stack[-4]
    if not hidden_from_program(exc):
        stack.append(call(frame.run, exit_, (type(exc), exc, exc.__traceback__), None))
        return
    # the exit restores its state; an error that stops tracing is not its to suppress, nor to replace
    # (Note [Refusals pass bare excepts])
    try:
        call(frame.run, exit_, (type(exc), exc, exc.__traceback__), None)
    except Exception:  # noqa: BLE001, S110 - its answer to an error eager never raised
        pass
    stack.append(False)
