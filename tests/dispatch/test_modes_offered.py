"""What a TorchFunctionMode entered inside the jitted function is offered (Note [What eager offers a function
mode], jitcore/dispatch/modes.py): every callable eager's torch offers it, not only the calls jitcore records.

Each program runs eagerly and under jitcore.jit twice (subclass_checks.check_twice): a logging mode records
the callables it is handed, and the list it returns must equal eager's, with eager's values, one cache entry
and a hit. Before, the mode missed ``torch.device(...)``, ``torch.can_cast``, every metadata query
(``x.shape``, ``x.size()``, ``x.dim()``, ``len(x)``, ``x.requires_grad``, ...), ``x.data = y``'s setter and
iteration's ``dim``; it was handed ``torch.reshape`` for ``x.reshape(3, 1)``, ``Tensor.item`` for
``float(x)``, and saw jitcore's own ``aten.detach`` for ``nn.Parameter(t)``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from subclass_checks import CountingFunctionMode as Count
from subclass_checks import check_twice
from torch.overrides import TorchFunctionMode
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


def _name(func: Any) -> str:
    owner = getattr(func, "__self__", None)
    if type(func).__name__ == "method-wrapper" and owner is not None:  # Tensor.shape.__get__
        return f"{owner.__name__}.{func.__name__}"
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)


class Log(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        self.names.append(_name(func))
        return func(*args, **(kwargs or {}))


class DimPlusOne(TorchFunctionMode):
    """Changes a query's answer: the program's branch on it follows the mode, as eagerly."""

    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return out + 1 if func is torch.Tensor.dim else out


def _counted_devices(x: torch.Tensor) -> tuple:
    with Count() as mode:
        torch.device("cpu")
        torch.device("cpu")
        y = x.sin() + x.cos()
    return y, mode.count


def _devices(x: torch.Tensor) -> tuple:
    with Log() as mode:
        y = torch.zeros(3, device=torch.device("cpu")) + x
        z = torch.ones(3, device=torch.device(type="cpu"))
    return y + z, mode.names


def _properties(x: torch.Tensor) -> tuple:
    with Log() as mode:
        seen = (x.shape, x.dtype, x.device, x.requires_grad, x.is_leaf, x.layout, x.ndim, x.is_cuda,
                x.itemsize, x.nbytes, x.grad_fn, x.is_sparse, x.is_quantized, x.is_meta, x.is_nested)
    return x + 1, str(seen), mode.names


def _queries(x: torch.Tensor) -> tuple:
    with Log() as mode:
        seen = (x.size(), x.size(0), x.stride(), x.storage_offset(), x.dim(), x.ndimension(), x.numel(),
                x.nelement(), x.element_size(), x.is_contiguous(), x.is_floating_point(), x.is_complex(),
                x.is_signed(), x.get_device(), len(x), torch.Tensor.size(x), torch.Tensor.shape.__get__(x))
    return x + 1, str(seen), mode.names


def _dtypes(x: torch.Tensor) -> tuple:
    with Log() as mode:
        same = torch.can_cast(x.dtype, torch.int32)
        wider = torch.promote_types(x.dtype, torch.float64)
    return x.to(wider), same, mode.names


def _iteration(x: torch.Tensor) -> tuple:
    with Log() as mode:
        rows = list(x)
        pairs = tuple(x)
        total = sum(r.sum() for r in x)
    return rows, pairs, total, mode.names


def _methods_as_eager_hands_them(x: torch.Tensor) -> tuple:
    with Log() as mode:
        y = x.reshape(3, 1).permute(1, 0).flip(0).tile(1)
        a, b = float(y.sum()), int(y.sum() > 0)
    return y * a * b, mode.names


def _data_and_parameters(x: torch.Tensor) -> tuple:
    with Log() as mode:
        y = x.clone()
        y.data = torch.zeros(3)
        p = torch.nn.Parameter(torch.ones(3))
        z = (x * p).detach()
    return y, z, mode.names


def _functional_with_shapes(x: torch.Tensor, w: torch.Tensor) -> tuple:
    with Log() as mode:
        y = F.gelu(F.linear(x, w))
        y = F.layer_norm(y, (y.shape[-1],))
    return y, mode.names


def _queries_of_a_wrapper_subclass(x: TwoTensor) -> tuple:
    with Log() as mode:
        seen = (x.shape, x.size(1), x.dim(), x.dtype, len(x))
        y = x * 2
    return y, str(seen), mode.names


def _two_modes(x: torch.Tensor) -> tuple:
    with Log() as outer, Log() as inner:
        y = x.reshape(-1) * x.shape[0]
        torch.device("cpu")
    return y, outer.names, inner.names


def _a_mode_answering_a_query(x: torch.Tensor) -> tuple:
    with DimPlusOne():
        y = x.sum() if x.dim() == 3 else x * 2
    return y


PROGRAMS = {
    "a counting mode and torch.device": (_counted_devices, lambda: (torch.randn(3),)),
    "torch.device": (_devices, lambda: (torch.randn(3),)),
    "Tensor properties": (_properties, lambda: (torch.randn(3),)),
    "Tensor queries": (_queries, lambda: (torch.randn(3, 2),)),
    "dtype functions": (_dtypes, lambda: (torch.randn(3),)),
    "iteration, list, tuple, len": (_iteration, lambda: (torch.randn(3, 2),)),
    "methods handed as eager hands them": (_methods_as_eager_hands_them, lambda: (torch.randn(3),)),
    ".data = and nn.Parameter": (_data_and_parameters, lambda: (torch.randn(3),)),
    "functional with shapes": (_functional_with_shapes, lambda: (torch.randn(2, 3), torch.randn(4, 3))),
    "queries of a wrapper subclass": (
        _queries_of_a_wrapper_subclass, lambda: (TwoTensor(torch.randn(2, 3), torch.randn(2, 3)),)),
    "two function modes": (_two_modes, lambda: (torch.randn(2, 3),)),
    "a mode answering a query": (_a_mode_answering_a_query, lambda: (torch.randn(2, 3),)),
}


@pytest.mark.parametrize("program", PROGRAMS, ids=list(PROGRAMS))
def test_function_mode_is_offered_what_eager_offers(program: str) -> None:
    fn, make = PROGRAMS[program]
    check_twice(fn, make)
    assert torch._C._len_torch_function_stack() == 0  # nothing of jitcore's left on torch's stack


def test_the_counting_mode_counts_as_eager() -> None:
    jitted = check_twice(_counted_devices, lambda: (torch.randn(3),))
    assert jitted(torch.randn(3))[1] == 5


TAGGED_LOG: list[str] = []


class Tagged(torch.Tensor):
    """A plain subclass whose __torch_function__ logs what it is handed (the same door as a mode's)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        TAGGED_LOG.append(_name(func))
        return super().__torch_function__(func, types, args, kwargs)


def _queries_of_a_plain_subclass(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0] + x.size(1) + x.dim() + len(x)
    for _row in x:
        pass
    return x.reshape(-1).sin() * n


def test_a_subclass_torch_function_is_offered_what_eager_offers() -> None:
    jitted = jitcore.jit(_queries_of_a_plain_subclass)
    for _ in range(2):
        x = torch.randn(2, 3).as_subclass(Tagged)
        TAGGED_LOG.clear()
        expected = _queries_of_a_plain_subclass(x)
        eager_log = list(TAGGED_LOG)
        TAGGED_LOG.clear()
        out = jitted(x)
        assert TAGGED_LOG == eager_log
        assert type(out) is type(expected)
        torch.testing.assert_close(out, expected)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1)
