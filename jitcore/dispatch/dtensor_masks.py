"""The masks DTensor keeps between ops: a ``_MaskPartial`` placement's ``MaskBuffer`` after a pass.

An embedding over a vocabulary-sharded weight (``Shard(0)``) gives a DTensor whose placement is a
``_MaskPartial``: the rows each rank does not hold are masked, and the mask is kept in the placement's
``MaskBuffer`` (refcounted) until a reduction (``full_tensor()``, ``redistribute``) applies and releases
it. The placement is sharding propagation's cached object, the same on every call.

Invariant: no pass leaves a mask of its own (a fake tensor) in a ``MaskBuffer``. A pass that would
(the program returns or drops an unreduced ``_MaskPartial`` DTensor) puts the buffer back as it found
it and is refused (``EagerOnlySubclass``): the call runs eagerly, which keeps eager's real mask there
(Note [A mask left in a MaskBuffer]).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch._subclasses.fake_tensor import FakeTensor

from jitcore.dispatch.dtensor import is_natively_dispatched
from jitcore.errors import EagerOnlySubclass

__all__ = ["refuse_masks_left"]


# Note [A mask left in a MaskBuffer]
# Tracing runs DTensor's C++ dispatch on shadows, so an embedding's ``materialize_mask`` stores the
# pass's fake mask in the (cached) placement's ``MaskBuffer`` and counts it. A reduction inside the
# function reads it back and releases it (a value of the trace: Note [A shadow the program reads back],
# jit/tensor_binding.py). Returned unreduced, the output's placement holds the fake mask, and the
# caller's ``out.full_tensor()`` met it in ``index_put_`` (AssertionError: "Please convert all Tensors
# to FakeTensors first"), where eager computes; a cached call would leave no mask at all. The mask is
# the computation's value of each call, which the computation does not return, so such a pass is
# refused and the call runs eagerly from its first call (an eager entry). The buffer held no mask
# when the pass began (one of eager's would have been compared with the pass's by ``torch.equal``, a
# value read: that pass runs eagerly already), so it is put back empty.
def refuse_masks_left(proxies: Iterable[Any]) -> None:
    """Raise ``EagerOnlySubclass`` where a DTensor of the pass holds a ``MaskBuffer`` with a fake mask,
    after emptying each such buffer (Note [A mask left in a MaskBuffer]).

    Args:
        proxies: the pass's tensor proxies (``TensorValues.proxies()``).
    """
    left = [buffer for buffer in _mask_buffers(proxies) if isinstance(buffer.data, FakeTensor)]
    if not left:
        return
    for buffer in left:
        buffer.data, buffer.refcount = None, 0
    raise EagerOnlySubclass(
        "a DTensor with a _MaskPartial placement (an embedding over a vocabulary-sharded weight) is "
        "left unreduced: DTensor keeps each call's mask in the placement's MaskBuffer"
    )


def _mask_buffers(proxies: Iterable[Any]) -> list[Any]:
    """The ``MaskBuffer``s of the placements of the DTensor proxies among ``proxies``, each once."""
    found: dict[int, Any] = {}
    for proxy in proxies:
        if not is_natively_dispatched(getattr(proxy, "python_type", type(None))):
            continue
        for placement in proxy.shadow.placements:
            buffer = getattr(placement, "mask_buffer", None)
            if buffer is not None:
                found[id(buffer)] = buffer
    return list(found.values())
