"""A cached call whose value check failed goes on in another entry that computed the same up to that check.

Entries that a value read tells apart (a k-means loop that stops on ``allclose`` after 2, 3 or 5 rounds)
share their computation up to the read where they differ. A cached call tries them in turn, and each
one it tries runs its computation from the start until its check fails (Note [Resuming at a failed
check]). ``Resumable`` is an entry's side of going on instead: it tags a failed check with the values the
computation had made, and it runs its own computation from after a check given another entry's values.

Invariants:
- a call goes on in entry B after entry A's check at record ``i`` failed only where A's and B's records
  up to ``i`` are the same calls of the same symbols on the same constants (proxies renamed in order of
  appearance), B's check at ``i`` expects the value A's read, A's records up to ``i`` write no input,
  draw no random numbers and change no thread setting, B's prologue accepted the call and gave the very
  inputs A's gave; in any other case B runs its whole computation, as it would have anyway;
- only frames of the code compiled here (the entry's computation on torch, its suffixes) are read, so
  a computation lowered by an executor (whose names differ) is never resumed from;
- the values handed on are those A's frame held at the failed check: nothing is copied or recomputed.
"""

from __future__ import annotations

import dataclasses
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

import optree
import torch

from jitcore.executors.plan import OnLowered
from jitcore.ir import BoundSymbol, Trace, compile_trace
from jitcore.ir.codegen import trace_filename
from jitcore.ir.proxy import Proxy
from jitcore.ir.trace import value_leaves
from jitcore.jit.probe import may_write
from jitcore.jit.read_rollback import Undo, storage_of, written_storages
from jitcore.langctx.reads import READ, ReadSite, ValueCheckFailed, same_value
from jitcore.proxies import TensorProxy

__all__ = ["ENABLED", "Resumable", "Resumption", "resumption", "run_resumed"]

# Note [Resuming at a failed check]
# A call that entry A's check at record i sent away ran A's records 0..i. Entry B, tried next, would
# run its records 0..i again and then go on. Where those records are A's (the same symbols, called on
# the same inputs with the same constants: compared once per pair of entries, on the records with
# proxies numbered in order of appearance), and B's check at i expects what A's read, B's run up to i
# would compute exactly what A's did: so the call goes on with B's records after i, on the values A's
# frame held at the check (read from the traceback of the failed check; the frame is kept alive by
# it). What makes a second run of the same records differ from the first is excluded: A's records up
# to i must write no input (A's undo would put it back), draw no random numbers and change no thread
# setting (``read_rollback.Undo`` finds none), and B's prologue must accept the call with the very
# inputs A's had (its inputs compared by identity, numbers by value). A value A's frame no longer held
# (deleted after its last use in A) or any other mismatch runs B's whole computation instead. k-means
# over 100 calls (5 entries, 2 to 5 rounds each): 6.5 ms a call before, as each entry tried ran its
# rounds again (benchmarks/bench_value_reads.py).

# Note [Values the other entry no longer held]
# The failed entry's code deletes each value after its last use there, which may come before the check
# where another entry needs it: k-means' assignments ``a`` of the round that stops the loop are returned
# by the entry that stops there, and deleted before the check by one that goes on. The entry going on
# remakes them: its records before the check that make what it lacks from what the frame held (an
# ``argmin`` of a ``cdist``), run again before its records after the check. Only where that is the same
# computation: no record remade writes in place, draws random numbers, reads a clock, or makes a tensor
# whose storage a record before the check writes (a view written through would have been changed).
# Otherwise the entry runs its whole computation.
#
# Note [Lowered frames]
# An executor lowers a hot entry's trace (jitcore/executors/plan.py): fused regions are calls, and values
# inside them are no names of the frame. The names it keeps name the trace's values, but a value rebound
# by an in-place write (``t = op_(t)``, rewritten out of place under the same name) may be bound at
# another point of the lowered code than the trace's; so of a lowered frame only names the trace binds
# once are read, and what is lacking is remade as above. Without this an entry tried first on most
# calls (the newest), once lowered after 100 calls, sent every call back to the start of the next.

ENABLED = True  # False: a failed check's call goes on in the next entry from the start (measured against)
_PROXY = "proxy"
_ANEW = frozenset(("random", "per_call", "python_random"))  # a record that gives another value when run again
_PLAIN = frozenset((int, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format))


@dataclasses.dataclass(slots=True)
class Resumption:
    """Where a failed call goes on: the entry's resumable, the check's record, the values by name.

    Attributes:
        resumable: the entry the call goes on in.
        index: the record (a value check) after which it goes on.
        values: the failed computation's values, by the names of the entry it goes on in.
        inputs: the inputs the failed computation was called with.
    """

    resumable: Resumable
    index: int
    values: dict[str, Any]
    inputs: tuple


_Suffix = tuple[Callable[..., Any], tuple[str, ...]]  # the function, the names of its arguments
_PENDING = threading.local()  # the Resumption of the call about to run in an entry's resume path


class Resumable:
    """One entry's computation as it can be gone on in after a check, and its failed checks tagged."""

    def __init__(self, trace: Trace) -> None:
        """Args:
            trace: the computation trace (plain tensors) of the entry; its computation (on torch, or
                lowered by an executor) is set as ``full`` once compiled.
        """
        self.trace = trace
        self.records = trace.bound_symbols
        self.full: Callable[..., Any]  # set once the executors compiled the trace
        self._filenames: set[str] = set()  # code whose frames hold the trace's values by name (its own:
        self._own = False  # made on the first question, printing the trace costs)
        self._lowered: set[str] = set()  # code an executor lowered the trace to (Note [Lowered frames])
        self._single: frozenset[str] | None = None  # names bound once in the trace
        self._canon: list[tuple] | None = None
        self._order: dict[str, int] = {}  # proxy name -> number in order of appearance
        self._names: list[str] = []  # number -> proxy name
        self._counts: list[int] = []  # record -> proxies numbered up to it
        self._same: weakref.WeakKeyDictionary[Resumable, dict[int, bool]] = weakref.WeakKeyDictionary()
        self._positions = {a.name: i for i, a in enumerate(trace.args) if isinstance(a, Proxy)}
        self._suffixes: dict[tuple[int, frozenset[str]], _Suffix | None] = {}
        self._taken: dict[int, frozenset[str]] = {}  # record -> the names the records after it take
        self._checks: dict[int, int | None] | None = None  # id of a check's site -> its record
        self._quiet: dict[int, bool] = {}  # record -> nothing to undo in records 0..record

    @staticmethod
    def of(trace: Trace) -> Resumable | None:
        """The resumable of a computation trace that checks values; None for one that checks none."""
        if not any(b.symbol is READ for b in trace.bound_symbols):
            return None
        return Resumable(trace)

    def watching(self, on_lowered: OnLowered) -> OnLowered:
        """``on_lowered`` (given an executor's execution trace of this trace), noting that trace's code."""

        def noted(trace: Trace) -> Callable[[], None] | None:
            self._lowered.add(trace_filename(trace))
            return on_lowered(trace)

        return noted

    def computation(self, *inputs: Any) -> Any:
        """The entry's computation, its failed checks tagged with what it was called with."""
        try:
            return self.full(*inputs)
        except ValueCheckFailed as failed:
            _tag(failed, self, inputs)
            raise

    def resumed(self, *inputs: Any) -> Any:
        """The computation of a call that goes on after another entry's check (the pending
        ``Resumption``), or the whole computation where it cannot (the Note above)."""
        pending: Resumption | None = getattr(_PENDING, "value", None)
        _PENDING.value = None
        if pending is None or pending.resumable is not self or not _same_inputs(inputs, pending.inputs):
            return self.computation(*inputs)
        made = self._suffix(pending.index, frozenset(pending.values))
        if made is None:
            return self.computation(*inputs)
        suffix, names = made
        positions = self._positions
        values = [inputs[positions[n]] if n in positions else pending.values[n] for n in names]
        try:
            return suffix(*values)
        except ValueCheckFailed as failed:
            _tag(failed, self, inputs)
            raise

    def _suffix(self, index: int, held: frozenset[str]) -> _Suffix | None:
        """The records after ``index``, preceded by those of before it that remake what they take and
        ``held`` lacks (Note [Values the other entry no longer held]), as a function of the names they
        take from the call's inputs and ``held``; None where what they lack cannot be remade so."""
        inputs = frozenset(self._positions)
        taken = self._taken.get(index)
        if taken is None:
            taken = self._taken[index] = frozenset(
                p.name for p in _taken(self.records[index + 1:], self.trace.output))
        lacking = taken - held - inputs
        key = (index, lacking)
        if key in self._suffixes:
            return self._suffixes[key]
        made = None
        remade = self._remaking(index, lacking, held | inputs)
        if remade is not None:
            records = [*remade, *self.records[index + 1:]]
            args = _taken(records, self.trace.output)
            trace = Trace(name=self.trace.name, args=args, bound_symbols=records, output=self.trace.output,
                          header=[f"resumed after record {index}"], imports=self.trace.imports,
                          names=self.trace.names)
            function = compile_trace(trace)
            self._filenames.add(trace_filename(trace))
            made = (function, tuple(p.name for p in args))
        self._suffixes[key] = made
        return made

    def _remaking(self, index: int, lacking: frozenset[str],
                  held: frozenset[str]) -> list[BoundSymbol] | None:
        """The records up to ``index`` that remake ``lacking`` from ``held``, in order; None where one of
        them writes, draws or reads anew, or makes a tensor whose storage a record up to ``index`` writes."""
        needed, chosen = set(lacking), []
        for bsym in reversed(self.records[:index + 1]):
            if not needed:
                break
            made = {p.name for p in _proxies(bsym.output)}
            if not made & needed:
                continue
            if may_write(bsym) or bsym.symbol.tags & _ANEW:
                return None
            chosen.append(bsym)
            needed = (needed - made) | {p.name for p in _proxies((bsym.args, bsym.kwargs))
                                        if p.name not in held}
        if needed:
            return None
        outputs = {storage_of(p) for b in chosen for p in _proxies(b.output) if isinstance(p, TensorProxy)}
        if chosen and outputs & (written_storages(self.records[:index + 1]) | {None}):
            return None
        return chosen[::-1]

    def held_by(self, frame: types.FrameType) -> bool:
        """Whether ``frame`` runs this entry's code (compiled from the trace or lowered from it)."""
        if not self._own:
            self._filenames.add(trace_filename(self.trace))
            self._own = True
        return frame.f_code.co_filename in self._filenames or frame.f_code.co_filename in self._lowered

    def held(self, frame: types.FrameType) -> dict[str, Any] | None:
        """The values ``frame`` holds by the trace's names, if it runs this entry's code: all of them in
        code compiled from the trace, those bound once in the trace in lowered code (Note [Lowered
        frames]); None for any other frame."""
        filename = frame.f_code.co_filename
        if filename in self._filenames:
            return dict(frame.f_locals)
        if filename not in self._lowered:
            return None
        if self._single is None:
            bound: dict[str, int] = {a.name: 1 for a in self.trace.args if isinstance(a, Proxy)}
            for bsym in self.records:
                for p in _proxies(bsym.output):
                    bound[p.name] = bound.get(p.name, 0) + 1
            self._single = frozenset(n for n, count in bound.items() if count == 1)
        return {n: v for n, v in frame.f_locals.items() if n in self._single}

    def check_at(self, site: ReadSite) -> int | None:
        """The record of the check of ``site`` (the very object), if it is one of the trace's own."""
        if self._checks is None:
            checks: dict[int, int | None] = {}
            for i, b in enumerate(self.records):
                if b.symbol is READ:  # a site checked twice: which one failed is not known
                    checks[id(b.args[0])] = None if id(b.args[0]) in checks else i
            self._checks = checks
        return self._checks.get(id(site))

    def quiet_until(self, index: int) -> bool:
        """Whether records 0..``index`` leave nothing to undo (no input written, no draw, no setting)."""
        quiet = self._quiet.get(index)
        if quiet is None:
            quiet = self._quiet[index] = Undo.of(self.trace, self.records[:index + 1]) is None
        return quiet

    def canon(self) -> list[tuple]:
        """The records, proxies numbered in order of appearance, each as (the call without a check's
        expected value, that value)."""
        if self._canon is None:
            for a in self.trace.args:
                if isinstance(a, Proxy):
                    self._number(a.name)
            canon = []
            for bsym in self.records:
                canon.append(self._record(bsym))
                self._counts.append(len(self._names))
            self._canon = canon
        return self._canon

    def same_prefix(self, other: Resumable, index: int) -> bool:
        """Whether ``other``'s records 0..``index`` are this one's (the Note above)."""
        known = self._same.setdefault(other, {})
        same = known.get(index)
        if same is None:
            mine, theirs = self.canon(), other.canon()
            same = known[index] = len(mine) > index and len(theirs) > index \
                and mine[:index] == theirs[:index] and mine[index][0] == theirs[index][0] \
                and self._input_kinds() == other._input_kinds()  # the checks before ``index`` included
        return same

    def renamed(self, other: Resumable, index: int, values: dict[str, Any]) -> dict[str, Any]:
        """``other``'s values of records 0..``index`` (a prefix the two share) by this entry's names."""
        names, limit = other._names, self._counts[index]
        return {mine: values[names[n]] for mine, n in self._order.items() if n < limit and names[n] in values}

    def _input_kinds(self) -> tuple:
        return tuple(self._order[a.name] if isinstance(a, Proxy) else ("name", a) for a in self.trace.args)

    def _number(self, name: str) -> int:
        n = self._order.get(name)
        if n is None:
            n = self._order[name] = len(self._names)
            self._names.append(name)
        return n

    def _record(self, bsym: BoundSymbol) -> tuple:
        args, expected = bsym.args, None
        if bsym.symbol is READ:  # the expected value apart: at the failed check, compared with the value read
            args, expected = (args[0], None, *args[2:]), self._tree(args[1])
        symbol = bsym.symbol  # a data-dependent op's symbol is made per pass: what the code calls decides
        return ((symbol.id, symbol.path, id(symbol.fn), symbol.tags), self._tree((args, bsym.kwargs)),
                self._tree(bsym.output)), expected

    def _tree(self, tree: Any) -> tuple:
        leaves, spec = optree.tree_flatten(tree, none_is_leaf=True)
        return spec, tuple(self._leaf(v) for v in leaves)

    def _leaf(self, value: Any) -> Any:
        if isinstance(value, Proxy):
            return _PROXY, self._number(value.name)
        kind = type(value)
        if kind in _PLAIN:
            return kind, value
        if kind is float:
            return kind, value.hex()  # -0.0 is not 0.0; nan is nan
        if kind is slice:
            return kind, self._leaf(value.start), self._leaf(value.stop), self._leaf(value.step)
        if kind is ReadSite:
            return kind, value.key
        return "object", id(value)  # anything else: the very object (held by the trace)


def resumption(failed: ValueCheckFailed, entries: list[Any]) -> tuple[Any, Resumption] | None:
    """The first of ``entries`` (cache entries with a ``resumable`` attribute) that the call a check of
    which ``failed`` can go on in, and how; None where none can (the Note above)."""
    tag = getattr(failed, "jitcore_resume", None)
    if tag is None or not ENABLED:
        return None
    source, inputs = tag
    index = source.check_at(failed.site)
    if index is None or not source.quiet_until(index):
        return None
    for entry in entries:
        target = entry.resumable
        if target is None or target is source or not target.same_prefix(source, index) \
                or not same_value(target.records[index].args[1], failed.got):
            continue
        held = _held_at(failed, source)
        if held is None:
            return None
        return entry, Resumption(target, index, target.renamed(source, index, held), inputs)
    return None


def run_resumed(call: Callable[[tuple, dict], Any], how: Resumption, args: tuple, kwargs: dict) -> Any:
    """``call`` (an entry's resume path) on the call's arguments, going on as ``how`` says."""
    _PENDING.value = how
    try:
        return call(args, kwargs)
    finally:
        _PENDING.value = None


def _tag(failed: ValueCheckFailed, resumable: Resumable, inputs: tuple) -> None:
    if getattr(failed, "jitcore_resume", None) is None:
        failed.jitcore_resume = (resumable, inputs)


def _held_at(failed: ValueCheckFailed, resumable: Resumable) -> dict[str, Any] | None:
    """The values held by the innermost frame of ``resumable``'s code on the failed check's way out."""
    found, tb = None, failed.__traceback__
    while tb is not None:
        found = tb.tb_frame if resumable.held_by(tb.tb_frame) else found
        tb = tb.tb_next
    return None if found is None else resumable.held(found)


def _same_inputs(inputs: tuple, others: tuple) -> bool:
    return len(inputs) == len(others) and all(
        a is b or (type(a) is type(b) and type(a) in (int, float, bool) and same_value(a, b))
        for a, b in zip(inputs, others))


def _proxies(tree: Any) -> list[Proxy]:
    """The proxies in ``tree``, a slice's bounds among them."""
    return [v for v in value_leaves(tree) if isinstance(v, Proxy)]


def _taken(records: list[BoundSymbol], output: Any) -> list[Proxy]:
    """The proxies ``records`` and ``output`` read before any of the records makes them."""
    made: set[str] = set()
    taken: dict[str, Proxy] = {}
    for bsym in records:
        for p in _proxies((bsym.args, bsym.kwargs)):
            if p.name not in made:
                taken.setdefault(p.name, p)
        made.update(p.name for p in _proxies(bsym.output))
    for p in _proxies(output):
        if p.name not in made:
            taken.setdefault(p.name, p)
    return list(taken.values())

