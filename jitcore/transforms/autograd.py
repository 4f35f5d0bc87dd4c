"""Running a forward/backward pair under torch autograd: one ``torch.autograd.Function`` per call.

``GradComputation`` is the computation of a cache entry whose inputs require grad. A call runs the
compiled forward trace inside ``JitcoreFunction.forward`` (grad off: nothing is recorded twice),
keeps the saved values with ``ctx.save_for_backward``, and returns outputs connected to autograd;
``JitcoreFunction.backward`` checks the tangents against what was traced (tensor-subclass types and
flatten contexts), flattens subclass tangents to their inner tensors and runs the compiled backward
trace. Invariants:
- the backward receives contiguous tangents (the backward trace was recorded for those);
- a tangent of another kind than traced is an error naming the output, never a wrong gradient;
- the function's inputs are the computation's plain inputs, then the outer tensors of subclass
  inputs (the prologue passes both), so autograd connects to the tensors the user holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optree
import torch

from jitcore.errors import JitcoreError
from jitcore.ir import Proxy
from jitcore.proxies.protocol import tensor_flatten
from jitcore.transforms.grad import RAISE, GradTraces, OutputSpec

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
    ) -> None:
        """Args:
            traces: the grad transform's result.
            select: the compiled (forward, backward) of one call (``Executors.compile_together``);
                the pair may change between calls (once lowered), never within one.
            n_inputs: the prologue's inputs (the rest are subclass inputs' outer tensors).
            on_error: prepares an error the backward raised for the user (user lines).
        """
        self.traces = traces
        self.on_error = on_error
        self.select = select
        self.backward: Callable[..., Any] | None = None  # the latest call's (Note [A backward that raises])
        self.n_inputs = n_inputs
        self.output_tree = traces.output_tree
        unique: list[Proxy] = []
        for v in traces.output_leaves:
            if isinstance(v, Proxy) and not any(v is u for u in unique):
                unique.append(v)
        # (position among the output's leaves, index among the forward's outputs)
        self.tensor_positions = [
            (i, next(k for k, u in enumerate(unique) if u is v))
            for i, v in enumerate(traces.output_leaves) if isinstance(v, Proxy)
        ]
        self.output_leaves = [None if isinstance(v, Proxy) else v for v in traces.output_leaves]
        self.differentiable = traces.differentiable
        self.grad_inputs = traces.grad_inputs
        self.backward_raises = any(b.symbol is RAISE for b in traces.backward.bound_symbols)
        self.fresh_leaves = traces.fresh_leaves


# Note [A backward that raises]
# When autograd raised while the backward was derived (a user ``backward`` or ``__torch_dispatch__``
# that raises, a derivative torch does not implement), the backward trace only re-raises it. It
# runs from a pre-hook on the call's autograd node rather than from ``JitcoreFunction.backward``, so
# that no frame of torch's ``Function.apply`` sits between autograd's engine and the user's frames
# (eager shows that frame only for an ``autograd.Function``, and the kept frames include it then).

    def __call__(self, *inputs: Any) -> Any:
        outputs = JitcoreFunction.apply(self, *inputs)
        if not isinstance(outputs, tuple):
            outputs = (outputs,)
        if self.backward_raises:  # Note [A backward that raises]
            node = next(
                (o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None), None
            )
            if node is not None:
                node.register_prehook(self._raise_before_backward)
        for index in self.fresh_leaves:  # marked non-differentiable: leaves, given requires_grad as eagerly
            outputs[index].requires_grad_(True)
        leaves = list(self.output_leaves)
        for position, index in self.tensor_positions:
            leaves[position] = outputs[index]
        return optree.tree_unflatten(self.output_tree, leaves)

    def _raise_before_backward(self, grads: Any) -> None:
        try:
            self.backward(*[None] * len(self.traces.backward.args))
        except Exception as exc:
            if self.on_error is not None:
                self.on_error(exc)  # the user's frames that raised when the backward was derived
            raise

    def tangents(self, grads: tuple[Any, ...]) -> list[torch.Tensor]:
        """The backward's tangent inputs from the gradients of the forward's outputs.

        Raises:
            TangentMismatchError: a gradient's tensor-subclass type (or flatten context) differs from
                the one the backward was traced for.
        """
        flat: list[torch.Tensor] = []
        for spec in self.differentiable:
            grad = _checked_tangent(spec, grads[spec.index])
            if spec.subclass is None:
                flat.append(grad.contiguous())
                continue
            flat.extend(getattr(grad, name).contiguous() for name in spec.names)
        return flat


def _same_but_grad_flag(ctx: Any, expected: Any) -> bool:
    """Whether two flatten contexts differ only in the wrapper's ``requires_grad`` (a nested jagged
    tensor's ctx holds it): a tangent's own flag, which its inner tensors do not depend on."""
    if type(ctx) is not dict or type(expected) is not dict or "requires_grad" not in ctx:
        return False
    return {**ctx, "requires_grad": None} == {**expected, "requires_grad": None}


def _checked_tangent(spec: OutputSpec, grad: Any) -> Any:
    """``grad`` when it is of the traced kind, or coerced to it by the subclass's own
    ``__coerce_same_metadata_as_tangent__`` (torch's protocol for tangents of another ctx)."""
    expected = spec.subclass or torch.Tensor
    got = type(grad)
    if got is torch.nn.Parameter:
        got = torch.Tensor
    if got is expected:
        if spec.subclass is None:
            return grad
        _names, ctx = tensor_flatten(grad)
        if ctx == spec.ctx or _same_but_grad_flag(ctx, spec.ctx):
            return grad
        coerce = getattr(grad, "__coerce_same_metadata_as_tangent__", None)
        if coerce is not None:
            coerced = coerce(spec.ctx, expected)
            if coerced is not None and type(coerced) is expected and tensor_flatten(coerced)[1] == spec.ctx:
                return coerced
        detail = f"its __tensor_flatten__ context is {ctx!r}, traced with {spec.ctx!r}"
    else:
        detail = f"it is a {got.__qualname__}, the backward was traced for a {expected.__qualname__}"
    raise TangentMismatchError(
        f"the gradient of output {spec.index} of a jitted function is not what its backward was traced for: "
        f"{detail}",
        hints=(
            f"pass gradients of type {expected.__qualname__}, built like the output it belongs to",
            "or define __coerce_same_metadata_as_tangent__(expected_ctx, expected_type) on the subclass",
            "or call the function eagerly when gradients of another kind must flow through it",
        ),
    )


class JitcoreFunction(torch.autograd.Function):
    """Connects one call of a forward/backward trace pair to torch autograd."""

    @staticmethod
    def forward(ctx: Any, computation: GradComputation, *inputs: Any) -> Any:  # type: ignore[override]
        forward, backward = computation.select()
        outputs, saved = forward(*inputs[: computation.n_inputs])
        ctx.computation, ctx.backward = computation, backward  # the backward taking what was saved
        computation.backward = backward
        ctx.save_for_backward(*saved)
        differentiable = {spec.index for spec in computation.differentiable}
        constant = [
            o for i, o in enumerate(outputs) if i not in differentiable and isinstance(o, torch.Tensor)
        ]
        if constant:
            ctx.mark_non_differentiable(*constant)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        computation: GradComputation = ctx.computation
        tangents = computation.tangents(grads)
        try:
            results = ctx.backward(*ctx.saved_tensors, *tangents)
        except Exception as exc:
            if computation.on_error is not None:
                computation.on_error(exc)  # the user line of the forward op whose backward failed
            raise
        n_inputs = computation.n_inputs
        grad_inputs: list[Any] = [None] * (len(ctx.needs_input_grad) - 1)
        for (kind, i), grad in zip(computation.grad_inputs, results):
            grad_inputs[i if kind == "arg" else n_inputs + i] = grad
        return (None, *grad_inputs)
