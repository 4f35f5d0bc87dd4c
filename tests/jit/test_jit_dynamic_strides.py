"""Inputs whose strides change at the same sizes: symbolic strides (Note [Strides seen to change],
jitcore/jit/shapes.py) and the storage offset checked apart from them (Note [Strides apart from the
storage offset], jitcore/langctx/layout.py). Each program runs eagerly and jitted on equal inputs, call
after call: values, and what the call wrote into its inputs, are compared; so is the number of traces."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
import transformers  # a test extra: a missing install fails here, not skips

import jitcore


def _window(length: int, seed: int, width: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """The last ``width`` positions of a buffer of ``length``: a sliding-window cache's keys."""
    full = torch.randn(2, 2, length, 8, generator=torch.Generator().manual_seed(seed))
    return full, full[:, :, -width:, :]


EXECUTORS = pytest.mark.parametrize("executors", [("torch",), ("inductor", "torch")],
                                    ids=["torch", "inductor"])


@EXECUTORS
def test_attention_over_windows_of_a_growing_buffer_keeps_one_entry(executors) -> None:
    """SDPA's output comes back the way its kernel lays it out, and ``contiguous()`` returned it itself:
    a decision made from a layout that derives from the keys, so their strides were checked, and every
    buffer length (prompt length) was one more entry (5 of 5 calls before)."""

    def f(q, k, v):
        y = F.scaled_dot_product_attention(q, k, v)
        return y.transpose(1, 2).contiguous().view(q.shape[0], q.shape[2], -1)

    jf = jitcore.jit(f, executors=executors)
    for seed, length in enumerate((8, 9, 10, 11, 12)):
        (_, k), (_, v) = _window(length, seed), _window(length, seed + 100)
        q = torch.randn(2, 2, 1, 8, generator=torch.Generator().manual_seed(seed + 200))
        torch.testing.assert_close(jf(q, k, v), f(q, k, v), rtol=0, atol=0)
    assert jitcore.cache_misses(jf) == 2, jitcore.miss_reasons(jf)
    assert "stride()" in str(jitcore.miss_reasons(jf)[1][0])


@EXECUTORS
def test_a_layout_decision_still_tells_entries_apart(executors) -> None:
    """``contiguous()`` returns a contiguous input itself, so the in-place add writes the caller's
    tensor; a window of a buffer is copied first and the buffer is left alone. Windows of buffers of any
    width share the entry with symbolic strides; a contiguous input and a transposed one do not."""

    def f(x):
        y = x.contiguous()
        y.add_(1)
        return y.view(-1) * 2

    def inputs(case) -> tuple[torch.Tensor, torch.Tensor]:
        if case == "contiguous":
            x = torch.arange(12.0).reshape(4, 3)
            return x, x
        if case == "transposed":
            x = torch.arange(12.0).reshape(3, 4).t()
            return x, x
        full = torch.arange(4.0 * case).reshape(4, case)
        return full, full[:, -3:]

    jf = jitcore.jit(f, executors=executors)
    for case in ("contiguous", 7, 8, 9, "contiguous", 10, "transposed", "contiguous", 11):
        (buffer_a, a), (buffer_b, b) = inputs(case), inputs(case)
        assert torch.equal(jf(b), f(a)), case
        assert torch.equal(buffer_b, buffer_a) and torch.equal(b, a), case
    assert jitcore.cache_misses(jf) == 3, jitcore.miss_reasons(jf)


def test_windows_that_require_grad_get_eagers_gradients() -> None:
    def f(k, w):
        return (k.transpose(1, 2).reshape(2, 5, -1) @ w).tanh().sum()

    jf = jitcore.jit(f)
    w = torch.randn(16, 3)
    for seed, length in enumerate((8, 9, 10, 11)):
        grads = []
        for fn in (f, jf):
            full, k = _window(length, seed)
            full.requires_grad_(True)
            k = full[:, :, -5:, :]
            out = fn(k, w)
            out.backward()
            grads.append((out.detach(), full.grad))
        torch.testing.assert_close(grads[1], grads[0])
    assert jitcore.cache_misses(jf) <= 2, jitcore.miss_reasons(jf)


def test_an_absolute_offset_still_pins_the_entry() -> None:
    """``as_strided`` reads the caller's elements from its storage offset: windows at other offsets (the
    same strides) are other entries, each with eager's values."""

    def f(x):
        return x.as_strided((2, 2), (x.stride(0), 1)) * 3

    jf = jitcore.jit(f)
    full = torch.arange(40.0).reshape(4, 10)
    for start in (2, 4, 6):
        x = full[:, start:start + 3]
        assert torch.equal(jf(x), f(x)), start
    assert jitcore.cache_misses(jf) == 3


def test_a_sliding_window_model_keeps_its_entries_over_prompt_lengths() -> None:
    """Mistral's sliding-window cache keeps a window of a concatenation as long as the prompt: its keys
    came back with the prompt's strides, and each prompt length past the window traced a new entry (7
    entries over 4 prompts before)."""
    config = transformers.MistralConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=64, vocab_size=64,
                                        max_position_embeddings=64, sliding_window=6)
    torch.manual_seed(0)
    eager = transformers.MistralForCausalLM(config).eval()
    jitted = copy.deepcopy(eager)
    jitted.forward = jitcore.jit(jitted.forward)
    for seed, length in enumerate((8, 9, 10, 12)):
        ids = torch.randint(3, 64, (2, length), generator=torch.Generator().manual_seed(seed))
        mask = torch.ones_like(ids)
        mask[1, :2] = 0
        outputs = [model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False,
                                  pad_token_id=0) for model in (eager, jitted)]
        assert torch.equal(outputs[0], outputs[1]), length
    assert jitcore.cache_misses(jitted.forward) <= 4, jitcore.miss_reasons(jitted.forward)
