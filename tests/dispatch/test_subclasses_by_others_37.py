"""Tensor subclasses written by others (issue 15, zoo59), eager against ``jitcore.jit`` over three or more
calls (outputs and arguments by ``assert_same_flattened``; no eager entry; the entries expected).

A wrapper keeping a literal attribute outside its flatten protocol (a flag or factor the user sets on the
value after making it, as bitsandbytes-, Transformer-Engine- and torchao-style weights do) next to a ctx
holding an equal literal: the constants of one ``__new__`` are one object (``{"scale": 1.0}`` and
``self.alpha = 1.0``), as are small ints, ``True``/``False`` and short strings, so the attribute was taken
for the ctx's and left unchecked (Note [An attribute the rebuilt value happens to hold],
jitcore/jit/tensor_binding.py): a call after the user changed it ran the entry traced with the default.

A wrapper holding a tensor outside its flatten protocol that the caller sets (an adapter's delta on a frozen
weight) or that its ``__torch_dispatch__`` memoizes on the instance (a dequantized copy): the rebuilt value
held ``__init__``'s None there, so the trace computed without it (Note [A tensor attribute the rebuilt value
lacks], jitcore/jit/tensor_binding.py).

A wrapper whose ``__torch_dispatch__`` reads objects outside its flatten protocol that ``__init__`` sets to
defaults and the caller replaces (an enum mode, a config dataclass, a pair of tensors, a function): the
rebuilt value held the defaults, unchecked (Note [An object attribute the rebuilt value does not derive],
jitcore/jit/tensor_binding.py).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened, protocol_calls
from torch.utils._pytree import tree_map_only

import jitcore


class _Tagged(torch.Tensor):
    """A wrapper whose ctx is a dict of literals made in ``__new__``; ``alpha``, ``transposed`` and
    ``shift`` are set there to literals equal to the ctx's and changed by the caller afterwards."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, meta: dict | None = None) -> _Tagged:
        out = torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype, strides=data.stride())
        out.data_ = data
        out.meta = {"scale": 1.0, "packed": False, "bits": 4} if meta is None else meta
        out.alpha = 1.0
        out.transposed = False
        out.shift = 4
        return out

    def __tensor_flatten__(self) -> tuple[list[str], dict]:
        return ["data_"], self.meta

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, meta: dict, size: Any, stride: Any) -> _Tagged:
        return cls(inner["data_"], meta)

    __torch_function__ = torch._C._disabled_torch_function_impl

    def value(self) -> torch.Tensor:
        data = self.data_.t() if self.transposed else self.data_
        return data * self.meta["scale"] * self.alpha + self.shift

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*tree_map_only(cls, cls.value, args), **(kwargs or {}))


SETTINGS = {
    "a float equal to a ctx float": ("alpha", (1.0, 3.0, 1.0, 0.5)),
    "a bool equal to a ctx bool": ("transposed", (False, True, False)),
    "a small int equal to a ctx int": ("shift", (4, 0, 4, 2)),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_an_attribute_equal_to_a_ctx_literal_is_checked(name: str) -> None:
    """``x + 1`` over a 3 x 3 ``_Tagged`` whose attribute the caller sets before each call: eager's values
    on every call (before: the calls after the first change returned the first call's answer)."""
    attribute, settings = SETTINGS[name]

    def program(x: _Tagged) -> torch.Tensor:
        return x + 1

    jitted = jitcore.jit(program)
    for i, setting in enumerate(settings):
        torch.manual_seed(i)
        data = torch.randn(3, 3)
        eager_x, jit_x = _Tagged(data.clone()), _Tagged(data.clone())
        for x in (eager_x, jit_x):
            setattr(x, attribute, setting)
        assert_same_flattened(jitted(jit_x), program(eager_x), f"call {i} ({attribute} = {setting})")
    assert jitted.fallback_reason is None
    assert jitcore.cache_misses(jitted) <= len(set(settings))


class _Adapted(torch.Tensor):
    """A frozen weight the caller may give a ``delta`` (None from ``__init__``), added when it is used."""

    @staticmethod
    def __new__(cls, weight: torch.Tensor) -> _Adapted:
        out = torch.Tensor._make_wrapper_subclass(cls, weight.shape, dtype=weight.dtype,
                                                  strides=weight.stride())
        out.weight = weight
        out.delta = None
        return out

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["weight"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Adapted:
        return _Adapted(inner["weight"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    def value(self) -> torch.Tensor:
        return self.weight if self.delta is None else self.weight + self.delta

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*tree_map_only(cls, cls.value, args), **(kwargs or {}))


def test_a_tensor_the_caller_sets_outside_the_flatten_protocol_is_an_input() -> None:
    """``F.linear(x, w).relu()`` over an ``_Adapted`` weight, without a delta, then with a fresh delta on
    each call: eager's values, two entries, no ``__torch_dispatch__`` on a cached call (before: the calls
    with a delta returned the weight's answer without it)."""

    def program(w: _Adapted, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, w).relu()

    jitted = jitcore.jit(program)
    warm: list[str] = []
    for i in range(4):
        torch.manual_seed(i)
        weight, delta, x = torch.randn(4, 3), torch.randn(4, 3), torch.randn(2, 3)
        eager_w, jit_w = _Adapted(weight), _Adapted(weight.clone())
        if i:
            eager_w.delta, jit_w.delta = delta, delta.clone()
        expected = program(eager_w, x)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(_Adapted) as frames:
            actual = jitted(jit_w, x)
        warm += frames if jitcore.cache_misses(jitted) == misses else []
        assert_same_flattened(actual, expected, f"call {i}")
    assert jitted.fallback_reason is None
    assert jitcore.cache_misses(jitted) == 2
    assert warm == []


class _Memoized(torch.Tensor):
    """An int8 weight whose ``__torch_dispatch__`` dequantizes it once and keeps the copy on the instance."""

    @staticmethod
    def __new__(cls, q: torch.Tensor, scale: torch.Tensor) -> _Memoized:
        out = torch.Tensor._make_wrapper_subclass(cls, q.shape, dtype=torch.float32, strides=q.stride())
        out.q, out.scale, out.dequantized = q, scale, None
        return out

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["q", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Memoized:
        return _Memoized(inner["q"], inner["scale"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    def value(self) -> torch.Tensor:
        if self.dequantized is None:
            self.dequantized = self.q.float() * self.scale
        return self.dequantized

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*tree_map_only(cls, cls.value, args), **(kwargs or {}))


def test_a_copy_the_class_memoizes_on_the_instance_is_used_as_eagerly() -> None:
    """One ``_Memoized`` weight used by three calls, its scale doubled in place between them: eagerly the
    first call's copy answers every later call; jitted the same, and the caller's weight holds the copy
    after each call (before: the later calls dequantized again with the doubled scale)."""

    def program(w: _Memoized, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, w)

    torch.manual_seed(0)
    q, scale = torch.randint(-8, 8, (4, 3), dtype=torch.int8), torch.tensor(0.5)
    eager_w, jit_w = _Memoized(q, scale), _Memoized(q.clone(), scale.clone())
    jitted = jitcore.jit(program)
    for i in range(3):
        x = torch.randn(2, 3)
        assert_same_flattened(jitted(jit_w, x), program(eager_w, x), f"call {i}")
        assert_same_flattened(jit_w.dequantized, eager_w.dequantized, f"call {i} copy")
        with torch.no_grad():
            eager_w.scale.mul_(2)
            jit_w.scale.mul_(2)
    assert jitted.fallback_reason is None


class _Rounding(enum.Enum):
    NEAREST = 1
    DOUBLE = 2


@dataclasses.dataclass(frozen=True)
class _Config:
    gain: float = 1.0


class _Configured(torch.Tensor):
    """A wrapper whose ``__torch_dispatch__`` reads a mode, a config, an optional low-rank pair and an
    optional function, all set by ``__init__`` to defaults outside the flatten protocol."""

    @staticmethod
    def __new__(cls, data: torch.Tensor) -> _Configured:
        out = torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype, strides=data.stride())
        out.data_ = data
        out.rounding, out.config, out.low_rank, out.post = _Rounding.NEAREST, _Config(), None, None
        return out

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["data_"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Configured:
        return _Configured(inner["data_"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    def value(self) -> torch.Tensor:
        out = self.data_ * self.config.gain * (2 if self.rounding is _Rounding.DOUBLE else 1)
        if self.low_rank is not None:
            out = out + self.low_rank[0] @ self.low_rank[1]
        return out if self.post is None else self.post(out)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*tree_map_only(cls, cls.value, args), **(kwargs or {}))


def _low_rank(w: _Configured) -> None:
    w.low_rank = (torch.ones(4, 2), torch.full((2, 3), 0.5))


SETTERS: dict[str, Callable[[_Configured], None]] = {
    "an enum member": lambda w: setattr(w, "rounding", _Rounding.DOUBLE),
    "a frozen dataclass": lambda w: setattr(w, "config", _Config(3.0)),
    "a pair of tensors": _low_rank,
    "a function": lambda w: setattr(w, "post", torch.tanh),
}


@pytest.mark.parametrize("name", sorted(SETTERS))
def test_an_object_the_caller_sets_outside_the_flatten_protocol_is_checked(name: str) -> None:
    """``F.linear(x, w)`` over a fresh ``_Configured`` weight per call, its defaults kept on the first call
    and replaced on the next three: eager's values, two entries, no ``__torch_dispatch__`` on a cached
    call (before: the calls after the first returned the defaults' answer)."""

    def program(w: _Configured, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, w)

    jitted = jitcore.jit(program)
    warm: list[str] = []
    for i in range(4):
        torch.manual_seed(i)
        weight, x = torch.randn(4, 3), torch.randn(2, 3)
        eager_w, jit_w = _Configured(weight), _Configured(weight.clone())
        if i:
            SETTERS[name](eager_w)
            SETTERS[name](jit_w)
        expected = program(eager_w, x)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(_Configured) as frames:
            actual = jitted(jit_w, x)
        warm += frames if jitcore.cache_misses(jitted) == misses else []
        assert_same_flattened(actual, expected, f"call {i}")
    assert jitted.fallback_reason is None
    assert jitcore.cache_misses(jitted) == 2
    assert warm == []


def test_fresh_default_configs_share_one_entry() -> None:
    """``F.linear(x, w)`` over a fresh ``_Configured`` weight per call, each with its own default
    ``_Config()``: one entry (the config is checked by what is read from it, not by identity). A control
    for the Note: it passed before too."""

    def program(w: _Configured, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, w)

    jitted = jitcore.jit(program)
    for i in range(3):
        torch.manual_seed(i)
        weight, x = torch.randn(4, 3), torch.randn(2, 3)
        expected = program(_Configured(weight), x)
        assert_same_flattened(jitted(_Configured(weight.clone()), x), expected, f"call {i}")
    assert jitcore.cache_misses(jitted) == 1


class _Moded(torch.Tensor):
    """A wrapper whose ``__torch_dispatch__`` scales by 3 where an argument's mode is ``B`` and gives every
    result mode ``B``; the mode is outside the flatten protocol (``__tensor_unflatten__`` gives ``A``)."""

    @staticmethod
    def __new__(cls, d: torch.Tensor, mode: _Rounding = None) -> _Moded:  # type: ignore[assignment]
        out = torch.Tensor._make_wrapper_subclass(cls, d.shape, dtype=d.dtype, strides=d.stride(),
                                                  requires_grad=d.requires_grad)
        out.d, out.mode = d, _Rounding.NEAREST if mode is None else mode
        return out

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["d"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Moded:
        return _Moded(inner["d"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        doubled = any(isinstance(a, cls) and a.mode is _Rounding.DOUBLE for a in args)
        out = func(*tree_map_only(cls, lambda t: t.d, args), **(kwargs or {}))
        if not isinstance(out, torch.Tensor) or func is torch.ops.aten.detach.default:
            return out
        return cls(out * 3 if doubled and out.is_floating_point() else out, _Rounding.DOUBLE)


def test_an_enum_member_the_dispatch_sets_on_an_output_is_kept() -> None:
    """Note [An output's attribute outside its flatten protocol] (jitcore/dispatch/flatten.py): the
    outputs' mode (an enum member the dispatch sets) is eager's, and so is the gradient, whose ops read
    it. Before, the rebuilt outputs held ``__tensor_unflatten__``'s default and the grad transform's
    replay computed with it: a gradient 3x smaller than eager's (648 against 1944)."""

    def program(x: _Moded) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        return y, y * 2

    jitted = jitcore.jit(program)
    for i, rows in enumerate((2, 3, 2)):
        seen = []
        for fn in (program, jitted):
            x = _Moded(torch.ones(rows, 3)).requires_grad_()
            y, z = fn(x)
            z.sum().backward()
            seen.append((y, z, x.grad))
        assert [(y.mode, z.mode) for y, z, _g in seen] == [(_Rounding.DOUBLE, _Rounding.DOUBLE)] * 2, i
        assert_same_flattened(seen[1], seen[0], f"call {i}")
    assert jitted.fallback_reason is None
