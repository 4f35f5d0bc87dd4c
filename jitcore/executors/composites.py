"""Composite calls: the aten calls one CompositeImplicitAutograd operator made, run as that one call.

The grad transform records what runs below torch's autograd, so a torch-level ``linear`` is in the
forward trace as ``t``, ``view``, ``mm``, ``_unsafe_view``: four Python calls of the generated code where
eager makes one. ``composite_calls`` rewrites such a run of the trace the torch executor runs into one
call of the composite operator (``torch.ops.aten.linear.default``, ``matmul.default``,
``reshape.default``) whose subsymbols are the calls it stands for, printed under it, each with its user
line.

Invariants:
- a run is replaced only when the composite operator, called on tensors with the run's inputs'
  metadata and the ``requires_grad`` they have when the trace runs, with grad mode off, makes exactly
  the recorded calls: the same operators in the same order with the same arguments (Note [A composite
  is checked by replaying it]). It then runs the same kernels on the same tensors, so values, dtypes,
  strides and aliasing of what it returns are those of the calls it replaces;
- only a trace that runs with grad mode off is rewritten (the grad transform's forward);
- a value of the run that is read after it, other than the composite's output, is made by a call that
  reads only the run's inputs, or by a view of such values; those calls stay in the trace, before the
  composite call (Note [Values of a run read after it]). Any other run is kept as recorded;
- rewriting never fails a compile: a trace it cannot read is returned as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch._ops import OpOverload
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from jitcore.ir import BoundSymbol, Proxy, Trace, proxies_in
from jitcore.langctx.aten import aten_symbol
from jitcore.proxies import TensorProxy

__all__ = ["composite_calls"]

_aten = torch.ops.aten
_METADATA_OPS = frozenset({_aten.sym_size.default, _aten.sym_size.int, _aten.sym_stride.default,
                           _aten.sym_stride.int, _aten.sym_numel.default, _aten.sym_storage_offset.default,
                           torch.ops.prim.device.default, torch.ops.prim.layout.default})


@dataclass(frozen=True, slots=True)
class _Candidate:
    """``bound_symbols[start:end]`` of a trace, maybe made by ``op(*args)``."""

    start: int
    end: int
    op: OpOverload
    args: tuple[Any, ...]


def composite_calls(trace: Trace) -> Trace:
    """``trace`` with each run of calls a composite operator provably makes as one call of it (the
    module docstring); ``trace`` itself when there is none. The trace must run with grad mode off."""
    try:
        return _rewritten(trace)
    except Exception:  # noqa: BLE001 - the invariant above: a trace not understood runs as recorded
        return trace


def _rewritten(trace: Trace) -> Trace:
    bound_symbols = list(trace.bound_symbols)
    last_read = _last_reads(trace)
    inputs = {id(a) for a in trace.args if isinstance(a, Proxy)}
    body: list[BoundSymbol] = []
    replay = _Replay(inputs, _reshaped_in_place(trace))
    i = 0
    while i < len(bound_symbols):
        made = None
        for candidate in _candidates(bound_symbols, i):
            made = _composite(bound_symbols, candidate, last_read, replay)
            if made is not None:
                break
        if made is None:
            body.append(bound_symbols[i])
            i += 1
            continue
        body.extend(made)
        i = candidate.end
    calls = sum(1 for b in body if b.subsymbols and b.symbol.fn is not b.subsymbols[0].symbol.fn)
    if not calls:
        return trace
    runs = "1 run of aten calls" if calls == 1 else f"{calls} runs of aten calls, each"
    header = f"composite calls: {runs} run as one call of the operator that made it"
    return Trace(trace.name, trace.args, body, trace.output, [*trace.header, header], trace.imports,
                 trace.names, trace.input_notes)


def _reshaped_in_place(trace: Trace) -> set[int]:
    """ids of the tensors an in-place op of ``trace`` gives other metadata (``t_``, ``transpose_``,
    ``resize_``: ``torch.Tag.inplace_view``). Their proxies' shadows hold the metadata of the end of the
    trace, not of every call reading them (Note [A composite is checked by replaying it])."""
    return {id(b.args[0]) for b in trace.bound_symbols
            if b.args and torch.Tag.inplace_view in getattr(b.symbol.fn, "tags", ())}


def _last_reads(trace: Trace) -> dict[int, int]:
    """id of a proxy -> the index of the last call reading it (len(...) for the trace's output)."""
    last: dict[int, int] = {}
    for index, bsym in enumerate(trace.bound_symbols):
        for p in proxies_in((bsym.args, bsym.kwargs)):
            last[id(p)] = index
    for p in proxies_in(trace.output):
        last[id(p)] = len(trace.bound_symbols)
    return last


# Note [Which runs are tried as a linear]
# ``aten.linear`` decomposes (torch/aten/src/ATen/native/Linear.cpp) into ``addmm(b, x, w.t())`` for a 2-d
# input with a bias, ``view(addmm(b, view(x), w.t()))`` for a contiguous input of more dimensions with a
# bias, and ``matmul(x, w.t())`` otherwise, which for an input of more dimensions folds it into ``view``,
# ``mm``, ``_unsafe_view`` or not (``should_fold`` reads contiguity and requires_grad). The anchor of a
# candidate is its ``mm`` or ``addmm``; its weight is what the ``t`` before it transposed, its input the
# anchor's first matrix or what it is the fold of (``view(x)``, ``_unsafe_view(clone(x))``), and a
# ``view``/``_unsafe_view`` of the
# anchor's output right after it may end it. Every reading is only a guess: the replay decides.
def _candidates(bound_symbols: Sequence[BoundSymbol], i: int) -> Iterator[_Candidate]:
    """The candidates starting at ``bound_symbols[i]``: a linear's, a matmul's, a reshape's."""
    yield from _linear_candidates(bound_symbols, i)
    yield from _matmul_candidates(bound_symbols, i)
    yield from _reshape_candidates(bound_symbols, i)


def _linear_candidates(bound_symbols: Sequence[BoundSymbol], i: int) -> Iterator[_Candidate]:
    """The linear candidates starting at ``bound_symbols[i]``, longest first."""
    for k in range(i, min(i + 4, len(bound_symbols))):
        anchor = bound_symbols[k]
        fn = anchor.symbol.fn
        if fn is _aten.mm.default and len(anchor.args) == 2 and not anchor.kwargs:
            bias, matrix, transposed = None, *anchor.args
        elif fn is _aten.addmm.default and len(anchor.args) == 3 and not anchor.kwargs:
            bias, matrix, transposed = anchor.args
        else:
            continue
        made = {id(b.output): j for j, b in enumerate(bound_symbols[i:k], i) if isinstance(b.output, Proxy)}
        t = made.get(id(transposed))
        if t is None or bound_symbols[t].symbol.fn is not _aten.t.default:
            return
        weight = bound_symbols[t].args[0]
        inputs = [*_folded(bound_symbols, made, matrix), matrix]
        ends = [k + 1]
        after = bound_symbols[k + 1] if k + 1 < len(bound_symbols) else None
        if (after is not None and after.symbol.fn in (_aten.view.default, _aten._unsafe_view.default)
                and after.args[0] is anchor.output):
            ends.insert(0, k + 2)
        for end in ends:
            for x in inputs:
                args = (x, weight) if bias is None else (x, weight, bias)
                yield _Candidate(i, end, _aten.linear.default, args)
        return


# Note [Which runs are tried as a matmul or a reshape]
# ``aten.matmul`` (torch/aten/src/ATen/native/LinearAlgebra.cpp, ``_matmul_impl``) ends in one product
# (``dot``, ``mv``, ``mm``, ``bmm``), before which it reshapes its inputs (``unsqueeze``, ``view``,
# ``expand``, and ``reshape``'s ``clone`` + ``_unsafe_view`` of an input no view can fold) and after which
# it may reshape the product (``view``, ``_unsafe_view``, ``squeeze``). The anchor of a candidate is that
# product; the run starts at ``bound_symbols[i]`` when every call from there to the anchor makes a value a
# later call of the run reads, and its tensors read from outside (one or two) are the matmul's arguments,
# in the order the run reads them first (also the other order where the run starts with a transpose:
# matmul of a 2-d ``a`` and a batched ``b`` is ``(b.mT @ a.mT).mT``). Replays the operator refuses are
# the costly ones (an exception through fake tensors), hence no other orders. ``aten.reshape`` of a tensor
# no view can reshape is ``_unsafe_view(clone(x, memory_format=torch.contiguous_format), shape)``: the
# candidate is ``reshape(x, shape)``. Attention blocks make both (q @ k.transpose(-2, -1) copies its
# transposed inputs for ``bmm``; ``o.transpose(1, 2).reshape(b, s, d)`` copies the heads back). As for
# linear, the replay decides; a run of one call is never rewritten (it saves nothing).
_PRODUCTS = frozenset({_aten.bmm.default, _aten.mm.default, _aten.mv.default, _aten.dot.default})
_RESHAPES_AFTER = frozenset({_aten.view.default, _aten._unsafe_view.default, _aten.squeeze.dim,
                             _aten.squeeze.default})
_TRANSPOSES = frozenset({_aten.transpose.int, _aten.t.default})
_MATMUL_WINDOW = 8  # two inputs each expanded, cloned and _unsafe_viewed, the product, its view


def _matmul_candidates(bound_symbols: Sequence[BoundSymbol], i: int) -> Iterator[_Candidate]:
    """The matmul candidates starting at ``bound_symbols[i]``, longest first."""
    for k in range(i, min(i + _MATMUL_WINDOW - 1, len(bound_symbols))):
        if bound_symbols[k].symbol.fn not in _PRODUCTS:
            continue
        run = bound_symbols[i:k + 1]
        for j, bsym in enumerate(run[:-1]):
            if not any(bsym.output is p for later in run[j + 1:]
                       for p in proxies_in((later.args, later.kwargs))):
                return
        made = {id(b.output) for b in run}
        roots: list[Any] = []
        for bsym in run:
            for p in proxies_in((bsym.args, bsym.kwargs)):
                if isinstance(p, TensorProxy) and id(p) not in made and all(p is not r for r in roots):
                    roots.append(p)
        if len(roots) not in (1, 2):
            return
        orders = [(roots[0], roots[0])] if len(roots) == 1 else [(roots[0], roots[1])]
        if len(roots) == 2 and run[0].symbol.fn in _TRANSPOSES:  # matmul(a, b) of a 2-d a: (b.mT @ a.mT).mT
            orders.append((roots[1], roots[0]))
        ends = [k + 1]
        after = bound_symbols[k + 1] if k + 1 < len(bound_symbols) else None
        if after is not None and after.symbol.fn in _RESHAPES_AFTER and after.args[0] is run[-1].output:
            ends.insert(0, k + 2)
        for end in ends:
            if end - i >= 2:
                for args in orders:
                    yield _Candidate(i, end, _aten.matmul.default, args)
        return


def _reshape_candidates(bound_symbols: Sequence[BoundSymbol], i: int) -> Iterator[_Candidate]:
    """``reshape(x, shape)`` for ``clone(x)`` at ``bound_symbols[i]`` followed by ``_unsafe_view`` of it."""
    if i + 1 >= len(bound_symbols):
        return
    clone, view = bound_symbols[i], bound_symbols[i + 1]
    if (clone.symbol.fn is _aten.clone.default and view.symbol.fn is _aten._unsafe_view.default
            and len(view.args) == 2 and view.args[0] is clone.output and clone.args):
        yield _Candidate(i, i + 2, _aten.reshape.default, (clone.args[0], view.args[1]))


def _folded(bound_symbols: Sequence[BoundSymbol], made: dict[int, int], matrix: Any) -> list[Any]:
    """What ``matrix`` may be the fold of: ``x`` of ``view(x)``, or of ``_unsafe_view(clone(x))`` (a copy
    of an input that is not contiguous); none when it is neither."""
    j = made.get(id(matrix))
    if j is None:
        return []
    fn, source = bound_symbols[j].symbol.fn, bound_symbols[j].args[0]
    if fn is _aten.view.default:
        return [source]
    copied = made.get(id(source))
    if (fn is _aten._unsafe_view.default and copied is not None
            and bound_symbols[copied].symbol.fn is _aten.clone.default):
        return [bound_symbols[copied].args[0]]
    return []


def _composite(bound_symbols: Sequence[BoundSymbol], candidate: _Candidate, last_read: dict[int, int],
               replay: _Replay) -> list[BoundSymbol] | None:
    """The calls standing for ``candidate``'s run (those making its values read later, Note [Values of a
    run read after it], then the composite call), or None when the composite does not make the run."""
    run = bound_symbols[candidate.start:candidate.end]
    output = run[-1].output
    if not all(b.symbol.langctx == "aten" and isinstance(b.output, TensorProxy) for b in run):
        return None
    kept = _kept(run, candidate, last_read)
    if kept is None or not replay.makes(candidate.op, candidate.args, run):
        return None
    symbol = aten_symbol(candidate.op)
    return [*kept, BoundSymbol(symbol, candidate.args, {}, output, tuple(run), run[0].source, run[0].header)]


# Note [Values of a run read after it]
# A value a run makes that the trace reads after it (a view the backward saves: linear's 2-d view of its
# input, matmul's view of an expanded input for ``bmm``'s gradient) is still made by its own call, before
# the composite call, which makes it again inside. That is the same value (the same kernels on the same
# tensors), and costs its call again: so a kept call reads only the run's inputs, or is a view
# (``view``, ``expand``, ``t``, ...: its output aliases its input, no memory is written) of kept values.
# A kept copy of a kept value (matmul's ``clone`` of a transposed input, which ``bmm``'s gradient
# saves) would copy twice: such a run is not rewritten.
def _kept(run: Sequence[BoundSymbol], candidate: _Candidate, last_read: dict[int, int]
          ) -> list[BoundSymbol] | None:
    """The calls of ``run`` (but its last) that make values read after it and the calls those read
    within it, in order; None when one of them may not be kept (Note above)."""
    needed = {id(b.output) for b in run[:-1] if last_read.get(id(b.output), -1) >= candidate.end}
    for bsym in reversed(run[:-1]):
        if id(bsym.output) in needed:
            needed.update(id(p) for p in proxies_in((bsym.args, bsym.kwargs)))
    arguments = {id(p) for p in proxies_in(candidate.args)}
    kept = []
    made: set[int] = set()
    for bsym in run[:-1]:
        if id(bsym.output) not in needed:
            continue
        reads = {id(p) for p in proxies_in((bsym.args, bsym.kwargs))}
        if not reads <= arguments | made:
            return None
        if reads & made and not _is_view(bsym):
            return None
        kept.append(bsym)
        made.add(id(bsym.output))
    return kept


def _is_view(bsym: BoundSymbol) -> bool:
    """An aten call whose output aliases its first argument without writing it (``view``, ``expand``)."""
    schema = getattr(bsym.symbol.fn, "_schema", None)
    if schema is None or len(schema.returns) != 1 or not schema.arguments:
        return False
    returned, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return (returned is not None and first is not None and not returned.is_write and not first.is_write
            and returned.before_set == first.before_set)


# Note [A composite is checked by replaying it]
# A CompositeImplicitAutograd operator is C++ that calls other operators, choosing them by its
# arguments' metadata (dimensions, contiguity, layout, requires_grad: matmul folds its input when one
# requires grad) and by nothing else the trace does not fix. The replay calls the operator on fake
# tensors with each input's sizes, strides, dtype and device, requiring grad as the input will when the
# trace runs (a trace input as its shadow, which the prologue guards; a value the trace made, with grad
# mode off, does not), with grad mode off, and records the operators the call reaches below autograd.
# When they are the run's calls, in order, on the same arguments (tensors matched by identity through
# the run, numbers by type and value), the composite call runs those very kernels on those tensors.
# The replay runs in the thread state of the compile, which is the entry's first call: autocast (an
# autograd.Function's forward runs under the caller's autocast, and the prologue guards it) and the
# process's backend flags are those of every call the entry answers. Symbolic sizes are not replayed
# (the run is kept), nor a tensor whose metadata an in-place op changes anywhere in the trace (``t_``,
# ``transpose_``: its proxy has one shadow, with the metadata it has at the end of the pass, which a call
# before the change did not see).
class _Replay:
    """Replays candidate composites on fake tensors; what a replay made is kept by the metadata it was
    made for (Note [Replays kept by metadata])."""

    def __init__(self, trace_inputs: set[int], reshaped_in_place: set[int]) -> None:
        self._trace_inputs = trace_inputs
        self._reshaped_in_place = reshaped_in_place

    def makes(self, op: OpOverload, args: tuple[Any, ...], run: Sequence[BoundSymbol]) -> bool:
        """Whether ``op(*args)`` makes exactly ``run`` (Note above)."""
        tensors = [a for a in args if isinstance(a, TensorProxy)]
        if not tensors or not all(_static(a) for a in tensors):
            return False
        if not all(isinstance(a, TensorProxy) or _int_sequence(a) for a in args):
            return False
        if any(id(a) in self._reshaped_in_place for a in tensors):
            return False
        key = (op, tuple(self._metadata(a) for a in args))
        made = _REPLAYS.get(key) if not torch._C._is_any_autocast_enabled() else None  # noqa: SLF001
        if made is None:
            try:
                made = _replayed(op, key[1])
            except Exception:  # noqa: BLE001 - the operator refuses such arguments: it made no run
                made = ((), _UNKNOWN())
            if not torch._C._is_any_autocast_enabled():  # noqa: SLF001
                if len(_REPLAYS) >= _KEPT:
                    _REPLAYS.clear()
                _REPLAYS[key] = made
        refs: dict[int, tuple[str, int]] = {id(a): ("input", i) for i, a in enumerate(args)
                                             if isinstance(a, TensorProxy)}
        calls = []
        for j, bsym in enumerate(run):
            calls.append((bsym.symbol.fn, _normal(bsym.args, refs), _normal(bsym.kwargs, refs)))
            refs[id(bsym.output)] = ("call", j)
        return made == (tuple(calls), ("call", len(run) - 1))

    def _metadata(self, proxy: Any) -> tuple[Any, ...]:
        if not isinstance(proxy, TensorProxy):
            return ("value", tuple(proxy))
        shadow = proxy.shadow
        requires_grad = id(proxy) in self._trace_inputs and shadow.requires_grad
        return tuple(shadow.shape), tuple(shadow.stride()), shadow.dtype, shadow.device, requires_grad


# Note [Replays kept by metadata]
# A replay on fake tensors costs about 2 ms (a Hugging Face Llama of 2 layers has 15 linears). What it
# makes depends only on the operator, its inputs' metadata and requires_grad (the key), grad mode (always
# off here), autocast and the process's backend flags: replays are kept by key while no autocast is
# enabled, and made anew under autocast. The calls are kept with tensors as references (the n-th input,
# the output of the n-th call), numbers with their types.
_REPLAYS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_KEPT = 1024


def _replayed(op: OpOverload, metadata: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
    """The calls ``op`` makes below autograd on fake tensors of ``metadata``, with grad mode off, and
    the reference of what it returns."""
    mode = FakeTensorMode()
    fakes: list[Any] = []
    for meta in metadata:
        if meta[0] == "value":  # a shape, passed as the list the trace passes
            fakes.append(list(meta[1]))
            continue
        shape, stride, dtype, device, requires_grad = meta
        with mode:
            fake = torch.empty_strided(shape, stride, dtype=dtype, device=device)
        fakes.append(fake.requires_grad_(requires_grad))
    recorder = _Recorder()
    with torch.no_grad(), mode, recorder:
        result = op(*fakes)
    refs: dict[int, tuple[str, int]] = {id(f): ("input", i) for i, f in enumerate(fakes)
                                         if isinstance(f, torch.Tensor)}
    calls = []
    for j, (func, args, kwargs, out) in enumerate(recorder.calls):
        calls.append((func, _normal(args, refs), _normal(kwargs, refs)))
        refs[id(out)] = ("call", j)
    return tuple(calls), refs.get(id(result), _UNKNOWN())


def _static(proxy: TensorProxy) -> bool:
    """A strided tensor of static sizes at offset 0, which ``empty_strided`` makes."""
    shadow = proxy.shadow
    return (shadow.layout is torch.strided and all(type(n) is int for n in (*shadow.shape, *shadow.stride()))
            and shadow.storage_offset() == 0)


def _int_sequence(value: Any) -> bool:
    """A list or tuple of ints (a static shape)."""
    return isinstance(value, (list, tuple)) and all(type(n) is int for n in value)


class _Recorder(TorchDispatchMode):
    """Records the operators a call reaches below autograd: (op, args, kwargs, output)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[OpOverload, tuple, dict, Any]] = []

    def __torch_dispatch__(self, func: OpOverload, types: Any, args: tuple = (), kwargs: dict | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func not in _METADATA_OPS:
            self.calls.append((func, args, kwargs, out))
        return out


class _UNKNOWN:
    """A tensor neither an input nor made by a call: equal to nothing."""


def _normal(value: Any, refs: dict[int, tuple[str, int]]) -> Any:
    """``value`` with tensors (real, fake or proxies) as their references, numbers and other leaves with
    their types, lists as tuples: equal for two calls exactly when they take the same arguments."""
    if isinstance(value, (torch.Tensor, Proxy)):
        return refs.get(id(value)) or _UNKNOWN()
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v, refs) for v in value)
    if isinstance(value, dict):
        return tuple((k, _normal(v, refs)) for k, v in value.items())
    return (type(value), value)
