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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jitcore.dispatch.dtensor import untraced
from jitcore.errors import (
    DataDependentError,
    EagerOnlyValue,
    EagerWhateverTheSizes,
    LazyState,
    UnsupportedOperationError,
)
from jitcore.interpreter.errors import UnsupportedConstruct
from jitcore.jit.fsdp_units import eager_call  # how an eager entry runs its function
from jitcore.numpy.errors import UnsupportedNumPyError

__all__ = ["Eager", "RULES", "decide", "eager_call", "whatever_the_sizes"]


@dataclass(frozen=True, slots=True)
class Eager:
    """The call runs eagerly.

    Attributes:
        reason: the error shown as the reason (``fallback_reason``, the eager entry's ``eager_reason``).
        from_now_on: the function runs eagerly for every call from now on and adds no entry
            (``fullgraph=True, fallback="eager"``); otherwise an eager entry is added to the cache.
        this_call_only: this call runs eagerly and adds no entry; the next call traces again (a lazy
            module's first call, which makes its parameters).
    """

    reason: BaseException
    from_now_on: bool = False
    this_call_only: bool = False


@dataclass(frozen=True, slots=True)
class Options:
    """The jit options a rule reads: ``jit(fullgraph=, fallback=)``."""

    fullgraph: bool
    fallback: str | None


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


def _dtensor_program(error: Exception, values: Any, _options: Options) -> Eager | None:
    """Note [DTensor programs jitcore cannot trace] (dispatch/dtensor.py)."""
    reason = untraced(error, values)
    return None if reason is None else Eager(reason)


UNRECORDABLE = (DataDependentError, UnsupportedOperationError, UnsupportedNumPyError, UnsupportedConstruct)
RULES: tuple[tuple[type[Exception] | tuple[type[Exception], ...], Rule], ...] = (
    (LazyState, _lazy_state),
    (EagerOnlyValue, _eager_only_value),
    (UNRECORDABLE, _unrecordable),
    (Exception, _dtensor_program),
)


def decide(error: Exception, values: Any, *, fullgraph: bool, fallback: str | None,
           seen: tuple[Callable, list] | None = None) -> Eager | None:
    """What the jit does with ``error``, which stopped a pass that had traced ``values``.

    Args:
        error: the error the pass (or a stage after it) raised.
        values: the stopped pass's TensorValues (None when no pass had started).
        fullgraph, fallback: the jit's options.
        seen: the shape policy's ``seen`` and the pass's bound tensor inputs ``(path, proxy, tensor)``:
            an eager call's shapes are seen as a traced call's are (Note [Eager whatever the sizes]).

    Returns:
        Eager (an eager entry, or eager from now on), or None: the error is raised.
    """
    options = Options(fullgraph, fallback)
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
# these errors the symbolic pass's own eager outcome is taken (``whatever_the_sizes``), and every eager
# outcome remembers its call's shapes (``decide``'s ``seen``): its guards leave the symbolic sizes
# unchecked, and any set of guards is sound for an eager entry (Note [Eager entries], jit/api.py). An
# error symbolic sizes can cause still retries static: JC-T002 (a size the program needs the value of)
# and any other JC-J002 (a subclass's code reading values, which a static pass reads: NJT's offsets).
def whatever_the_sizes(error: Exception) -> bool:
    """Whether ``error``, stopping a pass with symbolic sizes, is decided on there (the Note above)."""
    return isinstance(error, (EagerWhateverTheSizes, UnsupportedOperationError))
