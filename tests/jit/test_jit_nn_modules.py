"""torch.nn's own modules as users call them, eagerly and jitted: each program builds its model once
per side (equal weights), runs three calls on equal fresh inputs, and compares outputs (values, dtypes,
types, requires_grad), gradients and parameters after optimizer steps, and how many traces it took."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from jit_helpers import assert_same
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

import jitcore

Program = tuple[nn.Module, Callable[..., Any], Callable[[int], tuple]]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _grads(m: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in m.parameters()]


def transformer_encoder_with_padding() -> Program:
    """Eval with a key-padding mask: the fast path packs the batch into a nested tensor."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()

    def inputs(seed):
        mask = torch.zeros(3, 5, dtype=torch.bool)
        mask[1, 3:], mask[2, 4:] = True, True
        return torch.randn(3, 5, 16, generator=_gen(seed)), mask

    def f(m, x, mask):
        with torch.no_grad():
            return m(x, src_key_padding_mask=mask)

    return model, f, inputs


def transformer_backward() -> Program:
    torch.manual_seed(0)
    model = nn.Transformer(16, 4, 1, 1, 32, dropout=0.0, batch_first=True)

    def inputs(seed):
        g = _gen(seed)
        return torch.randn(2, 5, 16, generator=g), torch.randn(2, 4, 16, generator=g)

    def f(m, a, b):
        out = m(a, b, tgt_mask=nn.Transformer.generate_square_subsequent_mask(4))
        out.sum().backward()
        return out.detach(), _grads(m)

    return model, f, inputs


def lstm_over_packed_sequences() -> Program:
    torch.manual_seed(0)
    model = nn.LSTM(4, 8, num_layers=2, batch_first=True, bidirectional=True)

    def inputs(seed):
        return torch.randn(3, 6, 4, generator=_gen(seed)), torch.tensor([6, 4, 2])

    def f(m, x, lengths):
        out, (h, c) = m(pack_padded_sequence(x, lengths, batch_first=True))
        padded, out_lengths = pad_packed_sequence(out, batch_first=True)
        return padded, h, c, out_lengths

    return model, f, inputs


def gru_backward() -> Program:
    torch.manual_seed(0)
    model = nn.GRU(4, 8, batch_first=True)

    def f(m, x):
        out, h = m(x)
        (out.pow(2).mean() + h.sum()).backward()
        return out.detach(), _grads(m)

    return model, f, lambda seed: (torch.randn(3, 6, 4, generator=_gen(seed)),)


def lstm_cell_over_padded_sequences() -> Program:
    torch.manual_seed(0)
    model = nn.LSTMCell(4, 8)

    def inputs(seed):
        g = _gen(seed)
        return ([torch.randn(n, 4, generator=g) for n in (3, 5, 2)],)

    def f(m, seqs):
        x = pad_sequence(seqs)
        h = c = torch.zeros(3, 8)
        outs = []
        for t in range(x.shape[0]):
            h, c = m(x[t], (h, c))
            outs.append(h)
        return torch.stack(outs)

    return model, f, inputs


def multihead_attention_weights() -> Program:
    torch.manual_seed(0)
    model = nn.MultiheadAttention(16, 4, batch_first=True).eval()

    def inputs(seed):
        mask = torch.zeros(2, 5, dtype=torch.bool)
        mask[0, 4] = True
        return torch.randn(2, 5, 16, generator=_gen(seed)), mask

    def f(m, x, mask):
        return m(x, x, x, key_padding_mask=mask, need_weights=True, average_attn_weights=False)

    return model, f, inputs


def embedding_bag_backward() -> Program:
    torch.manual_seed(0)
    model = nn.EmbeddingBag(20, 8, mode="mean")

    def f(m, idx, offsets):
        y = m(idx, offsets)
        y.sum().backward()
        return y.detach(), m.weight.grad.clone()

    return model, f, lambda seed: (torch.randint(0, 20, (10,), generator=_gen(seed)), torch.tensor([0, 3, 7]))


def convnet_sgd_steps() -> Program:
    """BatchNorm in training (running stats), grouped conv, GroupNorm, SGD with momentum."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, groups=2), nn.GroupNorm(2, 8), nn.GELU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
    optimizers: dict[int, torch.optim.Optimizer] = {}

    def inputs(seed):
        g = _gen(seed)
        return torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 3, (4,), generator=g)

    def f(m, x, y):
        opt = optimizers.setdefault(id(m), torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach(), [p.detach().clone() for p in m.parameters()], m[1].running_mean.clone()

    return model, f, inputs


def upsampling() -> Program:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 12, 1), nn.PixelShuffle(2),
                          nn.Upsample(scale_factor=2, mode="bilinear"), nn.ConvTranspose2d(3, 2, 2, stride=2))
    return model, lambda m, x: m(x), lambda seed: (torch.randn(2, 3, 4, 4, generator=_gen(seed)),)


def distributions() -> Program:
    torch.manual_seed(0)
    model = nn.Linear(4, 4)

    def f(m, x):
        torch.manual_seed(1)
        normal = torch.distributions.Normal(m(x), F.softplus(x) + 0.1)
        z = normal.rsample()
        categorical = torch.distributions.Categorical(logits=x)
        standard = torch.distributions.Normal(0.0, 1.0)
        return (z, normal.log_prob(z), normal.entropy(), categorical.log_prob(torch.tensor([0, 1, 2])),
                torch.distributions.kl_divergence(normal, standard))

    return model, f, lambda seed: (torch.randn(3, 4, generator=_gen(seed)),)


def spectral() -> Program:
    def f(m, x):
        window = torch.hann_window(16)
        spec = torch.stft(x, 16, hop_length=4, window=window, return_complex=True)
        back = torch.istft(spec, 16, hop_length=4, window=window, length=64)
        return spec.abs(), torch.fft.irfft(torch.fft.rfft(x), n=64), back

    return nn.Identity(), f, lambda seed: (torch.randn(2, 64, generator=_gen(seed)),)


def checkpointed_backward() -> Program:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))

    def f(m, x):
        y = torch.utils.checkpoint.checkpoint(m, x, use_reentrant=False)
        y.sum().backward()
        return y.detach(), x.grad.clone(), m[0].weight.grad.clone()

    return model, f, lambda seed: (torch.randn(3, 4, generator=_gen(seed), requires_grad=True),)


def per_sample_grads() -> Program:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)

    def f(m, x):
        def loss(params, xi):
            return torch.func.functional_call(m, params, (xi,)).squeeze() ** 2

        return torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(dict(m.named_parameters()), x)

    return model, f, lambda seed: (torch.randn(5, 4, generator=_gen(seed)),)


PROGRAMS = [transformer_encoder_with_padding, transformer_backward, lstm_over_packed_sequences, gru_backward,
            lstm_cell_over_padded_sequences, multihead_attention_weights, embedding_bag_backward,
            convnet_sgd_steps, upsampling, distributions, spectral, checkpointed_backward, per_sample_grads]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_nn_module_program_matches_eager(program: Callable[[], Program]) -> None:
    eager_model, f, inputs = program()
    jitted_model = copy.deepcopy(eager_model)
    jf = jitcore.jit(f)
    for seed in range(3):
        for model in (eager_model, jitted_model):
            for p in model.parameters():
                p.grad = None
        expected = f(eager_model, *inputs(seed))
        actual = jf(jitted_model, *inputs(seed))
        assert_same(actual, expected)
    # an optimizer's state made on the first step is one more entry; nothing else retraces
    assert jitcore.cache_misses(jf) <= (2 if program is convnet_sgd_steps else 1), jitcore.miss_reasons(jf)
