"""The probe: real values of traced tensors, computed while tracing when the program reads them.

A traced program that needs a tensor's *values* (``if t.any():``, ``t.item()``, the size of
``x[mask]``) gets them from the probe: it runs the pass's top-level records so far on the call's real
inputs, eagerly, and keeps going from where it stopped at the next read (each record runs once per
pass). The reads are then checked on every cached call (jitcore/langctx/reads.py), so a value the
probe saw is never reused for a call where it differs.

Invariants:
- the probe never changes what the caller can observe: an input storage that a record writes is
  copied first (copy on write, views included), and the thread's grad mode, autocast settings and
  RNG state are as they were after each probe;
- the probe's RNG stream is the one the first call's computation will draw from: it starts at the
  state the call began with and continues across probes, so random ops before a read give the value
  the computation will see;
- it runs with the program's grad mode (the call's, changed by the ``no_grad()`` records it runs): a
  backward the program runs (jitcore/jit/autograd_calls.py) needs the graph of the forward records.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import optree
import torch

from jitcore.ir import BoundSymbol, Proxy, Trace
from jitcore.langctx.input_writes import WRITES_NO_DATA, may_write_inputs
from jitcore.langctx.thread_state import RngState, ThreadState, rng_state, set_rng_state
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import SYMBOLIC_NUMBERS, NumberProxy, traced_value
from jitcore.proxies.protocol import tensor_unflatten
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.proxies.typed import is_plain_subclass

__all__ = ["Probe", "may_write", "runs_subsymbols", "written_arguments"]

_NOT_RUN = frozenset({"bookkeeping", "per_call"})


class Probe:
    """Runs one pass's records on the real inputs, incrementally, to answer value reads."""

    def __init__(self, trace: Trace, real_inputs: dict[int, Any]) -> None:
        """Args:
            trace: the pass's trace; its top-level records are run in order.
            real_inputs: ``id(input proxy) -> real tensor``, filled by the pass as inputs are bound.
        """
        self._trace = trace
        self._real_inputs = real_inputs
        self._keep: list[Any] = []  # proxies whose ids key _env stay alive while the pass runs
        self._start = (rng_state(), torch.is_grad_enabled())  # as the call began
        # the thread's dispatch keys as the call began (Note [The probe runs above autograd])
        self._dispatch_keys = (torch._C._dispatch_tls_local_include_set(),  # noqa: SLF001
                               torch._C._dispatch_tls_local_exclude_set())  # noqa: SLF001
        self._restart()

    def _restart(self) -> None:
        """Forget every value computed: the next run starts from the first record, as the call began
        (Note [A backward after records run without their graph])."""
        self._env: dict[int, Any] = {}
        self._done = 0  # records of the trace already run
        self._rng: RngState = self._start[0]
        self._copies: dict[int, Any] = {}  # caller's storage key -> the probe's private copy of it
        self._leaf_copies: dict[int, torch.Tensor] = {}  # id(caller's leaf requiring grad) -> its copy
        self._grad = self._start[1]  # the program's grad mode where the records stopped
        self._nested_done: set[int] = set()  # records of open scopes already run (values_within)
        self._nested_rng: tuple[torch.Tensor, list[torch.Tensor]] | None = None  # where they stopped
        self._rebuilds: dict[int, BoundSymbol] = {}  # id(output) -> a subclass value's rebuild, not run yet
        self._graphless = False  # a subclass call autograd would record ran as its operations

    def values(self, tree: Any) -> Any:
        """``tree`` with every proxy replaced by its real value (numbers by their traced value)."""
        self._run_pending()
        return optree.tree_map(self._value, tree, none_is_leaf=True)

    def real_inputs(self) -> list[Any]:
        """The caller's tensors bound so far."""
        return list(self._real_inputs.values())

    def values_within(self, scopes: list[list[BoundSymbol]], tree: Any) -> Any:
        """``tree`` with its real values, where it was computed inside a call still being recorded (a
        subclass's ``__torch_dispatch__`` reading an inner tensor): the top-level records so far, then
        the records of the open ``scopes`` (outermost first), each run once: once the call is
        recorded, the rest of its records run from where these stopped, random draws included (Note
        [The probe runs a subclass call's operations]). The caller makes sure none of them writes a
        tensor it did not make (a call the probe runs natively runs them all again)."""
        self._run_pending()
        pending = [b for scope in scopes for b in scope if id(b) not in self._nested_done]
        if pending:
            with _restored_thread_state(self._dispatch_keys):
                torch.set_grad_enabled(self._grad)
                set_rng_state(self._nested_rng or self._rng)
                for bsym in pending:
                    self._run(bsym)
                    self._nested_done.add(id(bsym))
                    self._keep.append(bsym)
                self._nested_rng = rng_state()  # where the rest of the call continues
        return optree.tree_map(self._value, tree, none_is_leaf=True)

    # --- running records ---------------------------------------------------------------------------
    def _run_pending(self) -> None:
        records = self._trace.bound_symbols[self._done:]
        if not records:
            return
        if self._graphless and any("backward" in b.symbol.tags for b in records):
            self._restart()  # Note [A backward after records run without their graph]
            records = self._trace.bound_symbols
        with _restored_thread_state(self._dispatch_keys):
            torch.set_grad_enabled(self._grad)
            # a call some of whose records ran for a read continues after their draws; a call run
            # natively draws them again (Note [The probe runs a subclass call's operations])
            resumed = self._nested_rng is not None and runs_subsymbols(records[0])
            set_rng_state(self._nested_rng if resumed else self._rng)
            self._nested_rng = None
            # a backward among them differentiates the subclass calls before it natively: those must
            # build their graph (Note [The probe runs a subclass call's operations])
            backward = max((i for i, b in enumerate(records) if "backward" in b.symbol.tags), default=-1)
            try:
                for i, bsym in enumerate(records):
                    self._run(bsym, graph=i < backward)
                    self._done += 1
            finally:
                self._rng = rng_state()
                self._grad = torch.is_grad_enabled()  # as the records left it (``no_grad()`` records)

    def _run(self, bsym: BoundSymbol, *, graph: bool = False) -> None:
        if "bookkeeping" in bsym.symbol.tags and isinstance(bsym.output, SubclassTensorProxy):
            self._rebuilds[id(bsym.output)] = bsym  # Note [A backward after records run without their graph]
# Whether a backward follows a subclass call is known only when its record arrives. A read before it
# (NJT attention reads its lengths; an optimizer step then reads ``state["step"].item()`` after
# ``loss.backward()``) had the probe run the calls so far as their operations, without autograd's
# graph: the backward then found no gradient for the parameters ("t98 has no value"; eager computes).
# When a backward arrives after such a call, the probe starts again from the first record, as the call
# began (its RNG state, grad mode, no private copies: the caller's tensors were never written), and
# runs the calls before the backward natively. The values it gave earlier reads are computed again,
# the same (the same inputs and draws).
# Note [Subclass values the probe rebuilds]
            self._keep.append(bsym)
            return
        if bsym.symbol.tags & _NOT_RUN or id(bsym) in self._nested_done:
            return  # a clock read or a random draw: its number is the traced one (Proxy.value)
        if runs_subsymbols(bsym) and not (graph and _builds_graph(bsym)):
            self._graphless = self._graphless or _builds_graph(bsym)
            for sub in bsym.subsymbols:  # Note [The probe runs a subclass call's operations]
                self._run(sub)
            return
        args, kwargs = optree.tree_map(self._value, (bsym.args, bsym.kwargs), none_is_leaf=True)
        if may_write(bsym):
            written = written_arguments(bsym)
            self._copy_shared(optree.tree_leaves((args, kwargs), none_is_leaf=True) if written is None
                              else [self._value(a) for a in written])
            args, kwargs = optree.tree_map(self._value, (bsym.args, bsym.kwargs), none_is_leaf=True)
        with _torch_functions_for(bsym):
            out = bsym.symbol.fn(*args, **kwargs)
        old = optree.tree_leaves(bsym.output, none_is_leaf=True)
        new = optree.tree_leaves(out, none_is_leaf=True)
        if len(old) != len(new):  # a record whose structure the fn does not reproduce: map what matches
            new = [out] if len(old) == 1 else new
        for proxy, value in zip(old, new):
            if isinstance(proxy, Proxy):
                self._bind(proxy, value)

    def _bind(self, proxy: Proxy, value: Any) -> None:
        """``proxy``'s value; a subclass value's inner proxies get its inner tensors (a read inside a
        later ``__torch_dispatch__`` asks for them)."""
        self._env[id(proxy)] = value
        self._keep.append(proxy)
        if isinstance(proxy, SubclassTensorProxy) and isinstance(value, torch.Tensor) \
                and type(value) is not torch.Tensor:
            for name, inner in proxy.inner_tensors().items():
                real = getattr(value, name, None)
                if isinstance(inner, Proxy) and isinstance(real, torch.Tensor):
                    self._bind(inner, real)

    def _value(self, leaf: Any) -> Any:
        if isinstance(leaf, NumberProxy):
            return leaf.value
        if not isinstance(leaf, TensorProxy):  # a constant, or a caller's tensor a record holds itself
            if type(leaf) in _SIZE_HOLDERS:
                return _traced_sizes(leaf)
            if isinstance(leaf, Proxy):  # a generator: the program's own, or a copy of the caller's
                found = self._env.get(id(leaf))
                if found is None:
                    found = self._env[id(leaf)] = _generator_copy(self._real_inputs[id(leaf)])
                return found
            return self._private(leaf)  # until the pass ends (jit/held_tensors.py)
        found = self._env.get(id(leaf))
        if found is None and id(leaf) not in self._real_inputs and id(leaf) in self._rebuilds:
            self._run_rebuild(self._rebuilds.pop(id(leaf)))  # a value made inside; an input is the caller's
            found = self._env.get(id(leaf))
        if found is None and id(leaf) not in self._real_inputs and isinstance(leaf, SubclassTensorProxy):
            # a value no record made (Note [Subclass values the probe rebuilds])
            found = self._env[id(leaf)] = self._around_inner(leaf)
            self._keep.append(leaf)
        if found is None:
            found = self._real_inputs.get(id(leaf))
            if found is None:
                raise LookupError(f"{leaf.name} has no value: it was not computed by the records so far")
            found = self._env[id(leaf)] = self._private(found)
        return found

    def _run_rebuild(self, bsym: BoundSymbol) -> None:
        """Build a subclass value from its inner tensors' values (Note [Subclass values the probe
        rebuilds])."""
        args, kwargs = optree.tree_map(self._value, (bsym.args, bsym.kwargs), none_is_leaf=True)
        self._env[id(bsym.output)] = bsym.symbol.fn(*args, **kwargs)
        self._keep.append(bsym.output)

    def _around_inner(self, proxy: SubclassTensorProxy) -> torch.Tensor:
        """A subclass value no record made (a zero gradient of pass 1's shadow graph, a value built while
        a backward was resolved) around its inner tensors' values, by its class's ``__tensor_unflatten__``.

        Raises:
            LookupError: an inner tensor's value is not computed by the records so far.
        """
        names, ctx = proxy.inner_flatten()
        inner = {n: self._value(getattr(proxy, n)) for n in names}
        outer = proxy.outer_metadata
        return tensor_unflatten(proxy.subclass, inner, ctx, _traced_sizes(outer.shape),
                                tuple(_traced_size(n) for n in outer.stride()))

    def _private(self, value: Any) -> Any:
        """The probe's private copy of a caller's tensor it has written (copy on write), else the value."""
        if self._copies and _is_plain(value) and _storage_key(value) in self._copies:
            return self._copy_of(value)
        return value

    def _copy_of(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` over the probe's private copy of its storage. A leaf that requires grad stays one
        (one copy per tensor), and a view of such a leaf stays a differentiable view of its copy (Note
        [A written parameter the probe differentiates])."""
        storage = self._copies[_storage_key(value)]
        if not value.requires_grad:
            return _view_of(storage, value)
        if value.is_leaf:
            leaf = self._leaf_copies.get(id(value))
            if leaf is None:
                leaf = self._leaf_copies[id(value)] = _view_of(storage, value).requires_grad_()
                self._keep.append(value)  # its id keys _leaf_copies
            return leaf
        base = value._base  # noqa: SLF001
        if base is not None and base.is_leaf and base.requires_grad \
                and _storage_key(base) == _storage_key(value):
            return self._copy_of(base).as_strided(value.size(), value.stride(), value.storage_offset())
        return _view_of(storage, value)

    # --- copy on write -----------------------------------------------------------------------------
    def _copy_shared(self, leaves: list[Any]) -> None:
        """Give every caller-owned storage about to be written a private copy (views follow)."""
        shared = {_storage_key(t) for t in self._real_inputs.values() if _is_plain(t)} - self._copies.keys()
        for key in {_storage_key(t) for t in leaves if _is_plain(t)} & shared:
            original = next(t for t in leaves if _is_plain(t) and _storage_key(t) == key)
            self._copies[key] = original.untyped_storage().clone()
            for pid, value in list(self._env.items()):
                if _is_plain(value) and _storage_key(value) == key:
                    self._env[pid] = self._copy_of(value)


# Note [The probe runs a subclass call's operations]
# A record of a call on tensor subclass values holds, as subsymbols, the operations its resolution
# recorded (the ops its ``__torch_dispatch__`` ran on the inner tensors, the reads it made, the values
# it built with ``__tensor_unflatten__``): what the flattened computation runs. The probe runs those,
# not the call: the subclass's Python code does not run again natively while tracing (a counter it
# keeps would count twice, into the traced state: ``cls.calls += 1`` on the number being traced), its
# writes are plain ops on inner tensors (copied first when the caller's), and the operations of a call
# whose reads ran them already (``values_within``) are not run twice: the rest continue from where
# they stopped, random draws included. A call autograd must see whole (an ``autograd.Function``, a
# backward inside the program) still runs natively, and so does a call whose outputs require grad
# when a backward the probe runs after it differentiates them: its inner operations run below
# autograd (eagerly too), so only the call itself builds the graph that backward walks (an optimizer
# step reading ``state["step"].item()`` after ``loss.backward()`` on a subclass parameter).
# Note [A backward after records run without their graph]
# Whether a backward follows a subclass call is known only when its record arrives. A read before it
# (NJT attention reads its lengths; an optimizer step then reads ``state["step"].item()`` after
# ``loss.backward()``) had the probe run the calls so far as their operations, without autograd's
# graph: the backward then found no gradient for the parameters ("t98 has no value"; eager computes).
# When a backward arrives after such a call, the probe starts again from the first record, as the call
# began (its RNG state, grad mode, no private copies: the caller's tensors were never written), and
# runs the calls before the backward natively. The values it gave earlier reads are computed again,
# the same (the same inputs and draws).
# Note [A written parameter the probe differentiates]
# A training step with two optimizers (a GAN: the discriminator's step, then the generator's loss through
# the discriminator; LBFGS's closure run again after each update) writes a parameter in place and then
# differentiates a loss through it. The probe's copy on write gave the written parameter a copy that
# required no grad: the backward it ran for a later read (the next optimizer's ``state["step"].item()``)
# raised "One of the differentiated Tensors does not require grad" where eager computes, as a parameter
# written under ``no_grad()`` stays a leaf that requires grad. A caller's leaf that requires grad has one
# copy that is a leaf requiring grad too, and a view of it that requires grad is a view of that copy,
# so the records after the write build the graph eager builds.
# Note [Subclass values the probe rebuilds]
# A subclass call's records end with the rebuild of its result from the inner tensors its dispatch made
# (``unflatten_tensor_subclass``, a bookkeeping record): the probe binds the inner tensors, not the
# value. A record run natively later may need the value itself: MaskedTensor's binary dispatch reads
# ``torch.eq(mask_a, mask_b).all().item()`` and then unwraps each operand with ``get_data()``, an
# ``autograd.Function`` the probe runs on the real operands, so for ``a + a * 2`` the value of
# ``a * 2`` was missing and the call ran eagerly. Such a value is built when first asked for, by its
# rebuild record on the inner tensors' values (the subclass's ``__tensor_unflatten__``, no op of it).
# A subclass value made without such a record (the zero gradient pass 1's shadow graph gives a
# MaskedTensor, Note [A zero gradient keeps its subclass's structure]; the gradient MaskedTensor's
# ``get_data`` backward wraps) is built the same way from its proxy's inner tensors: MaskedTensor's
# ``exp`` backward reads its masks twice, and the second read found no value (the call ran eagerly).
def runs_subsymbols(bsym: BoundSymbol) -> bool:
    """Whether the probe runs ``bsym``'s subsymbols in its place (a call on tensor subclass values)."""
    return bool(bsym.subsymbols) and not {"autograd_function", "backward"} & bsym.symbol.tags and any(
        isinstance(v, SubclassTensorProxy)
        for v in optree.tree_leaves((bsym.args, bsym.kwargs, bsym.output), none_is_leaf=True))


# Note [The probe runs no __torch_function__ again]
# A record is what a subclass's ``__torch_function__`` did, not what the program called: the pass ran
# the class's override (its counter, its log, its scaling) and recorded the torch calls it made, under
# ``DisableTorchFunctionSubclass`` as ``super().__torch_function__`` runs them. The probe runs those
# records on the caller's real instances, so with torch functions on, the class saw each call again:
# a logging class logged ``alias``, ``sum`` and ``__float__`` for ``float(x.numpy().sum())`` where
# eager logs ``numpy`` only, and a class that doubles ``sum``'s result had the probe double it twice
# (the read differed from the computation's: JC-T002 where eager computes). The probe runs a record
# as it was recorded, with subclass ``__torch_function__`` off. A Function's ``apply`` and a backward
# run the user's Python (a ``forward``, a ``backward``) that eager runs with torch functions on; they
# keep them.
def _torch_functions_for(bsym: BoundSymbol) -> contextlib.AbstractContextManager[Any]:
    """The torch-function state ``bsym`` runs under in the probe (Note [The probe runs no
    __torch_function__ again])."""
    if {"autograd_function", "backward"} & bsym.symbol.tags:
        return contextlib.nullcontext()
    return torch._C.DisableTorchFunctionSubclass()  # noqa: SLF001


def _builds_graph(bsym: BoundSymbol) -> bool:
    """Whether grad mode is on and an output of ``bsym`` requires grad (autograd records the call)."""
    outputs = optree.tree_leaves(bsym.output, none_is_leaf=True)
    return torch.is_grad_enabled() and any(isinstance(v, TensorProxy) and v.requires_grad for v in outputs)


def _generator_copy(generator: torch.Generator) -> torch.Generator:
    """A generator in ``generator``'s state: the probe's draws must not advance the caller's."""
    copy = torch.Generator(device=generator.device)
    copy.set_state(generator.get_state())
    return copy


def _view_of(storage: Any, like: torch.Tensor) -> torch.Tensor:
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - a plain subclass's metadata, natively
        view = torch.empty(0, dtype=like.dtype, device=like.device)
        return view.set_(storage, like.storage_offset(), like.size(), like.stride())


# Note [Calls that write their arguments under another name]
# Batch norm and instance norm in training update their running statistics in place, with no trailing
# underscore, no ``out=`` and, at the torch level, no schema that says so (``nn.BatchNorm1d`` calls
# ``F.batch_norm``). Taken as pure, the probe ran them on the caller's buffers while answering a later
# value read (Adam's ``state["step"].item()`` in a training step), and the computation updated them
# again: the running statistics moved twice on that call. They count as writers of those two arguments
# only (whatever ``training`` is: it may be positional): copying the weight too would hand the probe's
# backward a copy that requires no grad.
_RUNNING_STATS: dict[Any, int] = {  # where running_mean is; running_var follows it
    torch.nn.functional.batch_norm: 1, torch.nn.functional.instance_norm: 1,
    torch.batch_norm: 3, torch.native_batch_norm: 3, torch.instance_norm: 3,
}


def written_arguments(bsym: BoundSymbol) -> list[Any] | None:
    """The arguments a record writes under another name (Note [Calls that write their arguments under
    another name]); None for other records."""
    first = _RUNNING_STATS.get(bsym.symbol.fn)
    if first is None:
        return None
    return [bsym.args[i] if len(bsym.args) > i else bsym.kwargs.get(name)
            for i, name in ((first, "running_mean"), (first + 1, "running_var"))]


def may_write(bsym: BoundSymbol) -> bool:
    """Whether a record may write one of its tensor arguments (in place, ``out=``)."""
    fn = bsym.symbol.fn
    if getattr(fn, "__name__", None) in WRITES_NO_DATA:
        return False  # requires_grad_: flags, not data
    if fn in _RUNNING_STATS:
        return True
    return "inplace" in bsym.symbol.tags or may_write_inputs(fn, bsym.kwargs)


def _is_plain(value: Any) -> bool:
    """A tensor with a storage of its own: a plain tensor, a parameter, or a subclass without a
    ``__torch_dispatch__`` (an optimizer's state of a plain-subclass parameter, made by ``zeros_like``;
    Note [The probe copies a plain subclass's storage])."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter) and not is_plain_subclass(type(value)):
        return False
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - never the user's code, natively
        return value.layout is torch.strided


def _storage_key(t: torch.Tensor) -> int:
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
        return t.untyped_storage()._cdata


# Note [The probe copies a plain subclass's storage]
# Copy on write kept to plain tensors and parameters: a caller's tensor of a plain subclass (``class
# P(torch.Tensor)``, no ``__torch_dispatch__``) that a record writes in place was written by the probe
# itself, and then again by the computation. Adam's step on such a parameter reads ``step.item()``
# after ``exp_avg.lerp_(grad, ...)`` on its state (``zeros_like(p)``, of the parameter's class): the
# call that traced the step with its state made moved the moments twice (a wrong answer). The copy is
# a plain tensor over the copied storage, as the records (already resolved) need.


# Note [The probe runs above autograd]
# A read inside a subclass's ``__torch_dispatch__`` (MaskedTensor's binary ops compare masks) has the
# probe run the records so far from below autograd: the dispatcher excludes the autograd keys there,
# so a record run natively built no graph, and a backward among them raised "element 0 of tensors does
# not require grad" (a MaskedTensor function with two backwards; eager computes). The probe runs its
# records with the dispatch keys the call began with.
@contextlib.contextmanager
def _restored_thread_state(dispatch_keys: tuple[Any, Any]) -> Iterator[None]:
    """Grad mode, autocast settings, the default dtype and the RNG as they were (records may change
    them); inside, the thread's dispatch keys are ``dispatch_keys`` (included, excluded)."""
    state = ThreadState.take()
    rng = rng_state()
    try:
        with torch._C._ForceDispatchKeyGuard(*dispatch_keys):  # noqa: SLF001
            yield
    finally:
        state.restore()
        set_rng_state(rng)


_SIZE_HOLDERS = frozenset({*SYMBOLIC_NUMBERS, torch.Size, slice})  # leaves to optree that may hold sizes


def _traced_sizes(leaf: Any) -> Any:
    """A symbolic size, or a ``torch.Size`` or ``slice`` (``x[:, :n]``) holding some, with the traced
    call's values, without a guard: the probe computes this call's values, which the sizes' symbols
    cover for every call (``int()`` would pin a symbol to this call's value). A ragged size is the
    caller's nested int (Note [The probe's ragged sizes])."""
    if type(leaf) is slice:  # its bounds may be names too (``x[:n + 1]``): their traced values
        return slice(*(v.value if isinstance(v, NumberProxy) else _traced_size(v)
                       for v in (leaf.start, leaf.stop, leaf.step)))
    if type(leaf) is torch.Size:
        return torch.Size([_traced_size(n) for n in leaf])
    return _traced_size(leaf)


# Note [The probe's ragged sizes]
# A size a record was given can be an NJT's ragged size: ``flatten(-2)`` of an NJT is recorded as
# ``reshape(t, (3, s0, 8))``, ``s0`` the symbol of the offsets' shadow (Note [Nested ints],
# langctx/shadows.py), whose hint is the caller's nested int (``j1``). The probe runs such a record
# natively on the caller's NJT (a backward follows: its graph is needed), where only ``j1`` names that
# size; it gets the hint. Before, NestedTensor's ``view`` raised "cannot view shape (3, j1, 2, 4) as
# [3, s0, 8]" (an NJT model under grad whose step reads a value: Adam's ``step.item()``).
def _traced_size(number: Any) -> Any:
    node = getattr(number, "node", None) if type(number) is torch.SymInt else None
    if node is not None and node.is_nested_int() and isinstance(node.hint, torch.SymInt):
        return node.hint
    return traced_value(number)
