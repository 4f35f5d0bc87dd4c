"""Programs mixing Python side effects as real code does, run eagerly and jitted call after call.

Issue 14: a training loop logging losses into a list and a dict, a module counting calls in ``self.n``,
a memo dict keyed by shapes, deque ring buffers, ``defaultdict(list)`` appends, dataclass state, a
global RNG-like counter, closures with nonlocal counters, generators, ``functools.lru_cache`` helpers,
``logging`` and ``warnings`` calls, sets, ``OrderedDict`` LRU caches, ``__slots__`` objects, property
setters, a KV-cache module; and a training script's pieces: a Lightning-style loop with callbacks, an
EMA under no_grad, a replay buffer, a progress bar, batches from a generator, early stopping, StepLR.
Each program runs 24 calls; every call's result and every object it mutates
are compared with eager's, and the warnings it issues. ``RETRACES`` bounds the cache misses where
jitcore holds one entry per key or per shape (None: an entry per call is still expected, the program
reads state whose values change every call; listed in the report of issue 14).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import logging
import warnings

import pytest
import torch

import jitcore

CALLS = 24


def snap(obj):
    """A comparable deep snapshot of state (tensors by value)."""
    if isinstance(obj, torch.Tensor):
        return ("T", obj.dtype, tuple(obj.shape), obj.detach().clone())
    if isinstance(obj, dict):
        return (type(obj).__name__, [(k, snap(v)) for k, v in obj.items()])
    if isinstance(obj, (list, tuple, collections.deque)):
        return (type(obj).__name__, [snap(v) for v in obj],
                getattr(obj, "maxlen", None))
    if isinstance(obj, (set, frozenset)):
        return (type(obj).__name__, sorted(map(repr, obj)))
    if dataclasses.is_dataclass(obj):
        return (type(obj).__name__, snap(dataclasses.asdict(obj)))
    if isinstance(obj, torch.nn.Module):
        return (type(obj).__name__, snap({k: v for k, v in vars(obj).items() if not k.startswith("_")}),
                snap(dict(obj.state_dict())))
    return obj


def same(a, b):
    if isinstance(a, tuple) and len(a) == 4 and a and a[0] == "T":
        return isinstance(b, tuple) and b[0] == "T" and a[1:3] == b[1:3] and torch.allclose(
            a[3], b[3], equal_nan=True, atol=1e-5, rtol=1e-5)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-5 * max(1, abs(a)) or (a != a and b != b)
    return type(a) is type(b) and a == b


PROGRAMS = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


def x_of(i, shape=(4,)):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(i))


@program
def training_loop_logs():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, stats = [], {"steps": 0, "best": float("inf"), "hist": []}

    def step(x):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        v = loss.item()
        losses.append(v)
        stats["steps"] += 1
        stats["hist"].append(round(v, 3))
        if v < stats["best"]:
            stats["best"] = v
        return loss.detach()

    return step, lambda: (losses, stats, model), lambda i: (x_of(i, (3, 4)),)


@program
def module_counts_calls():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.n = 0
            self.total = 0.0

        def forward(self, x):
            self.n += 1
            y = self.lin(x)
            self.total += 0.5
            return y * self.n

    torch.manual_seed(0)
    m = M()
    return m, lambda: (m.n, m.total), lambda i: (x_of(i),)


@program
def memo_by_shape():
    cache = {}

    def f(x):
        key = tuple(x.shape)
        if key not in cache:
            cache[key] = torch.ones(x.shape[-1]) * len(cache)
        return x + cache[key]

    shapes = [(4,), (2, 4), (5,), (4,), (2, 4)]
    return f, lambda: cache, lambda i: (x_of(i, shapes[i % len(shapes)]),)


@program
def deque_ring_buffer():
    ring = collections.deque(maxlen=3)
    ring_n = collections.deque([0, 0, 0], maxlen=3)

    def f(x):
        ring.append(x.sum().item())
        ring_n.append(len(ring))
        return x * sum(ring) + ring_n[-1]

    return f, lambda: (ring, ring_n), lambda i: (x_of(i),)


@program
def defaultdict_appends():
    hist = collections.defaultdict(list)
    counts = collections.defaultdict(int)

    def f(x, tag):
        hist[tag].append(x.mean().item())
        counts[tag] += 1
        return x * counts[tag]

    return f, lambda: (dict(hist), dict(counts)), lambda i: (x_of(i), "ab"[i % 3 == 0])


@program
def dataclass_state():
    @dataclasses.dataclass
    class State:
        step: int = 0
        ema: float = 0.0
        seen: list = dataclasses.field(default_factory=list)

    st = State()

    def f(x):
        st.step += 1
        st.ema = 0.9 * st.ema + 0.1 * x.sum().item()
        st.seen.append(st.step)
        return x + st.step

    return f, lambda: st, lambda i: (x_of(i),)


_RNG = [12345]


def _next_rand():
    _RNG[0] = (_RNG[0] * 1103515245 + 12345) % (2 ** 31)
    return _RNG[0] / 2 ** 31


@program
def global_rng_counter():
    _RNG[0] = 12345

    def f(x):
        return x * _next_rand() + _next_rand()

    return f, lambda: list(_RNG), lambda i: (x_of(i),)


@program
def closure_nonlocal_counter():
    def make():
        n = 0
        total = 0.0

        def f(x):
            nonlocal n, total
            n += 1
            total += x.sum().item()
            return x * n, total
        return f, lambda: (n, total)

    f, get = make()
    return f, get, lambda i: (x_of(i),)


@program
def generator_counter():
    gen = itertools.count()
    taken = []

    def f(x):
        k = next(gen)
        taken.append(k)
        return x + k

    return f, lambda: list(taken), lambda i: (x_of(i),)


@functools.cache
def _scale_for(n):
    return 1.0 / (n + 1)


@program
def lru_cache_helper():
    _scale_for.cache_clear()

    def f(x):
        return x * _scale_for(x.shape[0])

    return f, lambda: _scale_for.cache_info().currsize, lambda i: (x_of(i, ((4,), (5,), (6,))[i % 3]),)


LOGGER = logging.getLogger("eff38.probe")


@program
def logging_and_warnings():
    records = []

    class H(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    LOGGER.handlers[:] = [H()]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False

    def f(x, i):
        LOGGER.info("call %d sum %.3f", i, x.sum().item())
        if i % 5 == 0:
            warnings.warn(f"fifth {i}", stacklevel=1)
        return x * 2

    def call(i):
        return (x_of(i), i)

    def state():
        return list(records)

    return f, state, call


@program
def set_of_seen_shapes():
    seen = set()

    def f(x):
        seen.add(x.shape[0])
        return x * len(seen)

    return f, lambda: seen, lambda i: (x_of(i, ((4,), (5,), (4,), (6,))[i % 4]),)


@program
def counter_dict_per_key():
    counts = collections.Counter()

    def f(x, k):
        counts[k] += 1
        counts["total"] += x.numel()
        return x * counts[k]

    return f, lambda: dict(counts), lambda i: (x_of(i), "abc"[i % 3])


@program
def list_len_logged():
    log = []

    def f(x):
        log.append(len(log))
        return x * len(log)

    return f, lambda: log, lambda i: (x_of(i),)


@program
def tensor_attr_counter():
    class Holder:
        pass

    h = Holder()
    h.calls = 0
    h.buf = torch.zeros(4)

    def f(x):
        h.calls += 1
        h.buf = h.buf + x
        return h.buf * h.calls

    return f, lambda: (h.calls, h.buf), lambda i: (x_of(i),)


@program
def lru_ordered_dict():
    cache = collections.OrderedDict()

    def f(x, key):
        if key in cache:
            cache.move_to_end(key)
            y = cache[key] + x
        else:
            y = x * 2
            cache[key] = y
            if len(cache) > 2:
                cache.popitem(last=False)
        return y

    return f, lambda: cache, lambda i: (x_of(i), "abcd"[(i * 7) % 4])


@program
def setdefault_lists():
    groups = {}

    def f(x, k):
        groups.setdefault(k, []).append(x.sum().item())
        return x * len(groups[k])

    return f, lambda: groups, lambda i: (x_of(i), "xy"[i % 2])


@program
def slots_object():
    class S:
        __slots__ = ("n", "acc")

        def __init__(self):
            self.n = 0
            self.acc = 0.0

    s = S()

    def f(x):
        s.n += 1
        s.acc += 0.25 * s.n
        return x + s.acc

    return f, lambda: (s.n, s.acc), lambda i: (x_of(i),)


@program
def property_setter():
    class P:
        def __init__(self):
            self._v = 1.0
            self.sets = 0

        @property
        def v(self):
            return self._v

        @v.setter
        def v(self, value):
            self.sets += 1
            self._v = value

    p = P()

    def f(x):
        p.v = p.v * 0.9
        return x * p.v

    return f, lambda: (p._v, p.sets), lambda i: (x_of(i),)


_GLOBAL_STEP = 0


def _tick():
    global _GLOBAL_STEP
    _GLOBAL_STEP += 1
    return _GLOBAL_STEP


@program
def global_in_helper():
    global _GLOBAL_STEP
    _GLOBAL_STEP = 0

    def f(x):
        s = _tick()
        return x * s + _tick()

    return f, lambda: _GLOBAL_STEP, lambda i: (x_of(i),)


@program
def deque_popleft_queue():
    q = collections.deque([1.0, 2.0])

    def f(x):
        q.append(float(len(q)))
        first = q.popleft()
        return x * first

    return f, lambda: q, lambda i: (x_of(i),)


@program
def set_discard_add():
    active = {0, 1}

    def f(x, i):
        active.discard(i % 3)
        active.add((i + 1) % 3)
        return x * len(active)

    return f, lambda: active, lambda i: (x_of(i), i)


@program
def list_pop_insert():
    stack = [1, 2, 3]

    def f(x):
        v = stack.pop()
        stack.insert(0, v + 1)
        return x * v

    return f, lambda: stack, lambda i: (x_of(i),)


@program
def frozen_dataclass_replace():
    @dataclasses.dataclass(frozen=True)
    class Cfg:
        step: int = 0
        lr: float = 0.1

    holder = {"cfg": Cfg()}

    def f(x):
        cfg = holder["cfg"]
        holder["cfg"] = dataclasses.replace(cfg, step=cfg.step + 1, lr=cfg.lr * 0.5)
        return x * cfg.lr

    return f, lambda: (holder["cfg"].step, holder["cfg"].lr), lambda i: (x_of(i),)


@program
def kv_cache_module():
    class KV(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.keys = []
            self.seen = 0

        def forward(self, x):
            self.keys.append(x * 2)
            self.seen += x.shape[0]
            return torch.cat(self.keys).sum() + self.seen

    m = KV()

    def f(x):
        return m(x)

    return f, lambda: (m.keys, m.seen), lambda i: (x_of(i, (2,)),)


@program
def warnings_once_registry():
    def f(x, i):
        if i % 4 == 0:
            warnings.warn("every fourth", UserWarning, stacklevel=1)
        return x + i

    return f, lambda: None, lambda i: (x_of(i), i)


@program
def closure_list_of_tensors_and_counts():
    def make():
        hist = []
        n = [0]

        def f(x):
            n[0] += 1
            hist.append(x.mean())
            return torch.stack(hist).mean() * n[0]
        return f, lambda: (list(hist), n[0])

    f, st = make()
    return f, st, lambda i: (x_of(i),)


@program
def generator_send_state():
    def averager():
        total, count = 0.0, 0
        avg = None
        while True:
            v = yield avg
            total += v
            count += 1
            avg = total / count

    gen = averager()
    next(gen)
    seen = []

    def f(x):
        seen.append(gen.send(float(x.sum())))
        return x * seen[-1]

    return f, lambda: list(seen), lambda i: (x_of(i),)


@program
def lru_cache_tensor_builder():
    @functools.lru_cache(maxsize=4)
    def mask(n):
        return torch.tril(torch.ones(n, n))

    def f(x):
        return x @ mask(x.shape[0])

    return f, lambda: mask.cache_info().currsize, lambda i: (x_of(i, ((3, 3), (4, 4))[i % 2]),)


@program
def module_buffer_inplace_counter():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("steps", torch.zeros((), dtype=torch.long))
            self.calls = 0

        def forward(self, x):
            self.steps += 1
            self.calls += 1
            return x * self.steps + self.calls

    m = M()
    return m, lambda: (m.steps.clone(), m.calls), lambda i: (x_of(i),)



# Programs of a training script's shape (issue 14, eff39): a Lightning-style loop whose callbacks append
# metrics, an EMA updated in place under no_grad, a replay buffer in a deque, a tqdm-like progress bar,
# batches from a generator, a metric module keeping buffers and a history, early stopping, a StepLR.
@program
def lightning_style_loop():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    class Metrics:
        def __init__(self):
            self.rows = []

        def on_step_end(self, trainer, loss):
            self.rows.append({"loss": loss, "step": trainer.step})

    class Trainer:
        def __init__(self):
            self.step, self.callbacks, self.logged = 0, [Metrics()], {}

        def log(self, key, value):
            self.logged.setdefault(key, []).append(value)

    trainer = Trainer()

    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        trainer.step += 1
        value = loss.item()
        trainer.log("loss", value)
        for callback in trainer.callbacks:
            callback.on_step_end(trainer, value)
        return loss.detach()

    def state():
        return trainer.step, trainer.logged, trainer.callbacks[0].rows, dict(model.state_dict())

    return step, state, lambda i: (x_of(i, (3, 4)),)


@program
def ema_under_no_grad():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    ema = torch.nn.Linear(4, 2).requires_grad_(False)
    ema.load_state_dict(model.state_dict())
    state = {"updates": 0}

    def f(x):
        with torch.no_grad():
            for shadow, p in zip(ema.parameters(), model.parameters()):
                shadow.mul_(0.9).add_(p + 0.01 * state["updates"], alpha=0.1)
        state["updates"] += 1
        return ema(x)

    return f, lambda: (dict(ema.state_dict()), dict(state)), lambda i: (x_of(i, (2, 4)),)


@program
def replay_buffer_in_a_deque():
    buffer = collections.deque(maxlen=5)
    stats = {"pushed": 0}

    def f(x):
        buffer.append(x * 2)
        stats["pushed"] += 1
        batch = torch.stack(list(buffer)).mean(0) if len(buffer) == buffer.maxlen else x
        return batch + stats["pushed"]

    return f, lambda: (list(buffer), dict(stats)), lambda i: (x_of(i),)


@program
def progress_bar_counters():
    class Bar:
        def __init__(self, total):
            self.n, self.total, self.postfix = 0, total, {}

        def update(self, k=1):
            self.n += k

        def set_postfix(self, **kw):
            self.postfix.update(kw)

    bar = Bar(CALLS)

    def f(x):
        y = x.sin().sum()
        bar.update()
        bar.set_postfix(loss=round(y.item(), 3), frac=bar.n / bar.total)
        return y

    return f, lambda: (bar.n, dict(bar.postfix)), lambda i: (x_of(i),)


@program
def batches_from_a_generator():
    def batches():
        i = 0
        while True:
            yield x_of(100 + i), i
            i += 1

    source = batches()
    consumed = []

    def f(w):
        batch, i = next(source)
        consumed.append(i)
        return (batch * w).sum()

    return f, lambda: list(consumed), lambda i: (x_of(i),)


@program
def metric_module_with_history():
    class Mean(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(()))
            self.register_buffer("count", torch.zeros((), dtype=torch.long))
            self.history = []

        def forward(self, v):
            self.total += v.sum()
            self.count += v.numel()
            self.history.append(float(self.total / self.count))
            return self.total / self.count

    mean = Mean()
    return mean, lambda: (mean.total.clone(), mean.count.clone(), list(mean.history)), lambda i: (x_of(i),)


@program
def early_stopping():
    state = {"best": float("inf"), "bad": 0, "stop": False}

    def f(x):
        loss = (x ** 2).mean()
        value = loss.item()
        if value < state["best"]:
            state["best"], state["bad"] = value, 0
        else:
            state["bad"] += 1
        state["stop"] = state["bad"] >= 3
        return loss

    return f, lambda: dict(state), lambda i: (x_of(i),)


@program
def step_lr_schedule():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    rates = []

    def f(x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        schedule.step()
        rates.append(opt.param_groups[0]["lr"])
        return loss.detach()

    return f, lambda: (list(rates), dict(model.state_dict())), lambda i: (x_of(i, (3, 4)),)



RETRACES = {
    "training_loop_logs": 4, "module_counts_calls": 2, "memo_by_shape": 8, "deque_ring_buffer": None,
    "defaultdict_appends": 6, "dataclass_state": 2, "global_rng_counter": 2, "closure_nonlocal_counter": 3,
    "generator_counter": 2, "lru_cache_helper": 4, "logging_and_warnings": 6, "set_of_seen_shapes": 8,
    "counter_dict_per_key": 10, "list_len_logged": 2, "tensor_attr_counter": 2, "lru_ordered_dict": 8,
    "setdefault_lists": 4, "slots_object": 2, "property_setter": 2, "global_in_helper": 2,
    "deque_popleft_queue": 3, "set_discard_add": None, "list_pop_insert": 2, "frozen_dataclass_replace": None,
    "kv_cache_module": None, "warnings_once_registry": 4, "closure_list_of_tensors_and_counts": None,
    "generator_send_state": None, "lru_cache_tensor_builder": 3, "module_buffer_inplace_counter": 2,
    "lightning_style_loop": 2, "ema_under_no_grad": 2, "replay_buffer_in_a_deque": 6,
    "progress_bar_counters": 2, "batches_from_a_generator": 2, "metric_module_with_history": 2,
    "early_stopping": 3, "step_lr_schedule": 4,
}


def _run(programs: dict, name: str, jit: bool, calls: int) -> tuple[list, list, object]:
    fn, state, args_of = programs[name]()
    if jit:
        fn = jitcore.jit(fn)
    outcomes = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(calls):
            try:
                out = fn(*args_of(i))
                outcomes.append((snap(out), snap(state())))
            except Exception as exc:  # noqa: BLE001 - compared with eager's
                outcomes.append(("raised", type(exc), str(exc)))
    issued = [(str(w.message), w.category) for w in caught if not str(w.message).startswith("jitcore")]
    return outcomes, issued, fn


def check_matches_eager(programs: dict, retraces: dict, name: str, calls: int) -> None:
    """Program ``name`` run ``calls`` times eagerly and jitted: every call's result, the state it
    mutates and the warnings it issues equal eager's; its cache misses within ``retraces[name]``."""
    eager_calls, eager_warned, _ = _run(programs, name, jit=False, calls=calls)
    outcomes, warned, jitted = _run(programs, name, jit=True, calls=calls)
    for i, (got, expected) in enumerate(zip(outcomes, eager_calls)):
        assert same(got, expected), f"call {i}: {got!r} != {expected!r}"
    assert warned == eager_warned
    bound = retraces[name]
    if bound is not None:
        assert jitcore.cache_misses(jitted) <= bound, jitcore.miss_reasons(jitted)[-1]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_side_effects_match_eager_on_every_call(name: str) -> None:
    check_matches_eager(PROGRAMS, RETRACES, name, CALLS)
