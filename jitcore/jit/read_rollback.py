"""The cached computation's side of value reads: a call whose read check fails leaves no trace.

A value read (jitcore/jit/value_reads.py) is checked by the computation where the traced program read
it; a call whose value differs raises ValueCheckFailed there and runs another entry. ``with_rollback``
wraps such a computation so that the failed call's writes to its inputs, RNG draws and thread-setting
changes made before the check are undone first.

Invariants: a trace without reads is run as it is; only inputs that a record before the last read may
write are copied, and only on calls of such traces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import optree
import torch

from jitcore.errors import DataDependentError
from jitcore.ir import BoundSymbol, Trace
from jitcore.jit.probe import may_write, written_arguments
from jitcore.langctx.input_writes import writes_self_only
from jitcore.langctx.reads import READ, ReadSite, ValueCheckFailed
from jitcore.langctx.thread_state import SET_GRAD_ENABLED, STATE_CHANGE_SYMBOLS, ThreadState
from jitcore.proxies import TensorProxy
from jitcore.proxies.generator import GeneratorProxy

__all__ = [
    "Undo", "has_reads", "nondeterministic_read", "read_sites", "storage_of", "with_rollback",
    "with_settings_restored", "writes_inputs_themselves", "written_storages",
]


def _holds_read(bsym: BoundSymbol) -> bool:
    """A read, or a call whose resolution reads (Note [Reads inside a subclass's code])."""
    return bsym.symbol is READ or any(_holds_read(sub) for sub in bsym.subsymbols)


def _flat(records: list[BoundSymbol]) -> Iterator[BoundSymbol]:
    """``records`` and their subsymbols, in program order."""
    for bsym in records:
        yield bsym
        yield from _flat(list(bsym.subsymbols))


def has_reads(bound_symbols: list[BoundSymbol]) -> bool:
    """Whether a trace checks values it read while tracing."""
    return any(b.symbol is READ for b in bound_symbols)


def read_sites(bound_symbols: list[BoundSymbol]) -> list[ReadSite]:
    """The read sites a trace checks, in order."""
    return [b.args[0] for b in bound_symbols if b.symbol is READ]


def nondeterministic_read(failed: Exception) -> DataDependentError:
    """The error when a new entry's first run reads another value than its trace saw."""
    return DataDependentError(
        f"the value read {failed} although the trace was just made from this very call: "
        "the computation before the read is not deterministic",
        hints=(
            "make the computation before this read deterministic (seeded random ops, deterministic kernels)",
            "or keep the read outside the jitted function",
        ),
    )


def with_rollback(trace: Trace, computation: Callable[..., Any]) -> Callable[..., Any]:
    """``computation``, undoing its writes to its inputs, its RNG draws and its changes of the thread's
    settings (grad mode, inference mode, autocast) when a read check fails (the call then runs another
    entry, which must find the inputs and the thread as the caller passed them).

    Only inputs whose storage a record before the last read may write are copied, only when there
    is such a record; a trace without reads is returned as it is.
    """
    records = trace.bound_symbols
    last_read = max((i for i, b in enumerate(records) if _holds_read(b)), default=-1)
    if last_read < 0:
        return computation
    # with the record holding it: a subclass call's own writes and draws
    undo = Undo.of(trace, records[:last_read + 1])
    if undo is None:
        return computation

    def run(*inputs: Any) -> Any:
        restore = undo.take(inputs)
        try:
            return computation(*inputs)
        except ValueCheckFailed:
            restore()
            raise

    return run


@dataclasses.dataclass(frozen=True, slots=True)
class Undo:
    """What some of a computation's records change that a call undone must find as the caller had it.

    Attributes:
        positions: the inputs whose storage a record may write (copied before the call).
        random: a record draws from torch's generators (the default one, the caller's at ``generators``).
        drawn: Python's generators a draw advances (jit/nondeterministic.py).
        state_changes: a record enters ``no_grad``, ``inference_mode``, autocast or sets global state.
        generators: the inputs that are the caller's generators (Note [Generators the caller passes]).
    """

    positions: tuple[int, ...]
    random: bool
    drawn: tuple[Any, ...]
    state_changes: bool
    generators: tuple[int, ...]

    @staticmethod
    def of(trace: Trace, records: list[BoundSymbol]) -> Undo | None:
        """What ``records`` (some of ``trace``'s) change; None where they change nothing of the kinds."""
        written = written_storages(records)
        positions = tuple(
            i for i, a in enumerate(trace.args) if isinstance(a, TensorProxy) and _storage(a) in written)
        random = any("random" in b.symbol.tags for b in _flat(records))
        drawn = tuple({id(g): g for b in _flat(records) if "python_random" in b.symbol.tags
                       for g in [b.args[0].__self__]}.values())
        state_changes = any(
            b.symbol in STATE_CHANGES or "global_state" in b.symbol.tags for b in _flat(records))
        if not positions and not random and not drawn and not state_changes:
            return None
        generators = tuple(
            i for i, a in enumerate(trace.args) if isinstance(a, GeneratorProxy)) if random else ()
        return Undo(positions, random, drawn, state_changes, generators)

    def take(self, inputs: tuple) -> Callable[[], None]:
        """Remember what the call's records may change; returns what puts it back."""
        saved = [inputs[i].detach().clone() for i in self.positions]
        rng = torch.get_rng_state() if self.random else None
        states = [inputs[i].get_state() for i in self.generators]
        python_states = [g.getstate() for g in self.drawn]
        thread = ThreadState.take() if self.state_changes else None

        def restore() -> None:
            if thread is not None:
                thread.restore()
            for generator, state in zip(self.drawn, python_states):
                generator.setstate(state)
            with torch.no_grad():
                for i, copy in zip(self.positions, saved):
                    inputs[i].copy_(copy)
            if rng is not None:
                torch.set_rng_state(rng)
            for i, state in zip(self.generators, states):
                inputs[i].set_state(state)

        return restore


STATE_CHANGES = frozenset(STATE_CHANGE_SYMBOLS.values())


def written_storages(records: list[BoundSymbol]) -> set[int | None]:
    """The storages ``records`` (and their subsymbols) may write; None for a tensor without one."""
    written: set[int | None] = set()
    for bsym in _flat(records):
        if may_write(bsym):
            written |= {  # a subclass value's storage is its inner tensors', written by its subsymbols
                storage_of(v) for v in optree.tree_leaves(_written(bsym)) if isinstance(v, TensorProxy)
            }
    return written


def _written(bsym: BoundSymbol) -> Any:
    """The arguments a record that may write may write (Note [In-place methods write only self])."""
    named = written_arguments(bsym)
    if named:
        return named
    if bsym.args and writes_self_only(bsym.symbol.fn, bsym.kwargs):
        return bsym.args[0]
    return bsym.args, bsym.kwargs


# Note [A computation that raises inside no_grad]
# Eagerly, an error raised inside ``with torch.no_grad():`` (``autocast``, ``inference_mode``,
# ``set_default_dtype`` in a ``with`` of the program's) leaves through the block's ``__exit__``, which
# puts the setting back. The computation holds the block as two records, ``_set_grad_enabled(False)``
# ... ``_set_grad_enabled(True)``: an op between them that raised on values (``x[i]`` out of range)
# left grad mode off in the caller's thread for good, and every later call of anything built no graph.
# A computation whose trace changes the thread's settings puts them back as the call found them when
# it raises. (A program that calls ``torch.set_grad_enabled(False)`` outside a ``with`` block and then
# raises keeps grad off eagerly: the call then runs eagerly, Note [A raising call that leaves grad mode
# changed] in jit/raising_calls.py.)
def with_settings_restored(trace: Trace, computation: Callable[..., Any]) -> Callable[..., Any]:
    """``computation``, putting the thread's settings back as the call found them when it raises
    (Note [A computation that raises inside no_grad]); a trace that changes none is returned as it is."""
    changes = {b.symbol for b in _flat(trace.bound_symbols)
               if b.symbol in STATE_CHANGES or "global_state" in b.symbol.tags}
    if not changes:
        return computation
    if changes == {SET_GRAD_ENABLED}:  # ``no_grad`` blocks only: one flag (a snapshot of all costs ~10 us)
        def run_grad(*inputs: Any) -> Any:
            grad = torch.is_grad_enabled()
            try:
                return computation(*inputs)
            except BaseException:
                torch._C._set_grad_enabled(grad)  # noqa: SLF001
                raise

        return run_grad

    def run(*inputs: Any) -> Any:
        thread = ThreadState.take()
        try:
            return computation(*inputs)
        except BaseException:
            thread.restore()
            raise

    return run


def writes_inputs_themselves(trace: Trace) -> bool:
    """Whether every record of ``trace`` that may write the storage of one of its tensor arguments
    writes that argument itself, not a view or ``.data`` of it (Note [A raise before the computation
    writes an input], jit/raising_calls.py)."""
    inputs = {id(a) for a in trace.args if isinstance(a, TensorProxy)}
    storages = {storage_of(a) for a in trace.args if isinstance(a, TensorProxy)}
    for bsym in _flat(trace.bound_symbols):
        if may_write(bsym):
            for value in optree.tree_leaves(written_arguments(bsym) or (bsym.args, bsym.kwargs)):
                if isinstance(value, TensorProxy) and id(value) not in inputs \
                        and storage_of(value) in storages:
                    return False
    return True


def _storage(proxy: TensorProxy) -> int:
    return proxy.shadow.untyped_storage()._cdata


def storage_of(proxy: TensorProxy) -> int | None:
    """The storage of ``proxy``'s shadow, None for a tensor without one of its own (a wrapper subclass)."""
    try:
        return _storage(proxy)
    except (RuntimeError, NotImplementedError):  # a wrapper subclass: no storage of its own
        return None
