"""Tensor subclasses written by others (issue 15, zoo55), eager against ``jitcore.jit`` over three calls
(outputs and arguments by ``assert_same_flattened``, what each call prints; one entry; no
``__torch_dispatch__`` frame on a warm call).

The text of a wrapper subclass made inside the program: ``print(x)``, ``f"{x}"``, ``str(x)`` of a TwoTensor
(its ``__repr__`` formats ``repr(self.a)`` and ``repr(self.b)``) refused as a tensor's text before (JC-T001,
Note [A wrapper's text made of its inner tensors' text]): every call ran eagerly, the dispatch with it. A
class whose ``__repr__`` is ``super().__repr__(tensor_contents=f"{self.elem}")`` (LoggingTensor, the
subclass_zoo's style) raised TypeError where eager printed (Note [Torch's text around a subclass's own
contents]).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree
from subclass_checks import assert_same_flattened, protocol_calls
from torch.testing._internal.logging_tensor import LoggingTensor
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


def _printed_as_eagerly(program: Callable[..., Any], make: Callable[[], tuple], classes: tuple[type, ...],
                        calls: int = 3) -> tuple[int, Any, list[str]]:
    """Run ``program`` eagerly and jitted on equal fresh arguments ``calls`` times; assert equal outputs,
    arguments and printed text per call. Returns (entries, fallback reason, warm dispatch frames)."""
    jitted = jitcore.jit(program)
    warm: list[str] = []
    for i in range(calls):
        torch.manual_seed(i)
        eager_args = make()
        torch.manual_seed(i)
        jit_args = make()
        eager_out, jit_out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(eager_out):
            expected = program(*eager_args)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(*classes) as frames, contextlib.redirect_stdout(jit_out):
            got = jitted(*jit_args)
        if i and jitcore.cache_misses(jitted) == misses:
            warm += frames
        assert jit_out.getvalue() == eager_out.getvalue(), f"call {i} printed"
        assert_same_flattened(got, expected, f"call {i} output")
        assert_same_flattened(list(jit_args), list(eager_args), f"call {i} arguments")
    return jitcore.cache_misses(jitted), jitted.fallback_reason, warm


def _two(*size: int, requires_grad: bool = False) -> TwoTensor:
    t = TwoTensor(torch.randn(*size), torch.randn(*size))
    return t.requires_grad_(requires_grad)


def _print_then_add_(x: torch.Tensor) -> torch.Tensor:
    print(x)
    x.add_(1)  # the text is of the value as the print found it
    print("after", x, sep=": ")
    return x * 2


def _in_a_loop(x: torch.Tensor) -> torch.Tensor:
    for i in range(3):
        print(f"step {i}: {x * i}")
    return x


# --- print, f-strings, str and format of a TwoTensor -------------------------------------------------------

_TWO_TEXTS: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "print": (lambda x: (print(x * 2), x + 1)[1], lambda: (_two(2),)),
    "print_between": (lambda x: (print("a"), print(x, x.sum(), sep=" | "), print("b"), x + 1)[3],
                      lambda: (_two(2, 3),)),
    "f_string": (lambda x: (print(f"x={x}!"), x + 1)[1], lambda: (_two(2),)),
    "str_returned": (lambda x: (str(x * 2), x + 1), lambda: (_two(2),)),
    "str_format": (lambda x: (print("v: {}".format(x)), x + 1)[1], lambda: (_two(2),)),  # noqa: UP032
    "print_then_add_": (_print_then_add_, lambda: (_two(3),)),
    "in_a_loop": (_in_a_loop, lambda: (_two(2),)),
    "long": (lambda x: (print(x.long()), x + 1)[1], lambda: (_two(2),)),
    "nested": (lambda x: (print(x + 1), x * 2)[1], lambda: (TwoTensor(_two(2), _two(2)),)),
    "requires_grad": (lambda x: (print(x * 2), (x * 2).sum())[1], lambda: (_two(2, requires_grad=True),)),
}


@pytest.mark.parametrize("name", sorted(_TWO_TEXTS))
def test_the_text_of_a_twotensor_made_inside_is_each_calls(name: str) -> None:
    program, make = _TWO_TEXTS[name]
    entries, fallback, warm = _printed_as_eagerly(program, make, (TwoTensor,))
    assert (entries, fallback, warm) == (1, None, [])  # before: JC-T001, an eager entry


# --- Tensor.__repr__ around a wrapper's own contents -------------------------------------------------------


class _Wrap(torch.Tensor):
    """A wrapper in the subclass_zoo's style: its text is torch's around its element's text."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> _Wrap:
        r = torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)
        r.elem = elem
        return r

    def __repr__(self) -> str:  # type: ignore[override]
        return super().__repr__(tensor_contents=f"{self.elem}")

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Wrap:
        return _Wrap(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        unwrap = lambda t: t.elem if isinstance(t, _Wrap) else t  # noqa: E731
        out = func(*pytree.tree_map(unwrap, args), **pytree.tree_map(unwrap, kwargs or {}))
        return pytree.tree_map_only(torch.Tensor, _Wrap, out)


_CONTENTS_TEXTS: dict[str, Callable[..., Any]] = {
    "print": lambda x: (print(x * 2), x + 1)[1],
    "repr_returned": lambda x: (repr(x * 2), x + 1),
    "f_string": lambda x: (print(f"<{x!r}>"), x + 1)[1],
}


@pytest.mark.parametrize("cls", [_Wrap, LoggingTensor], ids=["zoo_style", "LoggingTensor"])
@pytest.mark.parametrize("name", sorted(_CONTENTS_TEXTS))
def test_torchs_text_around_a_wrappers_own_contents(cls: type, name: str) -> None:
    program = _CONTENTS_TEXTS[name]
    entries, fallback, warm = _printed_as_eagerly(program, lambda: (cls(torch.randn(2)),), (cls,))
    assert (entries, fallback, warm) == (1, None, [])  # before: TypeError (the proxy's __repr__ took no
    # tensor_contents), or for LoggingTensor's print a JC-T001 eager entry


def test_torchs_text_around_contents_with_a_dtype_suffix_is_eagers() -> None:
    """A float64 wrapper's text ends ``, dtype=torch.float64)``, where torch breaks the line by the
    contents' length: the call runs eagerly, with eager's text (before: TypeError)."""
    program = _CONTENTS_TEXTS["print"]
    _printed_as_eagerly(program, lambda: (_Wrap(torch.randn(2, dtype=torch.float64)),), (_Wrap,))


# --- a DTensor's text, and its output's spec ---------------------------------------------------------------


@pytest.mark.parametrize("placement", ["shard", "replicate"])
def test_a_dtensors_text_and_its_outputs_spec_are_eagers(mesh: Any, placement: str) -> None:
    """``print(f"{x}")`` of a DTensor shows its local tensor, mesh and placements, made per call; the
    output's spec holds ``TensorMeta(shape=torch.Size([4]), ...)`` as eagerly (before: a tuple shape,
    Note [A DTensor spec's shape], jitcore/proxies/dtensor_unflatten.py)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    placements = [Shard(0) if placement == "shard" else Replicate()]
    make = lambda: (distribute_tensor(torch.randn(4), mesh, placements),)  # noqa: E731
    program = lambda x: (print(f"{x}"), x + 1)[1]  # noqa: E731
    assert _printed_as_eagerly(program, make, (DTensor,)) == (1, None, [])


# --- a subclass value computed from a plain leaf the program made -------------------------------------------


def _module_built_inside(weight: torch.Tensor) -> torch.Tensor:
    layer = torch.nn.Linear(3, 2)
    layer.load_state_dict({"weight": weight, "bias": torch.zeros(2)}, assign=True)
    return layer(torch.ones(1, 3))


def test_a_subclass_value_computed_from_a_plain_leaf_made_inside_is_eagers() -> None:
    """A module built inside from a TwoTensor weight (its new bias a plain Parameter): eagerly the
    output's inner tensors require no grad (the dispatch runs below autograd); the flattened computation
    computed them from the bias with autograd, and ``out.a.requires_grad`` was True. The call runs
    eagerly instead (JC-J002, Note [Subclass values that require grad], jitcore/dispatch/flatten.py)."""
    f = jitcore.jit(_module_built_inside)
    for _ in range(2):
        weight = _two(2, 3)
        got, expected = f(weight), _module_built_inside(weight)
        assert_same_flattened(got, expected, "output")  # the inner tensors' requires_grad included
        assert got.grad_fn is not None
