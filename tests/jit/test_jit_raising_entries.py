"""Note [Raising entries] (jitcore/jit/raising_entries.py): a call whose pass stopped on the program's own
exception keeps an entry that runs calls like it eagerly, instead of tracing each of them again; a call
it accepts that returns drops it. Differential: every call's outcome (value, or exception type, message
and arguments), the mutated state and the exact miss and hit counts are compared with eager's."""

from __future__ import annotations

import warnings

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

import jitcore

LOG: list = []


def outcome(fn, *args):
    """What a call gives: ``("returned", value)`` or ``("raised", type, message, args as lists)``."""
    try:
        out = fn(*args)
    except Exception as exc:  # noqa: BLE001 - compared with eager's
        carried = [a.tolist() if isinstance(a, torch.Tensor) else a for a in exc.args]
        return ("raised", type(exc), str(exc), carried)
    return ("returned", out.tolist() if isinstance(out, torch.Tensor) else out)


def compare_calls(fn, calls, **options):
    """``fn`` called eagerly and jitted over ``calls`` (argument tuples): every outcome equal; no jitcore
    warning. Returns the jitted function."""
    jitted = jitcore.jit(fn, **options)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        for args in calls:
            assert outcome(jitted, *args) == outcome(fn, *args)
    return jitted


def counts(jitted):
    return jitcore.cache_misses(jitted), jitcore.cache_hits(jitted), len(jitted.entries)


def too_big(x):
    if x.shape[0] > 4:
        raise ValueError(f"too big: {x.shape[0]}")
    return x * 2


def shapes_mismatch(x, y):
    return (x @ y).sum()


def _not_rewritten(source: str):
    """The function ``source`` defines, compiled outside pytest's assertion rewriting (whose helpers the
    pass would read and guard as the program's own globals)."""
    namespace: dict = {}
    exec(compile(source, __file__, "exec"), namespace)  # noqa: S102
    return next(v for k, v in namespace.items() if k != "__builtins__")


failed_assert = _not_rewritten('def failed_assert(x):\n    assert x.shape[0] < 3, f"{x.shape[0]} rows"\n'
                               '    return x + 1\n')


@pytest.mark.parametrize(("fn", "args"), [
    (too_big, (torch.ones(5),)),
    (shapes_mismatch, (torch.ones(2, 3), torch.ones(4, 2))),
    (failed_assert, (torch.ones(4, 2),)),
], ids=["raise", "torch-shapes", "assert"])
def test_a_raising_call_is_traced_once(fn, args):
    jitted = compare_calls(fn, [args] * 5)
    assert counts(jitted) == (1, 4, 1)


def test_a_call_that_returns_traces_its_own_entry_and_the_raising_one_stays():
    big, small = (torch.ones(5),), (torch.ones(3),)
    jitted = compare_calls(too_big, [big, big, small, small, big, small], dynamic=False)
    assert counts(jitted) == (2, 4, 2)


def appends_then_raises(x):
    LOG.append(x.shape[0])
    raise ValueError(f"{len(LOG)} calls")


def test_effects_before_the_raise_are_eagers_on_every_call():
    jitted = jitcore.jit(appends_then_raises)
    expected = logged_calls(appends_then_raises, [(torch.ones(2),)] * 3)
    assert logged_calls(jitted, [(torch.ones(2),)] * 3) == expected
    assert expected[1] == [2, 2, 2] and expected[0][2][2] == "3 calls"
    assert counts(jitted) == (1, 2, 1)


def raises_inside_a_generator(x):
    def rows():
        for i in range(x.shape[0]):
            LOG.append(i)
            if i == 2:
                raise ValueError(f"row {i} of {x.shape[0]}, {len(LOG)} logged")
            yield x[i]

    return sum(rows())


def logged_calls(fn, calls):
    """The outcomes of ``fn`` over ``calls`` from an empty LOG, and the LOG after."""
    LOG.clear()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        seen = [outcome(fn, *args) for args in calls]
    return seen, list(LOG)


def test_a_generator_that_raises_part_way_makes_eagers_effects():
    calls = [(torch.ones(4, 2),)] * 3 + [(torch.ones(2, 2),)] * 2
    jitted = jitcore.jit(raises_inside_a_generator)
    assert logged_calls(jitted, calls) == logged_calls(raises_inside_a_generator, calls)
    assert counts(jitted) == (2, 3, 2)  # the raising entry, then the call that returns traced and cached


def carries_a_tensor(x):
    raise ValueError(x * 2)


def test_an_exception_that_carries_a_tensor_carries_eagers_on_every_call():
    jitted = compare_calls(carries_a_tensor, [(torch.ones(2),)] * 3)
    assert counts(jitted) == (1, 2, 1)


def raises_on_the_values(x):
    if x.sum() > 0:
        raise ValueError("positive")
    return x * 2


def index_by_tensor(x, i):
    return x[i]


def test_a_call_the_values_let_return_drops_the_raising_entry():
    positive, negative = (torch.ones(3),), (-torch.ones(3),)
    jitted = compare_calls(raises_on_the_values, [positive, positive, negative])
    assert counts(jitted) == (1, 2, 0)  # the third call ran eagerly, returned, and dropped the entry
    for args in (negative, negative):
        assert outcome(jitted, *args) == outcome(raises_on_the_values, *args)
    assert counts(jitted) == (2, 3, 1)  # traced, then cached


def test_an_index_out_of_range_keeps_an_entry_until_an_index_in_range():
    x = torch.arange(3.0)
    out, inside = (x, torch.tensor(5)), (x, torch.tensor(1))
    jitted = compare_calls(index_by_tensor, [out, out, out, inside, inside, inside, out])
    assert counts(jitted) == (2, 4, 1)  # the last call: the traced entry's computation raised (no hit)


def rethrows(x, i):
    try:
        return x[i]
    except IndexError as exc:
        raise ValueError("bad index") from exc


def test_a_handler_that_raises_again_on_a_value_decided_error():
    x = torch.arange(3.0)
    out, inside = (x, torch.tensor(5)), (x, torch.tensor(1))
    jitted = compare_calls(rethrows, [out, out, inside, inside, out, out])
    assert counts(jitted) == (2, 4, 1)


def test_fullgraph_keeps_no_raising_entry():
    jitted = compare_calls(too_big, [(torch.ones(5),)] * 3, fullgraph=True)
    assert counts(jitted) == (3, 0, 0)


def test_explain_names_the_raising_entry(capsys):
    jitted = jitcore.jit(too_big)
    with pytest.raises(ValueError, match="too big"):
        jitted(torch.ones(5))
    jitcore.explain(jitted)
    text = capsys.readouterr().out
    assert "args[0] is a Tensor of shape (5,)" in text
    assert "tracing a call like it raised ValueError: too big: 5" in text
    with pytest.raises(ValueError) as info:
        jitted(torch.ones(5))
    assert "a call like it raised" in "\n".join(info.value.__notes__)


def two_ways(x):
    if x.shape[0] > 4:
        raise ValueError(f"too big: {x.shape[0]}")
    if x.sum() > 100:
        raise RuntimeError("too large a sum")
    return x * 2


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.sampled_from([1.0, 50.0])), min_size=1, max_size=6))
def test_a_sequence_of_raising_and_returning_calls_matches_eager(inputs):
    """Each input called three times in a row: every outcome is eager's, and the third call is a hit
    (a call that returned dropped at most the one raising entry before it)."""
    jitted = jitcore.jit(two_ways)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        for size, fill in inputs:
            x = torch.full((size,), fill)
            for attempt in range(3):
                misses = jitcore.cache_misses(jitted)
                assert outcome(jitted, x) == outcome(two_ways, x)
                if attempt == 2:
                    assert jitcore.cache_misses(jitted) == misses



def test_a_masked_tensor_op_eager_rejects_is_traced_once():
    from torch.masked import masked_tensor

    def norm(m):
        return torch.norm(m)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's MaskedTensor prototype warning
        m = masked_tensor(torch.arange(4.0), torch.tensor([True, False, True, True]))
        expected = outcome(norm, m)
        jitted = jitcore.jit(norm)
        assert [outcome(jitted, m) for _ in range(3)] == [expected] * 3
    assert expected[0] == "raised"
    assert counts(jitted) == (1, 2, 1)



def raises_with(x, n):
    if n >= 0:
        raise ValueError(f"n = {n}")
    return x


def test_raising_entries_are_kept_up_to_their_limit():
    from jitcore.jit.raising_entries import RAISING_LIMIT

    calls = [(torch.ones(2), n) for n in range(20)] + [(torch.ones(2), 19)]
    jitted = compare_calls(raises_with, calls, dynamic_numbers=False)
    assert len(jitted.entries) <= RAISING_LIMIT
    assert jitcore.cache_hits(jitted) >= 1  # the last call, like the one before it


class Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if x.shape[0] > 4:
            raise ValueError(f"{x.shape[0]} rows on call {self.calls}")
        return self.linear(x)


def test_a_module_that_counts_its_calls_then_raises():
    """The attribute the forward writes before raising is not guarded by the raising entry (Note [Raising
    entries]): the calls after the first are hits, and count as eagerly."""
    torch.manual_seed(0)
    eager, module = Counting(), Counting()
    module.load_state_dict(eager.state_dict())
    jitted = jitcore.jit(module)
    big, small = torch.ones(5, 3), torch.ones(2, 3)
    for x in (big, big, big, small, small, big):
        assert outcome(jitted, x) == outcome(eager, x)
    assert module.calls == eager.calls == 6
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 4)
