"""Value reads inside a ``__torch_function__`` that computes its call through other operations, in
passes with symbolic sizes (Note [Reads of spliced subclass code in a symbolic pass],
jitcore/jit/value_reads.py), and ``tolist()`` through a plain subclass's ``__torch_function__`` (Note
[A read in a plain subclass's __torch_function__]).

Differential: every call is compared with eager (values, output types, and what the class logs). The
counts of traces are those of the same program on plain tensors, where before each call with other
values traced again: such reads were constants behind checks, or refused in a symbolic pass (the
function then traced static shapes).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
import torchao.quantization as Q  # a test extra: a missing install fails here, not skips

import jitcore


class Logging(torch.Tensor):
    """A plain subclass whose ``__torch_function__`` logs the functions it is handed."""

    log: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        cls.log.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def _run(program: Any, shapes: list[tuple[int, ...]], cls: type) -> jitcore.JittedFunction:
    """``program`` jitted over calls of ``shapes`` (seeded values), each equal to eager: its result and
    the class's log of the call."""
    jitted = jitcore.jit(program)
    for i, shape in enumerate(shapes):
        torch.manual_seed(i)
        x = torch.randn(shape).as_subclass(cls)
        Logging.log.clear()
        expected, logged = program(x), list(Logging.log)
        Logging.log.clear()
        actual = jitted(x)
        assert Logging.log == logged, (i, Logging.log, logged)
        assert type(actual) is type(expected)
        if isinstance(expected, torch.Tensor):
            torch.testing.assert_close(actual.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
        else:
            torch.testing.assert_close(actual, expected)
    return jitted


_SHAPES = [(4, 6)] * 5 + [(3, 6)]


@pytest.mark.filterwarnings("error:jitcore")  # no call runs eagerly
def test_tolist_through_a_logging_class_hits_as_on_plain_tensors() -> None:
    programs = (lambda x: sum(x.sum(0).tolist()), lambda x: [int(v) * 2 for v in (x > 0).sum(0).tolist()])
    for program in programs:
        plain, logged = _run(program, _SHAPES, torch.Tensor), _run(program, _SHAPES, Logging)
        assert jitcore.cache_misses(logged) <= jitcore.cache_misses(plain) <= 2, jitcore.miss_reasons(logged)


@pytest.mark.filterwarnings("error:jitcore")  # no call runs eagerly
def test_a_mask_through_a_logging_class_gets_a_symbolic_count() -> None:
    jitted = _run(lambda x: x[x > 0].mean() * x.shape[0], _SHAPES * 2, Logging)
    # one entry per count before (9 misses in 12 calls): the static read, then a symbolic one refused
    assert jitcore.cache_misses(jitted) <= 4, jitcore.miss_reasons(jitted)


@pytest.mark.filterwarnings("error:jitcore")  # no call runs eagerly
def test_a_symbolic_entrys_first_call_logs_as_eagerly() -> None:
    """The entry's size input (``x.shape[0]``) is read by the jit, not by the program: the class is
    not handed a ``__get__`` (it was, on the call that made a symbolic entry)."""
    _run(lambda x: x.sum(0) * 2, [(4, 6), (3, 6), (5, 6)], Logging)


@pytest.mark.filterwarnings("error:jitcore")  # no call runs eagerly
def test_codebook_weights_over_changing_batch_sizes_are_one_entry() -> None:
    from torchao.prototype.quantization.codebook.codebook_quantized_tensor import CodebookWeightOnlyConfig

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))
    Q.quantize_(model, CodebookWeightOnlyConfig())
    jitted = jitcore.jit(model)
    for batch in (3, 5, 7, 4, 6):
        x = torch.randn(batch, 64)
        torch.testing.assert_close(jitted(x), model(x))
    # its __torch_function__ reads a number with item(): refused in a symbolic pass before (5 misses)
    assert jitcore.cache_misses(jitted) <= 2, jitcore.miss_reasons(jitted)
