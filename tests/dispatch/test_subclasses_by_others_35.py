"""Tensor subclasses written by others (issue 15, zoo56), eager against ``jitcore.jit`` over three or more
calls (outputs, arguments, parameters, gradients and optimizer state by ``assert_same_flattened``; no eager
entry; no ``__torch_function__``/``__torch_dispatch__`` frame on a warm call; the entries expected).
Patterns of public code not covered before: a class with ``__torch_function__`` only that carries a unit
string (and raises on mixed units), ``as_subclass`` inside the program, a Python float scale and an enum as
flatten ctx that change between calls (float8-style scaled tensors, a row/column layout tag), a
``__torch_dispatch__`` written as a staticmethod that returns through ``return_and_correct_aliasing``, a
``torch.library.custom_op`` with a ``register_torch_dispatch`` rule for TwoTensor, subclass ops under
``no_grad``/``autocast``/``inference_mode``, ``.to(dtype)``/``.cpu()``/``.half()``, ``copy.deepcopy``
inside and pickling of the outputs after, a ``_make_subclass`` Parameter subclass in a training step,
SGD with momentum over TwoTensor parameters (Adam's are covered by other files), and a training step
over batch sizes whose first call finds every ``.grad`` None (Note [A miss for another reason with other
sizes], jitcore/jit/shapes.py).
"""

from __future__ import annotations

import copy
import enum
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree
from subclass_checks import assert_same_flattened, protocol_calls
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import return_and_correct_aliasing

import jitcore

aten = torch.ops.aten


def _state(value: Any) -> Any:
    """What a call leaves in an argument: a module's parameters with their gradients and its buffers, an
    optimizer's state, containers item by item."""
    if isinstance(value, nn.Module):
        return [[(n, p, p.grad) for n, p in value.named_parameters()], list(value.named_buffers())]
    if isinstance(value, torch.optim.Optimizer):
        return [_state(dict(s)) for s in value.state.values()]
    if isinstance(value, dict):
        return [(k, _state(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return type(value)(_state(v) for v in value)
    return value


def _calls(program: Callable[..., Any], make: Callable[[int], tuple], classes: tuple[type, ...],
           calls: int = 3) -> tuple[int, Any, list[str]]:
    """``program`` eagerly and jitted on equal fresh arguments (``make(i)``, seeded) ``calls`` times, outputs
    and arguments compared (an exception by its type). Returns (entries, fallback reason, dispatch frames
    of the calls the cache served)."""
    jitted = jitcore.jit(program)
    warm: list[str] = []
    for i in range(calls):
        torch.manual_seed(i)
        eager_args = make(i)
        torch.manual_seed(i)
        jit_args = make(i)
        misses = jitcore.cache_misses(jitted)
        try:
            expected: Any = program(*eager_args)
        except Exception as exc:  # noqa: BLE001 - the exception's type is the outcome
            expected = type(exc)
        with protocol_calls(*classes) as frames:
            try:
                got: Any = jitted(*jit_args)
            except Exception as exc:  # noqa: BLE001
                got = type(exc)
        if jitcore.cache_misses(jitted) == misses:
            warm += frames
        assert_same_flattened(_state(got), _state(expected), f"call {i} output")
        assert_same_flattened(_state(list(jit_args)), _state(list(eager_args)), f"call {i} arguments")
    return jitcore.cache_misses(jitted), jitted.fallback_reason, warm


def _steps(step: Callable[..., Any], make: Callable[[], tuple], sizes: tuple[int, ...],
           classes: tuple[type, ...]) -> tuple[int, Any, list[str]]:
    """A training ``step(*state, x)`` eagerly and jitted on equal state (``make()``, seeded) kept across the
    calls, with an ``x`` of ``sizes[i]`` rows on call i: outputs and state compared after each call."""
    torch.manual_seed(0)
    eager_state = make()
    torch.manual_seed(0)
    jit_state = make()
    jitted = jitcore.jit(step)
    warm: list[str] = []
    for i, n in enumerate(sizes):
        x = torch.randn(n, 3)
        expected = step(*eager_state, x)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(*classes) as frames:
            got = jitted(*jit_state, x.clone())
        if jitcore.cache_misses(jitted) == misses:
            warm += frames
        assert_same_flattened(_state(got), _state(expected), f"call {i} output")
        assert_same_flattened(_state(list(jit_state)), _state(list(eager_state)), f"call {i} state")
    return jitcore.cache_misses(jitted), jitted.fallback_reason, warm


def _two(*shape: int) -> TwoTensor:
    return TwoTensor(torch.randn(*shape), torch.randn(*shape))


# --- __torch_function__ only: a unit carried along ---------------------------------------------------------


class _UnitTensor(torch.Tensor):
    """A plain tensor's data with a ``unit`` string; ops keep it, adding two units raises (a pint-style
    quantity that overrides ``__torch_function__`` only)."""

    unit: str = ""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        units = {a.unit for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, _UnitTensor)}
        if func in (torch.Tensor.__add__, torch.add, torch.Tensor.__sub__) and len(units) > 1:
            raise ValueError(f"cannot add {sorted(units)}")
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)

        def wrap(t: Any) -> Any:
            if type(t) is torch.Tensor:
                t = t.as_subclass(_UnitTensor)
            if isinstance(t, _UnitTensor):
                t.unit = "*".join(sorted(units))
            return t

        return pytree.tree_map(wrap, out)


def _metres(unit: str = "m") -> _UnitTensor:
    t = torch.randn(3, 4).as_subclass(_UnitTensor)
    t.unit = unit
    return t


@pytest.mark.parametrize("case", ["ops", "mixed units raise", "a branch on the unit", "as_subclass inside"])
def test_a_unit_carried_by_torch_function_only(case: str) -> None:
    program, make = {
        "ops": (lambda x, y: (x + y, (x * 2).sum(0), x[1], x.unit),
                lambda i: (_metres(), _metres())),
        "mixed units raise": (lambda x, y: x + y, lambda i: (_metres("m"), _metres("s"))),
        "a branch on the unit": (lambda x: x * 2 if x.unit == "m" else x - 1,
                                 lambda i: (_metres("m" if i % 2 else "s"),)),
        "as_subclass inside": (lambda x: (x.as_subclass(_UnitTensor) * 3).relu(),
                               lambda i: (torch.randn(5),)),
    }[case]
    entries, reason, warm = _calls(program, make, (_UnitTensor,), calls=4)
    assert (reason, warm) == (None, [])
    assert entries == (2 if case == "a branch on the unit" else 1)


# --- flatten ctx that changes between calls: a Python float scale, an enum -------------------------------


class _Scaled8(torch.Tensor):
    """int8 data and a Python float scale in the flatten ctx (float8 training's style); ``w * c`` scales the
    ctx, other ops dequantize."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: float) -> _Scaled8:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=torch.float32, device=data.device)

    def __init__(self, data: torch.Tensor, scale: float) -> None:
        self._data, self._scale = data, scale

    def __tensor_flatten__(self) -> tuple[list[str], float]:
        return ["_data"], self._scale

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: float, size: Any, stride: Any) -> _Scaled8:
        return _Scaled8(inner["_data"], ctx)

    def dequantize(self) -> torch.Tensor:
        return self._data.float() * self._scale

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.detach.default:
            return _Scaled8(args[0]._data.detach(), args[0]._scale)
        if func is aten.mul.Tensor and isinstance(args[1], (int, float)):
            return _Scaled8(args[0]._data, args[0]._scale * args[1])
        args, kwargs = pytree.tree_map_only(_Scaled8, _Scaled8.dequantize, (args, kwargs or {}))
        return func(*args, **kwargs)


def _int8(*shape: int) -> torch.Tensor:
    return torch.randint(-8, 8, shape, dtype=torch.int8)


class _Layout(enum.Enum):
    ROW = 1
    COL = 2


class _Laid(torch.Tensor):
    """A matrix stored row-major or transposed, the layout an enum in the flatten ctx; ``t()`` flips it."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, order: _Layout) -> _Laid:
        shape = data.shape if order is _Layout.ROW else data.shape[::-1]
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=data.dtype)

    def __init__(self, data: torch.Tensor, order: _Layout) -> None:
        self.stored, self.order = data, order

    def __tensor_flatten__(self) -> tuple[list[str], _Layout]:
        return ["stored"], self.order

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: _Layout, size: Any, stride: Any) -> _Laid:
        return _Laid(inner["stored"], ctx)

    def plain(self) -> torch.Tensor:
        return self.stored if self.order is _Layout.ROW else self.stored.t()

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.t.default:
            flipped = _Layout.COL if args[0].order is _Layout.ROW else _Layout.ROW
            return _Laid(args[0].stored, flipped)
        if func in (aten.mul.Tensor, aten.add.Tensor) and not isinstance(args[1], _Laid):
            return _Laid(func(args[0].stored, args[1]), args[0].order)
        args, kwargs = pytree.tree_map_only(_Laid, _Laid.plain, (args, kwargs or {}))
        return func(*args, **kwargs)


@pytest.mark.parametrize("case", ["float scale", "enum layout"])
def test_a_flatten_ctx_that_changes_between_calls(case: str) -> None:
    if case == "float scale":  # scales 0.25, 0.5, 0.75, ...: the scale is a number of the computation
        entries, reason, warm = _calls(lambda w, x: (x @ w, w * 2.0, w.dequantize().sum()),
                                       lambda i: (_Scaled8(_int8(4, 4), 0.25 * (i + 1)), torch.randn(2, 4)),
                                       (_Scaled8,), calls=5)
    else:  # two layouts: an entry each
        entries, reason, warm = _calls(lambda w, x: (x @ w, w.t() * 2, w + 3),
                                       lambda i: (_Laid(torch.randn(3, 3), list(_Layout)[i % 2]),
                                                  torch.randn(2, 3)),
                                       (_Laid,), calls=4)
    assert (entries, reason, warm) == (2, None, [])


# --- a staticmethod __torch_dispatch__ returning through return_and_correct_aliasing ---------------------


class _Aliased(torch.Tensor):
    """One inner tensor; ``__torch_dispatch__`` is a staticmethod and views and in-place ops alias as the
    inner op's do (``return_and_correct_aliasing``)."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> _Aliased:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, strides=inner.stride(),
                                                   storage_offset=inner.storage_offset(), dtype=inner.dtype)

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Aliased:
        return _Aliased(inner["inner"])

    @staticmethod
    def __torch_dispatch__(func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        inner_args, inner_kwargs = pytree.tree_map_only(_Aliased, lambda t: t.inner, (args, kwargs))
        out = pytree.tree_map_only(torch.Tensor, _Aliased, func(*inner_args, **inner_kwargs))
        return return_and_correct_aliasing(func, args, kwargs, out)


def _views_and_mutations(x: _Aliased) -> tuple:
    y = x.t()
    y.mul_(2)
    return x + 1, x.view(-1)[:3], y.sum(), x.add_(1).unsqueeze(0)


def test_a_staticmethod_dispatch_that_corrects_aliasing() -> None:
    make = lambda i: (_Aliased(torch.randn(3, 4)),)  # noqa: E731
    entries, reason, warm = _calls(_views_and_mutations, make, (_Aliased,))
    assert (entries, reason, warm) == (1, None, [])


# --- a custom op with a rule for TwoTensor ---------------------------------------------------------------


@torch.library.custom_op("zoo56::scale_add", mutates_args=())
def _scale_add(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s + 1


@_scale_add.register_fake
def _(x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.register_torch_dispatch("zoo56::scale_add", TwoTensor)
def _(mode: Any, func: Any, types: tuple, args: tuple, kwargs: dict) -> TwoTensor:
    x, s = args
    return TwoTensor(_scale_add(x.a, s), _scale_add(x.b, s * 2))


def test_a_custom_ops_rule_for_a_subclass() -> None:
    entries, reason, warm = _calls(lambda x: _scale_add(x, 3.0) * 2, lambda i: (_two(3),), (TwoTensor,))
    assert (entries, reason, warm) == (1, None, [])


# --- grad modes, autocast, conversions, copies ------------------------------------------------------------


def _under_modes(x: TwoTensor, w: torch.Tensor) -> tuple:
    with torch.no_grad():
        y = x * w
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = x @ w
    with torch.inference_mode():
        u = x + 1
    return y, z, z.dtype, u.is_inference()


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[int], tuple]]] = {
    "no_grad, autocast, inference_mode": (_under_modes,
                                          lambda i: (_two(3, 3), torch.randn(3, 3, requires_grad=True))),
    "to(dtype), cpu(), half()": (lambda x: (x.to(torch.float64), x.cpu(), x.half() + 1,
                                            x.to("cpu", torch.bfloat16)),
                                 lambda i: (_two(3),)),
    "a scaled tensor to(dtype), cpu()": (lambda w: (w.to(torch.float64), w.cpu() + 0),
                                         lambda i: (_Scaled8(_int8(4), 0.5),)),
    "deepcopy inside": (lambda x: copy.deepcopy(x * 2), lambda i: (_two(3),)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_modes_conversions_and_copies(name: str) -> None:
    program, make = PROGRAMS[name]
    entries, reason, warm = _calls(program, make, (TwoTensor, _Scaled8))
    assert (entries, reason, warm) == (1, None, [])


def test_outputs_pickle_and_deepcopy_as_eagers() -> None:
    jitted = jitcore.jit(lambda x: x * 2 + 1)
    x = _two(3)
    for _ in range(2):
        out, expected = jitted(x), x * 2 + 1
        assert_same_flattened(pickle.loads(pickle.dumps(out)), expected, "pickled")
        assert_same_flattened(copy.deepcopy(out), expected, "deep copy")
    assert jitcore.cache_misses(jitted) == 1


# --- training: a Parameter subclass, optimizers, a first call without gradients -------------------------


class _TaggedParameter(nn.Parameter):
    """A Parameter made with ``_make_subclass`` carrying a tag that ``detach`` keeps (bitsandbytes' style)."""

    def __new__(cls, data: torch.Tensor, tag: str = "w", requires_grad: bool = True) -> _TaggedParameter:
        p = torch.Tensor._make_subclass(cls, data, requires_grad)
        p.tag = tag
        return p

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if func is torch.Tensor.detach and isinstance(args[0], _TaggedParameter):
            out = _TaggedParameter(out, args[0].tag, requires_grad=False)
        return out


def _tagged_linear() -> tuple[nn.Module]:
    m = nn.Linear(3, 2)
    m.weight = _TaggedParameter(m.weight.detach().clone(), "proj")
    return (m,)


def _tagged_step(m: nn.Module, x: torch.Tensor) -> tuple:
    loss = m(x).pow(2).sum()
    loss.backward()
    return loss.detach(), m.weight.grad, type(m.weight.detach()).__name__, m.weight.tag


class _TwoLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w = torch.randn(2, 3)
        self.w = nn.Parameter(TwoTensor(w.clone(), w.clone()))
        self.b = nn.Parameter(torch.zeros(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w, self.b)


def _optimizer_step(m: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = m(x).square().mean()
    loss.backward()
    opt.step()
    return loss.detach()


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "SGD nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
}


def test_a_make_subclass_parameter_in_a_training_step() -> None:
    entries, reason, warm = _steps(_tagged_step, _tagged_linear, (4, 4, 4), (_TaggedParameter,))
    assert (entries, reason, warm) == (2, None, [])  # .grad None on the first call, a tensor after


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_an_optimizer_over_twotensor_parameters(name: str) -> None:
    def make() -> tuple:
        m = _TwoLinear()
        return m, OPTIMIZERS[name](m.parameters())

    entries, reason, warm = _steps(_optimizer_step, make, (4, 4, 4), (TwoTensor,))
    assert (entries, reason, warm) == (2, None, [])  # no optimizer state on the first call


def _accumulating_step(m: nn.Module, x: torch.Tensor) -> tuple:
    loss = m(x).square().mean()
    loss.backward()
    return loss.detach(), [p.grad for p in m.parameters()]


@pytest.mark.parametrize("model", ["plain", "TwoTensor weight"])
def test_a_first_call_without_gradients_over_batch_sizes(model: str) -> None:
    """The second call misses on ``.grad`` (None, then a tensor) with another batch size: that pass is
    symbolic, and the batch sizes after it are cache hits (Note [A miss for another reason with other
    sizes]); before, a static entry came between: 3 entries."""
    make = (lambda: (nn.Linear(3, 2),)) if model == "plain" else (lambda: (_TwoLinear(),))
    entries, reason, warm = _steps(_accumulating_step, make, (2, 3, 4), (TwoTensor,))
    assert (entries, reason, warm) == (2, None, [])
