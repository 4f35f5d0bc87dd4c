"""torchao's quantized tensor subclasses under jitcore.jit, as its users call them (``quantize_`` on
a model), differentially against eager: outputs, input gradients, and no torchao
``__torch_function__``/``__torch_dispatch__`` call on a cached call.

torchao handles ``F.linear`` on a quantized weight in ``__torch_function__`` (its ``implements``
table); the aten ops a decomposition would produce (``aten.t`` + ``aten.mm``) never reach its
``__torch_dispatch__`` eagerly, and must not under jitcore either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchao.prototype.mx_formats as MX
import torchao.quantization as Q  # a test extra: a missing install fails here, not skips
from torchao.quantization.quantize_.common import KernelPreference

import jitcore

CONFIGS: dict[str, tuple[Callable[[], Any], torch.dtype]] = {
    "int8_weight_only": (lambda: Q.Int8WeightOnlyConfig(), torch.float32),
    "int8_dynamic_activation": (lambda: Q.Int8DynamicActivationInt8WeightConfig(), torch.float32),
    "float8_weight_only_bf16": (lambda: Q.Float8WeightOnlyConfig(), torch.bfloat16),
    "intx_weight_only": (lambda: Q.IntxWeightOnlyConfig(), torch.float32),
    "int8_dynamic_activation_intx_weight": (lambda: Q.Int8DynamicActivationIntxWeightConfig(), torch.float32),
    # MX (fp8 elements, a shared exponent per 32) and NVFP4 (fp4 elements, fp8 scales per 16): on CPU
    # their matmuls run emulated, in high precision after dequantizing; the fused kernels need sm100+
    "mx_fp8_dynamic_activation": (
        lambda: MX.MXDynamicActivationMXWeightConfig(kernel_preference=KernelPreference.EMULATED),
        torch.bfloat16,
    ),
    "nvfp4_weight_only": (lambda: MX.NVFP4WeightOnlyConfig(), torch.bfloat16),
}


def _model(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).to(dtype)


def _quantized(name: str) -> tuple[torch.nn.Module, torch.dtype]:
    make_config, dtype = CONFIGS[name]
    model = _model(dtype)
    Q.quantize_(model, make_config())
    return model, dtype


def _subclasses(model: torch.nn.Module) -> set[type]:
    return {type(p) for p in model.parameters() if type(p) not in (torch.Tensor, torch.nn.Parameter)}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_quantized_model_matches_eager(name: str) -> None:
    model, dtype = _quantized(name)
    assert _subclasses(model), "quantize_ made no tensor subclass"
    x = torch.randn(8, 64, dtype=dtype)
    expected = model(x)
    jitted = jitcore.jit(model)
    for _ in range(3):
        torch.testing.assert_close(jitted(x), expected)
    assert jitcore.cache_misses(jitted) == 1


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_cached_call_runs_no_torchao_code(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model, dtype = _quantized(name)
    x = torch.randn(4, 64, dtype=dtype)
    jitted = jitcore.jit(model)
    jitted(x)
    calls: list[str] = []
    for cls in _subclasses(model):
        for protocol in ("__torch_function__", "__torch_dispatch__"):
            if not hasattr(getattr(cls, protocol), "__func__"):
                continue  # torch's disabled default (MXTensor's __torch_function__): none of the class's code
            original = getattr(cls, protocol).__func__

            def counting(klass: type, func: Any, types: Any, args: Any = (), kwargs: Any = None,
                         _original: Any = original, _protocol: str = protocol) -> Any:
                calls.append(f"{_protocol} {func}")
                return _original(klass, func, types, args, kwargs)

            monkeypatch.setattr(cls, protocol, classmethod(counting))
    eager_calls_before = len(calls)
    model(x)
    assert len(calls) > eager_calls_before  # the counters see eager's calls
    calls.clear()
    jitted(x)
    assert calls == []


@pytest.mark.parametrize("name", ["int8_weight_only", "int8_dynamic_activation"])
def test_changing_batch_sizes_share_one_symbolic_entry(name: str) -> None:
    """The quantized weights keep static shapes and every op on them gives a plain result, so the
    batch size is symbolic from the second size on (before: an entry per batch size)."""
    model, dtype = _quantized(name)
    jitted = jitcore.jit(model)
    for batch in (2, 3, 5, 7, 9, 11):
        x = torch.randn(batch, 64, dtype=dtype)
        torch.testing.assert_close(jitted(x), model(x))
    assert jitcore.cache_misses(jitted) == 2


def test_input_gradient_through_a_quantized_weight() -> None:
    model, dtype = _quantized("int8_weight_only")
    x = torch.randn(4, 64, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_(True)
    model(x_eager).sum().backward()
    jitcore.jit(model)(x).sum().backward()
    torch.testing.assert_close(x.grad, x_eager.grad)


def test_a_function_calling_the_quantized_model() -> None:
    model, dtype = _quantized("int8_dynamic_activation")

    def step(batch: torch.Tensor) -> torch.Tensor:
        return torch.softmax(model(batch), dim=-1).argmax(dim=-1)

    x = torch.randn(6, 64)
    torch.testing.assert_close(jitcore.jit(step)(x), step(x))


def test_nf4_weight_in_f_linear() -> None:
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import to_nf4

    torch.manual_seed(0)
    weight = to_nf4(torch.randn(256, 256, dtype=torch.bfloat16))
    x = torch.randn(4, 256, dtype=torch.bfloat16)

    def f(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(t, weight).relu()

    jitted = jitcore.jit(f)
    for _ in range(2):
        torch.testing.assert_close(jitted(x), f(x))


def test_nf4_linear_with_an_input_requiring_grad() -> None:
    """QLoRA's frozen NF4 base weight: ``linear_nf4`` is an autograd.Function whose forward
    dequantizes in NF4's ``__torch_function__`` (``weight.to(dtype)``); the gradient is its own
    backward's. The weight is not square, so a transposed weight could not pass unnoticed."""
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import linear_nf4, to_nf4

    torch.manual_seed(0)
    weight = to_nf4(torch.randn(128, 256, dtype=torch.bfloat16))
    lora_a = torch.randn(256, 8, dtype=torch.bfloat16, requires_grad=True)

    def f(t: torch.Tensor) -> torch.Tensor:
        return linear_nf4(t, weight) + (t @ lora_a).sum(-1, keepdim=True)

    jitted = jitcore.jit(f)
    for seed in range(2):
        x = torch.randn(4, 256, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(seed),
                        requires_grad=True)
        ex = x.detach().clone().requires_grad_()
        got, want = jitted(x), f(ex)
        torch.testing.assert_close(got, want)
        got_grads = torch.autograd.grad(got.float().square().sum(), (x, lora_a))
        want_grads = torch.autograd.grad(want.float().square().sum(), (ex, lora_a))
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("qlora", [False, True], ids=["frozen", "qlora"])
def test_nf4_modules_over_changing_batch_sizes(qlora: bool) -> None:
    """nn.Linear layers whose weight is an NF4 parameter (frozen; and QLoRA adapters beside it) over
    changing batch sizes: the symbolic entry takes the weight whole and runs LinearNF4.apply natively,
    whose forward dequantizes through NF4's ``__torch_function__``. It ran with subclass functions
    disabled: 'mat1 and mat2 shapes cannot be multiplied' from the second batch size on, where eager
    computes (Note [The torch-function state of a Function's forward])."""
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import linear_nf4, to_nf4

    class LoRA(torch.nn.Module):
        def __init__(self, linear: torch.nn.Linear) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(to_nf4(linear.weight.detach(), 64, 16), requires_grad=False)
            self.a = torch.nn.Parameter(torch.randn(8, linear.in_features, dtype=torch.bfloat16) * 0.1)
            self.b = torch.nn.Parameter(torch.randn(linear.out_features, 8, dtype=torch.bfloat16) * 0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return linear_nf4(x, self.weight) + x @ self.a.t() @ self.b.t()

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
        model = model.to(torch.bfloat16)
        for i in (0, 2):
            if qlora:
                model[i] = LoRA(model[i])
            else:
                model[i].weight = torch.nn.Parameter(to_nf4(model[i].weight.detach(), 64, 16),
                                                     requires_grad=False)
        return model

    model, eager = make(), make()
    jitted = jitcore.jit(model)
    for batch in (4, 8, 6, 8):
        x = torch.randn(batch, 64, dtype=torch.bfloat16)
        got, want = jitted(x), eager(x)
        torch.testing.assert_close(got, want)
        got.float().square().sum().backward()
        want.float().square().sum().backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            assert (p.grad is None) == (q.grad is None)
            if p.grad is not None:
                torch.testing.assert_close(p.grad, q.grad)
        model.zero_grad()
        eager.zero_grad()
    assert jitcore.cache_misses(jitted) == 2


def test_float8_training_forward_and_gradients() -> None:
    from torchao.float8 import convert_to_float8_training

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 16, bias=False))
        convert_to_float8_training(model)
        return model

    eager_model, jit_model = build(), build()
    x = torch.randn(16, 32)
    eager_loss = eager_model(x).square().mean()
    eager_loss.backward()
    jit_loss = jitcore.jit(jit_model)(x).square().mean()
    jit_loss.backward()
    torch.testing.assert_close(jit_loss, eager_loss)
    for p_jit, p_eager in zip(jit_model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p_jit.grad, p_eager.grad)


@pytest.mark.parametrize("name", ["AdamW8bit", "AdamW4bit", "AdamWFp8"])
def test_low_bit_optimizer_step(name):
    """torchao's low-bit optimizers keep their state as tensor subclasses made inside the first step
    (``OptimState8bit(codes, scale, qmap)``) and compile their per-parameter step with torch.compile:
    a jitted ``opt.step()`` gives eager's parameters and state over several steps."""
    import copy

    import torchao.optim

    torch.manual_seed(0)
    eager_model = torch.nn.Linear(256, 256)
    model = copy.deepcopy(eager_model)
    make = getattr(torchao.optim, name)
    eager_opt, opt = make(eager_model.parameters(), lr=1e-2), make(model.parameters(), lr=1e-2)
    step = jitcore.jit(lambda: opt.step())
    for i in range(3):
        x = torch.randn(8, 256, generator=torch.Generator().manual_seed(i))
        for m, o, run in ((eager_model, eager_opt, eager_opt.step), (model, opt, step)):
            o.zero_grad()
            m(x).square().mean().backward()
            run()
        # eager runs torchao's step compiled by inductor, jitcore op by op: rounding differs in the
        # last bits, which can move a value to the next quantization code (a few elements in 65536)
        for p, q in zip(model.parameters(), eager_model.parameters()):
            torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-3, atol=1e-3)
        for state, eager_state in zip(opt.state.values(), eager_opt.state.values()):
            assert list(state) == list(eager_state)
            for key, value in eager_state.items():
                got = state[key]
                assert type(got) is type(value)  # a real tensor or torchao's state subclass, never a proxy
                got, value = (t.dequantize() if hasattr(t, "dequantize") else t for t in (got, value))
                close = torch.isclose(got, value, rtol=1e-3, atol=1e-3)
                assert close.float().mean() > 0.999, (key, close.logical_not().sum())
    assert jitcore.cache_misses(step) == 2  # the first step makes the state, the second reads it


@pytest.mark.parametrize("name", ["int8_weight_only", "int8_mixed_precision", "bitnet"])
def test_quantized_training_steps_over_changing_batch_sizes(name: str) -> None:
    """torchao's quantized training (trainable subclass weights reached through the module): a
    jitted forward + backward, SGD outside, over changing batch sizes. Losses and gradients equal
    eager's; the batch size is symbolic from the second size on (before: an entry per batch size,
    since pass 1 under torch's autograd took only the arguments whole, not the weights)."""
    import copy

    from torchao.prototype import quantized_training as training

    config = {"int8_weight_only": training.int8_weight_only_quantized_training,
              "int8_mixed_precision": training.int8_mixed_precision_training,
              "bitnet": training.bitnet_training}[name]
    eager_model = _model(torch.float32)
    Q.quantize_(eager_model, config())
    model = copy.deepcopy(eager_model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=1e-2) for m in (eager_model, model)]

    def step(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = m(x).square().mean()
        loss.backward()
        return loss

    jitted = jitcore.jit(step)
    for i, batch in enumerate((4, 5, 6, 7, 4)):
        x = torch.randn(batch, 64)
        torch.testing.assert_close(jitted(model, x), step(eager_model, x))
        for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5)
        for optimizer in optimizers:
            torch.manual_seed(i)  # int8 training rounds stochastically in its optimizer step
            optimizer.step()
            optimizer.zero_grad()
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 3)
