"""Small programs mixing Python and torch, in the style of torch.compile's own tests (functions called
with a few random tensors; containers, model outputs, modules), run eagerly and jitted: values, types,
structure, side effects and the number of traces match. Each test failed before its fix (issue 13).
"""

from __future__ import annotations

import collections
import dataclasses
import warnings

import torch
from jit_helpers import assert_same, check
from transformers.utils import ModelOutput  # a test extra: a missing install fails here

import jitcore


def _calls(fn, *shapes: tuple) -> None:
    """``fn(x, y)`` eagerly and jitted, on fresh equal inputs twice and then on another shape: equal
    results (no traced object reaches the caller), one trace per shape."""
    jfn = jitcore.jit(fn)
    for shape in (shapes[0], shapes[0], *shapes[1:]):
        torch.manual_seed(0)
        check(fn, torch.randn(shape), torch.randn(shape), jfn=jfn)
    assert jitcore.cache_misses(jfn) <= len(set(shapes)), jitcore.miss_reasons(jfn)


def test_returned_ordered_dicts_hold_tensors_in_their_own_order() -> None:
    """An OrderedDict the function makes and returns holds the call's tensors, in the order its own
    methods left (the trace returned the traced OrderedDict itself: its values were TensorProxy
    objects; optree's spec of it ignores ``move_to_end``)."""

    def made(a, b):
        return collections.OrderedDict([("a", a + 1), ("b", b)])

    def moved(a, b):
        d = collections.OrderedDict([("a", a), ("b", b * 2)])
        d.move_to_end("a")
        d["c"] = a - b
        return d, d.popitem(last=False)[0]

    def nested(a, b):
        return [collections.OrderedDict(k=(a, collections.OrderedDict(z=b.sin())))]

    for fn in (made, moved, nested):
        _calls(fn, (3,), (5,))
    a, b = torch.ones(2), torch.zeros(2)
    assert list(jitcore.jit(moved)(a, b)[0]) == list(moved(a, b)[0]) == ["a", "c"]


def test_returned_defaultdicts_and_deques_hold_tensors() -> None:
    """A defaultdict (with its factory) and a deque (with its maxlen) the function returns hold the
    call's tensors (they held TensorProxy objects)."""

    def fn(a, b):
        d = collections.defaultdict(list)
        d["x"].append(a * 2)
        q = collections.deque([a, b], maxlen=2)
        q.append(a + b)
        return d, q

    _calls(fn, (3,), (4,))
    d, q = jitcore.jit(fn)(torch.ones(2), torch.ones(2))
    assert d.default_factory is list and q.maxlen == 2


def test_ordered_dict_argument_mapped_into_a_new_ordered_dict() -> None:
    def fn(d):
        return collections.OrderedDict((k, v + 1) for k, v in d.items())

    jfn = jitcore.jit(fn)
    for n in (3, 3, 4):
        arg = collections.OrderedDict(x=torch.randn(n), y=torch.randn(n))
        assert_same(jfn(arg), fn(arg))


def test_ordered_dict_argument_values_are_the_calls_tensors() -> None:
    """``d.items()`` / ``d.values()`` of an OrderedDict argument read its tensors in C: they were bound
    as captured tensors, so later calls computed with the first call's tensors (even at another
    shape). They are the arguments' now; mutations of the argument are replayed as eagerly."""

    def items(d):
        return [v + 1 for _k, v in d.items()], list(d)

    def values_and_writes(d):
        d["z"] = d["x"] * 2
        d.move_to_end("x")
        return sum(v.sum() for v in d.values())

    for fn in (items, values_and_writes):
        jfn = jitcore.jit(fn)
        for n in (3, 3, 4):
            torch.manual_seed(n)
            check(fn, collections.OrderedDict(x=torch.randn(n), y=torch.randn(n)), jfn=jfn)
        assert jitcore.cache_misses(jfn) == 2, jitcore.miss_reasons(jfn)


_STATE = collections.OrderedDict(w=torch.randn(3), b=torch.randn(3))


def test_ordered_dict_of_global_state_read_natively_is_read_per_call() -> None:
    """A global OrderedDict's tensors read through ``.values()`` are read on every call (the first
    call's tensors were captured: after ``_STATE["w"]`` was replaced the jitted function still used
    the old one); its keys are guarded."""

    def fn(x):
        return [x * v for v in _STATE.values()]

    jfn = jitcore.jit(fn)
    x = torch.randn(3)
    for w in (torch.randn(3), torch.randn(3)):
        _STATE["w"] = w
        assert_same(jfn(x), fn(x))
    _STATE["c"] = torch.randn(3)
    assert_same(jfn(x), fn(x))
    del _STATE["c"]
    assert jitcore.cache_misses(jfn) == 2, jitcore.miss_reasons(jfn)


def test_model_output_argument_read_by_values_hits_the_cache() -> None:
    """A ``ModelOutput`` argument (a dataclass and an OrderedDict) read through ``.values()``: the
    program's copy of it held the proxies as attributes but the caller's tensors as items, so the
    items were captured tensors and every call with a new output missed the cache."""
    @dataclasses.dataclass
    class Out(ModelOutput):
        loss: torch.Tensor | None = None
        logits: torch.Tensor | None = None

    def fn(out):
        return [v * 2 for v in out.values()], out.to_tuple()[1] + 1, list(out.keys())

    jfn = jitcore.jit(fn)
    for n in (3, 3, 3, 4):
        torch.manual_seed(n)
        check(fn, Out(loss=torch.randn(n), logits=torch.randn(n)), jfn=jfn)
    assert jitcore.cache_misses(jfn) == 2, jitcore.miss_reasons(jfn)


def test_a_hook_registered_on_a_module_argument_after_a_call_runs() -> None:
    """``m(x)`` for a module the caller passes: a forward hook registered after the first call runs
    on the next (the module's hook OrderedDicts were guarded by class only, so the cached call
    skipped the hook and returned the unhooked output)."""

    def fn(m, x):
        return m(x)

    lin = torch.nn.Linear(3, 3)
    jfn = jitcore.jit(fn)
    x = torch.randn(3)
    assert_same(jfn(lin, x), fn(lin, x))
    handle = lin.register_forward_hook(lambda _mod, _args, out: out * 0 + 1)
    assert_same(jfn(lin, x), fn(lin, x))
    handle.remove()
    lin.register_forward_pre_hook(lambda _mod, args: (args[0] * 2,))
    assert_same(jfn(lin, x), fn(lin, x))
    assert jitcore.cache_misses(jfn) == 3, jitcore.miss_reasons(jfn)


def test_a_returned_closure_over_a_computed_tensor_is_made_per_call() -> None:
    """``c = x * 2; return c.sum(), get`` with ``get`` returning ``c``: the closure's cell held the
    TensorProxy of ``c`` (calling the returned function gave a proxy); then it was refused (an eager
    entry). The computation returns ``c`` and each call makes ``get`` again over its own (Note [A closure
    over traced values], jit/outputs.py)."""

    def fn(x):
        c = x * 2

        def get():
            return c

        return c.sum(), get

    jfn = jitcore.jit(fn)
    for _ in range(2):
        x = torch.randn(3)
        total, get = jfn(x)
        assert_same((total, get()), (fn(x)[0], fn(x)[1]()))
    assert jfn.fallback_reason is None
    assert (jitcore.cache_misses(jfn), jitcore.cache_hits(jfn)) == (1, 1)


def test_a_model_output_filled_after_construction_keeps_its_key_order() -> None:
    """``out = Out(logits=t); out.loss = l``: keys logits, loss as eagerly (the output was rebuilt
    through the class's constructor, in field order: ``out[0]`` and ``to_tuple()`` gave the loss)."""
    @dataclasses.dataclass
    class Out(ModelOutput):
        loss: torch.Tensor | None = None
        logits: torch.Tensor | None = None
        hidden: tuple | None = None

    def fn(a, b):
        out = Out(logits=a * 2)
        out.loss = b.sum()
        out["hidden"] = (a,)
        return out

    _calls(fn, (3,), (4,))
    a, b = torch.ones(2), torch.zeros(2)
    assert list(jitcore.jit(fn)(a, b).keys()) == list(fn(a, b).keys()) == ["logits", "loss", "hidden"]


def test_a_size_passed_per_call_is_guarded_by_value() -> None:
    """``f(x, torch.Size([3, 4]))`` with a new but equal Size each call hits the cache (a Size was
    guarded by identity: every call traced again, until the cache limit)."""

    def fn(x, size):
        return x.view(size), size, size[0] * 2

    jfn = jitcore.jit(fn)
    for shape in ((3, 4), (3, 4), (4, 3), (3, 4)):
        check(fn, torch.randn(12), torch.Size(shape), jfn=jfn)
    assert jitcore.cache_misses(jfn) == 2, jitcore.miss_reasons(jfn)


def test_returned_sets_and_dict_views_hold_the_calls_tensors() -> None:
    """A set, a frozenset or a dict view of tensors the function returns holds the call's tensors
    (each was copied as an object without traced attributes: its items were TensorProxy objects)."""

    def fn(a, b):
        d = {"a": a + 1, "b": b}
        return {a * 2}, frozenset([b]), d.values(), d.items(), d.keys()

    jfn = jitcore.jit(fn)
    for n in (3, 3, 4):
        a, b = torch.randn(n), torch.randn(n)
        got, expected = jfn(a, b), fn(a, b)
        assert [type(v) for v in got] == [type(v) for v in expected]
        assert_same(list(got[0]) + list(got[1]), list(expected[0]) + list(expected[1]))
        assert_same(list(got[2]), list(expected[2]))
        assert_same(list(got[3]), list(expected[3]))
        assert list(got[4]) == list(expected[4])
    assert jitcore.cache_misses(jfn) == 2, jitcore.miss_reasons(jfn)


def test_a_returned_iterator_or_generator_runs_eagerly() -> None:
    """An iterator or generator the function makes and returns runs eagerly (JC-T001): it held
    TensorProxy items (a returned generator, consumed by the caller, ran the traced code: a
    RecursionError), and a cached call would hand every caller the same, consumed, iterator."""
    from jitcore.errors import UnsupportedOperationError

    programs = (
        lambda a, b: iter([a, b]),
        lambda a, b: zip([a], [b * 2]),
        lambda a, b: map(lambda t: t + 1, [a, b]),
        lambda a, b: (t * 2 for t in (a, b)),
        lambda a, b: iter([1, 2]),
    )
    for fn in programs:
        jfn = jitcore.jit(fn)
        for _ in range(2):
            a, b = torch.randn(3), torch.randn(3)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                assert_same(list(jfn(a, b)), list(fn(a, b)))
        assert isinstance(jfn.fallback_reason, UnsupportedOperationError), jfn.fallback_reason
