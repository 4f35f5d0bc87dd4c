"""Float numbers read inside a fused region: which calls may read one, and the FX nodes that do it
as eager does.

Note [Float reads in a region]
A float dynamic number enters a region as a 0-d float64 tensor (Note [Dynamic floats as tensors] in
symbolic.py). Eager does not treat a Python float in one way for every op: where the scalar is
rounded, and in which dtype the op computes, differ per op, and a compiled region must do what eager
does. Measured on CPU (bit for bit over 10^5 random values per dtype, float32/float16/bfloat16 and
int64 tensors; R is the result dtype, C the computation dtype: float32 for float16/bfloat16, else R):

- ``t * x``, ``t + x``, ``t - x``, ``t / x`` (``FLOAT_SCALAR_OPS``): eager keeps ``x`` unrounded
  in C; nodes ``op(t, x as C)``, then R;
- ``torch.add/sub(t, u, alpha=x)``: eager rounds ``x`` to R, then computes ``t + x*u`` in C;
  nodes ``op(t as C, (u as C) * (x as R as C))``, then R;
- ``torch.rsub(t, x)`` (``x - t``): eager rounds ``x`` to R, the difference in C; nodes
  ``(x as R as C) - (t as C)``, then R;
- ``x / t`` (``Tensor.__rtruediv__``): eager computes ``t.reciprocal() * x``, the reciprocal
  rounded to R; nodes ``reciprocal(t) * (x as C)``, then R;
- ``clamp/clip(t, min, max)``, ``clamp_min``, ``clamp_max``: eager rounds the bounds to R and
  compares in R; nodes ``clamp_max(clamp_min(t as R, lo as R), hi as R)``.

Only calls with a floating-point result, tensor operands where the table has ``t``/``u``, and no
other keyword arguments are taken. Not taken, and why:
- ``t ** x`` (``pow``) and ``x ** t``: eager picks a kernel by the exponent's *value* (``x == 2``
  squares, ``0.5`` takes ``sqrt``, ``-1`` ``reciprocal``, ...), so results differ from a general
  ``pow`` with a tensor exponent in the last bit and at signed zeros and infinities
  (``sqrt(-0.) = -0.`` against ``pow(-0., 0.5) = +0.``); a region compiled once for every value
  cannot pick them;
- Python arithmetic on floats (``1 - momentum``): the result is a Python float, read outside the
  region (as a ``torch`` argument, a guard, the output); it is moved out of the region's way instead
  (regions.py); ``x / 0.`` raises in Python and would be ``inf`` as a tensor;
- other ops with a float argument (``lerp``, ``addcmul(value=)``, ``where(c, t, x)``, ``full``,
  ``leaky_relu``'s slope, ...): not measured here; they stay on torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from jitcore.ir import BoundSymbol, Proxy
from jitcore.proxies import TensorProxy

__all__ = ["FLOAT_SCALAR_OPS", "float_call", "is_float_number", "reads_floats_as_eager"]

# ``t (op) x``: the float as the second operand, unrounded (the first row of the Note's table)
FLOAT_SCALAR_OPS = frozenset({torch.mul, torch.add, torch.sub, torch.div, torch.true_divide,
                              torch.multiply, torch.subtract})
_ALPHA_OPS = frozenset({torch.add, torch.sub})
_CLAMPS = frozenset({torch.clamp, torch.clip})
_ONE_SIDED = frozenset({torch.clamp_min, torch.clamp_max})
_COPY = torch.ops.aten._to_copy.default


def is_float_number(proxy: Any) -> bool:
    """Whether ``proxy`` stands for a Python float (a dynamic number)."""
    return getattr(proxy, "python_type", None) is float


def reads_floats_as_eager(bsym: BoundSymbol) -> bool:
    """Whether ``bsym``, which reads a float number, is a call of the Note's table."""
    fn, args, kwargs, output = bsym.symbol.fn, bsym.args, bsym.kwargs, bsym.output
    if not (isinstance(output, TensorProxy) and output.shadow.dtype.is_floating_point):
        return False
    tensor_first = len(args) == 2 and isinstance(args[0], TensorProxy)
    if fn in _ALPHA_OPS and kwargs:
        return (tensor_first and isinstance(args[1], TensorProxy) and set(kwargs) == {"alpha"}
                and is_float_number(kwargs["alpha"]))
    if fn in FLOAT_SCALAR_OPS or fn in _ONE_SIDED or fn is torch.rsub or fn is torch.Tensor.__rtruediv__:
        return tensor_first and is_float_number(args[1]) and not kwargs
    if fn in _CLAMPS:
        return _clamp_bounds(bsym) is not None
    return False


def float_call(graph: fx.Graph, bsym: BoundSymbol, nodes: dict[int, fx.Node]) -> fx.Node:
    """The nodes computing ``bsym`` (``reads_floats_as_eager``) with its floats as 0-d float64
    tensors, rounded and computed as eager does (the Note's table)."""
    fn, args = bsym.symbol.fn, bsym.args
    result = bsym.output.shadow.dtype
    compute = torch.float32 if result in (torch.float16, torch.bfloat16) else result

    def node(value: Any, *dtypes: torch.dtype) -> Any:
        """The node of ``value`` converted to each of ``dtypes`` in turn (a constant as is)."""
        out = nodes[id(value)] if isinstance(value, Proxy) else value
        for dtype in dtypes if isinstance(value, Proxy) else ():
            out = graph.call_function(_COPY, (out,), {"dtype": dtype})
        return out

    def call(target: Callable[..., Any], *operands: Any) -> fx.Node:
        return graph.call_function(target, operands)

    if fn in _CLAMPS or fn in _ONE_SIDED:
        low, high = _clamp_bounds(bsym) if fn in _CLAMPS else (
            (args[1], None) if fn is torch.clamp_min else (None, args[1]))
        out = node(args[0], result) if args[0].shadow.dtype != result else node(args[0])
        for bound, clamp in ((low, torch.clamp_min), (high, torch.clamp_max)):
            if bound is not None:
                out = call(clamp, out, node(bound, result))
        return out
    if fn in _ALPHA_OPS and bsym.kwargs:
        scaled = call(torch.mul, node(args[1], compute), node(bsym.kwargs["alpha"], result, compute))
        out = call(fn, node(args[0], compute), scaled)
    elif fn is torch.rsub:
        out = call(torch.sub, node(args[1], result, compute), node(args[0], compute))
    elif fn is torch.Tensor.__rtruediv__:
        out = call(torch.mul, call(torch.reciprocal, node(args[0])), node(args[1], compute))
    else:  # FLOAT_SCALAR_OPS
        out = call(fn, node(args[0]), node(args[1], compute))
    return graph.call_function(_COPY, (out,), {"dtype": result})


def _clamp_bounds(bsym: BoundSymbol) -> tuple[Any, Any] | None:
    """``clamp(t, min, max)``'s bounds when each is a float number, a Python number or None and
    ``t`` a tensor; None otherwise."""
    args, kwargs = bsym.args, bsym.kwargs
    if not args or not isinstance(args[0], TensorProxy) or len(args) > 3 or set(kwargs) - {"min", "max"}:
        return None
    bounds = [*args[1:], None, None][:2]
    for i, name in enumerate(("min", "max")):
        if name in kwargs:
            if len(args) > i + 1:
                return None
            bounds[i] = kwargs[name]
    for bound in bounds:
        if not (bound is None or is_float_number(bound) or type(bound) in (int, float)):
            return None
    return bounds[0], bounds[1]
