"""User ``torch.autograd.Function`` subclasses through jitcore: the user's backward is what runs
(traced into the backward trace), never gradients derived from the forward's ops."""

from __future__ import annotations

import warnings

import pytest
import torch

import jitcore


class ScaledExp(torch.autograd.Function):
    """exp with a deliberately *wrong* backward (times k): the jit must use it, as eager does."""

    @staticmethod
    def forward(ctx, x, k):
        y = x.exp()
        ctx.save_for_backward(y)
        ctx.k = k
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * ctx.k, None


class ClampGrad(torch.autograd.Function):
    """Identity forward, clamped gradients; the ``setup_context`` style (forward without ctx)."""

    @staticmethod
    def forward(x, bound):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.bound = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad.clamp(-ctx.bound, ctx.bound), None


def _grads(fn, *tensors):
    tensors = [t.detach().clone().requires_grad_() for t in tensors]
    out = fn(*tensors)
    out.backward(torch.linspace(-3, 3, out.numel()).reshape(out.shape))
    return out.detach(), [t.grad for t in tensors]


def test_user_backward_is_traced_and_used() -> None:
    def f(x, w):
        return ScaledExp.apply(x * w, 3.0) + w

    x, w = torch.randn(5), torch.randn(5)
    jf = jitcore.jit(f)
    expected, got = _grads(f, x, w), _grads(jf, x, w)
    torch.testing.assert_close(got, expected)
    backward = str(jitcore.last_backward_traces(jf)[0])
    assert "torch.ops.aten.mul.Tensor" in backward and "3.0" in backward  # the user's grad * y * k
    assert "exp" not in backward  # exp's own derivative is not used: the saved output is
    pass1 = str(jitcore.last_traces(jf)[0])
    assert "run_autograd_function" in pass1 and "# t" in pass1  # the forward, interpreted, as subsymbols


def test_setup_context_style() -> None:
    def f(x):
        return ClampGrad.apply(x * 2, 0.5).sum(dim=0)

    x = torch.randn(3, 4)
    jf = jitcore.jit(f)
    torch.testing.assert_close(_grads(jf, x), _grads(f, x))


def test_without_grad_the_forward_runs() -> None:
    jf = jitcore.jit(lambda x: ScaledExp.apply(x, 2.0) * 2)
    x = torch.randn(4)
    torch.testing.assert_close(jf(x), x.exp() * 2)
    assert jitcore.last_backward_traces(jf) == []


class CubeGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x * 3


def test_a_function_on_a_tensor_subclass() -> None:
    from torch.testing._internal.two_tensor import TwoTensor

    def f(x):
        return CubeGrad.apply(x).sum()

    grads = []
    for fn in (f, jitcore.jit(f)):
        x = TwoTensor(torch.arange(3.0), torch.arange(3.0) * 2).requires_grad_()
        fn(x).backward(TwoTensor(torch.ones(()), torch.ones(())))
        grads.append(x.grad)
    eager, jitted = grads
    assert type(jitted) is type(eager) is TwoTensor
    torch.testing.assert_close((jitted.a, jitted.b), (eager.a, eager.b))


class DetachedDouble(torch.autograd.Function):
    """A forward computed from a detached input, and another output marked non-differentiable:
    apply makes the first require grad (its backward is the Function's), not the second."""

    @staticmethod
    def forward(ctx, x):
        y = x.detach() * 2
        mask = (x > 0).to(x.dtype)
        ctx.mark_non_differentiable(mask)
        return y, mask

    @staticmethod
    def backward(ctx, grad, _mask_grad):
        return grad * 3


def test_a_forward_computed_from_detached_tensors_gives_outputs_that_require_grad() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y, mask = DetachedDouble.apply(x)
        loss = (y * mask).sum()
        loss.backward()  # raised: "element 0 of tensors does not require grad"
        return loss, y.requires_grad, mask.requires_grad

    jitted = jitcore.jit(f)
    for _ in range(2):
        x = torch.randn(5, requires_grad=True)
        ex = x.detach().clone().requires_grad_(True)
        out, expected = jitted(x), f(ex)
        torch.testing.assert_close(out[0], expected[0])
        assert out[1:] == expected[1:] == (True, False)
        torch.testing.assert_close(x.grad, ex.grad)
    assert jitcore.cache_hits(jitted) == 1



class DetachedPlusBias(torch.autograd.Function):
    """A forward that computes its output from one input on the graph (``+ b``) and from the other off
    it (``x.detach()``), as BitNet's linear adds the bias after an int8 matmul."""

    @staticmethod
    def forward(ctx, x, b):
        return x.detach() * 2 + b

    @staticmethod
    def backward(ctx, grad):
        return grad * 2, grad


def test_a_forward_output_on_the_graph_of_some_inputs_reaches_every_input() -> None:
    """The output was taken as connected, since it was on the shadow graph through ``b``: a backward
    inside found ``b`` alone as a leaf and ``x.grad`` stayed None (eager: 2)."""
    def f(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        loss = DetachedPlusBias.apply(x, b).sum()
        loss.backward()
        return loss.detach()

    jitted = jitcore.jit(f)
    for _ in range(2):
        x, b = torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)
        ex, eb = x.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
        torch.testing.assert_close(jitted(x, b), f(ex, eb))
        torch.testing.assert_close(x.grad, ex.grad)
        torch.testing.assert_close(b.grad, eb.grad)
    assert jitcore.cache_hits(jitted) == 1

class Detaching(torch.Tensor):
    """A wrapper that keeps detached copies of what it is given (as torch's ComplexTensor does), with
    ops that return their input (``resolve_neg``, ``contiguous`` of a contiguous tensor) in its
    dispatch."""

    @staticmethod
    def __new__(cls, a, b):
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, a, b):
        self.a, self.b = a.detach(), b.detach()

    def __tensor_flatten__(self):
        return ["a", "b"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, size, stride):
        return Detaching(inner["a"], inner["b"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        a = [torch.resolve_neg(x.a) if isinstance(x, Detaching) else x for x in args]
        b = [torch.resolve_neg(x.b) if isinstance(x, Detaching) else x for x in args]
        out_a, out_b = func(*a, **(kwargs or {})), func(*b, **(kwargs or {}))
        if func is torch.ops.aten.sum.default:
            return out_a + out_b
        return Detaching(out_a.contiguous(), out_b.contiguous())


class MakeDetaching(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return Detaching(a, b)

    @staticmethod
    def backward(ctx, grad):
        return grad.a, grad.b


def _detaching_loss(a, b):
    return (MakeDetaching.apply(a, b) * MakeDetaching.apply(b, a)).sin().sum()


def test_a_subclass_made_by_a_function_over_detached_inner_tensors() -> None:
    """Failed with NameError: the grad transform rebuilt the subclass around its inner tensors and the
    class stored new (detached) ones, which no record produced; and the backward's ``t = resolve_neg(t)``
    made the saved value look produced by the backward itself, so the forward saved nothing."""
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    _detaching_loss(a, b).backward()
    expected = (a.grad, b.grad)
    jfn = jitcore.jit(_detaching_loss)
    for _ in range(2):
        a.grad = b.grad = None
        jfn(a, b).backward()
        torch.testing.assert_close((a.grad, b.grad), expected)
    assert jitcore.cache_hits(jfn) == 1


_CALLS: list[str] = []


class _Logged(torch.Tensor):
    """A subclass whose ``__torch_function__`` logs every call (a side effect jitcore replays)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _CALLS.append(func.__name__)
        return super().__torch_function__(func, types, args, kwargs or {})


class _Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def _apply_scaled(x, n):
    return _Doubled.apply(x + 1) * n


def _apply_scaled_without_subclass_functions(x, n):
    with torch._C.DisableTorchFunctionSubclass():
        return _Doubled.apply(x + 1) * n


@pytest.mark.parametrize("fn", [_apply_scaled, _apply_scaled_without_subclass_functions],
                         ids=["enabled", "disabled"])
def test_a_logging_torch_function_counts_as_eagerly_around_a_function(fn, requires_grad=False):
    """A Function applied to a value whose class logs in ``__torch_function__``, with numbers that
    change per call (later entries keep ``n`` symbolic and call ``apply`` natively): the log has eager's
    calls on every call, neither fewer nor twice (Note [The torch-function state of a Function's
    forward]); values, types and gradients as eagerly."""
    jf = jitcore.jit(fn)
    for n in (2.0, 3.0, 4.0):
        x = torch.randn(3, 4).as_subclass(_Logged).requires_grad_(requires_grad)
        ex = x.detach().clone().requires_grad_(requires_grad)
        _CALLS.clear()
        got = jf(x, n)
        got_calls = list(_CALLS)
        _CALLS.clear()
        want = fn(ex, n)
        assert got_calls == _CALLS
        assert type(got) is type(want)
        torch.testing.assert_close(got.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor))
        if requires_grad:
            got.sum().backward()
            want.sum().backward()
            torch.testing.assert_close(x.grad, ex.grad)
    assert jitcore.cache_hits(jf) >= 1


class _Positives(torch.autograd.Function):
    """A forward that reads its input's values: the output's length is the number of positives."""

    @staticmethod
    def forward(ctx, x):
        ctx.n = x.numel()
        return torch.tensor([v for v in x.tolist() if v > 0] + [0.0])

    @staticmethod
    def backward(ctx, grad):
        return torch.full((ctx.n,), grad.sum().item())


class _ScaledByCount(torch.autograd.Function):
    """A forward that scales by a count of its values, with a backward that does not."""

    @staticmethod
    def forward(ctx, x):
        return x * len([v for v in x.tolist() if v > 0])

    @staticmethod
    def backward(ctx, grad):
        return grad


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("function", [_Positives, _ScaledByCount], ids=["value_shaped", "count"])
def test_a_forward_that_reads_values_keeps_its_backward(function, requires_grad):
    """A Function whose forward reads values, with inputs requiring grad: its forward's ops were
    recorded in its place and differentiated (a gradient of ``2 * n`` where the user's backward gives 2)
    or tracing raised 'Could not infer dtype of NumberProxy' (Note [A Function whose forward reads
    values], jit/value_reads.py). Values, ``requires_grad`` and gradients as eagerly, over inputs with
    different counts of positives."""

    def f(x):
        return function.apply(x) * 2

    jf = jitcore.jit(f)
    for seed in range(5):
        x = torch.randn(3, generator=torch.Generator().manual_seed(seed), requires_grad=requires_grad)
        ex = x.detach().clone().requires_grad_(requires_grad)
        got, want = jf(x), f(ex)
        torch.testing.assert_close(got, want)
        assert got.requires_grad == want.requires_grad
        if requires_grad:
            got.sum().backward()
            want.sum().backward()
            torch.testing.assert_close(x.grad, ex.grad)


def test_a_backward_inside_through_a_forward_that_reads_values_says_why_it_runs_eagerly():
    """The call runs eagerly (its gradient graph exists only when it runs), with eager's values and
    gradient; the reason names the Function and what it does (before: "whose outputs' shapes depend on
    tensor values", untrue of ``x * count``)."""

    def step(x):
        y = _ScaledByCount.apply(x)
        y.sum().backward()
        return y.detach(), x.grad

    jf = jitcore.jit(step)
    for seed in range(2):
        torch.manual_seed(seed)
        x = torch.randn(4, requires_grad=True)
        ex = x.detach().clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jitcore's warning that the call runs eagerly
            got = jf(x)
        torch.testing.assert_close(got, step(ex))
    reason = str(jf.fallback_reason)
    assert "_ScaledByCount.apply, whose forward reads tensor values" in reason
    assert "shapes depend" not in reason


class _Reverse(torch.autograd.Function):
    """A gradient-reversal layer (DANN): identity forward, the gradient times ``-lam``."""

    @staticmethod
    def forward(ctx, x, lam):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.lam * grad, None


class _Branching(torch.autograd.Function):
    """A forward and a backward that branch on the number they are given."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k if k > 1.5 else x - k

    @staticmethod
    def backward(ctx, grad):
        return (grad * ctx.k if ctx.k > 1.5 else grad), None


@pytest.mark.parametrize("program", [
    "reverse_backward_inside", "reverse_grad_outside", "branching", "no_grad"])
def test_a_number_a_function_takes_stays_dynamic(program: str) -> None:
    """A Function given a number that changes every call (a schedule's coefficient) traced an entry per
    call: the number was specialized at the call (Note [Numbers a Function takes]). It stays a name now;
    gradients and values equal eager's on every call, and the branches on it are entries of their own."""

    def reverse_backward_inside(x: torch.Tensor, lam: float) -> torch.Tensor:
        loss = (_Reverse.apply(x, lam) * x).sum()
        loss.backward()
        return loss

    def reverse_grad_outside(x: torch.Tensor, lam: float) -> torch.Tensor:
        return (_Reverse.apply(x, lam) * x).sum()

    def branching(x: torch.Tensor, k: float) -> torch.Tensor:
        return _Branching.apply(x, k).sum()

    def no_grad(x: torch.Tensor, k: float) -> torch.Tensor:
        return _Branching.apply(x, k) * 2

    fn = locals()[program]
    requires_grad = program != "no_grad"
    jitted = jitcore.jit(fn)
    numbers = [0.5, 1.0, 2.0, 3.0, 0.25, 4.0, 2.5, 1.25]
    for number in numbers:
        base = torch.randn(4)
        x_eager, x_jit = (base.clone().requires_grad_(requires_grad) for _ in range(2))
        expected, got = fn(x_eager, number), jitted(x_jit, number)
        torch.testing.assert_close(got, expected)
        if program in ("reverse_grad_outside", "branching"):
            expected.backward()
            got.backward()
        if requires_grad:
            torch.testing.assert_close(x_jit.grad, x_eager.grad)
    # the first call's entry is static; then one entry (a branch: one each side of 1.5)
    assert jitcore.cache_misses(jitted) == (3 if program in ("branching", "no_grad") else 2)


_FORWARD_CALLS: list[int] = []


class _LoggedForward(torch.autograd.Function):
    """A Function whose forward has a Python effect (Note [A Function without grad runs its recorded
    forward])."""

    @staticmethod
    def forward(ctx, x, scale):
        _FORWARD_CALLS.append(scale)
        return x * scale

    @staticmethod
    def backward(ctx, g):
        return g * 3, None


def test_a_functions_forward_effects_happen_once_a_call_without_grad() -> None:
    """Without grad the symbol ran ``MyFn.apply`` natively on every cached call and the side-effect
    replay repeated the forward's append: two appends a call where eager makes one."""
    def f(x):
        return _LoggedForward.apply(x, 2.0).sum() + len(_FORWARD_CALLS)

    jitted = jitcore.jit(f)
    for i in range(4):
        x = torch.randn(3 + i % 2)
        before = list(_FORWARD_CALLS)
        expected = f(x)
        eager_log = _FORWARD_CALLS[len(before):]
        del _FORWARD_CALLS[len(before):]
        got = jitted(x)
        assert _FORWARD_CALLS[len(before):] == eager_log
        torch.testing.assert_close(got, expected)
    assert "run_autograd_function" not in str(jitcore.last_traces(jitted)[-1])
    assert jitcore.cache_misses(jitted) <= 2
    # with grad, the user's backward is still the node
    x = torch.randn(3, requires_grad=True)
    jitcore.jit(lambda x: _LoggedForward.apply(x, 2.0).sum())(x).backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 3.0))


def _function_over_a_cell(save: bool, setup: bool) -> tuple[type, list]:
    """A Function defined inside a function, its forward and backward appending to that function's
    list (a cell of theirs, as a Function a model's factory defines), in both styles."""
    log: list = []

    class Sq(torch.autograd.Function):
        @staticmethod
        def backward(ctx, g):
            log.append("backward")
            return 2 * g * ctx.saved_tensors[0] if save else 2 * g

    if setup:
        def forward(x):
            log.append(("forward", x.shape[0]))
            return x * x

        def setup_context(ctx, inputs, output):
            log.append("setup")
            if save:
                ctx.save_for_backward(inputs[0])
        Sq.forward, Sq.setup_context = staticmethod(forward), staticmethod(setup_context)
    else:
        def forward_with_ctx(ctx, x):
            log.append(("forward", x.shape[0]))
            if save:
                ctx.save_for_backward(x)
            return x * x
        Sq.forward = staticmethod(forward_with_ctx)
    return Sq, log


@pytest.mark.parametrize("sizes", [[4, 4, 4, 4], [3, 4, 5, 4, 5]], ids=["static", "symbolic"])
@pytest.mark.parametrize("setup", [False, True], ids=["ctx", "setup_context"])
@pytest.mark.parametrize("save", [False, True], ids=["nothing_saved", "saved"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_a_functions_effects_on_its_cells_happen_as_eagerly(grad: bool, save: bool, setup: bool,
                                                            sizes: list[int]) -> None:
    """Note [The cells of a static method] (jitcore/jit/state_reads.py): a Function's forward is a static
    method, whose cells counted as made while tracing. The append to a list of the function that
    defined the class ran while tracing only: no append on a cached call, and with grad three on the
    first (interpreted, then run on shadows twice), none restored. With grad at symbolic sizes the
    computation calls ``apply`` itself and the forward's appends were made twice a call (Note [A
    Function's forward run natively], jitcore/jit/effects.py); backward() runs the user's once."""
    Sq, log = _function_over_a_cell(save, setup)

    def f(x):
        return Sq.apply(x).sum()

    jitted = jitcore.jit(f)
    for n in sizes:
        seen = []
        for fn in (f, jitted):
            x = torch.arange(float(n)).requires_grad_(grad)
            del log[:]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a backward writing a cell runs eagerly (backward_unwatched)
                out = fn(x)
                if grad:
                    out.backward()
            seen.append((list(log), out.item(), None if x.grad is None else x.grad.tolist()))
        assert seen[1] == seen[0], n
    assert jitcore.cache_misses(jitted) <= 2


COUNTS: dict = {"n": 0}  # a global: the counter the forward bumps and the program bumps after


class _Counted(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        COUNTS["n"] += 1
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_a_counter_the_forward_bumps_is_read_after_the_call(grad: bool) -> None:
    """Note [Numbers a Function's forward computes] (jitcore/transforms/autograd_function.py): with grad
    at symbolic sizes the computation calls ``apply`` itself, and the counter's ``n0 = n + 1``, recorded
    inside the Function's record, was undefined where the program read it after the call: every call
    from the second shape on raised UnboundLocalError in the computation and ran eagerly (JC-I002)."""

    def f(x):
        y = _Counted.apply(x).sum()
        COUNTS["n"] += 10
        return y

    jitted = jitcore.jit(f)
    seen = []
    for fn in (f, jitted):
        COUNTS["n"] = 0
        calls = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a JC-I002 warning fails the test
            for n in (3, 4, 5, 4, 5):
                x = torch.arange(float(n)).requires_grad_(grad)
                out = fn(x)
                if grad:
                    out.backward()
                calls.append((out.item(), COUNTS["n"], None if x.grad is None else x.grad.tolist()))
        seen.append(calls)
    assert seen[1] == seen[0]
    assert jitcore.cache_misses(jitted) <= 2


WEIGHT = torch.nn.Parameter(torch.tensor([1.5, -2.0, 0.5]))


class TimesWeight(torch.autograd.Function):
    """A forward computing with a Parameter it closes over: ``apply`` runs the forward with grad mode
    off, so the output requires grad only where the input does, and the Parameter never gets one."""

    @staticmethod
    def forward(ctx, x):
        return x * WEIGHT

    @staticmethod
    def backward(ctx, grad):
        return grad * WEIGHT


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_forward_using_a_parameter_it_closes_over_requires_grad_as_eagerly(requires_grad: bool) -> None:
    """Without grad on the input, the forward's records replaced the call and ran with grad mode on:
    the output required grad (``grad_fn=<MulBackward0>``) where eager's does not."""

    def f(x):
        y = TimesWeight.apply(x)
        return y * 2, y.requires_grad

    jf = jitcore.jit(f)
    for _ in range(2):
        x = torch.randn(3, requires_grad=requires_grad)
        (want, want_flag), (got, got_flag) = f(x), jf(x)
        assert (got.requires_grad, got_flag) == (want.requires_grad, want_flag) == (requires_grad,) * 2
        torch.testing.assert_close(got, want)
        if requires_grad:
            (gx,) = torch.autograd.grad(got.sum(), x)
            torch.testing.assert_close(gx, torch.autograd.grad(want.sum(), x)[0])
        else:
            with pytest.raises(RuntimeError, match="does not require grad"):
                got.sum().backward()
    assert WEIGHT.grad is None
