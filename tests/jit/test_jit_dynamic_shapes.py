"""Dynamic shapes (``jitcore.jit(fn, dynamic=None|True|False)``, ``jitcore.mark_dynamic``).

Differential: every call is compared with eager (values, dtypes, exceptions). Cache behaviour is
checked by counting traces: a dimension seen with two sizes is traced once more symbolic and then
needs no trace per size; sizes 0 and 1 are specialized; a relation between inputs, and a size Python
code compared, are guarded, so that a call where they differ traces again instead of reusing a trace
that does not hold for it.
"""

from __future__ import annotations

import logging
import random
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from tests.jit.test_jit_dynamic_numbers import run_both  # eager vs jitted: values, dtypes, exceptions

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_module_llama import Decoder  # noqa: E402


def attention_like(x, w):
    """Sizes flow into view/reshape/expand, arange and zeros: all must follow the call's sizes."""
    b, s, d = x.shape
    h = (x @ w).view(b, s, 2, d // 2).transpose(1, 2)
    scores = h @ h.transpose(-1, -2) / (d // 2) ** 0.5
    mask = torch.arange(s)[None, :] > torch.arange(s)[:, None]
    scores = scores.masked_fill(mask, float("-inf")).softmax(-1)
    out = (scores @ h).transpose(1, 2).reshape(b, s, d)
    return out + torch.zeros(x.shape) + torch.ones(b, s, 1).expand(b, s, d)


def test_sequence_lengths_1_to_64_trace_twice():
    jf = jitcore.jit(attention_like)
    w = torch.randn(8, 8)
    for s in range(1, 65):
        run_both(attention_like, jf, torch.randn(2, s, 8), w)
    # 1 (static), then 2 differs from 1: one trace with the sequence length symbolic (s >= 2)
    assert jitcore.cache_misses(jf) == 2
    assert "s0" in str(jitcore.last_traces(jf)[-1])


def test_batch_sizes_1_to_8_and_lengths_1_to_64():
    jf = jitcore.jit(attention_like)
    w = torch.randn(8, 8)
    for b in range(1, 9):
        for s in range(1, 65, 7):
            run_both(attention_like, jf, torch.randn(b, s, 8), w)
    # (1, 1) static; (1, s>=2) length symbolic; (2, 1) batch symbolic with the length 1
    # specialized; (2, s>=2) both symbolic: every other call hits one of these four
    assert jitcore.cache_misses(jf) == 4
    rng = random.Random(0)
    for _ in range(20):
        run_both(attention_like, jf, torch.randn(rng.randint(2, 8), rng.randint(2, 64), 8), w)
    assert jitcore.cache_misses(jf) == 4


def test_size_one_is_specialized():
    def f(x):
        return x.sum(1, keepdim=True).expand(x.shape) * x.shape[1]

    jf = jitcore.jit(f, dynamic=True)
    for s in (3, 4, 5):
        run_both(f, jf, torch.randn(2, s))
    assert jitcore.cache_misses(jf) == 1
    run_both(f, jf, torch.randn(2, 1))  # 1 is not a value of s0 (s0 >= 2): a new, specialized entry
    assert jitcore.cache_misses(jf) == 2
    assert any("2 <= args[0].shape[1]" in r.check for r in jitcore.miss_reasons(jf)[-1])
    run_both(f, jf, torch.randn(2, 6))
    assert jitcore.cache_misses(jf) == 2


def test_relation_between_inputs_is_guarded():
    def f(x, y):
        return (x + y).view(x.shape[0] * 4)

    jf = jitcore.jit(f, dynamic=True)
    run_both(f, jf, torch.randn(5, 4), torch.randn(5, 4))
    run_both(f, jf, torch.randn(7, 4), torch.randn(7, 4))
    assert jitcore.cache_misses(jf) == 1
    prologue = str(jitcore.last_prologue_traces(jf)[0])
    assert re.search(r"if not \(v\d+\.shape\[0\] == v\d+\.shape\[0\]\): return None", prologue), prologue
    run_both(f, jf, torch.randn(7, 4), torch.randn(6, 4))  # eager raises: so must the call
    run_both(f, jf, torch.randn(6, 4), torch.randn(1, 4))  # broadcasts: traced again, not reused
    assert jitcore.cache_misses(jf) == 3


def test_python_reads_of_sizes_are_guarded():
    def f(x):
        if x.shape[1] > 4:
            return x * 2
        return x - 1

    jf = jitcore.jit(f, dynamic=True)
    for s in range(2, 12):
        run_both(f, jf, torch.randn(3, s))
    assert jitcore.cache_misses(jf) == 2  # one entry for s > 4, one for s <= 4


def test_sizes_used_as_python_ints_are_specialized():
    def f(x):
        total = x[:, 0]
        for i in range(1, x.shape[1]):  # range() needs an int: the size is guarded to its value
            total = total + x[:, i] * i
        return total, x.view(-1).shape[0] // 2

    jf = jitcore.jit(f, dynamic=True)
    for s in (2, 3, 3, 4):
        run_both(f, jf, torch.randn(5, s))
    assert jitcore.cache_misses(jf) == 3


_SIZE_TEXTS = {
    "f-string": lambda x, n: f"{n}",
    "f-string spec": lambda x, n: f"{n:>4}",
    "f-string repr": lambda x, n: f"{n!r}",
    "f-string size": lambda x, n: f"{x.shape}",
    "str": lambda x, n: str(n),
    "repr size": lambda x, n: repr(x.shape),
    "percent": lambda x, n: "%s/%d" % (n, n),
    "percent dict": lambda x, n: "%(k)s" % {"k": n},
    "str.format": lambda x, n: "{}".format(n),  # noqa: UP032 - str.format itself is tested
    "format": lambda x, n: format(n, "03d"),
    "tuple": lambda x, n: f"{(n, 2)}",
}


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("text", list(_SIZE_TEXTS))
def test_sizes_made_into_text_show_their_values(dynamic, text):
    """f-strings, str/repr, ``%``, ``str.format`` and ``format`` of a symbolic size (alone, in a
    torch.Size, in a tuple) give its value as eagerly: the size is specialized, never ``s0``."""
    texts = []
    make = _SIZE_TEXTS[text]

    def f(x):
        texts.append(make(x, x.shape[0]))
        return x * 2

    jf = jitcore.jit(f, dynamic=dynamic)
    for k in (3, 5, 7, 5):
        run_both(f, jf, torch.ones(k))
        eager, jitted = texts[-2:]
        assert jitted == eager


@pytest.mark.parametrize("check", [
    lambda n: isinstance(n, int),
    lambda n: type(n) is int,
    lambda n: isinstance(n / 2, float) and not isinstance(n, (float, bool)),
    # ``n.__class__`` agrees with ``type(n)``: it was ``torch.SymInt`` through the interpreter's native
    # attribute path
    lambda n: n.__class__ is int,
    lambda n: (n / 2).__class__ is float and (n > 1).__class__ is bool,
    lambda n: n.__class__.__name__ == "int",
    lambda n: getattr(n, "__class__") is int,  # noqa: B009 - the builtin's path, not LOAD_ATTR
])
def test_a_symbolic_size_is_an_int_to_the_program(check):
    """Note [Symbolic sizes are ints to the program]: a branch on the type of a size takes eager's side."""
    def f(x):
        return x * 2 if check(x.shape[0]) else x - 1

    jf = jitcore.jit(f, dynamic=True)
    for k in (3, 5, 6):
        run_both(f, jf, torch.ones(k))
    assert jitcore.cache_misses(jf) == 1


@pytest.mark.parametrize("program", [
    lambda x: x.shape,
    lambda x: x.size(),
    lambda x: (x * 2, x.shape),
    lambda x: (x.shape[0], [x.shape, {"s": x.size()}]),
])
def test_a_shape_returned_by_a_symbolic_entry_is_a_torch_size(program):
    jf = jitcore.jit(program, dynamic=True)
    for k in (3, 5, 6):
        eager, jitted = program(torch.ones(k, 2)), jf(torch.ones(k, 2))
        assert repr(jitted) == repr(eager)  # torch.Size([k, 2]), not [k, 2]
    assert jitcore.cache_misses(jf) == 1


@pytest.mark.parametrize("hold", ["slice", "size", "int"])
def test_a_value_read_after_ops_given_sizes_keeps_them_symbolic(hold):
    """The probe computing a value read runs the records before it on the call's values: a symbolic
    size they were given (in a slice, a torch.Size, alone) is its traced value there, not a guard
    pinning the symbol to it (every length was an entry of its own: Hugging Face models with a mask)."""
    def f(x, mask):
        n = x.shape[1]
        if hold == "slice":
            y = x[:, : n - 1] * 2
        elif hold == "size":
            y = x.view(torch.Size([x.shape[0], n]))[:, 1:] * 2
        else:
            y = x.narrow(1, 0, n - 1) * 2
        return y + 1 if mask.any() else y - 1  # a value read: the probe runs the ops above

    jf = jitcore.jit(f)
    for n in range(3, 9):
        run_both(f, jf, torch.randn(2, n), torch.tensor([n % 2 == 0]))
    assert jitcore.cache_misses(jf) <= 3  # a static entry, then one symbolic entry per branch


def test_printed_sizes_show_their_values(capsys):
    def f(x):
        n = x.shape[0]
        print(n, x.shape, (n * 2, [n]))
        return x * n

    jf = jitcore.jit(f, dynamic=True)
    for k in (3, 5, 7):
        run_both(f, jf, torch.ones(k))
        assert capsys.readouterr().out.splitlines() == [f"{k} torch.Size([{k}]) ({2 * k}, [{k}])"] * 2


def test_dynamic_false_traces_every_shape():
    jf = jitcore.jit(attention_like, dynamic=False)
    w = torch.randn(8, 8)
    for s in range(1, 7):
        run_both(attention_like, jf, torch.randn(2, s, 8), w)
    assert jitcore.cache_misses(jf) == 6
    assert "s0" not in str(jitcore.last_traces(jf)[-1])


def test_dynamic_true_is_symbolic_from_the_first_call():
    jf = jitcore.jit(attention_like, dynamic=True)
    w = torch.randn(8, 8)
    for b, s in ((2, 3), (3, 5), (4, 9), (2, 64)):
        run_both(attention_like, jf, torch.randn(b, s, 8), w)
    assert jitcore.cache_misses(jf) == 1
    trace = str(jitcore.last_traces(jf)[-1])
    assert "def computation(x, w, s0, s1" in trace and '# x: "cpu f32[s0, s1, s2]"' in trace, trace
    # ``(d // 2) ** 0.5`` is a float computed from the feature size: specialized (guarded to 8)
    run_both(attention_like, jf, torch.randn(3, 4, 6), torch.randn(6, 6))
    assert jitcore.cache_misses(jf) == 2


def test_mark_dynamic_marks_one_dimension():
    jf = jitcore.jit(attention_like, dynamic=False)
    w = torch.randn(8, 8)
    for s in (2, 5, 9):
        x = torch.randn(2, s, 8)
        jitcore.mark_dynamic(x, 1)
        run_both(attention_like, jf, x, w)
    assert jitcore.cache_misses(jf) == 1
    x = torch.randn(3, 4, 8)  # the batch is not marked: static
    jitcore.mark_dynamic(x, -2)
    run_both(attention_like, jf, x, w)
    assert jitcore.cache_misses(jf) == 2
    with pytest.raises(IndexError):
        jitcore.mark_dynamic(x, 3)


def test_torch_dynamo_mark_dynamic_is_honoured():
    jf = jitcore.jit(attention_like, dynamic=False)
    w = torch.randn(8, 8)
    for s in (2, 5):
        x = torch.randn(2, s, 8)
        torch._dynamo.mark_dynamic(x, 1)
        run_both(attention_like, jf, x, w)
    assert jitcore.cache_misses(jf) == 1


def test_grad_with_symbolic_sizes():
    def f(x, w):
        b, s, d = x.shape
        return F.silu(x @ w).view(b * s, d).pow(2).mean()

    jf = jitcore.jit(f)
    w = torch.randn(4, 4, requires_grad=True)
    for s in range(1, 9):
        x = torch.randn(2, s, 4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_(True)
        expected = f(x, w)
        (gx, gw) = torch.autograd.grad(expected, (x, w))
        actual = jf(x2, w)
        (jx, jw) = torch.autograd.grad(actual, (x2, w))
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(jx, gx)
        torch.testing.assert_close(jw, gw)
    assert jitcore.cache_misses(jf) == 2


def test_module_sequence_lengths():
    torch.manual_seed(0)
    model = Decoder(max_len=80).eval()
    jm = jitcore.jit(model)
    with torch.no_grad():
        for s in range(1, 65):
            tokens = torch.randint(0, 256, (2, s))
            torch.testing.assert_close(jm(tokens), model(tokens))
    assert jitcore.cache_misses(jm) == 2
    tokens = torch.randint(0, 256, (2, 81))  # longer than the rotary table: eager raises, so must jm
    with pytest.raises(RuntimeError):
        model(tokens)
    with pytest.raises(RuntimeError), torch.no_grad():
        jm(tokens)


def test_symbolic_and_static_entries_are_logged(caplog):
    jf = jitcore.jit(attention_like)
    w = torch.randn(8, 8)
    with caplog.at_level(logging.INFO, logger="jitcore.recompiles"):
        for s in (3, 4):
            jf(torch.randn(2, s, 8), w)
    assert "attention_like: cache entry 2 traced with symbolic sizes args[0].shape[1] (s0)" in caplog.text


def test_subclass_inputs_that_follow_an_inner_tensor_are_symbolic():
    """A TwoTensor input has the sizes and strides of its first half: its inner tensors are symbolic as
    the plain input beside it is, one entry for every shape, and every call equals eager (Note [Subclass
    inputs that follow an inner tensor], jitcore/jit/subclass_inputs.py; before, an entry per shape)."""
    def f(x, y):
        return (x * 2).sum(0) + y.sum()

    jf = jitcore.jit(f, dynamic=True)
    for n in (3, 4, 5):
        t = TwoTensor(torch.randn(n, 2), torch.randn(n, 2))
        run_both(f, jf, t, torch.randn(n))
    assert jitcore.cache_misses(jf) == 1


@pytest.mark.parametrize("made", ["inside", "from_an_input"])
def test_a_subclass_value_with_a_symbolic_size_is_rebuilt_with_the_calls_size(made, caplog):
    """A TwoTensor whose size follows a plain input's (made inside, or a static TwoTensor broadcast
    against it) comes back with the call's shape: once, a symbolic entry rebuilt it with the pass's
    SymInt as its outer size (``torch.Size([s0])`` handed to the caller), and then such a pass traced
    static shapes; its outer size is now computed per call (Note [Subclass values' sizes])."""
    weight = TwoTensor(torch.randn(4, 3), torch.randn(4, 3))

    def f(x):
        value = TwoTensor(x, x * 2) * 2 if made == "inside" else weight + x.unsqueeze(1)
        return value.sum(-1)

    jf = jitcore.jit(f)
    with caplog.at_level(logging.INFO, logger="jitcore.recompiles"):
        for n in (2, 3, 5):
            x = torch.randn(n, 3)
            out, expected = jf(x), f(x)
            assert type(out) is TwoTensor and out.shape == expected.shape
            assert all(type(size) is int for size in out.shape)
            torch.testing.assert_close((out.a, out.b), (expected.a, expected.b))
    assert "cache entry 2 traced with symbolic sizes args[0].shape[0] (s0)" in caplog.text
    assert jitcore.cache_misses(jf) == 2


def test_a_subclass_made_inside_under_grad_is_rebuilt_with_the_calls_size(caplog):
    """Symbolic plain inputs, a TwoTensor made inside, a weight that requires grad: the TwoTensor's size
    is symbolic, and the forward rebuilds it with each call's size (Note [Subclass values' sizes]; once:
    AttributeError, a size input reached the grad transform; then static shapes)."""
    w1 = torch.randn(8, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_(True)

    def make(w):
        return lambda x: (TwoTensor(x, x * 2) * w).sin()

    jf = jitcore.jit(make(w1), dynamic=True)
    with caplog.at_level(logging.INFO, logger="jitcore.recompiles"):
        for n in (3, 4, 5):
            x = torch.randn(n, 8)
            out, expected = jf(x), make(w2)(x)
            torch.testing.assert_close((out.a, out.b), (expected.a, expected.b))
            (out * 1).sum().backward()
            (expected * 1).sum().backward()
            assert out.shape == expected.shape and all(type(size) is int for size in out.shape)
            torch.testing.assert_close(w1.grad, w2.grad)
    assert "traced with static shapes" not in caplog.text
    assert jitcore.cache_misses(jf) == 1


@pytest.mark.parametrize("mode", ["bicubic", "bilinear", "nearest"])
def test_interpolation_to_a_size_computed_from_the_input(mode):
    """``F.interpolate`` to sizes computed from the input's: the C++ kernels of some modes take only
    concrete sizes, so the symbolic pass runs torch's Python kernels (Note [Symbolic passes and torch's
    Python kernels], jitcore/jit/api.py); before, bicubic raised there and every size was an entry."""
    def f(x):
        h, w = x.shape[-2:]
        return F.interpolate(x, size=(h * 2 - 1, w + 3), mode=mode)

    jf = jitcore.jit(f)
    for n in (4, 5, 6, 7):
        run_both(f, jf, torch.randn(1, 2, n, n + 1))
    assert jitcore.cache_misses(jf) == 2


def test_factories_take_sizes_from_the_call():
    def f(x):
        n = x.shape[0]
        eye = torch.eye(n)
        counts = torch.arange(n * 2).view(n, 2).sum(1, keepdim=True)
        return (x.T @ eye).T + torch.full((n, x.shape[1]), 0.5) + counts

    jf = jitcore.jit(f, dynamic=True)
    for n in (2, 3, 7):
        run_both(f, jf, torch.randn(n, 2))
    assert jitcore.cache_misses(jf) == 1


def test_symbolic_entries_are_found_past_the_dispatch_table():
    """Past 4 entries the cache files entries by the call's shapes; a symbolic entry is in every bucket."""

    def f(x, tag):  # a str argument: pinned by value (an int would become a dynamic number)
        return x.sum(1) * len(tag)

    jf = jitcore.jit(f)
    for tag in ("a", "bb", "ccc", "dddd", "eeeee", "ffffff"):
        for s in (3, 5, 7, 9):
            run_both(f, jf, torch.randn(2, s), tag)
    # "a": 3 static, then 5 symbolic; every later tag: one symbolic entry, whatever the length
    assert jitcore.cache_misses(jf) == 7


def test_grad_when_the_trace_uses_no_size():
    """Sizes the trace never passes to an op are still inputs: the entry runs under torch's autograd
    (the aten-level grad transform would bake the sizes into its backward)."""

    def f(x):
        return (x.reshape(-1)[1:] * 2).sum()

    jf = jitcore.jit(f, dynamic=True)
    for n in (3, 4, 6):
        x = torch.randn(n, 4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_(True)
        torch.testing.assert_close(torch.autograd.grad(jf(x2), x2)[0], torch.autograd.grad(f(x), x)[0])
    assert jitcore.cache_misses(jf) == 1


def _step(model: torch.nn.Module, x: torch.Tensor) -> tuple:
    loss = model(x).square().mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_a_miss_on_state_with_other_sizes_traces_them_symbolic():
    """A training step's first call finds every ``.grad`` None, its second a tensor: that miss comes with
    another batch size too, so the second pass is symbolic (Note [A miss for another reason with other
    sizes]); before, a static entry came between, and the third size traced a third entry."""
    torch.manual_seed(0)
    eager_model = torch.nn.Linear(4, 6)
    jit_model = torch.nn.Linear(4, 6)
    jit_model.load_state_dict(eager_model.state_dict())
    jitted = jitcore.jit(_step)
    for n in (2, 3, 4, 5):
        x = torch.randn(n, 4)
        expected, got = _step(eager_model, x), jitted(jit_model, x.clone())
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        torch.testing.assert_close([p.grad for p in jit_model.parameters()],
                                   [p.grad for p in eager_model.parameters()], rtol=0, atol=0)
    assert jitcore.cache_misses(jitted) == 2
