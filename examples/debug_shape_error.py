"""A shape error two helper calls deep, as jitcore reports it (docs/debugging.md).

python examples/debug_shape_error.py           # the traceback: your frames only, plus a note
python -m jitcore run examples/debug_shape_error.py:model   # the same error via jitcore.report
"""

import torch


def project(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return h @ w


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x)
    return project(h, w)


def model(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return block(x, w) + 1


def example_inputs() -> tuple[tuple, dict]:
    return (torch.randn(4, 8), torch.randn(5, 3)), {}


if __name__ == "__main__":
    import sys

    import jitcore

    args, kwargs = example_inputs()
    run = model if "--eager" in sys.argv else jitcore.jit(model)
    run(*args, **kwargs)
