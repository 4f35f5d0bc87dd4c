"""``copy.deepcopy``/``copy.copy`` inside a jitted function of an object whose reduction runs Python
(Note [A reduction that runs Python], jitcore/interpreter/reductions.py): traced, not run eagerly, and
the copied state is checked on cached calls. Differential against eager."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch
from jit_helpers import assert_same, check_calls_around_a_change

import jitcore


class Config:
    """transformers' configuration classes map names with a Python ``__getattribute__``."""

    attribute_map = {"width": "hidden"}

    def __init__(self, hidden: int, scale: float) -> None:
        self.hidden = hidden
        self.scale = scale

    def __getattribute__(self, name: str) -> object:
        if name != "attribute_map" and name in super().__getattribute__("attribute_map"):
            name = super().__getattribute__("attribute_map")[name]
        return super().__getattribute__(name)


class Slotted:
    __slots__ = ("scale", "__weakref__")

    def __init__(self, scale: float) -> None:
        self.scale = scale

    @property
    def doubled(self) -> float:
        return self.scale * 2


@pytest.mark.parametrize("copier", [copy.deepcopy, copy.copy], ids=["deepcopy", "copy"])
def test_a_copy_of_a_config_with_python_getattribute_is_traced(copier) -> None:
    """BART's forward deep-copies its config (``get_text_config``) to make its cache: the C reduction
    ran the config's Python ``__getattribute__`` natively and the whole forward ran eagerly. Now traced;
    a later change of the config is seen by the cached calls (its reads are guarded), as eager sees it."""
    config = Config(4, 0.5)

    def f(x: torch.Tensor) -> torch.Tensor:
        c = copier(config)
        return x[:, : c.width] * c.scale

    jf = jitcore.jit(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(4):
            if step == 2:
                config.scale = 2.0
            if step == 3:
                config.hidden = 2
            x = torch.randn(3, 6)
            assert_same(jf(x), f(x))
    assert not [w for w in caught if "jitcore" in str(w.message)]
    assert jitcore.cache_misses(jf) <= 3 and jitcore.cache_hits(jf) >= 1


def test_a_copy_of_a_slotted_object_is_traced() -> None:
    holder = Slotted(1.5)

    def f(x: torch.Tensor) -> torch.Tensor:
        c = copy.deepcopy(holder)
        return x * c.doubled

    jf = jitcore.jit(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            holder.scale = 1.5 if step < 2 else 3.0
            x = torch.randn(3)
            assert_same(jf(x), f(x))
    assert not [w for w in caught if "jitcore" in str(w.message)]


class Point:
    def __init__(self, s: float) -> None:
        self.s = s


class Holder:
    def __init__(self) -> None:
        self.inner = Point(1.0)
        self.points = [Point(2.0)]


@pytest.mark.parametrize("read", [
    lambda h: copy.deepcopy(h.inner).s,
    lambda h: copy.copy(h.inner).s,
    lambda h: copy.deepcopy(h).inner.s,
    lambda h: copy.deepcopy(h).points[0].s,
    lambda h: copy.copy(h).inner.s,
], ids=["deepcopy", "copy", "deepcopy_nested", "deepcopy_in_list", "copy_shares"])
def test_a_copy_of_a_callers_object_reads_its_values_on_every_call(read) -> None:
    """``copy.deepcopy(obj)`` of an object the program reaches read its instance dict in C, unseen: a
    cached call copied the first call's values after the caller changed them (a wrong answer on every
    one of these). The dict is now read as the program's state and checked."""
    holder = Holder()

    def change() -> None:
        holder.inner.s, holder.points[0].s = 5.0, 7.0

    check_calls_around_a_change(lambda: read(holder), change)


@dataclasses.dataclass
class Settings:
    scale: float = 1.0
    steps: int = 2


@pytest.mark.parametrize("read", [
    lambda c: dataclasses.asdict(c)["scale"],
    lambda c: dataclasses.astuple(c)[0],
    lambda c: dataclasses.replace(c, steps=3).scale,
    lambda c: copy.deepcopy(c).scale,
], ids=["asdict", "astuple", "replace", "deepcopy"])
def test_the_standard_library_reading_a_callers_dataclass_is_checked(read) -> None:
    """``dataclasses.asdict(cfg)``, ``astuple``, ``replace`` read the caller's config in dataclasses.py,
    whose reads were taken as the standard library's own (not state): a cached call returned the first
    call's fields after the caller changed one (Note [A caller's object in the standard library's
    code], jitcore/jit/code_kinds.py)."""
    settings = Settings()
    check_calls_around_a_change(lambda: read(settings), lambda: setattr(settings, "scale", 4.0))
