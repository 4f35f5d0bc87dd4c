"""Hugging Face ``transformers`` models, built from tiny configs (no downloads), as users call them.

Each program runs eagerly and under jitcore (the model object jitted, and a function calling it);
logits, losses, parameter gradients, returned caches and generated tokens are compared.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers  # in the test extras: a missing install fails here, it is never skipped
from jit_helpers import training_step

import jitcore

pytestmark = pytest.mark.filterwarnings("ignore")
VOCAB = 64


# The decoder-only models' shared tiny sizes (grouped-query attention: 4 heads over 2 key/value heads).
_DECODER = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**_DECODER))


def _qwen2():
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**_DECODER))


def _mixtral():
    """Mixture of experts: its experts run ``torch._grouped_mm``, whose fake kernel demands bfloat16
    while the CPU kernel takes float32 (Note [Fake kernels stricter than eager])."""
    config = transformers.MixtralConfig(**_DECODER, num_local_experts=4, num_experts_per_tok=2)
    return transformers.MixtralForCausalLM(config)


def _falcon():
    """Its decoder loop is ``for i, block in enumerate(self.h)`` and its linear layers compute
    ``input @ self.weight.T``."""
    config = transformers.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4)
    return transformers.FalconForCausalLM(config)


def _gpt2():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def _bert():
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return transformers.BertModel(config)


def _t5():
    config = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                   decoder_start_token_id=0)
    return transformers.T5ForConditionalGeneration(config)


def _vit():
    config = transformers.ViTConfig(image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=64)
    return transformers.ViTModel(config)


def _model(make):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make().eval()


def _ids(seed: int = 0, shape=(2, 8)) -> torch.Tensor:
    return torch.randint(1, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _padding_mask() -> torch.Tensor:
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    return mask


def _first(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _assert_close(a, b):
    assert type(a) is torch.Tensor and type(b) is torch.Tensor
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [_llama, _qwen2, _gpt2, _bert], ids=lambda m: m.__name__[1:])
@pytest.mark.parametrize("how", ["module", "function"])
def test_forward_with_and_without_padding(make, how):
    model = _model(make)
    jitted = (
        jitcore.jit(model)
        if how == "module"
        else jitcore.jit(lambda ids, mask: model(ids, attention_mask=mask))
    )
    for seed, mask in [(0, None), (1, _padding_mask()), (2, _padding_mask())]:
        ids = _ids(seed)
        mask_arg = mask if mask is not None else torch.ones_like(ids)
        expected = model(ids, attention_mask=mask_arg)
        got = jitted(ids, attention_mask=mask_arg) if how == "module" else jitted(ids, mask_arg)
        assert type(got) is type(expected)
        _assert_close(_first(got), _first(expected))


@pytest.mark.parametrize("make", [_llama, _gpt2, _bert], ids=lambda m: m.__name__[1:])
def test_sequence_lengths_share_one_symbolic_entry(make):
    """Padded batches of 5 lengths: the second length makes the length symbolic and every later one
    hits that entry (each length was an entry of its own: the probe pinned the length while computing
    the mask's value reads)."""
    model = _model(make)
    jitted = jitcore.jit(model)
    for seed, length in enumerate((5, 7, 9, 11, 13)):
        ids = _ids(seed, (2, length))
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, length - 2:] = 0
        with torch.no_grad():
            expected, got = model(ids, attention_mask=mask), jitted(ids, attention_mask=mask)
        _assert_close(_first(got), _first(expected))
    assert jitcore.cache_misses(jitted) == 2


def test_encoder_decoder_and_vision_models():
    t5 = _model(_t5)
    jt5 = jitcore.jit(t5)
    for seed in range(2):
        ids, dec = _ids(seed), _ids(seed + 10, (2, 5))
        _assert_close(
            jt5(input_ids=ids, decoder_input_ids=dec).logits, t5(input_ids=ids, decoder_input_ids=dec).logits
        )
    vit = _model(_vit)
    jvit = jitcore.jit(vit)
    for seed in range(2):
        pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(seed))
        _assert_close(jvit(pixels).last_hidden_state, vit(pixels).last_hidden_state)


def _bart():
    config = transformers.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, max_position_embeddings=64)
    return transformers.BartForConditionalGeneration(config)


def test_encoder_decoder_forward_that_copies_its_config_is_traced():
    """BART's forward makes its cache with ``DynamicCache(config=...)``, which deep-copies the config,
    whose Python ``__getattribute__`` C's ``__reduce_ex__`` ran natively: the whole forward and
    ``generate`` ran eagerly (Note [A reduction that runs Python], jitcore/interpreter/reductions.py)."""
    bart = _model(_bart)

    def forward(ids, mask, dec):
        return bart(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits

    jitted, generate = jitcore.jit(forward), jitcore.jit(bart.generate)
    for seed in range(2):
        ids, dec = _ids(seed), _ids(seed + 10, (2, 5))
        _assert_close(jitted(ids, _padding_mask(), dec), forward(ids, _padding_mask(), dec))
        options = dict(max_new_tokens=3, do_sample=False, pad_token_id=0)
        assert torch.equal(generate(ids, **options), bart.generate(ids, **options))
    assert all(entry.eager_reason is None for entry in [*jitted.entries, *generate.entries])
    assert jitcore.cache_hits(jitted) == 1 and jitcore.cache_hits(generate) == 1


def test_vision_model_over_image_sizes_shares_one_symbolic_entry():
    """ViT with ``interpolate_pos_encoding`` over 5 image sizes: its bicubic interpolation to a symbolic
    size runs torch's Python kernel in the symbolic pass (Note [Symbolic passes and torch's Python
    kernels], jitcore/jit/api.py); before, that pass raised and every size was an entry of its own."""
    vit = _model(_vit)
    jvit = jitcore.jit(vit)
    for seed, size in enumerate((16, 24, 32, 40, 48)):
        pixels = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            expected = vit(pixels, interpolate_pos_encoding=True).last_hidden_state
            _assert_close(jvit(pixels, interpolate_pos_encoding=True).last_hidden_state, expected)
    assert jitcore.cache_misses(jvit) == 2


@pytest.mark.parametrize("make", [_llama, _mixtral, _gpt2], ids=lambda m: m.__name__[1:])
def test_training_step_loss_and_gradients(make):
    model = _model(make).train()
    jitted = jitcore.jit(model)
    for seed in range(2):
        ids = _ids(seed)
        model.zero_grad()
        torch.manual_seed(seed)
        loss = jitted(ids, labels=ids).loss
        loss.backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        torch.manual_seed(seed)
        expected = model(ids, labels=ids).loss
        expected.backward()
        _assert_close(loss.detach(), expected.detach())
        for g, p in zip(got, model.parameters()):
            _assert_close(g, p.grad)


def test_speech_model_with_ctc_loss_training():
    """Wav2Vec2ForCTC with labels: ``ctc_loss`` (output shapes decided by the label lengths, gradients
    through it: Note [Value-shaped ops under grad]) and ``hidden_states.requires_grad = True`` on an
    intermediate. Loss and every parameter gradient equal eager's; labels of another length are a
    new entry, the same lengths are not."""
    config = transformers.Wav2Vec2Config(
        vocab_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_feat_extract_layers=2,
        num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2, pad_token_id=0, mask_time_prob=0.0,
        hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
        layerdrop=0.0, final_dropout=0.0)
    torch.manual_seed(0)
    eager = transformers.Wav2Vec2ForCTC(config).train()
    torch.manual_seed(0)
    model = transformers.Wav2Vec2ForCTC(config).train()
    jitted = jitcore.jit(model)
    for seed in range(4):
        g = torch.Generator().manual_seed(seed)
        audio, labels = torch.randn(2, 800, generator=g), torch.randint(1, 8, (2, 5), generator=g)
        labels[1, 3 + seed % 2:] = -100
        eager.zero_grad()
        model.zero_grad()
        expected, got = eager(audio, labels=labels).loss, jitted(audio, labels=labels).loss
        expected.backward()
        got.backward()
        _assert_close(got.detach(), expected.detach())
        for p, q in zip(model.parameters(), eager.parameters()):
            if q.grad is not None:
                _assert_close(p.grad, q.grad)
    assert jitcore.cache_misses(jitted) == 2


@pytest.mark.parametrize("make", [_llama, _mixtral, _falcon, _gpt2], ids=lambda m: m.__name__[1:])
def test_training_step_inside_the_jitted_function(make):
    """Forward with labels, ``loss.backward()`` and an AdamW step, all in the jitted function."""

    def setup():
        model = _model(make).train()
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    step = training_step(lambda model, ids: model(ids, labels=ids).loss)

    eager_model, eager_opt = setup()
    model, opt = setup()
    jitted = jitcore.jit(step)
    for seed in range(3):
        ids = _ids(seed)
        torch.manual_seed(seed)
        got = jitted(model, opt, ids)
        torch.manual_seed(seed)
        _assert_close(got, step(eager_model, eager_opt, ids))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            _assert_close(p.detach(), q.detach())


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_training_with_gradient_checkpointing(reentrant):
    """``gradient_checkpointing_enable()``: each decoder layer runs under ``torch.utils.checkpoint``
    (raised torch's fake-mode error at the backward, or left the layers without gradients, before)."""

    def setup():
        model = _model(_llama).train()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    step = training_step(lambda model, ids: model(ids, labels=ids, use_cache=False).loss)
    eager_model, eager_opt = setup()
    model, opt = setup()
    jitted = jitcore.jit(step)
    for seed in range(3):
        ids = _ids(seed)
        _assert_close(jitted(model, opt, ids), step(eager_model, eager_opt, ids))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            _assert_close(p.detach(), q.detach())
    assert jitted.fallback_reason is None
    # the first step creates AdamW's state, so the second traces again (docs/user-guide.md)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1)


def test_kv_cache_fed_back_into_the_next_call():
    model = _model(_llama)
    jitted = jitcore.jit(model)
    ids = _ids(0)
    got, expected = jitted(ids, use_cache=True), model(ids, use_cache=True)
    assert type(got.past_key_values) is type(expected.past_key_values)
    for step in range(3):
        token = _ids(step + 1, (2, 1))
        got = jitted(token, past_key_values=got.past_key_values, use_cache=True)
        expected = model(token, past_key_values=expected.past_key_values, use_cache=True)
        _assert_close(got.logits, expected.logits)
        for g, e in zip(got.past_key_values.layers, expected.past_key_values.layers):
            _assert_close(g.keys, e.keys)
            _assert_close(g.values, e.values)


@pytest.mark.parametrize("make", [_llama, _gpt2, _t5], ids=lambda m: m.__name__[1:])
def test_greedy_generate(make):
    """``generate`` runs under ``no_grad`` and writes its token buffers in place, with parameters
    that require grad: no backward is built, and the caller's grad mode is as it was."""
    model = _model(make)
    generate = jitcore.jit(model.generate)
    for seed in range(2):
        ids = _ids(seed)
        options = dict(attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False, pad_token_id=0)
        got = generate(ids, **options)
        assert torch.is_grad_enabled()
        expected = model.generate(ids, **options)
        assert torch.equal(got, expected)
    assert not generate.last_backward_traces


@pytest.mark.parametrize("make", [_llama, _gpt2], ids=lambda m: m.__name__[1:])
def test_generate_with_a_static_cache(make):
    """``cache_implementation="static"``: forward returns the caller's StaticCache inside its
    ModelOutput, and generate goes on with ``outputs.past_key_values``. The jitted forward handed back
    a copy: the second generation wrote past its cache (IndexError in index_copy_)."""
    model, eager = _model(make), _model(make)
    model.forward = jitcore.jit(model.forward)
    for seed in range(3):
        ids = _ids(seed)
        options = dict(attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False, pad_token_id=0,
                       cache_implementation="static")
        assert torch.equal(model.generate(ids, **options), eager.generate(ids, **options))
    cache = transformers.StaticCache(config=model.config, max_cache_len=32)
    ids = _ids(0)
    out = model(ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(ids.shape[1]))
    assert out.past_key_values is cache


@pytest.mark.parametrize("make", [_llama, _t5], ids=lambda m: m.__name__[1:])
def test_beam_search_generate(make):
    """Beam search crops its sequences by a length it computes as a 0-dim tensor
    (``sequences[:, :output_length]``): a slice bound read as a checked int."""
    model = _model(make)
    generate = jitcore.jit(model.generate)
    for seed in range(2):
        ids = _ids(seed)
        options = dict(max_new_tokens=4, num_beams=2, do_sample=False, pad_token_id=0)
        assert torch.equal(generate(ids, **options), model.generate(ids, **options))


def test_jitted_forward_installed_on_the_model():
    """``model.forward = jitcore.jit(model.forward)`` (torch.compile's idiom) and then ``generate``:
    the jitted forward traces the class's forward, not itself (that recursed without end)."""
    model = _model(_llama)
    eager = _model(_llama)
    model.forward = jitcore.jit(model.forward)
    ids = _ids(0)
    options = dict(attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(ids, **options), eager.generate(ids, **options))
    assert jitcore.cache_misses(model.forward) >= 1


@pytest.mark.parametrize("make", [_llama, _gpt2, _t5], ids=lambda m: m.__name__[1:])
def test_jitted_forward_traces_a_few_times_per_generation(make):
    """``generate`` makes a new cache object per call and grows it by one token per step: the cache
    is guarded by its class and what forward reads from it, and its length becomes a symbolic size
    once it has changed, so the steps reuse entries (prefill, first step, all later steps) and a
    second ``generate`` traces nothing new — as torch.compile's recompilations go. T5's forward
    gets the encoder's output (a ModelOutput, read as ``encoder_outputs[0]``) made anew per
    generate: its items were guarded by identity, 3 new entries per generate."""
    model, eager = _model(make), _model(make)
    model.forward = jitcore.jit(model.forward)
    for seed in range(2):
        ids = _ids(seed)
        options = dict(attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert torch.equal(model.generate(ids, **options), eager.generate(ids, **options))
        if seed == 0:
            misses = jitcore.cache_misses(model.forward)
    assert misses <= 3
    assert jitcore.cache_misses(model.forward) == misses


def test_lstm_traces_once_and_matches_eager() -> None:
    """nn.LSTM rebuilds its _flat_weights list from its parameters in forward: what it stores while
    traced is the program's own value, not state to guard (it retraced on every call before)."""
    torch.manual_seed(0)
    model = torch.nn.LSTM(8, 16, batch_first=True)
    jitted = jitcore.jit(model)
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(2, 5, 8)
            out, (h, c) = jitted(x)
            out_eager, (h_eager, c_eager) = model(x)
            for got, want in ((out, out_eager), (h, h_eager), (c, c_eager)):
                torch.testing.assert_close(got, want)
    assert jitcore.cache_misses(jitted) == 1


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_layer_gradients(cell) -> None:
    """An LSTM's backward through jitcore: mkldnn's RNN layer keeps its workspace only with grad mode
    on, which the grad transform's forward does not have (Note [Outputs that exist only with grad
    mode on]); the backward failed for want of it."""
    torch.manual_seed(0)
    model = getattr(torch.nn, cell)(8, 16, batch_first=True, num_layers=2)
    jitted = jitcore.jit(model)
    for seed in range(2):
        x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(seed), requires_grad=True)
        out, state = jitted(x)
        (out.sum() + state[0].sum()).backward()
        got = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
        x.grad = None
        model.zero_grad()
        out_eager, state_eager = model(x)
        (out_eager.sum() + state_eager[0].sum()).backward()
        expected = [x.grad] + [p.grad for p in model.parameters()]
        _assert_close(out.detach(), out_eager.detach())
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
        x.grad = None
        model.zero_grad()
