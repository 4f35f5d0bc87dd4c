"""jitcore's main job in a few lines: jit a function, print its traces, run it from the cache."""

import torch

import jitcore


@jitcore.jit
def mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, scale: float = 0.5) -> torch.Tensor:
    hidden = torch.nn.functional.gelu(x @ w1)
    return (hidden @ w2).softmax(dim=-1) * scale


def main() -> None:
    torch.manual_seed(0)
    x, w1, w2 = torch.randn(4, 8), torch.randn(8, 16), torch.randn(16, 3)
    result = mlp(x, w1, w2)  # first call: interpret, record, compile
    again = mlp(x, w1, w2)  # cached call: prologue + computation only
    print(jitcore.last_prologue_traces(mlp)[-1])
    print(jitcore.last_traces(mlp)[-1])
    print("result:\n", result)
    torch.testing.assert_close(result, mlp.fn(x, w1, w2))
    torch.testing.assert_close(again, result)
    mlp(torch.randn(2, 8), w1, w2)  # a new shape: the prologue rejects it, jitcore traces again
    print(f"cache hits: {jitcore.cache_hits(mlp)}, misses: {jitcore.cache_misses(mlp)}")
    for reasons in jitcore.miss_reasons(mlp)[1:]:
        print("retraced because:", "; ".join(str(r) for r in reasons))


if __name__ == "__main__":
    main()
