"""An object of the program's class with a Python ``__del__``, made inside the jitted function: its
``__del__`` runs once per call, as eagerly (Note [An object whose __del__ is the program's],
jitcore/jit/dying_objects.py).

Differential: each program runs three calls eagerly and jitted; the ``__del__`` calls are counted.
"""

from __future__ import annotations

import gc
import warnings

import pytest
import torch

import jitcore

DIED: list = []


class Dying:
    def __del__(self) -> None:
        DIED.append(1)


def _made_and_dropped(x):
    d = Dying()  # noqa: F841 - dies as the call returns
    return x + 1


def _made_and_returned(x):
    return Dying(), x + 1


@pytest.mark.parametrize("program", [_made_and_dropped, _made_and_returned])
def test_a_made_objects_del_runs_once_per_call(program):
    """Dropped: the pass's object died once and no cached call ran ``__del__`` (1 in 3 calls); returned:
    the pass's object and its trial copy died as well as each call's copy (4 in 3)."""

    def deaths(make) -> tuple[list, int]:
        gc.collect()
        DIED.clear()
        values = []
        fn = make()
        for i in range(3):
            out = fn(torch.ones(2) * i)
            values.append((out[1] if isinstance(out, tuple) else out).tolist())
            del out
        del fn  # an eager entry's reason holds the first call's traceback, whose frames hold its result
        gc.collect()
        return values, len(DIED)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the call runs eagerly, and says so
        got = deaths(lambda: jitcore.jit(program))
    assert got == deaths(lambda: program) == ([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], 3)
