"""The aten language context: every ``torch.ops.aten`` operator is a symbol of its own.

``torch.ops.aten.add.Tensor`` (an OpOverload) and ``torch.ops.aten.add`` (an OpOverloadPacket) are
operations in their own right, named after the aten op and printed as such — never mapped onto
torch-level operations. Symbols are made on first use (there are thousands of overloads) and kept in
``ATEN_TABLE``. Invariant: one symbol per operator object, with output metadata computed by torch
on shadows like every other symbol.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._ops import OpOverload, OpOverloadPacket

from jitcore.ir import Symbol, current_context, register_call_target
from jitcore.langctx.python_bindings import python_binding
from jitcore.langctx.shadows import meta_of
from jitcore.langctx.table import SymbolTable
from jitcore.proxies.tensor import TensorProxy

__all__ = ["ATEN_TABLE", "WaitedCollective", "aten_path", "aten_symbol", "is_aten_op", "lookup", "op_symbol",
           "operator_symbol", "takes_tensor"]

ATEN_TABLE = SymbolTable("aten")
# Generated code calls what OpOverload.__call__ forwards to, without its Python frame (0.3 us a call), or
# torch's generated binding of the operator where it takes the trace's calls alike (Note [Bindings that
# take the same call], langctx/python_bindings.py: 25-30% cheaper).
register_call_target(OpOverload, lambda op, calls: python_binding(op, calls) or op._op)


def is_aten_op(fn: Any) -> bool:
    """Whether ``fn`` is an operator (overload or packet) of the ``aten`` namespace."""
    if isinstance(fn, OpOverload):
        return fn.namespace == "aten"
    if isinstance(fn, OpOverloadPacket):
        return fn._qualified_op_name.startswith("aten::")
    return False


def aten_path(op: OpOverload | OpOverloadPacket) -> str:
    """``torch.ops.aten.add.Tensor`` / ``torch.ops.aten.add``: how generated code names ``op``."""
    if isinstance(op, OpOverload):
        return f"torch.ops.aten.{op._opname}.{op._overloadname}"
    return f"torch.ops.aten.{op._qualified_op_name.split('::', 1)[1]}"


def _tags(op: OpOverload | OpOverloadPacket) -> frozenset[str]:
    if not isinstance(op, OpOverload):
        return frozenset()
    tags = set()
    schema = op._schema
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        tags.add("inplace")
    if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        tags.add("view")
    if torch.Tag.nondeterministic_seeded in op.tags:
        tags.add("random")
    return frozenset(tags)


def takes_tensor(op: OpOverload) -> bool:
    """Whether the operator's schema has a tensor argument (``Tensor``, ``Tensor?``, ``Tensor[]``);
    one that has none is a factory. The arguments of a call do not tell: a 0-dim number tensor
    reaches ``__torch_dispatch__`` as a Python number."""
    return any(str(argument.type).startswith("Tensor") for argument in op._schema.arguments)


def aten_symbol(op: OpOverload | OpOverloadPacket) -> Symbol:
    """The symbol of an aten operator, made on first use.

    Raises:
        TypeError: ``op`` is not an aten operator.
    """
    found = ATEN_TABLE.lookup(op)
    if found is not None:
        return found  # type: ignore[return-value]
    if not is_aten_op(op):
        raise TypeError(f"{op!r} is not a torch.ops.aten operator")
    path = aten_path(op)
    name = path.removeprefix("torch.ops.aten.")
    symbol = Symbol(id=path, name=name, langctx="aten", fn=op, path=path, meta=meta_of(op), tags=_tags(op))
    ATEN_TABLE.add_symbol(symbol)
    ATEN_TABLE.bind(op, symbol)
    return symbol


def lookup(fn: Any) -> Callable[..., Any] | None:
    """The symbol for an aten operator ``fn``, or None when ``fn`` is not one."""
    found = ATEN_TABLE.lookup(fn)
    if found is not None:
        return found
    return aten_symbol(fn) if is_aten_op(fn) else None


_OTHER_OPS: dict[Any, Symbol] = {}


def op_symbol(op: OpOverload) -> Symbol:
    """The symbol of an operator of any namespace: aten's own, or one made here for the others
    (``torch.ops.prims``, ``torch.library`` custom ops of any library), printed by its ``torch.ops``
    path; its outputs come from the op's fake (meta) kernel."""
    if is_aten_op(op):
        return aten_symbol(op)
    if op.namespace == "_c10d_functional" and op._opname == "_wrap_tensor_autograd":  # noqa: SLF001
        op = torch.ops._c10d_functional.wait_tensor.default  # Note [Collectives are waited for]
    symbol = _OTHER_OPS.get(op)
    if symbol is None:
        path = f"torch.ops.{op.namespace}.{op._opname}.{op._overloadname}"
        schema = op._schema
        tags = set()
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            tags.add("inplace")
        if torch.Tag.nondeterministic_seeded in op.tags:
            tags.add("random")
        fn: Any = op
        if _returns_work(schema):  # Note [A collective's Work is waited for where it is issued]
            fn, path = WaitedCollective(op), None
        symbol = Symbol(id=f"torch.ops.{op.namespace}.{op._opname}.{op._overloadname}",
                        name=f"{op.namespace}.{op._opname}.{op._overloadname}", langctx="ops", fn=fn,
                        path=path, meta=meta_of(op), tags=frozenset(tags))
        _OTHER_OPS[op] = symbol
    return symbol


# Note [A collective's Work is waited for where it is issued]
# torch.distributed's collectives on process groups (``dist.scatter``, ``dist.broadcast``,
# ``dist.all_reduce``; DTensor's ``distribute_tensor`` scatters or broadcasts through them) reach the
# dispatcher as ``torch.ops.c10d.*`` ops that return a ``Work`` handle next to their tensors; the
# values are there only once ``work.wait()`` has returned (gloo runs the collective on a thread of its
# own). The program's ``wait()`` ran while tracing, on the traced call's handle; the computation
# cannot replay it on the handle a later call makes, so the recorded op waits for its own handle
# before returning. Before, the computation read the output while the collective was still writing
# it: ``distribute_tensor(x, mesh, [Shard(0)])`` at world size 2 returned uninitialized memory.
# An ``async_op=True`` handle the program waits for later is waited for earlier: the same values,
# with less overlap.
def _returns_work(schema: Any) -> bool:
    return any(str(r.type).endswith("c10d.Work") for r in schema.returns)


class WaitedCollective:
    """Calls a ``c10d`` op that returns a ``Work`` handle and waits for that handle before returning
    (Note [A collective's Work is waited for where it is issued])."""

    def __init__(self, op: OpOverload) -> None:
        self.op = op
        self.__name__ = f"waited_{op._opname}"  # noqa: SLF001

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.op(*args, **kwargs)
        for value in out if isinstance(out, tuple) else (out,):
            if isinstance(value, torch.ScriptObject) and hasattr(value, "wait"):
                value.wait()
        return out

    def __repr__(self) -> str:
        return f"waited({self.op})"


# Note [Collectives are waited for]
# Eagerly, a functional collective's result (``torch.ops._c10d_functional.all_gather_into_tensor``,
# issued by DTensor's redistribution) is wrapped by ``_wrap_tensor_autograd`` in an
# ``AsyncCollectiveTensor``, a subclass that waits for the collective at its first use. Recorded, it
# is ``wait_tensor`` where it is made, as torch.compile traces it (``_are_we_tracing``): the values are
# the same, and a cached call runs no subclass dispatch.
def operator_symbol(fn: Any) -> Symbol | None:
    """What records a call of ``fn`` when it is an operator the interpreter reaches as a callable: an
    aten op (overload or packet), an overload of any other namespace, or such a packet with one
    overload; None for anything else."""
    if is_aten_op(fn):
        return aten_symbol(fn)
    if isinstance(fn, OpOverload):  # a custom op (torch.library) of any namespace
        return op_symbol(fn)
    if isinstance(fn, OpOverloadPacket) and fn.overloads() == ["default"]:
        return op_symbol(fn.default)
    return None


def _torch_dispatch(op: OpOverload, args: tuple, kwargs: dict) -> Any:
    """An operator that reached torch's dispatcher with a proxy among its arguments (a C function
    called with torch functions disabled, ``torch._int_mm``, a custom op, the aten ops of a composite
    run natively): recorded as its own symbol. Its shadows' autograd records it as well: the
    dispatcher reaches here below autograd (a proxy never requires grad), yet its outputs require grad
    as eager's do, and a backward inside the traced function reads the shadows' graph (Note [Function
    transforms run on the traced tensors], jitcore/jit/function_transforms.py). Without it, the outputs
    of ``torch.cov`` run natively did not require grad while tracing: ``autograd.grad`` through them
    raised, and the entry had no backward trace."""
    context = current_context()
    if context is None or not context.function_transforms:
        with _autograd_included():
            return op_symbol(op)(*args, **kwargs)
    # torch's C++ called this op: no __torch_function__ (a mode the program entered) sees it eagerly
    with _autograd_included(), torch._C.DisableTorchFunction():
        return op_symbol(op)(*args, **kwargs)


_AUTOGRAD_KEYS = (torch._C.DispatchKey.AutogradFunctionality, torch._C.DispatchKey.ADInplaceOrView)


@contextlib.contextmanager
def _autograd_included() -> Iterator[None]:
    """The autograd dispatch keys that the dispatcher excluded on its way below autograd, included again."""
    excluded = [key for key in _AUTOGRAD_KEYS if torch._C._dispatch_tls_is_dispatch_key_excluded(key)]
    for key in excluded:
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
    try:
        yield
    finally:
        for key in excluded:
            torch._C._dispatch_tls_set_dispatch_key_excluded(key, True)


TensorProxy.torch_dispatch_handler = staticmethod(_torch_dispatch)  # type: ignore[assignment]
