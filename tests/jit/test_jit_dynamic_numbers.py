"""Dynamic numbers (``jitcore.jit(fn, dynamic_numbers=...)``): a number argument that is an input of
the computation. Differential: every call is compared with eager (values, dtypes, output types,
exceptions); cache behaviour is checked where the number stays symbolic (one entry for every value)
and where the program needs its value (specialized again: one entry per value, never a stale one)."""

from __future__ import annotations

import collections
import math
import threading

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from jitcore.langctx.scalars import takes_value
from jitcore.langctx.torch import TORCH_TABLE
from tests.jit.jit_helpers import assert_same


def same(actual, expected) -> None:
    """assert_same, with numbers compared exactly (type, sign of zero, NaN)."""
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        assert type(actual) is type(expected), (actual, expected)
        assert (math.isnan(actual) and math.isnan(expected)) or (
            actual == expected and math.copysign(1, actual) == math.copysign(1, expected)
        ), (actual, expected)
        return
    if isinstance(expected, tuple):
        assert type(actual) is tuple and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e)
        return
    assert_same(actual, expected)


def run_both(fn, jfn, *args, **kwargs):
    try:
        expected = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the jitted call must raise the same
        with pytest.raises(type(exc)):
            jfn(*args, **kwargs)
        return None
    actual = jfn(*args, **kwargs)
    same(actual, expected)
    return actual


def scaled(x, lr):
    y = x * lr + (1 - lr) * 2
    z = torch.clamp(y, max=lr * 3, min=-abs(lr))
    return z / lr, -lr, float(lr), lr // 2, lr % 3


def test_symbolic_number_is_one_entry_for_every_value():
    jf = jitcore.jit(scaled, dynamic_numbers=("lr",))
    x = torch.randn(4, 5)
    for lr in (0.5, -0.25, 2.0, 1e-3, 7.0, -0.0):
        run_both(scaled, jf, x, lr)
    assert jitcore.cache_misses(jf) == 1
    trace = str(jitcore.last_traces(jf)[0])
    assert "def computation(x, lr)" in trace and "operator.mul(lr, 3)" in trace
    prologue = str(jitcore.last_prologue_traces(jf)[0])
    assert "!= 0.5" not in prologue  # guarded by type only


def test_type_is_guarded_int_and_float_are_two_entries():
    jf = jitcore.jit(scaled, dynamic_numbers=("lr",))
    x = torch.arange(6).reshape(2, 3)  # an int tensor: int * int stays int, int * float is float
    for lr in (3, 0.5, 5, 2.5, -4):
        run_both(scaled, jf, x, lr)
    assert jitcore.cache_misses(jf) == 2


@settings(max_examples=60, deadline=None)
@given(lr=st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-10**6, 10**6)))
def test_hypothesis_values_match_eager(lr):
    x = torch.linspace(-3, 3, 7)
    run_both(scaled, _HYPOTHESIS_JF, x, lr)


_HYPOTHESIS_JF = jitcore.jit(scaled, dynamic_numbers=("lr",))


def test_control_flow_guards_the_branch_not_the_value():
    """Note [Predicate guards]: ``if t > 0`` guards the outcome; ``t`` stays an input of the trace."""
    def f(x, t):
        if t > 0:
            return x * t
        return x - t

    jf = jitcore.jit(f, dynamic_numbers=("t",))
    x = torch.randn(3)
    for t in (1.0, -1.0, 2.0, 1.0, -1.0, 0.0, 5.5):
        run_both(f, jf, x, t)
    assert jitcore.cache_misses(jf) == 2  # t > 0 and t <= 0
    assert "(args[1] > 0) is false" in [g.describe() for g in jitcore.last_prologue_traces(jf)[-1].guards]


def test_membership_of_a_dynamic_number_is_a_predicate():
    """``i in milestones`` (a Counter, a set, a tuple, a range) hashes or compares the number: it is
    recorded as ``operator.contains`` of the container's constants and guarded by its outcome, so only
    the values that take another branch (and need ``i`` itself: ``milestones[i]``) make entries."""
    milestones = collections.Counter([2, 5, 5])

    def f(x, i):
        if i in milestones:
            return x * milestones[i]
        if i not in {7, 8.0}:
            return x + 1 if i in range(10, 20, 3) else x - 1
        return x / 2

    jf = jitcore.jit(f, dynamic_numbers=("i",))
    x = torch.randn(3)
    for i in (0, 1, 3, 2, 4, 6, 5, 7, 8, 8.0, 9, 10, 11, 13, 19, 2, 5, 0):
        run_both(f, jf, x, i)
    # outcomes: not in any (0,1,3,4,6,9,11), in the range (10,13,19), in the set (7,8), milestones
    # 2 and 5 (each pinned by milestones[i]), and the float 8.0: its own type
    assert jitcore.cache_misses(jf) == 6
    guards = [g.describe() for g in jitcore.last_prologue_traces(jf)[-1].guards]  # i in the range
    assert "(args[1] in range(10, 20, 3)) is true" in guards, guards
    # the Counter's keys are guarded (it is walked item by item: Note [Counters read natively])
    assert any(g.endswith("has the members frozenset({2, 5})") or g.endswith("has keys [2, 5]")
               for g in guards), guards
    del milestones[5]  # the same Counter, the same length, other keys: the cached entries must not answer
    milestones[11] = 3
    for i in (11, 5, 4):
        run_both(f, jf, x, i)


def test_membership_in_what_is_not_constants_is_pythons():
    """A container of other objects (the program's own numbers, tensors as keys) answers ``in`` as
    Python does; a container with a Python ``__contains__`` runs it."""
    class Evens:
        def __contains__(self, n):
            return n % 2 == 0

    def f(x, i, j):
        if i in [j, 3] or i in Evens():
            return x * 2
        return x

    jf = jitcore.jit(f, dynamic_numbers=("i", "j"))
    x = torch.randn(2)
    for i, j in ((1, 1), (2, 5), (3, 0), (5, 7), (4, 4)):
        run_both(f, jf, x, i, j)


def test_predicates_over_several_numbers_and_arithmetic():
    def f(x, i, n):
        if (i + 1) % n == 0 and not i < 2:
            return x * i
        while i < n:
            x = x + 1
            i = i + 1
        return x

    jf = jitcore.jit(f, dynamic_numbers=("i", "n"))
    x = torch.randn(3)
    for i, n in ((0, 3), (2, 3), (5, 3), (1, 3), (5, 2), (0, 0)):
        run_both(f, jf, x, i, n)


def test_long_predicates_specialize_instead():
    """``while n > 0: n -= 1`` makes its k-th test k operations deep and a loop many tests: past a
    pass's budget (Note [Predicate guards]) the number is pinned by value, one cheap guard."""
    def countdown(x, n):
        while n > 0:
            x = x + 1
            n -= 1
        return x

    jf = jitcore.jit(countdown, dynamic_numbers=("n",))
    x = torch.zeros(2)
    run_both(countdown, jf, x, 40)
    guards = jitcore.last_prologue_traces(jf)[-1].guards
    assert sum(g.kind == "predicate" for g in guards) <= 16
    assert any(g.kind == "value" and g.expected == 40 for g in guards)
    for n in (40, 3, 40, 3):
        run_both(countdown, jf, x, n)
    assert jitcore.cache_misses(jf) == 2


def test_predicate_that_raises_is_traced_again_and_raises_as_eagerly():
    def f(x, i, n):
        return x * 2 if i % n else x

    jf = jitcore.jit(f, dynamic_numbers=("i", "n"))
    x = torch.randn(3)
    run_both(f, jf, x, 3, 2)
    with pytest.raises(ZeroDivisionError):
        f(x, 3, 0)
    with pytest.raises(ZeroDivisionError):
        jf(x, 3, 0)


def test_derived_number_in_control_flow_guards_the_branch():
    def f(x, t):
        s = t * 2 - 1
        return x + (s if s > 0 else -s)

    jf = jitcore.jit(f, dynamic_numbers=("t",))
    x = torch.randn(3)
    for t in (2.0, 0.0, 2.0, 3.0):
        run_both(f, jf, x, t)
    assert jitcore.cache_misses(jf) == 2  # ((t * 2) - 1) > 0, and not


# (program, its entries for n = 2, 3, 2, 1, 3): a size, a dimension or a count torch takes as an int is a
# symbol of the ShapeEnv (Note [Dynamic numbers as sizes], jit/number_sizes.py), guarded by what torch
# assumed (``24 % n == 0`` for the view, ``n % 2 == 1`` for the dim: two entries); what Python needs
# as an int (``range(n)``, an index, ``F.pad``'s list, ``linspace``'s steps) is one entry per value.
SIZE_PROGRAMS = [
    (lambda x, n: x.view(n, -1), 2),
    (lambda x, n: torch.arange(n) * x.sum(), 2),
    (lambda x, n: torch.linspace(0, 1, n) + x.mean(), 3),
    (lambda x, n: x[n], 3),
    (lambda x, n: x.sum(dim=n % 2), 2),
    (lambda x, n: sum(x[i] for i in range(n)), 3),
    (lambda x, n: torch.full((n, 2), 1.5), 1),
    (lambda x, n: F.pad(x, (n, n)), 1),  # its Python kernel takes symbolic pads
    (lambda x, n: x.repeat(n, 1), 1),
    (lambda x, n: torch.topk(x.flatten(), n).values, 1),
]


@pytest.mark.parametrize(("program", "entries"), SIZE_PROGRAMS)
def test_shapes_and_indices_are_symbols_or_specialize(program, entries):
    jf = jitcore.jit(program, dynamic_numbers=("n",))
    x = torch.randn(4, 6)
    for n in (2, 3, 2, 1, 3):
        run_both(program, jf, x, n)
    assert jitcore.cache_misses(jf) == entries


@pytest.mark.parametrize("program", [
    lambda x, v: x * v,
    lambda x, v: v * x,
    lambda x, v: v / x,
    lambda x, v: v - x,
    lambda x, v: x ** v,
    lambda x, v: v ** x,
    lambda x, v: torch.add(x, x, alpha=v),
    lambda x, v: torch.where(x > 0, x, v),
    lambda x, v: x.masked_fill(x < 0, v),
    lambda x, v: torch.full_like(x, v),
    lambda x, v: torch.full((2, 3), v),
    lambda x, v: x.clone().mul_(v).add_(v),
    lambda x, v: F.leaky_relu(x, v),
    lambda x, v: F.elu(x, v),
    lambda x, v: F.hardtanh(x, -abs(v), abs(v) + 1),
    lambda x, v: torch.lerp(x, x * 2, v),
    lambda x, v: torch.nan_to_num(x / 0, posinf=v),
    lambda x, v: x > v,
    lambda x, v: x.eq(v),
    lambda x, v: (x.sum() + v, v),
    lambda x, v: F.layer_norm(x, (x.shape[-1],), eps=abs(v) + 1e-5),
])
def test_value_operands_stay_symbolic(program):
    jf = jitcore.jit(program, dynamic_numbers=("v",))
    x = torch.randn(3, 4)
    for v in (0.5, -1.25, 3.0, 0.1):
        run_both(program, jf, x, v)
    assert jitcore.cache_misses(jf) == 1, jitcore.last_prologue_traces(jf)[0]


def test_python_semantics_of_the_number():
    def f(x, n):
        kinds = (type(n).__name__, isinstance(n, int), isinstance(n, float), n.__class__ is type(n))
        text = f"{n:>5}|{n!r}|{str(n)}"
        table = {n: "hit"}
        return x * n, kinds, text, table.get(n), n.is_integer() if isinstance(n, float) else n.bit_length()

    for dynamic in (("n",), True):
        jf = jitcore.jit(f, dynamic_numbers=dynamic)
        x = torch.ones(2)
        for n in (3, 2.5, 3, 4.0):
            expected = f(x, n)
            actual = jf(x, n)
            same(actual[0], expected[0])
            assert actual[1:] == expected[1:]


def test_int_power_and_division_follow_python():
    def f(x, n):
        return x + n ** 2, x + 2 ** n, 7 / n, 7 // n

    jf = jitcore.jit(f, dynamic_numbers=("n",))
    x = torch.zeros(1)
    for n in (2, -1, 3, 0, 2):
        run_both(f, jf, x, n)  # n == 0 raises ZeroDivisionError in both


def test_division_by_zero_on_a_cached_call_raises_like_eager():
    def f(x, d):
        return x * (1.0 / d)

    jf = jitcore.jit(f, dynamic_numbers=("d",))
    x = torch.ones(2)
    run_both(f, jf, x, 2.0)
    with pytest.raises(ZeroDivisionError):
        f(x, 0.0)
    with pytest.raises(ZeroDivisionError):
        jf(x, 0.0)
    assert jitcore.cache_misses(jf) == 1


def test_keyword_and_module_arguments():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x, scale=1.0, *, shift):
            return self.lin(x) * scale + shift

    m = Scale()
    jm = jitcore.jit(m, dynamic_numbers=("scale", "shift"))
    x = torch.randn(2, 3)
    with torch.no_grad():
        for scale, shift in ((0.5, 1.0), (2.0, -3.0), (1.5, 0.25)):
            run_both(m, jm, x, scale, shift=shift)
            run_both(m, jm, x, scale=scale, shift=shift)
    assert jitcore.cache_misses(jm) == 2  # positional and keyword calls are two entries


def test_dispatch_table_files_dynamic_numbers_by_type():
    def f(x, lr):
        return x * lr

    jf = jitcore.jit(f, dynamic_numbers=("lr",), dynamic=False)  # an entry per shape
    shapes = [(i + 1,) for i in range(6)]  # more entries than the prologues tried in turn
    for lr in (0.5, 1.5, 2.5):
        for shape in shapes:
            run_both(f, jf, torch.ones(shape), lr)
    assert jitcore.cache_misses(jf) == len(shapes)


def _grads_match(f, jf, lr, *, shape=(3,)):
    w1 = torch.randn(*shape, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_(True)
    expected, actual = f(w1, lr), jf(w2, lr)
    torch.testing.assert_close(actual, expected)
    assert type(actual.grad_fn) is type(expected.grad_fn) or jitcore.last_backward_traces(jf)
    expected.backward()
    actual.backward()
    torch.testing.assert_close(w2.grad, w1.grad)


def test_under_autograd_a_symbolic_number_stays_an_input():
    def f(w, lr):
        return ((w * lr).relu() + lr ** 2 * w).sum()

    jf = jitcore.jit(f, dynamic_numbers=("lr",))
    for lr in (0.5, 2.0, -0.5, 0.5):
        _grads_match(f, jf, lr)
    assert jitcore.cache_misses(jf) == 1
    assert jitcore.last_backward_traces(jf) == []  # torch's autograd runs the computation's ops
    with torch.no_grad():
        jf(torch.randn(3), 0.75)
    assert jitcore.cache_misses(jf) == 2  # grad mode is guarded: its own entry


def test_under_autograd_a_branch_on_the_number_keeps_it_an_input():
    def f(w, lr):
        return (w * lr).sum() if lr > 1 else (w - lr).sum()

    jf = jitcore.jit(f, dynamic_numbers=("lr",))
    for lr in (2.0, 0.5, 3.0, 0.25):
        _grads_match(f, jf, lr)
        assert jitcore.last_backward_traces(jf) == []  # a predicate guard: lr is still an input
    assert jitcore.cache_misses(jf) == 2


def test_under_autograd_a_specialized_number_uses_the_grad_transform():
    def f(w, lr):
        return (w * lr).sum() if math.isclose(lr, 2.0) else (w - lr).sum()  # isclose needs the value

    jf = jitcore.jit(f, dynamic_numbers=("lr",))
    for lr in (2.0, 0.5, 2.0):
        _grads_match(f, jf, lr)
        assert jitcore.last_backward_traces(jf)
    assert jitcore.cache_misses(jf) == 2


def test_under_autograd_with_a_subclass_the_number_is_specialized():
    def f(w, s):
        return (w * s).sum()

    jf = jitcore.jit(f, dynamic_numbers=("s",))
    for s in (2.0, 3.0, 2.0):
        a = torch.randn(3)
        w1 = TwoTensor(a.clone(), a.clone()).requires_grad_(True)
        w2 = TwoTensor(a.clone(), a.clone()).requires_grad_(True)
        f(w1, s).backward()
        jf(w2, s).backward()
        torch.testing.assert_close(w2.grad.a, w1.grad.a)
    assert jitcore.cache_misses(jf) == 2


def test_a_number_stays_a_name_through_a_subclass_call():
    """``x * s`` on a TwoTensor reaches its ``__torch_dispatch__`` as ``aten.mul.Tensor(x, s)``, which
    takes ``s`` unchanged: the name is put back there (Note [Numbers through a subclass's dispatch],
    jitcore/langctx/scalars.py), one trace for every value (each value was an entry before)."""
    def f(x, s):
        return x * s + 1

    jf = jitcore.jit(f, dynamic_numbers=("s",))
    for s in (2.0, 3.0, 2.0):
        x = TwoTensor(torch.randn(3), torch.randn(3))
        out, ref = jf(x, s), f(x, s)
        assert type(out) is TwoTensor
        torch.testing.assert_close(out.a, ref.a)
        torch.testing.assert_close(out.b, ref.b)
    assert jitcore.cache_misses(jf) == 1


def test_other_arguments_and_bools_stay_specialized():
    def f(x, flag, n):
        return x * n if flag else x

    jf = jitcore.jit(f, dynamic_numbers=True)
    x = torch.ones(2)
    for flag, n in ((True, 2), (False, 2), (True, 3), (True, 2)):
        run_both(f, jf, x, flag, n)
    assert jitcore.cache_misses(jf) == 2  # the bool is a constant; n stays symbolic


def test_unknown_parameter_names_are_rejected():
    def f(x, lr):
        return x * lr

    with pytest.raises(ValueError, match="'rate', which is not a parameter of .*f.*its parameters: x, lr"):
        jitcore.jit(f, dynamic_numbers=("rate",))
    with pytest.raises(TypeError, match="dynamic_numbers"):
        jitcore.jit(f, dynamic_numbers=(1,))


def test_threads_with_different_numbers():
    def f(x, lr):
        return torch.sin(x) * lr - lr ** 2

    jf = jitcore.jit(f, dynamic_numbers=("lr",))
    x = torch.randn(64)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(30):
                lr = (k * 31 + i) / 7
                torch.testing.assert_close(jf(x, lr), f(x, lr))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert jitcore.cache_misses(jf) == 1


def _torch_symbol(name):
    return TORCH_TABLE.symbol(name)


def test_value_parameters_come_from_aten_schemas():
    assert takes_value(_torch_symbol("torch.mul"), 1)
    assert takes_value(_torch_symbol("torch.add"), "alpha")
    assert takes_value(_torch_symbol("torch.clamp"), "max")
    assert not takes_value(_torch_symbol("torch.Tensor.view"), 1)
    assert not takes_value(_torch_symbol("torch.arange"), 0)
    assert not takes_value(_torch_symbol("torch.sum"), "dim")
    elu = _torch_symbol("torch.nn.functional.elu")
    assert takes_value(elu, 1) and not takes_value(
        elu, 2
    )  # F.elu(x, alpha, inplace): aten's third is 'scale'
    assert takes_value(_torch_symbol("torch.nn.functional.dropout"), "p")
    assert not takes_value(_torch_symbol("torch.nn.functional.dropout"), "training")


def test_unused_arithmetic_is_not_in_the_trace():
    def f(x, t):
        unused = t * 10  # noqa: F841 - computed and dropped
        return x + t

    jf = jitcore.jit(f, dynamic_numbers=("t",))
    run_both(f, jf, torch.ones(2), 0.5)
    assert "operator.mul" not in str(jitcore.last_traces(jf)[0])


def test_errors_of_cached_calls_name_the_user_line():
    import traceback

    def f(x, d):
        scale = 1.0 / d
        return x * scale

    jf = jitcore.jit(f, dynamic_numbers=("d",))
    jf(torch.ones(2), 2.0)
    with pytest.raises(ZeroDivisionError) as info:
        jf(torch.ones(2), 0.0)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "f" and frames[-1].line == "scale = 1.0 / d"
    assert jitcore.cache_misses(jf) == 1


def test_debugger_steps_through_number_arithmetic():
    from jitcore.debug.debugger import Debugger

    def f(x, lr):
        return x * (lr * 2) + lr

    jf = jitcore.jit(f, dynamic_numbers=("lr",))
    x = torch.randn(3)
    jf(x, 0.5)
    d = Debugger(jf, (x, 0.75))
    assert set(d.values) == {"x", "lr"} and d.current.symbol.id == "operator.mul"
    d.next()
    assert d.values["n0"] == 1.5
    torch.testing.assert_close(d.run_to_end(), f(x, 0.75))


@pytest.mark.parametrize("program", [
    lambda x, n: n + "a",
    lambda x, n: n < "a",
    lambda x, n: [0] * n,
    lambda x, n: "ab"[n],
    lambda x, n: divmod(n, 3),
    lambda x, n: round(n) + math.floor(n) + math.trunc(n),
    lambda x, n: (n.real, n.imag, n.conjugate()),
    lambda x, n: pow(n, 2, 5),
    lambda x, n: sorted([n, 2, 1]),
    lambda x, n: torch.tensor([n, 1.0]) + x,
    lambda x, n: max(n, 1),
])
def test_other_python_uses_behave_as_eagerly(program):
    jf = jitcore.jit(program, dynamic_numbers=True)
    x = torch.ones(2)
    for n in (1, 3, 1, 2.5):
        run_both(program, jf, x, n)


def test_a_specialized_number_prints_as_the_constant_it_is():
    def f(x, n, lr):
        total = x[0]
        for i in range(1, n):  # range() needs the value: specialized
            total = total + x[i]
        return total * lr, n - 1

    jf = jitcore.jit(f, dynamic_numbers=("n", "lr"))
    run_both(f, jf, torch.randn(4, 6), 2, 0.5)
    trace = str(jitcore.last_traces(jf)[0])
    assert "torch.Tensor.__getitem__(x, 1)" in trace and "torch.mul(t2, lr)" in trace
    assert "operator.sub" not in trace and "return (t3, 1)" in trace  # n - 1 was folded with n
    assert '# n: "int, specialized to 2"' in trace and '# lr: "float"' in trace


def test_under_the_grad_transform_an_unused_number_is_not_guarded():
    def f(w, unused, s):
        return (w * 2).sum() if s > 0 else w.sum()  # s specialized, unused never read

    jf = jitcore.jit(f, dynamic_numbers=("unused", "s"))
    for unused in (1.0, 2.0, 3.0):
        w1 = torch.randn(3, requires_grad=True)
        w2 = w1.detach().clone().requires_grad_(True)
        f(w1, unused, 1.0).backward()
        jf(w2, unused, 1.0).backward()
        torch.testing.assert_close(w2.grad, w1.grad)
    assert jitcore.cache_misses(jf) == 1
    assert jitcore.last_backward_traces(jf)


# --- Note [Numbers that change between calls become dynamic] (jit/numbers.py) ---------------------------
def test_a_number_that_changes_between_calls_becomes_dynamic() -> None:
    """``step(x, i)`` with a new ``i`` each call: one trace with ``i`` specialized, one with it dynamic,
    then hits (before, a trace per call until the cache limit)."""

    def step(x, i, lr=0.1):
        if i % 10 == 0:
            x = x * 2
        return x * lr + i

    jf = jitcore.jit(step)
    for i in range(1, 25):
        x = torch.randn(3)
        same(jf(x, i, lr=0.1 * i), step(x, i, lr=0.1 * i))
    # i=1 (specialized), i=2 (i and lr dynamic), i=10 (the other branch of the predicate)
    assert jitcore.cache_misses(jf) == 3
    assert jitcore.cache_hits(jf) == 21


def test_a_changing_number_used_as_a_size_is_a_symbol_from_its_second_value() -> None:
    """Dynamic after the second value, and a size there: a symbol of the ShapeEnv (Note [Dynamic
    numbers as sizes]), one entry for every later value (before: one entry per value)."""

    def f(x, n):
        return x.repeat(n).sum(), torch.arange(n)

    jf = jitcore.jit(f)
    for n in (1, 2, 3, 2, 1, 3, 7):
        same(jf(torch.ones(2), n), f(torch.ones(2), n))
    assert jitcore.cache_misses(jf) == 2  # 1 (static); 2 on (n is a symbol)


def test_a_changing_number_python_needs_the_value_of_stays_correct() -> None:
    """Dynamic after the second value, but ``range(n)`` needs its value: an entry per value."""

    def f(x, n):
        return sum(x * i for i in range(n))

    jf = jitcore.jit(f)
    for n in (1, 2, 3, 2, 1, 3):
        same(jf(torch.ones(2), n), f(torch.ones(2), n))
    assert jitcore.cache_misses(jf) == 3


def test_numbers_stay_specialized_with_dynamic_false_and_bools_always() -> None:
    def f(x, k, flag):
        return x * k if flag else x - k

    static = jitcore.jit(f, dynamic=False)
    auto = jitcore.jit(f)
    for k in range(4):
        for jf in (static, auto):
            same(jf(torch.ones(2), k, k % 2 == 0), f(torch.ones(2), k, k % 2 == 0))
    assert jitcore.cache_misses(static) == 4
    assert jitcore.cache_misses(auto) == 3  # k=0; k=1 (dynamic; flag False); k=2 (flag True)


def test_a_changing_number_past_the_dispatch_table() -> None:
    """More than SCAN_LIMIT entries: the cache files calls by the number's type once it is dynamic."""

    def f(x, scale):
        return x * scale

    jf = jitcore.jit(f)
    shapes = [(2,), (3,), (4,), (5,), (6,)]
    for shape in shapes:  # five entries keyed by shape (each shape a new static entry, then symbolic)
        same(jf(torch.ones(shape), 1.0), f(torch.ones(shape), 1.0))
    misses = jitcore.cache_misses(jf)
    for i in range(10):
        for shape in shapes:
            same(jf(torch.ones(shape), 2.0 + i), f(torch.ones(shape), 2.0 + i))
    assert jitcore.cache_misses(jf) - misses <= 2


KEYED_BY_A_COMPUTED_NUMBER = {
    "set.add": lambda store, i: store.add(i % 4),
    "dict-key": lambda store, i: store.__setitem__(i % 3, "seen"),
    "in-a-tuple-key": lambda store, i: store.add((i % 2, "even")),
}


@pytest.mark.parametrize("kind", list(KEYED_BY_A_COMPUTED_NUMBER))
def test_a_computed_number_hashed_guards_its_value_not_its_inputs(kind: str) -> None:
    """Note [Hashing a computed number] (jitcore/proxies/number.py): ``seen.add(i % 4)`` hashed ``i % 4``,
    which pinned ``i`` by value: an entry per ``i`` (16, 15 and 14 misses in 24 calls). Now the guard is
    ``(i % 4) == v``: an entry per value of ``i % 4`` and per contents of the set the call finds. The
    state is compared with eager's after every call."""
    write = KEYED_BY_A_COMPUTED_NUMBER[kind]

    def make():
        store = set() if kind != "dict-key" else {}

        def f(x, i):
            write(store, i)
            return x * len(store)
        return f, store

    (f, expected_store), (g, store) = make(), make()
    jitted = jitcore.jit(g)
    for i in [*range(12), *range(12)]:
        x = torch.randn(2, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(x, i), f(x, i))
        assert store == expected_store and [type(k) for k in store] == [type(k) for k in expected_store]
    assert jitcore.cache_misses(jitted) <= {"set.add": 8, "dict-key": 6, "in-a-tuple-key": 4}[kind], \
        jitcore.miss_reasons(jitted)[-1]


class _Tags:
    tags: set = set()


INDEXED_BY_A_COMPUTED_NUMBER = {  # (program, at most this many entries over i = 0..11 twice)
    "range-into-a-class-set": (lambda x, i: (_Tags.tags.update(f"t{k}" for k in range(i % 4)), x * 2)[1], 8),
    "range-loop": (lambda x, i: sum((x * k for k in range(i % 3)), x), 4),
    "list-index": (lambda x, i: x * [5, 6, 7][i % 3], 4),
}


@pytest.mark.parametrize("kind", list(INDEXED_BY_A_COMPUTED_NUMBER))
def test_a_computed_number_as_an_index_guards_its_value_not_its_inputs(kind: str) -> None:
    """Note [Hashing a computed number] (jitcore/proxies/number.py): ``range(i % 4)`` and ``xs[i % 3]`` took
    ``__index__`` of the number, which pinned ``i`` by value: an entry per ``i`` (24 calls, 13 to 16 entries;
    /tmp/eff58-probes/genupd.py). Now the guard is ``(i % 4) == v``. Results and the class's set
    (its order too) are compared with eager's after every call."""
    program, bound = INDEXED_BY_A_COMPUTED_NUMBER[kind]

    def run(fn) -> list:
        _Tags.tags = set()
        out = []
        for i in [*range(12), *range(12)]:
            x = torch.arange(4.0) + i
            out.append((fn(x, i).tolist(), list(_Tags.tags)))
        return out

    eager = run(program)
    jitted = jitcore.jit(program)
    assert run(jitted) == eager
    assert jitcore.cache_misses(jitted) <= bound, jitcore.miss_reasons(jitted)[-1]


# Note [A tensor of a named number has no constant] (jitcore/langctx/shadows.py): the shadow of
# ``torch.tensor(s)`` kept the traced ``s`` as a constant, so ``.item()`` answered it on every later call (a
# wrong answer from the third call); ``x.new_tensor(s)`` specialized ``s``: an entry per value.
_TENSORS_OF_A_NUMBER = {
    "tensor_item": lambda x, s: x * torch.tensor(s).item(),
    "new_tensor_item": lambda x, s: x * x.new_tensor(s).item(),
    "new_tensor": lambda x, s: x * x.new_tensor(s),
    "new_tensor_dtype": lambda x, s: x * x.new_tensor(data=s, dtype=torch.float64),
}


@pytest.mark.parametrize("name", sorted(_TENSORS_OF_A_NUMBER))
def test_a_tensor_of_a_dynamic_number_has_each_calls_value(name: str) -> None:
    program = _TENSORS_OF_A_NUMBER[name]
    f = jitcore.jit(program)
    for s in (1.5, 2.5, 3.5, 4.5, 5.5):
        x = torch.randn(3)
        assert_same(f(x, s), program(x, s))
    assert jitcore.cache_misses(f) == 2  # before: new_tensor traced once per value
