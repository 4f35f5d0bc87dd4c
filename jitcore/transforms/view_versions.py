"""The version of a base an output view's node cannot be made again from (Note [The version of a
written base]): bumped after the views made with ``as_strided`` of it, so that autograd refuses them as
eagerly.

Invariants:
- only a base of a ``split``/``unbind`` output or of a view made under ``no_grad`` or inference mode
  that the program wrote after the view (a strided step of ``ViewOutputs``) is bumped;
- a base the Function saved for backward, or shares storage with a value it saved, is never bumped
  (``ctx.save_for_backward``'s version check would fail the backward where eager's computes);
- the bump follows the strided steps and precedes the chains' calls: a view the program made after
  its base's last write keeps the node made with it, as eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from jitcore.proxies import TensorProxy
from jitcore.transforms.view_outputs import Root, ViewOutputs

__all__ = ["bumped_after_written_views", "shares_a_saved_value"]


# Note [The version of a written base]
# ``a, b = z.split(2); z.mul_(2); return z, a`` (or ``unbind``, or ``v = z.view(-1)`` under ``no_grad``
# before the write): eagerly ``a``'s version counter is ahead of the one its node was made at, and
# autograd cannot make that node again for a multi-output or no_grad view: reading ``a.grad_fn``
# raises ("Output 0 of SplitBackward0 is a view and its base or another view of its base has been
# modified inplace ..."), and so does a backward through it. Made after the Function (``as_strided``
# of the base with eager's creation kind, Note [A view whose base is written]), the view's node was
# made at the current version: ``grad_fn`` read ``AsStridedBackward0`` and the backward computed
# (/tmp/grd55-probes/eager3.py). The base's version is bumped after those views are made, as the
# program's write bumped it eagerly; a base the Function saved (or a value sharing its storage) is
# left as it was, since the saved value's version check would then fail the Function's backward.
def bumped_after_written_views(views: ViewOutputs, saved: Callable[[Root], bool]) -> ViewOutputs:
    """``views`` bumping the version of each base of a strided view autograd refuses to make again.

    Args:
        views: ``plan``'s result.
        saved: whether the Function saves a value sharing the storage of a root (an input or an
            output of the Function).
    """
    strided = views.steps[: views.n_strided]
    refused = sorted({viewed for fn, _rest, _kwargs, viewed, _written, mode in strided
                      if fn is not torch.Tensor.as_strided or mode != "grad"})  # several, or no_grad
    roots = dict(views.roots)
    bumps = tuple((_bump, (), {}, slot, (), "grad")
                  for slot in refused if slot in roots and not saved(roots[slot]))
    if not bumps:
        return views
    return replace(views, steps=(*strided, *bumps, *views.steps[views.n_strided:]))


def _bump(base: torch.Tensor) -> None:
    """The base's version, one ahead (as the program's write made it eagerly)."""
    torch.autograd.graph.increment_version(base)


def shares_a_saved_value(saved: Sequence[Any], proxy_of: Callable[[Root], Any]) -> Callable[[Root], bool]:
    """Whether a root (its forward proxy: ``proxy_of``) shares its storage with one of the values
    ``saved`` for backward (forward proxies), by their shadows' bases."""
    storages = {id(_storage(value)) for value in saved if isinstance(value, TensorProxy)}

    def shares(root: Root) -> bool:
        proxy = proxy_of(root)
        return not isinstance(proxy, TensorProxy) or id(_storage(proxy)) in storages

    return shares


def _storage(proxy: TensorProxy) -> torch.Tensor:
    """The shadow of ``proxy``, or its base where it is a view."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        shadow = proxy.shadow
        return shadow._base if shadow._is_view() else shadow  # noqa: SLF001
