"""Recording what torch's autograd runs: a TorchDispatchMode that turns aten calls into bound symbols.

The grad transform replays a forward trace on *shadows* that require grad, and then calls
``torch.autograd.grad`` on them. Both happen natively in torch: the autograd engine itself decides
which aten ops the forward runs (after autograd's own decompositions) and which ones its backward
formulas run. The ``RecordingMode`` below sits under autograd and sees each of those aten calls:
- metadata queries (``aten.sym_size``, ``prim.device``, ...) are answered natively, never recorded;
- a call on plain tensors is recorded as its aten symbol into the active trace context;
- a call involving a tensor subclass runs the subclass's ``__torch_dispatch__`` on jitcore's
  interpreter (``jitcore.dispatch.resolver.call_torch_dispatch``): the aten ops it calls on the
  inner tensors are recorded, so what is recorded holds only plain tensors.
What the mode returns (the shadow of the resulting proxy) is the very object autograd attaches its
graph to, so step k's output is step k+1's input.

Invariants:
- every FakeTensor the mode sees maps to exactly one proxy of the recording trace (by identity);
  a real tensor (a constant of the trace) is recorded as a constant;
- recording happens only inside ``recording(...)``, which also makes a jitcore interpreter run
  current, so that ``__torch_dispatch__`` is interpreted (its control flow sees the proxies);
- what is recorded runs as it is (no flattening pass follows): a torch-level call given a
  real subclass value is replaced by the records its resolution made (``resolve_flat``).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import types
from collections.abc import Iterator
from typing import Any

import optree
import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from jitcore.dispatch.lookasides import DISPATCH_LOOKASIDES, python_type
from jitcore.dispatch.resolver import (
    METADATA_OPS,
    DispatchState,
    ShadowDispatchMode,
    call_on_shadows,
    resolve_call,
    resolve_operator_or_own,
)
from jitcore.interpreter import Hooks, Run, active_runs
from jitcore.ir import Inlined, Proxy, Symbol, TraceContext, current_context, tracing
from jitcore.langctx import aten as aten_langctx
from jitcore.langctx.torch import TORCH_TABLE
from jitcore.transforms.backward_reads import note_native_call
from jitcore.transforms.backward_unwatched import handed, noted_call

__all__ = ["METADATA_OPS", "RecordingMode", "recording", "resolve_flat"]


class RecordingMode(ShadowDispatchMode):
    """Records every aten call below autograd into the active trace context, on proxies (the
    grad transform's replay); a few ops record a stand-in that keeps grad mode's outputs."""

    def symbol_for(self, func: Any) -> Any:
        return GRAD_MODE_OUTPUTS.get(func) or aten_langctx.op_symbol(func)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        # a backward's dispatch writing its tensors' attributes (backward_unwatched.py)
        with handed(types, args, kwargs, self.proxy_of):
            return super().__torch_dispatch__(func, types, args, kwargs)


# Note [Outputs that exist only with grad mode on]: the grad transform's forward trace runs inside an
# autograd.Function's forward, where grad mode is off, and mkldnn's RNN layer (nn.LSTM/GRU on CPU)
# returns the workspace its backward needs only with grad mode on (None otherwise). Such an op is
# recorded as a function that runs it with grad mode on and detaches its outputs.
def mkldnn_rnn_layer_with_grad(*args: Any, **kwargs: Any) -> Any:
    """``aten.mkldnn_rnn_layer`` with grad mode on (Note [Outputs that exist only with grad mode on])."""
    with torch.enable_grad():
        out = torch.ops.aten.mkldnn_rnn_layer.default(*args, **kwargs)
    return tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in out)


def _with_grad_symbol(op: Any, fn: Any) -> Any:
    symbol = aten_langctx.op_symbol(op)
    path = f"jitcore.transforms.recording.{fn.__name__}"
    return dataclasses.replace(symbol, id=path, name=fn.__name__, fn=fn, path=path)


GRAD_MODE_OUTPUTS = {
    torch.ops.aten.mkldnn_rnn_layer.default: _with_grad_symbol(
        torch.ops.aten.mkldnn_rnn_layer.default, mkldnn_rnn_layer_with_grad),
}


def _opaque_call(fn: Any, args: tuple, kwargs: dict) -> Any:
    """Torch C functions that are not operations (``torch._functionalize_unsafe_set``, used by
    ``return_and_correct_aliasing``) act on the shadows of proxies."""
    torch_builtin = isinstance(fn, types.BuiltinFunctionType) and (
        getattr(fn, "__module__", None) or ""
    ).startswith("torch")
    if torch_builtin and any(
        isinstance(v, Proxy) for v in optree.tree_leaves((args, kwargs), none_is_leaf=True)
    ):
        return call_on_shadows(fn, args, kwargs)
    note_native_call(fn, args)  # a backward's hooks measuring the state they write (backward_reads.py)
    return fn(*args, **kwargs)


def _len(obj: Any) -> Any:
    """``len(obj)`` as the dispatch's lookaside answers it, seen by a backward's watch (backward_reads.py)."""
    note_native_call(builtins.len, (obj,))
    return DISPATCH_LOOKASIDES[builtins.len](obj)


def _resolve(fn: Any) -> Any:
    """``resolve_operator_or_own``, with the program's functions the recording calls noted by a
    backward's recording (their closure cells and globals: backward_unwatched.py)."""
    noted_call(fn.__func__ if type(fn) is types.MethodType else fn)
    return resolve_operator_or_own(fn)


def _hooks() -> Hooks:
    return Hooks(
        lookasides={**dict(TORCH_TABLE.callables()), **DISPATCH_LOOKASIDES, builtins.len: _len},
        resolve_call=_resolve,
        on_opaque_call=_opaque_call,
        type_of=python_type,
    )


@contextlib.contextmanager
def recording(context: TraceContext) -> Iterator[RecordingMode]:
    """Record aten calls into ``context`` (subclass dispatch interpreted) for the ``with`` body."""
    state = DispatchState.of(context.values)
    mode = RecordingMode(state)
    runs = active_runs()
    runs.append(Run(_hooks()))
    try:
        with tracing(context), torch._C.DisableTorchFunctionSubclass(), mode:
            yield mode
    finally:
        runs.pop()


# Note [Subclass constants in a recording]
# Subclass dispatch code the recording interprets may pass a real subclass value of torch's to a torch
# function: NestedTensor's ``jagged_binary_pointwise`` (a dense tensor broadcast against an NJT, which
# amax's backward over the ragged dimension does) calls ``torch._nested_from_padded_tensor`` on a
# padded tensor, the offsets and torch's ``_nt_view_dummy`` (an NJT over meta tensors). Pass 1 binds
# such a value as an input, so the call is resolved through NestedTensor's dispatch and the flattened
# trace runs that resolution. A recording runs as recorded, and evaluated on shadows the call ran the
# dispatch natively under the fake mode: the aten ops it ran were never recorded, and the values they
# made were names no record binds. Here the value is adopted as a proxy (its inner tensors constants),
# the call is resolved as in pass 1, and its record is replaced by its resolution's records.
def resolve_flat(symbol: Symbol, args: tuple, kwargs: dict) -> Any:
    """``resolve_call`` for a recording, with real subclass values among the arguments resolved and
    spliced (the Note above)."""
    if not any(_real_subclass(v) for v in optree.tree_leaves((args, kwargs), none_is_leaf=True)):
        return resolve_call(symbol, args, kwargs)
    state = DispatchState.of(current_context().values)
    args, kwargs = _map(lambda v: state.proxy_of(v) if _real_subclass(v) else v, (args, kwargs))
    out = resolve_call(symbol, args, kwargs)
    return out if type(out) is Inlined else Inlined(out, splice=True)


def _real_subclass(value: Any) -> bool:
    """A real instance of a wrapper subclass with the flatten protocol (not a proxy, not a shadow)."""
    return isinstance(value, torch.Tensor) and not isinstance(value, (Proxy, FakeTensor)) \
        and is_traceable_wrapper_subclass(value)


def _map(fn: Any, tree: Any) -> Any:
    return optree.tree_map(fn, tree, none_is_leaf=True)
