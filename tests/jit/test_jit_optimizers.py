"""``torch.optim`` optimizers under jitcore, as training loops call them.

Each loop runs twice from the same start, eagerly and with ``opt.step()`` / ``opt.zero_grad()``
jitted (the forward and backward stay eager); parameters, gradients and every optimizer state
tensor are compared after every step. What these programs need: ``p.grad`` read through the
parameter's path (a new gradient tensor every step), ``p.grad = None`` replayed on every call,
``step_t += 1`` on a state tensor recorded, and state created by the first step.
"""

from __future__ import annotations

import pytest
import torch
from jit_helpers import assert_same, training_step

import jitcore

OPTIMIZERS = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "SGD-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
    "AdamW-amsgrad": lambda ps: torch.optim.AdamW(ps, lr=0.1, amsgrad=True),
    "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01, momentum=0.5),
    "Adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1),
    "NAdam": lambda ps: torch.optim.NAdam(ps, lr=0.1),
    # ``value=`` a tensor in addcdiv_: run on the values while tracing (Note [A value-shaped call that
    # writes its arguments], jitcore/jit/value_reads.py)
    "Adam-tensor-lr": lambda ps: torch.optim.Adam(ps, lr=torch.tensor(0.1)),
    "Adamax": lambda ps: torch.optim.Adamax(ps, lr=0.1),
    "ASGD": lambda ps: torch.optim.ASGD(ps, lr=0.1),
    "Rprop": lambda ps: torch.optim.Rprop(ps, lr=0.01),
    "RAdam": lambda ps: torch.optim.RAdam(ps, lr=0.1, decoupled_weight_decay=True, weight_decay=0.1),
    "Adadelta": lambda ps: torch.optim.Adadelta(ps),
}


def _setup(make):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    return model, make(model.parameters())


def _same_optimizer_state(a, b):
    assert len(a.state) == len(b.state)
    for state_a, state_b in zip(a.state.values(), b.state.values()):
        assert list(state_a) == list(state_b)
        for k in state_a:
            assert_same(state_a[k], state_b[k])


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("set_to_none", [True, False])
def test_training_loop_with_a_jitted_step(name, set_to_none):
    eager_model, eager_opt = _setup(OPTIMIZERS[name])
    model, opt = _setup(OPTIMIZERS[name])
    step = jitcore.jit(lambda: opt.step())
    zero_grad = jitcore.jit(lambda: opt.zero_grad(set_to_none=set_to_none))
    for i in range(5):
        x = torch.randn(8, 3, generator=torch.Generator().manual_seed(i))
        for m, _o, s, z in ((eager_model, eager_opt, eager_opt.step,
                             lambda: eager_opt.zero_grad(set_to_none)),
                            (model, opt, step, zero_grad)):
            z()
            m(x).square().mean().backward()
            s()
        for p, q in zip(model.parameters(), eager_model.parameters()):
            assert_same(p.detach(), q.detach())
            assert_same(p.grad, q.grad)
        _same_optimizer_state(opt, eager_opt)
    assert jitcore.cache_misses(step) <= 2  # the first step creates the state, the second reads it
    assert jitcore.cache_misses(zero_grad) <= 2  # no gradients yet at the first call, then gradients


def test_step_and_zero_grad_in_one_jitted_function():
    eager_model, eager_opt = _setup(OPTIMIZERS["Adam"])
    model, opt = _setup(OPTIMIZERS["Adam"])

    def update(o):
        o.step()
        o.zero_grad()

    jitted = jitcore.jit(update)
    for i in range(4):
        x = torch.randn(8, 3, generator=torch.Generator().manual_seed(i))
        eager_model(x).sum().backward()
        update(eager_opt)
        model(x).sum().backward()
        jitted(opt)
        for p, q in zip(model.parameters(), eager_model.parameters()):
            assert_same(p.detach(), q.detach())
            assert p.grad is None and q.grad is None


def test_gradient_clipping_reads_each_new_gradient():
    """``clip_grad_norm_`` reads ``p.grad`` of every parameter (new tensors after every backward)
    and runs ``torch._foreach_norm``/``_foreach_mul_``, operations torch's overrides do not list."""
    torch.manual_seed(0)
    eager, model = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    model.load_state_dict(eager.state_dict())
    clip = jitcore.jit(lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5))
    for i in range(3):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        for m in (eager, model):
            m.zero_grad()
            m(x).square().sum().backward()
        assert_same(clip(model), torch.nn.utils.clip_grad_norm_(eager.parameters(), 0.5))
        for p, q in zip(model.parameters(), eager.parameters()):
            assert_same(p.grad, q.grad)
    assert jitcore.cache_misses(clip) == 1


def test_grad_of_an_argument():
    def f(w, x):
        return (w.grad * x).sum() if w.grad is not None else x.sum()

    jf = jitcore.jit(f)
    w = torch.randn(3, requires_grad=True)
    for i in range(3):
        x = torch.randn(3)
        assert_same(jf(w, x), f(w, x))
        w.grad = torch.full((3,), float(i))


def test_grad_set_inside_the_function() -> None:
    """``w.grad = v`` on an input is an effect replayed on every call (it was refused: the whole call
    ran eagerly): the gradient is eager's object where eager's is an input, a size error is eager's."""
    w = torch.randn(3, requires_grad=True)
    jf = jitcore.jit(lambda w, x: setattr(w, "grad", x), fullgraph=True)
    scaled = jitcore.jit(lambda w, x: setattr(w, "grad", x * 2), fullgraph=True)
    for i in range(3):
        x = torch.full((3,), float(i))
        jf(w, x)
        assert w.grad is x
        scaled(w, x)
        assert_same(w.grad, x * 2)
    assert jitcore.cache_misses(jf) == jitcore.cache_misses(scaled) == 1
    with pytest.raises(RuntimeError, match="attempting to assign a gradient of size"):
        jf(w, torch.ones(4))

    def step(lin: torch.nn.Linear, x: torch.Tensor) -> tuple:
        lin.weight.grad = None  # through the module's attribute: a proxy of the parameter
        lin.bias.grad = torch.zeros_like(lin.bias)
        lin(x).sum().backward()
        return lin.weight.grad.clone(), lin.bias.grad

    eager, jitted = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    jitted.load_state_dict(eager.state_dict())
    jstep = jitcore.jit(step, fullgraph=True)
    for _ in range(3):
        x = torch.randn(4, 3)
        assert_same(jstep(jitted, x), step(eager, x))
        assert_same(jitted.bias.grad, eager.bias.grad)
    assert jitcore.cache_misses(jstep) <= 2  # the first call finds no gradient


SCHEDULERS = {
    "StepLR": (lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.5), 3),
    "ExponentialLR": (lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.9), 2),
    "CosineAnnealingLR": (lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4), 3),
    "LambdaLR": (lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda epoch: 0.95 ** epoch), 2),
    "LinearLR": (lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.5, total_iters=4), 3),
    # ``last_epoch in self.milestones`` (a Counter): a membership predicate, not a hash of the number
    "MultiStepLR": (lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 5], gamma=0.5), 4),
    # ``bisect_right(self._milestones, self.last_epoch)``: bisect's comparisons are predicates
    "SequentialLR": (lambda o: torch.optim.lr_scheduler.SequentialLR(o, [
        torch.optim.lr_scheduler.LinearLR(o, 0.5, total_iters=3),
        torch.optim.lr_scheduler.ExponentialLR(o, 0.9),
    ], milestones=[3]), 5),
}  # name: (make, most cache entries over 10 steps; one per branch the schedule takes, not per step)


# Schedulers that cycle momentum too, with the optimizer each writes it into: Adam's ``betas`` is a tuple
# written back whole (Note [A tuple of counters], jitcore/jit/effects.py), SGD's ``momentum`` a number.
CYCLING = {
    "OneCycleLR-Adam": ("Adam", lambda o: torch.optim.lr_scheduler.OneCycleLR(o, 0.1, total_steps=20), 4),
    "OneCycleLR-SGD": ("SGD-momentum",
                       lambda o: torch.optim.lr_scheduler.OneCycleLR(o, 0.1, total_steps=20), 4),
    "CyclicLR-Adam": ("Adam", lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, step_size_up=3), 4),
}


@pytest.mark.parametrize("name", list(SCHEDULERS) + list(CYCLING))
def test_learning_rate_scheduler_stepped_inside(name):
    """``sched.step()`` inside the jitted step: ``last_epoch`` and ``group["lr"]`` are numbers the step
    reads and writes back (dynamic numbers), the branches on them are predicate guards (Note [Predicate
    guards]), ``math.cos`` of them is recorded: a schedule does not make a cache entry per step.
    ``zip(param_groups, values)`` passes the optimizer's own dicts (a copy once lost the write). A
    schedule cycling Adam's ``betas`` made an entry per step."""
    optimizer, make, most_entries = CYCLING[name] if name in CYCLING else ("SGD", *SCHEDULERS[name])
    eager_model, eager_opt = _setup(OPTIMIZERS[optimizer])
    model, opt = _setup(OPTIMIZERS[optimizer])
    eager_sched, sched = make(eager_opt), make(opt)

    def step(m, o, s, x):
        o.zero_grad()
        m(x).square().mean().backward()
        o.step()
        s.step()
        return torch.tensor(o.param_groups[0]["lr"])

    jitted = jitcore.jit(step)
    for i in range(10):
        x = torch.randn(8, 3, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(model, opt, sched, x), step(eager_model, eager_opt, eager_sched, x))
        assert opt.param_groups[0] == eager_opt.param_groups[0] | {"params": opt.param_groups[0]["params"]}
        assert sched.last_epoch == eager_sched.last_epoch
        assert sched.get_last_lr() == eager_sched.get_last_lr()
        for p, q in zip(model.parameters(), eager_model.parameters()):
            assert_same(p.detach(), q.detach())
    assert jitcore.cache_misses(jitted) <= most_entries, jitcore.miss_reasons(jitted)[-1]


def test_reduce_lr_on_plateau_stepped_inside():
    """``sched.step(loss)`` inside the step: ``float(loss)`` is a read the computation makes, ``best``
    a number the step reads and writes back. The branch ``current < best * (1 - threshold)`` is checked
    by its outcome inside the computation, not by the loss's value, so the entries follow the branches
    the schedule takes (and each learning rate it reduces to), not the steps."""
    eager_model, eager_opt = _setup(OPTIMIZERS["SGD"])
    model, opt = _setup(OPTIMIZERS["SGD"])

    def make(o):
        return torch.optim.lr_scheduler.ReduceLROnPlateau(o, patience=1, factor=0.5)

    eager_sched, sched = make(eager_opt), make(opt)

    def step(m, o, s, x):
        o.zero_grad()
        loss = m(x).square().mean()
        loss.backward()
        o.step()
        s.step(loss.detach())
        return loss.detach()

    jitted = jitcore.jit(step)
    for i in range(16):
        x = torch.randn(8, 3, generator=torch.Generator().manual_seed(i % 3))  # the loss plateaus
        assert_same(jitted(model, opt, sched, x), step(eager_model, eager_opt, eager_sched, x))
        assert opt.param_groups[0]["lr"] == eager_opt.param_groups[0]["lr"]
        assert (sched.best, sched.num_bad_epochs) == (eager_sched.best, eager_sched.num_bad_epochs)
    assert eager_opt.param_groups[0]["lr"] < 0.05  # the schedule reduced it more than once
    assert jitcore.cache_misses(jitted) <= 8, jitcore.miss_reasons(jitted)[-1]


def test_grad_scaler_training_step():
    """torch.amp.GradScaler in a jitted step: ``update()`` replaces its per-optimizer state dict, and
    the changes the step made to the dict it replaced must not be redirected to the new one (they
    were: the next call raised 'step() has already been called since the last update()'). The
    scaler's defaultdict is guarded by its contents, not its identity: after the first call (no
    gradients yet) the steps share one entry."""

    def step(model, opt, scaler, x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.detach()

    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1)
        return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.amp.GradScaler("cpu", init_scale=4.0)

    jitted, eager = make(), make()
    jstep = jitcore.jit(step)
    for seed in range(4):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(seed))
        assert_same(jstep(*jitted, x), step(*eager, x))
        for p, q in zip(jitted[0].parameters(), eager[0].parameters()):
            assert_same(p.detach(), q.detach())
        assert jitted[2].get_scale() == eager[2].get_scale()
    assert jitcore.cache_misses(jstep) == 2


@pytest.mark.parametrize("norm", ["batch", "instance"])
@pytest.mark.parametrize("name", ["Adam", "AdamW-amsgrad", "NAdam"])
def test_running_statistics_move_once_per_training_step(name, norm):
    """The whole step jitted: batch norm's running statistics (written in place by ``F.batch_norm``,
    no underscore) moved twice on the call that first read the optimizer's ``step`` by value: the
    probe answering the read ran the forward on the caller's buffers, then the computation ran it
    again (Note [Calls that write their arguments under another name], jitcore/jit/probe.py)."""

    def make():
        torch.manual_seed(0)
        if norm == "batch":
            model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
        else:
            norm_layer = torch.nn.InstanceNorm1d(4, track_running_stats=True)
            model = torch.nn.Sequential(torch.nn.Conv1d(3, 4, 1), norm_layer, torch.nn.Flatten(),
                                        torch.nn.Linear(24, 2))
        return model, OPTIMIZERS[name](model.parameters())

    def step(model, opt, x):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    (eager, eager_opt), (model, opt) = make(), make()
    jitted = jitcore.jit(step)
    for i in range(4):
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(i))
        if norm == "instance":
            x = x.unsqueeze(-1) * torch.arange(1.0, 7.0)
        assert_same(jitted(model, opt, x), step(eager, eager_opt, x))
        for a, b in zip(model.state_dict().values(), eager.state_dict().values()):
            assert_same(a, b)


# ``foreach=True`` (every optimizer's default on CUDA): the per-parameter numbers go to foreach ops as a
# ``Scalar[]`` list (Note [A list of numbers to a foreach op], jitcore/langctx/scalars.py). Adam's bias
# corrections come from the step count read with ``item()`` each step; specialized, they made an entry
# per step (6 misses in 6 steps for Adam, AdamW, NAdam, Adamax and Adagrad before).
FOREACH = ["Adam", "AdamW-amsgrad", "NAdam", "Adamax", "Adagrad", "RAdam", "SGD-momentum", "RMSprop"]


@pytest.mark.parametrize("name", FOREACH)
def test_foreach_optimizer_in_a_jitted_training_step(name):
    def make(params):
        optimizer = OPTIMIZERS[name](params)
        optimizer.param_groups[0]["foreach"] = True
        return optimizer

    step = training_step(lambda model, x: model(x).square().mean())
    (eager_model, eager_opt), (model, opt) = _setup(make), _setup(make)
    jitted = jitcore.jit(step)
    for i in range(6):
        x = torch.randn(8, 3, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(model, opt, x), step(eager_model, eager_opt, x))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            assert_same(p.detach(), q.detach())
        _same_optimizer_state(opt, eager_opt)
    # the first step creates the state; RAdam's rectification switches on at a later step
    assert jitcore.cache_misses(jitted) <= (3 if name == "RAdam" else 2), jitcore.miss_reasons(jitted)[-1]


# A parameter written in place by one optimizer and then differentiated through: a GAN's discriminator
# step before the generator's loss through the discriminator, and LBFGS's closure run again after each
# of its updates. The second optimizer's (or iteration's) value read runs a backward through the written
# parameters on the probe's copies of them (Note [A written parameter the probe differentiates]); it
# raised "One of the differentiated Tensors does not require grad" on the second call (GAN) and
# "element 0 of tensors does not require grad" on the first (LBFGS) before.
def _gan_step(gen, disc, opt_g, opt_d, z, real):
    fake = gen(z)
    opt_d.zero_grad()
    softplus = torch.nn.functional.softplus
    loss_d = softplus(-disc(real)).mean() + softplus(disc(fake.detach())).mean()
    loss_d.backward()
    opt_d.step()
    opt_g.zero_grad()
    loss_g = softplus(-disc(fake)).mean()
    loss_g.backward()
    opt_g.step()
    return loss_d.detach(), loss_g.detach()


def test_gan_step_differentiates_through_parameters_another_optimizer_wrote():
    def setup():
        torch.manual_seed(0)
        gen = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        disc = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.LeakyReLU(0.2), torch.nn.Linear(8, 1))
        return (gen, disc, torch.optim.Adam(gen.parameters(), lr=1e-2, betas=(0.5, 0.999)),
                torch.optim.Adam(disc.parameters(), lr=1e-2, betas=(0.5, 0.999)))

    eager, jitted_models = setup(), setup()
    jitted = jitcore.jit(_gan_step)
    for i in range(4):
        g = torch.Generator().manual_seed(i)
        z, real = torch.randn(4, 2, generator=g), torch.randn(4, 3, generator=g)
        assert_same(jitted(*jitted_models, z, real), _gan_step(*eager, z, real))
        for a, b in zip(jitted_models[:2], eager[:2]):
            for p, q in zip(a.parameters(), b.parameters()):
                assert_same(p.detach(), q.detach())
        for a, b in zip(jitted_models[2:], eager[2:]):
            _same_optimizer_state(a, b)
    assert jitcore.cache_hits(jitted) >= 2, jitcore.miss_reasons(jitted)


def test_lbfgs_closure_runs_after_its_own_updates():
    def step(model, opt, x, y):
        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss
        return opt.step(closure)

    def setup():
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        return model, torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)

    (eager_model, eager_opt), (model, opt) = setup(), setup()
    jitted = jitcore.jit(step)
    for i in range(3):
        g = torch.Generator().manual_seed(i)
        x, y = torch.randn(6, 3, generator=g), torch.randn(6, 1, generator=g)
        assert_same(jitted(model, opt, x, y), step(eager_model, eager_opt, x, y))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            assert_same(p.detach(), q.detach())
