"""The text of a MaskedTensor inside a jitted function (Note [A MaskedTensor's text],
jitcore/langctx/masked_text.py): ``print(m)``, ``repr(m)``, ``str(m)`` and ``f"{m}"`` show each call's values,
in program order with the other prints, as eagerly, and a warm call runs none of MaskedTensor's dispatch.
Before: ``print``, ``str`` and f-strings ran the call eagerly (JC-T001), ``repr`` traced an entry per call.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.masked import MaskedTensor, masked_tensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import protocol_calls  # noqa: E402


def _masked(i: int, shape: str) -> MaskedTensor:
    data = torch.arange(6.0).reshape(2, 3) * (i + 0.5) - 2
    mask = torch.tensor([[True, False, True], [False, True, i % 2 == 0]])
    if shape == "scalar":
        data, mask = data[0, 2].clone(), torch.tensor(i % 2 == 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MaskedTensor's prototype-stage warning
        return masked_tensor(data, mask)


def _program(x: MaskedTensor) -> tuple[MaskedTensor, str]:
    print("before", 1)
    y = x * 2
    print(y, "after y")
    text = f"{y!r}|{y}|" + repr(y)
    y = y + 1  # a new value after the text was made
    print(str(y))
    return y, text


@pytest.mark.parametrize("shape", ["matrix", "scalar"])
def test_a_masked_tensors_text_shows_each_calls_values(shape: str) -> None:
    jf = jitcore.jit(_program)
    for i in range(3):
        x = _masked(i, shape)
        eager_out = io.StringIO()
        with contextlib.redirect_stdout(eager_out), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = _program(x)
        got_out = io.StringIO()
        with protocol_calls(MaskedTensor) as seen, contextlib.redirect_stdout(got_out), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = jf(_masked(i, shape))
        assert got_out.getvalue() == eager_out.getvalue(), i
        assert got[1] == expected[1] and "MaskedTensor(" in got[1]
        assert type(got[0]) is MaskedTensor
        assert torch.equal(got[0].get_data(), expected[0].get_data())
        assert torch.equal(got[0].get_mask(), expected[0].get_mask())
        if i:
            assert seen == [], seen  # before: the eager entry's 16 dispatches per call
    assert jf.fallback_reason is None and jitcore.cache_misses(jf) == 1


def test_a_masked_tensor_logged_shows_each_calls_values() -> None:
    """``logger.info("%s", m)`` formats the record's message with the same text."""
    import logging

    logger = logging.getLogger("jitcore_test_masked_text")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False

    def f(x: Any) -> Any:
        logger.info("m = %s;", x * 3)
        return x + 1

    try:
        jf = jitcore.jit(f)
        for i in range(3):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f(_masked(i, "matrix"))
                eager_text = stream.getvalue()
                stream.truncate(0)
                stream.seek(0)
                with protocol_calls(MaskedTensor) as seen:
                    jf(_masked(i, "matrix"))
            assert stream.getvalue() == eager_text and "MaskedTensor(" in eager_text
            stream.truncate(0)
            stream.seek(0)
            if i:
                assert seen == [], seen
        assert jf.fallback_reason is None and jitcore.cache_misses(jf) == 1
    finally:
        logger.removeHandler(handler)
