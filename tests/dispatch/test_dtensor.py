"""DTensor (torch.distributed.tensor, gloo on 127.0.0.1) traced, differentially against eager.

torch's C++ DTensor dispatch runs natively on the shadows while tracing, so the executed trace holds
the local tensors' aten ops and the functional collectives only (jitcore/dispatch/dtensor.py). Each
program is compared with eager: output type (an AsyncCollectiveTensor eager returns counts as the
plain tensor it waits for), placements, mesh, local tensor, full tensor, gradients; the second call
is a cache hit, and on it no operation reaches DTensor's dispatch (counted by a dispatch mode that
lets DTensor handle every call it sees). World size 1 runs in this process; world size 2 spawns two
processes on 127.0.0.1 inside the test and always ends them.
"""

from __future__ import annotations

import copy
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from dtensor_opinfo import world_size_2_failures
from torch import nn
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from world_size_2 import run_at_world_size_2

import jitcore
from jitcore.errors import EagerOnlyValue


# --- comparing with eager ------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    return value.wait() if isinstance(value, AsyncCollectiveTensor) else value


def _same(actual: Any, expected: Any) -> None:
    requires_grad = getattr(expected, "requires_grad", None)  # an AsyncCollectiveTensor's own
    actual, expected = _plain(actual), _plain(expected)
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        for a, e in zip(actual, expected, strict=True):
            _same(a, e)
    elif isinstance(expected, DTensor):
        assert actual.placements == expected.placements
        assert actual.device_mesh == expected.device_mesh
        assert actual.requires_grad == expected.requires_grad
        torch.testing.assert_close(_plain(actual.to_local()), _plain(expected.to_local()))
        torch.testing.assert_close(_plain(actual.full_tensor()), _plain(expected.full_tensor()))
    elif isinstance(expected, torch.Tensor):
        assert actual.requires_grad == requires_grad
        torch.testing.assert_close(actual, expected)
    else:
        assert actual == expected


# read by a prologue, not a dispatch (Note [DTensor's dispatch settings outside the function])
_SETTINGS_READS = frozenset({"_allow_implicit_replication"})


def _dtensor_dispatches(fn: Callable[..., Any], *args: Any) -> int:
    """How many Python calls of DTensor's dispatcher (torch/distributed/tensor/_dispatch.py) ``fn(*args)``
    makes: torch's C++ fast path calls back into it for every op. Counted with a profile function: a
    dispatch mode around the call would make a jitted function run eagerly (Note [Modes around the
    call], jitcore/jit/api.py)."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        code = frame.f_code
        if event == "call" and code.co_name not in _SETTINGS_READS \
                and code.co_filename.replace("\\", "/").endswith("distributed/tensor/_dispatch.py"):
            count += 1

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return count


# --- the programs --------------------------------------------------------------------------------
def _inputs(mesh: DeviceMesh, requires_grad: bool = False) -> tuple[DTensor, DTensor]:
    torch.manual_seed(0)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    return (distribute_tensor(a, mesh, [Shard(0)]).requires_grad_(requires_grad),
            distribute_tensor(b, mesh, [Replicate()]))


def _programs(mesh: DeviceMesh) -> dict[str, Callable[..., Any]]:
    def made_inside(x: DTensor, y: DTensor) -> Any:
        local = DTensor.from_local(x.to_local() * 3, mesh, [Shard(0)])
        return local + y, local.full_tensor()

    return {
        "pointwise": lambda x, y: x * 2 + y,
        "matmul": lambda x, y: x @ y,
        "replicate_matmul_shard": lambda x, y: y @ x,
        "reduction": lambda x, y: (x * y).sum(),
        "redistribute_to_replicate": lambda x, y: x.redistribute(mesh, [Replicate()]) + y,
        "redistribute_to_shard": lambda x, y: y.redistribute(mesh, [Shard(1)]) * 2,
        "full_tensor": lambda x, y: (x + 1).full_tensor(),
        "to_local": lambda x, y: (x @ y).to_local(),
        "from_local_inside": made_inside,
        # round trips and the other collectives: all-gather then a local chunk, all-to-all,
        # a Partial reduced (all-reduce) and reduce-scattered
        "shard_replicate_shard": lambda x, y: (x.redistribute(mesh, [Replicate()]) * 2).redistribute(
            mesh, [Shard(0)]) + y,
        "shard_to_shard": lambda x, y: x.redistribute(mesh, [Shard(1)]) * y.redistribute(mesh, [Shard(1)]),
        "partial_to_replicate": lambda x, y: (y @ x).redistribute(mesh, [Replicate()]),
        "partial_to_shard": lambda x, y: (y @ x).redistribute(mesh, [Shard(0)]) + 1,
        # values read through DTensor's dispatch (an all-reduce of the Partial sum, then the local read):
        # before, each ran eagerly (Note [Values read through DTensor's dispatch])
        "item": lambda x, y: x * (x @ y).sum().item() + 1,
        "value_branch": lambda x, y: x * 2 if (x * y).sum() > 0 else x - 1,
        "equal": lambda x, y: (x + 1, torch.equal(x, y)),
    }


def _check_program(name: str, program: Callable[..., Any], mesh: DeviceMesh) -> None:
    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # traced: no eager entry
        _same(jitted(*_inputs(mesh)), program(*_inputs(mesh)))
        _same(jitted(*_inputs(mesh)), program(*_inputs(mesh)))
    assert jitted.fallback_reason is None, name
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1), name
    # a warm call runs the local ops and collectives only; eagerly, DTensor dispatches each op
    assert _dtensor_dispatches(jitted, *_inputs(mesh)) == 0, name
    assert jitcore.cache_hits(jitted) == 2, name
    assert _dtensor_dispatches(program, *_inputs(mesh)) > 0, name


def _check_gradients(mesh: DeviceMesh) -> None:
    def backward_inside(x: DTensor, y: DTensor) -> DTensor:
        loss = (x @ y).sum()
        loss.backward()
        return loss

    def through_full_tensor(x: DTensor, y: DTensor) -> torch.Tensor:
        loss = (x * y).full_tensor().sum()
        loss.backward()
        return loss

    def through_redistribute(x: DTensor, y: DTensor) -> torch.Tensor:
        out = (x * 2).redistribute(mesh, [Replicate()]).to_local().sum()
        out.backward()
        return out

    def through_from_local(x: DTensor, y: DTensor) -> DTensor:
        made = DTensor.from_local(x.to_local() * 3, mesh, [Shard(0)])
        loss = (made * made + y).sum()
        loss.backward()
        return loss

    def through_round_trips(x: DTensor, y: DTensor) -> DTensor:
        back = (x.redistribute(mesh, [Replicate()]) * y).redistribute(mesh, [Shard(0)])
        loss = ((y @ x).redistribute(mesh, [Shard(1)]) * back.redistribute(mesh, [Shard(1)])).sum()
        loss.backward()
        return loss

    for program in (backward_inside, through_full_tensor, through_redistribute, through_from_local,
                    through_round_trips):
        jitted = jitcore.jit(program)
        for _ in range(2):
            (x, y), (ex, ey) = _inputs(mesh, True), _inputs(mesh, True)
            with warnings.catch_warnings():
                warnings.filterwarnings("error", message="jitcore")
                _same(jitted(x, y), program(ex, ey))
            _same(x.grad, ex.grad)
        assert jitcore.cache_hits(jitted) == 1, program.__name__

    # an output with gradients, differentiated outside the function
    matmul = lambda x, y: (x @ y).to_local()  # noqa: E731
    jitted = jitcore.jit(matmul)
    for _ in range(2):
        (x, y), (ex, ey) = _inputs(mesh, True), _inputs(mesh, True)
        out, expected = jitted(x, y), matmul(ex, ey)
        _same(out, expected)
        (out * out).sum().backward()
        (expected * expected).sum().backward()
        _same(x.grad, ex.grad)
    assert jitcore.cache_hits(jitted) == 1


def _check_tensor_parallel(mesh: DeviceMesh) -> None:
    torch.manual_seed(1)
    base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    model = parallelize_module(copy.deepcopy(base), mesh, plan)
    reference = parallelize_module(copy.deepcopy(base), mesh, plan)
    x = torch.randn(3, 8)

    def step(m: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        out = m(inputs)
        out.sum().backward()
        return out

    jitted = jitcore.jit(step)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        for _ in range(3):  # the first call finds no .grad, the next ones accumulate into it
            _same(jitted(model, x), step(reference, x))
            for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
                assert isinstance(p, DTensor), name
                _same(p.grad, q.grad)
    assert jitted.fallback_reason is None
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1), jitted.miss_log
    forward = jitcore.jit(model)
    _same(forward(x), reference(x))
    assert _dtensor_dispatches(forward, x) == 0 and jitcore.cache_hits(forward) == 1
    assert _dtensor_dispatches(reference, x) > 0


def _check_optimizer_steps(mesh: DeviceMesh) -> None:
    """A tensor-parallel training step with the optimizer's state outside: eager's parameters on every
    step, and from the third step a cache hit. Adam's ``lr / bias_correction1`` (a dynamic number,
    ``state["step"].item()``) reaches DTensor's pointwise ops (``addcdiv_``, ``div``) as a name: before,
    each step traced anew with that step's number."""
    torch.manual_seed(1)
    base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}

    def step(m: nn.Module, opt: torch.optim.Optimizer, inputs: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = m(inputs).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    for make in (lambda p: torch.optim.AdamW(p, lr=0.01), lambda p: torch.optim.NAdam(p, lr=0.01),
                 lambda p: torch.optim.Adam(p, lr=0.01, foreach=True)):
        model, reference = (parallelize_module(copy.deepcopy(base), mesh, plan) for _ in range(2))
        opt, reference_opt = make(model.parameters()), make(reference.parameters())
        jitted = jitcore.jit(step)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="jitcore")
            for _ in range(4):
                x = torch.randn(3, 8)
                _same(jitted(model, opt, x), step(reference, reference_opt, x))
                for p, q in zip(model.parameters(), reference.parameters(), strict=True):
                    _same(p.detach(), q.detach())
        assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2), jitted.miss_log


def _check_collectives(mesh: DeviceMesh) -> None:
    """torch.distributed's collectives on process groups inside the function (``dist.all_reduce``,
    ``broadcast``, ``all_gather``, ``reduce_scatter_tensor``, an ``async_op`` handle waited for later,
    ``distribute_tensor``'s scatter): eager's values on every call. Their ``c10d`` ops return a
    ``Work`` handle; before, the computation read the outputs without waiting for it (uninitialized
    memory at world size 2)."""
    rank, size = dist.get_rank(), mesh.size()

    def all_reduce(a: torch.Tensor) -> torch.Tensor:
        b = a * (rank + 1)
        dist.all_reduce(b)
        return b + 1

    def broadcast(a: torch.Tensor) -> torch.Tensor:
        b = a * (rank + 1)
        dist.broadcast(b, src=0)
        return b * 2

    def all_gather(a: torch.Tensor) -> torch.Tensor:
        out = [torch.empty_like(a) for _ in range(size)]
        dist.all_gather(out, a * (rank + 1))
        return torch.cat(out)

    def waited_later(a: torch.Tensor) -> torch.Tensor:
        b = a * (rank + 1)
        work = dist.all_reduce(b, async_op=True)
        c = a.sin()
        work.wait()
        return b + c

    def reduce_scatter(a: torch.Tensor) -> torch.Tensor:
        out = torch.empty(8 // size)
        dist.reduce_scatter_tensor(out, a * (rank + 1))
        return out

    def scattered(a: torch.Tensor) -> DTensor:
        return distribute_tensor(a, mesh, [Shard(0)]) * 2

    for program in (all_reduce, broadcast, all_gather, waited_later, reduce_scatter, scattered):
        jitted = jitcore.jit(program)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="jitcore")  # traced: no eager entry
            for seed in range(3):
                torch.manual_seed(seed)
                a = torch.randn(8)
                _same(jitted(a.clone()), program(a.clone()))
        assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2), program.__name__


def _check_vocab_parallel_embedding(mesh: DeviceMesh) -> None:
    """An embedding table sharded by rows (``RowwiseParallel`` on ``nn.Embedding``, as torch's
    tensor-parallel examples shard a vocabulary): its forward and a training step give eager's values
    and are traced. DTensor's dispatch keeps the rows' mask in the placement's ``MaskBuffer`` and its
    reduction reads it back; before, that read met the dispatch's fake tensor, the call was refused, and
    at world size 2 the eager run that followed raised on the fake mask left in the buffer."""
    torch.manual_seed(4)
    base = nn.Sequential(nn.Embedding(16, 8), nn.Linear(8, 4))
    plan = {"0": RowwiseParallel(input_layouts=Replicate()), "1": ColwiseParallel()}
    model, reference = (parallelize_module(copy.deepcopy(base), mesh, plan) for _ in range(2))

    def step(m: nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = m(tokens).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    forward, jitted = jitcore.jit(lambda m, tokens: m(tokens)), jitcore.jit(step)
    opt, reference_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # traced: no eager entry
        for _ in range(3):
            tokens = torch.randint(0, 16, (2, 5))
            _same(forward(model, tokens), reference(tokens))
            _same(jitted(model, opt, tokens), step(reference, reference_opt, tokens))
            for p, q in zip(model.parameters(), reference.parameters(), strict=True):
                _same(p.detach(), q.detach())
    assert (jitcore.cache_misses(forward), jitcore.cache_hits(forward)) == (1, 2)
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


def _check_unreduced_vocab_embedding(mesh: DeviceMesh) -> None:
    """An embedding over a vocabulary-sharded weight returned unreduced (a ``_MaskPartial`` DTensor, whose
    mask DTensor keeps in the placement's ``MaskBuffer`` until a reduction) runs eagerly: the caller's
    ``full_tensor()`` reduces with eager's mask, and eager calls around it work. Before, the buffer held
    tracing's fake mask and ``full_tensor()`` outside the function raised AssertionError (Note [A mask
    left in a MaskBuffer], jitcore/dispatch/dtensor_masks.py). Reduced inside, the embedding is traced;
    before, the computation held tracing's fake mask as a constant and raised the same AssertionError
    (Note [A shadow a nested record holds], jitcore/jit/held_tensors.py)."""
    def embed(i: DTensor, w: DTensor) -> DTensor:
        return nn.functional.embedding(i, w)

    def reduced(i: DTensor, w: DTensor) -> torch.Tensor:
        return nn.functional.embedding(i, w).full_tensor()

    torch.manual_seed(6)
    weight = distribute_tensor(torch.randn(9, 4), mesh, [Shard(0)])
    jitted, jitted_reduced = jitcore.jit(embed), jitcore.jit(reduced)
    for rows in ([0, 7, 3], [8, 1, 5], [2, 2, 6]):
        indices = distribute_tensor(torch.tensor(rows), mesh, [Replicate()])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the eager entry's warning
            out = jitted(indices, weight)
        expected = embed(indices, weight)
        assert out.placements == expected.placements
        _same(out.full_tensor(), expected.full_tensor())
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="jitcore")  # traced: no eager entry
            _same(jitted_reduced(indices, weight), reduced(indices, weight))
    if mesh.size() > 1:  # a _MaskPartial output (one rank holds the whole vocabulary otherwise)
        assert isinstance(jitted.fallback_reason, EagerOnlyValue), jitted.fallback_reason  # an eager entry
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
    assert (jitcore.cache_misses(jitted_reduced), jitcore.cache_hits(jitted_reduced)) == (1, 2)


def _check_dispatch_settings_inside(mesh: DeviceMesh) -> None:
    """``loss_parallel()`` and ``implicit_replication()`` entered inside the function, with a backward
    inside: eager's loss and gradients, traced (cache hits), and the settings as eager
    leaves them after every call. Before, the grad transform replayed the ops after the ``with`` had
    ended ("got mixed torch.Tensor and DTensor"): the call ran eagerly."""
    from torch.distributed.tensor.experimental import implicit_replication
    from torch.distributed.tensor.parallel import loss_parallel

    torch.manual_seed(5)
    base = nn.Linear(8, 16)
    model, reference = (parallelize_module(copy.deepcopy(base), mesh, ColwiseParallel(use_local_output=False))
                        for _ in range(2))
    handlers = dict(DTensor._op_dispatcher._custom_op_handlers)

    def sharded_loss(m: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with loss_parallel():
            loss = nn.functional.cross_entropy(m(x), target)
            loss.backward()
        return loss

    def replicated_implicitly(x: DTensor, y: DTensor) -> DTensor:
        with implicit_replication():
            loss = (x * torch.ones(4, 4) + y).sum()
            loss.backward()
        return loss

    jitted, implicit = jitcore.jit(sharded_loss), jitcore.jit(replicated_implicitly)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # traced: no eager entry
        for _ in range(3):  # the first call finds no .grad on the parameters, the next ones add to it
            x, target = torch.randn(6, 8), torch.randint(0, 16, (6,))
            _same(jitted(model, x, target), sharded_loss(reference, x, target))
            for p, q in zip(model.parameters(), reference.parameters(), strict=True):
                _same(p.grad, q.grad)
            (a, b), (ea, eb) = _inputs(mesh, True), _inputs(mesh, True)
            _same(implicit(a, b), replicated_implicitly(ea, eb))
            _same(a.grad, ea.grad)
            assert DTensor._op_dispatcher._custom_op_handlers == handlers
            assert not DTensor._op_dispatcher._allow_implicit_replication
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1), jitted.miss_log
    assert (jitcore.cache_misses(implicit), jitcore.cache_hits(implicit)) == (1, 2), implicit.miss_log


def _check_dispatch_settings_outside(mesh: DeviceMesh) -> None:
    """A function traced while the caller is inside ``loss_parallel()`` or ``implicit_replication()``,
    called again outside the block: eager raises, so must the jitted function (Note [DTensor's dispatch
    settings outside the function], prologue/guards.py); back inside, the first entry is hit. Before,
    the cached entry answered."""
    from torch.distributed.tensor.experimental import implicit_replication
    from torch.distributed.tensor.parallel import loss_parallel

    torch.manual_seed(6)
    model = parallelize_module(nn.Linear(8, 16), mesh, ColwiseParallel(use_local_output=False))
    x, target = torch.randn(6, 8), torch.randint(0, 16, (6,))
    a, _ = _inputs(mesh)

    def sharded_loss(m: nn.Module, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(m(x), target)

    def mixed(x: DTensor) -> DTensor:
        return x * torch.ones(4, 4)

    cases = ((sharded_loss, loss_parallel, (model, x, target)), (mixed, implicit_replication, (a,)))
    for fn, setting, args in cases:
        jitted = jitcore.jit(fn)
        with setting():
            _same(jitted(*args), fn(*args))
        with pytest.raises(RuntimeError, match="got mixed torch.Tensor and DTensor"):
            fn(*args)
        with pytest.raises(RuntimeError, match="got mixed torch.Tensor and DTensor"):
            jitted(*args)
        with setting():
            _same(jitted(*args), fn(*args))
        assert jitcore.cache_hits(jitted) == 1


def _full(t: Any) -> Any:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _check_fully_shard(mesh: DeviceMesh) -> None:
    """A ``fully_shard`` (FSDP2) MLP, nested (each Linear a unit, the Sequential the root) and root only:
    a jitted training step (AdamW, ``loss.backward()`` inside) and a jitted model with the backward and
    step outside, over batch sizes that change; loss, gradients and parameters equal eager's at every
    step. FSDP's hooks run eagerly and each innermost unit's forward is traced and hit (Note [FSDP2:
    hooks eager, each unit's forward jitted], jitcore/jit/fsdp_units.py); the call around the units is
    an eager entry. Before, the whole call ran eagerly: no unit was jitted."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    from jitcore.jit.fsdp_units import jitted_unit

    torch.manual_seed(2)
    base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def sharded(nested: bool) -> nn.Module:
        model = copy.deepcopy(base)
        for layer in (model[0], model[2]) if nested else ():
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    def step(m: nn.Module, opt: torch.optim.Optimizer, inputs: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = m(inputs).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    for nested, form in ((True, "step"), (False, "step"), (True, "module")):
        model, reference = sharded(nested), sharded(nested)
        opt, reference_opt = (torch.optim.AdamW(m.parameters(), lr=0.01) for m in (model, reference))
        jitted, forward = jitcore.jit(step), jitcore.jit(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(4):
                x = torch.randn(3 + i % 2, 8)
                if form == "step":
                    loss = jitted(model, opt, x)
                else:
                    opt.zero_grad()
                    loss = forward(x).pow(2).mean()
                    loss.backward()
                    opt.step()
                _same(loss, step(reference, reference_opt, x))
                for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
                    assert type(p) is type(q) is DTensor, name
                    torch.testing.assert_close(_full(p.grad), _full(q.grad))
                    torch.testing.assert_close(_full(p), _full(q))
        units = [m for m in model.modules() if isinstance(m, FSDPModule)]
        assert all("forward" not in vars(m) for m in units)  # the patch is for the call only
        innermost = [model[0], model[2]] if nested else [model]
        for unit in innermost:
            unit_forward = jitted_unit(unit)
            assert unit_forward is not None and unit_forward.fallback_reason is None, form
            assert jitcore.cache_hits(unit_forward) >= 2, unit_forward.miss_log
        if form == "step" and nested:  # the units' class gets another forward: eager's is run
            cls = type(model[0])  # FSDPLinear, shared by both models
            cls.forward = lambda self, x: nn.Linear.forward(self, x) * 0.5
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    x = torch.randn(3, 8)
                    _same(jitted(model, opt, x), step(reference, reference_opt, x))
            finally:
                del cls.forward
            for p, q in zip(model.parameters(), reference.parameters(), strict=True):
                torch.testing.assert_close(_full(p), _full(q))
        if form == "step":
            assert isinstance(jitted.fallback_reason, EagerOnlyValue)
            assert "fully_shard" in str(jitted.fallback_reason)
            assert jitcore.cache_hits(jitted) >= 2  # the eager entry, for each batch size


def _check_distribute_inside_under_grad(mesh: DeviceMesh) -> None:
    """``distribute_tensor`` of tensors requiring grad inside the function (a DTensor leaf each, as
    eagerly), gradients taken inside: traced, equal to eager. It ran eagerly before: the grad
    transform's second fake ``c10d::broadcast_``/``scatter_`` met torch's fake-dispatch cache, which
    compares the process group with ``==`` (Note [FakeTensor cache and torchbind])."""

    def f(w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        dw = distribute_tensor(w, mesh, [Shard(0)])
        dx = distribute_tensor(x, mesh, [Replicate()])
        loss = (dw @ dx).sin().sum()
        gw, gx = torch.autograd.grad(loss, (dw, dx))
        return loss.full_tensor(), gw.full_tensor(), gx.full_tensor(), dw.requires_grad, dw.is_leaf

    jitted = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # no call runs eagerly
        for seed in range(3):
            torch.manual_seed(seed)
            w, x = torch.randn(4, 3, requires_grad=True), torch.randn(3, 2, requires_grad=True)
            _same(jitted(w, x), f(w, x))
            assert w.grad is None and x.grad is None
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


def _check_distribute_module_inside_under_grad(mesh: DeviceMesh) -> None:
    """``distribute_module`` inside the function on a module requiring grad: its new DTensor
    parameters are leaves the function makes and stores, and the output is computed from them; that
    graph is not traced, so the call runs eagerly (Note [Leaves made inside under autograd]), with
    eager's values and gradients (traced once the fake c10d ops were cached safely, it returned
    outputs whose backward left the new parameters' ``.grad`` None)."""
    from torch.distributed.tensor import distribute_module

    def f(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        distribute_module(m, mesh)
        return m(distribute_tensor(x, mesh, [Replicate()])).full_tensor()

    torch.manual_seed(3)
    base, jitted = nn.Linear(3, 2), jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            eager_model, model, x = copy.deepcopy(base), copy.deepcopy(base), torch.randn(4, 3)
            got, expected = jitted(model, x), f(eager_model, x)
            _same(got, expected)
            got.sum().backward()
            expected.sum().backward()
            for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
                _same(p.grad, q.grad)
    assert type(jitted.fallback_reason) is EagerOnlyValue


def _check_guards(mesh: DeviceMesh) -> None:
    jitted = jitcore.jit(lambda x, y: x * 2 + y)
    a, b = _inputs(mesh)
    _same(jitted(a, b), a * 2 + b)
    _same(jitted(b, a), b * 2 + a)  # other placements: another entry
    named = init_device_mesh("cpu", (mesh.size(),), mesh_dim_names=("tp",))
    c = distribute_tensor(a.full_tensor(), named, [Shard(0)])
    d = distribute_tensor(b.full_tensor(), named, [Replicate()])
    out = jitted(c, d)  # another mesh: another entry, and the output is on the caller's mesh
    _same(out, c * 2 + d)
    assert out.device_mesh is named
    # an equal mesh that is another object: another entry too, since the computation rebuilds
    # outputs with the mesh it traced and runs the collectives on that mesh's groups
    equal = DeviceMesh("cpu", list(range(mesh.size())))
    assert equal == mesh and equal is not mesh
    e = DTensor.from_local(a.to_local(), equal, [Shard(0)])
    f = DTensor.from_local(b.to_local(), equal, [Replicate()])
    _same(jitted(e, f), e * 2 + f)  # (eagerly too, the output's mesh is only equal to the inputs')
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (4, 0)
    _same(jitted(a, b), a * 2 + b)
    assert jitcore.cache_hits(jitted) == 1


def _check_random_ops(mesh: DeviceMesh) -> None:
    """Dropout and ``rand_like`` of a sharded DTensor draw eager's numbers on every call (same seed)."""

    def f(x: DTensor) -> Any:
        return (torch.nn.functional.dropout(x, 0.5) + torch.rand_like(x)).full_tensor()

    jitted = jitcore.jit(f)
    x = distribute_tensor(torch.randn(4, 4), mesh, [Shard(0)])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # traced: no eager entry
        for seed in range(3):
            torch.manual_seed(seed)
            expected = f(x)
            torch.manual_seed(seed)
            _same(jitted(x), expected)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


def _check_batch_sizes(mesh: DeviceMesh) -> None:
    """DTensor inputs and DTensor outputs over 5 batch sizes: eager's values on every call, and one
    symbolic entry from the second size on where the local tensor has the DTensor's sizes (a Replicate
    DTensor; a Shard(0) one at world size 1), as for plain tensors (Note [A DTensor's ctx without its
    sizes], proxies/protocol.py). A Shard(0) input at world size 2 keeps an entry per size (its local
    sizes are not its global ones). Before, the flatten guard compared the ctx's global shape: 5 entries
    each, and a symbolic pass with a DTensor output raised rebuilding the ctx (``WithConstants``);
    ``distribute_tensor`` inside made 5 entries too: its scatter raised in a symbolic pass (Note [C
    functions that compute], dispatch/resolver.py)."""
    torch.manual_seed(7)
    w = distribute_tensor(torch.randn(4, 3), mesh, [Replicate()])
    base = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    plan = {"0": ColwiseParallel(), "2": RowwiseParallel(use_local_output=False)}
    model = parallelize_module(base, mesh, plan)
    cases = [(lambda x: (x * 2 + 1) @ w, [Replicate()], 2),
             (lambda x: (x.redistribute(mesh, [Shard(0)]) * 2).full_tensor(), [Replicate()], None),
             (lambda x: x * 2 + 1, [Shard(0)], 2 if mesh.size() == 1 else 5),
             (lambda x: model(x), None, 2),  # a plain input, a DTensor output
             # made inside: at world size 2 a guard on the size's parity adds an entry
             (lambda x: distribute_tensor(x, mesh, [Shard(0)]) * 3, None, 2 if mesh.size() == 1 else 3)]
    for fn, placements, entries in cases:
        jitted = jitcore.jit(fn)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="jitcore")  # traced: no eager entry
            for n in (4, 5, 6, 7, 8):
                full = torch.randn(n, 4)
                x = full if placements is None else distribute_tensor(full, mesh, placements)
                _same(jitted(x), fn(x))
        if entries is not None:
            assert jitcore.cache_misses(jitted) == entries, jitted.miss_log
        assert jitcore.cache_misses(jitted) + jitcore.cache_hits(jitted) == 5


CHECKS: dict[str, Callable[[DeviceMesh], None]] = {
    "random": _check_random_ops,
    "batch_sizes": _check_batch_sizes,
    "gradients": _check_gradients,
    "tensor_parallel": _check_tensor_parallel,
    "optimizer_steps": _check_optimizer_steps,
    "collectives": _check_collectives,
    "vocab_parallel_embedding": _check_vocab_parallel_embedding,
    "unreduced_vocab_embedding": _check_unreduced_vocab_embedding,
    "dispatch_settings_inside": _check_dispatch_settings_inside,
    "dispatch_settings_outside": _check_dispatch_settings_outside,
    "fully_shard": _check_fully_shard,
    "guards": _check_guards,
    "distribute_inside_under_grad": _check_distribute_inside_under_grad,
    "distribute_module_inside_under_grad": _check_distribute_module_inside_under_grad,
}


# --- world size 1, in this process (the mesh fixture: tests/dispatch/conftest.py) -----------------------
@pytest.mark.parametrize("name", list(_programs(None)))  # type: ignore[arg-type]
def test_dtensor_program_world_size_1(mesh: DeviceMesh, name: str) -> None:
    _check_program(name, _programs(mesh)[name], mesh)


@pytest.mark.parametrize("check", list(CHECKS))
def test_dtensor_world_size_1(mesh: DeviceMesh, check: str) -> None:
    CHECKS[check](mesh)


def test_dtensor_sharding_propagation_is_not_traced(mesh: DeviceMesh) -> None:
    """DTensor's sharding propagation runs torch code to decide metadata (the op on ``empty_strided``
    placeholders under a FakeTensorMode of its own; a decomposition on meta tensors for ops without a
    strategy): none of it is recorded. Before, ``index_copy`` of a 0-dim DTensor ran the placeholder op
    on uninitialized memory from the cached trace (IndexError, where eager computes the value), and
    ``cauchy_`` read a traced rank map and ran eagerly (Note [DTensor's sharding propagation is not
    traced], jitcore/dispatch/dtensor.py)."""
    def index_copy(x: DTensor, i: DTensor, s: DTensor) -> DTensor:
        return torch.index_copy(x, 0, i, s)

    def made(t: torch.Tensor) -> DTensor:
        return distribute_tensor(t.clone(), mesh, [Replicate()])

    torch.manual_seed(0)
    x, i, s = torch.randn(()), torch.tensor([0]), torch.randn(())
    jitted = jitcore.jit(index_copy)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        for _ in range(2):
            _same(jitted(made(x), made(i), made(s)), index_copy(made(x), made(i), made(s)))
        random = jitcore.jit(lambda t: t.cauchy_(0, 0.5))
        for _ in range(2):
            assert random(made(torch.randn(10))).placements == (Replicate(),)
    assert jitcore.cache_hits(jitted) == jitcore.cache_hits(random) == 1
    computation = str(jitcore.last_traces(jitted)[-1])
    assert computation.count("torch.ops.aten.") == 1 and "aten.index_copy.default" in computation, computation


# --- world size 2: two processes on 127.0.0.1 (tests/dispatch/world_size_2.py) ----------------------
def _check_op_db_entries(mesh: DeviceMesh) -> None:
    """Some of torch's OpInfo entries (tests/dispatch/dtensor_opinfo.py ``WORLD_SIZE_2``) at world size 2."""
    failures = world_size_2_failures(mesh)
    assert not failures, failures


def _all_checks(mesh: DeviceMesh, report: Callable[[str], None]) -> None:
    checks = {**{f"program {n}": (lambda m, n=n, p=p: _check_program(n, p, m))
                 for n, p in _programs(mesh).items()}, **CHECKS, "op_db entries": _check_op_db_entries}
    for name, check in checks.items():
        try:
            check(mesh)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            where = traceback.extract_tb(exc.__traceback__)[-1]
            report(f"{name}: {type(exc).__name__}: {exc} (line {where.lineno})")


def test_dtensor_world_size_2() -> None:
    assert run_at_world_size_2(_all_checks) == []
