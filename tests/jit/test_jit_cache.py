"""The cache never lies: every call either hits with eager's answer or misses and retraces."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jit_helpers import assert_same
from torch import nn

import jitcore

SCALE = 0.5


class Holder:
    def __init__(self) -> None:
        self.factor = 2.0
        self.mode = "add"


HOLDER = Holder()


def scaled(x, n):
    y = x * SCALE + n
    if HOLDER.mode == "add":
        return y + HOLDER.factor
    return y * HOLDER.factor


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.gain = 1.0

    def forward(self, x):
        return self.lin(x) * self.gain


def test_each_kind_of_variation_misses_and_explains() -> None:
    global SCALE
    jf = jitcore.jit(scaled)
    x = torch.randn(2, 3)
    assert_same(jf(x, 1), scaled(x, 1))
    assert_same(jf(x, 1), scaled(x, 1))
    assert jitcore.cache_hits(jf) == 1
    variations = [
        ((torch.randn(4, 3), 1), "args[0].shape[0]: expected 2, got 4"),
        ((x.double(), 1), "args[0].dtype: expected torch.float32, got torch.float64"),
        ((x.clone().requires_grad_(), 1), "requires_grad"),
        ((x, 2), "args[1]: expected 1, got 2"),
        ((x, 1.0), "args[1]: expected int 1, got float 1.0"),
        (([1, 2], 1), "args[0]: expected a Tensor, got list"),
    ]
    for args, why in variations:
        try:
            expected = scaled(*args)
        except Exception as exc:  # noqa: BLE001
            try:
                jf(*args)
            except Exception as jexc:  # noqa: BLE001
                assert type(jexc) is type(exc)
            else:
                raise AssertionError("jitted call did not raise")
        else:
            assert_same(jf(*args), expected)
        assert why in str(jitcore.miss_reasons(jf)[-1][0]), (why, jitcore.miss_reasons(jf)[-1])
    SCALE = 0.25
    try:
        assert_same(jf(x, 1), scaled(x, 1))
        assert "SCALE" in str(jitcore.miss_reasons(jf)[-1][0])
    finally:
        SCALE = 0.5
    HOLDER.factor = 3.0
    try:
        assert_same(jf(x, 1), scaled(x, 1))
    finally:
        HOLDER.factor = 2.0
    HOLDER.mode = "mul"
    try:
        assert_same(jf(x, 1), scaled(x, 1))
    finally:
        HOLDER.mode = "add"


def test_module_attribute_and_parameter_replacement() -> None:
    net = Net()
    jnet = jitcore.jit(net)
    x = torch.randn(4, 3)
    with torch.no_grad():
        assert_same(jnet(x), net(x))
        net.gain = 3.0
        assert_same(jnet(x), net(x))
        net.lin.weight = nn.Parameter(torch.randn(3, 3))
        assert_same(jnet(x), net(x))
        net.lin.weight.mul_(2)  # in-place: same object, the cached entry reads it afresh
        assert_same(jnet(x), net(x))
        net.train(False)
        assert_same(jnet(x), net(x))


def test_grad_mode_and_default_dtype_are_guarded() -> None:
    def f(x):
        return x * 2 + torch.ones(2)

    jf = jitcore.jit(f)
    x = torch.randn(2, requires_grad=True)
    assert jf(x).requires_grad
    with torch.no_grad():
        out = jf(x)
        assert not out.requires_grad
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert_same(jf(x.detach().double()), f(x.detach().double()))
    finally:
        torch.set_default_dtype(previous)


def test_signed_zero_and_nan_specializations() -> None:
    def f(x, c):
        return x * math.copysign(1.0, c) if c == c else x * 0

    jf = jitcore.jit(f)
    x = torch.ones(2)
    for c in (0.0, -0.0, float("nan"), 0.0, -0.0):
        assert_same(jf(x, c), f(x, c))
    assert jitcore.cache_misses(jf) == 3


def test_list_length_and_dict_keys_are_guarded() -> None:
    def f(xs, d):
        return sum(xs) + sum(d.values())

    jf = jitcore.jit(f)
    a = torch.ones(2)
    for xs, d in [([a, a], {"p": a}), ([a, a, a], {"p": a}), ([a, a], {"p": a, "q": a}), ([a, a], {"q": a})]:
        assert_same(jf(xs, d), f(xs, d))
    assert jitcore.cache_misses(jf) == 4


def test_mutable_default_argument_is_guarded() -> None:
    def f(x, scales=[1.0, 2.0]):  # noqa: B006 - the point of the test
        return sum(x * s for s in scales)

    jf = jitcore.jit(f)
    x = torch.ones(2)
    assert_same(jf(x), f(x))
    f.__defaults__[0].append(3.0)
    assert_same(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 2


def test_a_default_tuple_replaced_by_another_is_checked_by_value() -> None:
    """Note [The traced literal itself] (prologue/guards.py): the tuple read while tracing passes by
    identity; an equal copy still hits, a tuple of other element types or another sign of zero misses."""
    def f(x, dims=(1, 2.0), shift=((0.0, 1), None)):
        return x * dims[0] + dims[1] + shift[0][0]

    jf = jitcore.jit(f)
    x = torch.ones(2)
    assert_same(jf(x), f(x))
    assert_same(jf(x), f(x))
    f.__defaults__ = ((1, 2.0), ((0.0, 1), None))  # equal, not the same objects
    assert_same(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 1
    f.__defaults__ = ((1.0, 2.0), ((0.0, 1), None))  # == the traced tuple, another element type
    assert_same(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 2
    f.__defaults__ = ((1, 2.0), ((-0.0, 1), None))
    assert_same(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 3


def test_closure_cell_is_guarded() -> None:
    factor = 2.0

    def f(x):
        return x * factor

    jf = jitcore.jit(f)
    x = torch.ones(2)
    assert_same(jf(x), f(x))
    factor = 5.0  # noqa: F841 - read through the closure
    assert_same(jf(x), f(x))


class Registry(dict):
    """A dict of the program's state reached by identity (not a plain dict: guarded by its length)."""


REGISTRY = Registry(relu=1, tanh=2)


def test_membership_tests_of_state_are_guarded() -> None:
    """``"gelu" in REGISTRY`` on state guarded by identity and length: after the keys change (same
    object, same length), a cached call must not answer with the old membership."""
    def f(x):
        if "gelu" in REGISTRY:
            return x * 2
        return x + 1 if "relu" in REGISTRY else x - 1

    jf = jitcore.jit(f)
    x = torch.ones(2)
    assert_same(jf(x), f(x))
    del REGISTRY["tanh"]
    REGISTRY["gelu"] = 3
    assert_same(jf(x), f(x))
    del REGISTRY["relu"], REGISTRY["gelu"]
    REGISTRY["sigmoid"], REGISTRY["tanh"] = 4, 5
    assert_same(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 3


_CALL = st.one_of(
    st.tuples(st.just("shape"), st.sampled_from([(2,), (3,), (2, 2)])),
    st.tuples(st.just("dtype"), st.sampled_from([torch.float32, torch.float64])),
    st.tuples(st.just("grad"), st.booleans()),
    st.tuples(st.just("number"), st.sampled_from([1, 2, 1.0, -0.0, 0.0])),
    st.tuples(st.just("global"), st.sampled_from([0.5, 0.25, -0.0])),
    st.tuples(st.just("holder"), st.sampled_from([2.0, 3.0])),
    st.tuples(st.just("mode"), st.sampled_from(["add", "mul"])),
    st.tuples(st.just("list"), st.integers(1, 3)),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(_CALL, min_size=1, max_size=12))
def test_call_sequences_never_give_a_wrong_answer(changes) -> None:
    global SCALE
    jf = jitcore.jit(scaled)
    jl = jitcore.jit(lambda xs: sum(x * 2 for x in xs))
    state = {"shape": (2,), "dtype": torch.float32, "grad": False, "number": 1, "list": 2}
    saved = (SCALE, HOLDER.factor, HOLDER.mode)
    try:
        for kind, value in changes:
            if kind == "global":
                SCALE = value
            elif kind == "holder":
                HOLDER.factor = value
            elif kind == "mode":
                HOLDER.mode = value
            else:
                state[kind] = value
            x = torch.arange(math.prod(state["shape"]), dtype=state["dtype"]).reshape(state["shape"])
            x.requires_grad_(state["grad"])
            assert_same(jf(x, state["number"]), scaled(x, state["number"]))
            xs = [x.detach() + i for i in range(state["list"])]
            assert_same(jl(xs), sum(v * 2 for v in xs))
    finally:
        SCALE, HOLDER.factor, HOLDER.mode = saved


_CONJ_PROGRAMS = {
    "is_conj": lambda x: (x * 2, x.is_conj(), x.is_neg()),
    "conj of the input": lambda x: x.conj().is_conj(),
    "branch on the bit": lambda x: x.resolve_conj() * 2 if x.is_conj() else x * 3,
    "imag's negative bit": lambda x: x.imag.is_neg(),
}


def _conj_inputs() -> list[torch.Tensor]:
    x = torch.randn(3, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    return [x, x.conj(), x, x.conj(), x.conj().imag, x.imag]


@pytest.mark.parametrize("name", sorted(_CONJ_PROGRAMS))
def test_a_conjugate_or_negative_view_is_not_the_cached_entrys_tensor(name: str) -> None:
    """A conjugate view (``x.conj()``) or a negative one (``x.conj().imag``) shares memory with ``x``
    through a bit; a cached entry traced on a tensor without the bit answered its reads of the bit
    (``is_conj()``, ``conj()``'s result, a branch on it) for a tensor with it (Note [The conjugate and
    negative bits], jitcore/prologue/guards.py)."""
    fn = _CONJ_PROGRAMS[name]
    jitted = jitcore.jit(fn)
    for i, x in enumerate(_conj_inputs()):
        try:
            expected = fn(x)
        except RuntimeError as err:  # .imag of a real tensor
            with pytest.raises(type(err)):
                jitted(x)
            continue
        actual = jitted(x)
        flat_e, flat_a = torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(actual)
        for e, a in zip(flat_e, flat_a, strict=True):
            if isinstance(e, torch.Tensor):
                assert (e.is_conj(), e.is_neg()) == (a.is_conj(), a.is_neg()), (name, i)
                torch.testing.assert_close(a.resolve_conj().resolve_neg(), e.resolve_conj().resolve_neg())
            else:
                assert type(e) is type(a) and e == a, (name, i, expected, actual)
