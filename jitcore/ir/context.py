"""The tracing context: which trace symbol calls record into, and where in it.

Invariant: the context is per thread and per task (a ``contextvars.ContextVar``), so tracing in one
thread never records into another thread's trace. Outside ``tracing(...)`` no trace is active and
symbols execute eagerly.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jitcore.ir.symbol import BoundSymbol, SourceFrame, Symbol
    from jitcore.ir.trace import Trace

__all__ = ["TraceContext", "tracing", "current_context", "in_subclass_code"]


@dataclass(slots=True, eq=False)
class TraceContext:
    """What a symbol call needs while a trace is being built.

    Attributes:
        trace: the trace being built.
        scopes: the bound-symbol lists currently recorded into; the last one receives new records
            (the trace's top level, or the subsymbols of the symbol being resolved).
        values: the language-level value state (for torch: the fake mode and the shadow -> proxy
            map); owned by the language context that created it.
        source_provider: returns the user's source stack at the moment of a record, or None.
        call_handler: runs one symbol call on proxies and returns its outputs; replaced by layers
            that resolve calls differently (tensor-subclass dispatch). Default: ``symbol.meta``.
        subclass_code: how deep the interpreter is in a tensor subclass's ``__torch_function__`` or
            ``__torch_dispatch__`` (0: the program's own code). State such code reads and writes
            is taken as it is while tracing, as torch.compile's AOTAutograd takes it.
        called_as: the callable the program called when it records another one's symbol
            (``x.exp()`` records ``torch.exp``): what a ``__torch_function__`` is handed as ``func``.
        autograd: the tracing pass's autograd calls (``proxy.grad``, ``proxy.backward()``:
            jitcore/jit/autograd_calls.py); None where no pass runs them.
        modes: the TorchFunctionMode/TorchDispatchMode the program entered inside the traced
            function (jitcore/dispatch/modes.py ``UserModes``); None until it enters one.
        function_transforms: how deep the program is in torch.func's transforms (``vmap``,
            ``grad``), which functorch runs on the traced tensors (jitcore/jit/function_transforms.py).
        as_size: a dynamic number as a symbolic size of the pass, or None where it is specialized
            instead (jitcore/jit/number_sizes.py); None in a pass without symbolic sizes.
        spliced: the ids of the open scopes whose records take their call's place once it returns (a
            ``__torch_function__`` that computed the call through other operations: ``Inlined`` with
            ``splice``), so that what they record lands where the call would have been.
    """

    trace: Trace
    values: Any = None
    source_provider: Callable[[], tuple[SourceFrame, ...] | None] | None = None
    call_handler: Callable[[Symbol, tuple, dict], Any] | None = None
    scopes: list[list[BoundSymbol]] = field(default_factory=list)
    subclass_code: int = 0
    called_as: Any = None
    autograd: Any = None
    modes: Any = None
    function_transforms: int = 0
    as_size: Callable[[Any], Any] | None = None
    spliced: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.scopes:
            self.scopes.append(self.trace.bound_symbols)

    @contextmanager
    def splicing(self) -> Iterator[None]:
        """The innermost scope (a call's) is spliced into its caller's once the call returns: noted in
        ``spliced`` for the block."""
        scope = id(self.scopes[-1])
        self.spliced.add(scope)
        try:
            yield
        finally:
            self.spliced.discard(scope)

    def source(self) -> tuple[SourceFrame, ...] | None:
        """The user's source stack at this moment (None when no provider knows it)."""
        return self.source_provider() if self.source_provider is not None else None


_CURRENT: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar("jitcore_trace", default=None)


@contextmanager
def in_subclass_code() -> Iterator[None]:
    """Mark the body as a tensor subclass's protocol code (``TraceContext.subclass_code``)."""
    context = _CURRENT.get()
    if context is None:
        yield
        return
    context.subclass_code += 1
    try:
        yield
    finally:
        context.subclass_code -= 1


def current_context() -> TraceContext | None:
    """The active trace context of this thread/task, or None when not tracing."""
    return _CURRENT.get()


@contextmanager
def tracing(context: TraceContext | None) -> Iterator[TraceContext | None]:
    """Make ``context`` the active trace context (None: suspend tracing) for the ``with`` body."""
    token = _CURRENT.set(context)
    try:
        yield context
    finally:
        _CURRENT.reset(token)
