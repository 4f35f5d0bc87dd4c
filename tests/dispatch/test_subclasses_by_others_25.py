"""Tensor subclasses written by others (issue 15, zoo49): differential tests, eager against ``jitcore.jit``
over several calls (values, output types, inner tensors, the caller's objects afterwards, cache entries,
the subclass code a warm call runs). Sources of this round's survey: torch's test/dynamo/test_subclasses.py
(``__torch_function__``-only subclasses, ``DisableTorchFunctionSubclass``, ``_make_subclass``, overridden
``ndim``), test/test_python_dispatch.py and torch/testing/_internal/common_subclass.py
(``RedispatchTensor``, ``NonWrapperTensor``, the custom sizes and strides wrappers), and albanD/subclass_zoo
(a wrapper without the flatten protocol, progressive lowering)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened, protocol_calls
from torch.testing._internal.common_subclass import NonWrapperTensor, RedispatchTensor
from torch.utils._pytree import tree_map_only

import jitcore

# --- one container reached as state and passed as an argument ----------------------------------------
# Note [An argument reached as state first] (jitcore/jit/provenance.py) and Note [A container of state the
# call passes too] (jitcore/jit/state_reads.py): the program saw its own copy of a list or dict argument
# and the caller's object where it reached the same container through state, so what one path appended
# was not in the other (``len(log)`` gave 0 where eager gives 2: a wrong answer).


class _Held(torch.Tensor):
    """A ``__torch_function__``-only subclass that logs each call into the list it holds."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        notes = next((a.notes for a in args if isinstance(a, _Held) and hasattr(a, "notes")), None)
        if notes is not None:
            notes.append(func.__name__)
        return super().__torch_function__(func, types, args, kwargs or {})


def _held(n: int, log: list) -> _Held:
    t = torch.randn(n).as_subclass(_Held)
    t.notes = log
    return t


class _LogW(torch.Tensor):
    """A wrapper whose dispatch logs each op into a list outside its flatten protocol."""

    @staticmethod
    def __new__(cls, a: torch.Tensor, log: list) -> _LogW:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype)

    def __init__(self, a: torch.Tensor, log: list) -> None:
        self.a, self.log = a, log

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _LogW:
        return _LogW(inner["a"], [])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        log = next(a.log for a in args if isinstance(a, _LogW))
        log.append(func.__name__)
        out = func(*tree_map_only(_LogW, lambda t: t.a, args), **(kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: _LogW(t, log), out)


class _Obj:
    pass


def _measured_after_ops(x: torch.Tensor, log: list) -> tuple:
    y = (x * 3).sum()
    return y, len(log), [str(e) for e in log]


def _appended_then_measured(x: torch.Tensor, log: list) -> tuple:
    log.append("start")
    return x.relu(), len(log)


def _redispatch(n: int, log: list) -> torch.Tensor:
    return RedispatchTensor(torch.randn(n), call_log=log)


def _wrapper(n: int, log: list) -> torch.Tensor:
    return _LogW(torch.randn(n), log)


_LOGGED: dict[str, tuple[Callable[..., Any], Callable[[int, list], torch.Tensor]]] = {
    "redispatch_measured": (_measured_after_ops, _redispatch),
    "redispatch_appended": (_appended_then_measured, _redispatch),
    "torch_function_measured": (_measured_after_ops, _held),
    "torch_function_appended": (_appended_then_measured, _held),
    "wrapper_measured": (_measured_after_ops, _wrapper),
    "wrapper_appended": (_appended_then_measured, _wrapper),
}


@pytest.mark.parametrize("case", sorted(_LOGGED))
def test_a_log_a_subclass_input_holds_and_the_caller_passes_is_one_list(case: str) -> None:
    """The subclass input holds the list the caller also passes (or, on some calls, another one): the
    program reads eager's length, the lists end as eagerly, and a warm call runs no dispatch."""
    fn, make = _LOGGED[case]
    jitted = jitcore.jit(fn)
    for call, aliased in enumerate((True, True, False, True, True)):
        runs = []
        for _ in range(2):
            torch.manual_seed(call)
            held = ["first"]
            passed = held if aliased else ["other"]
            runs.append(((make(3 + call % 2, held), passed), held))
        (eager_args, eager_log), (jit_args, jit_log) = runs
        expected = fn(*eager_args)
        with protocol_calls(_LogW) as seen:
            actual = jitted(*jit_args)
        assert jit_log == eager_log and jit_args[1] == eager_args[1], (call, jit_log, eager_log)
        assert_same_flattened(list(actual), list(expected), f"call {call} output")  # (this logs too)
        assert (jit_args[1] is jit_log) == aliased
        if call == 4:
            assert seen == []
    assert jitcore.cache_misses(jitted) <= 4


def _attribute_appended(o: _Obj, b: list) -> int:
    o.c.append(1)
    return len(b)


def _attribute_stored_into(o: _Obj, b: dict) -> tuple:
    o.c["k"] = 2
    return len(b), sorted(b)


def _attribute_incremented(o: _Obj, b: dict) -> int:
    o.c["n"] += 1
    return b["n"]


def _attribute_keyed_later(o: _Obj, b: dict) -> int:
    key = "n"
    o.c[key] = o.c.get(key, 0) + 5
    return b["n"]


def _one_list() -> tuple:
    o = _Obj()
    o.c = []
    return o, o.c


def _one_dict() -> tuple:
    o = _Obj()
    o.c = {"n": 0}
    return o, o.c


_STATE_THEN_ARGUMENT: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "appended": (_attribute_appended, _one_list),
    "stored_into": (_attribute_stored_into, _one_dict),
    "incremented": (_attribute_incremented, _one_dict),
    "keyed_later": (_attribute_keyed_later, _one_dict),
}


@pytest.mark.parametrize("case", sorted(_STATE_THEN_ARGUMENT))
def test_a_container_written_through_an_attribute_is_the_argument_the_program_reads(case: str) -> None:
    """``o.c`` is the list or dict passed as ``b``: written through ``o.c``, read through ``b``."""
    fn, make = _STATE_THEN_ARGUMENT[case]
    jitted = jitcore.jit(fn)
    for _ in range(3):
        (eager_o, eager_b), (jit_o, jit_b) = make(), make()
        assert jitted(jit_o, jit_b) == fn(eager_o, eager_b)
        assert jit_o.c == eager_o.c and jit_o.c is jit_b
    assert jitcore.cache_misses(jitted) == 1


# --- the survey's programs that already ran as eagerly: regression tests -------------------------------


class _SigmoidToExp(torch.Tensor):
    """test_subclasses.py's style: a ``__torch_function__`` that swaps the function it is given."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is torch.Tensor.sigmoid:
            func = torch.Tensor.exp
        return super().__torch_function__(func, types, args, kwargs or {})


class _TenDims(torch.Tensor):
    """A ``__torch_function__`` answering ``ndim`` (the property's getter) itself."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is torch.Tensor.ndim.__get__:
            return 10
        return super().__torch_function__(func, types, args, kwargs or {})


class _Plain(torch.Tensor):
    pass


def _swapped_sigmoid(x: torch.Tensor) -> torch.Tensor:
    return x.as_subclass(_SigmoidToExp).sigmoid() * 2


def _branch_on_ndim(x: torch.Tensor) -> torch.Tensor:
    return x + 1 if x.as_subclass(_TenDims).ndim == 10 else x - 1


def _disabled_inside(x: torch.Tensor) -> tuple:
    with torch._C.DisableTorchFunctionSubclass():
        y = x + 1
        enabled = torch._C._is_torch_function_enabled()
    return y, x * 2, enabled


def _made_with_make_subclass(x: torch.Tensor) -> torch.Tensor:
    return torch.Tensor._make_subclass(_Plain, x * 2) + 1


def _non_wrapper_extra_state(x: torch.Tensor) -> tuple:
    y = NonWrapperTensor(x).sin() * 2
    return y, y.extra_state["last_func_called"]


def _redispatch_made_inside(x: torch.Tensor) -> tuple:
    log: list = []
    z = RedispatchTensor(x, call_log=log).exp() + 1
    return z, [name for name, _types in log]


_SURVEYED: dict[str, tuple[Callable[..., Any], Callable[[int], tuple]]] = {
    "swapped_sigmoid": (_swapped_sigmoid, lambda n: (torch.randn(n),)),
    "swapped_sigmoid_grad": (_swapped_sigmoid, lambda n: (torch.randn(n, requires_grad=True),)),
    "branch_on_ndim": (_branch_on_ndim, lambda n: (torch.randn(n),)),
    "disabled_inside": (_disabled_inside, lambda n: (torch.randn(n).as_subclass(_SigmoidToExp),)),
    "made_with_make_subclass": (_made_with_make_subclass, lambda n: (torch.randn(n),)),
    "non_wrapper_extra_state": (_non_wrapper_extra_state, lambda n: (torch.randn(n),)),
    "redispatch_made_inside": (_redispatch_made_inside, lambda n: (torch.randn(n),)),
}


@pytest.mark.parametrize("case", sorted(_SURVEYED))
def test_a_surveyed_program_runs_as_eagerly(case: str) -> None:
    """Three calls over two sizes: outputs as eagerly (types, values, what the classes record)."""
    fn, make = _SURVEYED[case]
    jitted = jitcore.jit(fn)
    for call, n in enumerate((3, 4, 5)):
        torch.manual_seed(call)
        eager_args = make(n)
        torch.manual_seed(call)
        jit_args = make(n)
        assert_same_flattened(jitted(*jit_args), fn(*eager_args), f"call {call}")
    assert jitcore.cache_misses(jitted) == 2
    assert jitted.fallback_reason is None
