"""A Hugging Face ``transformers`` Llama (2 layers, tiny config, no download) as users call it.

Printed, from one run, with ratios against eager and against ``torch.compile(backend="eager")``
(Dynamo's capture without inductor: the comparison of tracing front ends, so that jitcore column
runs with ``executor="torch"``, no fusion). The forward rows also show jitcore as users get it, with
its default executors (``jc(default)``: torch first, inductor regions once an entry is hot, compiled
in the background; measured after ``wait_for_compiles``), next to ``torch.compile()`` with its
default inductor backend (``tc(ind)``) — the comparison of what each runs, not of front ends:
- forward: the first call (jitcore: interpretation and compilation; torch.compile: Dynamo) and the
  best cached call (CPU time) of ``model(ids)`` in eval mode under ``no_grad``; for the defaults also
  the wall time of 110 calls until jitcore's background lowering is done (against torch.compile's
  first call, which compiles with inductor before it returns);
- greedy ``generate`` with the model's forward replaced by the jitted one (torch.compile's idiom,
  ``model.forward = torch.compile(model.forward)``): the first generation (traces its entries) and
  the best of the later ones (cache hits only), with the number of traces each made.

Run: python benchmarks/bench_hf_llama.py [--new-tokens N]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import torch
import transformers

import jitcore
import jitcore.executors


def _model() -> torch.nn.Module:
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=176,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _cpu(fn, repeat: int = 5, number: int = 20) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(number):
            fn()
        best = min(best, (time.process_time() - start) / number)
    return best


def _first(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--new-tokens", type=int, default=8)
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch._dynamo.config.cache_size_limit = 64
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    gen = dict(attention_mask=torch.ones_like(ids), max_new_tokens=options.new_tokens, do_sample=False,
               pad_token_id=0)

    eager, jitted_model, compiled_model = _model(), _model(), _model()
    jitted = jitcore.jit(jitted_model, executor="torch")
    compiled = torch.compile(compiled_model, backend="eager")
    rows = []
    with torch.no_grad():
        first = {"jitcore": _first(lambda: jitted(ids)), "torch.compile": _first(lambda: compiled(ids))}
        assert torch.allclose(jitted(ids).logits, eager(ids).logits, atol=1e-5)
        cached = {"eager": _cpu(lambda: eager(ids)), "jitcore": _cpu(lambda: jitted(ids)),
                  "torch.compile": _cpu(lambda: compiled(ids))}
    rows.append(("forward, cached call", cached["eager"], cached["jitcore"], cached["torch.compile"]))
    rows.append(("forward, first call", None, first["jitcore"], first["torch.compile"]))
    default_rows = _default_executors(ids, eager, cached["eager"])

    g_eager, g_jit, g_compile = _model(), _model(), _model()
    g_jit.forward = jitcore.jit(g_jit.forward, executor="torch")
    g_compile.forward = torch.compile(g_compile.forward, backend="eager")
    torch._dynamo.utils.counters.clear()
    firsts = {name: _first(lambda m=m: m.generate(ids, **gen))
              for name, m in (("jitcore", g_jit), ("torch.compile", g_compile))}
    traces = {"jitcore": jitcore.cache_misses(g_jit.forward),
              "torch.compile": torch._dynamo.utils.counters["stats"]["unique_graphs"]}
    expected = g_eager.generate(ids, **gen)
    assert torch.equal(g_jit.generate(ids, **gen), expected)
    assert torch.equal(g_compile.generate(ids, **gen), expected)
    later = {name: _cpu(lambda m=m: m.generate(ids, **gen), repeat=3, number=2)
             for name, m in (("eager", g_eager), ("jitcore", g_jit), ("torch.compile", g_compile))}
    assert jitcore.cache_misses(g_jit.forward) == traces["jitcore"], "a later generate traced again"
    rows.append((f"generate {options.new_tokens} tokens, later call", later["eager"], later["jitcore"],
                 later["torch.compile"]))
    rows.append((f"generate {options.new_tokens} tokens, first call", None, firsts["jitcore"],
                 firsts["torch.compile"]))

    widths = ((38, "<"), (10, ">"), (10, ">"), (10, ">"), (9, ">"), (7, ">"))
    header = ("program", "eager", "jitcore", "tc(eager)", "jc/eager", "jc/tc")
    print(" ".join(f"{h:{a}{w}s}" for h, (w, a) in zip(header, widths)))
    for name, e, j, c in rows:
        unit = 1e3 if e is not None else 1.0
        suffix = "ms" if e is not None else "s"
        eager_text = f"{e * unit:8.2f}{suffix}" if e is not None else f"{'':>10s}"
        ratio = f"{j / e:8.2f}x" if e is not None else f"{'':>9s}"
        jit_text, compile_text = f"{j * unit:8.2f}{suffix}", f"{c * unit:8.2f}{suffix}"
        print(f"{name:38s} {eager_text} {jit_text} {compile_text} {ratio} {j / c:6.2f}x")
    print(f"traces made by the first generate: jitcore {traces['jitcore']}, "
          f"torch.compile {traces['torch.compile']} graphs")
    print()
    print("what users get by default: jitcore's executors (torch, inductor once hot) "
          "vs torch.compile() (inductor)")
    print(" ".join(f"{h:{a}{w}s}" for h, (w, a) in zip(
        ("program", "eager", "jc(default)", "tc(ind)", "jc/eager", "jc/tc"), widths)))
    for name, e, j, c in default_rows:
        eager_text = f"{e * 1e3:8.2f}ms" if e is not None else f"{'':>10s}"
        ratio = f"{j / e:8.2f}x" if e is not None else f"{'':>9s}"
        unit, suffix = (1e3, "ms") if e is not None else (1.0, "s")
        jit_text, compile_text = f"{j * unit:8.2f}{suffix}", f"{c * unit:8.2f}{suffix}"
        print(f"{name:38s} {eager_text} {jit_text} {compile_text} {ratio} {j / c:6.2f}x")


def _default_executors(ids: torch.Tensor, eager: torch.nn.Module, eager_cached: float) -> list[tuple]:
    """The forward rows for jitcore's default executors and torch.compile's default backend: the
    first call, then the best cached call once jitcore's entry is hot and lowered."""
    jitted, compiled = jitcore.jit(_model()), torch.compile(_model())
    with torch.no_grad():
        first = {"jitcore": _first(lambda: jitted(ids)), "torch.compile": _first(lambda: compiled(ids))}
        start = time.perf_counter()
        for _ in range(110):  # past fuse_after (100 calls): the entry is lowered in the background
            jitted(ids)
        jitcore.executors.wait_for_compiles(timeout=600)
        lowering = time.perf_counter() - start
        assert torch.allclose(jitted(ids).logits, eager(ids).logits, atol=1e-4)
        assert torch.allclose(compiled(ids).logits, eager(ids).logits, atol=1e-4)
        cached = {"jitcore": _cpu(lambda: jitted(ids)), "torch.compile": _cpu(lambda: compiled(ids))}
    return [("forward, cached call", eager_cached, cached["jitcore"], cached["torch.compile"]),
            ("forward, first call", None, first["jitcore"], first["torch.compile"]),
            ("forward, 110 calls + background lowering", None, lowering, first["torch.compile"])]


if __name__ == "__main__":
    main()
