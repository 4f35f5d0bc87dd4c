"""Resolving a symbol call whose arguments include tensor-subclass proxies, while interpreting.

The call is replayed natively on *shadows* (real subclass instances over fake inner tensors; fake
tensors for plain proxies) under a TorchDispatchMode. torch's dispatcher does the decomposition, so
the mode receives exactly the aten calls eager PyTorch would deliver to the subclass (after
autograd and CompositeImplicit decompositions). For each:
- metadata queries (``prim.device``, ``aten.sym_size``, ...) are answered natively and not recorded;
- a call on plain tensors only is recorded as an aten symbol;
- a call involving subclasses runs the subclasses' ``__torch_dispatch__`` — on the jitcore
  interpreter, with proxies — in eager's order until one does not return NotImplemented; the aten
  ops it calls on the inner tensors are recorded as aten symbols;
- a call involving a DTensor is declined: torch's C++ DTensor dispatch runs it natively, and the
  local ops and collectives it issues come back to the mode as calls on plain tensors.
What the mode returns (the shadow of the resulting proxy) is the object C++ continues with.
A dynamic number given where the aten call takes it unchanged is put back there as its name (Note
[Numbers through a subclass's dispatch], jitcore/langctx/scalars.py).

Invariants:
- every shadow maps back to exactly one proxy (``DispatchState``, dispatch/shadow_map.py), so step
  k's output is step k+1's input;
- all recording happens inside the torch-level symbol's scope: the resolution is its subsymbols;
- a dynamic number reaches a subclass's dispatch as a name only in the parameter it was given for,
  with the value C++ passed there; one C++ used otherwise is specialized;
- resolution runs under the traced grad mode, with subclass ``__torch_function__`` disabled (a
  class's own ``__torch_function__`` was interpreted before, see ``resolve_call``).
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import optree
import torch
from torch._library.simple_registry import find_torch_dispatch_rule
from torch._ops import OpOverload, OpOverloadPacket
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

from jitcore.diagnostics import JITCORE_DIR
from jitcore.dispatch.declined import declined_by_all
from jitcore.dispatch.dtensor import in_sharding_propagation, is_natively_dispatched, pointwise_for_dtensor
from jitcore.dispatch.flatten import record_subclass_results
from jitcore.dispatch.handed import as_handed, overridable
from jitcore.dispatch.shadow_map import DispatchState
from jitcore.ir import Inlined, Symbol, current_context, in_subclass_code, tracing, tree_any, tree_has
from jitcore.langctx.aten import op_symbol, operator_symbol
from jitcore.langctx.reads import same_value
from jitcore.langctx.scalars import aten_name, dispatched_parameter
from jitcore.langctx.shadows import BACKWARDS, data_read_error
from jitcore.langctx.unit_strides import pin_unit_strides
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.subclass import SubclassTensorProxy, register_torch_dispatch
from jitcore.proxies.tensor import PlainTensorProxy
from jitcore.proxies.typed import has_torch_function, is_tensor_like

__all__ = [
    "METADATA_OPS",
    "ShadowDispatchMode",
    "call_on_shadows",
    "call_torch_dispatch",
    "handle_torch_function",
    "interpret_protocol_code",
    "dispatched_numbers",
    "number_leaves",
    "numbers_reach_dispatch",
    "overriding_types",
    "run_torch_functions",
    "resolve_call",
    "python_code",
    "resolve_operator_or_own",
    "torch_dispatch_rule",
]

# Asked by the dispatcher (and the autograd engine) about shadows; answered natively, never recorded.
METADATA_OPS = frozenset(
    op
    for op in (
        torch.ops.prim.device.default,
        torch.ops.prim.layout.default,
        torch.ops.aten.sym_size.default,
        torch.ops.aten.sym_size.int,
        torch.ops.aten.sym_stride.default,
        torch.ops.aten.sym_stride.int,
        torch.ops.aten.sym_numel.default,
        torch.ops.aten.sym_storage_offset.default,
        torch.ops.aten.dim.default,
        torch.ops.aten.is_contiguous.default,
        torch.ops.aten.is_contiguous.memory_format,
        torch.ops.aten.is_strides_like_format.default,
        torch.ops.aten.is_non_overlapping_and_dense.default,
    )
)


def resolve_call(symbol: Symbol, args: tuple, kwargs: dict) -> Any:
    """The outputs of ``symbol(*args, **kwargs)`` on proxies (the trace context's call handler)."""
    context = current_context()
    if context.modes is not None and (context.modes.function or context.modes.dispatch):
        moded = _resolve_under_modes(context, symbol, args, kwargs)
        if moded is not NO_MODE:
            return moded
    if not (tree_any(args, _overloaded) or tree_any(kwargs, _overloaded)):
        return symbol.meta(*args, **kwargs)
    func, context.called_as = context.called_as or symbol.fn, None  # nested calls are their own
    if "autograd_function" in symbol.tags:
        # autograd.Function.apply is C code that never asks __torch_function__; its forward is
        # interpreted on the proxies (the symbol's meta) with __torch_function__ enabled, as eagerly,
        # so each of its operations is resolved on its own
        return symbol.meta(*args, **kwargs)
    if "backward" in symbol.tags:
        # the program's torch.autograd.grad/backward asked __torch_function__ already, with eager's
        # callable (handle_torch_function, from jitcore/jit/autograd_calls.py); the record is below it
        if tree_has(args, SubclassTensorProxy) or tree_has(kwargs, SubclassTensorProxy):
            return _resolve(symbol, args, kwargs)
        return symbol.meta(*args, **kwargs)
    overridden = _torch_function_overrides(args, kwargs)
    if overridden and _runs_its_body(symbol.fn):  # Note [Torch functions that are not overridable]
        from jitcore.interpreter import current_run
        from jitcore.interpreter.calls import call_function

        with context.splicing():
            return Inlined(call_function(current_run(), symbol.fn, args, kwargs), splice=True)
    if overridden and _value_read_through_default(overridden, func, symbol):
        return symbol.meta(*args, **kwargs)
    if overridden:
        # Note [Python functions that hand their arguments] (jitcore/dispatch/handed.py)
        func, args, kwargs = as_handed(func, args, kwargs)
        if isinstance(func, types.MethodDescriptorType) and args and is_tensor_like(args[0]):
            raise TypeError(f"descriptor '{func.__name__}' for 'torch._C.TensorBase' objects doesn't "
                            f"apply to a '{type(args[0]).__name__}' object")  # Note [Tensor-like values]
        with context.splicing():
            result = run_torch_functions(overridden, func, args, kwargs)
        if result is not NotImplemented:
            # what the __torch_function__ ran is what runs (and what autograd sees), not the call:
            # torchao's F.linear on a quantized weight is its own ops, never aten.t + aten.mm
            return Inlined(result, splice=True)
        raise declined_by_all(func, overridden, "__torch_function__")
    if not (tree_has(args, SubclassTensorProxy) or tree_has(kwargs, SubclassTensorProxy)):
        return symbol.meta(*args, **kwargs)
    return _resolve(symbol, args, kwargs)


NO_MODE = object()


def _resolve_under_modes(context: Any, symbol: Symbol, args: tuple, kwargs: dict) -> Any:
    """A call while the program's modes are entered (jitcore/dispatch/modes.py): the innermost
    function mode's ``__torch_function__``, else the dispatcher's aten calls through the innermost
    dispatch mode; what they ran replaces the call. ``NO_MODE``: no mode of the program's is asked."""
    if "autograd_function" in symbol.tags or "backward" in symbol.tags:
        return NO_MODE
    modes = context.modes
    mode = modes.innermost_function_mode()
    if mode is not None:
        func, context.called_as = context.called_as or symbol.fn, None
        return Inlined(modes.ask_function_mode(mode, func, args, kwargs), splice=True)
    if modes.innermost_dispatch_mode() is None:
        return NO_MODE
    if tree_has((args, kwargs), SubclassTensorProxy) or _torch_function_overrides(args, kwargs):
        return NO_MODE  # a subclass's __torch_function__, then its resolution (which asks the mode)
    context.called_as = None
    return Inlined(_resolve(symbol, args, kwargs, record=False), splice=True)


# Note [Torch functions that are not overridable]
# Some torch functions jitcore records as symbols are plain Python that torch never offers to a
# ``__torch_function__`` (``torch.masked.sum``: torch.overrides lists none of ``torch.masked``): eagerly
# their body runs, and each torch call in it reaches the subclass on its own. Called with a value
# whose class has a ``__torch_function__``, such a function is interpreted as eager runs it (its
# records take its place) instead of being handed to that ``__torch_function__`` as ``func`` (which
# MaskedTensor's ``torch.masked.sum(self, mask=...)`` turned into ``as_subclass``: an eager entry).
def _runs_its_body(fn: Any) -> bool:
    return isinstance(fn, types.FunctionType) and fn not in overridable()


def _overloaded(value: Any) -> bool:
    """Whether a value is a subclass proxy, a typed proxy (jitcore/proxies/typed.py) or a tensor-like
    value: a call on it may run a ``__torch_function__`` or ``__torch_dispatch__``."""
    if isinstance(value, TensorProxy):
        return type(value) is not PlainTensorProxy
    return is_tensor_like(value)


def numbers_reach_dispatch(symbol: Symbol, args: tuple, kwargs: dict) -> bool:
    """Whether dynamic numbers of a call with tensor subclasses may reach a ``__torch_dispatch__`` as
    names (Note [Numbers through a subclass's dispatch], jitcore/langctx/scalars.py): autograd
    records nothing (it would keep the value for the backward), and a DTensor's C++ dispatch decides
    nothing from them (Note [Numbers through DTensor's dispatch], jitcore/dispatch/dtensor.py)."""
    leaves = optree.tree_leaves((args, kwargs), none_is_leaf=True)
    if torch.is_grad_enabled() and any(isinstance(v, TensorProxy) and v.requires_grad for v in leaves):
        return False
    return pointwise_for_dtensor(aten_name(symbol)) or not any(
        isinstance(v, SubclassTensorProxy) and is_natively_dispatched(v.python_type) for v in leaves)


def dispatched_numbers(symbol: Symbol, args: tuple, kwargs: dict,
                       given_value: Callable[[NumberProxy], Any]) -> tuple[tuple, dict, dict[int | str, Any]]:
    """The call's arguments with each dynamic number as ``given_value`` makes it (its value, what
    relies on it noted), and the numbers (or ``Scalar[]`` lists of them) by the aten parameter they
    reach the dispatch as (``dispatched_parameter``); any other number is given as well."""
    numbers: dict[int | str, Any] = {}

    def given(key: int | str, value: Any) -> Any:
        if not tree_has(value, NumberProxy):
            return value
        parameter = dispatched_parameter(symbol, key) if _names(value) else None
        if parameter is None or parameter in numbers:
            return optree.tree_map(lambda v: given_value(v) if isinstance(v, NumberProxy) else v, value,
                                   none_is_leaf=True)
        numbers[parameter] = value
        return value.value if isinstance(value, NumberProxy) else type(value)(
            v.value if isinstance(v, NumberProxy) else v for v in value)

    new_args = tuple(given(i, a) for i, a in enumerate(args))
    new_kwargs = {k: given(k, v) for k, v in kwargs.items()}
    return new_args, new_kwargs, numbers


def _names(value: Any) -> bool:
    return isinstance(value, NumberProxy) or (
        type(value) in (list, tuple) and any(isinstance(v, NumberProxy) for v in value))


def number_leaves(numbers: dict[int | str, Any]) -> list[NumberProxy]:
    """The dynamic numbers of ``dispatched_numbers``'s map, those of lists included."""
    leaves = optree.tree_leaves(list(numbers.values()), none_is_leaf=True)
    return [v for v in leaves if isinstance(v, NumberProxy)]


def _resolve(symbol: Symbol, args: tuple, kwargs: dict, *, record: bool = True) -> Any:
    state = DispatchState.of_current()
    numbers: dict[int | str, Any] = {}
    if tree_has((args, kwargs), NumberProxy):
        args, kwargs, numbers = dispatched_numbers(symbol, args, kwargs, NumberProxy.specialize)
    shadow_args, shadow_kwargs = _map(state.shadow_of, (args, kwargs))
    try:
        mode = ShadowDispatchMode(state, made_variable=makes_variable(symbol.fn), numbers=numbers,
                                  numbers_of=aten_name(symbol), in_backward=symbol.fn in BACKWARDS)
        with torch._C.DisableTorchFunctionSubclass(), mode:  # noqa: SLF001
            out = symbol.fn(*shadow_args, **shadow_kwargs)
        for number in number_leaves(numbers):
            if id(number) not in mode.named:  # C++ used its value some other way
                number.specialize()
        read = mode.read_number
        if read is not None:  # Note [A number a subclass's item reads]
            if symbol.fn in _ITEM_CALLS and type(out) in (int, float) and same_value(out, read.value):
                return read
            read.specialize()  # C++ used its value (``float(x)``): checked, as any value the program needs
    except RuntimeError as exc:  # C++ code before any dispatch read a shadow's data (tensor_split's indices)
        read = data_read_error(symbol.fn, exc)
        if read is None:
            raise
        raise read from None
    result = _map(state.proxy_of, out)
    if "inplace" in symbol.tags:
        for value in optree.tree_leaves((args, kwargs), none_is_leaf=True):
            if isinstance(value, SubclassTensorProxy):
                state.refresh_outer(value)
    if record:
        context = current_context()
        record_subclass_results(context.scopes[-1], result, context.source())
    return result


def resolve_operator_or_own(fn: Any) -> Any:
    """The ``resolve_call`` hook's part shared by every interpretation of torch code (a tracing
    pass, the grad transform's recording): an aten operator is its symbol (the call is recorded),
    jitcore's own code (proxy methods, symbols) runs natively; None for anything else. Only ``fn``'s type
    is asked which kind it is (Note [Asking a callable its kind])."""
    if issubclass(type(fn), (OpOverload, OpOverloadPacket)):
        return operator_symbol(fn)
    code = python_code(fn)
    if code is not None and code.co_filename.startswith(JITCORE_DIR):
        return fn
    return None


# Note [Asking a callable its kind]
# Every call the program makes asks the hooks what ``fn`` is. Eagerly ``c(1)`` asks nothing of ``c``
# but ``type(c).__call__``: reading ``c.__code__`` ran a user's ``__getattr__`` (which may answer
# anything: a ``7`` whose ``co_filename`` failed the trace), and ``isinstance(c, OpOverload)`` read
# ``c.__class__`` through a user's ``__getattribute__`` (CPython's isinstance falls back on ``__class__``
# when the type does not match). So the kind comes from ``type(fn)``, and the code of a Python function
# or bound method from the function itself.
def python_code(fn: Any) -> types.CodeType | None:
    """The code of a Python function or of a method bound to one; None for any other callable (read
    without running the callable's own attribute hooks: Note [Asking a callable its kind])."""
    if type(fn) is types.MethodType:
        fn = fn.__func__
    return fn.__code__ if type(fn) is types.FunctionType else None


# Note [The detach of a variable factory]
# ``torch.ones_like`` (every ``*_like`` factory) wraps the tensor its aten op returns with autograd's
# ``make_variable``, which reuses that tensor when nothing else holds it and otherwise makes a shallow
# copy, asking a Python subclass for it with ``aten.detach``. Eagerly the subclass value its
# ``__torch_dispatch__`` just built is held by nothing else, so the subclass never sees that
# ``detach``; while tracing, jitcore holds every shadow it hands back (its proxy keeps it), so the
# dispatcher asked for one: a subclass whose ``detach`` does more than alias (a log of ops in its
# flatten context, a counter) came back with one more op than eagerly. That ``detach``, of the value
# this call's dispatch just returned, is answered with the value itself, as eager's reuse does.
# The factories that take sizes (``torch.ones(2, 3)``) wrap theirs the same way: under a
# TorchDispatchMode of the program's (torch's LoggingTensorMode), the plain value the mode returned is
# held too, and the mode was offered a ``detach`` it never sees eagerly (its log had one more line).
_VARIABLE_FACTORIES = frozenset({
    torch.ones_like, torch.zeros_like, torch.empty_like, torch.full_like, torch.rand_like, torch.randn_like,
    torch.randint_like, torch.ones, torch.zeros, torch.empty, torch.full, torch.rand, torch.randn,
    torch.randint, torch.randperm, torch.arange, torch.linspace, torch.logspace, torch.eye,
    torch.empty_strided, torch.scalar_tensor,
})


# ``torch.autograd.grad``/``backward`` make each missing gradient with ``torch.ones_like`` (``_make_grads``),
# a variable factory too: inside a backward the program runs, its ``detach`` is answered so as well
# (``loss.backward()`` over a logging class logged a ``detach`` after ``ones_like`` eager never logs).
_LIKE_FACTORIES = frozenset({
    torch.ops.aten.ones_like.default, torch.ops.aten.zeros_like.default, torch.ops.aten.empty_like.default,
    torch.ops.aten.full_like.default,
})


def makes_variable(fn: Any) -> bool:
    """Whether the torch function ``fn`` wraps its result with ``make_variable`` (Note [The detach of a
    variable factory])."""
    return fn in _VARIABLE_FACTORIES


# Note [Autograd's device threads]
# When the grad transform derives a backward on CUDA shadows (torch.autograd.grad over the forward's
# fake graph), torch's autograd engine runs each CUDA node on the device's own worker thread, not on
# the thread that called it (CPU nodes run on the caller's). The engine carries torch's thread state
# there, this mode on the dispatch stack among it, but not Python's: the trace context is a
# ContextVar of the calling thread, so on the worker no trace was active, the op's symbol ran its
# aten op on the proxies again, which came back to the proxy's __torch_function__ and to the symbol
# (a RecursionError for every backward on an H200, CPU tests all green). The mode keeps the context
# and thread it is entered on (and the interpretation then running, which runs a subclass's dispatch
# code), and re-enters them when it is reached on another thread with no context. The caller is
# blocked in the engine meanwhile; nodes of one graph record in an order their data allows (a node
# runs only after the nodes it reads), whichever thread runs them.


# Note [A number a subclass's item reads]
# ``x.sum().item()`` of a wrapper subclass reaches its ``__torch_dispatch__`` as ``aten._local_scalar_dense``,
# which the class answers from an inner tensor (``func(self.inner)``): a read of a plain tensor's value,
# a name of the computation as the program's own ``item()`` gives (jitcore/jit/value_reads.py). C++
# (``Tensor.item``) wants a Python number back, so the mode hands it the name's value and keeps the name;
# the torch-level ``item`` call that made it returns the name where its result is that value; where C++
# used the value otherwise (``float(x)``, ``int(x)``) the name is specialized, its check recorded. Before,
# the read was a constant behind a check among the ``item`` call's operations: every value an entry (4
# misses in 4 calls where plain tensors take 1), and under grad, where the grad transform replays no
# call that makes no tensor, the check was lost from the forward (``x * x.sum().item()`` multiplied
# every cached call by the first call's number).
_LOCAL_SCALAR = torch.ops.aten._local_scalar_dense.default  # noqa: SLF001
_ITEM_CALLS = frozenset({torch.Tensor.item, _LOCAL_SCALAR})


class ShadowDispatchMode(TorchDispatchMode):
    """Sees each aten call the dispatcher makes on shadows (one torch-level call being resolved, or
    the grad transform's replay: transforms/recording.py). A call on plain shadows is recorded as its
    operator's symbol on the proxies; one involving a subclass runs the subclass's
    ``__torch_dispatch__`` on the interpreter, in eager's order.

    Args:
        state: the trace's subclass values.
        made_variable: the torch-level call is a variable factory (Note [The detach of a variable
            factory]): a ``detach`` of the subclass value its dispatch just returned is that value.
            The grad transform's replay, one mode for many calls, says each call (``calling``).
    """

    def __init__(self, state: DispatchState, *, made_variable: bool = False,
                 numbers: dict[int | str, Any] | None = None, numbers_of: str = "",
                 in_backward: bool = False) -> None:
        super().__init__()
        self.state = state
        self.in_backward = in_backward  # a backward the program runs: its gradients' ``ones_like`` too
        self._origin: tuple[Any, Any, int] = (None, None, threading.get_ident())  # set on entering
        self.made_variable = made_variable
        self._returned: Any = None  # the subclass shadow the last call handed back (made_variable only)
        # dynamic numbers (or lists of them) by the aten parameter (name or position) they were given
        # for, in calls of the aten operation named ``numbers_of``, and the ids of those put back
        self.numbers = numbers or {}
        self.numbers_of = numbers_of
        self.named: set[int] = set()
        self.read_number: NumberProxy | None = None  # what the last ``_local_scalar_dense`` answered
        self._propagating = False  # Note [DTensor's sharding propagation is not traced]
        self._dtensor = False  # a DTensor's dispatch was declined: its C++ dispatch runs natively

    def __enter__(self) -> ShadowDispatchMode:
        self._origin = (current_context(), _current_run(), threading.get_ident())  # Note [Autograd's
        return super().__enter__()  # device threads]

    def _with_numbers(self, func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """``args``/``kwargs`` with each dynamic number put back where C++ passed its value unchanged
        (Note [Numbers through a subclass's dispatch], jitcore/langctx/scalars.py)."""
        schema = getattr(func, "_schema", None)
        if schema is None or schema.name.split("::", 1)[-1] != self.numbers_of:
            return args, kwargs  # another op C++ called on the way (its scalars are its own)
        args, kwargs = list(args), dict(kwargs)
        for i, argument in enumerate(schema.arguments):
            positional = i < len(args) and not argument.kwarg_only
            given = self.numbers.get(argument.name, self.numbers.get(i) if positional else None)
            if given is None:
                continue
            value = args[i] if positional else kwargs.get(argument.name, _ABSENT)
            named = self._named(given, value)
            if named is None:
                continue
            if positional:
                args[i] = named
            else:
                kwargs[argument.name] = named
        return tuple(args), kwargs

    def _named(self, given: Any, value: Any) -> Any:
        """``value`` (what C++ passed) with the numbers of ``given`` that it holds unchanged; None: none."""
        if isinstance(given, NumberProxy):
            if not same_value(value, given.value):
                return None
            self.named.add(id(given))
            return given
        if type(value) not in (list, tuple) or len(value) != len(given):
            return None
        out = []
        for g, v in zip(given, value):
            if isinstance(g, NumberProxy) and same_value(v, g.value):
                self.named.add(id(g))
                out.append(g)
            else:
                out.append(v)
        return type(value)(out)

    def _unrecorded(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """``func`` run natively, and every call the dispatcher makes while it runs (Note [DTensor's
        sharding propagation is not traced], dispatch/dtensor.py)."""
        propagating, self._propagating = self._propagating, True
        try:
            return func(*args, **kwargs)
        finally:
            self._propagating = propagating

    def calling(self, fn: Any) -> None:
        """The torch-level call ``fn`` is the one the next aten calls come from."""
        self.made_variable, self._returned = makes_variable(fn), None

    def symbol_for(self, func: Any) -> Any:
        """What records a call of ``func`` on plain values (an aten op or one of any namespace)."""
        return op_symbol(func)

    def proxy_of(self, value: Any) -> Any:
        """The proxy of a value the dispatcher handed over; a real plain tensor (a constant made by
        torch itself) stays what it is."""
        if type(value) is torch.Tensor:
            return value
        return self.state.proxy_of(value)

    def __torch_dispatch__(
        self, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func in METADATA_OPS:
            return func(*args, **kwargs)
        if self._propagating or (self._dtensor and in_sharding_propagation()):
            return self._unrecorded(func, args, kwargs)
        context, run, thread = self._origin
        if context is not None and current_context() is None and threading.get_ident() != thread:
            with tracing(context), _running(run):  # Note [Autograd's device threads]
                return self.__torch_dispatch__(func, types, args, kwargs)
        user_types = tuple(t for t in types if not issubclass(t, FakeTensor))
        proxy_args, proxy_kwargs = _map(self.proxy_of, (args, kwargs))
        if self.numbers:
            proxy_args, proxy_kwargs = self._with_numbers(func, proxy_args, proxy_kwargs)
        if not user_types and tree_has((proxy_args, proxy_kwargs), SubclassTensorProxy):
            # a mode is not always told the subclasses of the arguments (``aten.lift_fresh``)
            user_types = tuple(
                dict.fromkeys(
                    v.python_type
                    for v in optree.tree_leaves((proxy_args, proxy_kwargs))
                    if isinstance(v, SubclassTensorProxy)
                )
            )
        if any(is_natively_dispatched(t) for t in user_types):
            # DTensor: torch's C++ dispatch runs natively with this mode still on the stack; the local
            # ops and collectives it issues come back here as plain calls (dispatch/dtensor.py)
            self._dtensor = True
            return NotImplemented
        if (self.made_variable or self.in_backward) and func is torch.ops.aten.detach.default \
                and args[0] is self._returned:
            return self._returned  # Note [The detach of a variable factory]
        context = current_context()
        modes = context.modes if context is not None else None
        mode = modes.innermost_dispatch_mode() if modes is not None else None
        if mode is not None:  # the program's TorchDispatchMode (jitcore/dispatch/modes.py)
            out = modes.run_dispatch_mode(mode, func, user_types, proxy_args, proxy_kwargs)
            if out is NotImplemented:  # eager asks the subclasses next; its error names the mode too
                out = call_torch_dispatch(user_types, func, proxy_args, proxy_kwargs, declined=mode)
        elif not user_types and self._dtensor:  # Note [Values read through DTensor's dispatch]
            with in_subclass_code():
                out = self.symbol_for(func)(*pin_unit_strides(func, proxy_args), **proxy_kwargs)
        elif not user_types:  # Note [Strides of size-1 dimensions] (jitcore/langctx/unit_strides.py)
            out = self.symbol_for(func)(*pin_unit_strides(func, proxy_args), **proxy_kwargs)
        else:
            out = call_torch_dispatch(user_types, func, proxy_args, proxy_kwargs)
        if func is _LOCAL_SCALAR and isinstance(out, NumberProxy):  # Note [A number a subclass's item reads]
            self.read_number = out
            return out.value
        shadows = _map(self.state.shadow_of, out)
        if self.made_variable or self.in_backward and func in _LIKE_FACTORIES:  # a subclass value, or a
            # plain one a mode of the program's returned (in a backward: the gradient ``_make_grads`` made)
            self._returned = shadows if isinstance(out, TensorProxy) else None
        return shadows


_ABSENT = object()


def call_torch_dispatch(types: tuple[type, ...], func: Any, args: tuple, kwargs: dict,
                        declined: Any = None) -> Any:
    """Run the subclasses' ``__torch_dispatch__`` in eager's order on the interpreter (``declined``: the
    program's mode, asked first, returned NotImplemented).

    Raises:
        TypeError: every handler returned NotImplemented (as eager PyTorch does).
    """
    for cls in types:
        rule = torch_dispatch_rule(func, cls)
        if rule is not None:  # the class's own __torch_dispatch__ is not asked, as eagerly
            result = interpret_protocol_code(rule, cls, func, types, args, kwargs)
            if result is NotImplemented:  # eager (dispatch_on_subclass) then calls the rule again, as
                result = interpret_protocol_code(rule, func, types, args, kwargs)  # it would the method
        else:
            method = _protocol_method(cls, "__torch_dispatch__", args, kwargs)
            result = interpret_protocol_code(method, func, types, args, kwargs)
        if result is not NotImplemented:
            return result
    raise declined_by_all(func, types, "__torch_dispatch__", declined)


register_torch_dispatch(call_torch_dispatch)  # a wrapper's metadata queries (proxies/subclass.py)


def torch_dispatch_rule(func: Any, klass: type) -> Callable[..., Any] | None:
    """The rule ``torch.library.register_torch_dispatch`` (or a custom op's ``register_torch_dispatch``)
    registered for ``func`` and exactly ``klass`` (a subclass or a TorchDispatchMode class), or None.
    Eager's dispatcher calls it in place of the class's ``__torch_dispatch__``, with the class (a
    subclass) or the mode first: ``rule(cls_or_mode, func, types, args, kwargs)``."""
    if not isinstance(func, torch._ops.OpOverload):
        return None
    return find_torch_dispatch_rule(func, klass)


def _protocol_method(cls: type, name: str, args: tuple, kwargs: dict) -> Callable[..., Any]:
    """``cls.__torch_dispatch__`` (or ``__torch_function__``) as torch calls it: torch reads it from
    the first argument of ``cls``, so one defined as a plain method (deprecated, still accepted, as in
    albanD/subclass_zoo's ComplexTensor) is bound to that argument, not called with ``func`` as self."""
    for klass in cls.__mro__:
        if name in vars(klass):
            raw = vars(klass)[name]
            break
    else:
        return getattr(cls, name)
    if not isinstance(raw, types.FunctionType):  # a classmethod, staticmethod or builtin: as it is
        return getattr(cls, name)
    for value in optree.tree_leaves((args, kwargs), none_is_leaf=True):
        if (isinstance(value, torch.Tensor) and getattr(value, "python_type", type(value)) is cls) or (
                type(value) is cls and is_tensor_like(value)):  # a tensor, or torch's docs' MetadataTensor
            return types.MethodType(raw, value)
    return getattr(cls, name)


def _current_run() -> Any:
    from jitcore.interpreter import current_run

    return current_run()


@contextlib.contextmanager
def _running(run: Any) -> Iterator[None]:
    """``run`` the innermost interpretation of this thread for the body (None: nothing changes)."""
    from jitcore.interpreter import active_runs

    stack = active_runs()
    if run is not None:
        stack.append(run)
    try:
        yield
    finally:
        if run is not None:
            stack.pop()


def interpret_protocol_code(fn: Callable[..., Any], *args: Any) -> Any:
    """A subclass's (or a mode's) protocol method, interpreted (see ``TraceContext.subclass_code``)."""
    run = _current_run()
    with in_subclass_code():
        return run.call(fn, *args) if run is not None else fn(*args)


def overriding_types(args: tuple, kwargs: dict) -> tuple[type, ...]:
    """The ``types`` eager hands a ``__torch_function__`` for a call with these arguments."""
    return tuple(_torch_function_overrides(args, kwargs))


def _torch_function_overrides(args: tuple, kwargs: dict) -> list[type]:
    """The classes whose ``__torch_function__`` eager would call, in its order: left to right, a
    subclass before its base (torch's ``_get_overloaded_args``)."""
    if not torch._C._is_torch_function_enabled():  # noqa: SLF001 - inside DisableTorchFunction(Subclass)
        return []
    found: list[type] = []
    for value in optree.tree_leaves((args, kwargs), none_is_leaf=True):
        tensor_like = is_tensor_like(value)  # Note [Tensor-like values]
        if not tensor_like and (not isinstance(value, TensorProxy) or type(value) is PlainTensorProxy):
            continue
        cls = type(value) if tensor_like else value.python_type
        if cls in found:
            continue
        impl = getattr(cls, "__torch_function__", None)
        if isinstance(value, SubclassTensorProxy):
            # a wrapper subclass's default __torch_function__ only converts what __torch_dispatch__
            # already returned as the subclass: skipped
            if impl is None or getattr(impl, "__func__", impl) in _DEFAULT_TORCH_FUNCTION:
                continue
        elif not tensor_like and not has_torch_function(cls):
            continue
        position = next((i for i, seen in enumerate(found) if issubclass(cls, seen)), len(found))
        found.insert(position, cls)
    return found


_DEFAULT_TORCH_FUNCTION = (torch._C._disabled_torch_function_impl, torch.Tensor.__torch_function__.__func__)  # noqa: SLF001


# Note [Value reads of plain subclasses]
# torch's default ``Tensor.__torch_function__`` gives a call's non-tensor results back unchanged
# (``_convert`` retypes tensors only), so ``x.item()``, ``bool(x)``, ``x.tolist()`` on a subclass
# without a ``__torch_function__`` of its own are reads of its data. Resolved as such, they are value
# reads at the program's level, checked on every call like a plain tensor's (interpreted through the
# default ``__torch_function__`` they were subclass code, and the call ran eagerly).
_VALUE_METHODS = frozenset({
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__,
    torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.__complex__,
})


def _value_read_through_default(types: list[type], func: Any, symbol: Symbol) -> bool:
    if func not in _VALUE_METHODS and symbol.fn not in _VALUE_METHODS:
        return False
    default = _DEFAULT_TORCH_FUNCTION[1]
    return all(getattr(cls.__torch_function__, "__func__", None) is default for cls in types)


NO_OVERRIDE = object()


def handle_torch_function(func: Any, relevant: tuple, args: tuple, kwargs: dict) -> Any:
    """torch's ``handle_torch_function`` for a torch callable jitcore handles itself
    (``torch.autograd.grad``): the ``__torch_function__`` of the subclasses among ``relevant``,
    interpreted with ``func`` as eager hands it; ``NO_OVERRIDE`` where eager would call none."""
    overridden = _torch_function_overrides(relevant, {})
    if not overridden:
        return NO_OVERRIDE
    result = run_torch_functions(overridden, func, args, kwargs)
    if result is NotImplemented:
        raise declined_by_all(func, overridden, "__torch_function__")
    return result


def run_torch_functions(types: list[type], func: Any, args: tuple, kwargs: dict) -> Any:
    """The ``__torch_function__`` of ``types``, interpreted in eager's order with the torch callable as
    ``func``, until one does not return NotImplemented: its result (NotImplemented where all do)."""
    for cls in types:
        method = _protocol_method(cls, "__torch_function__", args, kwargs)
        result = interpret_protocol_code(method, func, tuple(types), args, kwargs)
        if result is not NotImplemented:
            return result
    return NotImplemented


def call_on_shadows(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """A torch C function that is not an operation (``torch._functionalize_unsafe_set``, ...) called
    with proxies: it acts on their shadows (their metadata), and tensors it returns map back. One
    that turns out to make tensors is called on the proxies instead, so that its operations are
    recorded (Note [C functions that compute])."""
    if fn is torch._C._disabled_torch_dispatch_impl:  # noqa: SLF001 - would re-enter the resolving mode without end
        from jitcore.errors import EagerOnlySubclass

        raise EagerOnlySubclass(
            "torch.Tensor.__torch_dispatch__ (torch._C._disabled_torch_dispatch_impl) is called on traced "
            "values: redispatching below a subclass's __torch_dispatch__ is not traced"
        )
    state = DispatchState.of_current()
    shadow_args, shadow_kwargs = _map(state.shadow_of, (args, kwargs))
    if torch.utils._python_dispatch._get_current_dispatch_mode() is not None:  # noqa: SLF001
        # a subclass's resolution (ShadowDispatchMode) or the grad replay: that mode records the ops
        return _map(state.proxy_of, fn(*shadow_args, **shadow_kwargs))
    try:
        with _TensorOpsStop():
            out = fn(*shadow_args, **shadow_kwargs)
    except _MakesTensors as stop:  # Note [C functions that compute]
        op = stop.args[0]  # run below, not in the handler: its errors are not chained to ``stop``
    else:
        return _map(state.proxy_of, out)
    if isinstance(op, torch._ops.TorchBindOpOverload):  # noqa: SLF001
        with torch._C._DisablePythonDispatcher():  # noqa: SLF001 - the Note's last paragraph
            return fn(*args, **kwargs)
    return fn(*args, **kwargs)


# Note [C functions that compute]
# A torch C function the tables do not know (``torch._C._nn.elu``, ``unflatten_dense_tensors``) is
# run on the shadows, as a metadata function (``torch._functionalize_unsafe_set``, grouping tensors
# by device) must be. Were it to compute, its ops would run on fake tensors and never be recorded:
# the trace would use values nothing produces. So the shadow run stops at its first operation that
# makes or writes a tensor (before running it: the shadows are untouched), and the function is
# called on the proxies themselves, which are tensors: its operations reach ``__torch_function__``
# or ``__torch_dispatch__`` and are recorded at the user's line like any other.
# A process group's method (``ProcessGroup.scatter``, which ``distribute_tensor`` calls) issues a c10d
# op that takes the group as a TorchBind object. In a pass with symbolic sizes, which runs under torch's
# Python dispatcher, torch's Python handler for such an op reached through the proxies' Python key
# (no mode on the stack) pops a mode that is not there ("trying to pop from empty mode stack",
# torch/_ops.py), so every symbolic pass of ``distribute_tensor(x, mesh, [Shard(0)])`` fell back to
# static shapes: an entry per size. Called on the proxies, such a function runs with the Python
# dispatcher off, and its op reaches the proxies' ``__torch_dispatch__`` as in a static pass.
class _MakesTensors(Exception):
    """Raised by _TensorOpsStop at an operation returning tensors."""


class _TensorOpsStop(TorchDispatchMode):
    """Lets only metadata operations through (those returning no tensor)."""

    def __torch_dispatch__(
        self, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        if func not in METADATA_OPS and _returns_tensors(func):
            raise _MakesTensors(func)
        return func(*args, **(kwargs or {}))


def _returns_tensors(func: Any) -> bool:
    schema = getattr(func, "_schema", None)
    if schema is None:
        return True
    return any("Tensor" in str(r.type) for r in schema.returns)


def _map(fn: Callable[[Any], Any], tree: Any) -> Any:
    return optree.tree_map(fn, tree, none_is_leaf=True)
