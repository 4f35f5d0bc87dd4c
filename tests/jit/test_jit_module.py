"""jitcore.jit(module): the wrapper module, differentially against eager and torch.compile's OptimizedModule.

Each scenario builds three copies of one module (same state): eager, ``jitcore.jit`` and
``torch.compile(backend="eager")``, drives them through the same sequence (calls, train/eval,
load_state_dict, hooks, .to(), zero_grad) and compares outputs, state and what the module API answers.
"""

from __future__ import annotations

import copy
import io
import pickle
import warnings
from typing import Any

import pytest
import torch
from jit_helpers import assert_same
from torch import nn

import jitcore
from jitcore.jit.module import JittedModule


class Net(nn.Module):
    """A forward that depends on the mode, a buffer and a plain attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)
        self.register_buffer("shift", torch.linspace(-1, 1, 3))
        self.scale = 2.0

    def forward(self, x: torch.Tensor, *, bias: float = 0.0) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        h = h * self.scale if self.training else h / self.scale
        return self.fc2(h) + self.shift + bias


def three(module: nn.Module) -> tuple[nn.Module, JittedModule, nn.Module]:
    """Eager, jitcore and torch.compile copies of ``module`` with the same state."""
    # each scenario compiles afresh (Dynamo's cache is keyed by code, shared by instances)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(copy.deepcopy(module), backend="eager")
        return module, jitcore.jit(copy.deepcopy(module)), compiled


def call_all(models: tuple, *args, **kwargs) -> list:
    outs = [m(*args, **kwargs) for m in models]
    for out, label in ((outs[1], "jitcore"), (outs[2], "torch.compile")):
        try:
            assert_same(out, outs[0])
        except AssertionError as exc:
            raise AssertionError(f"{label} differs from eager: {exc}") from None
    return outs


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with torch.compile's ``_orig_mod.`` prefix removed (jitcore's keys have none)."""
    return {k.removeprefix("_orig_mod."): v for k, v in model.state_dict().items()}


def test_calls_modes_and_load_state_dict_match_eager_and_torch_compile():
    torch.manual_seed(0)
    models = three(Net())
    x = torch.randn(5, 4)
    call_all(models, x)
    call_all(models, x, bias=1.5)
    for m in models:
        m.eval()
    assert [m.training for m in models] == [False, False, False]
    assert all(not sub.training for sub in models[1].modules())
    call_all(models, x)
    new_state = {k: torch.randn_like(v) for k, v in models[0].state_dict().items()}
    models[0].load_state_dict(new_state)
    models[1].load_state_dict(new_state)  # the original's keys
    models[2].load_state_dict({f"_orig_mod.{k}": v for k, v in new_state.items()})  # torch.compile prefixes
    call_all(models, x)
    for m in models:
        m.train()
    call_all(models, x)
    # train, train with bias=, eval; not load_state_dict, not train again
    assert jitcore.cache_misses(models[1]) == 3
    reasons = [str(r) for rs in jitcore.miss_reasons(models[1]) for r in rs]
    assert any("training" in r for r in reasons), reasons


def test_state_dict_keys_are_the_original_modules():
    eager, jitted, compiled = three(Net())
    assert list(jitted.state_dict()) == list(eager.state_dict()) == list(state_of(compiled))
    assert [n for n, _ in jitted.named_parameters()] == [n for n, _ in eager.named_parameters()]
    assert [n for n, _ in jitted.named_buffers()] == ["shift"]
    assert len(list(jitted.parameters())) == len(list(compiled.parameters())) == 4
    assert [n for n, _ in jitted.named_children()] == ["fc1", "fc2"]
    plain = Net()
    plain.load_state_dict(jitted.state_dict())  # moves freely between the module and its wrapper
    for k, v in plain.state_dict().items():
        assert torch.equal(v, jitted.state_dict()[k])


def test_attribute_access_reaches_the_original():
    module = Net()
    jitted = jitcore.jit(module)
    assert jitted.fc1 is module.fc1 and jitted.scale == 2.0
    jitted.scale = 4.0
    assert module.scale == 4.0
    x = torch.randn(2, 4)
    assert_same(jitted(x), module(x))  # the changed attribute is seen (a guard failed: retraced)
    jitted.extra = 1
    assert module.extra == 1
    del jitted.extra
    assert not hasattr(module, "extra")
    with pytest.raises(AttributeError):
        jitted.no_such_attribute  # noqa: B018
    assert "jitcore.jit(" in repr(jitted) and "Linear(in_features=4" in repr(jitted)
    assert "fc1" in dir(jitted)


def test_to_zero_grad_and_requires_grad_match_eager_and_torch_compile():
    torch.manual_seed(1)
    models = three(Net())
    x = torch.randn(3, 4)
    for m in models:
        m(x).sum().backward()
    grads = [[p.grad.clone() for p in m.parameters()] for m in models]
    for a, b, c in zip(*grads):
        torch.testing.assert_close(b, a)
        torch.testing.assert_close(c, a)
    for m in models:
        m.zero_grad()
    assert all(p.grad is None for m in models for p in m.parameters())
    assert all(m.to(torch.float64) is m for m in models)  # .to() returns the wrapper itself
    assert all(p.dtype is torch.float64 for m in models for p in m.parameters())
    call_all(models, x.double())
    for m in models:
        m.requires_grad_(False)
    call_all(models, x.double())


def test_container_modules_index_and_iterate_as_the_original():
    seq = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    jitted = jitcore.jit(seq)
    assert len(jitted) == 3 and jitted[0] is seq[0] and list(jitted) == list(seq) and bool(jitted)
    x = torch.randn(2, 4)
    assert_same(jitted(x), seq(x))


def test_hooks_run_as_eagerly_on_every_call():
    torch.manual_seed(2)
    models = three(Net())
    seen: dict[int, list] = {id(m): [] for m in models}

    def pre(module, args):
        return (args[0] * 2,)

    def post_kwargs(module, args, kwargs, out):
        return out + kwargs.get("bias", 0.0) * 10

    x = torch.randn(4, 4)
    handles = []
    for m in models:
        handles.append(m.register_forward_pre_hook(pre))  # through the wrapper: lands on the original
        handles.append(m.register_forward_hook(post_kwargs, with_kwargs=True))
        handles.append(m.register_forward_hook(
            lambda mod, a, out, key=id(m): seen[key].append(out.detach())))  # noqa: B008 - this module's id
    for _ in range(3):
        call_all(models, x, bias=0.5)
    assert [len(v) for v in seen.values()] == [3, 3, 3]  # a side effect on every call, not only while tracing
    for a, b in zip(seen[id(models[0])], seen[id(models[1])]):
        torch.testing.assert_close(b, a)
    for h in handles:
        h.remove()
    call_all(models, x)
    assert [len(v) for v in seen.values()] == [3, 3, 3]


def test_pre_hook_with_kwargs_and_always_call_hook_on_error():
    models = three(Net())
    calls = []

    def pre_kwargs(module, args, kwargs):
        return (args[0] + 1,), {"bias": kwargs.get("bias", 0.0) - 1}

    def always(module, args, out):
        calls.append(out is None)

    for m in models:
        m.register_forward_pre_hook(pre_kwargs, with_kwargs=True)
        m.register_forward_hook(always, always_call=True)
    call_all(models, torch.randn(2, 4), bias=2.0)
    assert calls == [False, False, False]
    calls.clear()
    for m in models:
        with pytest.raises(RuntimeError):
            m(torch.randn(2, 5))  # wrong width: forward raises, the always_call hook still runs
    assert calls == [True, True, True]


def test_submodule_hooks_and_global_hooks():
    torch.manual_seed(3)
    models = three(Net())
    x = torch.randn(3, 4)
    for m in models:
        m.fc1.register_forward_hook(lambda mod, a, out: out * -1)
    call_all(models, x)
    fired = []
    register = nn.modules.module.register_module_forward_hook
    handle = register(lambda mod, a, out: fired.append(type(mod).__name__))
    try:
        eager_out = models[0](x)
        eager_fired, fired[:] = list(fired), []
        assert_same(models[1](x), eager_out)
        assert fired == eager_fired  # once per module, as eagerly: Linear, Linear, Net
    finally:
        handle.remove()


def test_backward_hooks_run():
    models = three(Net())
    grads = {id(m): [] for m in models}
    for m in models:
        m.register_full_backward_hook(
            lambda mod, gin, gout, key=id(m): grads[key].append(gout[0].clone()))  # noqa: B008 - this module's id
    x = torch.randn(2, 4, requires_grad=True)
    for m in models:
        m(x).sum().backward()
    # torch.compile(backend="eager") of torch 2.13 does not fire it (grads[id(models[2])] stays empty)
    assert [len(grads[id(m)]) for m in models[:2]] == [1, 1]
    torch.testing.assert_close(grads[id(models[1])][0], grads[id(models[0])][0])


def test_inspection_apis_accept_the_wrapper():
    jitted = jitcore.jit(Net())
    x = torch.randn(2, 4, requires_grad=True)
    jitted(x)
    jitted(x)
    assert jitcore.cache_hits(jitted) == 1 and jitcore.cache_misses(jitted) == 1
    assert jitcore.last_traces(jitted) and jitcore.last_prologue_traces(jitted)
    assert jitcore.miss_reasons(jitted) == [[]]
    assert jitcore.last_backward_traces(jitted)
    out = io.StringIO()
    jitcore.explain(jitted, file=out, color=False)
    assert "module Net" in out.getvalue()
    debugger = jitcore.Debugger(jitted, (x,))
    assert_same(debugger.run_to_end(), jitted(x))


def test_trace_inputs_are_named_after_qualified_names():
    torch.manual_seed(4)
    # in train mode: not the fused fast path (one op)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    jitted = jitcore.jit(layer)
    x = torch.randn(2, 5, 16)
    assert_same(jitted(x), layer(x))
    trace = jitcore.last_traces(jitted)[0]
    names = [a.name for a in trace.args]
    assert {"linear1_weight", "linear2_bias", "self_attn_in_proj_weight", "self_attn_out_proj_weight",
            "norm1_weight"} <= set(names), names
    text = str(trace)
    assert '# linear1_weight: "cpu f32[32, 16]" linear1.weight' in text
    assert '# self_attn_out_proj_weight: "cpu f32[16, 16]" self_attn.out_proj.weight' in text
    # torch's own module code carries its source lines, as user functions do
    assert all(b.source for b in trace.bound_symbols), [b for b in trace.bound_symbols if not b.source]
    assert "transformer.py" in text and "linear.py" in text


def test_names_of_nested_state_in_the_grad_trace():
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    jitted = jitcore.jit(Outer())
    jitted(torch.randn(2, 3))
    forward = str(jitcore.last_traces(jitted)[-1])  # the grad transform's forward keeps the notes
    assert '# blocks_1_weight: "cpu f32[3, 3]" blocks.1.weight' in forward, forward
    backward = str(jitcore.last_backward_traces(jitted)[0])
    assert "blocks_1_weight" in backward


class Decorated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    @jitcore.jit
    def forward(self, x):
        return torch.tanh(self.fc(x)) * (2 if self.training else 3)


class Plain(Decorated):
    forward = Decorated.forward.__wrapped__


def test_decorator_on_a_forward_method():
    torch.manual_seed(5)
    a, b = Decorated(), Decorated()
    plain = Plain()
    x = torch.randn(3, 4)
    for module in (a, b):
        plain.load_state_dict(module.state_dict())
        assert_same(module(x), plain(x))
        module.eval(), plain.eval()
        assert_same(module(x), plain(x))
        plain.train()
    trace = jitcore.last_traces(Decorated.forward)[0]
    assert [p.name for p in trace.args][1:] == ["fc_weight", "fc_bias"]
    assert "fc.weight" in str(trace)


def test_jit_of_a_bound_forward_and_a_replaced_forward():
    module = Net()
    x = torch.randn(2, 4)
    jitted_forward = jitcore.jit(module.forward)
    assert_same(jitted_forward(x), module.forward(x))
    assert "fc1_weight" in str(jitcore.last_traces(jitted_forward)[0])
    jitted = jitcore.jit(module)
    assert_same(jitted(x), module(x))
    module.forward = lambda x, **kw: x.sum(-1)  # eager calls the instance's forward from now on
    assert_same(jitted(x), module(x))
    del module.forward
    assert_same(jitted(x), module(x))


def test_a_wrapper_installed_over_a_jitted_bound_forward():
    """``jitcore.jit(module.forward)`` runs that bound method, as eager does, whatever is installed as
    ``module.forward`` afterwards: a wrapper calling the jitted forward (accelerate's and peft's style)
    and the jitted forward itself called by another jitted function. Both recursed without end
    (RecursionError): the jitted forward read ``module.forward`` again and called itself."""
    x = torch.randn(2, 4)
    module, calls = Net(), []
    jitted = jitcore.jit(module.forward)

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        return jitted(*args, **kwargs) * 2

    module.forward = counting
    for _ in range(2):
        assert_same(module(x), Net.forward(module, x) * 2)
    assert (len(calls), jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1, 1)
    outer = jitcore.jit(lambda t: module(t) + 1)
    assert_same(outer(x), Net.forward(module, x) * 2 + 1)
    installed = Net()
    installed.forward = jitcore.jit(installed.forward)  # torch.compile's idiom, then called inside
    outer = jitcore.jit(lambda t: installed(t) + 1)
    for _ in range(2):
        assert_same(outer(x), Net.forward(installed, x) + 1)
    assert (jitcore.cache_misses(outer), jitcore.cache_hits(outer)) == (1, 1)


def test_copy_and_pickle_rebuild_the_wrapper():
    jitted = jitcore.jit(Net(), cache_limit=8)
    x = torch.randn(2, 4)
    jitted(x)
    for clone in (copy.deepcopy(jitted), pickle.loads(pickle.dumps(jitted))):
        assert isinstance(clone, JittedModule) and clone.jitted_forward.cache_limit == 8
        assert clone.fc1 is not jitted.fc1
        assert_same(clone(x), jitted(x))


def test_a_stub_forward_would_fail_these_tests():
    """Guard against a wrapper that forgets to call the module: outputs must track the weights."""
    module = Net()
    jitted = jitcore.jit(module)
    x = torch.randn(2, 4)
    before = jitted(x)
    with torch.no_grad():
        module.fc2.bias += 1
    assert_same(jitted(x), before + 1)


class Stack(nn.Module):
    """``n`` residual blocks of (norm, linear): 3 parameters and 2 submodules per block."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8)) for _ in range(n))
        self.eps = 0.5

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x) * self.eps
        return x


def prologue_lines(model: nn.Module) -> int:
    jitted = jitcore.jit(model)
    with torch.no_grad():
        jitted(torch.randn(2, 8))
    return str(jitcore.last_prologue_traces(jitted)[0]).count("\n")


def test_prologue_checks_module_state_as_one_check_and_grows_slowly():
    small, large = prologue_lines(Stack(2)), prologue_lines(Stack(8))
    tensors_added = 6 * 4  # 6 more blocks of 4 tensors
    assert (large - small) / tensors_added <= 4, (small, large)  # reading each input, ~3 lines
    jitted = jitcore.jit(Stack(2))
    with torch.no_grad():
        jitted(torch.randn(2, 8))
    text = str(jitcore.last_prologue_traces(jitted)[0])
    assert "__state_of_Stack()" in text and "._forward_hooks" not in text, text


def test_grouped_state_still_catches_every_change_and_says_which():
    torch.manual_seed(6)
    model = Stack(2)
    jitted = jitcore.jit(copy.deepcopy(model))
    x = torch.randn(3, 8)

    def same_and_reason() -> str:
        with torch.no_grad():
            assert_same(jitted(x), model(x))
        return " | ".join(str(r) for r in jitcore.miss_reasons(jitted)[-1])

    same_and_reason()
    for m in (model, jitted):
        m.blocks[1][0].register_forward_hook(lambda mod, a, out: out * 3)
    assert "blocks.1.0 has forward hooks" in same_and_reason()
    for m in (model, jitted):
        m.eps = 0.25
    assert "self.eps: expected 0.5, got 0.25" in same_and_reason()
    weight = torch.randn(8, 8)
    for m in (model, jitted):
        m.blocks[0][1].weight = nn.Parameter(weight.clone())
    same_and_reason()  # a replaced parameter: a new object at the same path is read as the input
    for m in (model, jitted):
        m.blocks[0][1].bias.requires_grad_(False)
    assert "self.blocks.0.1.bias.requires_grad: expected True, got False" in same_and_reason()
    for m in (model, jitted):
        m.blocks.append(nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8)))
        m.blocks[2].load_state_dict(m.blocks[1].state_dict())
    assert "keys" in same_and_reason() or "length" in same_and_reason()
    assert jitcore.cache_misses(jitted) >= 5


def test_forward_defaults_are_bound_and_guarded():
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x, scale=2.0, *, shift=0.5):
            return self.fc(x) * scale + shift

    model = Scaled()
    jitted = jitcore.jit(model)
    x = torch.randn(2, 3)
    assert_same(jitted(x), model(x))
    assert_same(jitted(x, 3.0), model(x, 3.0))
    Scaled.forward.__defaults__ = (4.0,)
    Scaled.forward.__kwdefaults__ = {"shift": -1.0}
    assert_same(jitted(x), model(x))


def test_optimizer_steps_between_calls_match_eager_and_torch_compile():
    torch.manual_seed(7)
    models = three(Net())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in models]
    x = torch.randn(6, 4)
    for _ in range(3):
        outs = call_all(models, x)
        for out, opt in zip(outs, optimizers):
            opt.zero_grad()
            out.square().mean().backward()
            opt.step()
    assert jitcore.cache_misses(models[1]) == 1  # in-place updates of the parameters never retrace
    for name, value in models[0].state_dict().items():
        torch.testing.assert_close(models[1].state_dict()[name], value)
        torch.testing.assert_close(state_of(models[2])[name], value)


def test_lazy_module_initializes_through_its_eager_pre_hook():
    torch.manual_seed(8)
    lazy = nn.Sequential(nn.LazyLinear(5), nn.ReLU())
    jitted = jitcore.jit(copy.deepcopy(lazy))
    x = torch.randn(2, 7)
    torch.manual_seed(9)
    expected = lazy(x)
    torch.manual_seed(9)
    assert_same(jitted(x), expected)  # the first call runs eagerly: LazyLinear makes its weight
    assert jitcore.cache_misses(jitted) == 1 and jitted[0].weight.shape == (5, 7)
    assert_same(jitted(x), expected)  # traced now
    assert jitcore.cache_misses(jitted) == 2 and "_0_weight" in str(jitcore.last_traces(jitted)[0])
    assert_same(jitted(x), expected)
    assert jitcore.cache_misses(jitted) == 2 and jitcore.cache_hits(jitted) == 1


def test_tied_weights_and_jitting_a_jitted_module():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, tokens):
            return self.head(self.embed(tokens))

    torch.manual_seed(10)
    model = Tied()
    jitted = jitcore.jit(copy.deepcopy(model))
    tokens = torch.tensor([[1, 2, 3]])
    assert_same(jitted(tokens), model(tokens))
    assert [a.name for a in jitcore.last_traces(jitted)[0].args] == ["tokens", "embed_weight"]  # one input
    untied = nn.Parameter(torch.randn(10, 4))
    model.head.weight = untied
    jitted.head.weight = nn.Parameter(untied.detach().clone())
    assert_same(jitted(tokens), model(tokens))  # the alias guard failed: traced again, two inputs
    assert jitcore.cache_misses(jitted) == 2
    again = jitcore.jit(jitted, cache_limit=3)
    assert isinstance(again, JittedModule) and again._orig_mod is jitted._orig_mod
    assert_same(again(tokens), model(tokens))


def test_torch_module_lines_print_with_the_package_path():
    jitted = jitcore.jit(nn.Sequential(nn.Linear(3, 3), nn.ReLU()))
    jitted(torch.randn(2, 3))
    forward = str(jitcore.last_traces(jitted)[-1])  # the grad transform's forward keeps them
    assert "  # torch/nn/modules/linear.py:" in forward, forward
    assert " in forward: return F.linear(" in forward
    assert "  # torch/nn/modules/activation.py:" in forward


def test_a_jitted_submodule_inside_a_jitted_model_is_part_of_its_trace():
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = jitcore.jit(nn.Linear(3, 3))
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(self.inner(x).relu())

    torch.manual_seed(11)
    model = Outer()
    x = torch.randn(2, 3)
    expected = model(x)
    assert jitcore.cache_misses(model.inner) == 1
    jitted = jitcore.jit(model)
    assert_same(jitted(x), expected)
    assert_same(jitted(x), expected)
    names = [a.name for a in jitcore.last_traces(jitted)[0].args]
    assert names == ["x", "inner_weight", "inner_bias", "fc_weight", "fc_bias"], names
    assert [n for n, _ in model.named_parameters()] == ["inner.weight", "inner.bias", "fc.weight", "fc.bias"]
    assert jitcore.cache_misses(model.inner) == 1  # the inner wrapper did not trace on the outer's proxies
    twice = jitcore.jit(lambda t: model.inner(t) * 2)
    assert_same(twice(x), model.inner(x) * 2)
    inner_forward = jitcore.jit(model.fc.forward)
    thrice = jitcore.jit(lambda t: inner_forward(t) * 3)
    assert_same(thrice(x), model.fc(x) * 3)
    assert jitcore.cache_misses(inner_forward) == 0  # inlined into the lambda's trace, not traced alone
    assert [a.name for a in jitcore.last_traces(thrice)[0].args] == ["t", "weight", "bias"]
    with torch.no_grad():
        model.inner.bias += 1  # state read afresh by both
    assert_same(jitted(x), model(x))


class _TransposedLinear(nn.Linear):
    """Falcon's linear layer: ``input @ self.weight.T``, the transpose read as an attribute."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T + self.bias


class _Blocks(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.h = nn.ModuleList([nn.Sequential(nn.LayerNorm(4), _TransposedLinear(4, 4)) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "enumerate":
            for i, block in enumerate(self.h):
                x = block(x) * (i + 1)
        elif self.how == "zip":
            for block, scale in zip(self.h, (1.0, 2.0)):
                x = block(x) * scale
        else:
            for block in list(self.h):
                x = block(x)
        return x


def _train_twins(step: Any, eager: nn.Module) -> list[str]:
    """Three training steps (a backward inside) on ``eager`` and on a jitted copy: losses and gradients
    compared after each; the names of the computation's inputs."""
    model = copy.deepcopy(eager)
    jitted = jitcore.jit(step)
    for i in range(3):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(model, x), step(eager, x))
        for p, q in zip(model.parameters(), eager.parameters()):
            assert_same(p.grad, q.grad)
    assert jitcore.cache_misses(jitted) == 2  # the first backward sets .grad, the next ones add to it
    return [a.name for a in jitcore.last_traces(jitted)[0].args]


@pytest.mark.parametrize("how", ["enumerate", "zip", "list"])
def test_modules_iterated_by_c_builtins_have_their_parameters_as_named_inputs(how: str) -> None:
    """``enumerate(self.h)`` (Falcon's decoder loop), ``zip`` and ``list`` over a ModuleList iterate it as
    ``for`` does: each parameter is an input named by its path. Natively iterated, the modules had no
    path, their parameters were captured tensors, and ``self.weight.T`` read on one was a tensor of its
    own: under a backward inside the function the grad transform stopped at it ("t7 is used before it
    is produced") where eager trains."""

    def step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    torch.manual_seed(0)
    names = _train_twins(step, _Blocks(how))
    parameters = [f"h_{i}_{j}_{name}" for i in range(2) for j in range(2) for name in ("weight", "bias")]
    assert names[1:9] == parameters


@pytest.mark.parametrize("attribute", ["T", "mT", "H"])
def test_tensors_read_as_attributes_of_a_parameter_the_program_holds(attribute: str) -> None:
    """``p.T`` of a parameter ``module.parameters()`` yields (the program holds the caller's tensor itself,
    jit/held_tensors.py) is recorded on its proxy: read natively it was a tensor of its own, a constant
    input with no path, and a backward inside the function raised where eager trains."""

    def step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = model(x).sum()
        for p in model.parameters():
            if p.ndim == 2:
                loss = loss + (x @ getattr(p, attribute)).square().mean()
        loss.backward()
        return loss.detach()

    torch.manual_seed(0)
    names = _train_twins(step, nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)))
    assert not any(name.startswith("c") for name in names)  # no captured tensor
