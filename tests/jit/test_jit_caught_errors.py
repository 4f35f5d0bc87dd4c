"""Ops whose errors depend on tensor values, inside the program's own ``try`` blocks
(jitcore/jit/caught_errors.py, Note [Errors the values decide, inside a try block]): each program is
called with inputs that make the op raise and inputs that do not, eagerly and jitted (cached calls
too); results, exception types and the state a ``finally`` clause inside the block changes equal
eager's."""

from __future__ import annotations

import contextlib
import io
import unittest
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import jitcore


def _inv(a: torch.Tensor) -> torch.Tensor:
    try:
        return torch.linalg.inv(a)
    except torch.linalg.LinAlgError:
        return torch.zeros(1)


def _cholesky(a: torch.Tensor) -> torch.Tensor:
    try:
        return torch.linalg.cholesky(a)
    except RuntimeError:
        return torch.ones(1)


def _index(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    try:
        return x[i]
    except IndexError:
        return torch.full((1,), 7.0)


def _gather(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    try:
        return torch.gather(x, 0, i)
    except RuntimeError:
        return torch.full((1,), 8.0)


def _multinomial(p: torch.Tensor) -> torch.Tensor:
    try:
        return torch.multinomial(p, 1)
    except RuntimeError:
        return torch.full((1,), 9)


def _helper_inside(a: torch.Tensor) -> torch.Tensor:
    def solve(m: torch.Tensor) -> torch.Tensor:
        return torch.linalg.solve(m, torch.ones(2))

    try:
        y = a * 2
        z = solve(y)
    except torch.linalg.LinAlgError:
        z = y.sum(0) + 1
    return z


def _within_finally(a: torch.Tensor, log: list) -> torch.Tensor:
    try:
        try:
            return torch.linalg.inv(a)
        finally:
            log.append(a.shape[0])
    except torch.linalg.LinAlgError:
        return torch.zeros(1)


def _bare_except(a: torch.Tensor) -> torch.Tensor:
    try:
        return torch.linalg.inv(a)
    except:  # noqa: E722 - a bare clause caught jitcore's own refusal and traced its body for every call
        return torch.zeros(1)


def _bare_except_after_typed(a: torch.Tensor) -> torch.Tensor:
    try:
        return torch.linalg.inv(a)
    except KeyError:
        return torch.ones(1)
    except:  # noqa: E722 - a bare clause after typed ones took jitcore's refusal (cpy52's p7_bare.py)
        return torch.zeros(1)


def _refused_print_after_typed(x: torch.Tensor) -> torch.Tensor:
    try:
        print("report", file=io.StringIO())  # a stream made inside: refused (JC-T001), the call runs eagerly
    except KeyError:
        return x - 10
    except:  # noqa: E722 - unittest's testPartExecutor has this shape (test_traceback's reports in subTest)
        return x - 1
    return x + 1


def _suppress(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    y = torch.zeros(1)
    with contextlib.suppress(IndexError):
        y = x[i]
    return y


@contextlib.contextmanager
def _swallowing() -> Iterator[None]:
    try:
        yield
    except (IndexError, RuntimeError):
        pass


class _Swallowing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> bool:
        return exc_info[0] is not None


def _suppressed_by(manager: Callable[[], Any]) -> Callable[..., Any]:
    def f(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        y = torch.zeros(1)
        with manager():
            y = torch.gather(x, 0, i)
        return y

    return f


def _caught(op: Callable[..., Any]) -> Callable[..., Any]:
    def f(*args: Any) -> torch.Tensor:
        try:
            return op(*args)
        except (IndexError, RuntimeError):
            return torch.full((1,), -1.0)

    return f


def _in_exit_stack(register: Callable[[contextlib.ExitStack], Any]) -> Callable[..., Any]:
    def f(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        y = torch.zeros(1)
        with contextlib.ExitStack() as stack:
            register(stack)
            y = x[i]
        return y

    return f


def _set_column_4(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y[:, [4]] = 0.0
    return y


def _log_probs() -> torch.Tensor:
    return torch.linspace(-2.0, 0.0, 20).reshape(5, 1, 4).log_softmax(2)


_SINGULAR, _EYE = torch.zeros(2, 2), torch.eye(2)
_X, _OUT, _IN = torch.arange(3.0), torch.tensor([5]), torch.tensor([1])
PROGRAMS: dict[str, tuple[Callable[..., Any], list[tuple]]] = {
    "inv": (_inv, [(_SINGULAR,), (_EYE,), (_SINGULAR,)]),
    "cholesky": (_cholesky, [(-_EYE,), (_EYE,), (-_EYE,)]),
    "index": (_index, [(torch.arange(3.0), torch.tensor([5])), (torch.arange(3.0), torch.tensor([1]))] * 2),
    "gather": (_gather, [(torch.arange(3.0), torch.tensor([5])), (torch.arange(3.0), torch.tensor([1]))] * 2),
    "multinomial": (_multinomial, [(torch.tensor([-1.0, 1.0]),), (torch.tensor([0.0, 1.0]),)] * 2),
    "helper_inside": (_helper_inside, [(_SINGULAR,), (_EYE,), (_SINGULAR,)]),
    "within_finally": (_within_finally, [(_SINGULAR, []), (_EYE, []), (_SINGULAR, [])]),
    # ops43: a bare ``except:``, ``with`` blocks that suppress, ops raising on values that were not listed,
    # and errors raised while tracing on values the call reads (its handler's trace had no check of them)
    "bare_except": (_bare_except, [(_SINGULAR,), (_EYE,), (_SINGULAR,)]),
    "bare_except_after_typed": (_bare_except_after_typed, [(_SINGULAR,), (_EYE,), (_SINGULAR,), (_EYE,)]),
    "refused_print_after_typed": (_refused_print_after_typed, [(_X,), (_X,)]),
    "suppress": (_suppress, [(_X, _OUT), (_X, _IN), (_X, _OUT)]),
    "contextmanager": (_suppressed_by(_swallowing), [(_X, _OUT), (_X, _IN)]),
    "exit_returning_true": (_suppressed_by(_Swallowing), [(_X, _OUT), (_X, _IN)]),
    "searchsorted_sorter": (_caught(lambda s, so: torch.searchsorted(s, s, sorter=so)),
                            [(_X, torch.tensor([0, 1, 7])), (_X, torch.tensor([0, 1, 2]))] * 2),
    "masked_scatter": (_caught(lambda m: torch.zeros(3).masked_scatter(m, torch.ones(2))),
                       [(torch.tensor([True, True, True]),), (torch.tensor([True, False, True]),)] * 2),
    "max_unpool": (_caught(lambda i: F.max_unpool1d(torch.ones(1, 1, 2), i, 2)),
                   [(torch.tensor([[[0, 9]]]),), (torch.tensor([[[0, 2]]]),)] * 2),
    "segment_reduce": (_caught(lambda n: torch.segment_reduce(_X, "sum", lengths=n)),
                       [(torch.tensor([1, 1]),), (torch.tensor([1, 2]),)] * 2),
    "histc": (_caught(lambda x: torch.histc(x, 3)), [(torch.tensor([float("inf"), 1.0]),), (_X,)] * 2),
    "narrow_tensor_start": (_caught(lambda s: torch.narrow(_X, 0, s, 1)),
                            [(torch.tensor(5),), (torch.tensor(1),), (torch.tensor(2),)]),
    "ctc_loss_lengths": (_caught(lambda n: F.ctc_loss(_log_probs(), torch.tensor([[1, 2]]),
                                                      torch.tensor([5]), n)),
                         [(torch.tensor([9]),), (torch.tensor([2]),)]),
    "sparse_invariants": (_caught(lambda i: torch.sparse_coo_tensor(i, torch.ones(1), (2,),
                                                                     check_invariants=True).to_dense()),
                          [(torch.tensor([[5]]),), (torch.tensor([[1]]),)]),
    # ops44: an int list index (read from a tensor, or constant) is bounds-checked while tracing, and its
    # ints, once a read's value changed (unbacked symbols), count as values the computation checks
    "tolist_index": (_caught(lambda x, i: x[i.tolist()]),
                     [(_X, _IN), (_X, _OUT), (_X, torch.tensor([2])), (_X, torch.tensor([7]))]),
    "tolist_index_out_first": (_caught(lambda x, i: x[i.tolist()]), [(_X, _OUT), (_X, _IN), (_X, _OUT)]),
    "tolist_two_lists": (_caught(lambda x, i: x[i.tolist()]),
                         [(_X, torch.tensor(pair)) for pair in ([1, 0], [0, 5], [2, 1])]),
    "constant_list_index": (_caught(lambda x: x[[0, 5]] + 1), [(_X,), (torch.arange(6.0),), (_X,)]),
    "constant_list_setitem": (_caught(_set_column_4), [(torch.ones(2, 3),), (torch.ones(2, 5),)] * 2),
    # an ExitStack holding an exit that may suppress (pushed, or a context entered into it)
    "exit_stack_push": (_in_exit_stack(lambda stack: stack.push(lambda *exc_info: True)),
                        [(_X, _OUT), (_X, _IN), (_X, _OUT)]),
    "exit_stack_suppress": (_in_exit_stack(lambda st: st.enter_context(contextlib.suppress(IndexError))),
                            [(_X, _OUT), (_X, _IN), (_X, _OUT)]),
}


def _outcome(fn: Callable[..., Any], args: tuple) -> tuple[Any, list]:
    log: list = []
    args = tuple(log if isinstance(a, list) else a for a in args)
    try:
        return fn(*args), log
    except Exception as exc:  # noqa: BLE001 - the exception's type is compared with eager's
        return type(exc), log


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_an_error_the_values_decide_is_caught_by_the_programs_handler(name: str) -> None:
    fn, calls = PROGRAMS[name]
    jf = jitcore.jit(fn)
    for k, args in enumerate(calls):
        expected, expected_log = _outcome(fn, args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, got_log = _outcome(jf, args)
        if isinstance(expected, torch.Tensor):
            assert isinstance(got, torch.Tensor) and got.dtype == expected.dtype, (k, got)
            assert torch.equal(got, expected), (k, got, expected)
        else:
            assert got is expected, (k, got, expected)
        assert got_log == expected_log, (k, got_log, expected_log)


@contextlib.contextmanager
def _restoring(state: dict) -> Iterator[None]:
    state["depth"] += 1
    try:
        yield
    finally:
        state["depth"] -= 1


class _Quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


def test_a_with_block_that_cannot_suppress_keeps_the_op_traced() -> None:
    """``with`` blocks whose exit cannot suppress the op's error (``torch.no_grad``, a ``suppress`` of
    other classes, an ``__exit__`` returning None, a generator with no ``except`` clause) keep it traced."""
    state = {"depth": 0}

    def f(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), contextlib.suppress(KeyError), _Quiet(), _restoring(state):
            return x[i] * 2

    jf = jitcore.jit(f, fullgraph=True)
    for i in (torch.tensor([1]), torch.tensor([2])):
        assert torch.equal(jf(_X, i), f(_X, i))
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_hits(jf) == 1
    with pytest.raises(IndexError):
        jf(_X, _OUT)
    assert state["depth"] == 0


def test_an_exit_stack_whose_callbacks_cannot_suppress_keeps_the_op_traced() -> None:
    closed: list = []

    def f(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        with contextlib.ExitStack() as stack:
            stack.callback(closed.append, 1)  # returns None whatever its function returns
            stack.enter_context(torch.no_grad())
            return x[i] * 2

    jf = jitcore.jit(f, fullgraph=True)
    for i in (torch.tensor([1]), torch.tensor([2])):
        assert torch.equal(jf(_X, i), f(_X, i))
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_hits(jf) == 1
    with pytest.raises(IndexError):
        jf(_X, _OUT)


def test_the_same_ops_outside_a_try_block_are_traced() -> None:
    def f(a: torch.Tensor, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # a with block is no try block
            y = x[i] + torch.gather(x, 0, i)
        try:
            z = x[0]  # no index tensor: its errors are the sizes', raised while tracing
        except IndexError:
            z = x[1]
        return torch.linalg.inv(a).sum() + y.sum() + z

    jf = jitcore.jit(f)
    for _ in range(2):
        args = (_EYE, torch.arange(3.0), torch.tensor([1, 2]))
        assert torch.equal(jf(*args), f(*args))
    assert jf.fallback_reason is None and jitcore.cache_hits(jf) == 1
    with pytest.raises(torch.linalg.LinAlgError):  # outside a try block the error leaves the call as eager's
        jf(_SINGULAR, torch.arange(3.0), torch.tensor([1, 2]))


_NOT_VALUE_ERRORS = (TypeError, KeyError)


def _table_lookup(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    try:  # torchao's NF4 ``__torch_function__``: its table's op inside a try that catches only this
        y = x[i] * 2
    except NotImplementedError:
        y = x
    try:
        z = torch.gather(x, 0, i)
    except (TypeError, KeyError):
        z = x
    try:
        w = torch.index_select(x, 0, i)
    except _NOT_VALUE_ERRORS:
        w = x
    return y.sum() + z.sum() + w.sum()


def test_a_clause_that_cannot_catch_a_value_error_keeps_the_op_traced() -> None:
    """An ``except`` clause whose classes catch none of the errors the op raises on values (an
    IndexError, a RuntimeError, a LinAlgError, a ValueError) lets such an error through as the
    computation does: the op stays traced (it made every torchao NF4 model run eagerly), and its error
    leaves the call as eager's."""
    jf = jitcore.jit(_table_lookup, fullgraph=True)
    x = torch.arange(4.0)
    for i in (torch.tensor([1, 2]), torch.tensor([0, 3])):
        assert torch.equal(jf(x, i), _table_lookup(x, i))
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_hits(jf) == 1
    with pytest.raises(IndexError):
        _table_lookup(x, torch.tensor([9]))
    with pytest.raises(IndexError):
        jf(x, torch.tensor([9]))


def _select_safe(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    try:  # torch_geometric's MessagePassing._index_select_safe: every path of the clause raises
        return src.index_select(0, index)
    except (IndexError, RuntimeError) as e:
        if index.numel() > 0 and index.min() < 0:
            raise IndexError(f"negative indices (got {index.min().item()})") from e
        if index.numel() > 0 and index.max() >= src.size(0):
            raise IndexError(f"indices larger than {src.size(0) - 1}") from e
        raise e


def _select_or_default(src: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    try:
        return src.index_select(0, index)
    except IndexError:
        if index.numel() == 0:
            raise
        return src[:1]


def test_a_clause_whose_every_path_raises_keeps_the_op_traced() -> None:
    """A clause that always raises again (with its own message) cannot turn the error into a value: the
    op stays traced (it made every torch_geometric model run eagerly), and an index out of range raises
    eager's IndexError type; a clause with a path that returns still makes the call run eagerly."""
    src = torch.arange(6.0).reshape(3, 2)
    jf = jitcore.jit(lambda s, i: _select_safe(s, i) * 2, fullgraph=True)
    for index in (torch.tensor([0, 2]), torch.tensor([1, 1])):
        assert torch.equal(jf(src, index), _select_safe(src, index) * 2)
    assert jitcore.cache_misses(jf) == 1
    with pytest.raises(IndexError):
        _select_safe(src, torch.tensor([7]))
    with pytest.raises(IndexError):
        jf(src, torch.tensor([7]))
    with pytest.raises(jitcore.UnsupportedOperationError, match="inside a try block"):
        jitcore.jit(_select_or_default, fullgraph=True)(src, torch.tensor([0]))


class _Unrelated(Exception):
    pass


@contextlib.contextmanager
def _catching_key_errors(log: list) -> Iterator[None]:
    try:
        yield
    except KeyError:
        log.append("key")


@contextlib.contextmanager
def _catching_unrelated(log: list) -> Iterator[None]:
    try:
        yield
    except _Unrelated:
        log.append("unrelated")


def _under(manager: Callable[[list], Any]) -> Callable[..., Any]:
    def f(x: torch.Tensor, i: torch.Tensor, log: list) -> torch.Tensor:
        with manager(log):
            y = torch.gather(x, 0, i) * 2
        return y

    return f


@pytest.mark.parametrize("manager", [_catching_key_errors, _catching_unrelated])
def test_a_contextmanager_whose_clause_cannot_catch_a_value_error_keeps_the_op_traced(
        manager: Callable[[list], Any]) -> None:
    """A ``@contextmanager`` whose ``except`` clause around its ``yield`` catches none of the errors the op
    raises on values counts as a ``try`` block's clause does: the op is traced (it was refused for any
    clause: JC-T001 under fullgraph), and an index out of range raises eager's error."""
    fn = _under(manager)
    jf = jitcore.jit(fn, fullgraph=True)
    for i in (torch.tensor([1]), torch.tensor([2])):
        assert torch.equal(jf(_X, i, []), fn(_X, i, []))
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_hits(jf) == 1
    log: list = []
    with pytest.raises(RuntimeError, match="out of bounds"):
        jf(_X, _OUT, log)
    assert log == []


def _wrapped_error(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    try:
        return x[i] * 2
    except IndexError as e:
        raise ValueError("bad index") from e


def _caught_after_rewrap(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    try:
        try:
            return x[i] * 2
        except IndexError:
            raise KeyError("k") from None
    except KeyError:
        return x.sum()


@contextlib.contextmanager
def _rewrapping(log: list) -> Iterator[None]:
    try:
        yield
    except RuntimeError as e:
        log.append("rewrapped")
        raise LookupError("gather failed") from e


def _random_then_rewrap(x: torch.Tensor, i: torch.Tensor, log: list) -> torch.Tensor:
    noise = torch.rand(3)
    log.append(len(log))
    try:
        return x[i] + noise
    except IndexError:
        log.append("caught")
        raise


def _assert_raises(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    with unittest.TestCase().assertRaises(IndexError):  # the standard library's exit returns True
        x[i]
    return x + 1


_INDICES = [torch.tensor([1]), torch.tensor([7]), torch.tensor([2]), torch.tensor([9])]
_SKIPPED_HANDLERS: dict[str, Callable[..., Any]] = {
    "clause_raises_another_error": _wrapped_error,
    "outer_clause_catches_the_other_error": _caught_after_rewrap,
    "contextmanager_raises_another_error": _under(_rewrapping),
    "random_draws_and_effects": _random_then_rewrap,
    "library_exit_suppresses": _assert_raises,
}


def _seeded_outcome(fn: Callable[..., Any], args: tuple) -> tuple[Any, list]:
    torch.manual_seed(0)
    return _outcome(fn, args)


@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("name", list(_SKIPPED_HANDLERS))
def test_handlers_a_raising_computation_skips_give_eagers_outcome(name: str, fullgraph: bool) -> None:
    """Note [Handlers a raising computation skips] (jit/caught_errors.py): a clause that catches the op's
    error only to raise another, and a library exit that may suppress it, were passed over, and the
    computation's IndexError left the call where eager raised ValueError, returned a value, or passed
    ``assertRaises``. The op stays traced; a call whose computation raises runs eagerly."""
    fn = _SKIPPED_HANDLERS[name]
    jf = jitcore.jit(fn, fullgraph=fullgraph)
    takes_log = "log" in fn.__code__.co_varnames[:fn.__code__.co_argcount]
    for k, i in enumerate(_INDICES):
        args = (_X, i, []) if takes_log else (_X, i)
        expected, expected_log = _seeded_outcome(fn, args)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no eager entry, and no "jitcore bug" warning
            got, got_log = _seeded_outcome(jf, args)
        if isinstance(expected, torch.Tensor):
            assert isinstance(got, torch.Tensor) and torch.equal(got, expected), (k, got, expected)
        else:
            assert got is expected, (k, got, expected)
        assert got_log == expected_log, (k, got_log, expected_log)
    assert jf.fallback_reason is None
