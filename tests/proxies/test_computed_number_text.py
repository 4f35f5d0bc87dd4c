"""The text of a computed int guards ``number == value``, not the inputs it is computed from (Note [The text
of a computed number], jitcore/proxies/number.py): jitted vs eager, each result and mutated object."""

from __future__ import annotations

import collections

import pytest
import torch

import jitcore

LOG: dict = {}


def _metrics_at_an_fstring_key(metrics: dict, x: torch.Tensor, i: int) -> torch.Tensor:
    metrics[f"loss_{i % 2}"].append(float(x.sum()))
    return x * 2


def _log_at_a_str_key(metrics: dict, x: torch.Tensor, i: int) -> torch.Tensor:
    LOG.setdefault("s" + str(i % 3), []).append(i)
    return x - 1


def _length_of_the_text(metrics: dict, x: torch.Tensor, i: int) -> torch.Tensor:
    return x * len(f"{i // 4}|{i % 3}")


# (program, the calls' i, at most this many entries; before: an entry per distinct i)
PROGRAMS = {
    "fstring-key-of-a-defaultdict-argument": (_metrics_at_an_fstring_key, list(range(12)), 4),
    "str-key-of-a-global-dict": (_log_at_a_str_key, list(range(12)), 6),
    # the guard relaxed is the value of the computed number: changing it (a negative one, a wider one) or the
    # input's type (an int's text is not a float's or a bool's) must not hit an entry made for another text;
    # 4 and 7 (8 and 11) make the same text, and share an entry
    "text-measured": (_length_of_the_text, [0, 1, 2, 3, 5, 6, 9, -5, -1, 400, 40, 4.0, 5.0, True, False, 4, 7,
                                            8, 11], 17),
    "fstring-key-type-changes": (_metrics_at_an_fstring_key, [0, 1, 2, 3, 1.0, 2.0, True, False, 4, 5], 10),
}


@pytest.mark.parametrize("kind", list(PROGRAMS))
def test_the_text_of_a_computed_int_guards_its_value(kind: str) -> None:
    program, calls, bound = PROGRAMS[kind]

    def run(fn) -> list:
        LOG.clear()
        metrics = collections.defaultdict(list)
        out = []
        for n, i in enumerate(calls):
            x = torch.arange(3.0) + n
            out.append((fn(metrics, x, i).tolist(), list(metrics.items()), list(LOG.items())))
        return out

    eager = run(program)
    jitted = jitcore.jit(program)
    assert run(jitted) == eager
    assert jitcore.cache_misses(jitted) <= bound, jitcore.miss_reasons(jitted)[-1]
