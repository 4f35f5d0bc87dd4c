"""User ``torch.autograd.Function`` subclasses: their forward and their own backward are traced.

While interpreting, ``MyFn.apply(*args)`` records one bound symbol, ``autograd_function_apply``,
whose subsymbols are the user's ``forward`` interpreted on proxies (with a tracing stand-in for
``ctx``), so the program after it sees the forward's outputs. Where no input requires grad the
symbol runs the function as ``MyFn.apply`` (torch runs only its forward then). Where inputs require
grad, the grad transform replays the symbol natively as ``MyFn.apply`` on shadows: torch calls the
user's ``forward`` under the recording mode (its aten ops go into the forward trace) and registers
the user's ``backward`` as the autograd node, so ``torch.autograd.grad`` calls it — on shadows,
recorded into the backward trace. Nothing of the user's Function runs opaquely on a cached call, but
where pass 1 itself runs under torch's autograd: there the symbol calls ``MyFn.apply``, in the
program's ``__torch_function__`` state (Note [The torch-function state of a Function's forward]).
Invariant: the gradients are the user's backward's, never ones derived from its forward's ops.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable
from typing import Any

import optree
import torch
from torch._subclasses.fake_tensor import FakeTensor

import jitcore
from jitcore.diagnostics.boundary import runs_as_function_apply
from jitcore.errors import DataDependentError, JitcoreError
from jitcore.interpreter import current_run
from jitcore.ir import BoundSymbol, Proxy, Symbol, Trace, current_context, tree_any, value_leaves, walk
from jitcore.langctx.thread_state import recorded_grad_mode, subclass_functions_as_the_caller_had
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.protocol import tensor_flatten, unflatten_around
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.proxies.typed import is_plain_subclass

__all__ = [
    "AUTOGRAD_FUNCTION", "AUTOGRAD_FUNCTION_LOOKASIDES", "apply_autograd_function", "applies_functions",
    "forwards_inlined",
    "with_cells_mapped",
]


def run_autograd_function(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls.apply(*args, **kwargs)``: how the symbol runs on real (or shadow) tensors, with subclass
    ``__torch_function__`` as the caller had it (Note [The torch-function state of a Function's forward])."""
    if not any(_resolved_whole(a) for a in (*args, *kwargs.values())):
        return cls.apply(*args, **kwargs)
    with subclass_functions_as_the_caller_had():
        return cls.apply(*args, **kwargs)


# Note [A Function class whose methods close over the program's values]
# A Function class the program defines per call closes over the program's values: MaskedTensor's
# ``get_data`` defines ``GetData`` inside it, and its ``backward`` builds ``MaskedTensor(grad_output,
# self.get_mask())`` from the ``self`` of that call. Defined while interpreting, the cell holds pass
# 1's proxy, whose shadow belongs to pass 1's fake mode; the grad transform's replay ran the backward on
# its own shadows, and torch raised "Mixing fake modes NYI" while the backward was derived, so every
# backward() through the entry raised where eager computes. The replay applies a subclass of the
# Function whose methods' cells hold the replay's values in place of pass 1's proxies (the user's class
# is left as it is).
_FUNCTION_METHODS = ("forward", "backward", "setup_context", "vjp", "jvp")


def with_cells_mapped(cls: type, value_of: Callable[[Any], Any]) -> type:
    """``cls``, or a subclass of it whose methods close over ``value_of(v)`` where ``cls``'s close over
    a traced value ``v`` (Note [A Function class whose methods close over the program's values])."""
    replaced: dict[str, Any] = {}
    for name in _FUNCTION_METHODS:
        method = vars(cls).get(name)
        fn = getattr(method, "__func__", method)
        cells = getattr(fn, "__closure__", None)
        if not cells or not any(_traced_cell(c) for c in cells):
            continue
        closure = tuple(
            types.CellType(value_of(c.cell_contents)) if _traced_cell(c) else c for c in cells)
        copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure)
        copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
        replaced[name] = staticmethod(copy) if isinstance(method, staticmethod) else copy
    if not replaced:
        return cls
    return type(cls.__name__, (cls,), {**replaced, "__qualname__": cls.__qualname__,
                                       "__module__": cls.__module__})


def _traced_cell(cell: types.CellType) -> bool:
    try:
        return isinstance(cell.cell_contents, TensorProxy)
    except ValueError:  # an empty cell
        return False


def run_autograd_function_without_subclass_functions(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls.apply`` where the program called it with subclass ``__torch_function__`` disabled."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
        return cls.apply(*args, **kwargs)


# Note [The torch-function state of a Function's forward]
# A computation run where pass 1 runs (under torch's autograd) calls ``MyFn.apply`` natively, so the
# user's forward runs as eagerly: with the subclass ``__torch_function__`` state the program had at
# the call. Two things changed that state. (1) An entry whose inputs have a ``__torch_function__``
# runs its computation with subclass functions disabled (its records were resolved while tracing:
# ``plain_data``, jit/api.py), and the forward ran so too: torchao's NF4 weight, taken whole by an
# entry with symbolic sizes, answered ``weight.to(bf16)`` in LinearNF4.forward with itself instead
# of its dequantized weight (its ``__torch_function__`` table does that), and F.linear raised "mat1
# and mat2 shapes cannot be multiplied" where eager computes. ``subclass_functions_disabled`` marks
# that state as jitcore's, and the symbol turns them back on around ``apply``. (2) A program that
# calls ``apply`` inside ``with torch._C.DisableTorchFunctionSubclass()`` records the other symbol,
# which runs ``apply`` with them disabled. Only a Function handed such a whole subclass value gets them
# back: a subclass without ``__torch_dispatch__`` is plain data to the trace, its ``__torch_function__``
# ran while tracing and what it did to Python state is replayed (jit/effects.py): run again here, a
# logging one logged each call twice. Its own answers inside a Function's forward (``w.to`` answered
# by its table) are therefore not those of eager in a computation that calls ``apply`` natively: a
# known limit (docs/autograd.md).
def _resolved_whole(value: Any) -> bool:
    """A value of a tensor subclass with a ``__torch_dispatch__`` of its own, passed whole."""
    cls = type(value)
    return cls is not torch.Tensor and isinstance(value, torch.Tensor) and not is_plain_subclass(cls)


def run_on_shadows(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls.apply`` on the shadows, as the grad transform replays it: an error there is a refusal.

    Note [A Function's forward that needs values]: the forward runs natively here, on tensors without
    values, after it was interpreted without error. What it raises comes from that: NumPy's functions
    on ``x.numpy()`` (``torch.testing``'s ``NumpyCube``) refuse a fake tensor. Eagerly the call
    computes, so the call runs eagerly (JC-T002), and the error never reaches the program as its own.
    """
    try:
        return run_autograd_function(cls, *args, **kwargs)
    except JitcoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the forward raised on values it cannot read
        raise DataDependentError(
            f"{cls.__qualname__}.forward needs the values of its inputs to be differentiated, which are not "
            f"known while tracing ({type(exc).__name__}: {exc})",
            hints=("run the Function outside the jitted function, or on inputs that do not require grad",),
        ) from exc


class TracingContext:
    """The ``ctx`` a user's ``forward`` receives while it is interpreted: it records, nothing more."""

    def __init__(self, args: tuple) -> None:
        self.needs_input_grad = tuple(isinstance(a, TensorProxy) and a.requires_grad for a in args)
        self.saved_tensors: tuple[Any, ...] = ()
        self.materialize_grads = True
        self.non_differentiable: tuple[Any, ...] = ()

    def save_for_backward(self, *tensors: Any) -> None:
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self.non_differentiable = tensors

    def mark_dirty(self, *tensors: Any) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def _uses_setup_context(cls: type) -> bool:
    return getattr(cls, "setup_context", None) is not None and (
        getattr(cls.setup_context, "__func__", cls.setup_context)
        is not getattr(
            torch.autograd.Function.setup_context, "__func__", torch.autograd.Function.setup_context
        )
    )


@runs_as_function_apply
def _forward(cls: type, *args: Any, **kwargs: Any) -> Any:
    """The outputs of the user's forward, interpreted on proxies (its ops become subsymbols)."""
    context = current_context()
    if context is not None:
        context.trace.imports.setdefault("jitcore", jitcore)  # the symbol's path starts there
    run = current_run()
    call = run.call if run is not None else (lambda fn, *a, **k: fn(*a, **k))
    ctx = TracingContext(args)
    # read as the program reads them (its hooks see the reads): their cells are state, Note [The cells
    # of a static method] (jitcore/jit/state_reads.py)
    forward = call(getattr, cls, "forward")
    # as apply runs them (Note [A Function's output reaches every input ...]); recorded where the forward's
    # records replace the call, and run with grad mode on otherwise (Note [A Function without grad ...])
    with recorded_grad_mode(False) if _inlined(args, kwargs) else torch.no_grad():
        if _uses_setup_context(cls):
            output = call(forward, *args, **kwargs)
            call(call(getattr, cls, "setup_context"), ctx, args, output)
        else:
            output = call(forward, ctx, *args, **kwargs)
    _require_grad_as_apply(output, (args, kwargs), ctx, _UsersBackward(cls, ctx, args, output))
    return output


def _inlined(args: tuple, kwargs: dict) -> bool:
    """Whether the computation runs the forward's records in place of ``apply``: grad mode is on and
    no input requires grad (Note [A Function without grad runs its recorded forward])."""
    return torch.is_grad_enabled() and not any(
        isinstance(v, TensorProxy) and v.requires_grad for v in optree.tree_leaves((args, kwargs)))


def _require_grad_as_apply(output: Any, inputs: Any, ctx: TracingContext, own: _UsersBackward) -> None:
    """``Function.apply`` makes the floating outputs require grad when an input does, whatever the
    forward computed them from (DTensor's ``to_local`` returns its local tensor, which does not).
    Such an output's shadow is joined to the inputs' in the shadow graph (``_Joined``), so the
    program after the call sees eager's ``requires_grad`` and a backward inside it reaches eager's
    leaves; the gradients themselves are the Function's backward's, computed at the replay.

    Note [A Function's output reaches every input that requires grad]: an output must not be joined
    through only some inputs: BitNet's linear Function adds the bias after its int8 matmul, and a
    backward inside the program then found the bias alone as a leaf (the input's and the weight's
    gradients were never computed: a wrong answer). Eagerly the output's node is the Function's, whose
    inputs are all those that require grad; so every floating output is joined to all of them. The
    forward is interpreted with grad mode off, as ``apply`` runs it (``y.requires_grad`` of an
    intermediate ``y`` is False, ``torch.is_grad_enabled()`` too), so its outputs come off no graph."""
    if not torch.is_grad_enabled():
        return
    tensors = [v for v in optree.tree_leaves(inputs, none_is_leaf=True) if isinstance(v, TensorProxy)]
    needing = [v for v in tensors if v.requires_grad]
    if not needing:
        return
    excluded = {id(t) for t in (*ctx.non_differentiable, *tensors)}  # an input returned stays itself
    joinable = [v for v in optree.tree_leaves(output, none_is_leaf=True)
                if isinstance(v, TensorProxy) and id(v) not in excluded
                and (v.dtype.is_floating_point or v.dtype.is_complex)]
    if not joinable:
        return
    values = current_context().values
    bases, wrapped = [], []
    with values.fake_mode:
        for value in joinable:
            shadow = value.shadow  # joined even when computed from some inputs on the shadow graph
            if isinstance(value, SubclassTensorProxy):
                # a wrapper over the same inner tensors (shadows mapped to their proxies) as the one the
                # forward made (a DTensor made with requires_grad=True is a leaf of its own), made by its
                # class's __tensor_unflatten__, not by an op: eager's apply sends the class none
                names, flatten_ctx = tensor_flatten(shadow)
                bases.append(unflatten_around(type(shadow), {n: getattr(shadow, n) for n in names},
                                              flatten_ctx, shadow.shape, shadow.stride()))
                wrapped.append((shadow, names))
            else:
                bases.append(shadow.detach())
                wrapped.append(None)
        # one node for all outputs, as eager's: the user's backward takes all their gradients at once
        joined = _Joined.apply(_Output(tuple(bases), own.of(joinable, needing)), *(v.shadow for v in needing))
    for value, out, inner in zip(joinable, joined, wrapped):
        if inner is not None:
            shadow, names = inner
            for name in names:
                object.__setattr__(out, name, getattr(shadow, name))
            value.set_shadow(out)
        else:
            value.shadow = out
        values.bind(out, value)


class _Output:
    """The tensors ``_Joined`` returns, passed as a non-tensor argument: not inputs of the Function, so
    ``apply`` gives those very objects the node, as eager's ``apply`` does to what a forward made; with
    ``backward``, how the user's backward gives the gradients (``_UsersBackward.of``)."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], backward: Callable[..., Any] | None = None) -> None:
        self.tensors, self.backward = tensors, backward


# Note [A backward inside the program runs the Function's own backward]
# A backward the program runs itself (``torch.autograd.grad(y.sum(), x)`` after ``y = MyFn.apply(x)``)
# is recorded in pass 1 on the shadow graph, where the Function's node was ``_Joined``, whose gradients
# were zeros: the values are the replay's, but the tensor subclass code that backward ran was pass 1's,
# and its Python effects are those the computation replays. A logging wrapper's log held ``zeros_like``
# where eager logs the Function's ``cos`` and ``mul``. ``_Joined`` now runs the user's ``backward`` on
# the shadows (its ``ctx`` seen with the shadows of what the forward saved), so the subclass code pass 1
# records for it is eager's, in program order with the rest of the pass; the Function's outputs are one
# node, as eager's, so that backward gets all their gradients at once. Zeros stand where it cannot run
# on shadows (it raises, reads values).
class _UsersBackward:
    """The user's ``backward`` of one ``apply``, run on shadows for ``_Joined`` (Note above)."""

    def __init__(self, cls: type, ctx: TracingContext, args: tuple, output: Any) -> None:
        self.cls, self.ctx, self.args, self.output = cls, ctx, args, output

    def of(self, joined: list[Any], needing: list[Any]) -> Callable[..., Any] | None:
        """How ``_Joined`` of the outputs ``joined`` gets the gradients of ``needing`` (None: zeros)."""
        if type(self.cls.backward) is not types.FunctionType \
                or not (type(self.output) is tuple or isinstance(self.output, TensorProxy)):
            return None
        return lambda grads: self._gradients(grads, joined, needing)

    def _gradients(self, grads: tuple[Any, ...], joined: list[Any],
                   needing: list[Any]) -> tuple[Any, ...] | None:
        by_output = {id(v): g for v, g in zip(joined, grads)}
        outputs = self.output if type(self.output) is tuple else (self.output,)
        given = [by_output[id(v)] if id(v) in by_output
                 else _zeros_like(v.shadow) if isinstance(v, TensorProxy) and self.ctx.materialize_grads
                 else None for v in outputs]
        try:
            found = self.cls.backward(_ShadowContext(self.ctx), *given)
        except Exception:  # noqa: BLE001 - it needs values or meets what shadows lack: zeros, as before
            return None
        found = found if type(found) is tuple else (found,)
        if len(found) < len(self.args):
            return None
        by_input = {id(a): g for a, g in zip(self.args, found)}
        out = []
        for proxy in needing:
            g = by_input.get(id(proxy))
            shadow = proxy.shadow
            out.append(g if isinstance(g, torch.Tensor) and g.shape == shadow.shape else _zeros_like(shadow))
        return tuple(out)


class _ShadowContext:
    """A ``TracingContext`` as the user's backward reads it on shadows: tensors it holds are their
    shadows."""

    def __init__(self, ctx: TracingContext) -> None:
        object.__setattr__(self, "_ctx", ctx)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._ctx, name)
        return optree.tree_map(lambda v: v.shadow if isinstance(v, TensorProxy) else v, value,
                               none_is_leaf=True)


class _Joined(torch.autograd.Function):
    """A shadow (a fresh wrapper or a detached alias, ``_Output``) whose autograd node has the given
    shadows as its inputs (pass 1 finds a backward's leaves and the gradients' metadata on this graph;
    the values are the replay's)."""

    @staticmethod
    def forward(ctx: Any, output: _Output, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.inputs, ctx.own = inputs, output.backward
        return output.tensors

    @staticmethod
    def backward(ctx: Any, *grad: torch.Tensor) -> Any:
        grads = ctx.own(grad) if ctx.own is not None else None  # Note [A backward inside the program
        if grads is not None:  # runs the Function's own backward]
            return (None, *grads)
        return (None, *(_zeros_like(i) for i in ctx.inputs))


def _zeros_like(shadow: torch.Tensor) -> torch.Tensor:
    """A zero gradient with the metadata of ``shadow``: ``zeros_like``, through a subclass's dispatch as
    eagerly (BitNet's weight answers a plain tensor, as its Function's backward gives). A subclass
    whose dispatch implements no ``zeros_like`` (MaskedTensor: a TypeError where eager, which never
    asks it, computes the gradient) gets one of its class around zeros of its inner tensors, made by
    its ``__tensor_unflatten__``, as its Function's backward gives (MaskedTensor's ``get_data``).
    Inner tensors that cannot carry gradients (a mask, offsets, indices) are the shadow's own
    (Note [A zero gradient keeps its subclass's structure])."""
    if isinstance(shadow, FakeTensor) or type(shadow) is torch.Tensor:
        return torch.zeros_like(shadow)
    try:
        return torch.zeros_like(shadow)
    except (TypeError, NotImplementedError):
        names, flatten_ctx = tensor_flatten(shadow)
        inner = {n: _zero_inner(getattr(shadow, n)) for n in names}
        return unflatten_around(type(shadow), inner, flatten_ctx, shadow.shape, shadow.stride())


def _zero_inner(inner: torch.Tensor) -> torch.Tensor:
    """An inner tensor of a zero gradient: zeros where it can carry gradients, else ``inner`` itself."""
    if inner.dtype.is_floating_point or inner.dtype.is_complex or type(inner) is not torch.Tensor \
            and not isinstance(inner, FakeTensor):
        return _zeros_like(inner)
    return inner


# Note [A zero gradient keeps its subclass's structure]
# The gradient ``_Joined`` gives pass 1's shadow graph has its input's metadata; its values are never
# used, but a subclass's own backward code may read them: MaskedTensor's binary ops check that both
# masks are equal (``torch.eq(a, b).all().item()``, read by the probe). Zeros of every inner tensor
# gave a mask all False, and ``m.exp().sum().backward()`` raised "Input masks must match" where eager
# (whose ``get_data`` backward gives the input's mask) computes. A boolean or integer inner tensor
# describes the value's structure, so the zero gradient keeps the input's.


def _apply_symbol(symbol_id: str, fn: Callable[..., Any]) -> Symbol:
    """A symbol of ``Function.apply``: the forward interpreted as its meta, ``fn`` how it runs."""
    return Symbol(id=symbol_id, name="autograd_function_apply", langctx="torch", fn=fn,
                  path=f"jitcore.transforms.autograd_function.{fn.__name__}", meta=_forward,
                  tags=frozenset({"autograd_function"}))


AUTOGRAD_FUNCTION = _apply_symbol("torch.autograd.Function.apply", run_autograd_function)
AUTOGRAD_FUNCTION_WITHOUT_SUBCLASS_FUNCTIONS = _apply_symbol(
    "torch.autograd.Function.apply without subclass torch functions",
    run_autograd_function_without_subclass_functions)


def apply_autograd_function(cls: type, *args: Any, **kwargs: Any) -> Any:
    """The lookaside of ``torch.autograd.Function.apply`` while interpreting. A Function with a
    ``setup_context`` gets its forward's defaults bound first, as torch's ``apply`` binds them: its
    ``setup_context`` receives them among the inputs (torch's ``ForwardHasDefaultArgs``: ``x, idx =
    inputs`` raised ValueError while tracing), and its backward answers one gradient for each."""
    if _uses_setup_context(cls):
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = bound.args, bound.kwargs
    if not torch._C._is_torch_function_enabled():  # noqa: SLF001 - the program's with-block, entered natively
        return AUTOGRAD_FUNCTION_WITHOUT_SUBCLASS_FUNCTIONS(cls, *args, **kwargs)
    return AUTOGRAD_FUNCTION(cls, *args, **kwargs)


AUTOGRAD_FUNCTION_LOOKASIDES: dict[Any, Any] = {
    torch.autograd.Function.apply.__func__: apply_autograd_function,
}


# Note [A Function without grad runs its recorded forward]
# Where no input requires grad, ``MyFn.apply`` only runs the user's forward. The symbol ran it so, as
# ``MyFn.apply`` on every cached call: the forward's Python effects (``calls.append(1)``, a counter)
# happened natively and were also replayed by the side-effect replay (jit/effects.py), which had
# recorded them while the forward was interpreted, so eager's one append per call was two. A
# computation that builds no graph runs the forward's records instead (the symbol's subsymbols: its
# ops, as interpreted), and its effects are replayed once, as every other Python effect. Where an
# output requires grad the symbol stays (the user's backward must be the node); so does it where pass
# 1 runs under torch's autograd, whose forward's writes are put back before the effects are made
# (Note [A Function's forward run natively], jit/effects.py; its prints still happen twice).
# The records run with grad mode off, as ``apply`` runs the forward: the records of that mode change
# are the first and last of the forward's. Without them a forward computing with a tensor it closes
# over that requires grad (a Parameter) returned an output that required grad where eager's does not
# (and a reentrant ``checkpoint`` of a module whose input requires no grad did the same).
# The forward's records are inlined into pass 1, before it is flattened: a forward computing through
# subclass values (``TwoTensor(x / s, x - s) * 2``) has subclass records among them, which flattening
# resolves to their inner tensors' ops. Inlined into the flattened trace, they ran as torch-level calls
# on a subclass value no record made (UnboundLocalError on every call, where eager computes).
def forwards_inlined(trace: Trace) -> Trace:
    """``trace`` with each Function application whose outputs need no grad replaced by its recorded
    forward (Note [A Function without grad runs its recorded forward])."""
    if not any(_applies_function(b) for b in trace.bound_symbols):
        return numbers_before_functions(trace)  # those that stay (Note [Numbers a Function's forward ...])
    out: list[BoundSymbol] = []
    for bsym in trace.bound_symbols:
        _inline(bsym, out)
    header = [line.replace("(interpretation)", "(interpretation), Function forwards inlined")
              if "(interpretation)" in line else line for line in trace.header]
    return numbers_before_functions(dataclasses.replace(trace, bound_symbols=out, header=header))


# Note [Numbers a Function's forward computes]
# A counter the forward bumps (``ST["n"] += 1``) and the program reads after the call (``ST["n"] += 10``)
# is a dynamic number (jit/effects.py): its arithmetic, ``n0 = n + 1``, is recorded among the Function
# record's subsymbols. Where the record stays (an output requires grad, pass 1 under torch's autograd)
# the computation calls ``apply`` natively, and ``n0`` was never defined: the computation raised
# UnboundLocalError (ret43's fn_counter.py: symbolic sizes with grad; a jitcore bug, JC-I002, then
# the call ran eagerly). The number records among the subsymbols that read only numbers defined before
# the record (the computation's inputs, earlier records' outputs) are pure arithmetic: they are also
# placed before it at the top level, so what the program reads after the call is defined. A number
# made from a tensor inside the forward (``x.sum().item()``) is not moved: nothing after it that reads it
# is (those still raise, and run eagerly).
def numbers_before_functions(trace: Trace) -> Trace:
    """``trace`` with the number arithmetic of each Function record that stays placed before it (Note
    [Numbers a Function's forward computes])."""
    if not applies_functions(trace):
        return trace
    defined = {id(a) for a in optree.tree_leaves(trace.args) if isinstance(a, Proxy)}
    out: list[BoundSymbol] = []
    for bsym in trace.bound_symbols:
        if "autograd_function" in bsym.symbol.tags:
            for _, sub in walk(bsym.subsymbols):
                if _number_record(sub, defined):
                    out.append(sub)
                    defined.update(id(v) for v in optree.tree_leaves(sub.output) if isinstance(v, Proxy))
        out.append(bsym)
        defined.update(id(v) for v in optree.tree_leaves(bsym.output) if isinstance(v, Proxy))
    return dataclasses.replace(trace, bound_symbols=out) if len(out) != len(trace.bound_symbols) else trace


def _number_record(bsym: BoundSymbol, defined: set[int]) -> bool:
    """A record of arithmetic on numbers only, every proxy it reads in ``defined``."""
    outputs = optree.tree_leaves(bsym.output)
    if not outputs or not all(isinstance(v, NumberProxy) for v in outputs) or bsym.subsymbols:
        return False
    reads = [v for v in value_leaves((bsym.args, bsym.kwargs)) if isinstance(v, Proxy)]
    return all(isinstance(v, NumberProxy) and id(v) in defined for v in reads) \
        and bsym.symbol.langctx == "python"


def applies_functions(trace: Trace) -> bool:
    """Whether ``trace`` calls a Function's ``apply`` itself (its forward then runs natively)."""
    return any("autograd_function" in b.symbol.tags for b in trace.bound_symbols)


def _applies_function(bsym: BoundSymbol) -> bool:
    return "autograd_function" in bsym.symbol.tags and bool(bsym.subsymbols) and not tree_any(
        bsym.output, lambda v: isinstance(v, TensorProxy) and v.shadow.requires_grad)


def _inline(bsym: BoundSymbol, out: list[BoundSymbol]) -> None:
    if not _applies_function(bsym):
        out.append(bsym)
        return
    for sub in bsym.subsymbols:
        _inline(sub, out)
