"""The executor interface: what an executor may claim of a trace and what it returns for it.

An executor is a plain object with a ``name``. It looks at the top-level bound symbols of a final
computation trace (flattened: plain tensors, torch and aten ops) one by one and *claims* those it
can run. Two kinds exist, as in Lightning Thunder:

- an **operator executor** (``implement``) runs one claimed bound symbol its own way; the call keeps
  its arguments and outputs and the original becomes its subsymbol;
- a **fusion executor** (``fuse``) receives *regions*: maximal runs of consecutive bound symbols it
  claimed, and returns one callable for the whole region (``fusion0 = ...``).

Invariants:
- ``claim`` answers None to claim a bound symbol, or a short reason why not (it is logged);
- what an executor returns is called with real tensors in place of the proxies, and must compute
  exactly what the bound symbols it replaces compute (values, dtypes, aliasing of outputs);
- an executor that raises while implementing or fusing declines: the region runs on the ``torch``
  executor, with a log line saying why (never the whole program).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from jitcore.ir import BoundSymbol, Proxy

__all__ = ["Executor", "OperatorExecutor", "FusionExecutor", "Region", "register_executor", "get_executor",
           "registered_executors"]


@runtime_checkable
class Executor(Protocol):
    """What every executor has: a name, and a claim on bound symbols."""

    name: str

    def claim(self, bsym: BoundSymbol) -> str | None:
        """None when this executor runs ``bsym``; otherwise why it does not (a short phrase)."""
        ...


@runtime_checkable
class OperatorExecutor(Executor, Protocol):
    """Runs single bound symbols."""

    def implement(self, bsym: BoundSymbol) -> Callable[..., Any]:
        """A callable taking ``bsym``'s arguments (real values) and returning its output."""
        ...


@runtime_checkable
class FusionExecutor(Executor, Protocol):
    """Runs regions of consecutive bound symbols as one call."""

    def fuse(self, region: Region) -> Callable[..., Any]:
        """A callable taking the region's inputs (real tensors, in order) and returning its outputs
        (a sequence, in order)."""
        ...


@dataclass(frozen=True, slots=True)
class Region:
    """Consecutive top-level bound symbols of a trace, claimed together.

    Attributes:
        bound_symbols: the calls, in trace order.
        inputs: the proxies the calls read that none of them produces, in order of first use.
        outputs: the proxies the calls produce that are read after the region (or returned).
        grad: the region runs under torch's autograd (a trace whose inputs require grad that the
            grad transform did not split): what it returns must keep the autograd graph, so inputs
            that require grad are differentiated through it.
    """

    bound_symbols: tuple[BoundSymbol, ...]
    inputs: tuple[Proxy, ...]
    outputs: tuple[Proxy, ...]
    grad: bool = False


_REGISTRY: dict[str, Executor] = {}


def register_executor(executor: Executor) -> Executor:
    """Make ``executor`` available by its name (``jit(f, executors=("mine", "torch"))``).

    Raises:
        TypeError: it is neither an operator nor a fusion executor.
        ValueError: another executor already has that name.
    """
    if not isinstance(executor, (OperatorExecutor, FusionExecutor)):
        raise TypeError(f"an executor needs name, claim() and implement() or fuse(); got {executor!r}")
    existing = _REGISTRY.get(executor.name)
    if existing is not None and existing is not executor:
        raise ValueError(f"an executor named {executor.name!r} is already registered")
    _REGISTRY[executor.name] = executor
    return executor


def get_executor(name: str) -> Executor:
    """The registered executor called ``name``.

    Raises:
        ValueError: no executor has that name.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown executor {name!r}; available: {sorted(_REGISTRY)}") from None


def registered_executors() -> list[str]:
    """The names of the registered executors."""
    return sorted(_REGISTRY)
