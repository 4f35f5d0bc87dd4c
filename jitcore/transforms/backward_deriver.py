"""Backwards recorded on the replay's autograd graph: ``BackwardDeriver`` and the tangents it feeds.

The grad transform (grad.py) replays a trace on shadows; this module runs ``torch.autograd.grad`` on
their graph under the recording mode, with one tangent shadow per differentiable output, and makes the
recorded trace a plain one (subclass gradients rebuilt at its end). The first backward is recorded
for each output's own tangent kind; ``BackwardDeriver.derive`` records others on the same graph
(Note [A backward for other tangent kinds]).

Invariants:
- the replay's autograd graph is kept (``retain_graph``) and only one ``autograd.grad`` runs on it at
  a time (the deriver's lock);
- a recorded backward holds only plain tensors and aten ops; when autograd raised, it holds only the
  ``RAISE`` record of that error;
- a backward derived later assumes nothing of the symbolic sizes that the first one did not.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from jitcore.dispatch.flatten import UNFLATTEN, rebuild_kwargs
from jitcore.errors import DataDependentError, EagerOnlyValue
from jitcore.ir import BoundSymbol, Trace, TraceContext, tree_has
from jitcore.proxies import TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.transforms.backward_checks import resolve_backward_call
from jitcore.transforms.backward_effects import watched
from jitcore.transforms.backward_errors import RAISE, jitcores_own, kept_traceback, recording_error
from jitcore.transforms.recording import recording
from jitcore.transforms.symbolic_sizes import SizesNotRewritten, rewrite_sizes
from jitcore.transforms.tangents import TangentKind, kind_of_output, tangent_shadow

if TYPE_CHECKING:
    from jitcore.transforms.grad import _Replay

__all__ = ["BackwardDeriver", "DerivedBackward", "OutputSpec", "plain_only", "rebuilt"]


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """What the backward expects as the tangent of one differentiable output.

    Attributes:
        index: the output's position among the forward's tensor outputs.
        kind: the tangent's kind (type, flatten context and inner tensors, nested ones included;
            jitcore/transforms/tangents.py): the backward takes its plain tensors.
        shape: the output's shape (the tangent's, as autograd checks it).
    """

    index: int
    kind: TangentKind
    shape: tuple[int, ...]

    @property
    def subclass(self) -> type | None:
        """The tangent's tensor-subclass type (None for a plain tensor)."""
        return self.kind.subclass


@dataclass(frozen=True, slots=True)
class DerivedBackward:
    """A backward trace recorded by ``BackwardDeriver.derive`` (its ``args`` not yet set).

    Attributes:
        differentiable: the tangent each differentiable output takes, in backward argument order.
        tangent_args: the backward's tangent inputs (the tangents' plain tensors).
        backward: the trace; its bound symbols are plain-only, subclass gradients rebuilt at its end.
        outputs: one gradient proxy (or None) per input gradients are computed for.
        raises: autograd raised: the trace only re-raises it (``raise_backward_error``).
    """

    differentiable: list[OutputSpec]
    tangent_args: list[TensorProxy]
    backward: Trace
    outputs: list[Any]
    raises: bool


# Note [A backward for other tangent kinds]
# The backward trace is recorded for one tangent per output, of the output's own kind (class, flatten
# context, inner tensors). Eagerly a gradient of another kind (a plain gradient reaching a subclass
# output, a subclass one reaching a plain output, another ctx) runs the same autograd formulas with
# other ops below them: its class's ``__torch_dispatch__`` resolves them. So the replay's autograd
# graph on shadows is kept (``retain_graph``) and ``BackwardDeriver.derive`` runs
# ``torch.autograd.grad`` on it again with tangent shadows of the received kinds, recording another
# backward over the same forward proxies. jitcore/transforms/rederive.py then makes it take what the
# forward saved (recomputing forward ops from saved values where it reads other ones) and the
# runtime caches it by tangent kinds. Kept alive: the shadows' graph (fake tensors and autograd
# nodes, no data), as the traces already keep the shadows themselves.


class BackwardDeriver:
    """Records backward traces of one replay for given tangent kinds (Note above)."""

    def __init__(self, replay: _Replay, tensor_outputs: list[TensorProxy], wrt: list[TensorProxy],
                 fresh: tuple[int, ...]) -> None:
        self._replay = replay
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
            self._outputs = [
                (index, out) for index, out in enumerate(tensor_outputs)
                if out.shadow.requires_grad and index not in fresh
            ]
        self._wrt = wrt
        self._lock = threading.Lock()  # one autograd.grad on the kept graph at a time

    @property
    def forward(self) -> Trace:
        """The forward trace the backwards read values of."""
        return self._replay.forward

    def derive(self, kinds: Sequence[TangentKind | None] | None = None) -> DerivedBackward:
        """A backward for tangents of ``kinds`` (one per differentiable output, in order, None for an
        output no gradient reaches; ``kinds`` None: each output's own kind), recorded on the replay's
        autograd graph, which is kept for the next."""
        sizes = self._replay.sizes
        with self._lock:
            assumed = None if sizes is None else (sizes.state(), len(sizes.asserts()))
            differentiable, tangent_args, backward, grads = _record_backward(
                self._replay, self._outputs, self._wrt, kinds)
            # Note [Symbolic sizes through the grad transform]: the forward checks the guards and asserts
            # the first backward adds (grad_transform); those of a backward derived later would go unchecked
            now = None if sizes is None else (sizes.state(), len(sizes.asserts()))
            if now is not None and kinds is not None and now != assumed:
                raise SizesNotRewritten("the backward assumed more of the sizes than the prologue checks")
        raises = any(b.symbol is RAISE for b in backward.bound_symbols)
        backward.bound_symbols[:] = plain_only(backward.bound_symbols)
        outputs = [rebuilt(backward, g) if g is not None else None for g in grads]
        if kinds is not None:  # a later backward: torch assumed nothing more of a read's stand-in
            self._replay.numbers.assumed_nothing()
        names = self._replay.symbol_names()
        if names:  # after the rebuilds: a subclass gradient's outer sizes are symbolic too
            rewrite_sizes(backward, names)
        return DerivedBackward(differentiable, tangent_args, backward, outputs, raises)


def plain_only(bsyms: list[BoundSymbol]) -> list[BoundSymbol]:
    """The bound symbols that run on plain tensors: one that involves a subclass value is replaced
    by its (plain) subsymbols. Such records are ``__torch_dispatch__``'s fix-ups of the *outer*
    wrapper (``return_and_correct_aliasing`` re-running an in-place view op on it): the inner
    tensors' ops are recorded on their own, and intermediate wrappers never exist at run time."""
    out: list[BoundSymbol] = []
    for bsym in bsyms:
        if tree_has((bsym.args, bsym.kwargs, bsym.output), SubclassTensorProxy):
            out.extend(plain_only(list(bsym.subsymbols)))
        else:
            out.append(bsym)
    return out


def _record_backward(
    replay: _Replay, outputs: list[tuple[int, TensorProxy]], wrt: list[TensorProxy],
    kinds: Sequence[TangentKind | None] | None,
) -> tuple[list[OutputSpec], list[TensorProxy], Trace, list[Any]]:
    """Run ``torch.autograd.grad`` on the shadows under the recording mode, keeping their graph.

    Args:
        outputs: the differentiable outputs, each with its index among the tensor outputs.
        kinds: the tangents' kinds, one per output, None for an output that takes no tangent (the
            whole None: each output's own kind).

    Returns:
        The differentiable outputs' tangent specs, the backward's tangent inputs, the backward
        trace (its bound symbols recorded) and one gradient proxy (or None) per ``wrt``.
    """
    differentiable: list[OutputSpec] = []
    diff_outputs: list[torch.Tensor] = []
    tangents: list[torch.Tensor] = []
    tangent_args: list[TensorProxy] = []
    for k, (index, out) in enumerate(outputs):
        if kinds is not None and kinds[k] is None:
            continue  # no gradient reaches it (Note [Outputs no gradient reaches], autograd.py)
        spec, tangent, inner = _tangent_for(replay, index, out, None if kinds is None else kinds[k])
        differentiable.append(spec)
        diff_outputs.append(out.shadow)
        tangents.append(tangent)
        tangent_args.extend(inner)
    header = [
        line.replace("forward (grad transform)", "backward (grad transform)")
        for line in replay.forward.header
    ]
    backward = Trace(
        name="backward", header=header, imports=dict(replay.forward.imports), names=replay.forward.names
    )
    if not diff_outputs:
        return differentiable, tangent_args, backward, [None] * len(wrt)
    running: list[Any] = [None]  # the user stack of the node autograd runs now (set by its pre-hook)
    # a backward formula's TORCH_CHECK(allclose(...)) is a recorded check (transforms/backward_checks.py)
    context = TraceContext(backward, values=replay.values, call_handler=resolve_backward_call,
                           source_provider=lambda: running[0])
    handles = [node.register_prehook(lambda _grads, source=source: running.__setitem__(0, source))
               for node, source in replay.node_sources.values()]
    try:
        # Python backward code (an autograd.Function's backward) runs with __torch_function__ on, as
        # eagerly: NF4's ``weight.to(dtype)`` in its backward dequantizes there
        with recording(context), torch._C._EnableTorchFunction(), watched():  # noqa: SLF001
            grads = torch.autograd.grad(
                diff_outputs, [p.shadow for p in wrt], grad_outputs=tangents, allow_unused=True,
                retain_graph=True,  # Note [A backward for other tangent kinds]
            )
    except (DataDependentError, EagerOnlyValue):
        # jitcore's own refusal, not eager's error (a subclass tangent's dispatch reading values: no
        # read of pass 1 answers it, replayed_reads.py): the call runs eagerly (jit/eager_entries.py)
        raise
    except Exception as exc:  # noqa: BLE001 - eager raises it in backward(), so does the jitted function
        if replay.numbers.stood_in():  # Note [A read number under grad]: perhaps raised for a stand-in
            raise SizesNotRewritten(f"the backward raised {type(exc).__name__} with a number read from a "
                                    "tensor standing in") from exc
        backward.bound_symbols.clear()
        kept = kept_traceback(exc)
        if jitcores_own(exc):  # Note [jitcore's own errors while recording a backward]
            exc, kept = recording_error(exc.with_traceback(kept), running[0]), None
        backward.bound_symbols.append(BoundSymbol(RAISE, (exc, kept), {}, None))
        return differentiable, tangent_args, backward, [None] * len(wrt)
    finally:
        for handle in handles:
            handle.remove()
    return (
        differentiable,
        tangent_args,
        backward,
        [replay.state.proxy_of(g) if g is not None else None for g in grads],
    )


def _tangent_for(
    replay: _Replay, index: int, out: TensorProxy, kind: TangentKind | None
) -> tuple[OutputSpec, torch.Tensor, list[TensorProxy]]:
    """The tangent shadow of one output, of ``kind`` (None: the output's own kind, nested subclasses
    included), its plain tensors contiguous; and its backward inputs (those plain tensors)."""
    kind = kind_of_output(out) if kind is None else kind
    spec = OutputSpec(index, kind, tuple(out.shadow.shape))
    inner: list[TensorProxy] = []

    def leaf(k: TangentKind, path: str) -> torch.Tensor:
        stride = torch._prims_common.make_contiguous_strides_for(k.shape)  # noqa: SLF001
        if k.expanded:  # Note [An expanded inner gradient] (tangents.py)
            stride = (0,) * len(k.shape)
        with replay.values.fake_mode:
            shadow = torch.empty_strided(k.shape, tuple(stride), dtype=k.dtype, device=k.device)
        inner.append(replay.tangent_proxy(shadow, f"grad_{out.name}_{path}" if path else f"grad_{out.name}"))
        return shadow

    if kind.subclass is None:
        return spec, leaf(kind, ""), inner
    # the shadow's outer metadata, not the proxy's: an in-place view op on the wrapper
    # (``return_and_correct_aliasing``) updates the shadow only
    own = isinstance(out, SubclassTensorProxy) and out.subclass is kind.subclass
    tangent = tangent_shadow(kind, leaf, out.shadow.shape, out.shadow.stride() if own else None)
    replay.state.adopt(tangent)
    return spec, tangent, inner


def rebuilt(trace: Trace, value: TensorProxy) -> TensorProxy:
    """``value``; a subclass value is rebuilt at the end of ``trace`` from its inner tensors."""
    if isinstance(value, SubclassTensorProxy):
        names, ctx = value.inner_flatten()
        inner = {n: rebuilt(trace, getattr(value, n)) for n in names}
        shadow = value.shadow  # its outer metadata is current (see _tangent_for)
        args = (value.subclass, inner, ctx, tuple(shadow.shape), tuple(shadow.stride()))
        trace.bound_symbols.append(BoundSymbol(UNFLATTEN, args, rebuild_kwargs(value), value))
    return value
