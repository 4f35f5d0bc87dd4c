"""Output metadata computed by torch itself: running torch callables on shadows (fake tensors).

Every symbol of the torch and aten language contexts computes its outputs here: the proxies'
shadows (FakeTensors of the trace's FakeTensorMode) are passed to the real torch callable, and the
fake results become the output proxies. Invariants:
- a shadow maps to exactly one proxy (``TensorValues.proxy_for``); an op that returns an input's
  shadow (in-place ops, ``out=``) returns that input's proxy;
- an argument torch rejects raises the exception eager torch raises, with eager's message (the call
  is replayed on small real tensors when fake tensors word it differently);
- a call whose outputs depend on tensor *values* raises DataDependentError, never a guess;
- a trace with symbolic sizes (``TensorValues(symbolic=True)``) has one ShapeEnv: input dimensions
  named dynamic get a symbol there (``s0``, ``s1``, ... in order of creation), every other size is
  static, and what torch assumed about the symbols is recorded there as guards
  (jitcore/jit/shapes.py turns them into prologue checks).
"""

from __future__ import annotations

import contextlib
import logging
import math
import types
from collections.abc import Callable
from typing import Any

import optree
import torch
from torch._ops import TorchBindOpOverload
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorDeviceMismatchError,
    FakeTensorMode,
)
from torch.fx.experimental.symbolic_shapes import ShapeEnv, guard_or_false, is_nested_int
from torch.nested._internal.nested_tensor import _tensor_symint_registry
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from jitcore.errors import DataDependentError, EagerOnlyValue
from jitcore.ir import NameGenerator, Trace, TraceContext, current_context
from jitcore.langctx.input_writes import input_metadata, may_write_inputs, resized, tensor_metadata
from jitcore.langctx.kernels_without_meta import KERNELS_WITHOUT_META
from jitcore.langctx.layout import LayoutReliance
from jitcore.langctx.number_tensors import tensor_of_numbers
from jitcore.langctx.saved_outputs import SavedOutputs, adopt_saved, builds_graph
from jitcore.proxies import TensorProxy
from jitcore.proxies.generator import GeneratorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.tensor import PlainTensorProxy

__all__ = [
    "BACKWARDS",
    "EagerKernels",
    "REPLAY_NUMEL_LIMIT",
    "STATEFUL",
    "TensorValues",
    "data_read_error",
    "evaluate",
    "meta_of",
    "new_context",
    "share_nested_int",
    "untraced_kind",
]

# Fake-tensor kernels log every failure at ERROR level before re-raising it; the exception itself is
# what the user gets, so the log line is noise.
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)

# Largest total element count for which a failed call is replayed on real tensors to obtain eager's
# exact error message.
REPLAY_NUMEL_LIMIT = 1 << 22
# Functions whose errors depend on state beyond their arguments' metadata (a backward over an autograd
# graph whose buffers an earlier backward freed): what they raise on the shadows is eager's error, never
# replayed on zero-filled tensors (which have no such state).
STATEFUL: set[Callable[..., Any]] = set()
# Functions that run autograd's backward on the shadows: an op of the backward whose fake kernel is
# stricter than eager's is answered by eager's kernel (Note [Fake kernels stricter than eager]).
BACKWARDS: set[Callable[..., Any]] = set()


class TensorValues:
    """The tensor state of one trace: its fake mode and its one shadow -> proxy map (plain shadows,
    and the shadows of subclass values: real instances of the subclass over fake inner tensors,
    bound by jitcore/dispatch/resolver.py). A proxy holds its shadow, so a mapped id is never reused
    while the map lives; an entry counts only while the proxy still has that shadow.

    Attributes:
        fake_mode: the FakeTensorMode all shadows of this trace belong to.
        names: the trace's name generator.
        strides_queried: whether the traced program asked for strides or contiguity (then the
            prologue guards the inputs' strides too).
        layout: which inputs' strides and storage offset the recorded calls relied on
            (jitcore/langctx/layout.py).
        nested_int_inputs: the ids of the input proxies whose tensor has a nested int (an NJT's offsets).
    """

    __slots__ = (
        "_aliases",
        "_by_shadow",
        "fake_mode",
        "layout",
        "names",
        "nested_int_inputs",
        "shape_env",
        "strides_queried",
    )

    def __init__(self, names: NameGenerator, *, symbolic: bool = False) -> None:
        self.shape_env: ShapeEnv | None = _shape_env() if symbolic else None
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False, shape_env=self.shape_env)
        self.names = names
        self.strides_queried = False
        self.layout = LayoutReliance()
        self._by_shadow: dict[int, TensorProxy] = {}
        self._aliases: dict[int, tuple[torch.Tensor, TensorProxy]] = {}
        self.nested_int_inputs: set[int] = set()  # ids of input proxies whose tensor has a nested int

    def any_requires_grad(self) -> bool:
        """Whether a tensor of the pass so far requires grad (the grad transform will replay it). A
        subclass value's flag is read without its ``__torch_function__`` (torchao's would dequantize)."""
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
            return any(proxy.requires_grad for proxy in self._by_shadow.values())

    def input_proxy(self, tensor: torch.Tensor, name: str | None = None,
                    dynamic_dims: frozenset[int] = frozenset(), *,
                    keep_zero_one: bool = False,
                    dynamic_strides: frozenset[int] = frozenset()) -> TensorProxy:
        """A proxy for a real input tensor (its shadow keeps shape, strides, dtype, device, grad).

        ``dynamic_dims``: dimensions whose size is a symbol of the ShapeEnv (sizes 0 and 1 stay
        static, as in torch, unless ``keep_zero_one``: an NJT's ragged sizes, Note [Symbolic ragged
        sizes] in jitcore/jit/ragged.py); ``dynamic_strides``: dimensions whose stride is a symbol
        (Note [Strides seen to change] in jitcore/jit/shapes.py); only for a symbolic TensorValues."""
        name = self.names.claim(name) if name else self.names.fresh("t")
        if keep_zero_one and isinstance(self.shape_env, _ShapeEnv):
            self.shape_env.keep_zero_one.add(name)
        nested = tensor.dim() == 1 and _tensor_symint_registry.get(tensor) is not None
        if nested:
            self.allow_nested_ints()  # the offsets of a nested jagged tensor: its shadow gets the nested int
        if (dynamic_dims or dynamic_strides) and self.shape_env is not None:
            from torch._dynamo.source import LocalSource
            from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

            sizes = [
                DimDynamic.DYNAMIC if i in dynamic_dims else DimDynamic.STATIC for i in range(tensor.dim())
            ]
            strides = [
                DimDynamic.DYNAMIC if i in dynamic_strides else DimDynamic.INFER_STRIDE
                for i in range(tensor.dim())
            ]
            context = StatelessSymbolicContext(dynamic_sizes=sizes, dynamic_strides=strides)
            shadow = self.fake_mode.from_tensor(_described_by_torch(tensor), symbolic_context=context,
                                                source=LocalSource(name))
        elif type(tensor) is torch.Tensor:
            shadow = self.fake_mode.from_tensor(tensor, static_shapes=True)
        else:  # nn.Parameter, a subclass without __torch_dispatch__: its __torch_function__ is not run
            with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
                shadow = self.fake_mode.from_tensor(_described_by_torch(tensor), static_shapes=True)
        proxy = self._bind(shadow, name)
        self.layout.seed(shadow, proxy)
        if nested:  # Note [A nested jagged tensor's text] (jagged_text.py)
            self.nested_int_inputs.add(id(proxy))
        return proxy

    def allow_nested_ints(self) -> None:
        """Give the fake mode a ShapeEnv, so that the shadow of a tensor holding a nested int (a nested
        jagged tensor's offsets) gets one, and a nested jagged tensor built over shadows (under the
        fake mode) has one for its ragged size: ``FakeTensor.get_nested_int``, one symbol per offsets
        shadow (Note [Nested ints]). A static pass gets a ShapeEnv of its own for them, which
        ``shape_env`` does not name: its sizes stay static."""
        if self.fake_mode.shape_env is None:
            self.fake_mode.shape_env = _shape_env()

    @staticmethod
    def nested_sizes(sizes: Any, shadows: list[torch.Tensor]) -> tuple:
        """``sizes`` (a real tensor's shape or strides) with each nested int replaced by the symbol
        of the shadow that holds it (``j1`` -> ``s0``, ``3*j1`` -> ``3*s0``): the outer size a subclass
        built over ``shadows`` is given (Note [Nested ints])."""
        symbols = {}
        for shadow in shadows:
            memo = getattr(shadow, "nested_int_memo", None)
            if memo is not None and is_nested_int(memo.node.hint):
                symbols[memo.node.hint.node.nested_int()] = memo
        out = []
        for size in sizes:
            if is_nested_int(size) and size.node.nested_int() in symbols:
                size = symbols[size.node.nested_int()] * size.node.nested_int_coeff()
            out.append(size)
        return tuple(out)

    def proxy_for(self, shadow: torch.Tensor) -> TensorProxy:
        """The proxy of ``shadow``: the existing one, or a new one with a fresh name."""
        proxy = self.known(shadow)
        if proxy is not None:
            return proxy
        return self._bind(shadow, self.names.fresh("t"))

    def known(self, shadow: torch.Tensor) -> TensorProxy | None:
        """The proxy ``shadow`` belongs to, or None."""
        proxy = self._by_shadow.get(id(shadow))
        if proxy is not None and proxy.shadow is shadow:
            return proxy
        alias = self._aliases.get(id(shadow))
        return alias[1] if alias is not None and alias[0] is shadow else None

    def proxies(self) -> list[TensorProxy]:
        """The proxies of this trace's values so far (plain and subclass)."""
        return list(self._by_shadow.values())

    def bind(self, shadow: torch.Tensor, proxy: TensorProxy) -> None:
        """Make ``proxy`` the one of ``shadow`` (a subclass value, whose shadow its class built)."""
        self._by_shadow[id(shadow)] = proxy

    def alias(self, stand_in: torch.Tensor, proxy: TensorProxy) -> None:
        """Make ``stand_in``, a tensor that stands for ``proxy``'s value where its shadow cannot
        (a caller's jagged tensor's gradient: jitcore/jit/autograd_calls.py), known as ``proxy``; the
        map holds it, so its id is not reused while the map lives."""
        self._aliases[id(stand_in)] = (stand_in, proxy)

    def _bind(self, shadow: torch.Tensor, name: str) -> TensorProxy:
        proxy = TensorProxy(name, shadow)
        self._by_shadow[id(shadow)] = proxy
        return proxy


def untraced_kind(tensor: torch.Tensor) -> tuple[str, Any, str] | None:
    """What makes a plain ``tensor`` one jitcore does not trace (a layout other than strided, a
    quantized or a strided nested tensor), as ``(attribute, its value, in words)``; None for a tensor
    it traces. Tensor subclasses (a nested jagged tensor is one) are decided by jitcore/proxies."""
    if tensor.layout is not torch.strided:
        return "layout", tensor.layout, f"a tensor with layout {tensor.layout}"
    if tensor.is_quantized:
        return "is_quantized", True, f"a quantized tensor ({tensor.dtype})"
    if tensor.is_nested and type(tensor) in (torch.Tensor, torch.nn.Parameter, FakeTensor):
        return "is_nested", True, "a nested tensor with layout torch.strided"
    return None


# Note [Nested ints]
# A nested jagged tensor (NJT) of shape (B, j0, D) holds values (sum of lengths, D) and offsets (B+1);
# its ragged size j0 is a nested int that torch ties to the offsets *object* (nested_tensor.py's
# ``get_tensor_symint``): NJTs over one offsets tensor share j0, others get j1, j2..., and ops between
# NJTs of different nested ints raise. Traced, as torch.compile does (meta_utils.py):
# - the fake mode gets a ShapeEnv (``allow_nested_ints``; a static pass's own, its sizes stay static)
#   before the offsets are bound, so the offsets' shadow has a symbol (``FakeTensor.nested_int_memo``)
#   whose hint is the caller's j; the NJT's shadow is built over the inner shadows with that symbol as
#   its outer size (``nested_sizes``), under the fake mode;
# - an NJT made while tracing asks ``get_tensor_symint`` of its offsets proxy: the lookaside answers
#   the shadow's symbol (jitcore/dispatch/lookasides.py), so an output over the input's offsets shares
#   its nested int, as eagerly; its outer metadata is a ``JaggedOuter`` (no size arithmetic on nested
#   ints), computed queries (``is_contiguous``) ask the NJT shadow;
# - the prologue never reads an NJT's outer sizes (``TensorSpec.outer_from_inner``: reading them runs
#   its ``__torch_dispatch__``): they follow from its inner tensors (guarded, static) and its ctx; which
#   NJT inputs share an offsets tensor is the inner tensors' alias/distinct guards, so a call sharing
#   otherwise than traced misses (eager raises there, or does not);
# - the executed trace holds the inner tensors' aten ops; the output is rebuilt by
#   ``__tensor_unflatten__``, which computes the nested int from the real offsets (its outer-size
#   argument is ignored for real tensors), the caller's own when they are the caller's offsets.
# Note [Nested ints in the replay]
# An NJT's ragged size is a nested int that pass 1 took from its offsets' shadow (Note [Nested ints]),
# and pass 1's records hold it where the program passed it on:
# ``flatten(-2)`` of an NJT is ``reshape(t, (4, j, 8))``. The replay's offsets are fresh shadows; an
# NJT made over them got a nested int of the replay's own, which NestedTensor's ``view`` compared with
# the recorded one: 'vr must not be None for symbol s1' (two ShapeEnvs) from the second ragged
# structure on, where eager computes. A replayed shadow stands for the same tensor as pass 1's, so it
# takes pass 1's nested int: NJTs made in the replay have the sizes pass 1's records name.
def share_nested_int(old: torch.Tensor, new: torch.Tensor) -> None:
    """Give ``new`` (the grad transform's replay of ``old``) ``old``'s nested int (the Note above)."""
    memo = getattr(old, "nested_int_memo", None)
    if memo is not None and isinstance(new, FakeTensor) and new.nested_int_memo is None:
        new.nested_int_memo = memo


# Note [A plain subclass's shadow]
# torch's fake-tensor conversion describes a tensor through its Python methods: a plain subclass that
# overrides ``size()`` (or ``stride()``, ``dim()``, ``storage_offset()``) had its shadow built from
# that answer, so ``x.shape`` read ``torch.Size([42])`` while tracing where eager's ``x.shape`` (torch's
# own) is ``[3]``, and ``x.reshape(3, 1)`` raised. Such a tensor's shadow is built from a plain alias of
# it (a leaf for a leaf), which torch describes itself; the program still calls the class's methods.
_METADATA_METHODS = ("size", "stride", "dim", "storage_offset")
# Note [Quantized tensors made inside]
# The fake kernels of ``torch.quantize_per_tensor`` and its kin give a float shadow, so the program's
# next op on it (``int_repr``, ``q_scale``) failed while tracing where eager computes. A call given a
# quantized dtype runs the program eagerly instead, as a quantized input does (JC-J002).
_QUANTIZED = frozenset({torch.quint8, torch.qint8, torch.qint32, torch.quint4x2, torch.quint2x4})


def _described_by_torch(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, or a plain alias of it where its class overrides how it describes itself (Note [A
    plain subclass's shadow])."""
    cls = type(tensor)
    if cls is torch.Tensor or all(getattr(cls, m) is getattr(torch.Tensor, m) for m in _METADATA_METHODS):
        return tensor
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - the class's own code never runs here
        if tensor.is_leaf:
            return torch.Tensor._make_subclass(torch.Tensor, tensor, tensor.requires_grad)  # noqa: SLF001
        return tensor.as_subclass(torch.Tensor)


class _ShapeEnv(ShapeEnv):
    """Names its symbols ``s0``, ``s1``, ... in order of creation (torch's names hash the source);
    the sizes of the inputs named in ``keep_zero_one`` are symbols even when 0 or 1."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keep_zero_one: set[str] = set()

    def create_symbol(self, val: Any, source: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(getattr(source, "base", None), "local_name", None) in self.keep_zero_one:
            kwargs["do_not_specialize_zero_one"] = True
        return super().create_symbol(val, source, *args, **kwargs)

    def _log_real_tensor_propagation(self, orig_expr: Any, unsound_result: Any) -> None:
        """Quiet: a size that values decide is decided with its traced value, a condition the computation
        checks (Note [Sizes that values decide] in jitcore/jit/shapes.py); torch warns of it (and
        captures a traceback) as of an unsound guess in ``torch.export``'s draft mode."""

    def _generate_unique_id(self, source_name: str) -> int:
        n = len(self.unique_ids)
        self.unique_ids.add(n)
        return n


def _shape_env() -> ShapeEnv:
    """A ShapeEnv that leaves value-dependent outputs to jitcore's value reads: ``item`` and
    ``nonzero`` raise on shadows as without a ShapeEnv, rather than making unbacked symbols."""
    return _ShapeEnv(allow_scalar_outputs=False, allow_dynamic_output_shape_ops=False)


def new_context(trace: Trace, *, symbolic: bool = False, **options: Any) -> TraceContext:
    """A TraceContext for ``trace`` with fresh tensor state (a ShapeEnv when ``symbolic``);
    ``options`` go to TraceContext."""
    return TraceContext(trace, values=TensorValues(trace.names, symbolic=symbolic), **options)


def meta_of(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The ``Symbol.meta`` of a torch callable: ``fn`` run on shadows."""

    def meta(*args: Any, **kwargs: Any) -> Any:
        return evaluate(fn, args, kwargs)

    return meta


def _to_shadow(value: Any, fake_mode: FakeTensorMode) -> Any:
    if isinstance(value, TensorProxy):
        return value.shadow
    if isinstance(value, GeneratorProxy):
        return None  # metadata does not depend on it; torch's refs assert None (jitcore/proxies/generator.py)
    if isinstance(value, NumberProxy):
        return value.value  # metadata does not depend on it (langctx.scalars), only its type does
    if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
        # A real tensor made while tracing (``torch.tensor(0.5)`` inside a library function) is a
        # constant of the trace: the printer binds it by reference, its shadow gives the metadata.
        return fake_mode.from_tensor(value, static_shapes=True)
    return value


def evaluate(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Run ``fn`` on the shadows of ``args``/``kwargs`` and return its outputs as proxies.

    Raises:
        DataDependentError: the outputs depend on tensor values (``item``, ``nonzero``, ...).
        Exception: whatever eager torch raises for these arguments.
    """
    excluded = torch._C._dispatch_tls_local_exclude_set()  # noqa: SLF001
    if not excluded.has(torch._C.DispatchKey.Python):  # noqa: SLF001
        return _evaluate(fn, args, kwargs)
    # Note [Shadows inside no_dispatch]
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(),  # noqa: SLF001
                                         excluded - _PYTHON_KEYS):
        return _evaluate(fn, args, kwargs)


# Note [Shadows inside no_dispatch]
# A subclass's ``__torch_dispatch__`` that computes on its inner tensors inside
# ``torch._C._DisableTorchDispatch()`` (``torch.utils._mode_utils.no_dispatch()``, subclass_zoo's style) is
# interpreted with that block entered natively, which excludes the Python dispatch keys on the thread.
# The shadows are fake tensors, which compute only through the Python key: the inner ``mul`` ran the
# CPU kernel on a fake tensor's missing storage and the process died (a segmentation fault, where eager
# computes). Eagerly the block changes nothing for plain tensors (no mode is entered inside a
# subclass's dispatch, and the inner tensors have no Python key), so the shadows are evaluated with the
# Python keys as they are outside it.
_PYTHON_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Python).add(  # noqa: SLF001
    torch._C.DispatchKey.PythonTLSSnapshot)  # noqa: SLF001


def _evaluate(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    context = current_context()
    values: TensorValues = context.values
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    shadow_leaves = [_to_shadow(v, values.fake_mode) for v in leaves]
    shadow_args, shadow_kwargs = optree.tree_unflatten(spec, shadow_leaves)
    fakes = [v for v in shadow_leaves if isinstance(v, FakeTensor)]
    for v in fakes:  # a sparse result can be returned, not computed on (its fake has no storage)
        kind = untraced_kind(v)
        if kind is not None:
            raise EagerOnlyValue(f"{getattr(fn, '__qualname__', fn)} is called on {kind[2]} the program "
                                 "made: jitcore traces strided tensors")
    if any(type(v) is torch.dtype and v in _QUANTIZED for v in leaves):  # Note [Quantized tensors ...]
        raise EagerOnlyValue(f"{getattr(fn, '__qualname__', fn)} makes a quantized tensor: jitcore traces "
                             "tensors of the other dtypes")
    before = input_metadata(fakes)
    storage_sizes = {id(v): v.untyped_storage().nbytes() for v in fakes}
    writes = may_write_inputs(fn, shadow_kwargs)
    fake_mode = values.fake_mode
    saved = SavedOutputs() if builds_graph(fakes) else None  # Note [The saved output of a graph built ...]
    cache_enabled = fake_mode.cache_enabled
    if cache_enabled and (writes or type(fn) is TorchBindOpOverload):
        fake_mode.cache_enabled = False  # Notes [FakeTensor cache and in-place resizes], [... and torchbind]
    try:
        out = tensor_of_numbers(fn, args, kwargs, fake_mode)  # Note [A tensor made from named numbers]
        if out is None:
            with fake_mode, EagerKernels(fake_mode) if fn in BACKWARDS else contextlib.nullcontext(), \
                    saved or contextlib.nullcontext():
                out = fn(*shadow_args, **shadow_kwargs)
    except (DataDependentOutputException, DynamicOutputShapeException) as exc:
        _raise_meta_error(fn, shadow_args, shadow_kwargs, shadow_leaves, exc)
        raise _data_dependent(fn, exc) from None
    except Exception as exc:
        read = data_read_error(fn, exc)
        if read is not None:
            _raise_meta_error(fn, shadow_args, shadow_kwargs, shadow_leaves, exc)
            raise read from None  # a fake's data was read (``tolist``, ...)
        if fn in STATEFUL:
            raise
        if not (isinstance(exc, RuntimeError) and _is_kernel(fn)) or _meta_kernels_answer(shadow_leaves, exc):
            _raise_eager_error(fn, shadow_args, shadow_kwargs, exc)
            raise
        if writes:
            out = _written_as_by_eager_kernel(fn, shadow_args, shadow_kwargs, shadow_leaves, exc, fake_mode)
        else:
            out = _with_eager_kernels(fn, shadow_args, shadow_kwargs, fake_mode)
    finally:
        fake_mode.cache_enabled = cache_enabled
    _check_input_changes(values, fn, (shadow_args, shadow_kwargs), fakes, before, storage_sizes)
    if writes:
        _restride_wrappers(values, fakes, before)
    out_leaves, out_spec = optree.tree_flatten(out, none_is_leaf=True)
    out_fakes = [o for o in out_leaves if isinstance(o, FakeTensor)]
    if any(isinstance(v, NumberProxy) and not all(r.specialized for r in v.roots) for v in leaves):
        for o in out_fakes:  # Note [A tensor of a named number has no constant]
            o.constant = None
    values.layout.record(fn, shadow_kwargs, fakes, out_fakes)  # where decompositions rely on layouts
    if fakes and out_fakes and not writes:
        values.layout.returned_inputs(fn, shadow_kwargs, fakes, out_fakes)
    result = optree.tree_unflatten(
        out_spec, [values.proxy_for(o) if isinstance(o, FakeTensor) else o for o in out_leaves]
    )
    if saved is not None:
        adopt_saved(values, saved, out_fakes)
    return result


# Note [A tensor of a named number has no constant]
# ``torch.tensor(s)`` of a dynamic number ``s`` stays a name in the trace (its aten schema takes a value),
# but its shadow was made from the traced value, and the fake mode keeps such a small tensor's value as
# a constant: ``torch.tensor(s).item()`` answered the traced ``s`` from then on, without a check, so the
# entry computed with the first value on every call (``x * torch.tensor(s).item()``: a wrong answer from
# the third call). A shadow made from an unspecialized number keeps no constant: its value is read as
# any tensor's, and checked on every call.


def _check_input_changes(
    values: TensorValues,
    fn: Callable[..., Any],
    call: tuple[tuple, dict],
    fakes: list[FakeTensor],
    before: dict[int, tuple],
    storage_sizes: dict[int, int],
) -> None:
    """Replay a call on real tensors when it resized an input's shadow or grew its storage.

    Fake kernels resize where eager raises (Note [Fake kernels that resize instead of raising] in
    jitcore/langctx/input_writes.py) and grow the storage of a view reaching beyond it
    (``as_strided``) where eager raises.

    Raises:
        Exception: eager's exception, when eager rejects the call; resized shadows are restored.
    """
    changed = [v for v in fakes if resized(v, before[id(v)])]
    if changed:
        try:
            _raise_eager_error(fn, *call, None, metadata=before, storage_sizes=storage_sizes)
        except Exception:
            with values.fake_mode:  # eager rejected the call: its inputs keep their metadata
                for v in changed:
                    v.as_strided_(*before[id(v)])
            raise
    elif any(guard_or_false(v.untyped_storage().nbytes() > storage_sizes[id(v)]) for v in fakes):
        _raise_eager_error(fn, *call, None, storage_sizes=storage_sizes)


def _restride_wrappers(values: TensorValues, fakes: list[FakeTensor], before: dict[int, tuple]) -> None:
    """Give a proxy whose shadow an in-place op restrided (``squeeze_``, ``t_``, ``as_strided_``) the
    shadow's new metadata on its own tensor too: native code reads a proxy's sizes from the tensor, not
    from the shadow (functorch's levels over traced tensors, Note [Function transforms run on the traced
    tensors] in jitcore/jit/function_transforms.py). Symbolic metadata is left as it is."""
    for v in fakes:
        if v.layout is not torch.strided:
            continue
        after = tensor_metadata(v)
        if not all(type(s) is int for s in (*after[0], *after[1], after[2])) or after == before[id(v)]:
            continue
        proxy = values.known(v)
        if type(proxy) is PlainTensorProxy:
            with contextlib.suppress(RuntimeError), no_dispatch():  # a grown storage: the tensor keeps its
                torch.Tensor.as_strided_(proxy, *after)  # sizes, as before this existed


# What fake tensors raise when code reads their data (``tolist``, a C++ kernel's data pointer).
# A fake's data was read, or an operator has no fake (meta) kernel (a custom op registered without
# ``register_fake``): either way only a run on the values gives the outputs' metadata.
_DATA_READ_MESSAGES = ("data is not allocated yet", ".tolist() is not supported for tensor subclasses",
                       "There was no fake impl registered for")


def _meta_kernels_answer(leaves: list[Any], exc: Exception) -> bool:
    """Whether the fake call's error on meta tensors is eager's: the same meta kernels run there, but
    for fake mode's own check that all tensors share one device (Note [Meta tensors beside others])."""
    return any(isinstance(v, FakeTensor) and v.device.type == "meta" for v in leaves) \
        and not isinstance(exc, FakeTensorDeviceMismatchError)


# Note [Meta tensors beside others]
# Eager dispatches a call holding a meta tensor to the meta kernel, whatever the other tensors' devices:
# subclass_zoo's EmptyTensor computes its results' shapes so, ``func`` on ``torch.empty(s, device="meta")``
# stand-ins beside the caller's CPU tensors (``mm`` of meta and CPU gives a meta result; ``add`` raises
# "Tensor on device cpu is not on the expected device meta!"). Fake mode refuses any such mix first
# (FakeTensorDeviceMismatchError), so every call raised under jitcore where eager computes. That error
# is answered as a fake kernel stricter than eager (Note [Fake kernels stricter than eager]): eager's
# kernel on zero-filled tensors of the same metadata gives the outputs' metadata, or eager's own error.
def _raise_meta_error(
    fn: Callable[..., Any], args: tuple, kwargs: dict, leaves: list[Any], exc: Exception
) -> None:
    """A call on meta tensors that needs values: eager has none either, so eager's error is the
    user's (``nonzero``, ``item`` on meta raise in eager), not a data-dependence refusal."""
    if any(isinstance(v, FakeTensor) and v.device.type == "meta" for v in leaves):
        _raise_eager_error(fn, args, kwargs, exc)


def data_read_error(fn: Callable[..., Any], exc: BaseException) -> DataDependentError | None:
    """The DataDependentError for ``exc`` when it says that a fake tensor's data was read (C++ code
    reading an index tensor, ``tolist``, an op without a fake kernel); None for any other exception."""
    if isinstance(exc, RuntimeError) and any(m in str(exc) for m in _DATA_READ_MESSAGES):
        return _data_dependent(fn, exc)
    return None


def _data_dependent(fn: Callable[..., Any], exc: Exception) -> DataDependentError:
    if "There was no fake impl registered for" in str(exc):
        return DataDependentError(
            f"{_name(fn)} has no fake (meta) kernel, so the metadata of its outputs is known only by "
            "running it on the values",
            hints=(f"register one with torch.library.register_fake('{_name(fn)}') (or the custom op's "
                   ".register_fake) to trace it without running it",
                   "without fullgraph=True jitcore runs it on the values and checks the outputs' metadata "
                   "on every call"),
        )
    return DataDependentError(
        f"{_name(fn)} needs the values of its tensor arguments, which are not known while tracing "
        f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
        hints=(
            "keep this computation outside the jitted function, or make it independent of tensor values",
            "jitcore.jit(fn, fallback='eager') runs such functions eagerly instead",
        ),
    )


# Note [Fake kernels stricter than eager]
# Some fake (meta) kernels reject arguments that the eager kernel of the device takes:
# ``torch._grouped_mm``'s meta kernel demands bfloat16 (the CUDA kernel's rule) while its CPU kernel
# takes float32 (Hugging Face's Mixtral and Qwen2-MoE call it so on CPU). When the fake call raises
# a RuntimeError and eager accepts the same metadata on zero-filled tensors, the fake kernel is wrong
# for this call, not the program. A meta kernel exists only for an op whose output metadata follows
# from its inputs' metadata (one whose outputs depend on values raises DynamicOutputShapeException
# instead), so the eager kernel run on zero-filled tensors of the same metadata gives the outputs'
# metadata: their shadows are made from it (``_outputs_of_eager_kernel``). The stand-in works below
# autograd: the call runs on the shadows again under ``EagerKernels``, a dispatch mode between the
# autograd keys and the fake mode that answers just the failing aten op, so the outputs carry the torch
# function's own autograd node (made leaves of their own, a backward inside the function once gave
# the op's inputs no gradient). A backward run on the shadows (``BACKWARDS``: ``autograd_grad``) runs
# under the same mode, for the op's backward is as strict (``_grouped_mm`` again).
# Where eager cannot be asked cheaply (inputs over REPLAY_NUMEL_LIMIT elements, symbolic sizes, a
# device this machine lacks), the call becomes a value read instead: run on the real values while
# tracing, its outputs' metadata checked on every call (jitcore/jit/value_reads.py); with
# ``fullgraph=True`` that is a clear refusal.
# An in-place or ``out=`` call is stricter the other way: eager's ``addbmm_`` resizes a self that
# broadcasts to the result ([1] to [3, 5], through its out= kernel) where the fake kernel demands the
# result's shape. Its written shadows take the metadata eager's kernel gave zero-filled tensors like
# them (resized below autograd, as eager's kernel resizes), and the fake kernel runs again on them, so
# the call's outputs and autograd are the fake kernel's own (``_written_as_by_eager_kernel``). Where
# eager cannot be asked, or changed no input's metadata, the fake kernel's error stands.
def _stricter_fake(fn: Callable[..., Any], exc: Exception) -> DataDependentError:
    return DataDependentError(
        f"the fake (meta) kernel of {_name(fn)} rejects arguments that its eager kernel accepts "
        f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}), so the metadata of its outputs "
        "is known only by running it on the values",
        hints=("without fullgraph=True jitcore runs it on the values and checks the outputs' metadata "
               "on every call",),
    )


def _written_as_by_eager_kernel(fn: Callable[..., Any], args: tuple, kwargs: dict, leaves: list[Any],
                                exc: Exception, fake_mode: Any) -> Any:
    """The outputs of an in-place or ``out=`` call whose fake kernel raised ``exc`` (a RuntimeError)
    where eager's kernel accepts the call and resizes a written input (``addbmm_`` on a self that
    broadcasts, Note [Fake kernels stricter than eager]): the written shadows take the metadata
    eager's kernel gave zero-filled tensors like them, and the fake kernel runs again on them.

    Raises:
        Exception: eager's own exception for these arguments; ``exc`` where eager's kernel cannot be
            asked (too large, symbolic sizes, another device) or changed no input's metadata.
    """
    fakes = {id(v): v for v in leaves if isinstance(v, FakeTensor)}
    if any(not all(type(n) is int for n in tensor_metadata(f)[0] + tensor_metadata(f)[1])
           for f in fakes.values()):
        raise exc
    after: dict[int, tuple] = {}
    if _on_zeros(fn, args, kwargs, after=after) is _NOT_REPLAYED:
        raise exc
    changed = {i: m for i, m in after.items() if m != tensor_metadata(fakes[i])}
    if not changed:
        raise exc
    with fake_mode, torch._C._AutoDispatchBelowAutograd():  # eager's kernel resizes below autograd too
        for i, (shape, stride, offset) in changed.items():
            fakes[i].resize_(offset + sum((n - 1) * s for n, s in zip(shape, stride) if n > 0) + 1)
            fakes[i].as_strided_(shape, stride, offset)
    with fake_mode:
        return fn(*args, **kwargs)


def _name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"torch.{fn.__name__}" if name.startswith("_VariableFunctionsClass.") else name


def _raise_eager_error(
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    fake_error: Exception | None,
    metadata: dict[int, tuple] | None = None,
    storage_sizes: dict[int, int] | None = None,
) -> None:
    """Replay a call on small real tensors; if eager fails, raise eager's exception.

    Args:
        fn, args, kwargs: the call, on shadows.
        fake_error: what the fake call raised (None when it did not fail).
        metadata: (shape, strides, offset) of shadows before the call, where the call changed them.
        storage_sizes: storage sizes in bytes of shadows before the call, where the call grew them.
    """
    _on_zeros(fn, args, kwargs, metadata, storage_sizes)


_NOT_REPLAYED = object()


def _on_zeros(
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    metadata: dict[int, tuple] | None = None,
    storage_sizes: dict[int, int] | None = None,
    *,
    after: dict[int, tuple] | None = None,
) -> Any:
    """``fn`` run on zero-filled real tensors with the shadows' metadata: its outputs, or _NOT_REPLAYED
    (too large to replay, or on a device this machine does not have).

    Leaves whose shadows require grad require grad (an in-place op on such a leaf raises as eagerly).
    ``after``: filled with each shadow's (shape, strides,
    offset) as the call left its zero-filled tensor, by the shadow's id.

    Raises:
        Exception: eager's exception for these arguments, with its traceback dropped.
    """
    metadata = metadata or {}
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    fakes = [v for v in leaves if isinstance(v, FakeTensor)]
    shapes = {id(f): metadata.get(id(f), tensor_metadata(f)) for f in fakes}
    if sum(math.prod(shapes[id(f)][0]) for f in fakes) > REPLAY_NUMEL_LIMIT:
        return _NOT_REPLAYED
    if any(f.device.type != "cpu" and not _device_available(f.device) for f in fakes):
        return _NOT_REPLAYED
    real: dict[int, torch.Tensor] = {}
    for f in fakes:
        if id(f) not in real:
            shape, stride, offset = shapes[id(f)]
            extent = offset + sum((n - 1) * s for n, s in zip(shape, stride) if n > 0) + 1
            nbytes = (storage_sizes or {}).get(id(f), f.untyped_storage().nbytes())
            size = max(nbytes // max(f.element_size(), 1), extent)
            base = torch.zeros(size, dtype=f.dtype, device=f.device)
            t = base.as_strided(shape, stride, offset)
            if f.constant is not None and f.constant.shape == t.shape:
                t.copy_(f.constant)  # a value the fake mode knows (a size made from Python numbers) matters
            if f.requires_grad and f.is_leaf:
                # not a view of ``base`` (its storage, strides and offset): an in-place op on a view of a
                # leaf raises "a view of a leaf Variable ...", on the program's leaf "a leaf Variable ..."
                t = t.detach().requires_grad_(True)
            real[id(f)] = t
    real_args, real_kwargs = optree.tree_unflatten(
        spec, [real[id(v)] if isinstance(v, FakeTensor) else v for v in leaves]
    )
    devices = sorted({f.device.index or 0 for f in fakes if f.device.type == "cuda"})
    try:
        with torch.random.fork_rng(devices=devices):  # the program's random stream is not consumed
            out = fn(*real_args, **real_kwargs)
    except Exception as eager_error:  # noqa: BLE001 - eager rejects these arguments too: its words are the user's
        raise eager_error.with_traceback(None) from None
    if after is not None:
        after.update((i, tensor_metadata(t)) for i, t in real.items())
    return out


def _is_kernel(fn: Any) -> bool:
    """An operator with kernels (an OpOverload, or a torch builtin that dispatches to one): its fake
    kernel and its eager kernel see the same arguments. A Python function's RuntimeError may come from
    state that zero-filled tensors do not have (an autograd graph already freed)."""
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True
    native = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)
    return isinstance(fn, native) and (getattr(fn, "__module__", None) or "torch").startswith("torch")


def _outputs_of_eager_kernel(fn: Callable[..., Any], args: tuple, kwargs: dict, exc: Exception,
                             fake_mode: Any) -> Any:
    """The outputs' shadows of an out-of-place call whose fake kernel raised ``exc`` (a RuntimeError),
    made from the eager kernel's outputs on zero-filled tensors (Note [Fake kernels stricter than
    eager]).

    Raises:
        Exception: eager's own exception for these arguments (the fake kernel was right).
        DataDependentError: eager accepts the call but cannot stand in for the fake kernel (a call too
            large to replay, symbolic sizes, outputs that are numbers or views): the call becomes a
            value read.
    """
    rule = KERNELS_WITHOUT_META.get(fn)
    if rule is not None:  # Note [Kernels without a meta kernel], jitcore/langctx/kernels_without_meta.py
        with fake_mode:
            return rule(*args, **kwargs)
    leaves = optree.tree_leaves((args, kwargs), none_is_leaf=True)
    if any(not all(type(n) is int for n in tensor_metadata(f)[0] + tensor_metadata(f)[1]) for f in leaves
           if isinstance(f, FakeTensor)):
        raise _stricter_fake(fn, exc) from None  # symbolic sizes: the zero-filled run needs static ones
    with torch.no_grad():  # below autograd: the torch function's autograd is applied above this call
        out = _on_zeros(fn, args, kwargs)
    if out is _NOT_REPLAYED:
        raise _stricter_fake(fn, exc) from None
    out_leaves, out_spec = optree.tree_flatten(out, none_is_leaf=True)
    for o in out_leaves:  # a strided nested tensor (NJT SDPA with dropout on CPU), a sparse one, ...
        kind = untraced_kind(o) if isinstance(o, torch.Tensor) else None
        if kind is not None:
            raise EagerOnlyValue(f"{getattr(fn, '__qualname__', fn)} makes {kind[2]}: jitcore traces "
                                 "strided tensors")
    if not all(o is None or (isinstance(o, torch.Tensor) and not o._is_view()) for o in out_leaves):
        # a number may come from the zeros' values, a view would lose its aliasing: read on the values
        raise _stricter_fake(fn, exc) from None
    shadows = [fake_mode.from_tensor(o, static_shapes=True) if isinstance(o, torch.Tensor) else o
               for o in out_leaves]
    return optree.tree_unflatten(out_spec, shadows)


class EagerKernels(TorchDispatchMode):
    """Below autograd, above the fake mode: an aten op whose fake kernel raises a RuntimeError gets its
    outputs' shadows from eager's kernel (``_outputs_of_eager_kernel``)."""

    def __init__(self, fake_mode: FakeTensorMode) -> None:
        super().__init__()
        self.fake_mode = fake_mode

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException):
            raise
        except RuntimeError as exc:
            if data_read_error(func, exc) is not None or may_write_inputs(func, kwargs):
                raise
            with _disable_current_modes():  # eager's kernel runs on real tensors
                return _outputs_of_eager_kernel(func, args, kwargs, exc, self.fake_mode)


def _with_eager_kernels(fn: Callable[..., Any], args: tuple, kwargs: dict, fake_mode: FakeTensorMode) -> Any:
    """``fn`` run on the shadows again, each aten op whose fake kernel rejects its arguments answered by
    eager's kernel below autograd, so the outputs' autograd graph is ``fn``'s own (Note [Fake kernels
    stricter than eager])."""
    with fake_mode, EagerKernels(fake_mode):
        return fn(*args, **kwargs)


def _device_available(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_available()
    return device.type in ("cpu", "meta")  # a meta replay computes no values: it is always possible
