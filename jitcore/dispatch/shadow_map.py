"""The subclass values of one trace, shadows and proxies both ways (``DispatchState``).

A shadow is the real subclass instance (over fake inner tensors) that torch's dispatcher and the
class's own code see while a call is resolved (dispatch/resolver.py); its proxy is what the trace
names. Both live in the trace's one shadow map (``TensorValues.known``/``bind``).

Invariant: every shadow maps back to exactly one proxy, so step k's output is step k+1's input; a
subclass instance torch or the class builds while resolving is adopted as a new proxy holding the
proxies of what the instance holds (Note [Inner tensors kept twice]).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from jitcore.ir import current_context
from jitcore.proxies import TensorProxy
from jitcore.proxies.protocol import instance_attributes
from jitcore.proxies.subclass import SubclassTensorProxy, subclass_proxy

__all__ = ["DispatchState"]


class DispatchState:
    """Subclass values of one trace, shadows and proxies both ways, kept in the trace's one shadow
    map (``TensorValues.known``/``bind``)."""

    __slots__ = ("values",)

    def __init__(self, values: Any) -> None:
        self.values = values

    @staticmethod
    def of(values: Any) -> DispatchState:
        """The dispatch state of a trace's tensor values."""
        return DispatchState(values)

    @staticmethod
    def of_current() -> DispatchState:
        return DispatchState(current_context().values)

    def register(self, proxy: SubclassTensorProxy) -> None:
        self.values.bind(proxy.shadow, proxy)

    def shadow_of(self, value: Any) -> Any:
        if isinstance(value, SubclassTensorProxy):
            shadow = value.shadow
            if self.values.known(shadow) is None:
                self.values.bind(shadow, value)
            return shadow
        if isinstance(value, TensorProxy):
            return value.shadow
        return value

    def proxy_of(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or isinstance(value, TensorProxy):
            return value
        proxy = self.values.known(value)
        if proxy is not None:
            return proxy
        if isinstance(value, FakeTensor):
            return self.values.proxy_for(value)
        if type(value) is torch.Tensor:
            # a real tensor a subclass value holds (an NJT's ``_min_seqlen_tensor`` made while tracing
            # from a Python number): a constant of the trace, as ShadowDispatchMode.proxy_of keeps it
            return value
        return self.adopt(value)

    def _held(self, value: Any) -> Any:
        """An attribute of a subclass instance as its proxy holds it: the proxies of its tensors, also
        inside plain lists, tuples and dicts (NJT's ``_metadata_cache``; Note [Inner tensors kept twice])."""
        if isinstance(value, torch.Tensor):
            return self.proxy_of(value)
        if type(value) is dict:
            held: Any = {k: self._held(v) for k, v in value.items()}
            same = all(held[k] is v for k, v in value.items())
        elif type(value) in (list, tuple):
            held = type(value)(self._held(v) for v in value)
            same = all(h is v for h, v in zip(held, value))
        else:
            return value
        return value if same else held  # Note [A subclass input's own containers]

    def _outer_like(self, shadow: torch.Tensor) -> torch.Tensor:
        """A fake tensor with the outer metadata of the subclass instance ``shadow`` (a nested jagged
        tensor's own: its ragged sizes are nested ints, which no plain tensor can have, Note [Nested
        ints]). Read without the class's ``__torch_function__`` (Note [jitcore's reads of a shadow])."""
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
            if shadow.layout is torch.jagged:
                return shadow
            return self._fake_like(shadow)

    def _fake_like(self, shadow: torch.Tensor) -> torch.Tensor:
        with self.values.fake_mode:
            return torch.empty_strided(
                shadow.shape, shadow.stride(), dtype=shadow.dtype, device=shadow.device,
                requires_grad=shadow.requires_grad,
            )

    def refresh_outer(self, proxy: SubclassTensorProxy) -> None:
        """An in-place view op on a wrapper (``x.t_()``) changes its shadow's outer metadata through
        ``return_and_correct_aliasing``: the proxy follows, so code after it sees eager's shape."""
        shadow = proxy.shadow
        outer = proxy.outer_metadata
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
            now = (shadow.shape, shadow.stride(), shadow.requires_grad)
        if now != (outer.shape, outer.stride(), outer.requires_grad):
            proxy.set_outer(self._outer_like(shadow))

    def adopt(self, shadow: torch.Tensor, name: str | None = None) -> SubclassTensorProxy:
        """A proxy for a subclass instance over fake tensors that torch or the class itself built."""
        cls = type(shadow)
        proxy = subclass_proxy(name or self.values.names.fresh("t"), cls, self._outer_like(shadow))
        for key, value in instance_attributes(shadow).items():  # slots too
            proxy.hold(key, self._held(value))
        proxy.set_shadow(shadow)
        self.values.bind(shadow, proxy)
        return proxy


# Note [Inner tensors kept twice]
# A class often keeps its inner tensors in a container as well as in the attributes its
# ``__tensor_flatten__`` names (a sharded tensor: ``self.shards = list(shards)`` beside ``shard0``,
# ``shard1``, ..., for a count its ctx gives). The container of the shadow built around fake tensors
# holds those fake tensors; the proxy must hold their proxies there too, or what the class's code reads
# through the container (``sum(s.sum() for s in self.shards)``) is a fake tensor the trace never names:
# a fake output, or a constant of the first call's values.
