"""More programs mixing Python side effects as training loops, loggers, metric trackers and caches do.

Issue 14, continued from test_jit_side_effect_programs.py (near its size limit): Lightning-style
``self.log``, torchmetrics-style running sums in module buffers and in Python floats, Hugging Face-style
key/value caches (a sliding window, a ``DynamicCache`` object), an EMA of weights, a step counter
driving a learning-rate schedule, ``defaultdict(list)`` histories, LRU dicts capped at N,
``itertools.count()`` ids, deques, sets, frozen dataclasses, generators fed with ``send``, growing lists,
a program that raises after making effects, gradient accumulation, a loss scaler, a best checkpoint,
counters, formatted log lines, a ``Counter`` of labels, a heap of losses, BatchNorm's running stats.
Each program runs ``CALLS`` calls with changing tensor values (some with changing shapes); every call's
result and every object it mutates are compared with eager's (keys and items by type too: a dict of the
caller's must never hold jitcore's proxies). ``RETRACES`` bounds the cache misses (None: misses still
grow with the calls, for the reason given next to it).
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import math

import pytest
import torch

from tests.jit.test_jit_side_effect_programs import check_matches_eager, x_of

CALLS = 24
PROGRAMS = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


@program
def lightning_self_log():
    class Module(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)
            self._logged = {}
            self.global_step = 0

        def log(self, name, value, prog_bar=False):
            if isinstance(value, torch.Tensor):
                value = value.detach()
            self._logged[name] = value

        def forward(self, x):
            y = self.lin(x)
            loss = y.square().mean()
            self.log("train/loss", loss)
            self.log("train/step", self.global_step)
            self.global_step += 1
            return loss

    torch.manual_seed(0)
    m = Module()
    return m, lambda: (m.global_step, dict(m._logged)), lambda i: (x_of(i, (3, 4)),)


@program
def torchmetrics_buffer_sum():
    class MeanMetric(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("sum_value", torch.zeros(()))
            self.register_buffer("weight", torch.zeros(()))
            self._update_count = 0

        def update(self, v):
            self._update_count += 1
            self.sum_value += v.sum()
            self.weight += v.numel()

        def compute(self):
            return self.sum_value / self.weight

    metric = MeanMetric()

    def f(x):
        metric.update(x)
        return metric.compute()

    return f, lambda: (metric._update_count, metric.sum_value.clone(), metric.weight.clone()), \
        lambda i: (x_of(i),)


@program
def torchmetrics_python_floats():
    class Acc:
        def __init__(self):
            self.total, self.n = 0.0, 0

        def update(self, x):
            self.total += float(x.sum())
            self.n += x.numel()

        def compute(self):
            return self.total / max(self.n, 1)

    acc = Acc()

    def f(x):
        acc.update(x)
        return x * 2, acc.compute()

    return f, lambda: (acc.total, acc.n), lambda i: (x_of(i),)


@program
def hf_past_key_values_sliding():
    torch.manual_seed(0)
    proj = torch.nn.Linear(4, 4)
    cache = {"past_key_values": None}

    def f(x):
        k = proj(x)
        past = cache["past_key_values"]
        keys = k if past is None else torch.cat([past, k])[-3:]
        cache["past_key_values"] = keys.detach()
        return (keys @ x.T).softmax(0)

    return f, lambda: (cache["past_key_values"],), lambda i: (x_of(i, (1, 4)),)


@program
def hf_dynamic_cache_object():
    class DynamicCache:
        def __init__(self):
            self.key_cache, self.value_cache = [], []
            self.seen_tokens = 0

        def update(self, k, v, layer):
            if layer == 0:
                self.seen_tokens += k.shape[0]
            if len(self.key_cache) <= layer:
                self.key_cache.append(k)
                self.value_cache.append(v)
            else:
                self.key_cache[layer] = torch.cat([self.key_cache[layer], k])[-2:]
                self.value_cache[layer] = torch.cat([self.value_cache[layer], v])[-2:]
            return self.key_cache[layer], self.value_cache[layer]

    cache = DynamicCache()

    def f(x):
        out = x
        for layer in range(2):
            k, v = cache.update(out * (layer + 1), out + layer, layer)
            out = (k.sum(0, keepdim=True) + v.mean(0, keepdim=True)).tanh()
        return out

    return f, lambda: (cache.seen_tokens, list(cache.key_cache), list(cache.value_cache)), \
        lambda i: (x_of(i, (1, 4)),)


@program
def ema_of_weights():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    ema = torch.nn.Linear(4, 2)
    ema.load_state_dict(model.state_dict())
    state = {"updates": 0}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def f(x):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        state["updates"] += 1
        decay = min(0.999, (1 + state["updates"]) / (10 + state["updates"]))
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(decay).add_(p, alpha=1 - decay)
        return loss.detach()

    return f, lambda: (state["updates"], dict(ema.state_dict()), dict(model.state_dict())), \
        lambda i: (x_of(i, (3, 4)),)


@program
def step_counter_warmup_cosine():
    torch.manual_seed(0)
    w = torch.randn(4, requires_grad=True)
    state = {"step": 0}
    lrs = []

    def f(x):
        state["step"] += 1
        step = state["step"]
        lr = 0.1 * min(1.0, step / 5) * 0.5 * (1 + math.cos(math.pi * step / 100))
        lrs.append(lr)
        loss = (w * x).sum().square()
        (g,) = torch.autograd.grad(loss, [w])
        with torch.no_grad():
            w.sub_(lr * g)
        return loss.detach()

    return f, lambda: (state["step"], list(lrs), w.detach().clone()), lambda i: (x_of(i),)


@program
def lambda_lr_scheduler():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))

    def f(x):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach()

    return f, lambda: (dict(model.state_dict()), sched.last_epoch), lambda i: (x_of(i, (3, 4)),)


@program
def defaultdict_list_history():
    hist = collections.defaultdict(list)

    def f(x):
        y = x.relu()
        hist["loss"].append(y.mean().item())
        hist["max"].append(y.max().item())
        return y

    return f, lambda: {k: list(v) for k, v in hist.items()}, lambda i: (x_of(i),)


@program
def lru_dict_capped():
    cache = collections.OrderedDict()
    cap = 3

    def f(x, key):
        if key in cache:
            cache.move_to_end(key)
            base = cache[key]
        else:
            base = x.detach() * 0 + key
            cache[key] = base
            if len(cache) > cap:
                cache.popitem(last=False)
        return x + base

    return f, lambda: list(cache.items()), lambda i: (x_of(i), i % 5)


@program
def plain_dict_lru_capped():
    cache = {}

    def f(x, key):
        if key not in cache:
            if len(cache) >= 2:
                del cache[next(iter(cache))]
            cache[key] = x.sum().item()
        return x * cache[key]

    return f, lambda: dict(cache), lambda i: (x_of(i), i % 3)


@program
def itertools_count_ids():
    ids = itertools.count()
    records = {}

    def f(x):
        rid = next(ids)
        records[rid] = x.sum().item()
        return x + 1

    return f, lambda: dict(records), lambda i: (x_of(i),)


@program
def itertools_count_id_in_output():
    ids = itertools.count(100)

    def f(x):
        rid = next(ids)
        return x * 2, rid

    return f, lambda: (), lambda i: (x_of(i),)


@program
def deque_append_and_sum():
    ring = collections.deque(maxlen=4)

    def f(x):
        ring.append(x.sum().item())
        return x * sum(ring) / len(ring)

    return f, lambda: list(ring), lambda i: (x_of(i),)


@program
def deque_of_tensors_stacked():
    ring = collections.deque(maxlen=3)

    def f(x):
        ring.append(x.detach())
        return torch.stack(list(ring)).mean(0)

    return f, lambda: list(ring), lambda i: (x_of(i),)


@program
def int_arg_into_set():
    seen = set()

    def f(x, i):
        seen.add(i % 4)
        return x * len(seen)

    return f, lambda: set(seen), lambda i: (x_of(i), i)


@program
def frozen_dataclass_replace_cfg():
    @dataclasses.dataclass(frozen=True)
    class Cfg:
        lr: float
        step: int

    holder = {"cfg": Cfg(0.1, 0)}

    def f(x):
        cfg = holder["cfg"]
        holder["cfg"] = dataclasses.replace(cfg, step=cfg.step + 1)
        return x * 2

    return f, lambda: (holder["cfg"],), lambda i: (x_of(i),)


@program
def generator_send_float():
    def averager():
        total, n, avg = 0.0, 0, None
        while True:
            v = yield avg
            total += v
            n += 1
            avg = total / n

    gen = averager()
    next(gen)
    out = []

    def f(x):
        out.append(gen.send(float(x.sum())))
        return x * 2

    return f, lambda: list(out), lambda i: (x_of(i),)


@program
def list_grows_len_read():
    losses = []

    def f(x):
        losses.append(x.mean().item())
        return x * 2, len(losses)

    return f, lambda: list(losses), lambda i: (x_of(i),)


@program
def list_grows_iterated():
    losses = []

    def f(x):
        losses.append(x.mean().item())
        total = 0.0
        for v in losses:
            total += v
        return x * 2, total / len(losses)

    return f, lambda: list(losses), lambda i: (x_of(i),)


@program
def raises_after_effects():
    log = []

    def f(x):
        log.append(x.sum().item())
        if x.shape[0] > 3:
            raise ValueError("too long")
        return x * 2

    return f, lambda: list(log), lambda i: (x_of(i),)


@program
def grad_accumulation_counter():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = {"micro": 0, "updates": 0}

    def f(x):
        loss = model(x).square().mean() / 4
        loss.backward()
        state["micro"] += 1
        if state["micro"] % 4 == 0:
            opt.step()
            opt.zero_grad()
            state["updates"] += 1
        return loss.detach()

    return f, lambda: (dict(state), dict(model.state_dict())), lambda i: (x_of(i, (3, 4)),)


@program
def loss_scaler_python_float():
    state = {"scale": 2.0 ** 8, "good": 0}

    def f(x):
        y = (x * state["scale"]).sum()
        if torch.isfinite(y):
            state["good"] += 1
            if state["good"] % 5 == 0:
                state["scale"] *= 2.0
        else:
            state["scale"] /= 2.0
        return y / state["scale"]

    return f, lambda: dict(state), lambda i: (x_of(i),)


@program
def best_checkpoint():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    best = {"loss": float("inf"), "state": None}

    def f(x):
        loss = model(x).square().mean()
        v = loss.item()
        if v < best["loss"]:
            best["loss"] = v
            best["state"] = {k: t.detach().clone() for k, t in model.state_dict().items()}
        return loss.detach()

    return f, lambda: (best["loss"], best["state"]), lambda i: (x_of(i, (3, 4)),)


@program
def running_mean_python_float():
    class Norm:
        def __init__(self):
            self.mean = 0.0

        def __call__(self, x):
            self.mean = 0.9 * self.mean + 0.1 * float(x.mean())
            return x - self.mean

    norm = Norm()
    return norm, lambda: norm.mean, lambda i: (x_of(i),)


@program
def global_metrics_dict():
    metrics = {"calls": 0, "tokens": 0}

    def f(x):
        metrics["calls"] += 1
        metrics["tokens"] += x.numel()
        return x.cumsum(0)

    return f, lambda: dict(metrics), lambda i: (x_of(i, (2 + i % 3,)),)


@program
def module_counter_in_math():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x * self.calls

    m = M()
    return m, lambda: m.calls, lambda i: (x_of(i),)


@program
def formatted_log_lines():
    lines = []
    state = {"step": 0}

    def f(x):
        state["step"] += 1
        v = x.abs().mean().item()
        lines.append(f"step {state['step']}: {v:.3f}")
        return x.abs()

    return f, lambda: (list(lines), dict(state)), lambda i: (x_of(i),)


@program
def tensor_history_capped_by_step():
    hist = {}
    state = {"step": 0}

    def f(x):
        state["step"] += 1
        hist[state["step"]] = x.detach() * 2
        if len(hist) > 3:
            del hist[min(hist)]
        return x + 1

    return f, lambda: (dict(state), dict(hist)), lambda i: (x_of(i),)


@program
def tokens_seen_changing_shapes():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = 0

        def forward(self, x):
            self.tokens += x.shape[0]
            return x.mean(0)

    m = M()
    return m, lambda: m.tokens, lambda i: (x_of(i, (2 + i % 4, 3)),)


@program
def grad_norm_history():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []

    def f(x):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        opt.step()
        return loss.detach()

    return f, lambda: (list(norms), dict(model.state_dict())), lambda i: (x_of(i, (3, 4)),)


@program
def first_call_init_flag():
    state = {"init": False, "offset": None}

    def f(x):
        if not state["init"]:
            state["init"] = True
            state["offset"] = x.detach().clone()
        return x - state["offset"]

    return f, lambda: dict(state), lambda i: (x_of(i),)


@program
def buffer_then_flush():
    buf, means = [], []

    def f(x):
        buf.append(x.sum().item())
        if len(buf) == 5:
            means.append(sum(buf) / 5)
            buf.clear()
        return x * 2

    return f, lambda: (list(buf), list(means)), lambda i: (x_of(i),)


@program
def mutable_dataclass_train_state():
    @dataclasses.dataclass
    class TrainState:
        step: int = 0
        epoch: int = 0
        last_loss: float = 0.0

    st = TrainState()

    def f(x):
        st.step += 1
        if st.step % 10 == 0:
            st.epoch += 1
        st.last_loss = x.square().mean().item()
        return x.square().mean()

    return f, lambda: dataclasses.asdict(st), lambda i: (x_of(i),)


@program
def heap_top_losses():
    top = []

    def f(x):
        v = x.sum().item()
        heapq.heappush(top, v)
        if len(top) > 3:
            heapq.heappop(top)
        return x * 2

    return f, lambda: sorted(top), lambda i: (x_of(i),)


@program
def recent_losses_window_list():
    recent = []

    def f(x):
        recent.append(x.mean().item())
        if len(recent) > 4:
            recent.pop(0)
        return x - sum(recent) / len(recent)

    return f, lambda: list(recent), lambda i: (x_of(i),)


@program
def counter_of_argmax_labels():
    counts = collections.Counter()

    def f(x):
        counts[int(x.argmax())] += 1
        return x.softmax(0)

    return f, lambda: dict(counts), lambda i: (x_of(i),)


@program
def outputs_by_count_id():
    c = itertools.count()
    outs = {}

    def f(x):
        y = x.sin()
        outs[next(c)] = y.detach()
        return y

    return f, lambda: dict(outs), lambda i: (x_of(i),)


@program
def batchnorm_running_stats():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(4)
    return bn, lambda: dict(bn.state_dict()), lambda i: (x_of(i, (5, 4)),)


RETRACES = {
    "lightning_self_log": 1, "torchmetrics_buffer_sum": 1, "torchmetrics_python_floats": 1,
    "hf_past_key_values_sliding": 3, "hf_dynamic_cache_object": 3, "ema_of_weights": 2,
    "step_counter_warmup_cosine": 2, "lambda_lr_scheduler": 3, "defaultdict_list_history": 2,
    "lru_dict_capped": 8, "plain_dict_lru_capped": 8,  # one per (keys in order, key)
    "itertools_count_ids": 1, "itertools_count_id_in_output": 1,
    # Note [A list of numbers that changed between calls]: one per length up to maxlen, then the items
    # are dynamic numbers
    "deque_append_and_sum": 6,
    "recent_losses_window_list": 5,  # a list's pop(0) + append: its len() a number read per call
    "deque_of_tensors_stacked": 4,
    "int_arg_into_set": 8,  # i % 4 hashed guards (i % 4) == v (Note [Hashing a computed number]): was 24
    "frozen_dataclass_replace_cfg": None,  # a new object of state each call: guarded by identity
    "generator_send_float": None,  # float(x.sum()) handed to C's gen.send: a value read
    "list_grows_len_read": 1,
    "list_grows_iterated": None,  # a loop over a list that grows: one unrolled loop per length
    "raises_after_effects": None,  # Note [A program that raises]: each raising call runs eagerly
    "grad_accumulation_counter": 3, "loss_scaler_python_float": 3, "best_checkpoint": 2,
    "running_mean_python_float": 1, "global_metrics_dict": 2, "module_counter_in_math": 1,
    "formatted_log_lines": 1,
    "tensor_history_capped_by_step": None,  # a dict keyed by a counter: the key is hashed, specialized
    "tokens_seen_changing_shapes": 2, "grad_norm_history": 2, "first_call_init_flag": 2,
    "buffer_then_flush": None,  # sum() of the item() floats it buffered: read, guarded by value
    "mutable_dataclass_train_state": 2,
    "heap_top_losses": None,  # heapq compares item() floats in C: the pushed item() is a value read
    "counter_of_argmax_labels": 16,  # one per (labels seen, label): int() of argmax is a value read
    "outputs_by_count_id": 1,  # an eager entry (next() of a count), its dict only stored into
    "batchnorm_running_stats": 1,
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_side_effects_match_eager_on_every_call(name: str) -> None:
    check_matches_eager(PROGRAMS, RETRACES, name, CALLS)
