"""warnings.warn from interpreted code blames the frame eager blames (file, line, module), so filters
by module and once-per-location registries work as natively."""

from __future__ import annotations

import warnings

import pytest
import torch

import jitcore
from jitcore.interpreter import interpret


def _library_call(stacklevel: int) -> None:
    warnings.warn("deprecated", DeprecationWarning, stacklevel=stacklevel)


def _user(stacklevel: int) -> int:
    _library_call(stacklevel)  # stacklevel=2 blames this line
    return 1


def _caught(fn, *args) -> list[tuple[str, int, str, type]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args)
    return [(w.filename, w.lineno, str(w.message), w.category) for w in caught]


@pytest.mark.parametrize("stacklevel", [1, 2, 3, 50])
def test_the_blamed_frame_is_eagers(stacklevel: int) -> None:
    assert _caught(interpret(_user), stacklevel) == _caught(_user, stacklevel)


def test_a_warning_instance_and_a_bad_category() -> None:
    def program():
        warnings.warn(RuntimeWarning("as an instance"))  # noqa: B028 - the default stacklevel is tested
        try:
            warnings.warn("x", category=int)  # noqa: B028
        except TypeError as exc:
            return str(exc)

    assert _caught(interpret(program)) == _caught(program)
    assert interpret(program)() == program()


def test_module_filters_apply_under_jit() -> None:
    def f(x):
        _library_call(2)
        return x * 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=__name__)
        jitcore.jit(f)(torch.ones(2))  # blamed on this module: ignored, as eagerly
        f(torch.ones(2))
    assert caught == []
