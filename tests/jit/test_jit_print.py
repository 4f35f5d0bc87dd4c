"""``print`` inside a jitted function prints on every call, as eagerly (jitcore/jit/printing.py).

Each program runs eagerly and under ``jitcore.jit`` for the same calls; what each wrote to stdout and
stderr, and what it returned or raised, must be equal, call by call. A print used to run only while
tracing (with a warning): cached calls printed nothing.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jit_helpers import assert_same_prints, check_eager_entry, run_printing

import jitcore
from jitcore.errors import UnsupportedOperationError

COUNT = {"n": 0}


class Labelled:
    def __str__(self) -> str:
        return f"Labelled({COUNT['n']})"


class Logged(torch.Tensor):
    """A wrapper subclass whose ``__torch_dispatch__`` prints each op, as debugging code does."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Logged:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)  # noqa: SLF001

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, meta: Any, outer_size: Any, outer_stride: Any) -> Logged:
        return Logged(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any = None) -> Any:
        print("dispatch", func)
        unwrapped = [a.inner if isinstance(a, Logged) else a for a in args]
        out = func(*unwrapped, **(kwargs or {}))
        return Logged(out) if isinstance(out, torch.Tensor) else out


def check_prints(fn: Callable[..., Any], calls: list[tuple], *, misses: int = 1,
                 before: Callable[[], None] | None = None, **options: Any) -> Any:
    """``assert_same_prints`` with the counter ``Labelled`` shows reset before each run."""

    def reset() -> None:
        COUNT["n"] = 0

    return assert_same_prints(fn, calls, misses=misses, before=before, reset=reset, **options)


X = torch.arange(4.0)


def test_a_constant_print_runs_on_every_call() -> None:
    def f(x):
        print("step")
        return x + 1

    check_prints(f, [(X,), (X * 2,), (X,)])


def test_sizes_dtypes_and_keywords() -> None:
    def f(x):
        print(x.shape, x.dtype, "n", x.shape[0], sep=" | ", end=" <\n")
        print("to stderr", x.ndim, file=sys.stderr, flush=True)
        print()
        return x * 2

    check_prints(f, [(X,), (X + 1,), (torch.ones(2, 3),), (torch.zeros(2, 3),)], misses=2)


def test_prints_in_a_loop_keep_their_order() -> None:
    def f(x):
        for i in range(3):
            print(i, end=" ")
            x = x + i
        print("done")
        return x

    check_prints(f, [(X,), (X,)])


def test_a_number_read_from_a_tensor_is_printed_from_each_call() -> None:
    """``print(loss.item())`` needs no entry per value: the number is an output of the computation."""

    def f(x):
        loss = (x * x).sum()
        print("loss", loss.item(), "max", x.max().item())
        return loss

    check_prints(f, [(X,), (X * 2,), (X - 3,)])


def test_a_dynamic_number_is_printed_from_each_call() -> None:
    def f(x, lr):
        print("lr", lr, lr * 2)
        return x * lr

    check_prints(f, [(X, 0.1), (X, 0.2), (X, 0.3)], dynamic_numbers=("lr",))


def test_a_print_inside_a_modules_forward() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, x):
            print("forward", tuple(x.shape))
            return self.linear(x)

    net = Net()
    check_prints(lambda x: net(x), [(torch.ones(3, 4),), (torch.zeros(3, 4),)])


def test_an_objects_text_is_made_by_its_own_str_and_guarded() -> None:
    """``print(obj)`` runs ``obj.__str__``, interpreted: what it reads is guarded. The counter it prints
    changes between calls, so from the second entry on it is a dynamic number whose text is made on
    every call (Note [Numbers that change between calls become dynamic]); before, an entry per value."""

    def f(x):
        print(Labelled())
        return x + 1

    def bump() -> None:
        COUNT["n"] += 1

    check_prints(f, [(X,)] * 5, misses=2, before=bump)


def test_a_list_printed_before_and_after_it_changes() -> None:
    def f(x):
        items = [1]
        print(items)
        items.append(2)
        print(items)
        return x

    check_prints(f, [(X,), (X,)])


def test_what_was_printed_before_the_program_raises_is_printed() -> None:
    def f(x):
        print("before", x.sum().item())
        if x.shape[0] == 4:
            raise ValueError("four")
        return x

    expected = run_printing(f, [(X,)])
    with pytest.raises(ValueError, match="four"):
        f(X)
    assert run_printing(jitcore.jit(f), [(X,)]) == expected


def test_prints_inside_a_subclass_dispatch_run_on_every_call_in_order() -> None:
    def f(t):
        print("start")
        return (t * 2).inner

    check_prints(f, [(Logged(X),), (Logged(X * 2),)])


def test_the_stream_is_the_one_the_call_finds() -> None:
    """``contextlib.redirect_stdout`` around a cached call receives its prints."""

    def f(x):
        print("hello")
        return x

    jfn = jitcore.jit(f)
    jfn(X)  # traced, printed to the real stdout
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        jfn(X)
    assert (out.getvalue(), jitcore.cache_hits(jfn)) == ("hello\n", 1)


def test_a_print_to_a_stream_made_inside_runs_eagerly() -> None:
    def f(x):
        buffer = io.StringIO()
        print("text", file=buffer)
        return x + len(buffer.getvalue())

    check_eager_entry(f, X, error=UnsupportedOperationError, match="file=<StringIO>")


def test_the_percent_format_of_a_tensor_runs_eagerly() -> None:
    """``"%s" % x`` (``str`` called by C code) gave the proxy's text: a wrong answer."""
    check_eager_entry(lambda x: "%s" % (x * 2), X, error=UnsupportedOperationError, match="__mod__")


def test_a_logging_warning_and_a_direct_write_are_written_on_every_call() -> None:
    """``logger.warning(...)`` reaches ``sys.stderr.write`` through logging's handler (interpreted): the
    text is recorded as a print of it."""
    logger = logging.getLogger("jitcore_test_print")

    def f(x):
        logger.warning("shape %s", tuple(x.shape))
        sys.stdout.write("direct\n")
        return x + 1

    check_prints(f, [(X,), (X,), (torch.ones(2),)], misses=2)


def test_a_handler_writing_to_stdout_with_its_format() -> None:
    logger = logging.getLogger("jitcore_test_print_stdout")
    logger.propagate = False

    def f(x):
        logger.error("sum of a %s tensor", x.dtype)
        return x.sum()

    written = []
    for fn in (f, jitcore.jit(f)):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            handler = logging.StreamHandler(sys.stdout)  # the stream each call finds as sys.stdout
            handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
            logger.addHandler(handler)
            try:
                fn(X), fn(X)
            finally:
                logger.removeHandler(handler)
        written.append(out.getvalue())
    assert written == ["ERROR jitcore_test_print_stdout: sum of a torch.float32 tensor\n" * 2] * 2


# --- a tensor the program prints (Note [A tensor the program prints], jit/printing.py) ------------------


def test_a_printed_tensor_shows_each_calls_values_as_the_print_found_them() -> None:
    """``print(x)`` ran the whole call eagerly; an in-place op after it must not change what was printed."""

    def f(x):
        y = x * 2
        print("y", y, y.shape, sep=" | ")
        y.add_(1)
        print(y.sum(), file=sys.stderr)
        return y

    check_prints(f, [(X,), (X - 5,), (torch.randn(2, 3),), (torch.randn(2, 3),)], misses=2)


def test_a_printed_tensor_follows_the_print_options_each_call_finds() -> None:
    def f(x):
        print(x / 3)
        return x

    def precision(digits: int) -> Callable[[], None]:
        return lambda: torch.set_printoptions(precision=digits)

    try:
        for digits in (2, 6):
            check_prints(f, [(X,), (X + 1,)], before=precision(digits))
    finally:
        torch.set_printoptions(profile="default")


def test_gradients_and_detached_values_printed_in_a_training_step() -> None:
    model = torch.nn.Linear(3, 2)

    def step(x):
        loss = model(x).pow(2).mean()
        print("loss", loss.detach())
        loss.backward()
        print("grad", model.weight.grad)
        grad = model.weight.grad.clone()
        model.weight.grad = None
        return grad

    torch.manual_seed(0)
    check_prints(step, [(torch.randn(4, 3),) for _ in range(3)])


def test_a_subclass_dispatch_printing_its_inner_results() -> None:
    """Eager prints each op's plain result inside ``__torch_dispatch__``; a warm call prints them from the
    computation, and runs no dispatch."""

    class Shown(Logged):
        @classmethod
        def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any = None) -> Any:
            out = func(*[a.inner if isinstance(a, Logged) else a for a in args], **(kwargs or {}))
            print(func.__name__, out)
            return Shown(out)

    def f(t):
        return (t * 2).sin().inner

    check_prints(f, [(Shown(X),), (Shown(X + 1),)])


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (print(x * 2), x)[1],  # its text names its grad_fn
        lambda x: (print((x * 2,)), x.detach())[1],  # inside another argument: the pass would make its text
        lambda x: (print(torch.nn.Parameter(x.detach())), x.detach())[1],  # a class of its own text
    ],
    ids=["requires_grad", "in_a_tuple", "parameter"],
)
def test_a_printed_tensor_whose_text_the_computation_cannot_give_runs_eagerly(fn) -> None:
    check_eager_entry(fn, torch.arange(3.0, requires_grad=True), error=UnsupportedOperationError,
                      match="print")


def test_an_fstring_of_a_tensor_printed_and_logged_shows_each_calls_values() -> None:
    """The text is made where the f-string is: an in-place op after it does not change it."""
    logger = logging.getLogger("jitcore_test_print_fstring")

    def f(x):
        y = x * 2
        text = f"y = {y!r}, total {y.sum()}"
        y.add_(100)
        print(text, "|", str(y[:2]))
        logger.warning("step: %s", f"{y}")
        return y

    handler = logging.StreamHandler()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        check_prints(f, [(X,), (X - 5,), (torch.randn(2, 3),), (torch.randn(2, 3),)], misses=2,
                     before=lambda: setattr(handler, "stream", sys.stderr))
    finally:
        logger.removeHandler(handler)
