"""An example for jitcore's debugging tools (docs/debugging.md).

python -m jitcore explain examples/debug_mlp.py:mlp
python -m jitcore debug examples/debug_mlp.py:mlp
"""

import torch


def project(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return h @ w


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(project(x, w))


def mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, scale: float = 0.5) -> torch.Tensor:
    hidden = block(x, w1)
    return (hidden @ w2).softmax(dim=-1) * scale


def example_inputs() -> tuple[tuple, dict]:
    torch.manual_seed(0)
    return (torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 3)), {}


if __name__ == "__main__":
    import jitcore

    jitted = jitcore.jit(mlp)
    args, kwargs = example_inputs()
    jitted(*args, **kwargs)
    jitcore.explain(jitted)
