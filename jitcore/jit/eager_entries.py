"""Which errors that stop a tracing pass make the call run eagerly instead (Note [Eager entries], jit/api.py).

A pass stops on an error: the program's own, jitcore's, or one of the errors that say a value or a call
cannot be traced. ``decide`` maps the error, with the tensor values the stopped pass had traced, to what
the jit does with it: an eager entry with a reason, the function run eagerly from now on, or the error
raised. The rules are one table, ``RULES``, tried in order; the first whose error class matches decides.

Invariants:
- eager is only chosen where eager computes what the call means (a refusal of jitcore's, or an error
  of a DTensor program's tracing, which the eager run raises again if it is the program's);
- a rule reads the stopped pass's values and keeps none of them: the caller drops the pass after.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jitcore.diagnostics.context import ErrorContext, attach
from jitcore.dispatch.dtensor import untraced
from jitcore.errors import (
    DataDependentError,
    EagerOnlyValue,
    EagerWhateverTheSizes,
    JitcoreError,
    LazyState,
    UnsupportedOperationError,
)
from jitcore.interpreter.errors import JitcoreInterpreterError, UnsupportedConstruct
from jitcore.jit.fsdp_units import eager_call  # how an eager entry runs its function
from jitcore.jit.outputs import escaped
from jitcore.numpy.errors import UnsupportedNumPyError

__all__ = ["Eager", "RULES", "after_raise", "decide", "eager_call", "eager_guards", "whatever_the_sizes"]


@dataclass(frozen=True, slots=True)
class Eager:
    """The call runs eagerly.

    Attributes:
        reason: the error shown as the reason (``fallback_reason``, the eager entry's ``eager_reason``).
        from_now_on: the function runs eagerly for every call from now on and adds no entry
            (``fullgraph=True, fallback="eager"``); otherwise an eager entry is added to the cache.
        this_call_only: this call runs eagerly and adds no entry; the next call traces again (a lazy
            module's first call, which makes its parameters).
        program_raised: the pass stopped on an exception not of jitcore's own (Note [A program that
            raises]): a raising entry is kept (``kept``: Note [Raising entries], jit/raising_entries.py);
            this call runs eagerly, which raises eager's exception, or, ``reraise``, raises the pass's.
        result_expected: with ``program_raised``, eager may return where the pass raised: a handler that
            may catch an error the values decide was passed over (Note [Handlers a raising computation
            skips], jit/caught_errors.py).
        reraise: with ``program_raised``, the pass made no effect eager keeps: its exception is raised.
        kept: with ``program_raised``, a raising entry is kept (not under ``fullgraph=True``).
        maybe_programs: the error may be the program's own (a DTensor program's, Note [DTensor programs
            jitcore cannot trace]): where this call's eager run raises an exception of its type, a raising
            entry is kept instead of the eager entry, without a warning (Note [Raising entries]).
        tensor_guards: with ``program_raised`` or ``maybe_programs``, the guards of the tensor inputs the
            stopped pass had bound, which a raising entry adds to the pass's (a pass adds them at its end).
        written: with ``program_raised``, the paths of the objects the stopped pass wrote: a raising entry
            leaves out the guards on them (Note [Raising entries]).
    """

    reason: BaseException
    from_now_on: bool = False
    this_call_only: bool = False
    program_raised: bool = False
    result_expected: bool = False
    reraise: bool = False
    kept: bool = False
    maybe_programs: bool = False
    tensor_guards: tuple = ()
    written: frozenset = frozenset()


@dataclass(frozen=True, slots=True)
class Options:
    """What a rule reads besides the error: the jit options ``jit(fullgraph=, fallback=)``, and whether
    the stopped pass had made effects eager keeps (Note [A program that raises]), or passed over handlers
    that may catch an error the values decide (Note [Handlers a raising computation skips])."""

    fullgraph: bool
    fallback: str | None
    effects_made: bool = False
    handlers_skipped: bool = False


# A rule: (the error, the stopped pass's TensorValues or None, the options) -> Eager, or None to raise it.
Rule = Callable[[Exception, Any, Options], Eager | None]


def _eager_only_value(error: Exception, _values: Any, _options: Options) -> Eager:
    """JC-J002: a value jitcore runs eagerly (a sparse tensor, an eager-only subclass, FSDP2)."""
    return Eager(error)


def _lazy_state(error: Exception, _values: Any, _options: Options) -> Eager:
    """A lazy module's first call: eager makes its parameters; the next call is traced with them."""
    return Eager(error, this_call_only=True)


def _unrecordable(error: Exception, _values: Any, options: Options) -> Eager | None:
    """JC-T001, JC-T002, JC-N001 (a NumPy function or dtype torch's NumPy layer lacks, NumPy's
    random generators) and what the interpreter does not run (JC-I001: ``sys.settrace`` inside): an
    eager entry, except under ``fullgraph=True`` (raised, or with ``fallback="eager"`` the function
    runs eagerly from now on)."""
    if not options.fullgraph:
        return Eager(error)
    return Eager(error, from_now_on=True) if options.fallback == "eager" else None


def _dtensor_program(error: Exception, values: Any, options: Options) -> Eager | None:
    """Note [DTensor programs jitcore cannot trace] (dispatch/dtensor.py), else Note [A program that
    raises]."""
    reason = untraced(error, values)
    if reason is not None:
        return Eager(reason, maybe_programs=True)
    if isinstance(error, (JitcoreError, JitcoreInterpreterError)):
        return None
    eagerly = options.effects_made or options.handlers_skipped or _carries_traced_values(error)
    return Eager(error, this_call_only=eagerly, program_raised=True, result_expected=options.handlers_skipped,
                 reraise=not eagerly, kept=not options.fullgraph)


# Note [A program that raises]
# A pass that the program's own exception stops (``raise ValueError(...)``, a torch error on shapes, a
# failed assert) keeps nothing it did: the objects it reached are put back, its tensor ops ran on
# shadows, its prints were held back, its generators were rewound. Raising that exception would lose
# what eager did before raising (the list it appended to, the counter it bumped, the in-place write on
# an input, the RNG draw) and show a message computed from the restored state: three calls of a
# program that appends to a global list and then raises `f"{len(LOG)}"` gave "1" each time and an
# empty list, where eager gives "3" and three items. So where the pass had made such effects
# (``Pass._made_effects``: a diff of the reached objects, prints, in-place, random or global-state
# records, generator draws), the call runs eagerly instead: eager's effects, eager's exception with
# eager's traceback and a note. An eager run that returns where the pass raised means the pass was
# wrong (a jitcore bug): the call still answers as eager, a warning says so (jit/api.py), and the
# next call traces again. A pass that made none raises the exception it stopped on, with
# jitcore's note naming the op being recorded: nothing was lost, and the message was computed from
# the state eager sees (an exception that holds a traced value, ``raise ValueError(x * 2)``, runs the
# call eagerly too: it would hold the pass's proxy). jitcore's own errors (JitcoreError, the
# interpreter's) are raised as they are.
# Either way the call keeps a raising entry (Note [Raising entries], jit/raising_entries.py): calls like
# it run eagerly instead of tracing again, each to fail at the same place.


def _carries_traced_values(error: Exception) -> bool:
    """Whether ``error`` holds a traced value (``raise ValueError(x * 2)``: a proxy in its arguments or
    attributes): raised, it would show the pass's proxy where eager's holds a tensor (Note [A program
    that raises])."""
    return escaped((error.args, getattr(error, "__dict__", None))) is not None


UNRECORDABLE = (DataDependentError, UnsupportedOperationError, UnsupportedNumPyError, UnsupportedConstruct)
RULES: tuple[tuple[type[Exception] | tuple[type[Exception], ...], Rule], ...] = (
    (LazyState, _lazy_state),
    (EagerOnlyValue, _eager_only_value),
    (UNRECORDABLE, _unrecordable),
    (Exception, _dtensor_program),
)


def decide(error: Exception, values: Any, *, fullgraph: bool, fallback: str | None,
           effects_made: bool = False, handlers_skipped: bool = False,
           seen: tuple[Callable, list] | None = None) -> Eager | None:
    """What the jit does with ``error``, which stopped a pass that had traced ``values``.

    Args:
        error: the error the pass (or a stage after it) raised.
        values: the stopped pass's TensorValues (None when no pass had started).
        fullgraph, fallback: the jit's options.
        effects_made: the stopped pass had made effects eager keeps (Note [A program that raises]).
        handlers_skipped: the stopped pass recorded an op whose error the values decide where a handler
            may catch it (Note [Handlers a raising computation skips], jit/caught_errors.py): the pass's
            exception may not be eager's, so the call runs eagerly.
        seen: the shape policy's ``seen`` and the pass's bound tensor inputs ``(path, proxy, tensor)``:
            an eager call's shapes are seen as a traced call's are (Note [Eager whatever the sizes]).

    Returns:
        Eager (an eager entry, or eager from now on), or None: the error is raised.
    """
    options = Options(fullgraph, fallback, effects_made, handlers_skipped)
    for classes, rule in RULES:
        if isinstance(error, classes):
            outcome = rule(error, values, options)
            if outcome is not None and seen is not None:
                record, inputs = seen
                record([path for path, _, _ in inputs], [tensor for _, _, tensor in inputs])
            return outcome
    return None


# Note [Eager whatever the sizes]
# A pass with symbolic sizes that stops on an error is run again with static shapes, since the symbolic
# path may be what failed; the static pass's eager entry then guards the sizes it saw, and the shapes
# of a call that ran eagerly were not remembered (a later pass saw no dimension change). A program that
# runs eagerly for a reason no size decides (``torch.func.vmap``/``grad`` of a tensor subclass, JC-J002;
# ``torch.save`` of a value inside the function, JC-T001) therefore made one eager entry per input
# shape: a TwoTensor program over ten batch sizes kept ten entries, each call past the last a miss that
# interpreted the function again, where the same call over plain tensors traced one symbolic entry. For
# these errors the symbolic pass's own eager outcome is taken (``whatever_the_sizes``) where a static pass of
# the call runs eagerly too (one that traces it wins: a logging call's text made from a SymInt is refused
# with JC-T001 on symbolic sizes only), and every eager
# outcome remembers its call's shapes (``decide``'s ``seen``): its guards leave the symbolic sizes
# unchecked, and any set of guards is sound for an eager entry (Note [Eager entries], jit/api.py). An
# error symbolic sizes can cause still retries static: JC-T002 (a size the program needs the value of)
# and any other JC-J002 (a subclass's code reading values, which a static pass reads: NJT's offsets).
def whatever_the_sizes(error: Exception) -> bool:
    """Whether ``error``, stopping a pass with symbolic sizes, is decided on there (the Note above)."""
    return isinstance(error, (EagerWhateverTheSizes, UnsupportedOperationError))


# Note [Eager whatever the contents]
# An eager entry guards what the pass guarded before it stopped, the contents of the state it read
# included. Where the reason it stopped does not depend on those contents, and they change on every call,
# every call failed the entry and traced the program again only to stop at the same place: a closure over
# the call's own objects stored into an argument (``s.cb = lambda g: s.log.append(g)``, Note [A closure
# over a call's objects], jit/outputs.py) had ``s.log``'s length and ``s.cb``'s identity guarded, both new
# on every call (20 traces in 20 calls, each then run eagerly; now 2: ``s.cb`` None, then a function).
# Such an error is marked where it is raised (its ``whatever_the_contents`` attribute), and its entry
# leaves out the guards on what containers and objects reached from a root hold (lengths, keys,
# contents, members, identities below the root); types, values of numbers and tensors' metadata stay.
# Any set of guards is sound for an eager entry (Note [Eager entries], jit/api.py): a call such an entry
# accepts that would have traced runs eagerly, never wrongly.
_CONTENTS = frozenset({"len", "keys", "contents", "members", "member", "identity"})


def eager_guards(reason: BaseException, guards: list) -> list:
    """The guards of an eager entry stopped by ``reason`` (Note [Eager whatever the contents]), but those
    ``reason.unguarded`` names (Note [Context variables], jit/context_variables.py)."""
    if (unguarded := getattr(reason, "unguarded", None)) is not None:
        guards = [g for g in guards if not unguarded(g)]
    if not getattr(reason, "whatever_the_contents", False):
        return list(guards)
    return [g for g in guards if not (g.kind in _CONTENTS and g.path.steps)]


def after_raise(
    fn: Callable[..., Any], raised: BaseException, label: str, attempt: int, *, computation: bool = False,
    result_expected: bool = False,
) -> Callable[..., Any]:
    """``fn`` for a call run eagerly, its pass (or, ``computation``, its cached computation: Note [Effects
    of a raising call], jit/raising_calls.py) having stopped on ``raised`` (Note [A program that
    raises]): eager's exception is raised, marked as eager's; a result where the pass raised is warned of
    as a jitcore bug, unless ``result_expected`` (a handler the computation skipped may have caught the
    error: Note [Handlers a raising computation skips], jit/caught_errors.py)."""
    what = f"running the computation of {label}" if computation else f"tracing {label}"
    after = "" if computation else ", and the next one traces again"

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            attach(exc, ErrorContext("eager-after-computation" if computation else "eager", attempt=attempt))
            raise
        if result_expected:
            return result
        warnings.warn(
            f"jitcore: {what} raised {type(raised).__name__}: {raised}, where running it eagerly "
            f"did not: this call ran eagerly{after}. This is a jitcore bug "
            "(docs/errors/JC-I002.md says what to report)", stacklevel=4,
        )
        return result

    return call
