"""Output metadata computed by torch itself: running torch callables on shadows (fake tensors).

Every symbol of the torch and aten language contexts computes its outputs here: the proxies'
shadows (FakeTensors of the trace's FakeTensorMode) are passed to the real torch callable, and the
fake results become the output proxies. Invariants:
- a shadow maps to exactly one proxy (``TensorValues.proxy_for``); an op that returns an input's
  shadow (in-place ops, ``out=``) returns that input's proxy;
- an argument torch rejects raises the exception eager torch raises, with eager's message (the call
  is replayed on small real tensors when fake tensors word it differently);
- a call whose outputs depend on tensor *values* raises DataDependentError, never a guess.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import optree
import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)

from jitcore.errors import DataDependentError
from jitcore.ir import NameGenerator, Trace, TraceContext, current_context
from jitcore.proxies import TensorProxy

__all__ = ["TensorValues", "evaluate", "meta_of", "new_context", "REPLAY_NUMEL_LIMIT"]

# Fake-tensor kernels log every failure at ERROR level before re-raising it; the exception itself is
# what the user gets, so the log line is noise.
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)

# Largest total element count for which a failed call is replayed on real tensors to obtain eager's
# exact error message.
REPLAY_NUMEL_LIMIT = 1 << 22


class TensorValues:
    """The tensor state of one trace: its fake mode and the shadow -> proxy map.

    Attributes:
        fake_mode: the FakeTensorMode all shadows of this trace belong to.
        names: the trace's name generator.
        strides_queried: whether the traced program asked for strides or contiguity (then the
            prologue guards the inputs' strides too).
    """

    __slots__ = ("fake_mode", "names", "strides_queried", "dispatch_state", "_by_shadow")

    def __init__(self, names: NameGenerator) -> None:
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
        self.names = names
        self.strides_queried = False
        self.dispatch_state: Any = None  # owned by jitcore.dispatch: subclass shadows <-> proxies
        self._by_shadow: dict[int, TensorProxy] = {}

    def input_proxy(self, tensor: torch.Tensor, name: str | None = None) -> TensorProxy:
        """A proxy for a real input tensor (its shadow keeps shape, strides, dtype, device, grad)."""
        shadow = self.fake_mode.from_tensor(tensor, static_shapes=True)
        return self._bind(shadow, self.names.claim(name) if name else self.names.fresh("t"))

    def proxy_for(self, shadow: torch.Tensor) -> TensorProxy:
        """The proxy of ``shadow``: the existing one, or a new one with a fresh name."""
        proxy = self._by_shadow.get(id(shadow))
        if proxy is not None and proxy.shadow is shadow:
            return proxy
        return self._bind(shadow, self.names.fresh("t"))

    def _bind(self, shadow: torch.Tensor, name: str) -> TensorProxy:
        proxy = TensorProxy(name, shadow)
        self._by_shadow[id(shadow)] = proxy
        return proxy


def new_context(trace: Trace, **options: Any) -> TraceContext:
    """A TraceContext for ``trace`` with fresh tensor state; ``options`` go to TraceContext."""
    return TraceContext(trace, values=TensorValues(trace.names), **options)


def meta_of(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``Symbol.meta`` of a torch callable: ``fn`` run on shadows."""

    def meta(*args: Any, **kwargs: Any) -> Any:
        return evaluate(fn, args, kwargs)

    return meta


def _to_shadow(value: Any) -> Any:
    return value.shadow if isinstance(value, TensorProxy) else value


def evaluate(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run ``fn`` on the shadows of ``args``/``kwargs`` and return its outputs as proxies.

    Raises:
        DataDependentError: the outputs depend on tensor values (``item``, ``nonzero``, ...).
        Exception: whatever eager torch raises for these arguments.
    """
    context = current_context()
    values: TensorValues = context.values
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    shadow_args, shadow_kwargs = optree.tree_unflatten(spec, [_to_shadow(v) for v in leaves])
    try:
        with values.fake_mode:
            out = fn(*shadow_args, **shadow_kwargs)
    except (DataDependentOutputException, DynamicOutputShapeException) as exc:
        raise DataDependentError(
            f"{_name(fn)} needs the values of its tensor arguments, which are not known while tracing "
            f"({type(exc).__name__}: {exc})",
            hints=(
                "keep this computation outside the jitted function, or make it independent of tensor values",
                "jitcore.jit(fn, fallback='eager') runs such functions eagerly instead",
            ),
        ) from None
    except Exception as exc:
        _raise_eager_error(fn, shadow_args, shadow_kwargs, exc)
        raise
    out_leaves, out_spec = optree.tree_flatten(out, none_is_leaf=True)
    return optree.tree_unflatten(
        out_spec, [values.proxy_for(o) if isinstance(o, FakeTensor) else o for o in out_leaves]
    )


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _raise_eager_error(fn: Callable[..., Any], args: tuple, kwargs: dict, fake_error: Exception) -> None:
    """Replay a failed call on small real tensors; if eager fails too, raise eager's exception."""
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    fakes = [v for v in leaves if isinstance(v, FakeTensor)]
    if sum(f.numel() for f in fakes) > REPLAY_NUMEL_LIMIT:
        return
    if any(f.device.type != "cpu" and not _device_available(f.device) for f in fakes):
        return
    real: dict[int, torch.Tensor] = {}
    for f in fakes:
        if id(f) not in real:
            size = f.untyped_storage().nbytes() // max(f.element_size(), 1)
            base = torch.zeros(max(size, f.storage_offset() + 1), dtype=f.dtype, device=f.device)
            t = base.as_strided(f.shape, f.stride(), f.storage_offset())
            real[id(f)] = t.requires_grad_(f.requires_grad) if f.is_leaf and f.requires_grad else t
    real_args, real_kwargs = optree.tree_unflatten(
        spec, [real[id(v)] if isinstance(v, FakeTensor) else v for v in leaves]
    )
    try:
        fn(*real_args, **real_kwargs)
    except Exception as eager_error:  # eager rejects these arguments too: its words are the user's
        raise eager_error.with_traceback(None) from None


def _device_available(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_available()
    return device.type == "cpu"
