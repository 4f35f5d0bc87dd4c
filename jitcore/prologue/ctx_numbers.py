"""Floats a tensor subclass's ``__tensor_flatten__`` ctx holds, read per call instead of pinned.

A subclass input whose ctx held a float that changed between calls (a quantized tensor's
``{"scale": s}``) has that float bound as a dynamic number (jitcore/jit/ctx_numbers.py): its ``flatten``
guard then expects ``FLOAT`` at that place, which equals any float and nothing else, so the guard
checks the ctx's structure and its other entries while the number itself is an input of the
computation.

Invariants:
- ``FLOAT`` equals exactly the values whose type is ``float`` (a NaN too: it is an input, not a
  constant), compared from either side;
- it stands only where a pass bound the ctx entry as a dynamic number, read through the path
  ``value.__tensor_flatten__()[1][...]``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FLOAT", "AnyFloat", "holds_any_float"]


class AnyFloat:
    """The expected value of a ctx place bound as a dynamic number: any float (the module doc)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is float or type(other) is AnyFloat

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(AnyFloat)

    def __repr__(self) -> str:
        return "<any float>"

    def __reduce__(self) -> Any:
        return "FLOAT"


FLOAT = AnyFloat()


def holds_any_float(tree: Any) -> bool:
    """Whether ``FLOAT`` stands somewhere in ``tree`` (through dicts, lists and tuples)."""
    if type(tree) is AnyFloat:
        return True
    if type(tree) is dict:
        return any(holds_any_float(v) for v in tree.values())
    return type(tree) in (list, tuple) and any(holds_any_float(v) for v in tree)
