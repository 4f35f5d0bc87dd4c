"""Tensor subclasses as others write them and use them, round 12 (issue 15, helper zoo32): a class whose
``__torch_function__`` has effects of its own (a log, a counter, a scaled result) under programs that
read values, each program run eagerly and under jitcore.jit on equal fresh arguments. Each test failed
before its fix."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore

# --- what the class sees while a call is traced ----------------------------------------------------------
# Note [The probe runs no __torch_function__ again] (jitcore/jit/probe.py): the probe ran the records on
# the caller's instances with torch functions on, so the class saw calls eager never makes.
# Prologue.explain (a miss's reasons) read the tensors' metadata through the class's __torch_function__.


class _Recording(torch.Tensor):
    log: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        cls.log.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


class _SumDoubling(torch.Tensor):
    """Answers ``sum`` with twice the sum."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out * 2 if getattr(func, "__name__", None) == "sum" else out


READS: dict[str, tuple[Callable[[torch.Tensor], Any], type]] = {
    "numpy_sum_logged": (lambda x: float(x.numpy().sum()), _Recording),
    "item_logged": (lambda x: (x * 2).sum().item() + 1, _Recording),
    "branch_logged": (lambda x: x.sin() if x.sum() > 0 else x.cos(), _Recording),
    "mask_logged": (lambda x: x[x > 0] * 3, _Recording),
    "tolist_logged": (lambda x: (x + 1).tolist(), _Recording),
    "numpy_sum_doubled": (lambda x: float(x.numpy().sum()), _SumDoubling),
    "item_doubled": (lambda x: x.sum().item() + x.abs().sum(), _SumDoubling),
    "branch_doubled": (lambda x: x * 2 if x.sum() > 1 else x - 1, _SumDoubling),
}


def _same(got: Any, expected: Any) -> None:
    assert type(got) is type(expected)
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for a, e in zip(got, expected):
            _same(a, e)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
    elif isinstance(expected, float):
        assert got == pytest.approx(expected, rel=1e-5)
    else:
        assert got == expected


@pytest.mark.parametrize("name", list(READS))
def test_a_class_sees_eagers_calls_where_the_program_reads_values(name: str) -> None:
    """What the class was handed (the whole call's log, the cache lookup included), and its answers, are
    eager's on every call: the first, the ones that miss (other values, another shape) and the ones
    that hit."""
    program, cls = READS[name]
    jitted = jitcore.jit(program)
    for seed, shape in enumerate([(4, 6), (4, 6), (4, 6), (3, 5)]):
        made = []
        for _ in range(2):
            torch.manual_seed(seed)
            made.append(torch.randn(shape).as_subclass(cls))
        _Recording.log.clear()
        expected = program(made[0])
        handed, _Recording.log[:] = list(_Recording.log), []
        _same(jitted(made[1]), expected)
        assert _Recording.log == handed, seed


# --- NJT attention where eager raises -----------------------------------------------------------------------
# Note [A real tensor among a subclass proxy's inner tensors] (jitcore/proxies/subclass.py): torch's backend
# checks cache the minimum length as a tensor made while tracing; the next op on that NJT built a shadow
# around it and raised AttributeError where eager raises "No viable backend".


def _fused_attention(qkv: torch.nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
    def attend(x: torch.Tensor) -> torch.Tensor:
        q, k, v = qkv(x).chunk(3, -1)  # not contiguous after transposing: no backend takes them
        q, k, v = (t.unflatten(-1, [2, -1]).transpose(1, 2) for t in (q, k, v))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).values()

    return attend


def test_njt_attention_no_backend_takes_raises_as_eagerly() -> None:
    torch.manual_seed(0)
    program = _fused_attention(torch.nn.Linear(16, 48))
    jitted = jitcore.jit(program)
    line = program.__code__.co_firstlineno + 3
    for lengths in ([2, 3, 4], [2, 3, 4], [1, 5, 2]):
        x = torch.nested.nested_tensor_from_jagged(
            torch.randn(sum(lengths), 16), torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()]))
        with pytest.raises(RuntimeError) as eager:
            program(x)
        with pytest.raises(RuntimeError) as traced:
            jitted(x)
        assert str(traced.value) == str(eager.value)
        frames = [(f.f_code.co_name, n) for f, n in traceback.walk_tb(traced.tb)]
        assert ("attend", line) in frames, frames


# --- a QLoRA training step jitted whole ---------------------------------------------------------------------
# Note [The torch-function state of a backward the program runs] (jitcore/langctx/backward.py): LinearNF4's
# backward dequantizes with ``weight.to(dtype)``, answered by NF4's __torch_function__; the backward inside
# the program ran with subclass functions off and raised "mat1 and mat2 shapes cannot be multiplied".


def _qlora_step(optimizer: type) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import linear_nf4, to_nf4

    class QLoRALinear(torch.nn.Module):
        def __init__(self, fan_in: int, fan_out: int) -> None:
            super().__init__()
            base = torch.randn(fan_out, fan_in, dtype=torch.bfloat16) * fan_in**-0.5
            self.weight = torch.nn.Parameter(to_nf4(base, 64, 16), requires_grad=False)
            self.a = torch.nn.Parameter(torch.randn(8, fan_in, dtype=torch.bfloat16) * 0.1)
            self.b = torch.nn.Parameter(torch.randn(fan_out, 8, dtype=torch.bfloat16) * 0.01)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return linear_nf4(x, self.weight) + x @ self.a.t() @ self.b.t()

    torch.manual_seed(0)
    model = torch.nn.Sequential(QLoRALinear(64, 128), torch.nn.GELU(), QLoRALinear(128, 32))
    opt = optimizer([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def step(x: torch.Tensor, y: torch.Tensor) -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        loss.backward()
        opt.step()
        return loss.detach(), [p.detach().clone() for p in model.parameters() if p.requires_grad]

    return step


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.AdamW], ids=["sgd", "adamw"])
def test_a_qlora_training_step_jitted_whole_trains_as_eagerly(optimizer: type) -> None:
    """Loss and adapters after each step are eager's, over a change of batch size (a symbolic entry
    taking the NF4 weights whole)."""
    eager, jitted = _qlora_step(optimizer), jitcore.jit(_qlora_step(optimizer))
    for seed, batch in enumerate([8, 8, 6, 6, 5]):
        torch.manual_seed(seed)
        x, y = torch.randn(batch, 64, dtype=torch.bfloat16), torch.randn(batch, 32)
        got, expected = jitted(x, y), eager(x, y)
        assert torch.isfinite(expected[0])
        torch.testing.assert_close(got[0], expected[0])
        for a, e in zip(got[1], expected[1], strict=True):
            torch.testing.assert_close(a, e)
    assert jitcore.cache_hits(jitted) >= 2


# --- a class that answers every torch function by dequantizing --------------------------------------------
# Note [jitcore's reads of a shadow] (jitcore/transforms/jit_hook.py): torchao's CodebookQuantizedTensor
# dequantizes for property reads too; jitcore's read of a shadow's requires_grad ran it on fake codes.


@pytest.mark.parametrize("requires_grad", [False, True], ids=["forward", "input_grad"])
def test_a_codebook_quantized_model_runs_as_eagerly(requires_grad: bool) -> None:
    import torchao.quantization as Q
    from torchao.prototype.quantization.codebook.codebook_quantized_tensor import CodebookWeightOnlyConfig

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    Q.quantize_(model, CodebookWeightOnlyConfig())

    def program(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x + model(x), (64,))

    jitted = jitcore.jit(program)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(2, 5, 64, requires_grad=requires_grad)
        x_eager = x.detach().clone().requires_grad_(requires_grad)
        got, expected = jitted(x), program(x_eager)
        torch.testing.assert_close(got, expected)
        if requires_grad:
            got.square().sum().backward()
            expected.square().sum().backward()
            torch.testing.assert_close(x.grad, x_eager.grad)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


# --- a number read through a class's own __torch_function__ ------------------------------------------------
# Note [A read in a plain subclass's __torch_function__] (jitcore/jit/value_reads.py): such a read was a
# constant behind a check, an entry per value, where the same program on plain tensors keeps one entry.


class _ItemDoubling(torch.Tensor):
    """Answers ``item`` with twice the number."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out * 2 if getattr(func, "__name__", None) == "item" else out


ITEM_READS: dict[str, tuple[Callable[[torch.Tensor], Any], type, bool]] = {
    "logged_add": (lambda x: x + x.amax().item(), _Recording, False),
    "logged_after_a_write": (lambda x: x.clone().add_(1).amax().item(), _Recording, False),
    "doubled_add": (lambda x: x + x.amax().item(), _ItemDoubling, False),
    "doubled_returned": (lambda x: (x.sum().item(), x.abs().amax().item() - 1), _ItemDoubling, False),
    "doubled_scale_under_grad": (lambda x: (x * x.mean().item()).sum(), _ItemDoubling, True),
}


@pytest.mark.parametrize("name", list(ITEM_READS))
def test_a_number_read_through_the_classs_torch_function_keeps_one_entry(name: str) -> None:
    """Values, what the class is handed, and gradients are eager's; other values take the same entry."""
    program, cls, requires_grad = ITEM_READS[name]
    jitted = jitcore.jit(program)
    for seed in range(4):
        made = []
        for _ in range(2):
            torch.manual_seed(seed)
            made.append(torch.randn(4, 6, requires_grad=requires_grad).as_subclass(cls))
        _Recording.log.clear()
        expected = program(made[0])
        handed, _Recording.log[:] = list(_Recording.log), []
        got = jitted(made[1])
        _same(got, expected)
        assert _Recording.log == handed, seed
        if requires_grad:
            got.backward()
            expected.backward()
            _same(made[1].grad, made[0].grad)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3), jitted.miss_log
