"""Value reads (jitcore/jit/value_reads.py): programs that need tensor values run as eagerly.

Every test is differential: each call's result and every mutated input are compared with eager,
over sequences of calls that take the cached path, another entry, or a new trace.
"""

from __future__ import annotations

import io
import logging
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jit_helpers import assert_same, clone_tree

import jitcore
from jitcore.diagnostics.logs import configure
from jitcore.langctx.reads import same_value


def run_sequence(fn, calls, **options):
    """Call ``fn`` eagerly and jitted on each argument tuple; compare results and mutated inputs."""
    jfn = jitcore.jit(fn, **options)
    for args in calls:
        eager_args, jit_args = clone_tree(args), clone_tree(args)
        try:
            expected = fn(*eager_args)
        except Exception as exc:  # noqa: BLE001 - the jitted call must raise the same
            with pytest.raises(type(exc)):
                jfn(*jit_args)
            continue
        assert_same(jfn(*jit_args), expected)
        assert_same(jit_args, eager_args)
    return jfn


def branch(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def test_branch_on_a_value_takes_each_path_as_eager_and_caches_both():
    jfn = run_sequence(branch, [(torch.ones(3),), (-torch.ones(3),), (torch.ones(3),), (-torch.ones(3),)])
    assert jitcore.cache_misses(jfn) == 2 and jitcore.cache_hits(jfn) == 2
    reasons = jitcore.miss_reasons(jfn)[1]
    assert [r.where for r in reasons] == ["value read"] and "traced with True" in reasons[0].detail
    assert "test_jit_value_reads.py" in reasons[0].detail  # the user's line


def test_item_tolist_and_python_values():
    def f(x, k):
        n = int(x.sum().item())
        scale = x.max().item()
        return x * scale + n, x.tolist(), bool(x.any()), torch.equal(x, k), x[0].item() > 0

    run_sequence(f, [(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))] * 2
                 + [(torch.tensor([-1.0, 0.5]), torch.tensor([1.0, 2.0]))])


def test_data_dependent_shapes_and_their_gradients():
    def f(x, m):
        return x[m].sum() * x.nonzero().shape[0] + x.masked_select(m).mean() + torch.argwhere(x > 0).sum()

    calls = []
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(6, generator=g)
        calls.append((x, x > 0))
    run_sequence(f, calls)
    x = torch.randn(6, requires_grad=True)
    jfn = jitcore.jit(f)
    jfn(x, x.detach() > 0).backward()
    x_eager = x.detach().clone().requires_grad_()
    f(x_eager, x_eager.detach() > 0).backward()
    assert_same(x.grad, x_eager.grad)


def test_mask_assignment_and_tuple_nonzero():
    def f(x):
        y = x.clone()
        y[y < 0] = 0.0
        rows, cols = torch.nonzero(y > 0.5, as_tuple=True)
        return y, rows, cols, torch.where(y > 1)[0]

    run_sequence(f, [(torch.randn(3, 4),) for _ in range(3)])


@pytest.mark.parametrize("write", ["setitem", "setitem_columns", "index_put", "index_put_accumulate"])
def test_writes_through_a_mask_of_values_that_require_grad(write: str) -> None:
    """``y[mask] = v`` with ``v`` requiring grad: the backward (``grad[mask]``) needs the mask's
    values; ``backward()`` raised DataDependentError. Gradients equal eager's for several masks,
    one entry per count of true elements."""

    def f(x, mask, v):
        y = x * 2
        if write == "setitem":
            y[mask] = v * 3
        elif write == "setitem_columns":
            y[:, mask] = v[:, None] * 3  # (4, 1) broadcast over the selected columns
        elif write == "index_put":
            y = y.index_put((mask,), v * 3)
        else:
            y.index_put_((mask,), v * 3, accumulate=True)
        return y.sin()

    jf = jitcore.jit(f)
    masks = [torch.tensor(m, dtype=torch.bool) for m in ([1, 0, 1, 1], [0, 1, 1, 1], [1, 1, 0, 0])]
    for mask in masks:
        count = int(mask.sum())
        shape = (4, 4) if write == "setitem_columns" else (4,)
        x = torch.randn(*shape, requires_grad=True)
        v = torch.randn(4 if write == "setitem_columns" else count, requires_grad=True)
        outs, grads = [], []
        for fn in (f, jf):
            out = fn(x, mask, v)
            x_grad, v_grad = torch.autograd.grad(out.sum(), (x, v))
            outs.append(out.detach())
            grads.append((x_grad, v_grad))
        assert_same(outs[1], outs[0])
        assert_same(grads[1], grads[0])
    assert jitcore.cache_misses(jf) == 2  # counts 3, 3, 2


@pytest.mark.parametrize("in_place", [False, True])
def test_index_fill_with_a_value_that_requires_grad(in_place: bool) -> None:
    """``x.index_fill(dim, index, v)`` with a 0-d ``v`` requiring grad: its backward sums over
    ``unique(index)``, which the backward could not compute (DataDependentError from ``backward()``)."""

    def f(x, index, v):
        y = x * 2
        return y.index_fill_(1, index, v) if in_place else torch.index_fill(y, -1, index, v * 3)

    jf = jitcore.jit(f)
    for index in (torch.tensor([0, 2, 2]), torch.tensor([1]), torch.tensor([3, 0])):
        x, v = torch.randn(3, 4, requires_grad=True), torch.tensor(0.5, requires_grad=True)
        (eager_out, eager_grads), (jit_out, jit_grads) = [
            (out.detach(), torch.autograd.grad((out * out).sum(), (x, v)))
            for out in (f(x, index, v), jf(x, index, v))
        ]
        assert_same(jit_out, eager_out)
        assert_same(jit_grads, eager_grads)


def test_ops_with_value_dependent_shapes_and_tensor_arguments():
    def f(x, idx):
        return torch.unique(x), torch.tensor_split(x, idx), torch.bincount(x)

    run_sequence(
        f,
        [
            (torch.tensor([1, 2, 2, 5]), torch.tensor([1, 3])),
            (torch.tensor([1, 2, 2, 5]), torch.tensor([1, 3])),
            (torch.tensor([0, 0, 3, 3]), torch.tensor([2])),
        ],
    )
    x = torch.randn(5, 3, requires_grad=True)
    for fn in (lambda x, s: torch.narrow(x, 0, s, 2), lambda x, s: torch.tensor_split(x, s)[0]):
        out = jitcore.jit(fn)(x, torch.tensor(1))
        out.sum().backward()
        assert_same(out, fn(x, torch.tensor(1)))


def test_writes_before_a_failed_read_are_undone():
    def f(x, log):
        x.add_(1)
        log.mul_(2)
        if x.sum() > 0:
            return x * 2
        return x * 3

    calls = [(torch.full((3,), v), torch.ones(2)) for v in (1.0, -5.0, 1.0, -5.0, 2.0)]
    jfn = run_sequence(f, calls)
    assert jitcore.cache_misses(jfn) == 2


def test_random_ops_before_a_read_see_eagers_stream():
    def f(x):
        y = torch.nn.functional.dropout(x, 0.5, training=True)
        return y * y.sum().item()

    jfn = jitcore.jit(f)
    for seed in range(4):
        torch.manual_seed(seed)
        got = jfn(torch.ones(16))
        torch.manual_seed(seed)
        assert_same(got, f(torch.ones(16)))


def test_reads_under_autograd_and_counts_of_traces():
    def f(x, w):
        h = x @ w
        if (h > 0).any():
            h = h.relu()
        return (h * h.abs().max().item()).sum()

    w = torch.randn(4, 3, requires_grad=True)
    jfn = jitcore.jit(f)
    for seed in range(3):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))
        w.grad = None
        jfn(x, w).backward()
        got = w.grad.clone()
        w.grad = None
        f(x, w).backward()
        assert_same(got, w.grad)


def test_fullgraph_keeps_the_refusal():
    with pytest.raises(jitcore.DataDependentError) as info:
        jitcore.jit(branch, fullgraph=True)(torch.ones(3))
    assert info.value.code == "JC-T002"


def test_reads_are_logged(caplog):
    configure("graph_breaks")
    try:
        with caplog.at_level(logging.INFO, logger="jitcore.graph_breaks"):
            jitcore.jit(branch)(torch.ones(3))
    finally:
        configure("")
    assert any("value read __bool__()" in r.getMessage() and "test_jit_value_reads.py" in r.getMessage()
               for r in caplog.records)


def test_explain_lists_reads():
    jfn = jitcore.jit(branch)
    jfn(torch.ones(3))
    out = io.StringIO()
    jitcore.explain(jfn, out, color=False)
    text = out.getvalue()
    assert "value reads" in text and "__bool__() at" in text and "traced with True (3 ops since" in text


def test_cached_calls_do_not_reinterpret():
    jfn = jitcore.jit(branch)
    jfn(torch.ones(3))
    jfn(-torch.ones(3))
    entries = len(jfn.entries)
    for _ in range(20):
        jfn(torch.ones(3))
        jfn(-torch.ones(3))
    assert len(jfn.entries) == entries and jitcore.cache_misses(jfn) == 2


def test_same_value_is_exact():
    assert same_value(0.0, 0.0) and not same_value(0.0, -0.0) and same_value(float("nan"), float("nan"))
    assert not same_value(1, 1.0) and not same_value(True, 1) and same_value([1, [2.0]], [1, [2.0]])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-3, 3, allow_nan=False), min_size=4, max_size=4), min_size=1, max_size=5),
       st.booleans())
def test_mixed_programs_match_eager(values, in_place):
    def f(x):
        if in_place:
            x.mul_(2)
        y = x[x > 0]
        total = y.sum()
        if total.item() > 1.0:
            z = x * total
        else:
            z = x - y.numel()
        return z, y, x.nonzero()

    jfn = jitcore.jit(f)
    for row in values:
        x = torch.tensor(row)
        a, b = x.clone(), x.clone()
        assert_same(jfn(a), f(b))
        assert_same(a, b)


def test_numbers_read_with_item_stay_names_until_needed():
    def step(x, w):
        loss = (x @ w).pow(2).mean()
        scale = x.abs().max().item()
        return x * scale + 1, loss.item(), loss.item() * 2

    jfn = jitcore.jit(step)
    w = torch.randn(4, 2)
    for seed in range(6):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))
        assert_same(jfn(x, w), step(x, w))
    assert jitcore.cache_misses(jfn) == 1  # no entry per value: the numbers are computed per call
    assert "check_read" not in str(jitcore.last_traces(jfn)[-1])


def test_float_and_int_of_a_tensor_are_reads_that_stay_names():
    """``float(loss)`` logged per step, ``int(x.argmax())`` returned, ``1.0 / float(count)`` (BatchNorm
    with momentum=None): read as ``t.item()`` is, so a new value is not a new cache entry."""
    log: list[float] = []

    def step(x, w):
        loss = (x @ w).pow(2).mean()
        log.append(float(loss))
        return loss * 2, int(x.sum(1).argmax()), x / float(x.abs().max().long() + 1)

    jfn = jitcore.jit(step)
    w = torch.randn(4, 2)
    for seed in range(5):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(seed)) * (seed + 1)
        assert_same(jfn(x, w), step(x, w))
        assert log[-1] == log[-2] and type(log[-1]) is float
    assert jitcore.cache_misses(jfn) == 1

    bn = torch.nn.BatchNorm1d(3, momentum=None)
    eager_bn = torch.nn.BatchNorm1d(3, momentum=None)
    jitted_bn = jitcore.jit(bn)
    for seed in range(4):
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(seed))
        assert_same(jitted_bn(x), eager_bn(x))
        assert_same(bn.running_mean, eager_bn.running_mean)
    assert jitcore.cache_misses(jitted_bn) == 1


def test_slices_with_tensor_bounds():
    """``x[:, :n]`` and ``x[n:] = v`` with a 0-dim tensor ``n`` computed from values: the bound is a
    checked read made before the indexing (it used to be refused inside ``__getitem__``)."""
    def f(x, m):
        n = (m > 0).sum()
        y = x[:, :n] * 2
        x[n:] = 0.5
        return y, x[1 : n + 1 : torch.tensor(2)]

    run_sequence(f, [(torch.randn(4, 4), torch.tensor(v)) for v in ([1.0, -1, 1, 1], [-1.0, 1, -1, -1],
                                                                   [1.0, -1, 1, 1], [-1.0, -1, -1, -1])])


def test_a_number_read_then_branched_on_is_checked():
    """``if n > 0`` on a read number is checked by its outcome in the computation (Note [Predicate
    guards]): one entry per branch, not per value."""
    def f(x):
        n = x.sum().item()
        if n > 0:
            return x + n
        return x - n

    jfn = run_sequence(f, [(torch.full((2,), v),) for v in (1.0, -1.0, 2.0, 1.0, -3.0, 0.5, 0.0)])
    assert jitcore.cache_misses(jfn) == 2
    assert "the truth of" in jitcore.miss_reasons(jfn)[1][0].detail


def test_a_branch_on_a_read_and_on_state_checks_the_outcome():
    """ReduceLROnPlateau's pattern: ``loss < best`` where ``loss`` is read from a tensor and ``best`` is
    state the step writes back (a dynamic number): the predicate mixes a read and an input, and is
    checked in the computation; a call whose outcome differs runs another entry, with eager's state."""
    def make():
        state = {"best": float("inf"), "bad": 0}

        def step(x):
            loss = x.square().mean().item()
            if loss < state["best"] * 0.99:
                state["best"] = loss
                state["bad"] = 0
            else:
                state["bad"] += 1
            return x * 2 if state["bad"] < 2 else x / 2

        return step, state

    eager, eager_state = make()
    fn, state = make()
    jfn = jitcore.jit(fn)
    for v in (3.0, 2.0, 2.5, 1.0, 0.5, 0.6, 0.7, 0.8, 0.1, 0.2, 0.05, 0.3):
        x = torch.full((3,), v)
        assert_same(jfn(x), eager(x))
        assert state == eager_state
    assert jitcore.cache_misses(jfn) <= 6  # 12 calls; the value of every loss differs


def test_item_numbers_under_autograd():
    def f(x, w):
        h = x @ w
        return h * h.detach().abs().max().item()

    w = torch.randn(4, 3, requires_grad=True)
    jfn = jitcore.jit(f)
    for seed in range(3):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))
        w.grad = None
        jfn(x, w).sum().backward()
        got = w.grad.clone()
        w.grad = None
        f(x, w).sum().backward()
        assert_same(got, w.grad)


@pytest.mark.parametrize(
    "name",
    ["cov", "corrcoef", "gaussian_nll_loss", "combinations"],
)
def test_composites_that_read_values_while_inputs_require_grad(name):
    """Note [Composites that read values under grad]: torch's composite runs natively on the traced
    tensors, each aten op recorded on its own; values and gradients as eager, over several calls,
    and eager's error where the read value changes (a negative variance)."""
    weights = torch.tensor([1, 2, 1, 1, 3])
    programs = {
        "cov": lambda x, v: torch.cov(x, fweights=weights, aweights=v[0].abs()),
        "corrcoef": lambda x, v: torch.corrcoef(x) * v.sum(),
        "gaussian_nll_loss": lambda x, v: torch.nn.functional.gaussian_nll_loss(x, torch.zeros(3, 5), v),
        "combinations": lambda x, v: torch.combinations(x[0] * v[0], 2),
    }
    fn = programs[name]
    jfn = jitcore.jit(fn)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(3, 5, generator=g, requires_grad=True)
        v = (torch.rand(3, 5, generator=g) + 0.1).requires_grad_()
        ex, ev = x.detach().clone().requires_grad_(), v.detach().clone().requires_grad_()
        got, expected = jfn(x, v), fn(ex, ev)
        assert_same(got, expected)
        assert_same(torch.autograd.grad(got.sum(), (x, v)), torch.autograd.grad(expected.sum(), (ex, ev)))
    if name == "gaussian_nll_loss":
        x = torch.randn(3, 5, requires_grad=True)
        with pytest.raises(ValueError, match="negative"):
            fn(x, -torch.ones(3, 5))
        with pytest.raises(ValueError, match="negative"):
            jfn(x, -torch.ones(3, 5))


@pytest.mark.parametrize("name", ["cov", "corrcoef"])
def test_composites_run_natively_carry_gradients_while_tracing(name):
    """The aten ops of a composite run natively record their autograd on the shadows: its output
    requires grad inside the function as eagerly, a backward inside through it works, and the entry
    gets a backward trace. Before, the output did not require grad while tracing (``autograd.grad``
    raised 'does not require grad') and the entry ran under torch's autograd."""
    composites = {
        "cov": lambda x: torch.cov(x, aweights=x[0].abs()),
        "corrcoef": torch.corrcoef,
    }
    composite = composites[name]

    def inside(x):
        y = composite(x)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        return y.requires_grad, y * 2, g

    def outside(x):
        return composite(x).square().sum()

    jinside, joutside = jitcore.jit(inside), jitcore.jit(outside)
    for seed in range(2):
        x = torch.randn(3, 5, generator=torch.Generator().manual_seed(seed), requires_grad=True)
        ex = x.detach().clone().requires_grad_()
        assert_same(jinside(x), inside(ex))
        got, expected = joutside(x), outside(ex)
        assert_same(got.detach(), expected.detach())
        assert_same(torch.autograd.grad(got, x), torch.autograd.grad(expected, ex))
    assert jinside.fallback_reason is None
    assert jitcore.last_backward_traces(joutside), "no backward trace: the entry ran under torch's autograd"


def test_combinations_masked_select_is_an_index_under_grad():
    """``torch.combinations`` runs natively and calls ``aten.masked_select`` on a mask of the sizes:
    expressed as an index by the mask's coordinates (as the torch function is), its gradient is
    traced. Before, the value-shaped op carried gradients, so the entry ran under torch's autograd
    with no backward trace."""
    def f(x):
        return torch.combinations(x, 3, with_replacement=True).square().sum(1)

    jf = jitcore.jit(f)
    for seed in range(2):
        x = torch.randn(4, generator=torch.Generator().manual_seed(seed), requires_grad=True)
        ex = x.detach().clone().requires_grad_()
        got, expected = jf(x), f(ex)
        assert_same(got.detach(), expected.detach())
        assert_same(torch.autograd.grad(got.sum(), x), torch.autograd.grad(expected.sum(), ex))
    assert jitcore.cache_misses(jf) == 1
    assert jitcore.last_backward_traces(jf), "no backward trace: the entry ran under torch's autograd"


def _grads_of(fn, args):
    """``fn``'s output and the gradients of its inputs that require grad (backward of the output's sum)."""
    args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out = fn(*args)
    out.sum().backward()
    return out.detach(), [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def _packed_gru(gru):
    def f(x, lengths):
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        return torch.nn.utils.rnn.pad_packed_sequence(gru(packed)[0], batch_first=True)[0]
    return f


def _ctc(logits, targets, target_lengths):
    log_probs = logits.log_softmax(-1).transpose(0, 1)
    input_lengths = torch.full((logits.shape[0],), logits.shape[1])
    return torch.nn.functional.ctc_loss(log_probs, targets, input_lengths, target_lengths, zero_infinity=True)


def _zero_positives(x):
    y = x.clone()
    y[x > 0] = 0.0
    return y * x


@pytest.mark.parametrize("name", ["ctc_loss", "lstsq", "packed_gru", "bool_index_put"])
def test_value_shaped_ops_whose_outputs_carry_gradients(name):
    """Note [Value-shaped ops under grad]: the op runs natively on every call and torch's autograd
    differentiates it (they were refused with JC-T002); values and input gradients equal eager's."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(4, 3, batch_first=True)

    def make(seed):
        g = torch.Generator().manual_seed(seed)
        if name == "ctc_loss":
            flat = torch.randint(1, 5, (2 + seed,), generator=g)  # concatenated targets, lengths vary
            return _ctc, (torch.randn(2, 8, 5, generator=g, requires_grad=True), flat,
                          torch.tensor([1, 1 + seed]))
        if name == "lstsq":
            a, b = torch.randn(6, 3, generator=g), torch.randn(6, 2, generator=g)
            return (lambda a, b: torch.linalg.lstsq(a, b).solution), (a.requires_grad_(), b.requires_grad_())
        if name == "packed_gru":
            x = torch.randn(2, 5, 4, generator=g, requires_grad=True)
            return _packed_gru(gru), (x, torch.tensor([5, 3]))
        return _zero_positives, (torch.randn(6, generator=g, requires_grad=True),)

    fn, _ = make(0)
    jfn = jitcore.jit(fn)
    for seed in range(3):
        _, args = make(seed)
        got, expected = _grads_of(jfn, args), _grads_of(fn, args)
        torch.testing.assert_close(got, expected)
    if name != "bool_index_put":  # (a mask's coordinates: a checked count, then static ops)
        assert "check_read" in str(jitcore.last_traces(jfn)[0])  # the outputs' shapes are checked


def test_a_backward_inside_through_a_value_shaped_op_runs_eagerly():
    """Note [Eager entries]: the call runs eagerly (gradients as eager's), later calls like it are
    answered by an eager entry without interpreting again; ``fullgraph=True`` keeps the refusal."""
    def step(logits, targets, target_lengths):
        loss = _ctc(logits, targets, target_lengths)
        loss.backward()
        return loss.detach()

    torch.manual_seed(0)
    jf = jitcore.jit(step)
    for call in range(2):
        logits, targets = torch.randn(2, 8, 5), torch.randint(1, 5, (3,))
        eager_logits, jit_logits = logits.clone().requires_grad_(), logits.clone().requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = jf(jit_logits, targets, torch.tensor([1, 2]))
        assert [str(w.message).startswith(f"jitcore: {jf._label} runs eagerly") for w in caught] == (
            [True] if call == 0 else [])
        assert_same(got, step(eager_logits, targets, torch.tensor([1, 2])))
        assert_same(jit_logits.grad, eager_logits.grad)
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 1)
    assert isinstance(jf.fallback_reason, jitcore.DataDependentError)
    with pytest.raises(jitcore.DataDependentError, match="ctc_loss needs the values"):
        jitcore.jit(step, fullgraph=True)(torch.randn(2, 8, 5, requires_grad=True),
                                          torch.randint(1, 5, (3,)), torch.tensor([1, 2]))


def test_a_value_shaped_op_with_gradients_next_to_a_subclass_runs_eagerly():
    """The grad transform replays on fake tensors what involves subclasses; ctc_loss's outputs have no
    shapes there: the call runs eagerly (an eager entry), values and gradients as eager's."""
    from torch.testing._internal.two_tensor import TwoTensor

    def f(w, logits, targets, target_lengths):
        return _ctc(logits, targets, target_lengths) + (w * 2).sum()

    torch.manual_seed(0)
    logits, targets = torch.randn(2, 8, 5), torch.randint(1, 5, (3,))
    w = TwoTensor(torch.randn(3), torch.randn(3))
    jf = jitcore.jit(f)
    for _ in range(2):
        (ew, jw), (el, jl) = [(t.clone().requires_grad_(), t.clone().requires_grad_()) for t in (w, logits)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = jf(jw, jl, targets, torch.tensor([1, 2]))
        expected = f(ew, el, targets, torch.tensor([1, 2]))
        assert type(got) is type(expected) and got.requires_grad
        assert_same(got.detach(), expected.detach())
        got.backward(torch.ones_like(got))
        expected.backward(torch.ones_like(expected))
        assert_same((jl.grad, jw.grad.a, jw.grad.b), (el.grad, ew.grad.a, ew.grad.b))
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 1)


def test_requires_grad_flags_are_not_data_writes():
    """``h.requires_grad_(True)`` before a value read whose check fails on a later call: the caller's
    tensor is not 'restored' (which bumped its version and broke an eager graph that saved it:
    Wav2Vec2's feature encoder does ``hidden_states.requires_grad = True``)."""
    def f(x):
        h = x[:, None]
        h.requires_grad = True
        y = (h * 2).sum()
        return y if x.sum() > 0 else -y

    jfn = jitcore.jit(f)
    w = torch.randn(3, requires_grad=True)
    for sign in (1.0, -1.0, 1.0):
        x = torch.full((3,), sign)
        saved = (w * x).sum()  # eager's graph saves x
        assert_same(jfn(x), f(x))
        saved.backward()  # raised "modified by an inplace operation" when x was restored


def checks_a_read(x, y):
    torch._check(y.sum().item() > 0)
    return x + 1


def checks_a_read_with_a_message(x, y):
    torch._check(y.max().item() < 10, lambda: "y too large")
    torch._check_value(y.min().item() >= -5)
    return x * 2


@pytest.mark.parametrize("fn", [checks_a_read, checks_a_read_with_a_message])
def test_torch_check_of_a_read_checks_it_as_eager(fn):
    """Note [torch._check of a number's truth] (jitcore/langctx/python.py): ``torch._check`` of a comparison
    of ``item()`` reads raised AssertionError("Expected bool, got True") from torch's ``expect_true`` on
    every call, where eager returns; now a true check returns, a false one raises eager's error (the
    same type and message), and the outcome is checked in the computation: two entries for both
    outcomes."""
    calls = [(torch.zeros(2), torch.tensor([v])) for v in (1.0, -1.0, 3.0, 20.0, -9.0, 2.0, -1.0)]
    for args in calls:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - the message must match too
            with pytest.raises(type(exc), match=str(exc)[:20]):
                jitcore.jit(fn)(*args)
    jfn = run_sequence(fn, calls)
    assert jitcore.cache_misses(jfn) <= 4, jitcore.miss_reasons(jfn)[-1]


def test_torch_check_of_a_dynamic_number_guards_its_truth():
    def f(x, n):
        torch._check(n % 2 == 0, lambda: f"odd {n}")
        return x * n

    jfn = run_sequence(f, [(torch.ones(2), n) for n in (2, 4, 3, 6, 5, 8)], dynamic_numbers=("n",))
    assert jitcore.cache_misses(jfn) <= 3, jitcore.miss_reasons(jfn)[-1]
