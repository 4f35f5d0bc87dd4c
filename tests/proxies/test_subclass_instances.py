"""While tracing, a tensor-subclass value is an instance of the user's own class, to native code
too (issue 13): ``isinstance``, ``super()``, ``__slots__`` descriptors, class attributes read through
``type(self)``, ``object.__init__`` and torch's own helpers behave as eagerly when they run natively
(a C function, a lookaside, code jitcore does not interpret). Differential against eager: values,
exact output types, exceptions."""

from __future__ import annotations

import copy
import functools
import operator
from typing import Any

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass, return_and_correct_aliasing
from torch.utils._pytree import tree_map_only

import jitcore

aten = torch.ops.aten


def _wrapper(cls: type, like: torch.Tensor) -> Any:
    return torch.Tensor._make_wrapper_subclass(
        cls, like.shape, strides=like.stride(), storage_offset=like.storage_offset(), dtype=like.dtype,
        device=like.device, requires_grad=False,
    )


class _Base(torch.Tensor):
    """A wrapper subclass over one inner tensor ``elem``, its ops unwrapped and rewrapped."""

    REGISTRY: dict[str, type] = {}
    _SCALE = 1.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _Base.REGISTRY[cls.__name__] = cls

    @property
    def doubled(self) -> torch.Tensor:
        return self.elem * 2

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["elem"], None

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, outer_size: Any, outer_stride: Any) -> Any:
        return cls(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        unwrap = functools.partial(tree_map_only, cls, lambda t: t.elem)
        out = func(*unwrap(args), **unwrap(kwargs))
        if func is aten.detach.default or func in (aten.t.default, aten.view.default):
            return return_and_correct_aliasing(func, args, kwargs, cls(out))
        return tree_map_only(torch.Tensor, cls, out)

    __torch_function__ = torch._C._disabled_torch_function_impl


class SlotTensor(_Base):
    """``__slots__`` and an ``__init__`` that calls ``super().__init__()``."""

    __slots__ = ("elem",)

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return _wrapper(cls, elem)

    def __init__(self, elem: torch.Tensor) -> None:
        super().__init__()
        self.elem = elem


class DictTensor(_Base):
    """Its inner tensor in the instance dict; ``object.__init__`` called directly."""

    _SCALE = 3.0

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return _wrapper(cls, elem)

    def __init__(self, elem: torch.Tensor) -> None:
        object.__init__(self)
        self.elem = elem

    @classmethod
    def scale(cls) -> float:
        return cls._SCALE

    @staticmethod
    def offset() -> float:
        return 0.5

    def scaled(self) -> torch.Tensor:
        return self.elem * type(self).scale() + type(self).offset() + type(self)._SCALE


class ClassFlattened(_Base):
    """Its ``__tensor_flatten__`` (which jitcore calls natively) reads a class attribute through
    ``type(self)``."""

    _INNER = ("elem",)

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return _wrapper(cls, elem)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return list(type(self)._INNER), type(self).__name__


class SuperFlattened(SlotTensor):
    """Its ``__tensor_flatten__`` calls its base's through ``super()``."""

    __slots__ = ()

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        names, _ = super().__tensor_flatten__()
        return names, "super"


def _x() -> torch.Tensor:
    return torch.randn(3, 4)


def _eager_and_jit(fn: Any, *args: Any) -> tuple[Any, Any]:
    return fn(*args), jitcore.jit(fn)(*args)


def _assert_same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        if is_traceable_wrapper_subclass(expected):
            names, _ = expected.__tensor_flatten__()
            for n in names:
                _assert_same(getattr(actual, n), getattr(expected, n))
        else:
            torch.testing.assert_close(actual, expected)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_same(a, e)
    else:
        assert actual == expected


# --- the class the program sees --------------------------------------------------------------------
@pytest.mark.parametrize("cls", [SlotTensor, DictTensor])
def test_type_and_class_of_a_value_made_inside(cls: type) -> None:
    def f(x: torch.Tensor) -> Any:
        t = cls(x)
        return (type(t) is cls, t.__class__ is cls, isinstance(t, _Base), isinstance(t, torch.Tensor),
                t.elem + 1)

    _assert_same(*reversed(_eager_and_jit(f, _x())))


@pytest.mark.parametrize("cls", [SlotTensor, DictTensor])
def test_native_isinstance_of_a_subclass_input(cls: type) -> None:
    # builtins called natively on the traced value (filter and operator.methodcaller are C code)
    def f(t: torch.Tensor) -> Any:
        kept = list(filter(functools.partial(_isinstance_flipped, cls), [t, t.elem]))
        return len(kept), kept[0].elem * 2

    _assert_same(*reversed(_eager_and_jit(f, cls(_x()))))


def _isinstance_flipped(cls: type, value: Any) -> bool:
    return isinstance(value, cls)


def test_is_traceable_wrapper_subclass() -> None:
    def f(t: torch.Tensor) -> Any:
        return is_traceable_wrapper_subclass(t), is_traceable_wrapper_subclass(t.elem), t.elem * 1

    _assert_same(*reversed(_eager_and_jit(f, SlotTensor(_x()))))


@pytest.mark.parametrize("cls", [ClassFlattened, SuperFlattened])
def test_tensor_flatten_that_reads_the_class_or_calls_super(cls: type) -> None:
    def f(t: torch.Tensor, x: torch.Tensor) -> Any:
        made = cls(x)
        return (t + made) * 2, made.t()

    args = (cls(_x()), _x())
    _assert_same(*reversed(_eager_and_jit(f, *args)))


def test_flatten_is_the_torch_operation() -> None:
    # not the subclass protocol's flatten
    def f(t: torch.Tensor) -> Any:
        return t.flatten(), TwoTensor(t.a, t.b * 2).flatten(0)

    _assert_same(*reversed(_eager_and_jit(f, TwoTensor(_x(), _x()))))


def test_dir_lists_the_class_attributes() -> None:
    def f(t: torch.Tensor) -> Any:
        names = dir(t)
        return "doubled" in names, "scaled" in names, "elem" in names, t.elem + 1

    _assert_same(*reversed(_eager_and_jit(f, DictTensor(_x()))))


# --- slots ------------------------------------------------------------------------------------------
def test_slot_descriptor_applied_natively() -> None:
    def f(t: torch.Tensor) -> Any:
        get = operator.attrgetter("elem")
        return SlotTensor.elem.__get__(t) * 2 + get(t)

    _assert_same(*reversed(_eager_and_jit(f, SlotTensor(_x()))))


def test_slots_instance_has_no_dict_entry_for_its_slot() -> None:
    def f(x: torch.Tensor) -> Any:
        t = SlotTensor(x)
        return "elem" in t.__dict__, sorted(t.__dict__), t.elem * 1

    _assert_same(*reversed(_eager_and_jit(f, _x())))


def test_vars_of_a_slotted_input() -> None:
    def f(t: torch.Tensor) -> Any:
        return dict(vars(t)), t.elem + 1

    _assert_same(*reversed(_eager_and_jit(f, SlotTensor(_x()))))


def test_slot_descriptor_of_another_class_names_the_users_class() -> None:
    def f(t: torch.Tensor) -> Any:
        try:
            SlotTensor.elem.__get__(t)
        except TypeError as e:
            return str(e), t.elem + 1
        return "", t.elem

    _assert_same(*reversed(_eager_and_jit(f, DictTensor(_x()))))


def test_unset_slot_raises_eagers_error() -> None:
    def f(x: torch.Tensor) -> Any:
        t = _wrapper(SlotTensor, x)
        try:
            t.elem  # noqa: B018 - the attribute read is what raises
        except AttributeError as e:
            return str(e), x + 1
        return "", x

    _assert_same(*reversed(_eager_and_jit(f, _x())))


# --- class attributes, classmethods, staticmethods, base properties -----------------------------------
def test_class_attributes_through_type_of_self() -> None:
    def f(x: torch.Tensor) -> Any:
        return DictTensor(x).scaled()

    _assert_same(*reversed(_eager_and_jit(f, _x())))


def test_class_attributes_through_type_of_self_called_natively() -> None:
    def f(t: torch.Tensor) -> Any:
        return list(map(DictTensor.scaled, [t]))[0], operator.methodcaller("scaled")(t)

    _assert_same(*reversed(_eager_and_jit(f, DictTensor(_x()))))


def test_property_of_a_base_class() -> None:
    def f(t: torch.Tensor) -> Any:
        return t.doubled + operator.attrgetter("doubled")(t)

    _assert_same(*reversed(_eager_and_jit(f, SlotTensor(_x()))))


def test_super_called_natively() -> None:
    def f(t: torch.Tensor) -> Any:
        return functools.reduce(lambda acc, v: acc + super(SlotTensor, v).doubled, [t], 0)

    _assert_same(*reversed(_eager_and_jit(f, SlotTensor(_x()))))


# --- stdlib helpers that dispatch on the class ---------------------------------------------------------
@functools.singledispatch
def _describe(value: Any) -> str:
    return "other"


@_describe.register
def _(value: SlotTensor) -> str:
    return "slot"


@_describe.register
def _(value: DictTensor) -> str:
    return "dict"


@pytest.mark.parametrize("cls", [SlotTensor, DictTensor])
def test_singledispatch_on_the_class(cls: type) -> None:
    def f(t: torch.Tensor) -> Any:
        return _describe(t), _describe(t.elem), t.elem + 1

    _assert_same(*reversed(_eager_and_jit(f, cls(_x()))))


@pytest.mark.parametrize("cls", [SlotTensor, DictTensor])
def test_copy_copy_of_a_subclass_value(cls: type) -> None:
    def f(x: torch.Tensor) -> Any:
        t = cls(x)
        c = copy.copy(t)
        return type(c) is cls, c.elem + 1

    _assert_same(*reversed(_eager_and_jit(f, _x())))


def test_init_subclass_registry_is_untouched() -> None:
    before = dict(_Base.REGISTRY)

    def f(x: torch.Tensor) -> Any:
        return (SlotTensor(x) + DictTensor(x).elem).elem

    _assert_same(*reversed(_eager_and_jit(f, _x())))
    assert _Base.REGISTRY == before


# --- torch's own subclasses and helpers -----------------------------------------------------------------
def test_two_tensor_in_native_helpers() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> Any:
        t = TwoTensor(a, b)
        kept = list(filter(functools.partial(_isinstance_flipped, TwoTensor), [t]))
        return is_traceable_wrapper_subclass(t), kept, (t.t() * 2).a

    _assert_same(*reversed(_eager_and_jit(f, _x(), _x())))


class TaggedSlots(SlotTensor):
    """A non-tensor ``__slots__`` field beside the inner tensor (kept by eager's copies)."""

    __slots__ = ("tag",)

    @staticmethod
    def __new__(cls, elem: torch.Tensor, tag: str = "made") -> Any:
        return _wrapper(cls, elem)

    def __init__(self, elem: torch.Tensor, tag: str = "made") -> None:
        super().__init__(elem)
        self.tag = tag


def test_copies_of_a_slotted_value_keep_its_fields() -> None:
    def f(t: torch.Tensor) -> Any:
        t.tag = "changed"
        deep, shallow = copy.deepcopy(t), copy.copy(t)
        return deep.tag, shallow.tag, type(deep) is TaggedSlots, deep.elem + 1

    eager_t, jit_t = TaggedSlots(_x(), "first"), TaggedSlots(_x(), "first")
    jit_t.elem = eager_t.elem.clone()
    _assert_same(jitcore.jit(f)(jit_t), f(eager_t))
    assert jit_t.tag == eager_t.tag == "changed"  # the field the program set is the caller's after the call


def test_tensor_name_is_torchs_not_the_proxys() -> None:
    """``x.name`` is torch's ``Tensor.name`` (None), not jitcore's name for the value in the trace; a
    subclass defining ``name`` itself gets its own."""

    class Named(TwoTensor):
        @property
        def name(self) -> str:
            return "mine"

    def f(x, attr="name"):
        return x.name, getattr(x, attr), (x * 2).name, hasattr(x, attr)

    inputs = [torch.randn(2), torch.nn.Parameter(torch.randn(2)), TwoTensor(torch.randn(2), torch.randn(2)),
              Named(torch.randn(2), torch.randn(2))]
    for x in inputs:
        assert jitcore.jit(f)(x) == f(x)


def test_a_subclass_whose_metaclass_needs_arguments() -> None:
    """A metaclass whose ``__new__``/``__init__`` take a keyword (``class C(T, metaclass=M, tag=...)``):
    jitcore's class for C's values is made without running them (nor adding to M's registry)."""

    class Meta(type(TwoTensor)):
        registry: list[str] = []

        def __new__(mcs, name, bases, ns, *, tag):
            cls = super().__new__(mcs, name, bases, ns)
            cls.tag = tag
            Meta.registry.append(name)
            return cls

        def __init__(cls, name, bases, ns, *, tag):
            super().__init__(name, bases, ns)

    class Tagged(TwoTensor, metaclass=Meta, tag="t1"):
        pass

    def f(x):
        y = x * 2 + 1
        return y, type(x).tag, type(type(x)) is Meta, isinstance(x, Tagged), type(x) is Tagged

    x = Tagged(torch.randn(3), torch.randn(3))
    expected = f(x)
    for _ in range(2):
        actual = jitcore.jit(f)(x)
        assert actual[1:] == expected[1:]
        assert type(actual[0]) is type(expected[0])
        torch.testing.assert_close(actual[0].a, expected[0].a)
        torch.testing.assert_close(actual[0].b, expected[0].b)
    assert Meta.registry == ["Tagged"]
