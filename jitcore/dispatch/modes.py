"""Modes the program enters inside the traced function: ``TorchFunctionMode`` and ``TorchDispatchMode``.

torch keeps modes on two per-thread stacks; ``with Mode():`` pushes one (``__enter__`` calls
``torch._C._push_on_torch_function_stack`` or ``_push_on_torch_dispatch_stack``) and pops it on exit.
While tracing, a mode the program enters is kept on the trace's own stacks (``UserModes``, on the
trace context), never on torch's: jitcore runs torch natively on shadows to learn metadata, and a
mode on torch's stack would see those fake tensors and its results would never reach the trace
(a mode that rewrites an op or its output gave the program's results without the rewrite).
Instead, as torch does eagerly:
- each torch-level call the program makes asks the innermost function mode's ``__torch_function__``
  (interpreted, with the torch callable eager hands it), the mode off the stack for that call; what
  it runs is recorded in place of the call;
- each aten call torch's dispatcher makes asks the innermost dispatch mode's ``__torch_dispatch__``
  (interpreted, on proxies), the mode off the stack for that call; the aten ops it runs are recorded
  in place of the torch-level call.
A cached call runs the recorded ops only: none of the modes' code, as for a subclass's protocol
code (docs/subclasses.md, "Things to know"). A function mode is offered what eager's torch offers it,
not only the calls jitcore records (Note [What eager offers a function mode]).

Invariants:
- torch's own stacks never hold a mode of the program's while jitcore records; the functions that
  read or change them (push, pop, length, element) answer from the trace's stacks, above torch's;
- ``with torch.device(...)`` (torch's ``DeviceContext``, whose factories' device the trace records)
  stays on torch's stack, as before;
- what jitcore runs to answer one of eager's callables (a proxy's metadata, ``x.data = y``,
  ``nn.Parameter``'s ``_make_subclass``) runs with the program's modes hidden: no mode sees it;
- a dispatch mode's resolution runs below autograd: over tensors that require grad it must hand back
  the operation's own result (Note [A dispatch mode under autograd]), else the call is refused
  (UnsupportedOperationError: the call runs eagerly, JC-T001).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import optree
import torch
import torch.utils._device

from jitcore.dispatch.declined import declined_by_all
from jitcore.errors import UnsupportedOperationError
from jitcore.ir import current_context
from jitcore.langctx.torch import ANSWERED_BY_PROXY, proxy_members
from jitcore.proxies import TensorProxy
from jitcore.proxies.tensor import PlainTensorProxy

__all__ = ["MODE_STACK_FUNCTIONS", "UserModes", "hidden_modes", "offer", "offer_native", "offered_lookasides",
           "user_modes"]

# torch's own: pushed on its stack as it was (Note in the docstring)
_NATIVE_MODES = (torch.utils._device.DeviceContext,)  # noqa: SLF001
_NATIVE = object()  # a stack entry standing for a mode pushed on torch's stack


@dataclass(slots=True, eq=False)
class UserModes:
    """The modes the program entered inside the traced function, innermost last. An entry is a mode
    of the program's, or ``_NATIVE`` for one pushed on torch's stack (``torch.device``)."""

    function: list[Any] = field(default_factory=list)
    dispatch: list[Any] = field(default_factory=list)
    hidden: int = 0  # > 0 while jitcore answers one of eager's callables itself
    # a dispatch mode ran over tensors that require grad: pass 1 runs under torch's autograd
    # (Note [A dispatch mode under autograd])
    under_autograd: bool = False

    def innermost_function_mode(self) -> Any:
        """The function mode the next torch-level call asks, or None (none of the program's, or
        torch functions disabled: ``DisableTorchFunction``)."""
        if not self.function or self.function[-1] is _NATIVE or self.hidden \
                or torch._C._is_torch_function_all_disabled():  # noqa: SLF001
            return None
        return self.function[-1]

    def innermost_dispatch_mode(self) -> Any:
        return self.dispatch[-1] if self.dispatch and not self.hidden else None

    @contextlib.contextmanager
    def hide(self) -> Iterator[None]:
        """No mode of the program's is asked inside (jitcore's own answer to one of eager's callables)."""
        self.hidden += 1
        try:
            yield
        finally:
            self.hidden -= 1

    def ask_function_mode(self, mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
        """``mode.__torch_function__`` for ``func(*args, **kwargs)`` as eager hands it (the classes of
        the arguments' ``__torch_function__`` overrides as ``types``).

        Raises:
            TypeError: the mode returned NotImplemented, and so did the subclasses' own (eager's error).
        """
        from jitcore.dispatch.resolver import overriding_types, run_torch_functions

        types = overriding_types(args, kwargs)
        result = self.run_function_mode(mode, func, types, args, kwargs)
        if result is NotImplemented and types:  # eager asks the subclasses next, the mode back on its stack
            result = run_torch_functions(list(types), func, args, kwargs)
        if result is NotImplemented:
            raise declined_by_all(func, types, "__torch_function__", mode)
        return result


    def run_function_mode(self, mode: Any, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
        """``mode.__torch_function__(func, types, args, kwargs)`` interpreted, the mode off its stack."""
        return self._run(self.function, mode, "__torch_function__", func, types, args, kwargs)

    def run_dispatch_mode(self, mode: Any, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
        """``mode.__torch_dispatch__(func, types, args, kwargs)`` interpreted, the mode off its stack.

        Raises:
            UnsupportedOperationError: an argument requires grad with grad mode on and the mode did not
                hand back ``func``'s own result on the same arguments (Note [A dispatch mode under
                autograd]): torch's autograd would differentiate what the mode ran, not the call.
        """
        grad = torch.is_grad_enabled() and any(
            isinstance(v, torch.Tensor) and v.requires_grad for v in optree.tree_leaves((args, kwargs)))
        scope = current_context().scopes[-1] if grad else []
        start = len(scope)
        self.under_autograd |= grad  # before the mode's code runs: the numbers it reads are names
        out = self._run(self.dispatch, mode, "__torch_dispatch__", func, types, args, kwargs)
        if grad:
            if not _calls_through(func, args, kwargs, out, scope[start:]):
                raise UnsupportedOperationError(
                    f"a TorchDispatchMode ({type(mode).__qualname__}) answered an operation ({func}) on "
                    "tensors that require grad with something else than that operation's own result: it "
                    "runs below autograd, eagerly autograd differentiates the operation (and the mode sees "
                    "the backward's operations too), so the call is not traced and runs eagerly",
                    hints=("run the call under torch.no_grad() or torch.inference_mode() to have it traced",),
                )
        return out

    @staticmethod
    def _run(stack: list[Any], mode: Any, name: str, func: Any, types: tuple, args: tuple,
             kwargs: dict) -> Any:
        from jitcore.dispatch.resolver import interpret_protocol_code, torch_dispatch_rule

        position = len(stack) - 1 - stack[::-1].index(mode)
        del stack[position]
        try:
            rule = torch_dispatch_rule(func, type(mode)) if name == "__torch_dispatch__" else None
            if rule is not None:  # torch.library.register_torch_dispatch's, in place of the mode's
                return interpret_protocol_code(rule, mode, func, types, args, kwargs)
            return interpret_protocol_code(getattr(mode, name), func, types, args, kwargs)
        finally:
            stack.insert(position, mode)


# Note [What eager offers a function mode]
# Eagerly a TorchFunctionMode is offered every call torch's C++ argument parsing or a Python
# ``has_torch_function`` check reaches: the torch functions jitcore records (resolve_call asks the
# mode), and also what jitcore answers without a record and C functions it calls natively. Three
# doors, one rule (the mode is asked with eager's callable; jitcore's own answer runs with the modes
# hidden):
# - the proxy's own members the program calls (``x.shape``, ``x.size()``, ``len(x)``, ``x.data = y``):
#   lookasides keyed by the proxy's functions (``offered_lookasides``), asked as eager's callable
#   (``Tensor.shape.__get__``, ``Tensor.size``, ``Tensor.__len__``, ``Tensor.data.__set__``);
# - eager's callable called natively (``torch.Tensor.size(x)``, a mode's ``func(*args)``) on a
#   proxy: ``offer_native`` answers it as the proxy's member would;
# - any other torch C callable the program calls natively (``torch.device(...)``,
#   ``torch.can_cast``): torch itself decides whether it offers it, as eagerly: ``offer_native``
#   runs it with ``_Offered`` on torch's stack, which hands the first offer of that very callable to
#   the program's mode and lets any other through (jitcore's own work on shadows inside it).
# With no mode of the program's innermost, ``offer`` asks the arguments' classes' own
# ``__torch_function__`` in the first two doors, as eager's torch does (a plain subclass that logs what
# it is handed sees ``x.shape`` too).
def offer_native(fn: Any, args: tuple, kwargs: dict, call: Callable[[Any, tuple, dict], Any]) -> Any:
    """``call(fn, args, kwargs)``, the program's native call of ``fn``, offered to its function modes as
    eager's torch offers it (Note [What eager offers a function mode])."""
    try:
        answer = ANSWERED_BY_PROXY.get(fn)
    except (TypeError, ValueError):  # unhashable (a weakref to a writable memoryview hashes it)
        answer = None
    if answer is not None and args and isinstance(args[0], TensorProxy):
        return offer(fn, args, kwargs, answer)
    modes = user_modes_entered()
    if modes is None or modes.innermost_function_mode() is None or not _is_torch_callable(fn):
        return call(fn, args, kwargs)
    offered = _Offered(modes, fn)
    depth = torch._C._len_torch_function_stack()  # noqa: SLF001
    torch._C._push_on_torch_function_stack(offered)  # noqa: SLF001
    try:
        return call(fn, args, kwargs)
    finally:
        if torch._C._len_torch_function_stack() > depth:  # noqa: SLF001 - (torch put it back after the offer)
            torch._C._pop_torch_function_stack()  # noqa: SLF001


class _Offered(torch.overrides.TorchFunctionMode):
    """On torch's stack for one native call: the first offer of that callable goes to the program's
    innermost function mode (torch takes this mode off its stack for the offer); any other offer, or
    a later one, goes on as if it were not there."""

    def __init__(self, modes: UserModes, fn: Any) -> None:
        super().__init__()
        self.modes, self.fn, self.asked = modes, fn, False

    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if self.asked or not (func is self.fn or func == self.fn):
            return func(*args, **(kwargs or {}))
        self.asked = True
        mode = self.modes.innermost_function_mode()
        if mode is None:
            return func(*args, **(kwargs or {}))
        return self.modes.ask_function_mode(mode, func, args, kwargs or {})


def _is_torch_callable(fn: Any) -> bool:
    """A C callable of torch's: a function (``torch.can_cast``, ``torch._C._nn.gelu``), a class
    (``torch.device``), a Tensor method or a Tensor attribute's ``__get__``/``__set__``."""
    owner = getattr(fn, "__objclass__", None)
    if owner is None and type(fn) is types.MethodWrapperType:
        owner = getattr(fn.__self__, "__objclass__", None)
    module = getattr(owner if owner is not None else fn, "__module__", None)
    return isinstance(module, str) and module.startswith("torch")


@functools.cache
def offered_lookasides() -> dict[Any, Callable[..., Any]]:
    """Lookasides for the proxy's own members the program calls (``x.size()``, ``x.shape``, ``len(x)``):
    each offered to the program's function modes as eager's callable (``Tensor.size``). (One table for
    every pass: the caller copies it.)"""
    lookasides: dict[Any, Callable[..., Any]] = {}
    for eager, own, _klass in proxy_members():
        lookasides[own] = _offered_as(eager, own)
    for eager, answer in ANSWERED_BY_PROXY.items():
        if type(eager) is types.FunctionType:  # Tensor.__len__, Tensor.backward: torch's Python
            lookasides[eager] = _python_offered_as(eager, answer)
    lookasides[TensorProxy.__iter__] = _iterate
    for builtin in (builtins.len, builtins.list, builtins.tuple):
        lookasides[builtin] = functools.partial(_of_tensor, builtin)
    return lookasides


def _length(tensor: TensorProxy) -> int:
    return _offered_as(torch.Tensor.__len__, ANSWERED_BY_PROXY[torch.Tensor.__len__])(tensor)


def _of_tensor(builtin: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``len(x)``, ``list(x)``, ``tuple(x)`` of a tensor as CPython runs them (a sequence: the iterator,
    then the length as its size hint), each step offered to the program's modes; of anything else, the
    interpreter's own call (its lookaside: ``list(module_list)`` iterates as ``for`` does)."""
    from jitcore.interpreter import current_run
    from jitcore.interpreter.calls import opaque
    from jitcore.interpreter.lookasides import builtin_lookasides

    cls = type(args[0]) if len(args) == 1 and not kwargs else None
    if not (cls is not None and issubclass(cls, TensorProxy) and cls.__len__ is TensorProxy.__len__
            and cls.__iter__ is TensorProxy.__iter__):  # (not a class's own __len__ or __iter__)
        interpreted = builtin_lookasides().get(builtin)
        if interpreted is not None:
            return interpreted(*args, **kwargs)
        return opaque(current_run(), builtin, args, kwargs)
    if builtin is builtins.len:
        return _length(args[0])
    items = _iterate(args[0])
    _length(args[0])
    return builtin(items)


def _iterate(tensor: TensorProxy) -> Any:
    """``iter(x)``: eager's ``Tensor.__iter__`` is offered to no mode, but its ``self.dim()`` and
    ``self.unbind(0)`` are."""
    if _offered_as(torch.Tensor.dim, ANSWERED_BY_PROXY[torch.Tensor.dim])(tensor) == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(tensor.unbind(0))


def offer(func: Any, args: tuple, kwargs: dict, answer: Callable[..., Any]) -> Any:
    """``func(*args, **kwargs)`` of eager's, which jitcore answers with ``answer``: the program's
    innermost function mode is asked first, then the ``__torch_function__`` of the arguments'
    classes, as eagerly (each one's ``func(...)`` comes back here, the mode off its stack, or subclass
    ``__torch_function__`` disabled); ``answer`` runs with the program's modes hidden."""
    modes = user_modes_entered()
    mode = modes.innermost_function_mode() if modes is not None else None
    if mode is not None:
        return modes.ask_function_mode(mode, func, args, kwargs)
    for a in args:  # (no import where no argument is a subclass: ~1,500 metadata reads in a TwoTensor chain)
        if type(a) is not PlainTensorProxy and isinstance(a, TensorProxy):
            from jitcore.dispatch.resolver import NO_OVERRIDE, handle_torch_function

            result = handle_torch_function(func, args, args, kwargs)  # a subclass's own __torch_function__
            if result is not NO_OVERRIDE:
                return result
            break
    if modes is None:
        return answer(*args, **kwargs)
    with modes.hide():
        return answer(*args, **kwargs)


def _offered_as(eager: Any, answer: Callable[..., Any]) -> Callable[..., Any]:
    def offered(*args: Any, **kwargs: Any) -> Any:
        return offer(eager, args, kwargs, answer)

    return offered


def _python_offered_as(eager: types.FunctionType, answer: Callable[..., Any]) -> Callable[..., Any]:
    offered = _offered_as(eager, answer)

    def call(*args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], TensorProxy):
            return offered(*args, **kwargs)
        from jitcore.interpreter import current_run
        from jitcore.interpreter.calls import call_function

        return call_function(current_run(), eager, args, kwargs)

    return call


@contextlib.contextmanager
def hidden_modes() -> Iterator[None]:
    """No mode of the program's sees what runs inside (jitcore's own work for one of eager's callables
    that no mode sees: ``_make_subclass``, ``as_subclass``)."""
    modes = user_modes_entered()
    if modes is None:
        yield
        return
    with modes.hide():
        yield


def user_modes_entered() -> UserModes | None:
    """The current trace's modes where the program has entered one (None otherwise: no cost)."""
    context = current_context()
    return context.modes if context is not None else None


def user_modes() -> UserModes | None:
    """The current trace's modes (None outside tracing)."""
    context = current_context()
    if context is None:
        return None
    if context.modes is None:
        context.modes = UserModes()
    return context.modes


def _stack_functions(kind: str, push: Callable[..., Any], pop: Callable[..., Any], length: Callable[[], int],
                     at: Callable[[int], Any]) -> dict[Callable[..., Any], Callable[..., Any]]:
    def stack() -> list[Any]:
        modes = user_modes()
        return getattr(modes, kind) if modes is not None else []

    def push_(mode: Any) -> None:
        if isinstance(mode, _NATIVE_MODES) or user_modes() is None:
            push(mode)
            stack().append(_NATIVE)
            return
        stack().append(mode)

    def pop_(*args: Any) -> Any:
        entries = stack()
        if args and args[0] is not None:  # an infra mode's key (FakeTensorMode, ...): torch's own
            return pop(*args)
        if entries and entries[-1] is not _NATIVE:
            return entries.pop()
        if entries:
            entries.pop()
        return pop(*args)

    def length_() -> int:
        return length() + sum(entry is not _NATIVE for entry in stack())

    def at_(index: int) -> Any:
        native = length()
        if index < native:
            return at(index)
        return [entry for entry in stack() if entry is not _NATIVE][index - native]

    return {push: push_, pop: pop_, length: length_, at: at_}


# What the program's torch code calls to change or read the mode stacks, and what runs instead while
# tracing (the interpretation's lookasides for C functions).
MODE_STACK_FUNCTIONS = {
    **_stack_functions("function", torch._C._push_on_torch_function_stack, torch._C._pop_torch_function_stack,  # noqa: SLF001
                       torch._C._len_torch_function_stack, torch._C._get_function_stack_at),  # noqa: SLF001
    **_stack_functions("dispatch", torch._C._push_on_torch_dispatch_stack, torch._C._pop_torch_dispatch_stack,  # noqa: SLF001
                       torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at),  # noqa: SLF001
}


# Note [A dispatch mode under autograd]
# Eagerly a TorchDispatchMode runs below autograd: autograd records the operation it is handed (its
# backward formula), whatever the mode runs for it, and where ``loss.backward()`` runs with the mode
# on torch's stack, the mode is handed the aten ops of those backward formulas too. jitcore's grad
# transform derives its own backward and runs it as one autograd node, whose ops are close to eager's but
# not the same (a ``clone`` of the tangent, detaches elsewhere): a counting or logging mode would see
# other ops. So a pass where a dispatch mode ran over tensors that require grad (``under_autograd``)
# keeps no grad transform: its entry runs pass 1 under torch's own autograd (transforms/jit_hook.py),
# pass 1 holding the aten ops the mode ran, each differentiated by torch as eagerly. Its graph is
# eager's, so a backward run under the mode hands it eager's ops, on real tensors, natively; the
# mode's forward state is replayed as for any mode (Note [Modes around the call], jit/caller_modes.py).
# That is eager's gradient only where what the mode ran is what autograd differentiates: the mode must
# return the output of one record of ``func`` on the very arguments it was handed (``_calls_through``;
# a mode may log, count, read shapes, or run more ops beside it). A mode that rewrites the op
# (``aten.mul`` into ``aten.add``) or its result is refused and the call runs eagerly, as before; so is
# such a pass that logs or prints (a log line replayed after the computation formats its tensors with
# autograd's grad_fn, which eagerly the mode's tensors have not yet: torch's LoggingTensorMode), or that
# holds a backward (jitcore traces it, the mode is never handed its ops), or over tensor subclasses
# (transforms/jit_hook.py).
def _calls_through(func: Any, args: tuple, kwargs: dict, out: Any, records: list[Any]) -> bool:
    """Whether ``out`` is the output of a record of ``func`` on ``args``/``kwargs`` among ``records``."""
    from jitcore.langctx.aten import op_symbol

    try:
        symbol = op_symbol(func)
    except Exception:  # noqa: BLE001 - not an aten op jitcore records: no record can be it
        return False
    leaves = optree.tree_leaves(out, none_is_leaf=True)
    given = optree.tree_leaves((args, kwargs), none_is_leaf=True)
    for bsym in records:
        if bsym.symbol.id != symbol.id:
            continue
        outs = optree.tree_leaves(bsym.output, none_is_leaf=True)
        mine = optree.tree_leaves((bsym.args, bsym.kwargs), none_is_leaf=True)
        if len(outs) == len(leaves) and all(a is b for a, b in zip(outs, leaves)) \
                and len(mine) == len(given) and all(a is b or (not isinstance(a, TensorProxy) and a == b)
                                                    for a, b in zip(mine, given)):
            return True
    return False
