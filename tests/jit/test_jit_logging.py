"""Logging calls inside a jitted function make a record on every call, as eagerly
(jitcore/jit/log_records.py): each test runs the program eagerly and jitted through the same
logger configuration and compares the records' text (file, line, function, level, message)."""

from __future__ import annotations

import io
import logging
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import protocol_calls  # noqa: E402

_FORMAT = "%(levelname)s %(name)s %(filename)s:%(lineno)d %(funcName)s %(message)s"


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    logger = logging.getLogger(f"jitcore_test_logging_{time.perf_counter_ns()}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
    yield logger, stream
    logger.removeHandler(handler)


def _taken(stream: io.StringIO) -> str:
    text = stream.getvalue()
    stream.seek(0)
    stream.truncate()
    return text


def _quiet(jf, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the "runs eagerly" warning of an eager entry
        return jf(*args)


def test_records_carry_each_calls_numbers_and_the_users_line(logged) -> None:
    logger, stream = logged
    adapter = logging.LoggerAdapter(logger, {"run": 1})

    def step(x, i):
        loss = (x * 2).sum()
        logger.info("step %d loss %.3f", i, loss.item())
        logger.debug("never shown %s", i)
        adapter.warning(f"adapter {loss.item():.2f}")
        logger.log(logging.ERROR, "dtype %s shape %s", x.dtype, tuple(x.shape))
        return x - loss

    jf = jitcore.jit(step)
    for i in range(5):
        x = torch.full((3,), float(i))
        expected = step(x, i)
        eager_text = _taken(stream)
        torch.testing.assert_close(jf(x, i), expected)
        assert _taken(stream) == eager_text
    assert "test_jit_logging.py" in eager_text and "step loss" not in eager_text
    assert jitcore.cache_misses(jf) == 2  # the changing step became a dynamic number: one more trace


def test_a_file_handler_gets_a_record_with_its_time_on_every_call(tmp_path: Path) -> None:
    logger = logging.getLogger("jitcore_test_logging_file")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(tmp_path / "run.log")
    handler.setFormatter(logging.Formatter("%(created)f %(message)s"))
    logger.addHandler(handler)
    try:
        jf = jitcore.jit(lambda x: (logger.info("called"), x + 1)[1])
        for _ in range(3):
            jf(torch.ones(1))
            time.sleep(0.002)
        handler.flush()
        lines = (tmp_path / "run.log").read_text().splitlines()
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert [line.split()[1] for line in lines] == ["called"] * 3
    assert len({line.split()[0] for line in lines}) == 3  # each record made when its call ran


def test_the_level_is_guarded_and_the_program_may_ask_it(logged) -> None:
    logger, stream = logged

    def f(x):
        logger.debug("detail %s", x.shape[0])
        if logger.isEnabledFor(logging.DEBUG):
            return x + 1
        return x - 1

    jf = jitcore.jit(f)
    for level in (logging.INFO, logging.INFO, logging.DEBUG, logging.DEBUG, logging.INFO):
        logger.setLevel(level)
        expected = f(torch.zeros(2))
        eager_text = _taken(stream)
        torch.testing.assert_close(jf(torch.zeros(2)), expected)
        assert _taken(stream) == eager_text
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (2, 3)


def test_stacklevel_names_the_helpers_caller(logged) -> None:
    logger, stream = logged

    def warn_about(v):
        logger.warning("value %s", v, stacklevel=2)

    def f(x):
        warn_about(3)
        return x * 2

    f(torch.ones(1))
    eager_text = _taken(stream)
    jf = jitcore.jit(f)
    jf(torch.ones(1))
    jf(torch.ones(1))
    assert _taken(stream) == eager_text * 2
    assert " f value 3" in eager_text


def test_records_logged_before_the_program_raises_are_made(logged) -> None:
    logger, stream = logged

    def f(x, n):
        logger.warning("about to fail with %d", n)
        raise ValueError(n)

    with pytest.raises(ValueError):
        f(torch.ones(1), 4)
    eager_text = _taken(stream)
    with pytest.raises(ValueError):
        jitcore.jit(f)(torch.ones(1), 4)
    assert _taken(stream) == eager_text


@pytest.mark.parametrize("case", ["tensor", "exc_info", "object"])
def test_records_a_cached_call_could_not_make_run_eagerly(logged, case: str) -> None:
    logger, stream = logged

    class Config:
        def __str__(self) -> str:
            return "config"

    def f(x):
        if case == "tensor":
            logger.info("x = %s", x * 3)  # its text names its grad_fn: Note [A tensor the program prints]
        elif case == "exc_info":
            try:
                raise KeyError("k")
            except KeyError:
                logger.exception("caught")
        else:
            logger.info("with %s", Config())
        return x * 2

    jf = jitcore.jit(f)
    for i in range(3):
        x = torch.full((2,), float(i), requires_grad=case == "tensor")
        expected = f(x)
        eager_text = _taken(stream)
        torch.testing.assert_close(_quiet(jf, x), expected)
        assert _taken(stream) == eager_text
    assert "JC-T001" in str(jf.fallback_reason)


_TENSOR_MESSAGES = {
    "s": lambda logger, x: logger.info("val %s", x),
    "r_and_number": lambda logger, x: logger.warning("val %r and %d%%", x, 3),
    "mapping": lambda logger, x: logger.info("val %(a)s at %(b)s", {"a": x * 3, "b": "end"}),
    "before_a_write": lambda logger, x: (logger.info("before %s", x), x.add_(1), logger.info("after %s", x)),
    # Note [A tensor's text with a width]: before, JC-T001 (the call ran eagerly)
    "widths": lambda logger, x: logger.info("val %30s|%-60r|%.8s|%-5s", x, x * 2, x, x),
    "keyed_width": lambda logger, x: logger.info("val %(a)70s at %(b)-6s", {"a": x, "b": "end"}),
}


@pytest.mark.parametrize("kind", ["plain", "TwoTensor"])
@pytest.mark.parametrize("name", sorted(_TENSOR_MESSAGES))
def test_a_tensor_argument_is_formatted_with_each_calls_values(logged, name: str, kind: str) -> None:
    """Note [A record's tensor arguments]: ``logger.info("val %s", x)`` is traced, its text made from each
    call's tensor where the program logs it. Before: JC-T001, the call ran eagerly (TwoTensor's dispatch
    on every call)."""
    logger, stream = logged
    message = _TENSOR_MESSAGES[name]

    def f(x):
        x = x.clone()
        message(logger, x)
        return x * 2

    jf = jitcore.jit(f)
    for i in range(3):
        torch.manual_seed(i)
        x = torch.randn(3) if kind == "plain" else TwoTensor(torch.randn(3), torch.randn(3))
        expected = f(x)
        eager_text = _taken(stream)
        with protocol_calls(TwoTensor) as seen:
            got = jf(x)
        assert _taken(stream) == eager_text, (name, kind, i)
        assert type(got) is type(expected) and torch.equal(got, expected)
        if i:
            assert seen == [], seen
    assert jf.fallback_reason is None and jitcore.cache_misses(jf) == 1
    assert "tensor(" in eager_text
