"""Tensor subclasses written by others (issue 15, zoo50): differential tests, eager against ``jitcore.jit``
over several calls (values, output types, inner tensors, cache entries, the subclass code a warm call
runs). Sources of this round's survey: torch's test/test_python_dispatch.py (a wrapper whose
``__torch_dispatch__`` answers its own layout, ``dispatch_sizes_strides_policy``), albanD/subclass_zoo
(the quantized, negative-view, uint4 and tracer tensors), torchao's training subclasses
(``convert_to_float8_training``, int8 quantized training, BitNet) and ``__torch_function__``-only
subclasses (units of measure, metadata carriers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened, protocol_calls
from torch.utils._pytree import tree_map_only

import jitcore

aten = torch.ops.aten

# --- a wrapper input that answers is_contiguous() in its __torch_dispatch__ ------------------------------
# Note [A wrapper that answers its own layout, while tracing] (jitcore/proxies/subclass.py): an input made
# with ``dispatch_sizes_strides_policy="strides"`` whose handler says False for contiguous strides took
# ``x.is_contiguous()`` from its strides (True) under jitcore, where eager asks the handler (False): the
# program took the other branch (a wrong answer).


def _answer_layout(cls: type, func: Any, args: tuple, kwargs: Any) -> Any:
    if func in (aten.is_contiguous.default, aten.is_contiguous.memory_format):
        return False  # a blocked layout: never contiguous, whatever its strides
    if func is aten.sym_stride.default:
        return tuple(args[0].inner.stride())
    unwrapped = tree_map_only(cls, lambda t: t.inner, (args, kwargs or {}))
    return tree_map_only(torch.Tensor, cls, func(*unwrapped[0], **unwrapped[1]))


class _BlockedNoProtocol(torch.Tensor):
    """A wrapper whose handler answers its strides and contiguity, without the flatten protocol
    (subclass_zoo's style)."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> _BlockedNoProtocol:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype,
                                                   dispatch_sizes_strides_policy="strides")

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        return _answer_layout(cls, func, args, kwargs)


class _Blocked(_BlockedNoProtocol):
    """The same with the flatten protocol."""

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Blocked:
        return _Blocked(inner["inner"])


def _branch_on_contiguity(x: torch.Tensor) -> torch.Tensor:
    if x.is_contiguous():
        return x.inner * 2
    return x.inner - 1


def _contiguity_read(x: torch.Tensor) -> tuple:
    return x.is_contiguous(), x.is_contiguous(memory_format=torch.contiguous_format), x.stride()


def _contiguity_after_an_op(x: torch.Tensor) -> tuple:
    y = x + 1
    return y.is_contiguous(), y.inner


_CONTIGUITY: dict[str, tuple[Callable[..., Any], type]] = {
    "branch": (_branch_on_contiguity, _Blocked),
    "branch_no_protocol": (_branch_on_contiguity, _BlockedNoProtocol),
    "read": (_contiguity_read, _Blocked),
    "read_no_protocol": (_contiguity_read, _BlockedNoProtocol),
    "after_an_op": (_contiguity_after_an_op, _Blocked),
}


@pytest.mark.parametrize("case", sorted(_CONTIGUITY))
def test_a_wrapper_input_answers_is_contiguous_through_its_dispatch(case: str) -> None:
    """Three calls with other values: eager's answers and branch, one entry, no dispatch when warm."""
    fn, cls = _CONTIGUITY[case]
    jitted = jitcore.jit(fn)
    for call in range(3):
        torch.manual_seed(call)
        inner = torch.randn(3, 4)
        expected = fn(cls(inner.clone()))
        with protocol_calls(cls) as seen:
            actual = jitted(cls(inner.clone()))
        assert_same_flattened(actual, expected, f"call {call}")
        if call == 2:
            assert seen == []
    assert jitcore.cache_misses(jitted) == 1
