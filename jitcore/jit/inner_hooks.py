"""Tensor hooks and ``retain_grad()`` the traced program registers on tensors it computes
(``h.register_hook(fn)``, ``h.retain_grad()``), run by a backward the program runs itself.

A backward inside the program is one record (jitcore/jit/autograd_calls.py). A tensor made inside that
has hooks, or retains its gradient, and that the backward reaches becomes one more input of that
record: its gradient is what eager's engine hands its hooks. The hooks are interpreted on it, as a
caller's tensor hooks are (Note [A caller's tensor hooks]), so what they compute and write is traced and
replayed on every call; a retained gradient is kept as eager's ``.grad`` of the tensor.

Invariants (Note [Hooks registered inside the program]):
- a hook runs only where it observes: one that returns a gradient (a replacement) runs the call eagerly
  (JC-T001), as does a hooked or retaining tensor that another backward could reach after the call (it
  is returned or stored, or an output that requires grad depends on it), a tensor changed in place after
  its hook was registered, and a hook reached by ``torch.autograd.grad`` or ``backward(inputs=...)``;
- a tensor-subclass value the program computes is hooked like a plain one: its gradient, an input of the
  record, is a value of the class eager's engine hands the hook (Note [Hooks on a subclass value]);
- the order of hooks and of the leaves' gradients is the engine's: marker hooks on the shadows, for the
  record's own run, note the order in which torch's engine reaches them.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils.hooks import RemovableHandle

from jitcore.errors import UnsupportedOperationError
from jitcore.langctx.backward import graph_nodes
from jitcore.proxies import TensorProxy

__all__ = ["Hooked", "InnerHooks", "engine_order"]


@dataclass(slots=True)
class Hooked:
    """A tensor made inside the program with hooks registered on it, or whose gradient it retains."""

    proxy: TensorProxy
    node: Any  # its shadow's grad_fn when the first hook was registered (None for a leaf)
    # what a RemovableHandle removes from (an OrderedDict, as torch's: the handle holds it weakly)
    hooks: OrderedDict[int, Callable[..., Any]] = field(default_factory=OrderedDict)
    retained: bool = False


# Note [Hooks registered inside the program]
# ``h.register_hook(fn)`` and ``h.retain_grad()`` made the whole call an eager entry. Gradient logging,
# feature attribution (saving an activation's gradient) and ``retain_grad`` for inspection are common in
# training code whose backward runs inside the step. For a backward inside the program, a hooked
# non-leaf ``h`` it reaches is added to the record's inputs: ``autograd.grad`` captures the gradient
# flowing into ``h`` without stopping it (the leaves' gradients are unchanged), which is what eager's
# engine hands ``h``'s hooks. The hooks are interpreted on that gradient in registration order, then
# the retained gradient is kept (eager's ``retains_grad`` hook runs last: a contiguous clone, then
# out-of-place sums over later backwards). A hook that returns a gradient changes what flows on to the
# leaves, which the single record cannot express: such a call runs eagerly. A hook the caller's own
# backward could reach after the call (the tensor escapes, or an output that requires grad depends on
# it) would not run there either: such a call runs eagerly too.
# Note [Hooks on a subclass value]
# A hook or ``retain_grad()`` on a tensor-subclass value the program computes (``y = w * x`` of a
# TwoTensor weight, an activation's gradient logged in a training step over subclass parameters) made
# the call an eager entry, its ``__torch_dispatch__`` run on every call. Nothing in the record is
# plain-only: the record differentiates with respect to the hooked value as it does with respect to a
# subclass leaf, so the gradient it hands the hooks is a value of the class eager's engine hands them
# (a TwoTensor for a TwoTensor), its inner tensors outputs of the computation, and the hooks are
# interpreted on it. The rules of the Note above hold as for plain values (a replacing hook, a hooked
# value the call returns, still run eagerly). A hook on a caller's subclass tensor still runs eagerly:
# it outlives the call, as a plain one's does.
class InnerHooks:
    """The hooks and retained gradients of the tensors one tracing pass computes."""

    def __init__(self, is_input: Callable[[TensorProxy], bool]) -> None:
        self._is_input = is_input
        self._hooked: dict[int, Hooked] = {}

    def register(self, proxy: TensorProxy, hook: Callable[..., Any]) -> RemovableHandle:
        """``proxy.register_hook(hook)``; returns eager's handle (``remove()`` works inside)."""
        hooked = self._hooked_for(proxy, "register_hook")
        handle = RemovableHandle(hooked.hooks)
        hooked.hooks[handle.id] = hook
        return handle

    def retain(self, proxy: TensorProxy) -> None:
        """``proxy.retain_grad()``: a leaf's is a no-op, as eagerly."""
        if not proxy.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if _node(proxy) is None:
            return
        self._hooked_for(proxy, "retain_grad").retained = True

    def retains(self, proxy: TensorProxy) -> bool:
        found = self._hooked.get(id(proxy))
        return found is not None and found.retained

    def leaf_hooks(self, proxy: Any) -> list[Callable[..., Any]]:
        """The hooks the program registered on a leaf it made itself (run before it accumulates)."""
        found = self._hooked.get(id(proxy))
        return list(found.hooks.values()) if found is not None and found.node is None else []

    def reached(self, roots: Sequence[Any]) -> list[Hooked]:
        """The hooked non-leaf tensors a backward from the nodes ``roots`` reaches.

        Raises:
            UnsupportedOperationError: one was changed in place after its first hook.
        """
        if not any(h.node is not None for h in self._hooked.values()):
            return []
        nodes = {id(n) for n in graph_nodes(roots)}
        found = []
        for hooked in self._hooked.values():
            if hooked.node is None or not (hooked.hooks or hooked.retained):
                continue
            if _node(hooked.proxy) is not hooked.node:
                raise UnsupportedOperationError(
                    "a tensor with a hook registered inside the jitted function was changed in place "
                    "before the backward")
            if id(hooked.node) in nodes:
                found.append(hooked)
        return found

    def refuse_escapes(self, escaping: Sequence[Any]) -> None:
        """Note [Hooks registered inside the program]: a hooked tensor that a backward after the call
        could reach (``escaping`` are the proxies the call returns or stores) runs the call eagerly.

        Raises:
            UnsupportedOperationError: such a tensor.
        """
        live = [h for h in self._hooked.values() if h.hooks or h.retained]
        if not live:
            return
        reached = graph_nodes([_node(p) for p in escaping if isinstance(p, TensorProxy) and p.requires_grad])
        behind = {id(n) for n in reached} | {id(getattr(n, "variable", None)) for n in reached}
        behind |= {id(p) for p in escaping}
        behind.discard(id(None))
        for hooked in live:
            if id(hooked.proxy) in behind or id(hooked.node) in behind or id(hooked.proxy.shadow) in behind:
                raise UnsupportedOperationError(
                    "torch.Tensor.register_hook (or retain_grad()) inside the jitted function on a tensor "
                    "that is returned, stored, or behind an output that requires grad: a backward after the "
                    "call would run its hooks",
                    hints=("run the backward inside the function, or register the hook on the returned "
                           "tensor after the call",))

    def _hooked_for(self, proxy: TensorProxy, what: str) -> Hooked:
        if self._is_input(proxy):
            raise UnsupportedOperationError(
                f"torch.Tensor.{what} inside a jitted function on a tensor of the caller's (the hook "
                "outlives the call) is not supported")
        if what == "register_hook" and not proxy.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        found = self._hooked.get(id(proxy))
        if found is None:
            found = self._hooked[id(proxy)] = Hooked(proxy, _node(proxy))
        return found


def _node(proxy: TensorProxy) -> Any:
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        return proxy.shadow.grad_fn


@contextlib.contextmanager
def engine_order(tensors: Sequence[Any], order: list[int]) -> Iterator[None]:
    """Marker hooks on the shadows of ``tensors`` (proxies) for the block: each appends its index to
    ``order`` when torch's engine reaches it, so ``order`` is the engine's order of their hooks. Where a
    shadow is not a plain fake tensor, none is marked and ``order`` stays empty."""
    shadows = [t.shadow if isinstance(t, TensorProxy) else None for t in tensors]
    if not all(type(s) is FakeTensor and s.requires_grad for s in shadows):
        yield
        return
    handles = [s.register_hook(_marker(order, i)) for i, s in enumerate(shadows)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _marker(order: list[int], index: int) -> Callable[[Any], None]:
    def mark(_grad: Any) -> None:
        order.append(index)
    return mark
