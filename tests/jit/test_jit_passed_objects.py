"""Objects of Python classes that the caller passes (Note [Objects the caller passes] in
jitcore/jit/provenance.py): guarded by their class and by what the program reads from them, so a new
object per call (a model's cache) is a cache hit; whatever depends on the object's identity (``is``,
``id``, dict keys, the same object reached twice) still gives eager's answer.

Differential: each program runs a sequence of calls eagerly and under jitcore, on twin objects.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

import pytest
import torch
from jit_helpers import assert_same

import jitcore


class Box:
    def __init__(self, scale: float, t: torch.Tensor | None = None) -> None:
        self.scale = scale
        self.t = t


DEFAULT = Box(1.0)
REGISTRY: dict = {}


def _run(fn, calls):
    jitted = jitcore.jit(fn)
    for args in calls:
        assert_same(jitted(*args), fn(*args))
    return jitted


def test_a_new_object_per_call_is_a_cache_hit():
    def f(x, box):
        return x * box.scale + box.t

    x = torch.randn(3)
    jitted = _run(f, [(x, Box(2.0, torch.randn(3))) for _ in range(4)])
    assert jitcore.cache_misses(jitted) == 1


@pytest.mark.parametrize("how", ["hasattr", "getattr with a default"])
def test_each_name_the_program_tests_is_guarded(how):
    """Note [One hasattr guard per name] (jit/provenance.py): the absence of each name tested, not only
    of the first; the program's own setattr of a name it tested does not make the entry miss."""
    box = Box(2.0)

    def has(name: str) -> bool:
        return hasattr(box, name) if how == "hasattr" else getattr(box, name, None) is not None

    def f(x):
        y = x + 1
        if has("first"):
            y = y * 2
        if has("second"):
            y = y * 3
        if not has("written"):
            box.written = True
        return y * 5 if has("written") else y

    jitted = jitcore.jit(f)
    x = torch.randn(3)
    for change in (None, lambda: setattr(box, "second", 1), lambda: setattr(box, "first", 1),
                   lambda: delattr(box, "second")):
        if change is not None:
            change()
        for _ in range(2):
            vars(box).pop("written", None)
            expected = f(x)
            del box.written
            torch.testing.assert_close(jitted(x), expected)
            assert box.written is True
    assert jitcore.cache_misses(jitted) == 4, jitcore.miss_reasons(jitted)  # four states of the two names


def test_what_is_read_from_the_object_is_guarded():
    def f(x, box):
        if hasattr(box, "extra"):
            return x + box.extra
        return x * box.scale

    x = torch.randn(3)
    with_extra = Box(2.0)
    with_extra.extra = 5.0
    calls = [(x, Box(2.0)), (x, Box(3.0)), (x, with_extra), (x, Box(2.0)), (x, with_extra)]
    jitted = _run(f, calls)
    assert jitcore.cache_misses(jitted) == 3


def test_identity_against_a_global_object():
    def f(x, box):
        if box is DEFAULT:
            return x + 100
        return x * box.scale

    x = torch.randn(2)
    _run(f, [(x, Box(2.0)), (x, DEFAULT), (x, Box(1.0)), (x, DEFAULT), (x, Box(1.0))])


def test_two_arguments_that_are_the_same_object_or_not():
    def f(x, a, b):
        return x + (1 if a is b else 2) + a.scale

    x = torch.randn(2)
    shared = Box(2.0)
    _run(f, [(x, shared, shared), (x, Box(2.0), Box(2.0)), (x, shared, shared), (x, Box(2.0), Box(2.0))])


def test_id_and_dict_keys_pin_the_object():
    def by_id(x, box):
        return x + (1 if id(box) in REGISTRY else 2)

    def by_key(x, box):
        return x + REGISTRY.get(box, 0)

    x = torch.randn(2)
    known = Box(3.0)
    REGISTRY[id(known)] = 1
    REGISTRY[known] = 5
    try:
        _run(by_id, [(x, Box(1.0)), (x, known), (x, Box(1.0)), (x, known)])
        _run(by_key, [(x, Box(1.0)), (x, known), (x, Box(1.0)), (x, known)])
    finally:
        REGISTRY.clear()


def test_a_key_method_called_through_its_class_pins_the_key():
    # ``dict.__contains__(REGISTRY, box)``, ``list.index(boxes, box)``: C methods called with their
    # receiver first; the key (not the receiver) is what they use by identity
    def contains(x, box):
        return x + (1 if dict.__contains__(REGISTRY, box) else 2)

    def index(x, box, boxes):
        return x + list.count(boxes, box)

    x = torch.randn(2)
    known = Box(3.0)
    REGISTRY[known] = 5
    try:
        _run(contains, [(x, known), (x, Box(1.0)), (x, known), (x, Box(1.0))])
        _run(index, [(x, known, [known]), (x, Box(1.0), [known]), (x, known, [known])])
    finally:
        REGISTRY.clear()


def test_side_effects_go_to_the_object_of_each_call():
    def f(x, box):
        box.t = x * box.scale
        box.count = getattr(box, "count", 0) + 1
        return x.sum()

    jitted = jitcore.jit(f)
    x = torch.randn(3)
    for _ in range(3):
        eager_box, jit_box = Box(2.0), Box(2.0)
        assert_same(jitted(x, jit_box), f(x, eager_box))
        assert_same(jit_box.t, eager_box.t)
        assert jit_box.count == eager_box.count == 1
    assert jitcore.cache_misses(jitted) == 1


def test_objects_in_a_list_of_an_argument():
    class Layer:
        def __init__(self, w):
            self.w = w

    class Stack:
        def __init__(self, n):
            self.layers = [Layer(torch.randn(3)) for _ in range(n)]

    def f(x, stack):
        for layer in stack.layers:
            x = x * stack.layers[0].w + layer.w
        return x

    x = torch.randn(3)
    jitted = _run(f, [(x, Stack(2)) for _ in range(3)])
    assert jitcore.cache_misses(jitted) == 1
    shared = Stack(2)
    shared.layers[1] = shared.layers[0]  # the same layer twice: the traced entry must not be reused
    _run(f, [(x, Stack(2)), (x, shared), (x, Stack(2))])


def test_a_dataclass_that_is_a_dict_read_by_key_and_index():
    """``transformers``' ModelOutput is a dataclass and an OrderedDict (Note [A dataclass that is a
    dict] in jitcore/jit/provenance.py): a new one per call, read as ``o[0]``, ``o["key"]``,
    ``o.to_tuple()`` or written through, is one entry. Its items were the caller's tensors, guarded by
    identity: an entry per call (an encoder-decoder's ``encoder_outputs``, a new one per generate)."""
    from transformers.modeling_outputs import BaseModelOutput

    programs = [
        lambda o: o[0] * 2 + o.last_hidden_state + o[1][0] + o["hidden_states"][1],
        lambda o: o.to_tuple(),
        lambda o: [(k, v * 2) for k, v in o.items()],
        lambda o: o.__setitem__("last_hidden_state", o[0] * 3) or (o.last_hidden_state, o[0], o),
        lambda o: setattr(o, "attentions", (o[0] + 1,)) or o.to_tuple(),
    ]
    for fn in programs:
        jitted = jitcore.jit(fn)
        for seed in range(3):
            g = torch.Generator().manual_seed(seed)
            state = [torch.randn(2, 3, generator=g) for _ in range(3)]
            eager_out = BaseModelOutput(last_hidden_state=state[0], hidden_states=(state[1], state[2]))
            jit_out = BaseModelOutput(last_hidden_state=state[0], hidden_states=(state[1], state[2]))
            assert_same(jitted(jit_out), fn(eager_out))
            assert list(jit_out.keys()) == list(eager_out.keys())
            assert_same(jit_out.to_tuple(), eager_out.to_tuple())
        assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


class _Copied:
    """The usual ``__copy__``: the instance dict's items copied into a new object."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.meta = Box(2.0)

    def __copy__(self) -> _Copied:
        out = _Copied.__new__(_Copied)
        for key, value in self.__dict__.items():
            out.__dict__[key] = value
        return out


class _Shadowed(_Copied):
    """``meta`` is a property: ``obj.meta`` and ``obj.__dict__['meta']`` are different places."""

    @property
    def meta(self) -> Box:
        return DEFAULT

    @meta.setter
    def meta(self, value: Box) -> None:
        self.__dict__["meta"] = value


def test_an_attribute_read_also_through_the_instance_dict_is_one_place():
    """``obj.meta`` and ``obj.__dict__['meta']`` (a ``__copy__`` walking ``__dict__``, ``vars(obj)``;
    torch_geometric's ``Data.clone()``) reach one object where the class has no data descriptor
    ``meta`` (Path.as_attributes): a new object per call is one entry. It was guarded by identity,
    as an object reached two ways: an entry per call."""
    import copy

    def through_copy(obj):
        return copy.copy(obj).t * obj.meta.scale + obj.t

    def through_vars(obj):
        return sum(v.scale for v in vars(obj).values() if isinstance(v, Box)) * obj.t + obj.meta.scale

    def both_ways(obj):
        return obj.t * (2.0 if vars(obj)["meta"] is obj.meta else 3.0)

    for fn in (through_copy, through_vars, both_ways):
        jitted = _run(fn, [(_Copied(torch.randn(3)),) for _ in range(3)])
        assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
    _run(both_ways, [(_Shadowed(torch.randn(3)),) for _ in range(3)])  # 3.0: not the same place


class _Child:
    def __init__(self, parent: Any) -> None:
        self.parent = weakref.ref(parent)


class _Parent:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.child = _Child(self)


def test_a_weak_reference_to_the_object_that_holds_it():
    """A child's weak reference to its parent, reached by walking the child's ``__dict__`` (a
    ``__copy__``), is guarded by the object it refers to, not by its own identity: a new parent per
    call is one entry, and calling the reference gives this call's parent. Another referent is
    another entry."""

    def fn(obj):
        parent = next(v for k, v in vars(obj.child).items() if k == "parent")()
        return parent.t * 2 + (1.0 if parent is obj else 0.0)

    jitted = _run(fn, [(_Parent(torch.randn(3)),) for _ in range(3)])
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
    elsewhere, other = _Parent(torch.randn(3)), _Parent(torch.randn(3))
    elsewhere.child = other.child  # refers to another object now
    assert_same(jitted(elsewhere), fn(elsewhere))
    assert jitcore.cache_misses(jitted) == 2


class _Holder:
    """A plain class: copying its instances caches ``__slotnames__`` in it (copyreg), which eager never does
    for these programs."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t


def test_jitcores_own_copies_leave_the_class_as_eager_does():
    """Rebuilding a returned (or stored) object for each call copies it: the class was left with a
    ``__slotnames__`` that the pass then took for the program's write, replayed on every cached call
    (HF Llama and GPT-2 set it on DynamicCache and DynamicLayer; Note [jitcore's own copy leaves no
    __slotnames__], jit/outputs.py)."""
    store: list = []

    def f(x):
        store.append(_Holder(x + 1))
        return _Holder(x * 2)

    jf = jitcore.jit(f)
    for _ in range(3):
        x = torch.randn(3)
        out = jf(x)
        assert type(out) is _Holder and torch.equal(out.t, x * 2) and torch.equal(store[-1].t, x + 1)
        assert "__slotnames__" not in vars(_Holder)
    assert jitcore.cache_misses(jf) == 1


class _CountsClassWrites(type):
    """A metaclass counting writes to its classes' ``__dict__``s (copyreg caches ``__slotnames__`` there)."""

    writes: list = []

    def __setattr__(cls, name: str, value: Any) -> None:
        _CountsClassWrites.writes.append(("set", name))
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        _CountsClassWrites.writes.append(("del", name))
        super().__delattr__(name)


class _Counted(metaclass=_CountsClassWrites):
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.tag = "made"


def test_a_cached_call_makes_its_objects_without_writing_their_class():
    """A cached call made each returned object again by copying a template: copyreg set ``__slotnames__``
    on the class and jitcore deleted it again, two class writes per object per call that eager never makes
    (Note [A template copied again from one reduction], jit/outputs.py)."""

    def f(x):
        return _Counted(x + 1)

    jf = jitcore.jit(f)
    jf(torch.randn(3))
    _CountsClassWrites.writes.clear()
    outs = []
    for _ in range(3):
        x = torch.randn(3)
        out = jf(x)
        assert type(out) is _Counted and out.tag == "made" and torch.equal(out.t, x + 1)
        outs.append(out)
    assert _CountsClassWrites.writes == [] and jitcore.cache_misses(jf) == 1
    assert len({id(o) for o in outs}) == 3 and "__slotnames__" not in vars(_Counted)


class _Tagged:
    """Its reduction makes a new list each time: copies must not share one."""

    def __init__(self, t: torch.Tensor, tags: list | None = None) -> None:
        self.t = t
        self.tags = [] if tags is None else tags

    def __reduce__(self) -> tuple:
        return (_Tagged, (self.t, list(self.tags)))


class _Slotted:
    __slots__ = ("n", "__dict__")

    def __init__(self, t: torch.Tensor) -> None:
        self.t, self.n = t, 2
        self.extra = {"k": 1}


class _Stated:
    def __init__(self, t: torch.Tensor) -> None:
        self.t, self.seen = t, []

    def __getstate__(self) -> dict:
        return dict(self.__dict__, seen=list(self.seen))

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


def test_copies_of_a_returned_object_are_as_copy_makes_them_for_each_call():
    """Objects whose reduction makes containers of its own, slots, and ``__getstate__``/``__setstate__``:
    every call's object is its own, with what the program put in it, mutating one leaves the next as
    eager makes it."""

    def tagged(x):
        o = _Tagged(x * 2)
        o.tags.append("a")
        return o

    def slotted(x):
        return _Slotted(x - 1)

    def stated(x):
        o = _Stated(x + 3)
        o.seen.append(1)
        return o

    for fn, mutable in ((tagged, "tags"), (slotted, "extra"), (stated, "seen")):
        jf = jitcore.jit(fn)
        for _ in range(3):
            x = torch.randn(2)
            out, want = jf(x), fn(x)
            assert type(out) is type(want) and torch.equal(out.t, want.t)
            assert getattr(out, mutable) == getattr(want, mutable)
            assert getattr(out, "n", None) == getattr(want, "n", None)
            getattr(out, mutable).clear()  # the caller changes what it got: the next call's is its own
        assert jitcore.cache_misses(jf) == 1, fn.__name__


class _Referenced:
    def __init__(self) -> None:
        self.n = 0


def _through_a_weak_reference(s: types.SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    o = s.ref()
    o.n += 1
    return x * o.n


def test_the_referent_of_a_weak_reference_of_state_is_state() -> None:
    """Note [The referent of a weak reference of state] (jitcore/jit/state_reads.py). Before: the referent
    had no path: its counter a constant of the trace and its write no effect (eager 1, 2, 3, jit 1, 1, 1)."""
    held = [_Referenced(), _Referenced()]
    mine = types.SimpleNamespace(ref=weakref.ref(held[0]))
    twin = types.SimpleNamespace(ref=weakref.ref(held[1]))
    jf = jitcore.jit(_through_a_weak_reference)
    for i in range(6):
        if i == 3:
            held[0].n = held[1].n = 10
        x = torch.randn(2)
        assert_same(jf(mine, x), _through_a_weak_reference(twin, x))
        assert held[0].n == held[1].n
    assert jitcore.cache_misses(jf) <= 2
