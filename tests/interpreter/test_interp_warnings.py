"""warnings.warn from interpreted code blames the frame eager blames (file, line, module), so filters
by module and once-per-location registries work as natively."""

from __future__ import annotations

import re
import sys
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


def _sub_with_bad_group_name() -> list[tuple[str, int, str, type]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        re.sub("(?P<a>x)", r"\g<+1>", "xx")  # re's template parser, run natively by C, warns here
    return [(w.filename, w.lineno, str(w.message), w.category) for w in caught]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 made a bad group name in a template an error")
@pytest.mark.parametrize("runner", [interpret, jitcore.jit], ids=["interpreted", "jitted"])
def test_a_warning_of_python_code_a_c_call_ran_natively_blames_eagers_frame(runner) -> None:
    # C's Pattern.sub runs re's template parser natively, whose warning's stacklevel counts its own frames,
    # then the program's: it named re/__init__.py (interpreted) or jitcore/jit/interpretation.py (jitted),
    # not the program's line (CPython's test_re.test_symbolic_refs_errors; Note [A warning's stacklevel
    # through Python code C ran natively], jitcore/interpreter/warnings_from_c.py)
    re.purge()
    expected = _sub_with_bad_group_name()
    assert len(expected) == 1 and expected[0][0] == __file__
    re.purge()
    assert runner(_sub_with_bad_group_name)() == expected


def test_a_warning_c_issues_is_relocated_after_the_hook_was_replaced() -> None:
    """jitcore puts its relocating hook in front of ``warnings._showwarnmsg`` at import; a program or
    library that puts another function there afterwards (or imports ``warnings`` afresh) took it away for
    good, and a warning C issues for interpreted code (``bool(NotImplemented)``) named jitcore's file and
    line again. The hook is put back as each outermost run starts."""
    def f() -> bool:
        return bool(NotImplemented)

    hooked = warnings._showwarnmsg
    warnings._showwarnmsg = hooked.__wrapped__
    try:
        interpreted = _caught(interpret(f))
    finally:
        warnings._showwarnmsg = hooked
    native = _caught(f)
    assert [(name, line) for name, line, _, _ in interpreted] == [(name, line) for name, line, _, _ in native]
    assert native and native[0][0] == __file__
