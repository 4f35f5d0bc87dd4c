"""torch.func's transforms inside a jitted function are traced: functorch runs them on the traced
tensors and the trace holds the aten ops eager runs under them (Note [Function transforms run on the
traced tensors], jitcore/jit/function_transforms.py). Each program is compared with eager (values,
gradients, Python effects) and its second call must come from the cache."""

from __future__ import annotations

import copy
import gc
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from jit_helpers import assert_same, check, clone_tree
from torch.func import (
    functional_call,
    grad,
    grad_and_value,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    stack_module_state,
    vjp,
    vmap,
)

import jitcore


def _loss(w, x):
    return (x @ w).tanh().sum()


_MODEL = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))

PROGRAMS = {
    "vmap": lambda w, x: vmap(lambda r: (r @ w).sin())(x),
    "vmap_in_dims": lambda w, x: vmap(torch.mv, in_dims=(None, 0))(w.T, x),
    "vmap_out_dims": lambda w, x: vmap(lambda r: r * 2, out_dims=1)(x),
    "vmap_chunked": lambda w, x: vmap(lambda r: r.outer(r), chunk_size=2)(x),
    "vmap_nested": lambda w, x: vmap(vmap(lambda a: a.exp() * a))(x),
    "vmap_methods": lambda w, x: vmap(lambda r: r[:2].reshape(1, 2).T.reshape(-1).softmax(0))(x),
    "vmap_in_place": lambda w, x: vmap(lambda r: r.clone().add_(1).mul_(2))(x),
    "grad": lambda w, x: grad(_loss)(w, x[0]),
    "grad_has_aux": lambda w, x: grad(lambda r: (r.sin().sum(), r.cos()), has_aux=True)(x),
    "grad_and_value": lambda w, x: grad_and_value(lambda r: (r ** 3).sum())(x),
    "vjp": lambda w, x: vjp(lambda v: (x @ v).sin(), w)[1](torch.ones(4, 2)),
    "jvp": lambda w, x: jvp(lambda v: (x @ v).sin(), (w,), (torch.ones_like(w),)),
    "jacrev": lambda w, x: jacrev(_loss)(w, x),
    "jacfwd": lambda w, x: jacfwd(_loss)(w, x),
    "hessian": lambda w, x: hessian(_loss)(w, x[0]),
    "jacrev_module": lambda w, x: jacrev(_MODEL)(x[0]),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_function_transforms_are_traced(name):
    """Each transform: no eager entry (before, every one ran eagerly with a JC-J002 warning), eager's
    values, and a cache hit on new values."""
    fn = PROGRAMS[name]
    jf = jitcore.jit(fn, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # an eager entry warns
        for _ in range(2):
            check(fn, torch.randn(3, 2), torch.randn(4, 3), jfn=jf)
    assert jf.fallback_reason is None
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 1)


def test_the_trace_holds_the_aten_ops_of_the_transform():
    """vmap's batching rule folds the batch into one ``mm``: the trace runs that, not a loop."""
    jf = jitcore.jit(PROGRAMS["vmap"])
    jf(torch.randn(3, 2), torch.randn(4, 3))
    text = str(jitcore.last_traces(jf)[-1])
    assert "aten.mm.default" in text and "functorch" not in text


def test_per_sample_gradients_of_a_module():
    """The torch.func tutorial's per-sample gradients: vmap over grad of a functional_call."""
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def per_sample(params, x, y):
        def loss(p, xi, yi):
            return F.cross_entropy(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))

        return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)

    jf = jitcore.jit(per_sample, fullgraph=True)
    for _ in range(3):
        check(per_sample, params, torch.randn(5, 3), torch.randint(0, 2, (5,)), jfn=jf)
    assert jf.fallback_reason is None and (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 2)


def test_model_ensembling_with_stacked_state():
    models = [nn.Linear(3, 2) for _ in range(4)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")

    def ensemble(params, buffers, x):
        def one(p, b, x):
            return functional_call(base, (p, b), (x,))

        return vmap(one, in_dims=(0, 0, None))(params, buffers, x)

    jf = jitcore.jit(ensemble, fullgraph=True)
    for _ in range(2):
        check(ensemble, params, buffers, torch.randn(6, 3), jfn=jf)
    assert jf.fallback_reason is None and jitcore.cache_hits(jf) == 1


def test_the_transformed_function_is_interpreted():
    """The function given to a transform runs on jitcore's interpreter: a global it reads is guarded
    (a changed value retraces, no stale answer), and its Python side effects happen on cached calls."""
    scale = [2.0]
    seen = []

    def inner(r):
        seen.append(r.shape)
        return r * scale[0]

    def f(x):
        return vmap(inner)(x)

    jf = jitcore.jit(f)
    x = torch.randn(3, 2)
    assert_same(jf(x), x * 2.0)
    assert_same(jf(x), x * 2.0)
    scale[0] = 5.0
    assert_same(jf(x), x * 5.0)
    assert len(seen) == 3 and all(s == torch.Size([2]) for s in seen)
    assert jf.fallback_reason is None and jitcore.cache_hits(jf) == 1


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_gradients_through_a_transform(where):
    """A backward through vmap's output, inside the jitted function (the shadows' autograd records the
    transform's aten ops) and outside it (the grad transform differentiates them)."""

    def loss(w, x):
        return vmap(lambda r: (r @ w).tanh())(x).sum()

    def step(w, x):
        out = loss(w, x)
        out.backward()
        return out, w.grad

    fn = step if where == "inside" else loss
    w, x = torch.randn(2, 4, requires_grad=True), torch.randn(3, 2)
    (wj, xj), (we, xe) = clone_tree((w, x)), clone_tree((w, x))
    jf = jitcore.jit(fn)
    got, expected = jf(wj, xj), fn(we, xe)
    assert_same(got, expected)
    assert jf.fallback_reason is None
    if where == "outside":
        got.backward()
        expected.backward()
    assert_same(wj.grad, we.grad)


@pytest.mark.parametrize(("op", "transform", "randomness"), [
    ("dropout", "vmap", "different"), ("rand", "vmap", "different"), ("rand", "vmap", "same"),
    ("bernoulli", "vmap", "different"), ("dropout", "grad", None), ("dropout", "jacrev", None),
])
def test_random_ops_inside_a_transform_draw_eagers_numbers(op, transform, randomness):
    """functorch's rules for random ops draw on tensors torch makes under the transform (Note [Tensors a
    transform makes]): those are recorded, so every call draws anew, in eager's order. Unrecorded, the
    numbers were constants of the trace (the same mask on every call: a wrong answer)."""
    sample = {
        "dropout": lambda r: F.dropout(r, 0.5),
        "rand": lambda r: r + torch.rand(()),
        "bernoulli": lambda r: torch.bernoulli(torch.full_like(r, 0.5)) * r,
    }[op]

    def f(x):
        if transform == "vmap":
            return vmap(sample, randomness=randomness)(x), torch.rand(2)
        wrapped = grad if transform == "grad" else jacrev
        return wrapped(lambda r: (sample(r) * r).sum())(x), torch.rand(2)

    jf = jitcore.jit(f)
    x = torch.ones(4, 6)
    torch.manual_seed(0)
    got = [jf(x) for _ in range(4)]
    torch.manual_seed(0)
    expected = [f(x) for _ in range(4)]
    assert_same(got, expected)  # every call's draws and the RNG stream after them, as eagerly
    assert jf.fallback_reason is None and jitcore.cache_hits(jf) == 3


def test_values_read_inside_grad():
    """A branch on a value and a number read inside ``grad`` are checked reads, as in the program's
    own code: the other branch retraces, the same one hits the cache."""

    def f(x):
        return grad(lambda r: r.sum() * float(r.max()) if r.sum() > 0 else -(r * r).sum())(x)

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")
        warnings.filterwarnings("ignore", message=".*requires_grad=True to a scalar.*")
        for x in (torch.randn(3) + 5, torch.randn(3) + 5, torch.randn(3) - 5, torch.randn(3) - 5):
            check(f, x, jfn=jf)
    assert jf.fallback_reason is None and jitcore.cache_hits(jf) >= 1


def test_an_error_of_the_transform_itself_is_eagers():
    """vmap refuses a random op in its default ``randomness="error"``: eager's error, raised by torch's
    C++ while a call ran natively, at the user's line and not reported as jitcore's own."""

    def f(x):
        return vmap(lambda r: r + torch.rand(()))(x)

    jf = jitcore.jit(f)
    with pytest.raises(RuntimeError, match="randomness") as caught:
        jf(torch.ones(4, 6))
    assert "jitcore bug" not in "".join(getattr(caught.value, "__notes__", []))
    check(f, torch.ones(4, 6))


def test_an_error_inside_a_transform_is_eagers():
    """Eager's exception, raised while tracing, at the user's line."""

    def f(x):
        return vmap(lambda r: r @ torch.ones(5))(x)

    jf = jitcore.jit(f)
    check(f, torch.randn(3, 4), jfn=jf)
    assert jf.fallback_reason is None


def test_linearize_runs_eagerly():
    """Traced, ``linearize``'s linear function returned zeros (make_fx under forward-mode AD lost the
    tangents): it runs eagerly, with eager's values."""

    def f(x):
        out, jvp_fn = torch.func.linearize(torch.sin, x)
        return out, jvp_fn(torch.ones_like(x))

    jf = jitcore.jit(f)
    with pytest.warns(UserWarning, match="linearize is not traced"):
        check(f, torch.randn(3), jfn=jf)
    assert jf.fallback_reason.code == "JC-J002"


def test_forward_mode_ad_inside_runs_eagerly():
    """``with dual_level(): make_dual(x, t)`` inside the program: the trace ran ``_make_dual`` outside
    any level ('Trying to access a forward AD level with an invalid index') where eager computes."""
    import torch.autograd.forward_ad as fwad

    def f(x, t):
        with fwad.dual_level():
            y = fwad.make_dual(x, t)
            out = y.sin() * y
            return fwad.unpack_dual(out).tangent, out.detach() + 1

    jf = jitcore.jit(f)
    with pytest.warns(UserWarning, match="forward-mode AD"):
        check(f, torch.randn(3), torch.randn(3), jfn=jf)
    check(f, torch.randn(3), torch.randn(3), jfn=jf)
    assert jf.fallback_reason.code == "JC-J002"


def test_a_subclass_under_a_transform_runs_eagerly():
    """functorch's levels over a tensor subclass's dispatch are not resolved while tracing (JC-J002)."""
    from torch.testing._internal.two_tensor import TwoTensor

    def f(x):
        return vmap(lambda r: r * 2)(x)

    jf = jitcore.jit(f)
    x = TwoTensor(torch.randn(3, 2), torch.randn(3, 2))
    with pytest.warns(UserWarning, match="runs eagerly"):
        got = jf(x)
    assert_same(got, f(x))
    assert jf.fallback_reason.code == "JC-J002"


def test_an_op_without_a_batching_rule_runs_eagerly():
    """An op with no vmap batching rule (SDPA's CPU kernel) runs through functorch's fallback, a C++
    loop that writes into the tensors' memory: on traced tensors, which have none, the process
    crashed (a segmentation fault). The call runs eagerly instead, with eager's values."""
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()

    def f(x):
        return vmap(lambda s: layer(s[None])[0])(x)

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*performance drop.*")
        with pytest.warns(UserWarning, match="has no batching rule under torch.func.vmap"):
            check(f, torch.randn(4, 5, 16), jfn=jf)
        check(f, torch.randn(4, 5, 16), jfn=jf)
    assert jf.fallback_reason.code == "JC-J002" and torch._C._functorch._is_vmap_fallback_enabled()


@pytest.mark.parametrize("tasks", [False, True])
def test_second_order_gradients_through_grad(tasks):
    """MAML: an inner ``grad`` step, then the outer loss's gradient (``backward`` outside the jitted
    function) through it, one task and a vmap over tasks. The grad transform differentiates the aten
    ops of the inner backward like any others."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))

    def maml_loss(params, xs, ys, xq, yq):
        def inner(p, x, y):
            return ((functional_call(net, p, (x,)) - y) ** 2).mean()

        g = grad(inner)(params, xs, ys)
        return inner({k: v - 0.1 * g[k] for k, v in params.items()}, xq, yq)

    def batched(params, *data):
        return vmap(maml_loss, in_dims=(None, 0, 0, 0, 0))(params, *data).mean()

    fn = batched if tasks else maml_loss
    lead = (3,) if tasks else ()
    data = tuple(torch.randn(*lead, 5, n) for n in (2, 1, 2, 1))
    params = {k: v.detach().requires_grad_() for k, v in net.named_parameters()}
    jf = jitcore.jit(fn)
    for _ in range(2):
        (pj, dj), (pe, de) = clone_tree((params, data)), clone_tree((params, data))
        got, expected = jf(pj, *dj), fn(pe, *de)
        got.backward()
        expected.backward()
        assert_same(got, expected)
        assert_same({k: v.grad for k, v in pj.items()}, {k: v.grad for k, v in pe.items()})
    assert jf.fallback_reason is None and jitcore.cache_hits(jf) == 1


# --- a jitted function called by a transform (Note [Called under a function transform], jit/api.py) -------
@pytest.mark.parametrize("traced_first", [False, True], ids=["transform-first", "traced-first"])
def test_transforms_of_a_jitted_function_give_eagers_results(traced_first: bool) -> None:
    """``grad(jitted)``, ``vmap(jitted)``, ``jacrev(jitted)``: the transform hands the function its own
    tensors; it raised AssertionError inside jitcore, whether or not an entry had been traced outside."""

    def f(w, x):
        return (x @ w).tanh().sum()

    jf = jitcore.jit(f)
    w, x = torch.randn(3, 2), torch.randn(4, 3)
    if traced_first:
        assert_same(jf(w, x), f(w, x))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert_same(grad(jf, argnums=(0, 1))(w, x), grad(f, argnums=(0, 1))(w, x))
            batched = x[:, None].expand(4, 2, 3)
            assert_same(vmap(jf, in_dims=(None, 0))(w, batched), vmap(f, in_dims=(None, 0))(w, batched))
            assert_same(jacrev(jf)(w, x), jacrev(f)(w, x))
    assert sum("runs eagerly under torch.func transforms" in str(w.message) for w in caught) == 1
    assert_same(jf(w, x), f(w, x))  # outside a transform the function is traced and cached as ever
    assert_same(jf(w, x), f(w, x))
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_hits(jf) >= 1


def _relative_bias_under_nested_vmaps(score: torch.Tensor) -> torch.Tensor:
    n = score.shape[0]
    return vmap(vmap(_relative_bias_2d, in_dims=(0, None, 0)), in_dims=(0, 0, None))(
        score, torch.arange(n), torch.arange(n))


def _relative_bias_2d(score, q, kv):
    return score + (q - kv) * 0.1


def _per_sample_grads_of_parameters(x: torch.Tensor) -> dict[str, torch.Tensor]:
    def loss(params, xi):
        return functional_call(_PSG_MODEL, params, (xi,)).squeeze() ** 2

    return vmap(grad(loss), in_dims=(None, 0))(dict(_PSG_MODEL.named_parameters()), x)


def _relative_bias(score, b, h, q, kv):
    return score + (q - kv) * 0.1


def _flex_attention_score_mod(x: torch.Tensor) -> torch.Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(x, x * 2, x, score_mod=_relative_bias)


_PSG_MODEL = nn.Linear(4, 1)
_COLLECTED = {
    "relative_bias_under_nested_vmaps": (_relative_bias_under_nested_vmaps, (4, 4)),
    "per_sample_grads_of_parameters": (_per_sample_grads_of_parameters, (5, 4)),
    "flex_attention_score_mod": (_flex_attention_score_mod, (1, 2, 16, 8)),
}


@pytest.mark.parametrize("name", list(_COLLECTED))
def test_tensors_made_under_a_transform_outlive_collections(name):
    """Note [Tensors functorch's code makes from numbers], Note [The caller's tensors a transform is
    given]: a number functorch wrapped in a tensor (``* 0.1`` on a BatchedTensor), and what its rules
    computed from a caller's parameter handed to the transform itself (``weight.t()``), reached the trace
    as captured tensors held weakly: a collection after a call freed them and the next call missed and
    traced again (or passed None as that input). With a full collection after every call, each call
    equals eager and the first entry serves them all."""
    fn, shape = _COLLECTED[name]
    jf = jitcore.jit(fn)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        for seed in range(4):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
            assert_same(jf(x), fn(x))
            gc.collect()
    assert jitcore.cache_misses(jf) == 1, jitcore.miss_reasons(jf)
