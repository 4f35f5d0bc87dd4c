"""DTensor (``torch.distributed.tensor``): dispatched by torch's own C++ DTensor dispatcher on shadows.

DTensor's ``__torch_dispatch__`` is not where its operations are decided: the C++ dispatcher
(``dispatchDTensorOp``, torch #167051) propagates sharding (metadata only), redistributes the
arguments' local tensors (functional collectives, ``torch.ops._c10d_functional.*``), runs the op on
the local tensors and wraps the results. So a DTensor is traced the way AOTAutograd traces it: its
shadow is a real DTensor over a fake local tensor (``__tensor_flatten__``: ``_local_tensor``; the
ctx is its placements, tensor meta, shard order and requires_grad; the device mesh rides along as a
constant, proxies/protocol.py ``WithConstants``, guarded by identity since outputs are rebuilt with
it: prologue/guards.py ``flatten_failure``), the resolving mode declines an aten call on a
DTensor (``NotImplemented``), and torch runs its C++ DTensor dispatch natively with the mode back
on the stack, so the local aten ops and collectives it issues reach the mode as plain-tensor calls
and are recorded (dispatch/resolver.py). A cached call runs those local ops and collectives only.

Invariants:
- only a class whose ``__torch_dispatch__`` is DTensor's own is dispatched natively (a subclass of
  DTensor with a dispatch of its own is resolved as other subclasses are; not tested);
- a DTensor that DTensor's Python code builds around a traced local tensor (``DTensor(local, spec,
  requires_grad=...)``: ``from_local``, ``redistribute``, ``full_tensor``'s autograd functions) is
  a proxy of DTensor whose shadow torch built around the local tensor's shadow;
- a functional collective's result is waited for where it is made (``wait_tensor``, as under
  torch.compile), not wrapped in an ``AsyncCollectiveTensor`` (Note [Collectives are waited for],
  langctx/aten.py): the values are eager's and no subclass reaches the executed trace;
- what does not trace runs eagerly, never raises or guesses: FSDP2's hooks (jit/fsdp_units.py, where
  each sharded module's forward is jitted between them), and any DTensor program whose tracing raised
  (``untraced``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch

from jitcore.errors import EagerOnlySubclass
from jitcore.ir import Symbol, current_context

__all__ = ["DTENSOR_LOOKASIDES", "dispatch_state_lookasides", "in_sharding_propagation",
           "is_natively_dispatched", "pointwise_for_dtensor", "untraced"]

_DTENSOR_NEW = getattr(torch.Tensor, "_dtensor__new__", None)  # DTensor.__new__ (torch #167051)


def is_natively_dispatched(cls: type) -> bool:
    """Whether torch's C++ DTensor dispatcher decides the operations on values of ``cls``."""
    dtensor = _dtensor_class()
    if dtensor is None or not issubclass(cls, dtensor):
        return False
    return getattr(cls.__torch_dispatch__, "__func__", None) is dtensor.__torch_dispatch__.__func__


# Note [DTensor's sharding propagation is not traced]
# The first time DTensor's C++ dispatch meets an op schema it calls its Python ShardingPropagator
# (torch/distributed/tensor/_sharding_prop.py), which computes the output's placements and metadata
# by running torch code: the op on ``empty_strided`` placeholders under a FakeTensorMode of its own
# (``_propagate_tensor_meta_non_cached``), an op's decomposition on meta tensors under a
# ``PlacementTrackingMode`` (ops with no strategy of their own: ``index_copy`` of a 0-dim tensor,
# ``cauchy_``), a sub-mesh whose rank map is a tensor read with ``tolist()``. None of it is the
# program's computation: it decides metadata, and eagerly it runs once, then is cached. The
# resolving mode (dispatch/resolver.py) is a user mode, which torch asks before an infra mode such as
# FakeTensorMode, so those calls reached it and were recorded: dead code run on every call, on
# uninitialized CPU memory (``index_copy``'s placeholder index: "index 140461440644400 is out of
# bounds" from the cached trace, where eager computes the value), or a value read of a traced rank map
# (``cauchy_`` on a Replicate DTensor ran eagerly). As ``make_fx`` leaves it out
# (``disable_proxy_modes_tracing``), a call the dispatcher makes while a frame of the propagator is
# on the stack (between the mode and the jitcore code that started the dispatch) runs natively and
# unrecorded, and so does every call made while it runs (the fake mode's own meta kernels). Only a mode
# that has declined a DTensor's call looks at the stack.
_SHARDING_PROPAGATION = "/torch/distributed/tensor/_sharding_prop.py"


def in_sharding_propagation() -> bool:
    """Whether DTensor's ShardingPropagator is running below jitcore's innermost frame on the stack
    (Note [DTensor's sharding propagation is not traced]): what the dispatcher asks now is metadata."""
    from jitcore.diagnostics import JITCORE_DIR

    frame = sys._getframe(2)  # noqa: SLF001 - the caller of the mode's __torch_dispatch__
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(JITCORE_DIR):
            return False
        if filename.replace("\\", "/").endswith(_SHARDING_PROPAGATION):
            return True
        frame = frame.f_back
    return False


# Note [Values read through DTensor's dispatch]
# ``x.item()``, ``torch.equal``, ``if (x * y).sum() > 0`` on DTensors read a value in DTensor's C++
# dispatch: the local op (``_local_scalar_dense``, ``equal``) on the local tensor, after the collectives
# that make it (an all-reduce of a Partial sum). That read is made inside the subclass's dispatch,
# and is taken as one (``in_subclass_code``, jit/value_reads.py ``_read_in_subclass_code``): its value
# is computed from the records so far, checked on every call, and an ``item()`` is a number of the
# computation (Note [A number a subclass's item reads]). Before, the read was refused there and the
# call ran eagerly (op_db: ``item``, ``equal``, ``narrow`` and ``tensor_split`` with tensor positions,
# ``cov``, ``corrcoef``, ``gaussian_nll_loss``).
# Note [Numbers through DTensor's dispatch]
# A dynamic number (Adam's ``lr / bias_correction1`` from ``state["step"].item()``) given to an op on a
# DTensor stays a name only where DTensor's C++ dispatch decides nothing from its value: its sharding
# rules for pointwise ops (and their ``_foreach_`` forms) are chosen by op and placements alone (a
# scalar multiple keeps a ``Partial("sum")``, whatever the scalar; ``Partial("max")`` is not kept
# through ops whose sign could flip it, for any value). The local op then receives the value
# unchanged, and the resolver puts the name back there (Note [Numbers through a subclass's
# dispatch], langctx/scalars.py); a number the local op does not hold unchanged is specialized.
# Elsewhere (``linalg_vector_norm``'s ``ord`` picks the partial reduction) numbers are specialized.
# Before, every DTensor op specialized them: a jitted tensor-parallel Adam step traced anew per step.
@functools.cache
def pointwise_for_dtensor(aten_name: str) -> bool:
    """Whether DTensor's sharding rules for the aten operation ``aten_name`` (``addcdiv_``,
    ``_foreach_lerp_``) are pointwise ones, which no number argument's value decides."""
    base = aten_name.removeprefix("_foreach_").rstrip("_") if aten_name.startswith("_foreach_") else aten_name
    packet = getattr(torch.ops.aten, base, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):  # noqa: SLF001
        return False
    # the out= overloads (``Scalar_out``) go untagged; they are not what a torch-level call reaches
    overloads = [getattr(packet, name) for name in packet.overloads() if not name.endswith("out")]
    tensor_returning = [op for op in overloads if any("Tensor" in str(r.type) for r in op._schema.returns)]  # noqa: SLF001
    return bool(tensor_returning) and all(torch.Tag.pointwise in op.tags for op in tensor_returning)


def _dtensor_class() -> type | None:
    """DTensor's class, if torch.distributed.tensor is imported (a DTensor value implies it is)."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def dtensor_new(cls: type, local_tensor: Any, spec: Any, *, requires_grad: bool = False) -> Any:
    """``DTensor(local_tensor, spec, requires_grad=...)`` (``torch.Tensor._dtensor__new__``): around a
    traced local tensor, a proxy of ``cls`` whose shadow torch builds around the local tensor's."""
    from jitcore.dispatch.shadow_map import DispatchState
    from jitcore.proxies.tensor import TensorProxy

    context = current_context()
    if context is None or context.values is None or not isinstance(local_tensor, TensorProxy):
        return _DTENSOR_NEW(cls, local_tensor, spec, requires_grad=requires_grad)
    state = DispatchState.of_current()
    shadow = _DTENSOR_NEW(cls, state.shadow_of(local_tensor), spec, requires_grad=requires_grad)
    return state.adopt(shadow)


DTENSOR_LOOKASIDES: dict[Any, Any] = {_DTENSOR_NEW: dtensor_new} if _DTENSOR_NEW is not None else {}


# Note [DTensor's dispatch settings inside the function]
# Two settings change what DTensor's C++ dispatch does with an op: ``loss_parallel()`` installs
# handlers for the loss ops (``_enable_custom_loss_ops`` / ``_disable_custom_loss_ops`` update
# ``DTensor._op_dispatcher._custom_op_handlers``), and ``implicit_replication()`` lets plain tensors
# mix with DTensors (``torch._C._set_dtensor_allow_implicit_replication``). Entered inside the function,
# they are changes of state like ``no_grad()``'s (Note [State changes inside the traced function],
# langctx/thread_state.py): run now and recorded, tagged ``global_state``, so the grad transform's
# replay of the forward, which dispatches the DTensor ops again on shadows, runs each op under the
# settings eager ran it under, and the computation changes them at the same points as eagerly.
# Before, the replay ran ``cross_entropy`` after the ``with`` had put the handlers back: "got mixed
# torch.Tensor and DTensor", and the call ran eagerly.
def dispatch_state_lookasides(recorded: Callable[[Any, Symbol], Callable[..., Any]]) -> dict[Any, Any]:
    """Lookasides for what changes DTensor's dispatch settings (Note [DTensor's dispatch settings inside
    the function]), given ``recorded(fn, symbol)``: ``fn`` run now and recorded. None before
    torch.distributed.tensor is imported. ``implicit_replication()`` sets its flag through a property
    of DTensor's dispatcher, which no lookaside sees: the context manager itself is replaced by one
    that sets it through the recorded setter."""
    if _dtensor_class() is None:
        return {}
    lookasides: dict[Any, Any] = {}
    loss = sys.modules.get("torch.distributed.tensor.parallel.loss")
    for name in ("_enable_custom_loss_ops", "_disable_custom_loss_ops"):
        if hasattr(loss, name):
            fn = getattr(loss, name)
            lookasides[fn] = recorded(fn, _state_symbol(fn, f"torch.distributed.tensor.parallel.loss.{name}"))
    setter = getattr(torch._C, "_set_dtensor_allow_implicit_replication", None)  # noqa: SLF001
    experimental = sys.modules.get("torch.distributed.tensor.experimental")
    if setter is not None:
        record = recorded(setter, _state_symbol(setter, "torch._C._set_dtensor_allow_implicit_replication"))
        lookasides[setter] = record
        if hasattr(experimental, "implicit_replication"):
            lookasides[experimental.implicit_replication] = lambda: _ImplicitReplication(record)
    return lookasides


class _ImplicitReplication:
    """``implicit_replication()`` while tracing: its flag set and put back through ``set_flag``."""

    def __init__(self, set_flag: Callable[[bool], Any]) -> None:
        self.set_flag = set_flag

    def __enter__(self) -> None:
        self.set_flag(True)

    def __exit__(self, *exc_info: Any) -> bool:
        self.set_flag(False)  # as torch's ``finally`` does, whatever was raised
        return False


@functools.cache
def _state_symbol(fn: Any, path: str) -> Symbol:
    return Symbol(path, path.rsplit(".", 1)[1], "torch", fn, path, fn, tags=frozenset({"global_state"}))


# Note [DTensor programs jitcore cannot trace]
# Tracing runs DTensor's own Python (``redistribute``, ``from_local``, the tensor-parallel styles'
# hooks) and C++ dispatch on traced values; where some of it cannot be traced (an op or a library
# call jitcore does not record, a collective without a traced form), the error is the reason the call runs
# eagerly (an eager entry, Note [Eager entries] in jit/api.py), never raised: eager is what the call
# computes, and an error of the program itself is then raised by the eager run, as eagerly. This is
# one rule of the jit's table of errors that make eager entries (``RULES``, jit/eager_entries.py).
def untraced(error: Exception, values: Any) -> EagerOnlySubclass | None:
    """The reason a call runs eagerly when tracing it raised ``error`` after meeting a DTensor value
    (None when it met none: the error is the program's or jitcore's, raised as usual).

    Args:
        error: what the pass, or a stage after it, raised.
        values: the stopped pass's TensorValues (None: no pass had started).
    """
    if values is None or not any(is_natively_dispatched(p.python_type) for p in values.proxies()):
        return None
    message = str(error).strip().splitlines()
    reason = EagerOnlySubclass(
        f"tracing a DTensor program raised {type(error).__name__}: {message[0] if message else ''}"
    )
    reason.__cause__ = error
    return reason
