"""Symbols (named operations) and bound symbols (their recorded calls).

A Symbol is plain data: an id, the language context it belongs to, the callable that executes it,
how it prints, how its output metadata is computed, an optional decomposition and tags. Rules of
transforms (grad, dispatch, ...) live in tables owned by those transforms, keyed by symbol.

Invariants:
- calling a Symbol outside a trace executes it eagerly (``symbol.fn``); inside one it records exactly
  one BoundSymbol into the innermost open scope and returns the outputs computed by ``meta``;
- symbols called while another symbol's outputs are computed are recorded as its subsymbols;
- a BoundSymbol is immutable once recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from jitcore.ir.context import current_context

__all__ = ["Symbol", "BoundSymbol", "Inlined", "SourceFrame", "SymbolTag", "recorded_symbol"]

SymbolTag = Literal[
    "inplace", "view", "random", "global_state", "autograd_function", "bookkeeping", "check",
    "data_dependent", "backward", "per_call", "python_random",
]


@dataclass(frozen=True, slots=True)
class SourceFrame:
    """One user frame of the Python stack that produced a bound symbol."""

    filename: str
    lineno: int
    function: str
    end_lineno: int | None = None
    col: int | None = None
    end_col: int | None = None
    # the exception the frame was handling, a copy without traceback (Note [An error the computation
    # raises while the program handled one], jitcore/diagnostics/boundary.py)
    handling: BaseException | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function}"


@dataclass(frozen=True, slots=True, eq=False)
class Symbol:
    """A named operation.

    Attributes:
        id: unique id, e.g. ``torch.add`` or ``torch.ops.aten.add.Tensor``.
        name: short name, e.g. ``add``.
        langctx: the language context it belongs to (``torch``, ``aten``).
        fn: the callable that executes it on real values.
        path: how generated code names ``fn`` (a dotted path importable from the trace's imports);
            None when there is none (the printer then binds ``fn`` as a constant).
        meta: computes the outputs (proxies) of a call on proxies; the language context derives it
            from torch itself (fake tensors), never from hand-written shape rules.
        decomposition: optional function expressing the symbol through other symbols.
        tags: properties transforms may rely on (SymbolTag): ``inplace``, ``view``, ``random`` (draws
            from the RNG: aten's ``nondeterministic_seeded``), ``global_state`` (changes thread state
            the forward of the grad transform must change too), ``autograd_function`` (runs user code),
            ``bookkeeping`` (rebuilds a subclass value; not an op of the program), ``check`` (a value
            read's check), ``data_dependent`` (its outputs depend on tensor values), ``backward``
            (runs the autograd engine: the trace always goes through the grad transform), ``per_call``
            (a clock read or a Python random draw, made anew by every call) and ``python_random`` (draws
            from a ``random.Random``).
    """

    id: str
    name: str
    langctx: str
    fn: Callable[..., Any]
    path: str | None
    meta: Callable[..., Any]
    decomposition: Callable[..., Any] | None = None
    tags: frozenset[SymbolTag] = frozenset()

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        context = current_context()
        if context is None:
            return self.fn(*args, **kwargs)
        return record(context, self, args, kwargs)

    def __repr__(self) -> str:
        return f"Symbol({self.id})"


def recorded_symbol(fn: Callable[..., Any], *, langctx: str, path: str, symbol_id: str | None = None,
                    tags: frozenset[SymbolTag] = frozenset()) -> Symbol:
    """The symbol of ``fn`` (at the dotted ``path``) for records a transform or the jit appends to a
    trace itself (a value read's check, a per-call read, a backward's error): it is never called on
    proxies, so its meta raises."""

    def never_traced(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{fn.__name__} is recorded directly, never called on proxies")

    return Symbol(id=symbol_id or fn.__name__, name=fn.__name__, langctx=langctx, fn=fn, path=path,
                  meta=never_traced, tags=tags)


@dataclass(frozen=True, slots=True, eq=False)
class BoundSymbol:
    """One recorded call of a symbol.

    Attributes:
        symbol: the operation.
        args, kwargs: proxies and constants it was called with.
        output: proxies (in any nesting of tuples/lists) and constants it returned.
        subsymbols: the calls that make it up (its decomposition, or a subclass's resolution).
        source: the user's Python stack that produced it, outermost first (None when unknown).
        header: an optional one-line comment printed above it (e.g. the dispatching subclass).
    """

    symbol: Symbol
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    subsymbols: tuple[BoundSymbol, ...] = ()
    source: tuple[SourceFrame, ...] | None = None
    header: str | None = field(default=None)


@dataclass(frozen=True, slots=True)
class Inlined:
    """What a call handler returns for a call it expressed through other records of the enclosing
    scope (a data-dependent op as a checked read plus static ops): the call itself is not recorded.
    ``splice``: the records made while the call was handled take its place (a ``__torch_function__``
    that computed the call through other operations)."""

    output: Any
    splice: bool = False


def record(context: Any, symbol: Symbol, args: tuple, kwargs: dict) -> Any:
    """Record one call of ``symbol`` into the context's innermost scope and return its outputs.

    The record holds the lists and dicts among the arguments as they are at the call (Note [Records
    hold their arguments' containers as called])."""
    source = context.source()
    recorded_args, recorded_kwargs = args, kwargs
    if any(type(a) in _MUTABLE for a in args) or any(type(v) in _MUTABLE for v in kwargs.values()):
        recorded_args, recorded_kwargs = _as_called(args), _as_called(kwargs)
    subsymbols: list[BoundSymbol] = []
    context.scopes.append(subsymbols)
    try:
        handler = context.call_handler
        output = handler(symbol, args, kwargs) if handler is not None else symbol.meta(*args, **kwargs)
    finally:
        context.scopes.pop()
    if type(output) is Inlined:
        if output.splice:
            context.scopes[-1].extend(subsymbols)
        return output.output
    context.scopes[-1].append(BoundSymbol(symbol, recorded_args, recorded_kwargs, output, tuple(subsymbols),
                                          source))
    return output


# Note [Records hold their arguments' containers as called]
# ``torch.stack(xs)`` is given the program's own list. Kept as it is, the record changed with the list:
# after ``xs.append(t)`` the trace stacked three tensors where the call stacked two (and ran before
# ``t`` existed: a crash on the cached call), and a caller's list that the jit sets back after tracing
# lost what the function appended to it. Lists and dicts, nested in any tuple, list or dict, are
# copied at the call (their items are not: tensors and numbers are what they were).
_MUTABLE = (list, dict)


def _as_called(tree: Any) -> Any:
    t = type(tree)
    if t is list or t is tuple:
        return t(_as_called(v) for v in tree)
    if t is dict:
        return {k: _as_called(v) for k, v in tree.items()}
    return tree
