"""A caller's tensor that the program holds itself, not through a proxy.

Library code hands the program a caller's tensor itself where it reads it from state that jitcore
does not bind item by item: ``module.parameters()`` iterates ``_parameters.items()``, an optimizer
iterates its ``param_groups``. Such a tensor reaches the trace when the program uses it:
- a torch call binds it to its input proxy (``bind``: through the path it was remembered by, else by
  identity) and records on the proxy; the records are pointed at the proxies when the pass ends
  (``point_records_at_inputs``), so that none keeps the tensor itself (it would print as a constant,
  stale once the caller replaces it, and be kept alive);
- Note [A caller's tensor the program holds itself]: what the program changes in place through a
  torch call (``p.requires_grad_(False)``, the sizes ``p.data = v`` gives) is recorded on the proxy,
  and the tensor itself does not show it while tracing; so reads of that metadata on a bound tensor
  answer from its proxy (``metadata``), as they would for the program's own value;
- ``p.data = v`` on it (a STORE_ATTR or ``setattr``) is stored into its proxy, which records ``set_``
  (``store_attr``): natively it would point the caller's tensor at a traced value's storage, which
  does not exist (a segmentation fault at the next use, ``nn.utils.vector_to_parameters``); so is
  ``p.requires_grad = flag`` (recorded as ``requires_grad_``: natively the caller's flag changed while
  tracing only, and a cached call did not change it).
Invariant: nothing here changes a caller's tensor while tracing; what the program changes reaches it
through the computation (or the replayed side effects) on every call.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import optree
import torch

from jitcore.ir import BoundSymbol, Proxy, Trace, tree_any
from jitcore.jit.function_transforms import holds_functorch_tensor
from jitcore.proxies import TensorProxy

__all__ = ["NOT_ANSWERED", "HeldTensors", "is_held_tensor"]

# the metadata a traced in-place call can change, read from the proxy of a bound tensor
_CHANGING_METADATA = frozenset({
    "requires_grad", "is_leaf", "grad_fn", "shape", "ndim", "size", "dim", "numel", "stride",
    "storage_offset", "is_contiguous",
})
_STORED_ON_PROXY = frozenset({"data", "requires_grad"})
# Note [Tensors read as attributes]
# ``w.T`` (Falcon's linear layers: ``input @ self.weight.T``), ``w.mT``, ``w.H``, ``z.real`` are tensors
# torch computes from the tensor, views with an autograd history. Read natively on a held tensor,
# the view was a tensor of its own, not recorded: a constant input of the trace, and under a
# backward inside the function a leaf of the shadows' graph that no record produces (the grad
# transform stopped at it). They are read on the held tensor's proxy instead, which records them.
_COMPUTED = frozenset({"T", "mT", "H", "mH", "real", "imag"})
NOT_ANSWERED = object()  # ``HeldTensors.metadata``: the read is not one it answers


def is_held_tensor(value: Any) -> bool:
    """A real tensor among the program's values (not one of the pass's proxies)."""
    return isinstance(value, torch.Tensor) and not isinstance(value, Proxy)


class HeldTensors:
    """The held tensors of one tracing pass (the pass's Provenance binds them)."""

    def __init__(self, provenance: Any) -> None:
        self._provenance = provenance

    def bind(self, value: Any) -> Any:
        """``value``'s input proxy where it is a held tensor; ``value`` itself otherwise."""
        if is_held_tensor(value):
            return self._provenance.bind_leaked_tensor(value)
        return value

    def bind_tree(self, tree: Any) -> Any:
        return optree.tree_map(self.bind, tree, none_is_leaf=True) if tree_any(tree, is_held_tensor) else tree

    def point_records_at_inputs(self, trace: Trace) -> None:
        symbols = trace.bound_symbols
        for i, bsym in enumerate(symbols):
            if tree_any(bsym.args, is_held_tensor) or tree_any(bsym.kwargs, is_held_tensor):
                bsym = dataclasses.replace(bsym, args=self.bind_tree(bsym.args),
                                           kwargs=self.bind_tree(bsym.kwargs))
            symbols[i] = self._shadows_named(bsym)
        trace.output = self.bind_tree(trace.output)

    # Note [A shadow a nested record holds]
    # A record made inside another (a Function's forward, a subclass's resolution) can be given a shadow
    # of this pass by code that kept it between ops: DTensor's ``Redistribute`` applies the mask an
    # embedding stored in the placement's ``MaskBuffer`` (``tensor[mask, :] = 0.0`` on the local tensor's
    # proxy, whose ``__setitem__`` records the fake mask as it is). Flattened into the computation, it was
    # a constant: the fake tensor, which the cached trace met in ``index_put_`` ("Please convert all
    # Tensors to FakeTensors first") where eager computes (``embedding(i, w).full_tensor()`` over a
    # vocabulary-sharded weight). Such a shadow is named by its proxy at any depth; other real tensors in
    # nested records (a constant a dispatch lifts) stay as they are.
    def _shadows_named(self, bsym: BoundSymbol) -> BoundSymbol:
        """``bsym`` with the shadows of the pass in its subsymbols' arguments replaced by their proxies."""
        if not bsym.subsymbols:
            return bsym
        subsymbols = tuple(self._shadows_named(self._named_once(sub)) for sub in bsym.subsymbols)
        if all(new is old for new, old in zip(subsymbols, bsym.subsymbols, strict=True)):
            return bsym
        return dataclasses.replace(bsym, subsymbols=subsymbols)

    def _named_once(self, bsym: BoundSymbol) -> BoundSymbol:
        known = self._provenance.values.known

        def named(value: Any) -> Any:
            proxy = known(value) if is_held_tensor(value) else None
            return value if proxy is None else proxy

        if not (tree_any(bsym.args, is_held_tensor) or tree_any(bsym.kwargs, is_held_tensor)):
            return bsym
        args, kwargs = optree.tree_map(named, (bsym.args, bsym.kwargs), none_is_leaf=True)
        return dataclasses.replace(bsym, args=args, kwargs=kwargs)

    def metadata(self, obj: Any, name: str) -> Any:
        """``obj.name`` answered by the proxy of a bound held tensor (or of ``obj`` bound now, for an
        attribute torch computes a tensor for), or ``NOT_ANSWERED``."""
        if name in _COMPUTED and is_held_tensor(obj) and not holds_functorch_tensor((obj,), {}):
            # recorded on the proxy (Note [Tensors read as attributes]); a transform's tensor (vmap's
            # BatchedTensor) is read natively, as a torch call on it runs (function_transforms.py)
            return getattr(self.bind(obj), name)
        if name not in _CHANGING_METADATA or not is_held_tensor(obj):
            return NOT_ANSWERED
        proxy: TensorProxy | None = self._provenance.bound_proxy(obj)
        return NOT_ANSWERED if proxy is None else getattr(proxy, name)

    def store_attr(self, obj: Any, name: str, value: Any) -> bool:
        """Whether ``obj.name = value`` was performed here (``data`` or ``requires_grad`` of a held
        tensor: on its proxy, which records ``set_`` or ``requires_grad_``)."""
        if name not in _STORED_ON_PROXY or not is_held_tensor(obj):
            return False
        setattr(self.bind(obj), name, value)
        return True
