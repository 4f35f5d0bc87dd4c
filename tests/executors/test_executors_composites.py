"""Composite calls (jitcore/executors/composites.py): the aten calls a torch-level ``linear`` made in the grad
transform's forward run as one ``aten.linear`` call on the torch executor, with the calls it stands for
as its subsymbols, only where replaying ``linear`` makes exactly those calls. Eager and jitted calls are
compared bit for bit: values, dtypes, strides, whether the output is a view, requires_grad, gradients."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import jitcore

LINEAR = "torch.ops.aten.linear.default("


def _inputs(shape: tuple[int, ...], layout: str, grad: bool) -> torch.Tensor:
    torch.manual_seed(0)
    if layout == "transposed":  # its first dimensions are not contiguous: matmul's fold depends on grad
        x = torch.randn(shape[1], shape[0], *shape[2:]).transpose(0, 1)
    else:
        x = torch.randn(shape)
    return x.requires_grad_(grad)


def _linear(bias: bool) -> torch.nn.Linear:
    torch.manual_seed(1)
    return torch.nn.Linear(8, 5, bias=bias)


def _same_tensor(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape)
    assert actual.stride() == expected.stride()
    assert actual.requires_grad == expected.requires_grad
    assert (actual._base is None) == (expected._base is None)
    assert torch.equal(actual, expected)


def _run(fn: Callable[..., torch.Tensor], x: torch.Tensor, params: list[torch.Tensor], grad_mode: bool
         ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    x = x.detach().clone().requires_grad_(x.requires_grad)
    with torch.set_grad_enabled(grad_mode):
        out = fn(x)
    grads: list[torch.Tensor | None] = []
    if out.requires_grad:
        leaves = [t for t in (x, *params) if t.requires_grad]
        grads = list(torch.autograd.grad(out.sin().sum(), leaves))
    return out, grads


CASES = [  # (input shape, layout, bias)
    ((4, 8), "contiguous", True),
    ((4, 8), "contiguous", False),
    ((2, 3, 8), "contiguous", True),
    ((2, 3, 8), "contiguous", False),
    ((2, 3, 2, 8), "contiguous", False),
    ((3, 2, 8), "transposed", True),
    ((3, 2, 8), "transposed", False),
]


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("x_grad", [False, True], ids=["x", "x_requires_grad"])
@pytest.mark.parametrize(("shape", "layout", "bias"), CASES)
def test_a_linear_computes_as_eagerly(shape: tuple[int, ...], layout: str, bias: bool, x_grad: bool,
                                      grad_mode: bool) -> None:
    eager, jitted = _linear(bias), _linear(bias)
    jm = jitcore.jit(jitted, executor="torch")
    x = _inputs(shape, layout, x_grad)
    for _ in range(3):  # the tracing call and cached calls
        expected, expected_grads = _run(eager, x, list(eager.parameters()), grad_mode)
        actual, actual_grads = _run(jm, x, list(jitted.parameters()), grad_mode)
        _same_tensor(actual, expected)
        assert len(actual_grads) == len(expected_grads)
        for a, e in zip(actual_grads, expected_grads):
            _same_tensor(a, e)


@pytest.mark.parametrize(("shape", "bias"), [((4, 8), True), ((4, 8), False), ((2, 3, 8), True),
                                             ((2, 3, 8), False)])
def test_a_linear_of_the_forward_is_one_call_with_its_aten_calls_as_subsymbols(shape: tuple[int, ...],
                                                                              bias: bool) -> None:
    jm = jitcore.jit(_linear(bias), executor="torch")
    jm(torch.randn(shape))
    forward = str(jitcore.last_traces(jm)[-1])
    assert "def forward(" in forward, forward
    assert "# composite calls: 1 run of aten calls run as one call" in forward, forward
    call = next(line for line in forward.splitlines() if LINEAR in line)
    assert call.startswith("  t") and call.split(LINEAR)[1].startswith("input_0, weight"), forward
    below = forward.split(call)[1].splitlines()
    subsymbols = [line for line in below if line.startswith("    # t")]
    assert any("torch.ops.aten.mm.default(" in s or "torch.ops.aten.addmm.default(" in s for s in subsymbols)
    assert "# torch/nn/modules/linear.py" in forward.split(call)[0].splitlines()[-1]  # its user line


def test_a_view_the_backward_saves_is_still_made_and_saved() -> None:
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    jitted = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    jitted.load_state_dict(eager.state_dict())
    jm = jitcore.jit(jitted, executor="torch")
    x = torch.randn(2, 3, 8)
    for _ in range(2):
        expected, expected_grads = _run(eager, x, list(eager.parameters()), True)
        actual, actual_grads = _run(jm, x, list(jitted.parameters()), True)
        _same_tensor(actual, expected)
        for a, e in zip(actual_grads, expected_grads):
            _same_tensor(a, e)
    forward = str(jitcore.last_traces(jm)[-1])
    assert forward.count(LINEAR) == 2, forward
    saved = forward.split("return ")[-1]
    viewed = [line.split(" = ")[0].strip() for line in forward.splitlines()
              if line.startswith("  t") and "aten.view.default(" in line]
    assert viewed and all(name in saved for name in viewed), forward  # made outside the call, then saved


def test_a_run_is_one_call_only_of_what_linear_makes_of_it() -> None:
    """``mm(y.view(-1, 8), w.t())`` of a 3-d ``y`` reads like linear's fold of ``y`` (view, t, mm), but
    ``linear(y, w)`` would return a 3-d tensor: the replay refuses it, and ``linear`` of the view, whose
    calls are the t and the mm, is the call."""
    torch.manual_seed(0)
    w = torch.randn(5, 8, requires_grad=True)

    def f(y: torch.Tensor) -> torch.Tensor:
        return torch.mm(y.view(-1, 8), w.t())

    jfn = jitcore.jit(f, executor="torch")
    y = torch.randn(2, 3, 8)
    for _ in range(2):
        expected, expected_grads = _run(f, y, [w], True)
        actual, actual_grads = _run(jfn, y, [w], True)
        _same_tensor(actual, expected)
        for a, e in zip(actual_grads, expected_grads):
            _same_tensor(a, e)
    forward = str(jitcore.last_traces(jfn)[-1])
    call = next(line for line in forward.splitlines() if LINEAR in line)
    assert not call.split(LINEAR)[1].startswith("y,") and '"cpu f32[6, 5]"' in call, forward


def test_a_linear_under_autocast_computes_as_eagerly() -> None:
    eager, jitted = _linear(True), _linear(True)
    jm = jitcore.jit(jitted, executor="torch")
    x = torch.randn(2, 3, 8)
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected, expected_grads = _run(eager, x, list(eager.parameters()), True)
            actual, actual_grads = _run(jm, x, list(jitted.parameters()), True)
        _same_tensor(actual, expected)
        for a, e in zip(actual_grads, expected_grads):
            _same_tensor(a, e)


def test_an_input_whose_metadata_changes_in_place_later_is_not_replayed() -> None:
    """``h.t_()`` after ``h @ w.t()``: h's proxy has one shadow, with the strides it has after the ``t_``,
    so a replay of ``linear`` on it would not be of the tensor the ``t`` and ``mm`` read: the calls stay
    as recorded."""
    torch.manual_seed(0)
    w = torch.randn(4, 4)

    def f(u: torch.Tensor) -> torch.Tensor:
        h = u * 1
        y = h @ w.t()
        h.t_()
        return y + h

    jfn = jitcore.jit(f, executor="torch")
    u = torch.randn(4, 4, requires_grad=True)
    for _ in range(2):
        expected, expected_grads = _run(f, u, [w], True)
        actual, actual_grads = _run(jfn, u, [w], True)
        _same_tensor(actual, expected)
        for a, e in zip(actual_grads, expected_grads, strict=True):
            _same_tensor(a, e)
    forward = str(jitcore.last_traces(jfn)[-1])
    assert "def forward(" in forward and "aten.t_.default(" in forward, forward
    assert LINEAR not in forward and "torch.ops.aten.mm.default(" in forward, forward


MATMUL = "torch.ops.aten.matmul.default("
RESHAPE = "torch.ops.aten.reshape.default("
MATMUL_CASES = [  # (shape of a, shape of b): matmul's fold, its batched product, a broadcast batch
    ((2, 3, 8), (8, 5)),
    ((2, 4, 5, 8), (2, 4, 8, 5)),
    ((2, 3, 8), (2, 8, 4)),
    ((2, 1, 5, 8), (4, 8, 3)),
    ((5, 8), (2, 8, 3)),
]


def _grad_calls(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]
                ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    inputs = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    out = fn(*inputs)
    return out, list(torch.autograd.grad(out.sin().sum(), [t for t in inputs if t.requires_grad]))


@pytest.mark.parametrize("grads", [(True, False), (False, True), (True, True)], ids=["a", "b", "a_b"])
@pytest.mark.parametrize(("a_shape", "b_shape"), MATMUL_CASES)
def test_a_matmul_computes_as_eagerly(a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                                      grads: tuple[bool, bool]) -> None:
    """Bit for bit, with the strides and aliasing of eager's output; the products whose copied inputs
    the backward saves stay as recorded (Note [Values of a run read after it]), the rest is one call."""
    torch.manual_seed(0)
    a, b = torch.randn(a_shape).requires_grad_(grads[0]), torch.randn(b_shape).requires_grad_(grads[1])

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a * 2, b * 3)

    jfn = jitcore.jit(f, executor="torch")
    for _ in range(3):
        expected, expected_grads = _grad_calls(f, [a, b])
        actual, actual_grads = _grad_calls(jfn, [a, b])
        _same_tensor(actual, expected)
        for x, y in zip(actual_grads, expected_grads, strict=True):
            _same_tensor(x, y)
    forward = str(jitcore.last_traces(jfn)[-1])
    copied = a_shape[:-2] != b_shape[:-2] and len(b_shape) > 2  # a broadcast batch copies its inputs
    assert (MATMUL in forward) == (not copied), forward


class _Attention(torch.nn.Module):
    """A Hugging Face-style attention block: q/k/v linears, heads by view and transpose, matmul,
    softmax, matmul, the heads back by transpose and reshape, an output linear."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.heads, self.head_dim = heads, dim // heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (p(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(2, 3)) / self.head_dim ** 0.5
        o = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.o(o.transpose(1, 2).reshape(b, s, d))


@pytest.mark.parametrize("x_grad", [False, True], ids=["x", "x_requires_grad"])
def test_an_attention_block_computes_as_eagerly_in_fewer_calls(x_grad: bool) -> None:
    """Its forward's copies for ``bmm`` and the heads' reshape are ``reshape`` calls, its linears
    ``linear`` calls; values, strides and gradients are eager's bit for bit."""
    eager, jitted = _Attention(), _Attention()
    jm = jitcore.jit(jitted, executor="torch")
    x = torch.randn(2, 5, 32).requires_grad_(x_grad)
    for _ in range(3):
        expected, expected_grads = _run(eager, x, list(eager.parameters()), True)
        actual, actual_grads = _run(jm, x, list(jitted.parameters()), True)
        _same_tensor(actual, expected)
        for a, e in zip(actual_grads, expected_grads, strict=True):
            _same_tensor(a, e)
    recorded, forward = (str(t) for t in jitcore.last_traces(jm)[-2:])
    assert forward.count(LINEAR) == 4 and forward.count(RESHAPE) == 4, forward
    top_level = [line for line in forward.splitlines() if line.startswith("  t")]
    assert sum("aten.bmm.default(" in line for line in top_level) == 2, forward  # its inputs are saved

    def calls(text: str) -> int:
        return sum(1 for line in text.splitlines() if line.startswith("  t") and " = torch." in line)

    assert calls(forward) <= calls(recorded) - 4 - 4 * 2, (recorded, forward)
