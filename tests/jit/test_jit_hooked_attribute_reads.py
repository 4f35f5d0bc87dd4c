"""A value a Python ``__getattribute__`` read from the instance dict (Note [A value a Python
__getattribute__ read from the instance dict], jitcore/jit/type_lookups.py): a transformers-style config
whose hooks end in ``super().__getattribute__(name)`` is guarded at ``config.__dict__[name]`` with its
class pinned, and a cached call no longer runs the hooks natively. Each change of what the hooks read
between calls (the value, a class default or descriptor of that name, the hooks themselves, what they
read, the object's class) still gives eager's answer."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
from jit_helpers import assert_same
from torch import nn

import jitcore

HOOK_CALLS: list[str] = []
_COUNTED = ("scale", "offset", "extra")
SCALE = 1.0


class _Mixin:
    def __getattribute__(self, key: str) -> Any:
        spec = super().__getattribute__("__dict__").get("_spec")
        if spec is not None and key in spec:
            return spec[key]
        return super().__getattribute__(key)


class _Base:
    offset = 0.5  # only a class has it: bound at _Base.__dict__['offset']


class _Config(_Base, _Mixin):
    attribute_map: dict[str, str] = {}  # noqa: RUF012 - as transformers' configs
    dropout = 0.0  # a class default each instance shadows

    def __init__(self) -> None:
        self.scale = 2.0
        self.use_bias = True
        self.dropout = 0.0

    def __getattribute__(self, key: str) -> Any:
        if sys.gettrace() is None and key in _COUNTED:  # natively only: the fast path's own calls
            HOOK_CALLS.append(key)
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class _Model(nn.Module):
    """Holds its config, as a transformers model does."""

    def __init__(self) -> None:
        super().__init__()
        self.config = _Config()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        config = self.config
        y = x * config.scale + config.dropout + config.offset
        if hasattr(config, "extra"):  # absent: the hooks' generic read raises AttributeError
            y = y - config.extra
        return y + 1 if config.use_bias else y


def _other_getattribute(self: Any, key: str) -> Any:
    value = object.__getattribute__(self, key)
    return value * SCALE * 3 if key == "scale" else value


class _Tripling:
    def __getattribute__(self, key: str) -> Any:  # its code replaces the mixin's (the same free variable)
        value = super().__getattribute__(key)
        return value * 3 if key == "scale" else value


class _Property(_Config):
    scale = property(lambda self: 5.0)


_CHANGES = {
    "value": lambda c: setattr(c, "scale", 3.0),
    "value of a shadowed class default": lambda c: setattr(c, "dropout", 0.5),
    "class default shadowed": lambda c: setattr(_Config, "scale", 7.0),  # the instance's still wins
    "property on the class": lambda c: setattr(_Config, "scale", property(lambda self: 4.0)),
    "property on a base": lambda c: setattr(_Base, "scale", property(lambda self: 6.0)),
    "class default made a property": lambda c: setattr(_Config, "dropout", property(lambda self: 0.25)),
    "hook replaced": lambda c: setattr(_Config, "__getattribute__", _other_getattribute),
    "hook added to the base": lambda c: setattr(_Base, "__getattribute__", _other_getattribute),
    "mixin's hook code replaced": lambda c: setattr(_Mixin.__getattribute__, "__code__",
                                                    _Tripling.__getattribute__.__code__),
    "attribute map": lambda c: _Config.attribute_map.update(scale="dropout"),
    "what the mixin reads": lambda c: setattr(c, "_spec", {"scale": 9.0}),
    "class of the object": lambda c: setattr(c, "__class__", _Property),
    "class value rebound": lambda c: setattr(_Base, "offset", 1.5),
    "class value given by an earlier class": lambda c: setattr(_Config, "offset", 2.5),
    "class value shadowed by the instance": lambda c: setattr(c, "offset", 3.5),
    "class value made a property": lambda c: setattr(_Base, "offset", property(lambda self: 4.5)),
    "class value mapped by the attribute map": lambda c: _Config.attribute_map.update(offset="scale"),
    "absent name set on the instance": lambda c: setattr(c, "extra", 4.0),
    "absent name given by a class": lambda c: setattr(_Base, "extra", 5.0),
    "absent name given by a property": lambda c: setattr(_Mixin, "extra", property(lambda self: 6.0)),
    "__getattr__ added to a class": lambda c: setattr(_Base, "__getattr__", lambda self, key: 7.0),
    "absent name mapped to a present one": lambda c: _Config.attribute_map.update(extra="scale"),
    "global the replaced hook reads": lambda c: (setattr(_Config, "__getattribute__", _other_getattribute),
                                                 globals().__setitem__("SCALE", 1.0)),
}


@pytest.fixture
def restore_classes():
    saved = {k: dict(vars(k)) for k in (_Base, _Mixin, _Config)}
    code = _Mixin.__getattribute__.__code__
    yield
    _Mixin.__getattribute__.__code__ = code
    _Config.attribute_map.clear()
    for klass, entries in saved.items():
        for name in [n for n in vars(klass) if n not in entries]:
            delattr(klass, name)
        for name in ("scale", "dropout", "offset", "__getattribute__"):
            if name in entries and vars(klass)[name] is not entries[name]:
                setattr(klass, name, entries[name])


@pytest.mark.parametrize("change", list(_CHANGES))
def test_a_change_to_what_a_hooked_read_reads_gives_eagers_answer(change, restore_classes):
    model, x = _Model(), torch.randn(3)
    jf = jitcore.jit(model, executor="torch")
    for _ in range(2):
        assert_same(jf(x), model(x))
    HOOK_CALLS.clear()
    model(x)
    eager_calls = list(HOOK_CALLS)
    HOOK_CALLS.clear()
    jf(x)
    assert HOOK_CALLS == eager_calls, HOOK_CALLS  # the program's own reads: the fast path runs no hook
    _CHANGES[change](model.config)
    for _ in range(2):
        assert_same(jf(x), model(x))
    assert jitcore.cache_misses(jf) >= 1 or change == "class default shadowed", change
