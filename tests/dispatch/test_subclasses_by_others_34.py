"""Tensor subclasses written by others (issue 15, zoo55), eager against ``jitcore.jit`` over three calls
(outputs and arguments by ``assert_same_flattened``; no eager entry; no ``__torch_dispatch__`` frame on a
warm call; the entries expected). Patterns of public code not covered before, each passing as written:
an inner tensor that may be None (dynamo's OptionalScaledTensor), a Parameter subclass carrying a quant
state whose ``__torch_function__`` keeps it (bitsandbytes' Params4bit), ``ndim`` answered by
``__torch_function__`` (dynamo's DummyNDim), torchao's base-class tables (``implements``,
``_apply_fn_to_data``, ``tensor_data_names``), NotImplemented between two classes, objects that are no
tensor with ``__torch_function__`` (the "Extending torch" docs' ScalarTensor and MetadataTensor),
dispatch by ``func.tags``/schema/name strings, ``func.decompose``, a frozen dataclass with a dtype and a
``torch.Size`` as ctx, ``no_dispatch()`` and a dispatch mode inside the dispatch, ``__getattr__``
forwarding, a variable number of inner tensors, a user ``torch.library.custom_op`` in the dispatch (and
its gradient), a parametrization returning a subclass, ``weight_norm`` and ``clip_grad_norm_`` over
TwoTensor parameters, a DoRA step over an int8 base weight.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
import torch.utils._pytree as pytree
from subclass_checks import assert_same_flattened, frames_over_sizes, protocol_calls
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

import jitcore

aten = torch.ops.aten


def _three_calls(program: Callable[..., Any], make: Callable[[], tuple], classes: tuple[type, ...],
                 *, inherited: bool = False) -> tuple[int, Any, list[str]]:
    """``program`` eagerly and jitted on equal fresh arguments (``make()``, seeded) three times, outputs and
    arguments compared. Returns (entries, fallback reason, dispatch frames of the calls the cache served)."""
    jitted = jitcore.jit(program)
    warm: list[str] = []
    for i in range(3):
        torch.manual_seed(i)
        eager_args = make()
        torch.manual_seed(i)
        jit_args = make()
        expected = program(*eager_args)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(*classes, inherited=inherited) as frames:
            got = jitted(*jit_args)
        if jitcore.cache_misses(jitted) == misses:
            warm += frames
        assert_same_flattened(got, expected, f"call {i} output")
        assert_same_flattened(list(jit_args), list(eager_args), f"call {i} arguments")
    return jitcore.cache_misses(jitted), jitted.fallback_reason, warm


class _Wrapper(torch.Tensor):
    """A wrapper of one tensor ``elem``; subclasses write ``__torch_dispatch__``."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, *rest: Any) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
                                                   device=elem.device, requires_grad=elem.requires_grad)

    def __init__(self, elem: torch.Tensor, *rest: Any) -> None:
        self.elem = elem

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["elem"], None

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: None, size: Any, stride: Any) -> Any:
        return cls(inner["elem"])

    @classmethod
    def wrap(cls, out: Any) -> Any:
        return pytree.tree_map_only(torch.Tensor, cls, out)

    @classmethod
    def unwrap(cls, tree: Any) -> Any:
        return pytree.tree_map_only(cls, lambda t: t.elem, tree)


# --- an inner tensor that may be None --------------------------------------------------------------------


class _OptionalScaled(torch.Tensor):
    """Data and an optional scale: ``__tensor_flatten__`` names ``_scale`` only when there is one."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: torch.Tensor | None = None) -> _OptionalScaled:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype, device=data.device)

    def __init__(self, data: torch.Tensor, scale: torch.Tensor | None = None) -> None:
        self._data, self._scale = data, scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return (["_data", "_scale"] if self._scale is not None else ["_data"]), None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _OptionalScaled:
        return _OptionalScaled(inner["_data"], inner.get("_scale"))

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        def dequantized(t: _OptionalScaled) -> torch.Tensor:
            return t._data * t._scale if t._scale is not None else t._data

        out = func(*pytree.tree_map_only(cls, dequantized, args),
                   **pytree.tree_map_only(cls, dequantized, kwargs or {}))
        return cls(out) if func in (aten.mul.Tensor, aten.add.Tensor) else out


def test_an_inner_tensor_that_may_be_none() -> None:
    for scale in (torch.tensor(2.0), None):
        made = lambda s=scale: (_OptionalScaled(torch.randn(3), s),)  # noqa: E731
        result = _three_calls(lambda x: (x * 2 + 1, x.exp().sum()), made, (_OptionalScaled,))
        assert result == (1, None, [])
    f = jitcore.jit(lambda x: x * 2)
    for scale in (torch.tensor(2.0), None, torch.tensor(3.0), None):
        x = _OptionalScaled(torch.ones(2), scale)
        assert_same_flattened(f(x), x * 2, "output")
    assert jitcore.cache_misses(f) == 2  # one entry per flatten structure


# --- bitsandbytes' Params4bit: a Parameter subclass with a quant state --------------------------------------


class _QuantParam(nn.Parameter):
    """int8 data with its absmax in ``quant_state``; ``chunk``/``split`` keep the state on each piece."""

    def __new__(cls, data: torch.Tensor, requires_grad: bool = False, quant_state: dict | None = None,
                blocksize: int = 64) -> _QuantParam:
        self = torch.Tensor._make_subclass(cls, data, requires_grad)
        self.quant_state, self.blocksize = quant_state, blocksize
        return self

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in (torch.chunk, torch.split):
            with torch._C.DisableTorchFunctionSubclass():
                pieces = func(*args, **kwargs)
            t = args[0]
            return tuple(_QuantParam(p, t.requires_grad, t.quant_state, t.blocksize) for p in pieces)
        return super().__torch_function__(func, types, args, kwargs)


class _QuantLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        q = torch.randint(-8, 8, (6, 4)).to(torch.int8)
        self.weight = _QuantParam(q, quant_state={"absmax": torch.rand(6, 1) + 0.5}, blocksize=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.float() * self.weight.quant_state["absmax"])


_QUANT_LINEAR = _QuantLinear()
_PARAMS_4BIT: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "linear": (lambda x: _QUANT_LINEAR(x), lambda: (torch.randn(2, 4),)),
    "chunk": (lambda x: [c.quant_state["absmax"].sum() + c.float().sum() + x
                         for c in torch.chunk(_QUANT_LINEAR.weight, 2)], lambda: (torch.randn(1),)),
    "attributes": (lambda x: (_QUANT_LINEAR.weight.blocksize * x,
                              type(_QUANT_LINEAR.weight.detach()).__name__), lambda: (torch.randn(2),)),
}


@pytest.mark.parametrize("name", sorted(_PARAMS_4BIT))
def test_a_parameter_subclass_carrying_its_quant_state(name: str) -> None:
    program, make = _PARAMS_4BIT[name]
    assert _three_calls(program, make, ()) == (1, None, [])


class _DummyNDim(torch.Tensor):
    """``ndim`` answered by ``__torch_function__`` (dynamo's test_subclasses.py)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func == torch.Tensor.ndim.__get__:
            return 10
        return super().__torch_function__(func, types, args, kwargs or {})


def test_ndim_answered_by_torch_function() -> None:
    make = lambda: (torch.randn(2).as_subclass(_DummyNDim),)  # noqa: E731
    assert _three_calls(lambda x: (x.ndim, x.dim(), x * x.ndim), make, ()) == (1, None, [])


# --- torchao's base class: tables, _apply_fn_to_data, tensor_data_names -------------------------------------


class _AOBase(torch.Tensor):
    """torchao's TorchAOBaseTensor in small: flatten from class attributes, per-class op tables."""

    tensor_data_names: tuple[str, ...] = ()
    tensor_attribute_names: tuple[str, ...] = ()
    _ATEN: dict[type, dict[Any, Callable[..., Any]]] = {}
    _TORCH_FUNCTIONS: dict[type, dict[Any, Callable[..., Any]]] = {}

    @classmethod
    def implements(cls, ops: Any, table: dict | None = None) -> Callable[..., Any]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            for op in ops if isinstance(ops, (list, tuple)) else [ops]:
                (cls._ATEN if table is None else table).setdefault(cls, {})[op] = fn
            return fn
        return register

    def __tensor_flatten__(self) -> tuple[list[str], list]:
        return list(self.tensor_data_names), [getattr(self, a) for a in self.tensor_attribute_names]

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, attributes: list, size: Any, stride: Any) -> Any:
        return cls(*[inner[n] for n in cls.tensor_data_names], *attributes)

    def _apply_fn_to_data(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        return type(self)(*[fn(getattr(self, n)) for n in self.tensor_data_names],
                          *[getattr(self, a) for a in self.tensor_attribute_names])

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in cls._TORCH_FUNCTIONS.get(cls, {}):
            return cls._TORCH_FUNCTIONS[cls][func](func, types, args, kwargs)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in cls._ATEN.get(cls, {}):
            return cls._ATEN[cls][func](func, types, args, kwargs or {})
        raise NotImplementedError(f"{cls.__name__} dispatch: {func}")


class _Int8Weight(_AOBase):
    tensor_data_names = ("qdata", "scale")
    tensor_attribute_names = ("block_size", "orig_dtype")

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor, block_size: tuple,
                orig_dtype: torch.dtype) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, qdata.shape, dtype=orig_dtype, device=qdata.device)

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, block_size: tuple,
                 orig_dtype: torch.dtype) -> None:
        self.qdata, self.scale, self.block_size, self.orig_dtype = qdata, scale, block_size, orig_dtype

    def dequantize(self) -> torch.Tensor:
        return self.qdata.to(self.orig_dtype) * self.scale

    @classmethod
    def from_float(cls, w: torch.Tensor) -> _Int8Weight:
        scale = w.abs().amax(-1, keepdim=True) / 127
        return cls(torch.round(w / scale).to(torch.int8), scale, (1, w.shape[-1]), w.dtype)


@_Int8Weight.implements([aten.detach.default, aten.clone.default])
def _int8_apply(func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
    return args[0]._apply_fn_to_data(lambda t: func(t, *args[1:], **kwargs))


@_Int8Weight.implements(aten.t.default)
def _int8_t(func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
    w = args[0]
    return _Int8Weight(w.qdata.t(), w.scale.t(), w.block_size[::-1], w.orig_dtype)


@_Int8Weight.implements(F.linear, table=_AOBase._TORCH_FUNCTIONS)
def _int8_linear(func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    out = torch.mm(x.reshape(-1, x.shape[-1]), w.dequantize().t()).reshape(*x.shape[:-1], w.shape[0])
    return out + bias if bias is not None else out


def _int8_mlp() -> nn.Module:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
    for layer in (mlp[0], mlp[2]):
        layer.weight = nn.Parameter(_Int8Weight.from_float(layer.weight.detach()), requires_grad=False)
    return mlp


_MLP = _int8_mlp()


def test_torchaos_base_class_tables_over_changing_sizes() -> None:
    entries, warm = frames_over_sizes(lambda x: _MLP(x), lambda n: (torch.randn(n, 5, 4),), (2, 3, 4, 5),
                                      (_AOBase,))
    assert (entries, warm) == (2, [])
    weight = _MLP[0].weight
    program = lambda x: (weight.detach().dequantize() + x, weight.clone().qdata)  # noqa: E731
    assert _three_calls(program, lambda: (torch.randn(8, 4),), (_AOBase,), inherited=True) == (1, None, [])


def test_an_op_torchaos_table_lacks_raises_as_eagerly() -> None:
    f = jitcore.jit(lambda x: _MLP[0].weight + x)
    for _ in range(2):
        with pytest.raises(NotImplementedError, match="_Int8Weight dispatch: aten.add.Tensor"):
            f(torch.randn(8, 4))


def _dora_model() -> nn.Module:
    torch.manual_seed(0)
    base = nn.Linear(4, 6)
    base.weight = nn.Parameter(_Int8Weight.from_float(base.weight.detach()), requires_grad=False)
    base.bias.requires_grad_(False)

    class Dora(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base = base
            self.lora_a = nn.Parameter(torch.randn(2, 4) * 0.1)
            self.lora_b = nn.Parameter(torch.randn(6, 2) * 0.1)
            self.magnitude = nn.Parameter(torch.linalg.norm(base.weight.dequantize(), dim=1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            w = self.base.weight.dequantize()
            lora_w = self.lora_b @ self.lora_a
            scale = (self.magnitude / torch.linalg.norm(w + lora_w, dim=1).detach()).view(1, -1)
            return scale * (F.linear(x, w) + x @ lora_w.t()) + self.base.bias

    return Dora()


def test_a_dora_step_over_an_int8_base_weight() -> None:
    eager_model, jit_model = _dora_model(), _dora_model()

    def step(model: nn.Module, x: torch.Tensor) -> tuple:
        loss = model(x).square().mean()
        loss.backward()
        grads = [p.grad.clone() for p in (model.lora_a, model.lora_b, model.magnitude)]
        for p in (model.lora_a, model.lora_b, model.magnitude):
            p.grad = None  # (a .grad that is None, then a tensor, is an entry each, as for plain models)
        return loss.detach(), grads

    jitted = jitcore.jit(step)
    for i, n in enumerate((2, 3, 4)):
        x = torch.randn(n, 4)
        with protocol_calls(_AOBase, inherited=True) as frames:
            got = jitted(jit_model, x)
        if i == 2:
            assert frames == []
        assert_same_flattened(got, step(eager_model, x), f"call {i}")
    assert (jitcore.cache_misses(jitted), jitted.fallback_reason) == (2, None)


# --- NotImplemented between two classes; objects that are no tensor --------------------------------------


class _Deferring(TwoTensor):
    """A TwoTensor that leaves an op with another subclass to that class (NotImplemented)."""

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> _Deferring:
        return _Deferring(inner["a"], inner["b"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple, kwargs: Any = None) -> Any:
        if any(t not in (cls, TwoTensor) for t in types):
            return NotImplemented
        return super().__torch_dispatch__(func, types, args, kwargs)


class _Summing(_Wrapper):
    """Handles TwoTensors too, as the sum of their halves."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        def plain(t: torch.Tensor) -> torch.Tensor:
            return t.elem if isinstance(t, _Summing) else t.a + t.b if isinstance(t, TwoTensor) else t

        out = func(*pytree.tree_map_only(torch.Tensor, plain, args),
                   **pytree.tree_map_only(torch.Tensor, plain, kwargs or {}))
        return cls.wrap(out)


_HANDLED: dict[Any, Callable[..., Any]] = {}


class _ScalarTensor:
    """The "Extending torch" docs' ScalarTensor: no tensor, ``__torch_function__`` with a table."""

    def __init__(self, n: int, value: float) -> None:
        self._n, self._value = n, value

    def __repr__(self) -> str:
        return f"ScalarTensor(N={self._n}, value={self._value})"

    def tensor(self) -> torch.Tensor:
        return self._value * torch.eye(self._n)

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func not in _HANDLED or not all(issubclass(t, (torch.Tensor, _ScalarTensor)) for t in types):
            return NotImplemented
        return _HANDLED[func](*args, **(kwargs or {}))


def _scalar_mean(input: _ScalarTensor) -> float:
    return float(input._value) / input._n


def _scalar_add(input: Any, other: Any) -> Any:
    if isinstance(other, _ScalarTensor):
        return _ScalarTensor(input._n, input._value + other._value)
    return torch.add(input.tensor(), other)


_HANDLED.update({torch.mean: _scalar_mean, torch.add: _scalar_add})


class _MetadataTensor:
    """The docs' MetadataTensor: a tensor and metadata, ``__torch_function__`` unwrapping and rewrapping."""

    def __init__(self, data: Any, metadata: Any = None) -> None:
        self._t, self._metadata = torch.as_tensor(data), metadata

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        metadata = next(a._metadata for a in args if hasattr(a, "_metadata"))
        return _MetadataTensor(func(*[getattr(a, "_t", a) for a in args], **(kwargs or {})), metadata)


_NO_TENSOR: dict[str, tuple[Callable[..., Any], Callable[[], tuple], tuple[type, ...]]] = {
    "not_implemented": (lambda x, y: (x * y, y + x),
                        lambda: (_Deferring(torch.randn(2), torch.randn(2)), _Summing(torch.randn(2))),
                        (_Deferring, _Summing)),
    "scalar_tensor": (lambda x, n: (torch.mean(_ScalarTensor(n, 2)), torch.add(_ScalarTensor(3, 2), x),
                                    repr(torch.add(_ScalarTensor(2, 1), _ScalarTensor(2, 3)))),
                      lambda: (torch.randn(3, 3), 5), ()),
    "metadata_tensor": (lambda x: (lambda r: (r._t, r._metadata))(torch.mul(_MetadataTensor(x, {"k": 1}), 2)),
                        lambda: (torch.randn(3),), ()),
}


@pytest.mark.parametrize("name", sorted(_NO_TENSOR))
def test_not_implemented_and_objects_that_are_no_tensor(name: str) -> None:
    program, make, classes = _NO_TENSOR[name]
    assert _three_calls(program, make, classes) == (1, None, [])


# --- what a dispatch reads of ``func``; what it runs inside -------------------------------------------------


class _ByTags(_Wrapper):
    """Pointwise ops by ``torch.Tag.pointwise``, in-place ones by the schema's ``is_mutable``."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        args, kwargs = cls.unwrap(args), cls.unwrap(kwargs or {})
        if func._schema.is_mutable and torch.Tag.pointwise in func.tags:
            func(*args, **kwargs)
            return cls(args[0])
        return cls.wrap(func(*args, **kwargs))


class _ByName(_Wrapper):
    """Dispatch by ``func.overloadpacket.__name__``, ``func.name()`` and ``str(func)``."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func.overloadpacket.__name__ in ("mm", "addmm"):
            return cls(func(*cls.unwrap(args), **cls.unwrap(kwargs or {})) * 0.5)
        if func.name() == "aten::relu":
            return cls(torch.clamp(args[0].elem, min=0.0))
        if str(func) == "aten.detach.default":
            return cls(args[0].elem.detach())
        return cls.wrap(func(*cls.unwrap(args), **cls.unwrap(kwargs or {})))


class _Decomposing(_Wrapper):
    """Runs a few ops on its element and decomposes every other (``func.decompose``)."""

    OWN = frozenset((aten.add.Tensor, aten.mul.Tensor, aten.sum.default, aten.sum.dim_IntList, aten.t.default,
                     aten.mm.default, aten.view.default, aten.expand.default, aten.detach.default))

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func not in cls.OWN:
            out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return cls.wrap(func(*cls.unwrap(args), **cls.unwrap(kwargs)))


class _NoDispatch(_Wrapper):
    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        with no_dispatch():
            out = func(*cls.unwrap(args), **cls.unwrap(kwargs or {}))
        return cls.wrap(out)


class _Recording(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        self.ops.append(func.__name__)
        return func(*args, **(kwargs or {}))


class _ModeInside(_Wrapper):
    """Runs each op under a recording dispatch mode, keeping the last op's names."""

    LAST: list[str] = []

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        with _Recording() as recording:
            out = func(*cls.unwrap(args), **cls.unwrap(kwargs or {}))
        cls.LAST = recording.ops
        return cls.wrap(out)


class _Forwarding(_Wrapper):
    """``inner_<name>`` reads the element's attribute (``__getattr__``)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("inner_"):
            return getattr(self.elem, name[6:])
        raise AttributeError(name)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        return cls.wrap(func(*cls.unwrap(args), **cls.unwrap(kwargs or {})))


def _in_place(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(y)
    x.mul_(0.5)
    x.clamp_(-1, 1)
    return x.sin().sum(0), x.t()


_FUNC_READS: dict[str, tuple[Callable[..., Any], Callable[[], tuple], type]] = {
    "tags_and_schema": (_in_place, lambda: (_ByTags(torch.randn(3, 2)), torch.randn(3, 2)), _ByTags),
    "name_strings": (lambda x, w: F.linear(x, w).relu() + torch.mm(x, w.t()),
                     lambda: (_ByName(torch.randn(2, 3)), _ByName(torch.randn(4, 3))), _ByName),
    "decompose": (lambda x: (x.square().sum(), F.silu(x)), lambda: (_Decomposing(torch.randn(3)),),
                  _Decomposing),
    "no_dispatch": (lambda x: (x * 2).exp().sum(), lambda: (_NoDispatch(torch.randn(3)),), _NoDispatch),
    "mode_inside": (lambda x: ((x + 1) * 2, list(_ModeInside.LAST)), lambda: (_ModeInside(torch.randn(3)),),
                    _ModeInside),
    "getattr": (lambda x: (x.inner_shape, x * 2, x.inner_dtype), lambda: (_Forwarding(torch.randn(3)),),
                _Forwarding),
}


@pytest.mark.parametrize("name", sorted(_FUNC_READS))
def test_what_a_dispatch_reads_of_func_and_runs_inside(name: str) -> None:
    program, make, cls = _FUNC_READS[name]
    assert _three_calls(program, make, (cls,)) == (1, None, [])


# --- ctx: a frozen dataclass, a dtype, a torch.Size; a variable number of inner tensors --------------------


@dataclasses.dataclass(frozen=True)
class _QuantConfig:
    bits: int
    group: int
    dtype: torch.dtype


class _Configured(torch.Tensor):
    """Flat int32 codes shown as ``orig`` (a torch.Size in the ctx beside a frozen config)."""

    @staticmethod
    def __new__(cls, codes: torch.Tensor, config: _QuantConfig, orig: torch.Size) -> _Configured:
        return torch.Tensor._make_wrapper_subclass(cls, orig, dtype=config.dtype)

    def __init__(self, codes: torch.Tensor, config: _QuantConfig, orig: torch.Size) -> None:
        self.codes, self.config, self.orig = codes, config, orig

    def __tensor_flatten__(self) -> tuple[list[str], tuple]:
        return ["codes"], (self.config, self.orig)

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: tuple, size: Any, stride: Any) -> _Configured:
        return _Configured(inner["codes"], *ctx)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        def values(t: _Configured) -> torch.Tensor:
            return t.codes.to(t.config.dtype).reshape(t.orig) / (2 ** (t.config.bits - 1))

        args, kwargs = pytree.tree_map_only(cls, values, (args, kwargs or {}))
        return func(*args, **kwargs)


def _configured(bits: int = 8) -> _Configured:
    codes = torch.randint(-100, 100, (12,), dtype=torch.int32)
    return _Configured(codes, _QuantConfig(bits, 4, torch.float32), torch.Size([3, 4]))


class _Pieces(torch.Tensor):
    """Rows held as a list of tensors, their number in the ctx; pointwise ops per piece."""

    @staticmethod
    def __new__(cls, pieces: list[torch.Tensor]) -> _Pieces:
        rows = sum(p.shape[0] for p in pieces)
        return torch.Tensor._make_wrapper_subclass(cls, (rows, *pieces[0].shape[1:]), dtype=pieces[0].dtype)

    def __init__(self, pieces: list[torch.Tensor]) -> None:
        for i, p in enumerate(pieces):
            setattr(self, f"p{i}", p)
        self.count = len(pieces)

    def pieces(self) -> list[torch.Tensor]:
        return [getattr(self, f"p{i}") for i in range(self.count)]

    def __tensor_flatten__(self) -> tuple[list[str], int]:
        return [f"p{i}" for i in range(self.count)], self.count

    @staticmethod
    def __tensor_unflatten__(inner: dict, count: int, size: Any, stride: Any) -> _Pieces:
        return _Pieces([inner[f"p{i}"] for i in range(count)])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.pointwise in func.tags and all(
                isinstance(a, cls) or not isinstance(a, torch.Tensor) for a in args):
            first = next(a for a in args if isinstance(a, cls))
            return cls([func(*[a.pieces()[i] if isinstance(a, cls) else a for a in args], **kwargs)
                        for i in range(first.count)])
        args, kwargs = pytree.tree_map_only(cls, lambda t: torch.cat(t.pieces()), (args, kwargs))
        return func(*args, **kwargs)


def test_ctx_of_a_dataclass_a_dtype_and_a_size_and_pieces_counted_in_it() -> None:
    program = lambda x, w: (x @ w.t(), w.config.bits * x.sum())  # noqa: E731
    assert _three_calls(program, lambda: (torch.randn(2, 4), _configured()), (_Configured,)) == (1, None, [])
    f = jitcore.jit(lambda x, w: x @ w.t())
    for bits in (8, 4, 8, 4):
        x, w = torch.randn(2, 4), _configured(bits)
        torch.testing.assert_close(f(x, w), x @ w.t())
    assert jitcore.cache_misses(f) == 2  # one entry per config
    make = lambda: (_Pieces([torch.randn(2, 3), torch.randn(1, 3), torch.randn(3, 3)]),)  # noqa: E731
    assert _three_calls(lambda x: ((x * 2 + 1).sum(), x.exp().mean()), make, (_Pieces,)) == (1, None, [])


# --- a custom op of the user's in the dispatch --------------------------------------------------------------


@torch.library.custom_op("jitcore_tests_zoo55::dequantize", mutates_args=())
def _dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale


@_dequantize.register_fake
def _(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.empty(q.shape, dtype=torch.float32)


class _CustomOpWeight(torch.Tensor):
    """An int8 weight its dispatch dequantizes with a ``torch.library.custom_op``."""

    @staticmethod
    def __new__(cls, q: torch.Tensor, scale: torch.Tensor) -> _CustomOpWeight:
        return torch.Tensor._make_wrapper_subclass(cls, q.shape, dtype=torch.float32)

    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        self.q, self.scale = q, scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["q", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _CustomOpWeight:
        return _CustomOpWeight(inner["q"], inner["scale"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.t.default:
            return cls(args[0].q.t(), args[0].scale.t())
        dequantized = lambda w: torch.ops.jitcore_tests_zoo55.dequantize(w.q, w.scale)  # noqa: E731
        args, kwargs = pytree.tree_map_only(cls, dequantized, (args, kwargs or {}))
        return func(*args, **kwargs)


def _custom_op_weight() -> _CustomOpWeight:
    w = torch.randn(6, 4)
    scale = w.abs().amax(1, keepdim=True) / 127
    return _CustomOpWeight(torch.round(w / scale).to(torch.int8), scale)


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "grad"])
def test_a_custom_op_in_the_dispatch_over_changing_sizes(grad: bool) -> None:
    if grad:
        program = lambda x, w: torch.autograd.grad(F.linear(x, w).sum(), x)[0]  # noqa: E731
    else:
        program = lambda x, w: F.linear(x, w).relu()  # noqa: E731
    make = lambda n: (torch.randn(n, 4, requires_grad=grad), _custom_op_weight())  # noqa: E731
    assert frames_over_sizes(program, make, (2, 3, 4, 5), (_CustomOpWeight,)) == (2, [])


# --- parametrizations, weight_norm, clip_grad_norm_ over TwoTensor -----------------------------------------


class _ToTwo(nn.Module):
    def forward(self, w: torch.Tensor) -> TwoTensor:
        return TwoTensor(w, w * 2)


class _Symmetric(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return (w + w.t()) / 2


def _two(*size: int, requires_grad: bool = False) -> TwoTensor:
    return TwoTensor(torch.randn(*size), torch.randn(*size)).requires_grad_(requires_grad)


def _modules() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    to_two = nn.Linear(3, 3)
    parametrize.register_parametrization(to_two, "weight", _ToTwo())
    symmetric = nn.Linear(3, 3)
    symmetric.weight = nn.Parameter(_two(3, 3))
    parametrize.register_parametrization(symmetric, "weight", _Symmetric())
    normed = nn.Linear(3, 2)
    normed.weight = nn.Parameter(_two(2, 3))
    return {"to_two": to_two, "of_two": symmetric,
            "weight_norm": torch.nn.utils.parametrizations.weight_norm(normed)}


_MODULES = _modules()


def _clipped(params: list[torch.Tensor], x: torch.Tensor) -> tuple:
    sum((p * x).sum() for p in params).backward()
    return torch.nn.utils.clip_grad_norm_(params, 0.5), [p.grad for p in params]


@pytest.mark.parametrize("name", [*sorted(_MODULES), "clip_grad_norm_"])
def test_parametrizations_weight_norm_and_clipping_over_twotensor(name: str) -> None:
    if name == "clip_grad_norm_":
        make = lambda: ([_two(3, requires_grad=True), _two(3, requires_grad=True)], torch.randn(3))  # noqa: E731
        assert _three_calls(_clipped, make, (TwoTensor,)) == (1, None, [])
        return
    module = _MODULES[name]
    assert _three_calls(lambda x: module(x), lambda: (torch.randn(2, 3),), (TwoTensor,)) == (1, None, [])
