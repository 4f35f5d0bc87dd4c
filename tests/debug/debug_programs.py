"""Programs the debugging tests jit: kept in their own file so tracebacks name known lines."""

from __future__ import annotations

import torch


def project(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return h @ w


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x)
    return project(h, w)


def shape_error_model(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return block(x, w) + 1


def mixed_dtypes(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, i)


def lookup(table: dict, name: str) -> int:
    return table[name]


def missing_key(x: torch.Tensor) -> torch.Tensor:
    return x * lookup({"a": 1}, "b")


def branch_on_values(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x + 1
    return x - 1


def registers_a_hook(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    x.register_hook(print)
    return y.sum()


def pick(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    return x.index_select(0, i)


def gather_rows(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    y = x * 2
    return pick(y, i)


def subtract(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a - b


def subclass_subtract(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return subtract(a, b)


def scale_shift(a: torch.Tensor) -> torch.Tensor:
    return a * 2 + 1


def helper(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(h @ w)


def mlp(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x * 2
    z = helper(y, w)
    return z.sum(dim=0) + 1


def with_breakpoint(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    breakpoint()  # noqa: T100 - the marker jitcore.debug stops at
    return y + 1


def uses_print(x: torch.Tensor) -> torch.Tensor:
    print("tracing")
    return x * 2


def line_of(fn: object, text: str) -> int:
    """The line number of the first line of ``fn``'s source containing ``text``."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def noisy(x: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.dropout(x, 0.5, training=True)
    return y * 2


class Doubler:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def doubled_plus_one(x: torch.Tensor) -> torch.Tensor:
    y = Doubler()(x)
    return y + 1
