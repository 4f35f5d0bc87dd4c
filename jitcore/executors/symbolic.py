"""The example inputs a region is compiled for: static sizes, or symbolic sizes and dynamic numbers.

Note [Symbolic regions]
A trace with symbolic sizes (docs/user-guide.md, "Dynamic shapes") has shadows whose sizes are
SymInts of the tracing pass's ShapeEnv, and size inputs (``s0``) and computed sizes (``n0``) among
its number inputs; a trace with dynamic numbers has int and float NumberProxy inputs. A region of
such a trace is compiled as torch.compile(dynamic=True) compiles a graph: its example inputs live in
a *fresh* ShapeEnv, in which each symbol of the trace's sizes is a new backed symbol (same hint) and
each other int input an unspecified symbol; tensors get sizes and strides that are the same
expressions of the new symbols (``4*s0`` stays ``4*s0``). A fresh ShapeEnv, rather than the trace's,
because inductor may add guards while it compiles, and the entry's prologue was made before: the
guards the compile added are returned (``CompileInputs.guards``) and checked on each call of the
compiled region, with the relations between sizes and symbolic strides; a call where one fails runs
the region's FX graph (torch) and has a variant compiled with its sizes as the hints (Note [Variants
of a region] in inductor.py); a call whose strides inductor's code rejects runs the FX graph too.
Every symbol must be readable from a placeholder (the size inputs are added to a region that needs
them: regions.py); a region where one is not is declined.

Note [Dynamic floats as tensors]
Inductor's kernels take no float arguments, so a float input is passed as a 0-d float64 tensor
(made per call from the Python float), as dynamo's unspecialized floats are. Eager converts a Python
scalar operand to the computation dtype of the op (float32 for float16/bfloat16 results) and the
result keeps the tensor operand's dtype; fx_graph.py converts the 0-d tensor and the result to those
dtypes, so values and dtypes are eager's. Which calls read a float inside a region, and how each
rounds it as eager does: float_reads.py, Note [Float reads in a region] (inductor.py claims no other
float use).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from jitcore.executors.float_reads import is_float_number
from jitcore.executors.interface import Region
from jitcore.ir import Proxy
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import traced_symbol_values

__all__ = ["CompileInputs", "compile_inputs", "is_symbolic_size"]


def is_symbolic_size(value: Any) -> bool:
    """Whether a size or stride is a SymInt that is not a constant."""
    return type(value) is torch.SymInt and not value.node.expr.is_number


@dataclass(eq=False)
class CompileInputs:
    """What a region is compiled for.

    Attributes:
        fake_mode: the FakeTensorMode of ``examples`` (with its own ShapeEnv).
        examples: one per region input: a fake tensor, a SymInt, or (a float) a 0-d float64 fake.
        floats: positions of float inputs, passed to the compiled region as 0-d float64 tensors.
        symbolic: whether any example has a symbol.
    """

    fake_mode: Any
    examples: list[Any]
    floats: tuple[int, ...]
    symbolic: bool

    def guards(self) -> Callable[[Sequence[Any]], bool] | None:
        """After compiling: a check of the guards the compile left in the ShapeEnv on a call's
        arguments (floats already converted), or None when there is nothing to check."""
        if not self.symbolic:
            return None
        from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

        env = self.fake_mode.shape_env
        # static sizes and strides are the prologue's and inductor's (its code asserts them)
        code = env.produce_guards_expression(self.examples)
        if not code:
            return None
        compiled = compile(code, "<jitcore region guards>", "eval")
        names = [f"t{i}" for i in range(len(self.examples))]
        return lambda args: bool(eval(compiled, SYMPY_INTERP, {"L": dict(zip(names, args))}))

    def converter(self) -> Callable[[tuple[Any, ...]], tuple[Any, ...]] | None:
        """The per-call conversion of the region's arguments (floats to 0-d tensors), or None."""
        if not self.floats:
            return None
        floats = self.floats

        def convert(args: tuple[Any, ...]) -> tuple[Any, ...]:
            values = list(args)
            for i in floats:
                values[i] = torch.tensor(values[i], dtype=torch.float64)
            return tuple(values)

        return convert


def compile_inputs(region: Region, shapes: Sequence[Any] | None = None) -> CompileInputs:
    """Fake example inputs for ``region`` in a fresh ShapeEnv (Note [Symbolic regions]).

    Args:
        region: the region.
        shapes: for a variant (Note [Variants of a region] in inductor.py), per region input the
            call's ``(sizes, strides)`` of a tensor or its number: the symbols' hints are taken from
            them instead of the traced values, so the compile's guards are chosen for that call.

    Raises:
        ValueError: a symbol of the region's sizes is not readable from any of its inputs.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    # Note [Inductor's disk cache] (inductor.py): the FX graph cache needs a ShapeEnv.
    fake_mode = FakeTensorMode(shape_env=ShapeEnv())
    symbols = _Symbols(fake_mode.shape_env, region, shapes)
    examples: list[Any] = []
    floats: list[int] = []
    with fake_mode:
        for i, proxy in enumerate(region.inputs):
            if isinstance(proxy, TensorProxy):
                shadow = proxy.shadow
                t = torch.empty_strided([symbols.size(n) for n in shadow.shape],
                                        [symbols.size(n) for n in shadow.stride()],
                                        dtype=shadow.dtype, device=shadow.device)
                examples.append(t.requires_grad_(region.grad and shadow.requires_grad))
            elif is_float_number(proxy):
                floats.append(i)
                examples.append(torch.empty((), dtype=torch.float64))
            else:
                examples.append(symbols.number(proxy, None if shapes is None else shapes[i]))
    symbols.check_bound(examples)
    return CompileInputs(fake_mode, examples, tuple(floats), bool(symbols.fresh))


class _Symbols:
    """The trace's size symbols and int inputs as symbols of a fresh ShapeEnv."""

    def __init__(self, env: Any, region: Region, shapes: Sequence[Any] | None) -> None:
        self.env = env
        self.fresh: dict[sympy.Symbol, sympy.Expr] = {}  # a trace symbol -> its symbol here
        self.hints: dict[sympy.Symbol, int] = {}
        for proxy in region.inputs:  # the trace's symbols, by name, with the traced values
            if isinstance(proxy, TensorProxy):
                for n in (*proxy.shadow.shape, *proxy.shadow.stride()):
                    if is_symbolic_size(n):
                        self.hints.update(traced_symbol_values(n.node.shape_env))
        self.by_name = {str(s): s for s in self.hints}
        if shapes is not None:  # a variant: every symbol is a whole size somewhere (check_bound)
            self.hints = {}
            for proxy, shape in zip(region.inputs, shapes):
                if isinstance(proxy, TensorProxy):
                    traced = (*proxy.shadow.shape, *proxy.shadow.stride())
                    for n, value in zip(traced, (*shape[0], *shape[1])):
                        if is_symbolic_size(n) and isinstance(n.node.expr, sympy.Symbol):
                            self.hints[n.node.expr] = value
                elif proxy.name in self.by_name:
                    self.hints[self.by_name[proxy.name]] = shape

    def size(self, value: Any) -> Any:
        if type(value) is int:
            return value
        expr = value.node.expr
        if expr.is_number:
            return int(expr)
        mapping = {s: self._symbol(s, int(self.hints[s])) for s in expr.free_symbols}
        return self.env.create_symintnode(expr.xreplace(mapping), hint=int(expr.xreplace(self.hints)))

    def number(self, proxy: Proxy, value: int | None) -> Any:
        """The example of an int input: ``value`` (a variant's) or the traced one as hint."""
        from torch._dynamo.source import ConstantSource
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        value = proxy.value if value is None else value
        traced = self.by_name.get(proxy.name)
        if traced is not None:  # a size input: the symbol the tensors' sizes use
            return self.env.create_symintnode(self._symbol(traced, int(value)), hint=int(value))
        symbol = self.env.create_unspecified_symbol(value, ConstantSource(f"jitcore_{proxy.name}"),
                                                    dynamic_dim=DimDynamic.DYNAMIC)
        self.fresh[sympy.Symbol(f"jitcore_{proxy.name}")] = symbol
        return self.env.create_symintnode(symbol, hint=value)

    def _symbol(self, traced: sympy.Symbol, hint: int) -> sympy.Expr:
        from torch._dynamo.source import ConstantSource
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        if traced not in self.fresh:
            self.fresh[traced] = self.env.create_symbol(hint, ConstantSource(f"jitcore_{traced}"),
                                                        dynamic_dim=DimDynamic.DYNAMIC)
        return self.fresh[traced]

    def check_bound(self, examples: list[Any]) -> None:
        """Every symbol is a whole size of some example (a dimension, or a SymInt input)."""
        bound: set[sympy.Expr] = set()
        for e in examples:
            parts = (e,) if isinstance(e, torch.SymInt) else (e.shape if isinstance(e, torch.Tensor) else ())
            bound.update(p.node.expr for p in parts if isinstance(p, torch.SymInt))
        for traced, symbol in self.fresh.items():
            if isinstance(symbol, sympy.Symbol) and symbol not in bound:
                raise ValueError(f"the size {traced} is not readable from the region's inputs")
