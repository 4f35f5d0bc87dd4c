"""Where the caller's objects go back into what a cached call returns (Note [Returning the caller's objects]).

Invariant: an object of the caller's that the output holds through torch's pytree nodes is the object the
call passes at its path, after the call's effects have written it; ``torch.Size`` is a leaf (never taken
apart into a tuple).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.utils._pytree as pytree

from jitcore.prologue import Path

__all__ = ["RETURNED", "ReturnedObjects", "is_size"]


# Note [Returning the caller's objects]
# ``batch["logits"] = model(batch["x"]); return batch`` returns the caller's own dict, written by the
# function. The trace's output held that dict object, which the pass then set back to its state at
# the call: every call returned a new dict without "logits" (while the caller's dict had it: the
# effect was replayed; the program had seen its own copy of the argument dict, Provenance.
# bind_argument). An object of the caller's (an argument container, or an object reached through the
# arguments or persistent state) that the output holds, directly or inside containers the function
# made, is taken out of the trace's output and returned as the object the call passes at its path,
# after the effects have written it: eager's object and contents. "Inside" means through every node
# torch's pytree knows, registered classes included: Hugging Face's ``generate`` with a static cache
# returns ``ModelOutput(past_key_values=cache)``, the caller's cache object; handed back as a copy,
# the caller's next generation wrote into the copy's stale lists (IndexError in index_copy_).
class _Returned:
    """The place of a caller's object in the output the trace returns."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the caller's object>"


RETURNED = _Returned()


def is_size(value: Any) -> bool:
    """A ``torch.Size``: a leaf of the output's tree (it holds numbers only, and torch's pytree gives it
    back as a plain tuple: ``(torch.Size([2]), cls)``, the caller's class, came back as ``((2,), cls)``)."""
    return type(value) is torch.Size


@dataclasses.dataclass(frozen=True, slots=True)
class ReturnedObjects:
    """Where the caller's objects go back into the output: the leaf positions (in torch's pytree
    order, with ``RETURNED`` a leaf) that hold ``RETURNED``, and the path of each."""

    holes: dict[int, Path]

    def fill(self, output: Any, args: tuple, kwargs: dict) -> Any:
        leaves, spec = pytree.tree_flatten(output, is_leaf=lambda v: v is RETURNED or is_size(v))
        for i, path in self.holes.items():
            leaves[i] = path.get(args, kwargs)
        return pytree.tree_unflatten(leaves, spec)
