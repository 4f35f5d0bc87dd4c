"""Programs that read tensor values (issue 14) and a tiny Hugging Face Llama (issue 13), in one run.

1. A 20-op elementwise function with one ``nonzero`` in the middle (its count is a checked read):
   the cached call of jitcore vs eager and ``torch.compile(backend="eager")`` (which splits its
   graph there). Goal: <= 1.1x eager.
2. The same ops timing themselves with ``time.perf_counter()`` (the elapsed time appended to a log)
   and scaled by ``random.uniform``: clock reads and random draws made anew by every call (before
   they made every call run eagerly). torch.compile(backend="eager") breaks its graph at each.
3. A loss over the elements a mask picks (``((x - y) ** 2)[y > 0].mean()``), called on 200 fresh
   input pairs in turn: the mask's count changes on nearly every call (Note [Sizes that values
   decide]: it is symbolic from the second trace on). Per-call time and the number of traces.
4. k-means that stops after 2 to 5 rounds (``if torch.allclose(new, c): break``), called on 100 fresh
   inputs in turn: each round count is its own cache entry, and a cached call that an entry's check
   sends away goes on in the entry that computed the same up to it (Note [Resuming at a failed check],
   jitcore/jit/read_resume.py). Interleaved with the same entries going on from the start (the code
   before it), eager and torch.compile(backend="eager"), best of several rounds each.
5. ``jitcore.jit(model)`` on a 2-layer ``transformers`` Llama from a tiny config, forward in eval
   mode: first call (tracing included) and cached call vs eager and torch.compile(backend="eager").

Ratios are to eager's time for the same calls. Cached calls are timed after 110 warm calls and
``wait_for_compiles``: jitcore's default executors lower an entry once it is hot (100 calls), on a
background thread, and that compile must not run inside the timed loop (it took the GIL and a core
from it: 4x eager for part 1 in a run that did not wait). Run: python benchmarks/bench_value_reads.py
"""

from __future__ import annotations

import random
import time
import warnings

import torch

import jitcore
from jitcore.executors.background import wait_for_compiles


def twenty_ops(x):
    y = (x * 1.5 + 0.25).sin()
    y = y * y - x
    y = y.abs().sqrt() + 1
    y = torch.tanh(y) * 3
    idx = torch.nonzero(y > 2.0)
    z = y.exp() - idx.shape[0]
    z = z / (z.abs() + 1)
    z = z.cos() + z.sin()
    z = z.clamp(-1.0, 1.0) * 2
    return z.relu() + idx.sum()


TIMINGS: list[float] = []


def timed_twenty_ops(x):
    start = time.perf_counter()
    y = (x * random.uniform(1.0, 2.0) + 0.25).sin()
    y = y * y - x
    y = y.abs().sqrt() + 1
    y = torch.tanh(y) * 3
    z = y.exp() - 1
    z = z / (z.abs() + 1)
    z = z.cos() + z.sin()
    z = z.clamp(-1.0, 1.0) * 2
    TIMINGS.append(time.perf_counter() - start)
    return z.relu()


def masked_loss(x, y):
    loss = (x - y) ** 2
    return loss[y > 0].mean() + 0.1 * loss.mean()


def changing_counts(pairs: list[tuple[torch.Tensor, torch.Tensor]], rounds: int) -> None:
    """Part 3: each function called on every pair once to warm up (jitcore's entry is hot by then:
    its background lowering is waited for), then the best of ``rounds`` rounds over all pairs."""
    print(f"a masked loss on {len(pairs)} fresh input pairs in turn (the mask's count changes):")
    makes = {
        "eager": lambda: masked_loss,
        "jitcore": lambda: jitcore.jit(masked_loss),
        "torch.compile(eager)": lambda: torch.compile(masked_loss, backend="eager"),
    }
    times = {}
    for name, make in makes.items():
        torch._dynamo.reset()  # noqa: SLF001
        fn = make()
        for x, y in pairs:
            fn(x, y)
        wait_for_compiles(60.0)
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            for x, y in pairs:
                fn(x, y)
            best = min(best, time.perf_counter() - start)
        times[name] = best / len(pairs) * 1e6
        traces = f"   {jitcore.cache_misses(fn)} traces" if name == "jitcore" else ""
        print(f"  {name:22s} call {times[name]:9.1f} us   {times[name] / times['eager']:6.2f}x eager{traces}")
    print(f"  jitcore / torch.compile(eager): {times['jitcore'] / times['torch.compile(eager)']:.2f}x")


def kmeans(x, c, iters):
    for _ in range(iters):
        d = torch.cdist(x, c)
        a = d.argmin(1)
        new = torch.zeros_like(c).index_add_(0, a, x)
        cnt = torch.bincount(a, minlength=c.size(0)).clamp(min=1).unsqueeze(1)
        new = new / cnt
        if torch.allclose(new, c):
            break
        c = new
    return c, a


def entries_told_apart(calls: list[tuple], rounds: int) -> None:
    """Part 4: warm calls (past jitcore's fuse_after, its lowering waited for), then ``rounds`` rounds,
    each timing every variant over all calls in turn; the best round of each."""
    from jitcore.jit import read_resume

    print(f"k-means over {len(calls)} fresh inputs (2 to 5 rounds, each count an entry), per call:")
    jitted = jitcore.jit(kmeans)
    compiled = torch.compile(kmeans, backend="eager")

    def from_the_start(*args):
        read_resume.ENABLED = False
        try:
            return jitted(*args)
        finally:
            read_resume.ENABLED = True

    variants = {"eager": kmeans, "jitcore": jitted, "jitcore, from the start": from_the_start,
                "torch.compile(eager)": compiled}
    for fn in variants.values():
        for _ in range(3):
            for args in calls:
                fn(*args)
    wait_for_compiles(600.0)
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(rounds):
        for name, fn in variants.items():
            start = time.perf_counter()
            for args in calls:
                fn(*args)
            best[name] = min(best[name], (time.perf_counter() - start) / len(calls) * 1e6)
    for name, us in best.items():
        print(f"  {name:24s} call {us:9.1f} us   {us / best['eager']:6.2f}x eager   "
              f"{us / best['torch.compile(eager)']:6.2f}x torch.compile(eager)")
    print(f"  {jitcore.cache_misses(jitted)} traces")


def per_call_us(fn, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls * 1e6


def first_call_ms(make, args) -> tuple[float, object]:
    torch._dynamo.reset()  # noqa: SLF001
    fn = make()
    start = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - start) * 1e3, fn


def report(title: str, makes: dict, args: tuple, calls: int) -> None:
    print(title)
    results = {}
    for name, make in makes.items():
        first, fn = first_call_ms(make, args)
        per_call_us(fn, args, 110)  # warm, past jitcore's fuse_after (100 calls): the entry is hot
        wait_for_compiles(600.0)  # its lowering, in the background, is done before the timed calls
        results[name] = (first, per_call_us(fn, args, calls))
    eager_first, eager_call = results["eager"]
    compiled_call = results["torch.compile(eager)"][1]
    for name, (first, call) in results.items():
        print(f"  {name:22s} first call {first:9.1f} ms   cached call {call:9.1f} us   "
              f"{call / eager_call:6.2f}x eager   {call / compiled_call:6.2f}x torch.compile(eager)")


def main() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    x = torch.randn(256)
    makes = {
        "eager": lambda: twenty_ops,
        "jitcore": lambda: jitcore.jit(twenty_ops),
        "torch.compile(eager)": lambda: torch.compile(twenty_ops, backend="eager"),
    }
    per_call_us(twenty_ops, (x,), 50)
    report("20 ops with a nonzero in the middle, 256 elements:", makes, (x,), 2000)
    timed_makes = {
        "eager": lambda: timed_twenty_ops,
        "jitcore": lambda: jitcore.jit(timed_twenty_ops),
        "torch.compile(eager)": lambda: torch.compile(timed_twenty_ops, backend="eager"),
    }
    report("the same ops timing themselves, scaled by random.uniform:", timed_makes, (x,), 2000)
    changing_counts([(torch.randn(1000), torch.randn(1000)) for _ in range(200)], 10)
    g = torch.Generator().manual_seed(3)
    points = [(torch.randn(30, 2, generator=g), torch.randn(3, 2, generator=g), 5) for _ in range(100)]
    entries_told_apart(points, 7)

    try:
        import transformers
    except ImportError:
        print("transformers is not installed: the Llama part is skipped")
        return
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 128, (1, 16))
    with torch.no_grad():
        model_makes = {
            "eager": lambda: model,
            "jitcore": lambda: jitcore.jit(model),
            "torch.compile(eager)": lambda: torch.compile(model, backend="eager"),
        }
        report(
            "2-layer transformers Llama (hidden 64), batch 1 x 16 tokens, eval, no_grad:",
            model_makes,
            (ids,),
            200,
        )


if __name__ == "__main__":
    main()
