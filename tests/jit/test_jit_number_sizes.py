"""Dynamic numbers that torch takes as sizes are symbols of the trace (Note [Dynamic numbers as sizes],
jitcore/jit/number_sizes.py): an int argument seen with two values, or a counter of state, given to
``view``, ``arange``, a slice, ``repeat``, is one entry for every value the prologue's size conditions
accept, as torch.compile's dynamic ints. Every call is compared with eager.
"""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from jit_helpers import assert_same

import jitcore


class _Window:
    """A cache that counts the tokens it has seen (a sliding-window KV cache's ``cumulative_length``)."""

    def __init__(self) -> None:
        self.length = 0


def _attend(cache: _Window, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    cache.length += 1
    start = max(cache.length - 3, 0)
    window = keys[:, start:cache.length]
    positions = torch.arange(start, cache.length)
    return (window * x).sum() + positions.sum()


def test_a_counter_of_state_in_a_slice_is_a_symbol() -> None:
    """The counter's bounds in ``keys[:, start:length]`` were left in the slice as names the
    computation never defined (UnboundLocalError on the first cached call); now the slice's bounds are
    sizes like any other: after the window fills, every step is a hit."""
    eager_cache, jitted_cache = _Window(), _Window()
    jf = jitcore.jit(_attend)
    keys = torch.randn(2, 20)
    for _ in range(12):
        x = torch.randn(1)
        assert_same(jf(jitted_cache, x, keys), _attend(eager_cache, x, keys))
    assert jitted_cache.length == eager_cache.length == 12
    assert jitcore.cache_misses(jf) <= 3, jitcore.miss_reasons(jf)


def _padded_attend(cache: _Window, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    cache.length += x.shape[0]
    padding = cache.length + 1 - mask.shape[-1]  # a dynamic number beside a size
    if padding > 0:
        mask = torch.nn.functional.pad(mask, (0, padding), value=1.0)
    return (x.sum() * mask[: cache.length]).sum() + padding


def test_a_counter_of_state_beside_a_size_is_a_symbol() -> None:
    """``cache.length + 1 - mask.shape[-1]`` with a symbolic mask length raised TypeError (a
    NumberProxy and a SymInt have no operator in common), so each call after it traced static shapes:
    an entry per step. Now the counter is its symbol there (Note [A dynamic number beside a size])."""
    eager_cache, jitted_cache = _Window(), _Window()
    jf = jitcore.jit(_padded_attend)
    for step in range(10):
        x, mask = torch.randn(1), torch.rand(step + 1 if step % 3 else step)
        assert_same(jf(jitted_cache, x, mask), _padded_attend(eager_cache, x, mask))
    assert jitted_cache.length == eager_cache.length == 10
    assert jitcore.cache_misses(jf) <= 4, jitcore.miss_reasons(jf)


class _Seen:
    def __init__(self) -> None:
        self.width, self.total, self.shapes = None, 0, []


def _record_sizes(seen: _Seen, x: torch.Tensor) -> torch.Tensor:
    seen.width = x.shape[1]
    seen.total += x.shape[0]
    seen.shapes.append(tuple(x.shape))
    return x.sum(0) * seen.total


def test_sizes_stored_into_state_are_each_calls() -> None:
    """A size stored into Python state (an attribute, a counter, a list's items) kept static shapes: an
    entry per shape. It is computed per call now (Note [A size stored into state], jit/effects.py)."""
    eager, jitted = _Seen(), _Seen()
    jf = jitcore.jit(_record_sizes)
    for n in (3, 4, 5, 6, 7, 3):
        x = torch.randn(n, n + 1)
        assert_same(jf(jitted, x), _record_sizes(eager, x))
        assert vars(jitted) == vars(eager) and type(jitted.width) is type(jitted.total) is int
    assert jitcore.cache_misses(jf) == 2


def _prefill_then_decode(cache: _Window, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    cache.length += x.shape[0]  # the prompt's length, then one token per step
    return keys[: cache.length].sum() * x.sum()


def test_prompts_of_new_lengths_keep_the_symbolic_entries() -> None:
    """A sliding-window cache adds the prompt's length (a symbolic size) to its count: each new prompt
    length was a static entry of its own."""
    keys, jf = torch.randn(64), jitcore.jit(_prefill_then_decode)
    for prompt in (8, 6, 10, 7, 5):
        eager_cache, jitted_cache = _Window(), _Window()
        for x in [torch.randn(prompt)] + [torch.randn(1) for _ in range(3)]:
            assert_same(jf(jitted_cache, x, keys), _prefill_then_decode(eager_cache, x, keys))
            assert jitted_cache.length == eager_cache.length
    assert jitcore.cache_misses(jf) <= 4, jitcore.miss_reasons(jf)


@pytest.mark.parametrize("program", [
    lambda x, n: x.view(n, -1).sum(1) + torch.arange(n),
    lambda x, n: x.flatten()[: n + 1].cumsum(0),
    lambda x, n: x.repeat(n, 1).mean(0) * torch.ones(n, 1),
    lambda x, n: torch.zeros(n, 3).index_add(0, torch.arange(n) % 2, torch.ones(n, 3)),
])
def test_a_changing_size_argument_is_one_symbolic_entry(program) -> None:
    jf = jitcore.jit(program)
    x = torch.randn(4, 6)
    for n in (2, 3, 6, 8, 12, 3):  # not 4, 24: view(4, -1), view(24, -1) are cases torch tells apart
        assert_same(jf(x, n), program(x, n))
    assert jitcore.cache_misses(jf) == 2  # the first value; then one symbolic entry


def test_a_size_condition_torch_assumed_is_checked_by_the_prologue() -> None:
    """``x.view(n, -1)`` holds for n dividing 24: another n misses that entry and raises as eagerly."""

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x.view(n, -1)

    jf = jitcore.jit(f)
    x = torch.randn(24)
    for n in (2, 3, 4):
        assert_same(jf(x, n), f(x, n))
    with pytest.raises(RuntimeError, match="invalid for input of size 24"):
        f(x, 5)
    with pytest.raises(RuntimeError, match="invalid for input of size 24"):
        jf(x, 5)
    assert_same(jf(x, 6), f(x, 6))


_SLIDING = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=64, vocab_size=100, max_position_embeddings=64, sliding_window=4)


@pytest.mark.parametrize("config, padded", [
    (transformers.Gemma2Config(**_SLIDING, head_dim=8), False),
    (transformers.MistralConfig(**_SLIDING), True),
], ids=["gemma2", "mistral-padded"])
def test_a_sliding_window_model_generates_with_three_entries(config, padded) -> None:
    """Gemma2's sliding-window cache slices by its ``cumulative_length``: one entry per decoding step
    before; now as many entries as a model without the window. With a padded batch the mask's length
    (a size) meets the window's length (a dynamic number): an entry per step before (Note [A dynamic
    number beside a size])."""
    torch.manual_seed(0)
    eager = transformers.AutoModelForCausalLM.from_config(config).eval()
    jitted = copy.deepcopy(eager)
    jitted.forward = jitcore.jit(jitted.forward)
    ids = torch.randint(3, 100, (2, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    if padded:
        ids[0, :2], mask[0, :2] = 0, 0  # left padding, as a tokenizer pads a batch for generation
    for seed in (5, 6):
        outputs = []
        for model in (eager, jitted):
            torch.manual_seed(seed)
            outputs.append(model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                          top_k=20, max_new_tokens=8, pad_token_id=0))
        assert torch.equal(outputs[0], outputs[1])
    assert jitcore.cache_misses(jitted.forward) <= 3, jitcore.miss_reasons(jitted.forward)
