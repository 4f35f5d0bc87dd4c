"""Running a forward/backward pair under torch autograd: one ``torch.autograd.Function`` per call.

``GradComputation`` is the computation of a cache entry whose inputs require grad. A call runs the
compiled forward trace inside ``JitcoreFunction.forward`` (grad off: nothing is recorded twice),
keeps the saved values with ``ctx.save_for_backward``, and returns outputs connected to autograd;
``JitcoreFunction.backward`` compares each gradient's kind (jitcore/transforms/tangents.py) with
the one the backward was traced for, flattens subclass gradients to their inner tensors and runs the
compiled backward trace, or the one derived for the gradients' kinds (rederive.py), made at the
first such call and cached by kinds. Invariants:
- the backward receives contiguous tangents (the backward trace was recorded for those);
- a gradient of another kind than traced gets eager's gradient through a backward derived for its
  kind, or an error naming the output (TangentMismatchError), never a wrong gradient;
- the function's inputs are the computation's plain inputs, then the outer tensors of the subclass
  inputs that require grad (the prologue passes every subclass input's), so autograd connects to the
  tensors the user holds and reads no other subclass's metadata.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import optree
import torch

from jitcore.errors import JitcoreError
from jitcore.ir import Proxy, Trace, compile_trace
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.transforms.applied_layouts import apply_with_layouts, outside_applied_layouts
from jitcore.transforms.backward_deriver import OutputSpec
from jitcore.transforms.backward_effects import EffectsByState
from jitcore.transforms.backward_errors import RAISE
from jitcore.transforms.grad import GradTraces
from jitcore.transforms.rederive import Unsaved, describe_unsaved, rederived_backward
from jitcore.transforms.state_numbers import StateNumbers
from jitcore.transforms.tangents import TangentKind, flatten_tangent, kind_of_gradient, symbolized
from jitcore.transforms.version_witnesses import check_witnesses, witnesses

__all__ = ["GradComputation", "JitcoreFunction", "TangentMismatchError"]


class TangentMismatchError(JitcoreError, TypeError):
    """The gradient reaching an output in backward is not of the kind the backward was traced for."""

    code = "JC-G001"


class GradComputation:
    """A cache entry's computation when inputs require grad (see the module docstring)."""

    def __init__(
        self,
        traces: GradTraces,
        select: Callable[[], tuple[Callable[..., Any], ...]],
        n_inputs: int,
        on_error: Callable[[BaseException], None] | None = None,
        saved_of: Callable[[Callable[..., Any]], Sequence[Any]] | None = None,
        counted: StateNumbers | None = None,
    ) -> None:
        """Args:
            traces: the grad transform's result.
            select: the compiled (forward, backward) of one call (``Executors.compile_together``);
                the pair may change between calls (once lowered), never within one.
            n_inputs: the prologue's inputs (the rest are subclass inputs' outer tensors).
            on_error: prepares an error the backward raised for the user (user lines).
            saved_of: the forward values (proxies of ``traces.forward``) that the forward paired with
                a backward callable of ``select`` saves; default: ``traces.forward``'s own.
            counted: the counters of the program's state among the inputs, and the outputs computed
                from them beside the forward (Note [Counters under grad], jit_hook.py).
        """
        self.counted = counted
        # the writes of the Python code the backward runs eagerly (Note [Effects of a backward's hooks],
        # jit_hook.py), performed after each run of the traced backward
        self.backward_effects: EffectsByState | None = None
        self.traces = traces
        self.on_error = on_error
        self.select = select  # also resets ``settled`` (the property's setter)
        self.backward: Callable[..., Any] | None = None  # the latest call's (Note [A backward that raises])
        self.n_inputs = n_inputs
        self.output_tree = traces.output_tree
        # Note [Views an autograd call returns] (view_outputs.py): made after the apply, from their bases
        self.views = traces.views
        viewed = {position for position, _slot in self.views.positions} if self.views is not None else set()
        unique: list[Proxy] = []
        for i, v in enumerate(traces.output_leaves):
            if isinstance(v, TensorProxy) and i not in viewed and not any(v is u for u in unique):
                unique.append(v)
        if self.views is not None:
            unique += self.views.hidden  # the forward returns them after the output's own tensors
        unique += traces.numbers  # Note [Numbers a grad entry returns], grad.py: after the tensors
        self.n_numbers = len(traces.numbers)
        # (position among the output's leaves, index among the forward's outputs)
        self.tensor_positions = [
            (i, next(k for k, u in enumerate(unique) if u is v))
            for i, v in enumerate(traces.output_leaves) if i not in viewed and any(v is u for u in unique)
        ]
        self.output_leaves = [None if isinstance(v, Proxy) else v for v in traces.output_leaves]
        self.differentiable = traces.differentiable
        # Note [Tangent kinds with symbolic sizes] (tangents.py): the outputs whose gradients each call
        # compares with its own output's kind
        self.sized_kinds = tuple(
            k for k, spec in enumerate(traces.differentiable)
            if spec.kind.subclass is not None and spec.kind.symbolic()
        )
        self.grad_inputs = traces.grad_inputs
        # Note [The autograd wrapper's per-call work]: what each call would otherwise recompute
        self.differentiable_indices = frozenset(spec.index for spec in traces.differentiable)
        n_differentiable = len(self.differentiable_indices)
        self.all_differentiable = (  # outputs 0..n-1 all differentiable: no output to mark constant
            n_differentiable if self.differentiable_indices == frozenset(range(n_differentiable)) else -1
        )
        # Note [Subclass inputs the autograd Function is given]: the outer tensors that take a gradient
        self.outer_applied = tuple(n_inputs + i for kind, i in traces.grad_inputs if kind != "arg")
        self.n_applied = n_inputs + len(self.outer_applied)
        rank = iter(range(n_inputs, self.n_applied))
        self.grad_positions = tuple(i if kind == "arg" else next(rank) for kind, i in traces.grad_inputs)
        # Note [The layouts of the applied subclass inputs]: their layouts on the entry's first run
        self.outer_layouts: tuple[torch.layout, ...] | None = None
        self.single_leaf = self.output_tree.is_leaf()  # the output is one value: nothing to unflatten
        self.backward_raises = any(b.symbol is RAISE for b in traces.backward.bound_symbols)
        self.fresh_leaves = traces.fresh_leaves
        self.assembly = traces.assembly
        self.input_flags = traces.input_flags
        self.returned_inputs = [  # (position among the output's leaves, index among the inputs)
            (position, i if kind == "arg" else n_inputs + i) for position, kind, i in traces.returned_inputs
        ]
        # Note [Entering the autograd Function]: every input a tensor, so unwrap_if_dead takes each
        self.tensor_inputs = all(isinstance(a, TensorProxy) for a in traces.forward.args)
        own_saved = traces.forward.output[1] if isinstance(traces.forward.output, tuple) else ()
        # Note [Symbolic sizes through the grad transform]: sizes the backward reads are saved numbers
        self.saved_numbers = tuple(i for i, v in enumerate(own_saved) if isinstance(v, NumberProxy))
        self.saved_of = saved_of or (lambda _backward: own_saved)
        self.witnessed = traces.witnessed  # Note [A saved subclass output written], version_witnesses.py
        # backwards derived for other tangent kinds: (saved values, kinds, callable), and their traces
        self.rederived: list[tuple[Sequence[Any], list[TangentKind | None], Callable[..., Any]]] = []
        self.rederived_traces: list[Trace] = []
        self._lock = threading.Lock()
        # Note [A call with nothing around the apply]: the one output's index among the forward's
        self.only_output = (
            self.tensor_positions[0][1]
            if self.single_leaf and len(self.tensor_positions) == 1 and counted is None
            and not self.input_flags and not self.returned_inputs and self.assembly is None
            and not self.backward_raises and not self.fresh_leaves and self.views is None
            else None
        )


# Note [Inputs returned as they are under autograd]
# ``return w, loss`` with ``w`` an input that requires grad: eagerly the caller gets ``w`` itself,
# a leaf whose ``.grad`` the loss's backward fills. The computation is one autograd node, and every
# tensor it hands back is one of its outputs: the caller got a non-leaf alias of ``w`` whose ``.grad``
# stays None (with torch's warning), ``out is w`` was False. An input that pass 1 returns or stores
# as it is, and that the call did not write (its version counter unchanged; a subclass input also a
# leaf), is handed back as the caller's object; the node's output for it takes no gradient.


# Note [Outputs no gradient reaches]
# When ``backward()`` reaches only some outputs of a call (``loss`` of ``(loss, logits)``), autograd
# hands None for the others. Zeros in their place (autograd's default for a Function) would give an
# input only those outputs reach a zero ``.grad`` where eager leaves it None, and would run their
# backward ops for nothing. So a None gradient is a tangent kind of its own: the backward is derived
# without those outputs (Note [A backward for other tangent kinds], backward_deriver.py), once per pattern.


# Note [The autograd wrapper's per-call work]
# A training step calls the wrapper twice (forward, backward) and autograd's own machinery around
# it; its Python runs on every call, beside kernels that can take microseconds. Everything that
# depends only on the traces is computed once here: the set of differentiable outputs (and whether
# every output is one, so that no output needs ``mark_non_differentiable``), where each gradient goes
# among the function's inputs, and whether the output is a single value (returned as it is rather
# than through ``tree_unflatten``). Each call still checks what varies per call: the outputs'
# count and types, the inputs' versions, the gradients' kinds.


# Note [A backward that raises]
# When autograd raised while the backward was derived (a user ``backward`` or ``__torch_dispatch__``
# that raises, a derivative torch does not implement), the backward trace only re-raises it. It
# runs from a pre-hook on the call's autograd node rather than from ``JitcoreFunction.backward``, so
# that no frame of torch's ``Function.apply`` sits between autograd's engine and the user's frames
# (eager shows that frame only for an ``autograd.Function``, and the kept frames include it then).

    def __call__(self, *inputs: Any) -> Any:
        only = self.only_output
        if only is not None:  # Note [A call with nothing around the apply]
            if len(inputs) != self.n_applied:
                inputs = self._applied(inputs)
            if self.outer_applied:
                outputs = self._with_outer_layouts(inputs)
                return outputs[only] if isinstance(outputs, tuple) else outputs
            if self.tensor_inputs and not _functorch_transforms_active():
                return _function_base_apply(self, *map(_unwrap_if_dead, inputs))[only]
            outputs = JitcoreFunction.apply(self, *inputs)
            return outputs[only] if isinstance(outputs, tuple) else outputs
        counted = self.counted
        if counted is not None:
            counts, inputs = counted.split(inputs)
        input_flags, returned_inputs = self.input_flags, self.returned_inputs
        for position, flag in input_flags:  # ``x.requires_grad_()``: autograd connects x's outputs
            if flag:
                inputs[position].requires_grad_(True)
        versions = [_version(inputs[i]) for _position, i in returned_inputs] if returned_inputs else ()
        applied = inputs if len(inputs) == self.n_applied else self._applied(inputs)
        if self.outer_applied:
            outputs = self._with_outer_layouts(applied)
        elif self.tensor_inputs and not _functorch_transforms_active():  # Note [Entering the autograd
            outputs = _function_base_apply(self, *map(_unwrap_if_dead, applied))  # Function]
        else:
            outputs = JitcoreFunction.apply(self, *applied)
        for position, flag in input_flags:  # ``p.requires_grad_(False)``: after, as the graph used it
            if not flag:
                inputs[position].requires_grad_(False)
        if not isinstance(outputs, tuple):
            outputs = (outputs,)
        if self.assembly is not None:  # Note [Subclass outputs the program assembles], assembly.py
            numbers = outputs[len(outputs) - self.n_numbers:] if self.n_numbers else ()
            outputs = [*self.assembly.build(outputs, inputs, self.n_inputs), *numbers]
        if self.backward_raises:  # Note [A backward that raises]
            node = next(
                (o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None), None
            )
            if node is not None:
                node.register_prehook(self._raise_before_backward)
        for index in self.fresh_leaves:  # marked non-differentiable: leaves, given requires_grad as eagerly
            if not outputs[index].requires_grad:
                outputs[index].requires_grad_(True)
        leaves = list(self.output_leaves)
        for position, index in self.tensor_positions:
            leaves[position] = outputs[index]
        for (position, i), version in zip(returned_inputs, versions):
            if _version(inputs[i]) == version and (i < self.n_inputs or inputs[i].is_leaf):
                leaves[position] = inputs[i]  # Note [Inputs returned as they are under autograd]
        if self.views is not None:  # Note [Views an autograd call returns], view_outputs.py
            self.views.make(leaves, outputs, inputs, self._input_index)
        if counted is not None:
            counted.fill(leaves, counts)
        return leaves[0] if self.single_leaf else optree.tree_unflatten(self.output_tree, leaves)

    @property
    def select(self) -> Callable[[], tuple[Callable[..., Any], ...]]:
        """The compiled (forward, backward) of one call (see ``__init__``)."""
        return self._select

    @select.setter
    def select(self, select: Callable[[], tuple[Callable[..., Any], ...]]) -> None:
        self._select = select
        # the pair every call runs once ``select`` is settled (Note [The pair of a settled select],
        # saved_values.py); None: each call asks ``select``
        self.settled: tuple[Callable[..., Any], ...] | None = None

    def _with_outer_layouts(self, applied: Sequence[Any]) -> Any:
        """The Function applied to ``applied``, which holds subclass outer tensors: their layouts answered
        as on the entry's first run (Note [The layouts of the applied subclass inputs])."""

        def apply() -> Any:
            if self.tensor_inputs and not _functorch_transforms_active():  # Note [Entering the autograd
                return _function_base_apply(self, *map(_unwrap_if_dead, applied))  # Function]
            return JitcoreFunction.apply(self, *applied)

        outer = applied[self.n_inputs:]
        if self.outer_layouts is None:  # the first run (the call that traced the entry): asked as eagerly
            self.outer_layouts = tuple(t.layout for t in outer)
            return apply()
        return apply_with_layouts(apply, outer, self.outer_layouts)

    def _applied(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """What the autograd Function is given of ``inputs``: the plain inputs, then the outer tensors
        of the subclass inputs that take a gradient (Note [Subclass inputs the autograd Function is
        given])."""
        return (*inputs[: self.n_inputs], *[inputs[k] for k in self.outer_applied])

    def _input_index(self, kind: str, i: int) -> int:
        """The index among the call's inputs of pass 1's argument i (``"arg"``) or subclass input i."""
        return i if kind == "arg" else self.n_inputs + i

    def _raise_before_backward(self, grads: Any) -> None:
        try:
            self.backward(*[None] * len(self.traces.backward.args))
        except Exception as exc:
            if self.on_error is not None:
                self.on_error(exc)  # the user's frames that raised when the backward was derived
            raise

    def expected_kinds(self, outputs: Sequence[Any]) -> list[TangentKind]:
        """The kind each differentiable output's gradient has in the usual case, for one call's
        ``outputs``: the recorded kind, with the call's sizes where it has symbolic ones (Note [Tangent
        kinds with symbolic sizes], tangents.py)."""
        kinds = [spec.kind for spec in self.differentiable]
        for k in self.sized_kinds:  # Note [A subclass kind's outer shape unread], tangents.py
            kinds[k] = kind_of_gradient(outputs[self.differentiable[k].index], outer_shape=False)
        return kinds

    def tangents(
        self, grads: tuple[Any, ...], backward: Callable[..., Any],
        expected: Sequence[TangentKind] | None = None,
    ) -> tuple[Callable[..., Any], list[torch.Tensor]]:
        """The backward to run for ``grads`` (the gradients of the forward's outputs) and its tangent
        inputs: ``backward`` when each gradient is of the kind it was traced for, else one derived
        for theirs (Note [A backward for other tangent kinds], backward_deriver.py), made once per kinds.

        Args:
            expected: the kinds the call's outputs expect (``expected_kinds``) where the recorded ones
                have symbolic sizes; None: the recorded ones.

        Raises:
            TangentMismatchError: no backward could be derived for a gradient's kind (the message
                says why and names the output).
        """
        flat: list[torch.Tensor] = []
        kinds: list[TangentKind | None] | None = None
        for k, spec in enumerate(self.differentiable):
            grad = grads[spec.index]
            if spec.kind.subclass is None and type(grad) in _PLAIN:  # the common case, checked first
                flat.append(grad.contiguous())
                continue
            kind = None if grad is None else _kind_of(spec, grad, False)  # None: Note [Outputs no gradient
            want = spec.kind if expected is None else expected[k]  # reaches]
            if kind != want:
                kind = kind if kind is None else _kind_of(spec, grad)  # read whole: Note [A subclass kind's
                # outer shape unread], tangents.py
                kinds = kinds or [s.kind for s in self.differentiable]
                kinds[k] = kind if kind is None or want is spec.kind else symbolized(kind, want, spec.kind)
            if kind is not None:
                flatten_tangent(grad, kind, flat)
        if kinds is None:
            return backward, flat
        if all(kind is None for kind in kinds):
            return self._no_gradients, flat
        return self._rederived(kinds, backward), flat

    def _no_gradients(self, *_args: Any) -> tuple[None, ...]:
        return (None,) * len(self.grad_inputs)

    def _rederived(self, kinds: list[TangentKind | None], backward: Callable[..., Any]) -> Callable[..., Any]:
        """The backward for tangents of ``kinds`` that takes what ``backward``'s forward saved."""
        saved = self.saved_of(backward)
        made = self._known(saved, kinds)
        if made is not None:
            return made
        with self._lock:
            made = self._known(saved, kinds)
            if made is None:
                trace = self._derive(kinds, saved)
                made = compile_trace(trace)
                self.rederived.append((saved, kinds, made))
                self.rederived_traces.append(trace)
        return made

    def _known(self, saved: Sequence[Any], kinds: list[TangentKind | None]) -> Callable[..., Any] | None:
        for done_saved, done_kinds, made in self.rederived:
            if done_saved is saved and done_kinds == kinds:
                return made
        return None

    def _derive(self, kinds: list[TangentKind | None], saved: Sequence[Any]) -> Trace:
        spec, kind = next((s, k) for s, k in zip(self.differentiable, kinds) if k != s.kind)
        if self.traces.deriver is None:  # not reached: such a backward raises before (a pre-hook)
            raise _mismatch(spec, kind, "autograd could not differentiate the function")
        try:
            return rederived_backward(self.traces, kinds, saved)
        except Unsaved as error:
            why, where = describe_unsaved(error)
            raise _mismatch(spec, kind, why, where) from None
        except Exception as exc:  # noqa: BLE001 - e.g. the class's __tensor_unflatten__ refusing that ctx
            raise _mismatch(spec, kind, f"deriving it raised {type(exc).__name__}: {exc}") from exc


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _kind_of(spec: OutputSpec, grad: Any, outer_shape: bool = True) -> TangentKind:
    try:
        return kind_of_gradient(grad, outer_shape=outer_shape)
    except Exception as exc:  # noqa: BLE001 - a subclass jitcore cannot flatten: nothing to trace
        raise _mismatch(spec, None, f"a {type(grad).__qualname__} cannot be flattened ({exc})") from exc


def _mismatch(
    spec: OutputSpec, kind: TangentKind | None, why: str, where: str | None = None
) -> TangentMismatchError:
    got = f"is {kind.describe()} " if kind is not None else ""
    return TangentMismatchError(
        f"the gradient of output {spec.index} of a jitted function {got}where its backward was traced for "
        f"{spec.kind.describe()}, and no backward could be derived for it: {why}",
        where=where,
        hints=(
            f"pass a gradient of the kind the backward was traced for ({spec.kind.describe()})",
            "or call the function eagerly when gradients of this kind must flow through it",
        ),
    )


class JitcoreFunction(torch.autograd.Function):
    """Connects one call of a forward/backward trace pair to torch autograd."""

    @staticmethod
    def forward(ctx: Any, computation: GradComputation, *inputs: Any) -> Any:  # type: ignore[override]
        pair = computation.settled  # Note [The pair of a settled select], saved_values.py
        if pair is None:  # ``_select``: the property's frame is not entered on each call
            select = computation._select  # noqa: SLF001
            pair = select()
            computation.settled = getattr(select, "settled", None)
        forward, backward = pair
        if computation.outer_applied:  # Note [The layouts of the applied subclass inputs]
            outputs, saved = outside_applied_layouts(lambda: forward(*inputs[: computation.n_inputs]))
        else:
            outputs, saved = forward(*inputs[: computation.n_inputs])
        ctx.computation, ctx.backward = computation, backward  # the backward taking what was saved
        computation.backward = backward
        if computation.saved_numbers:  # sizes (ints), which save_for_backward refuses
            ctx.to_save = tuple(v for v in saved if isinstance(v, torch.Tensor))
            ctx.saved_numbers = tuple(saved[i] for i in computation.saved_numbers)
        else:
            ctx.to_save = tuple(saved)  # ctx.save_for_backward(*saved), without its Python frame
        if computation.witnessed:  # Note [A saved subclass output written], version_witnesses.py
            ctx.witnesses = witnesses(outputs, computation.witnessed)
        ctx.materialize_grads = False  # ctx.set_materialize_grads(False): Note [Outputs no gradient reaches]
        if computation.sized_kinds:  # Note [Tangent kinds with symbolic sizes], tangents.py
            ctx.kinds = computation.expected_kinds(outputs)
        if len(outputs) != computation.all_differentiable:
            differentiable = computation.differentiable_indices
            constant = [
                o for i, o in enumerate(outputs) if i not in differentiable and isinstance(o, torch.Tensor)
            ]
            if constant:
                ctx.mark_non_differentiable(*constant)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        computation: GradComputation = ctx.computation
        backward, tangents = computation.tangents(
            grads, ctx.backward, ctx.kinds if computation.sized_kinds else None)
        try:
            if computation.witnessed:  # Note [A saved subclass output written], version_witnesses.py
                check_witnesses(ctx.witnesses)
            saved = ctx.saved_tensors
            if computation.saved_numbers:
                saved = list(saved)
                for i, number in zip(computation.saved_numbers, ctx.saved_numbers):
                    saved.insert(i, number)
            results = backward(*saved, *tangents)
        except Exception as exc:
            if computation.on_error is not None:
                computation.on_error(exc)  # the user line of the forward op whose backward failed
            raise
        if computation.backward_effects is not None and backward is ctx.backward:
            computation.backward_effects.replay()  # Note [Effects of a backward's hooks], jit_hook.py
        grad_inputs: list[Any] = [None] * len(ctx.needs_input_grad)  # the first: ``computation``'s
        for position, grad in zip(computation.grad_positions, results):
            grad_inputs[position + 1] = grad
        return tuple(grad_inputs)


# Note [Subclass inputs the autograd Function is given]
# The prologue passes the outer tensor of every subclass input after the plain inputs, and the forward
# trace reads only the plain ones (the inner tensors among them). torch's C ``apply`` reads each
# tensor argument's layout and sizes (a ``VariableInfo`` per argument, the node's ``input_info``),
# which for an NJT or another ``__torch_dispatch__`` subclass are dispatches to its class:
# ``prim.layout`` and ``aten.sym_size`` on every cached call, for an input no gradient flows to (the
# global NJT that SDPA's backward views through, an NJT of data). The Function is therefore given
# only the outer tensors of the subclass inputs that take a gradient (``GradTraces.grad_inputs``, from
# the tensor guard's ``requires_grad``): through them the gradient reaches the caller's graph (an
# NJT's own ``grad_fn`` back to its values), which the inner tensors would not (an NJT an op made
# holds inner tensors without history). ``grad_positions`` number gradients among those arguments.


# Note [The layouts of the applied subclass inputs]
# A wrapper made with ``dispatch_layout=True`` (MaskedTensor) answers ``layout`` in its
# ``__torch_dispatch__``, and the C apply reads the layout of each outer tensor it is given (the note
# above; twice per call): a MaskedTensor input requiring grad ran ``prim.layout`` twice on every cached
# call (``torch.softmax(x, -1).sum()``). The apply now runs under ``AppliedLayouts``
# (jitcore/transforms/applied_layouts.py), which answers those reads with the layouts the first run
# read as eagerly; the forward runs with that mode popped. Only entries given outer tensors pay for it.


# Note [A call with nothing around the apply]
# Most cached calls (a module's forward, a loss) return one tensor, and need none of the work that
# ``GradComputation.__call__`` does around the apply: no counters among the inputs, no
# ``requires_grad_`` to replay, no input returned as it is, no assembled subclass output, no backward
# that raises, no fresh leaf. ``only_output`` says so once (the output's index among the forward's),
# and such a call is the apply and one index. In ``JitcoreFunction.forward``, ``ctx.to_save`` and
# ``ctx.materialize_grads`` are set directly: torch's ``save_for_backward`` and
# ``set_materialize_grads`` are Python methods that set only those attributes. About 0.5 to 0.9 us
# of a 28 us module call (tests/jit/test_jit_module_call_overhead.py counts the frames).


# Note [Entering the autograd Function]
# ``Function.apply`` is Python in torch: outside functorch's transforms it asks whether the class
# defines ``setup_context`` (JitcoreFunction does not), unwraps dead functorch wrappers among the
# arguments with a generator expression (a frame per argument), then calls the C ``_FunctionBase.apply``.
# That is about a microsecond per call and a third of the Python frames of a cached module forward.
# ``GradComputation.__call__`` does the same steps itself when every input is a tensor:
# ``unwrap_if_dead`` mapped over the inputs in C, then the C ``apply``. Under a functorch transform,
# or with a non-tensor input, it calls ``JitcoreFunction.apply`` as before.
_function_base_apply = super(torch.autograd.Function, JitcoreFunction).apply
_functorch_transforms_active = torch._C._are_functorch_transforms_active  # noqa: SLF001
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead  # noqa: SLF001


def _version(tensor: torch.Tensor) -> int | None:
    """``tensor``'s version counter; None for an inference tensor, which has none (and which no
    call outside inference mode can write)."""
    return None if tensor.is_inference() else tensor._version
