"""Value reads: operations whose results depend on tensor values, traced as checked reads.

``bool(t)``, ``t.item()``, ``t.tolist()``, ``torch.equal`` and the like give Python values that the
rest of the program branches on or computes with; ``nonzero``, boolean-mask indexing and
``masked_select`` give tensors whose *shapes* depend on values. While tracing, the jit reads such a
value from the probe (jitcore/jit/probe.py) and records a ``check_read`` that recomputes it on every
cached call: when it differs, the computation raises ``ValueCheckFailed`` and the call goes to another
cache entry (or is traced again), after the computation's writes to its inputs are undone.
A data-dependent shape is checked after the op that makes it (``nonzero``: its ``(n, ndim)``);
differentiable ones are expressed through it: ``x[mask]`` and ``masked_select`` (the torch function,
and the aten op a composite run natively calls: ``torch.combinations``) index with the coordinates
``nonzero(mask)`` gives, so autograd differentiates an ordinary index. Once a size of such
an output was seen to change, it is a symbol of the computation instead (``size_of``, Note [Sizes
that values decide] in jitcore/jit/shapes.py), and only its other sizes are checked.
A clock read or a Python random draw (``per_call_read``) is made anew by every call: its number is no
traced value but a name, and only branches on it are checked (jitcore/jit/nondeterministic.py).

Invariants:
- a value read while tracing is used by the rest of the trace only behind a ``check_read`` that
  compares it exactly (type, value, sign of zero, NaN) with what the call computes;
- ``ValueCheckFailed`` is control flow between cache entries, never shown to the user.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from jitcore.ir import SourceFrame, Symbol, recorded_symbol
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy

__all__ = [
    "CLOCK_READ",
    "DATA_DEPENDENT_DECOMPOSITIONS",
    "MASKS_UNDER_GRAD",
    "RANDOM_DRAW",
    "READ",
    "SHAPE_OF",
    "SIZE_OF",
    "UNDER_AUTOGRAD",
    "ReadSite",
    "ValueCheckFailed",
    "check_read",
    "per_call_read",
    "runs_under_autograd",
    "same_number",
    "same_value",
    "shuffled",
    "size_of",
    "output_sizes",
]


@dataclass(frozen=True, slots=True, eq=False)
class ReadSite:
    """Where a traced program read a tensor value: what it read and the user's line."""

    what: str
    source: tuple[SourceFrame, ...] | None
    # a clock read's outcome: the first run may see another one than tracing did (the clock moved on)
    varies: bool = False

    @property
    def key(self) -> tuple:
        """The same read in another pass of the same function: what, and where (the whole stack)."""
        return self.what, tuple((f.filename, f.lineno, f.col, f.function) for f in self.source or ())

    def __str__(self) -> str:
        where = f" at {self.source[-1]}" if self.source else ""
        return f"{self.what}{where}"

    def __repr__(self) -> str:
        return f"<read {self}>"


class ValueCheckFailed(Exception):
    """A cached computation read another value than the one its trace was made with."""

    def __init__(self, site: ReadSite, expected: Any, got: Any) -> None:
        super().__init__(f"{site}: traced with {expected!r}, this call has {got!r}")
        self.site = site
        self.expected = expected
        self.got = got


def same_value(a: Any, b: Any) -> bool:
    """Exact equality of read values: same type, ``-0.0`` is not ``0.0``, NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (a != a and b != b)
    if type(a) is complex:
        return same_value(a.real, b.real) and same_value(a.imag, b.imag)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return bool(a == b)


def check_read(site: ReadSite, expected: Any, read: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run on every call: ``read(*args, **kwargs)`` must give what the trace was made with.

    Raises:
        ValueCheckFailed: it does not (the call goes to another cache entry).
    """
    got = read(*args, **kwargs)
    if not same_value(got, expected):
        raise ValueCheckFailed(site, expected, got)


def same_number(number: Any) -> Any:
    """What the check of one element of ``t.tolist()`` reads: the element's name itself (Note [The
    numbers of tolist], jitcore/jit/value_reads.py)."""
    return number


READ = recorded_symbol(check_read, langctx="jitcore", path="jitcore.langctx.reads.check_read",
                       tags=frozenset({"check"}))


SHAPE_OF = "the shape of "  # what the check of a value-shaped output's sizes reads (ReadSite.what)


def output_sizes(outputs: tuple[torch.Tensor, ...], symbolic: tuple[tuple[int, ...], ...]) -> tuple:
    """The sizes of a value-shaped op's outputs that its check compares: each output's, None at the
    dimensions that are symbols of the computation (``symbolic``, by output)."""
    return tuple(tuple(None if i in dims else s for i, s in enumerate(t.shape))
                 for t, dims in zip(outputs, symbolic))


def size_of(t: torch.Tensor, dim: int) -> int:
    """What the computation runs for a size that values decided (Note [Sizes that values decide],
    jitcore/jit/shapes.py): the size of the op's output on this call."""
    return t.shape[dim]


SIZE_OF = recorded_symbol(size_of, langctx="jitcore", path="jitcore.langctx.reads.size_of")


def per_call_read(fn: Callable[..., Any], *args: Any) -> Any:
    """What the computation runs for a clock read or a random draw, made anew by every call (Note [Clock
    reads and random draws on every call], jitcore/jit/nondeterministic.py): the call itself."""
    return fn(*args)


def shuffled(rng: Any, items: tuple) -> list:
    """What the computation runs for ``rng.shuffle(xs)`` (bound to ``rng``; Note [Seeds, samples and
    shuffles], jitcore/jit/nondeterministic.py): the items, shuffled as ``shuffle`` shuffles them."""
    out = list(items)
    rng.shuffle(out)
    return out


def _read_symbol(*tags: str) -> Symbol:
    return recorded_symbol(per_call_read, langctx="jitcore", path="jitcore.langctx.reads.per_call_read",
                           symbol_id=f"per_call_read{'_random' if tags else ''}",
                           tags=frozenset({"per_call", *tags}))


CLOCK_READ = _read_symbol()
RANDOM_DRAW = _read_symbol("python_random")
# A value-shaped op whose outputs carry gradients: its entry runs under torch's own autograd (Note
# [Value-shaped ops under grad] in jitcore/jit/value_reads.py).
UNDER_AUTOGRAD = "under_autograd"


def runs_under_autograd(bound_symbols: list[Any]) -> Any:
    """The first record tagged UNDER_AUTOGRAD, or None."""
    return next((b for b in bound_symbols if UNDER_AUTOGRAD in b.symbol.tags), None)


# --- data-dependent shapes through one checked count --------------------------------------------
def _masked_select(x: Any, mask: Any, *, out: Any = None) -> Any:
    if out is not None:
        return NotImplemented
    mask, x = torch.broadcast_tensors(mask, x)  # eager names the mask first in its error
    return x[mask]


def _where(condition: Any, *rest: Any, **kwargs: Any) -> Any:
    if rest or kwargs:
        return NotImplemented
    return torch.nonzero(condition, as_tuple=True)


def _is_mask(value: Any) -> bool:
    return isinstance(value, TensorProxy) and value.dtype in (torch.bool, torch.uint8)


def _check_mask_shapes(shape: Any, items: tuple) -> None:
    """Raise eager's IndexError for a mask whose shape is not the indexed dimensions': the coordinates
    ``nonzero`` gives index any tensor their values fit, so the check is made here, as torch makes it
    (on the tensor that ints and ``None`` made; sizes that are symbols are not compared)."""
    sliced = list(shape)
    consumed = sum(i.ndim if _is_mask(i) else 1 for i in items if i is not None and i is not Ellipsis)
    dim, masks = 0, []
    for item in items:  # ints and None first, as torch slices before it indexes with tensors
        if item is None:
            sliced.insert(dim, 1)
            dim += 1
        elif item is Ellipsis:
            dim += len(shape) - consumed
        elif isinstance(item, (int, NumberProxy)) and not isinstance(item, bool):
            del sliced[dim:dim + 1]
        else:
            if _is_mask(item):
                masks.append((item, dim))
            dim += item.ndim if _is_mask(item) else 1
    for mask, dim in masks:
        for j, size in enumerate(mask.shape):
            there = sliced[dim + j] if dim + j < len(sliced) else None
            # symbolic sizes: compared through the ShapeEnv, whose guard (equal or not) the prologue checks
            if there is not None and (size != there if type(size) is int and type(there) is int
                                      else isinstance(size, (int, torch.SymInt))
                                      and isinstance(there, (int, torch.SymInt)) and bool(size != there)):
                raise IndexError(f"The shape of the mask {_ints(mask.shape)} at index {j} does not match "
                                 f"the shape of the indexed tensor {_ints(sliced)} at index {dim + j}")


def _ints(sizes: Any) -> list:
    """Sizes as eager prints them (a symbolic one by its value: the call raises, nothing is traced)."""
    return [int(size) if isinstance(size, torch.SymInt) else size for size in sizes]


def _coordinate_index(x: Any, index: Any) -> Any:
    """A boolean-mask index as the coordinate tensors of its true elements (NotImplemented: none,
    or a 0-d mask, whose meaning depends on its position)."""
    items = index if type(index) is tuple else (index,)
    if not any(_is_mask(i) for i in items) or any(_is_mask(i) and i.ndim == 0 for i in items):
        return NotImplemented
    _check_mask_shapes(x.shape, items)
    out: list[Any] = []
    for item in items:
        if _is_mask(item):
            out.extend(torch.nonzero(item, as_tuple=True))
        else:
            out.append(item)
    return tuple(out)


def _read_slice_bounds(index: Any) -> Any:
    """``index`` with the tensor bounds of its slices read as ints (``x[:, :n]`` with a 0-dim ``n``:
    Hugging Face's beam search crops its sequences so), each a checked read of its own."""
    items = index if type(index) is tuple else (index,)

    def read(bound: Any) -> Any:
        return operator.index(bound) if isinstance(bound, TensorProxy) else bound

    out = [slice(read(i.start), read(i.stop), read(i.step))
           if type(i) is slice and any(isinstance(b, TensorProxy) for b in (i.start, i.stop, i.step)) else i
           for i in items]
    if all(a is b for a, b in zip(out, items)):
        return index
    return tuple(out) if type(index) is tuple else out[0]


def _static_index(x: Any, index: Any) -> Any:
    """The index with masks as coordinates and tensor slice bounds read (NotImplemented: neither)."""
    read = _read_slice_bounds(index)
    coordinates = _coordinate_index(x, read)
    if coordinates is not NotImplemented:
        return coordinates
    return NotImplemented if read is index else read


def _getitem(x: Any, index: Any) -> Any:
    static = _static_index(x, index)
    return NotImplemented if static is NotImplemented else x[static]


def _setitem(x: Any, index: Any, value: Any) -> Any:
    static = _static_index(x, index)
    if static is NotImplemented:
        return NotImplemented
    x[static] = value
    return None


def _index_put(fn: Callable[..., Any]) -> Callable[..., Any]:
    def put(x: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
        if type(indices) not in (tuple, list):
            return NotImplemented
        coordinates = _coordinate_index(x, tuple(indices))
        return NotImplemented if coordinates is NotImplemented else fn(x, coordinates, values, accumulate)

    return put


def _index_fill(in_place: bool) -> Callable[..., Any]:
    def fill(x: Any, dim: int, index: Any, value: Any) -> Any:
        rank = max(x.ndim, 1)
        if not isinstance(value, TensorProxy) or value.ndim != 0 or type(dim) is not int \
                or not -rank <= dim < rank or not (x.dtype.is_floating_point or x.dtype.is_complex):
            return NotImplemented  # the op itself, with eager's errors
        dim %= rank
        shape = [1] * x.ndim
        length = x.shape[dim] if x.ndim else 1
        if x.ndim:
            shape[dim] = length
        selected = torch.zeros(length, dtype=torch.bool, device=x.device).index_fill(0, index, True)
        filled = torch.where(selected.reshape(shape), value.to(x.dtype), x)
        return x.copy_(filled) if in_place else filled

    return fill


# Note [Masks whose values carry gradients]
# ``y[mask] = v`` (``index_put`` with a boolean mask) computes on fake tensors: its forward needs no
# values. Its backward does: the gradient of ``v`` is ``grad[mask]``, whose shape the mask's values
# decide, and the grad transform derives the backward on fake tensors, so it raised
# DataDependentError from ``backward()`` where eager computes the gradient. When ``v`` requires grad,
# the pass writes through the mask's coordinates instead (``nonzero``, a checked read of their
# count), the same elements in the same order, so the backward indexes with them. ``index_fill`` with
# a 0-d tensor value has the same trouble (its backward sums ``grad`` over ``unique(index)``): it is
# written as ``where`` over a mask of the filled positions, whose gradients are eager's.
# callable -> (position of the value whose gradient is at stake, expression)
MASKS_UNDER_GRAD: dict[Any, tuple[int, Callable[..., Any]]] = {
    torch.Tensor.__setitem__: (2, _setitem),
    torch.index_put: (2, _index_put(torch.index_put)),
    torch.index_put_: (2, _index_put(torch.index_put_)),
    torch.Tensor.index_put: (2, _index_put(torch.Tensor.index_put)),
    torch.Tensor.index_put_: (2, _index_put(torch.Tensor.index_put_)),
    torch.index_fill: (3, _index_fill(in_place=False)),
    torch.Tensor.index_fill: (3, _index_fill(in_place=False)),
    torch.Tensor.index_fill_: (3, _index_fill(in_place=True)),
}


# torch callable -> its expression through a checked count and static ops (NotImplemented: the
# arguments are outside what the expression covers; the generic read applies).
DATA_DEPENDENT_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    torch.masked_select: _masked_select,
    torch.Tensor.masked_select: _masked_select,
    torch.ops.aten.masked_select.default: _masked_select,
    torch.where: _where,
    torch.Tensor.__getitem__: _getitem,
    torch.Tensor.__setitem__: _setitem,
}
