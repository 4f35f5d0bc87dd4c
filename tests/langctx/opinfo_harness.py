"""Differential checks of jitcore's language contexts against eager torch, driven by OpInfo samples.

Each check runs one OpInfo entry's samples eagerly and as a compiled jitcore trace, on clones of the
same tensors, and compares outputs (values, dtypes, types, container structure), the mutation of the
inputs (in-place and ``out=`` variants) and aliasing of outputs to inputs. The torch level traces
``op.op`` / its method and in-place variants natively on proxies; the aten level records the aten calls
a sample makes eagerly and replays them as aten symbols.

Invariant: a check returns an ``Outcome``; it never hides a failure (a check that cannot run is a
failure with the reason why).
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optree
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import TorchDispatchMode

import jitcore.langctx as L
from jitcore.errors import DataDependentError
from jitcore.ir import Trace, compile_trace, tracing
from jitcore.langctx.aten import aten_symbol
from jitcore.proxies import TensorProxy

SAMPLES_PER_DTYPE = 3
# The device the samples are made on: the CPU, or ``JITCORE_OPINFO_DEVICE=cuda`` on a machine with a GPU
# (the same checks on CUDA tensors; the known-failure lists are the CPU's).
DEVICE = os.environ.get("JITCORE_OPINFO_DEVICE", "cpu")
INTEGER_DTYPES = (torch.int64, torch.int32)
LOW_PRECISION_DTYPES = (torch.bfloat16, torch.float16)

# Ops whose outputs are random: a trace replays them under the same seed, but if their RNG
# consumption differs from eager's (an extra internal draw) only shapes and dtypes are compared.
RANDOM_WORDS = frozenset({
    "rand", "randn", "randint", "randperm", "dropout", "dropout2d", "dropout3d", "bernoulli", "multinomial",
    "normal", "uniform", "poisson", "exponential", "geometric", "cauchy", "random", "rrelu",
})


def random_by_name(name: str) -> bool:
    """Whether an OpInfo name says its op draws random numbers: by whole words of the name, so that
    ``normalize`` is not ``normal``, ``__rand__`` (bitwise and) not ``rand`` and the window function
    ``signal.windows.exponential`` not a random draw."""
    if name.startswith(("__", "signal.windows.")):
        return False
    return not RANDOM_WORDS.isdisjoint(re.split(r"[._]", name))


def entry_name(op: Any) -> str:
    """The key of an OpInfo entry: ``name`` or ``name.variant_test_name``."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


OPS: dict[str, Any] = {entry_name(op): op for op in op_db}


@dataclass(frozen=True)
class Outcome:
    """Result of checking one entry: ``status`` is ``pass``, ``fail`` or ``data-dependent``."""

    status: str
    detail: str = ""


PASS = Outcome("pass")


class Mismatch(AssertionError):
    """The trace disagrees with eager."""


def pick_dtypes(op: Any) -> list[torch.dtype]:
    """float32, one integer and one low-precision dtype, where the op supports them on ``DEVICE``."""
    supported = op.supported_dtypes(DEVICE)
    chosen = []
    for group in ((torch.float32,), INTEGER_DTYPES, LOW_PRECISION_DTYPES):
        found = next((d for d in group if d in supported), None)
        if found is not None:
            chosen.append(found)
    if not chosen and supported:  # e.g. bool-only or complex-only ops
        chosen.append(min(supported, key=str))
    return chosen


# Ops whose outputs are uninitialised memory: only shapes and dtypes are comparable.
UNINITIALIZED = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)


def is_random(op: Any) -> bool:
    """Random by name, or an ``op.op`` that reseeds torch itself (OpInfo's ``wrapper_set_seed``),
    which the trace does not record: its draws then differ from eager's."""
    code = getattr(op.op, "__code__", None)
    reseeds = code is not None and "wrapper_set_seed" in code.co_names
    return reseeds or random_by_name(op.name)


def values_comparable(op: Any) -> bool:
    return op.name not in UNINITIALIZED


def seed(n: int) -> None:
    """Seed the CPU generator (``torch.manual_seed`` also formats a stack for lazy CUDA seeding), and the
    current GPU's when the samples are on CUDA."""
    torch.random.default_generator.manual_seed(n)
    if DEVICE == "cuda":
        torch.cuda.default_generators[torch.cuda.current_device()].manual_seed(n)


def samples(op: Any, dtype: torch.dtype, window: slice = slice(0, SAMPLES_PER_DTYPE)) -> list[Any]:
    """The samples of ``op`` for ``dtype`` in ``window`` (by default the first ``SAMPLES_PER_DTYPE``):
    ``op.sample_inputs`` without its wrapper, which looks for the running unittest by crawling the stack
    for every sample (most of the time here). The generator is seeded, so a window of the samples is
    the same tensors whichever window is asked for."""
    seed(0)
    return list(itertools.islice(op.sample_inputs_func(op, DEVICE, dtype, False), window.start, window.stop))


Selection = Callable[[Any], "list[tuple[torch.dtype, slice]]"]


def first_samples(op: Any) -> list[tuple[torch.dtype, slice]]:
    """The default selection: the first ``SAMPLES_PER_DTYPE`` samples of each of ``pick_dtypes(op)``."""
    return [(dtype, slice(0, SAMPLES_PER_DTYPE)) for dtype in pick_dtypes(op)]


def sample_call(sample: Any) -> tuple[tuple, dict]:
    args = (sample.input, *sample.args)
    return args, dict(sample.kwargs)


def is_leaf_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not isinstance(x, TensorProxy)


def clone_tree(tree: Any) -> Any:
    """Clones of the tensors in ``tree`` (same strides and aliasing among them), other leaves as is."""
    leaves, spec = optree.tree_flatten(tree, none_is_leaf=True)
    memo: dict[int, torch.Tensor] = {}
    out = []
    for leaf in leaves:
        if is_leaf_tensor(leaf):
            if id(leaf) not in memo:
                memo[id(leaf)] = leaf.detach().clone().requires_grad_(leaf.requires_grad)
            out.append(memo[id(leaf)])
        else:
            out.append(leaf)
    return optree.tree_unflatten(spec, out)


def tensors_of(tree: Any) -> list[torch.Tensor]:
    return [x for x in optree.tree_leaves(tree, none_is_leaf=True) if is_leaf_tensor(x)]


# --- comparison ---------------------------------------------------------------------------------------
def compare(expected: Any, actual: Any, *, values: bool, what: str) -> None:
    """Same structure, leaf types, dtypes, shapes and (when ``values``) values."""
    e_leaves, e_spec = optree.tree_flatten(expected, none_is_leaf=True)
    a_leaves, a_spec = optree.tree_flatten(actual, none_is_leaf=True)
    if e_spec != a_spec:
        raise Mismatch(f"{what}: structure {e_spec} != {a_spec}")
    for i, (e, a) in enumerate(zip(e_leaves, a_leaves)):
        if type(e) is not type(a):
            raise Mismatch(f"{what}[{i}]: type {type(e).__name__} != {type(a).__name__}")
        if isinstance(e, torch.Tensor):
            if e.dtype != a.dtype or e.shape != a.shape:
                raise Mismatch(f"{what}[{i}]: {e.dtype}{list(e.shape)} != {a.dtype}{list(a.shape)}")
            if values:
                exact = e.dtype.itemsize == 1 and e.is_floating_point()  # float8: bitwise only
                tol = {"atol": 0.0, "rtol": 0.0} if exact else {"atol": 1e-5, "rtol": 1e-4}
                try:
                    torch.testing.assert_close(a, e, equal_nan=True, check_stride=False, **tol)
                except AssertionError as err:
                    raise Mismatch(f"{what}[{i}]: values differ: {str(err).splitlines()[0]}") from None
        elif values and isinstance(e, float):
            if not (e == a or (math.isnan(e) and math.isnan(a))):
                raise Mismatch(f"{what}[{i}]: {e!r} != {a!r}")
        elif values and e != a and not callable(e):
            raise Mismatch(f"{what}[{i}]: {e!r} != {a!r}")


def check_aliasing(out: Any, inputs: list[torch.Tensor], c_out: Any, c_inputs: list[torch.Tensor]) -> None:
    """An output that *is* an input eagerly is the corresponding input under the trace too."""
    e_leaves = optree.tree_leaves(out, none_is_leaf=True)
    a_leaves = optree.tree_leaves(c_out, none_is_leaf=True)
    for i, (e, a) in enumerate(zip(e_leaves, a_leaves)):
        for k, inp in enumerate(inputs):
            if e is inp and a is not c_inputs[k]:
                raise Mismatch(f"output[{i}] is input {k} eagerly but not in the trace")


# --- the torch level ----------------------------------------------------------------------------------
def variants(op: Any) -> list[tuple[str, Callable[..., Any]]]:
    """``op.op`` and, where they exist, its method and in-place variants called as methods.

    ``torch.Tensor.add`` is a C method descriptor that rejects a non-Tensor ``self`` before any
    ``__torch_function__`` runs, so natively the variants are called the way programs call them,
    ``x.add(y)``; the table entry of the descriptor itself is checked by ``lookup`` tests.
    """
    found = []
    for kind, variant in (
        ("function", op.op),
        ("method", op.method_variant),
        ("inplace", op.inplace_variant),
    ):
        if variant is None:
            continue
        name = getattr(variant, "__name__", None)
        if name and getattr(torch.Tensor, name, None) is variant:
            found.append((kind, _as_method(name)))
        else:
            found.append((kind, variant))
    return found


def _as_method(name: str) -> Callable[..., Any]:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, name)(*args, **kwargs)

    call.__name__ = name
    return call


def trace_call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Trace, Callable[..., Any], Any]:
    """Trace ``fn(*args, **kwargs)`` with a proxy for every tensor; return trace, compiled fn, raw out."""
    trace = Trace(imports={"torch": torch})
    context = L.new_context(trace)
    leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
    proxies: dict[int, TensorProxy] = {}
    params = []
    traced_leaves = []
    for leaf in leaves:
        if is_leaf_tensor(leaf):
            if id(leaf) not in proxies:
                proxies[id(leaf)] = context.values.input_proxy(leaf, f"a{len(proxies)}")
                params.append(proxies[id(leaf)])
            traced_leaves.append(proxies[id(leaf)])
        else:
            traced_leaves.append(leaf)
    t_args, t_kwargs = optree.tree_unflatten(spec, traced_leaves)
    trace.args = params
    with tracing(context):
        out = fn(*t_args, **t_kwargs)
    trace.output = out
    return trace, compile_trace(trace), out


def check_torch_sample(op: Any, fn: Callable[..., Any], sample: Any) -> Outcome:
    args, kwargs = sample_call(sample)
    e_args, e_kwargs = clone_tree((args, kwargs))
    e_inputs = tensors_of((e_args, e_kwargs))
    seed(1234)
    try:
        expected = fn(*e_args, **e_kwargs)
        eager_error = None
    except Exception as err:  # noqa: BLE001 - eager's error is what the trace must reproduce
        eager_error = err
    t_args, t_kwargs = clone_tree((args, kwargs))
    try:
        _, compiled, _ = trace_call(fn, t_args, t_kwargs)
    except DataDependentError as err:
        if eager_error is None:
            return Outcome("data-dependent", str(err).splitlines()[0])
        if isinstance(err, type(eager_error)):  # both reject the call (DataDependentError is a RuntimeError)
            return PASS
        raise Mismatch(
            f"eager raised {type(eager_error).__name__}, trace raised DataDependentError"
        ) from None
    except Exception as err:  # noqa: BLE001
        if eager_error is not None and isinstance(err, type(eager_error)):
            return PASS
        if eager_error is not None:
            raise Mismatch(
                f"eager raised {type(eager_error).__name__}, trace raised {type(err).__name__}: {err}"
            ) from None
        raise Mismatch(f"trace raised {type(err).__name__}: {str(err)[:300]}") from None
    if eager_error is not None:
        raise Mismatch(f"eager raised {type(eager_error).__name__}: {eager_error}; the trace did not")
    c_args, c_kwargs = clone_tree((args, kwargs))
    c_inputs = tensors_of((c_args, c_kwargs))
    seed(1234)
    flat_inputs = _unique(c_inputs)
    actual = compiled(*flat_inputs)
    compare_call(op, expected, actual, _unique(e_inputs), flat_inputs)
    return PASS


def compare_call(op: Any, expected: Any, actual: Any, expected_inputs: list, actual_inputs: list,
                 what: str = "output") -> None:
    """One call of ``op`` against eager's: its outputs by value (by metadata alone where the op is
    random or its values are not comparable), its inputs after the call, and what aliases what.

    Raises:
        Mismatch: the first difference."""
    random = is_random(op) or not values_comparable(op)
    try:
        compare(expected, actual, values=True, what=what)
    except Mismatch:
        if not random:
            raise
        compare(expected, actual, values=False, what=what)
    compare(expected_inputs, actual_inputs, values=not random, what="inputs after call")
    check_aliasing(expected, expected_inputs, actual, actual_inputs)


def _unique(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def check_entry(
    op: Any, check_sample: Callable[[Any, Any], Outcome], selection: Selection = first_samples
) -> Outcome:
    """Run ``check_sample(op, sample)`` over the dtypes and sample windows ``selection(op)`` chooses;
    first failure wins."""
    data_dependent = None
    for dtype, window in selection(op):
        try:
            batch = samples(op, dtype, window)
        except Exception as err:  # noqa: BLE001 - the sample generator itself is torch's business
            return Outcome("fail", f"{dtype}: sample_inputs raised {type(err).__name__}: {err}")
        for i, sample in enumerate(batch, start=window.start):
            try:
                outcome = check_sample(op, sample)
            except Exception as err:  # noqa: BLE001 - a check that crashes is a failure, reported
                return Outcome("fail", f"{dtype} sample {i}: {type(err).__name__}: {str(err)[:400]}")
            if outcome.status == "data-dependent":
                data_dependent = outcome
    return data_dependent or PASS


@dataclass
class _Sample:
    input: Any
    args: tuple
    kwargs: dict


def with_out(op: Any, sample: Any) -> _Sample | None:
    """``sample`` with ``out=`` tensors shaped like eager's result, for ops that support ``out=``;
    None when the op does not, or eager's result is not tensors."""
    if not op.supports_out:
        return None
    args, kwargs = clone_tree(sample_call(sample))
    try:
        seed(1234)
        result = op.op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the error itself is checked by the other variants
        return None
    leaves = optree.tree_leaves(result, none_is_leaf=True)
    if not leaves or not all(is_leaf_tensor(t) for t in leaves):
        return None
    out = optree.tree_map(lambda t: torch.empty_like(t).zero_(), result, none_is_leaf=True)
    if type(out) is not tuple and isinstance(out, tuple):  # structseq: out= takes a plain tuple
        out = tuple(out)
    return _Sample(sample.input, tuple(sample.args), {**sample.kwargs, "out": out})


def check_torch_entry(op: Any) -> Outcome:
    """The torch-level check of one entry: every variant (function, method, in-place) on every sample."""

    def check(op: Any, sample: Any) -> Outcome:
        result = PASS
        calls = [(kind, fn, sample) for kind, fn in variants(op)]
        out_sample = with_out(op, sample)
        if out_sample is not None:
            calls.append(("out=", op.op, out_sample))
        for kind, fn, sample_ in calls:
            try:
                outcome = check_torch_sample(op, fn, sample_)
            except Mismatch as err:
                raise Mismatch(f"{kind}: {err}") from None
            if outcome.status != "pass":
                result = outcome
        return result

    return check_entry(op, check)


# --- the aten level -----------------------------------------------------------------------------------
@dataclass
class AtenCall:
    func: Any
    args: tuple
    kwargs: dict
    output: Any


class _Recorder(TorchDispatchMode):
    """Logs every aten call made eagerly, with its (real) arguments and outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[AtenCall] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls.append(AtenCall(func, args, kwargs, out))
        return out


def record_aten_calls(op: Any, sample: Any) -> tuple[list[torch.Tensor], list[torch.Tensor], list[AtenCall]]:
    """Run ``op.op`` on clones of the sample under a recorder.

    Returns:
        The eager input tensors (after the call), copies of them from before the call, and the aten
        calls made (those made before an exception, if eager raised).
    """
    e_args, e_kwargs = clone_tree(sample_call(sample))
    e_inputs = _unique(tensors_of((e_args, e_kwargs)))
    before = [t.clone() for t in e_inputs]
    recorder = _Recorder()
    seed(1234)
    try:
        with recorder:
            op.op(*e_args, **e_kwargs)
    except Exception:  # noqa: BLE001, S110 - eager fails: the aten calls made before it are still replayed
        pass
    return e_inputs, before, [c for c in recorder.calls if c.func.namespace == "aten"]


class _AtenReplay:
    """A trace of aten symbols replaying recorded calls; eager tensors map to trace values by identity.

    Inputs are the eager input tensors, restored to their values before the call; tensors the calls
    returned map to their outputs; other tensors (made inside ``op.op`` outside any recorded call)
    become extra inputs.
    """

    def __init__(self, e_inputs: list[torch.Tensor], before: list[torch.Tensor]) -> None:
        self.trace = Trace(imports={"torch": torch})
        self.context = L.new_context(self.trace)
        self.env: dict[int, Any] = {}
        self.real_inputs: list[torch.Tensor] = []
        self.outputs: list[tuple[Any, Any, Any]] = []  # (func, eager output, traced output)
        for t, saved in zip(e_inputs, before):
            self._add_input(id(t), saved)

    def _add_input(self, key: int, value: torch.Tensor) -> Any:
        self.env[key] = self.context.values.input_proxy(value, f"a{len(self.real_inputs)}")
        self.trace.args.append(self.env[key])
        self.real_inputs.append(value)
        return self.env[key]

    def _to_proxy(self, x: Any) -> Any:
        if not is_leaf_tensor(x):
            return x
        return self.env[id(x)] if id(x) in self.env else self._add_input(id(x), x.detach().clone())

    def replay(self, call: AtenCall) -> None:
        """Record ``call`` as its aten symbol (inside ``tracing``). Raises Mismatch on disagreement."""
        p_args, p_kwargs = optree.tree_map(self._to_proxy, (call.args, call.kwargs), none_is_leaf=True)
        try:
            p_out = aten_symbol(call.func)(*p_args, **p_kwargs)
        except DataDependentError:
            raise
        except Exception as err:  # noqa: BLE001
            raise Mismatch(f"{call.func}: trace raised {type(err).__name__}: {str(err)[:300]}") from None
        e_leaves = optree.tree_leaves(call.output, none_is_leaf=True)
        p_leaves = optree.tree_leaves(p_out, none_is_leaf=True)
        if len(e_leaves) != len(p_leaves):
            raise Mismatch(f"{call.func}: {len(e_leaves)} outputs eagerly, {len(p_leaves)} traced")
        writes = _written_returns(call.func)
        for i, (e, p) in enumerate(zip(e_leaves, p_leaves)):
            if is_leaf_tensor(e):
                # In-place and out= returns are their input, in the trace as eagerly. Other returns
                # that eagerly are an existing tensor (``lift_fresh``) may be new values.
                if i in writes and id(e) in self.env and self.env[id(e)] is not p:
                    raise Mismatch(f"{call.func}: returns its input eagerly, a new tensor traced")
                self.env.setdefault(id(e), p)
        self.outputs.append((call.func, call.output, p_out))


def check_aten_sample(op: Any, sample: Any) -> Outcome:
    """Replay the aten calls of one sample as aten symbols; compare every output and the inputs."""
    e_inputs, before, aten_calls = record_aten_calls(op, sample)
    if not aten_calls:
        return PASS
    replay = _AtenReplay(e_inputs, before)
    with tracing(replay.context):
        for call in aten_calls:
            try:
                replay.replay(call)
            except DataDependentError as err:
                return Outcome("data-dependent", f"{call.func}: {str(err).splitlines()[0]}")
    replay.trace.output = [p for _, _, p in replay.outputs]
    compiled = compile_trace(replay.trace)
    c_inputs = [t.clone() for t in replay.real_inputs]
    seed(1234)
    actual = compiled(*c_inputs)
    random = any(torch.Tag.nondeterministic_seeded in f.tags for f, _, _ in replay.outputs) or is_random(op)
    random = random or not values_comparable(op)
    for (func, expected, _), got in zip(replay.outputs, actual):
        if func._schema.name.removeprefix("aten::") in UNINITIALIZED:
            compare(expected, got, values=False, what=str(func))  # its writers' returns are compared
            continue
        try:
            compare(expected, got, values=True, what=str(func))
        except Mismatch:
            if not random:
                raise
            compare(expected, got, values=False, what=str(func))
    compare(e_inputs, c_inputs[: len(e_inputs)], values=not random, what="inputs after calls")
    return PASS


def _written_returns(func: Any) -> set[int]:
    """Indices of the returns of an aten overload that alias a written input (``Tensor(a!)``)."""
    returns = func._schema.returns
    return {i for i, r in enumerate(returns) if r.alias_info is not None and r.alias_info.is_write}


def check_aten_entry(op: Any) -> Outcome:
    """The aten-level check of one entry: the sample's eager aten calls replayed as aten symbols."""
    return check_entry(op, check_aten_sample)
