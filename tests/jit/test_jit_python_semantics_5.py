"""Python semantics under ``jitcore.jit`` found by the differential probes of issue 13 (2026-12-04, late):
programs run eagerly and jitted, their exceptions compared with their chains (``__context__``,
``__cause__``, ``__suppress_context__``), not only their type and message. Each test fails before its fix.
"""

from __future__ import annotations

from typing import Any

import torch
from jit_helpers import exception_chain

import jitcore


def _raised(fn: Any, *args: Any) -> list[tuple[str, str, bool, str]]:
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        return exception_chain(error)
    raise AssertionError(f"{fn} raised nothing")


def test_a_torch_error_has_cpythons_context_not_the_jits() -> None:
    """A torch op that rejects its arguments raises torch's own error, from running it eagerly after its
    fake kernel failed. That error carried the jit's errors as its ``__context__`` (the fake kernel's
    RuntimeError, suppressed), and inside ``except KeyError`` it lacked CPython's context, the KeyError:
    the jit raised it with ``from None`` in its own handler, and the interpreter took the jit's frames for
    native Python code that had chained it (Note [An error the hooks translated]). ``x.item()`` and
    ``bool(x)`` of three elements had a copy of their own error as context: the jit ran the op again with
    eager's kernels inside its handler of the fake kernel's error."""

    def matmul(x: torch.Tensor) -> torch.Tensor:
        return x @ torch.ones(2, 3)

    def view_while_handling(x: torch.Tensor) -> torch.Tensor:
        try:
            raise KeyError("k")
        except KeyError:
            return x.view(4)

    def add_while_handling(x: torch.Tensor) -> torch.Tensor:
        try:
            {}["missing"]
        except KeyError:
            try:
                raise ValueError("v")
            except ValueError:
                return x + torch.ones(2)

    def index_from(x: torch.Tensor) -> torch.Tensor:
        try:
            raise KeyError("k")
        except KeyError as e:
            raise TypeError("t") from e
        finally:
            x[5]

    def item_while_handling(x: torch.Tensor) -> float:
        try:
            raise KeyError("k")
        except KeyError:
            return x.item()

    def truth(x: torch.Tensor) -> int:
        return 1 if x else 0

    for fn in (matmul, view_while_handling, add_while_handling, index_from, item_while_handling, truth):
        jfn = jitcore.jit(fn)
        expected = _raised(fn, torch.ones(2, 3))
        for _ in range(2):
            assert _raised(jfn, torch.ones(2, 3)) == expected, fn.__name__


def test_an_in_place_op_on_a_leaf_that_requires_grad_raises_eagers_words() -> None:
    """``t.add_(1)`` of a leaf that requires grad raised "a view of a leaf Variable that requires grad ..."
    jitted, where eager says "a leaf Variable that requires grad ...": the jit runs an op its fake kernel
    rejects on zero-filled tensors, each a view of a buffer of its storage's size, and a view of a leaf is
    what autograd named."""

    def made_inside(x: torch.Tensor) -> torch.Tensor:
        t = torch.ones(2, requires_grad=True)
        t.add_(x.sum())
        return t

    def passed_in(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        w.mul_(x)
        return w

    jfn = jitcore.jit(made_inside)
    expected = _raised(made_inside, torch.ones(3))
    for _ in range(2):
        assert _raised(jfn, torch.ones(3)) == expected
    jfn = jitcore.jit(passed_in)
    expected = _raised(passed_in, torch.ones(2), torch.ones(2, requires_grad=True))
    for _ in range(2):
        assert _raised(jfn, torch.ones(2), torch.ones(2, requires_grad=True)) == expected


class _Size:
    """An index object: its ``__index__`` returns a number it holds."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n


class _Nested:
    """An index object whose ``__index__`` reads the number through another object."""

    def __init__(self, n: int) -> None:
        self.inner = _Size(n)

    def __index__(self) -> int:
        return self.inner.n


def test_an_index_object_holding_a_dynamic_number_reaches_torch_and_c_as_its_index() -> None:
    """From the call where ``n`` became a dynamic number, an object whose ``__index__`` returns it raised
    "__index__ returned non-int (type NumberProxy)" when handed to torch (``x[:o]``, ``x[o]``,
    ``x.view(o, -1)``, ``torch.zeros(o)``, ``x.narrow(0, 0, o)``): torch called the method natively, and the
    record held the object. Each is now given to torch as ``operator.index(o)`` run interpreted (Note
    [Index objects handed to torch]). An object reading the number through another (``self.inner.n``)
    and handed to C (``range(o)``, ``[0] * o``, ``bytes([o, o])``) raised the same: the numbers such an
    object reaches two levels down, and those of index objects inside lists handed to C, are values for
    the call (Note [Objects handed to C hold values])."""

    def program(x: torch.Tensor, n: int) -> list:
        out = []
        for o in (_Size(n), _Nested(n)):
            out += [x[:o], x[o], x[o:], x[:6].view(o, -1) if 6 % n == 0 else None, torch.zeros(o),
                    x.narrow(0, 0, o), x.view(2, 4)[1, :o]]
        nested = _Nested(n)
        out += [list(range(nested)), [0] * nested, "ab" * nested, bytes([nested, _Size(n)]),
                bytes([_Nested(n), _Nested(n + 1)])]
        return out

    jfn = jitcore.jit(program)
    for n in (2, 3, 4, 1, 3):
        expected = program(torch.arange(8.0), n)
        got = jfn(torch.arange(8.0), n)
        assert len(got) == len(expected)
        for a, e in zip(got, expected):
            assert type(a) is type(e)
            if isinstance(e, torch.Tensor):
                assert torch.equal(a, e), (n, a, e)
            else:
                assert a == e, (n, a, e)
