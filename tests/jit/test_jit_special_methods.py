"""A special method the caller replaces on a class between calls is the one a cached call uses.

``a * b``, ``len(o)``, ``bool(o)``, ``for x in o``, ``o(x)``, ``with o:``, ``float(o)``, ``divmod(o, 2)``
and a missing attribute's ``__getattr__`` find their method on the class without reading it as an
attribute; before, the entry did not pin it, and a cached call kept the traced method (or the traced
absence of one) after the caller replaced it (Note [A special method is looked up on the class],
jitcore/jit/provenance.py). Each program is run once, its class changed, and run again, eagerly and
jitted; every answer is compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore
from jitcore.jit.type_lookups import TypeLookups


def _program(kind: str) -> tuple[Callable[[torch.Tensor], torch.Tensor], type, str, Any]:
    """(program, class, name, new class attribute) for one special method."""

    class Box:
        v = 1.0

        def __mul__(self, o: Any) -> Any:
            return o * self.v

        def __len__(self) -> int:
            return 1

        def __iter__(self) -> Any:
            return iter([1.0, 2.0])

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        def __enter__(self) -> float:
            return 1.0

        def __exit__(self, *exc: Any) -> bool:
            return False

        def __float__(self) -> float:
            return 1.5

        def __getattr__(self, name: str) -> float:
            return 1.0

    box = Box()

    def entered(x: torch.Tensor) -> torch.Tensor:
        with box as v:
            return x * v

    programs: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str, Any]] = {
        "mul": (lambda x: box * x, "__mul__", lambda self, o: o * 3.0),
        "rmul": (lambda x: x * (2 * box), "__rmul__", lambda self, o: 5.0),  # added: was absent
        "len": (lambda x: x * len(box), "__len__", lambda self: 4),
        "bool": (lambda x: x * (2 if box else 3), "__bool__", lambda self: False),  # added: __len__ before
        "iter": (lambda x: x * sum(box), "__iter__", lambda self: iter([5.0])),
        "call": (lambda x: box(x), "__call__", lambda self, x: x * 7),
        "with": (entered, "__enter__", lambda self: 3.0),
        "float": (lambda x: x * float(box), "__float__", lambda self: 2.5),
        "divmod": (lambda x: x * sum(divmod(box, 2)), "__divmod__", lambda self, o: (4, 1)),  # added
        "getattr": (lambda x: x * box.missing, "__getattr__", lambda self, name: 8.0),
        "neg": (lambda x: x * -box, "__neg__", lambda self: 9.0),  # added: raised TypeError before
    }
    program, name, new = programs[kind]
    return program, Box, name, new


def _outcome(fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    try:
        return fn(torch.ones(2)).tolist()
    except TypeError as e:
        return ("TypeError", str(e))


@pytest.mark.parametrize("kind", ["mul", "rmul", "len", "bool", "iter", "call", "with", "float", "divmod",
                                  "getattr", "neg"])
def test_a_special_method_replaced_between_calls(kind: str) -> None:
    program, klass, name, new = _program(kind)
    jitted = jitcore.jit(program)
    assert _outcome(jitted) == _outcome(program)
    setattr(klass, name, new)
    assert _outcome(jitted) == _outcome(program)
    assert _outcome(jitted) == _outcome(program)  # and the entry traced for the new method is kept
    assert jitcore.cache_misses(jitted) == 2


def test_a_special_method_of_a_base_class_shadowed_later() -> None:
    """The method found on a base class is pinned, and so is its absence from the class before it."""

    class Base:
        def __len__(self) -> int:
            return 2

    class Derived(Base):
        pass

    obj = Derived()

    def program(x: torch.Tensor) -> torch.Tensor:
        return x * len(obj)

    jitted = jitcore.jit(program)
    assert jitted(torch.ones(2)).tolist() == [2.0, 2.0]
    Derived.__len__ = lambda self: 6
    assert jitted(torch.ones(2)).tolist() == program(torch.ones(2)).tolist() == [6.0, 6.0]


def test_an_init_replaced_between_calls() -> None:
    """``Cls(...)`` runs the ``__init__`` the class has now."""

    class Scaled:
        def __init__(self, v: float) -> None:
            self.v = v

    def program(x: torch.Tensor) -> torch.Tensor:
        return x * Scaled(2.0).v

    jitted = jitcore.jit(program)
    assert jitted(torch.ones(2)).tolist() == [2.0, 2.0]

    def init(self: Scaled, v: float) -> None:
        self.v = v * 5

    Scaled.__init__ = init
    assert jitted(torch.ones(2)).tolist() == program(torch.ones(2)).tolist() == [10.0, 10.0]


def test_unchanged_classes_hit_the_cache() -> None:
    """Pinning the lookups costs no entries: a program over instances made per call hits its entry."""

    class Vec:
        def __init__(self, v: float) -> None:
            self.v = v

        def __add__(self, o: Vec) -> Vec:
            return Vec(self.v + o.v)

        def __bool__(self) -> bool:
            return self.v != 0

    def program(x: torch.Tensor) -> torch.Tensor:
        s = Vec(1.0) + Vec(2.0)
        return x * s.v if s else x

    jitted = jitcore.jit(program)
    for _ in range(4):
        assert torch.equal(jitted(torch.ones(2)), program(torch.ones(2)))
    assert jitcore.cache_misses(jitted) == 1


@pytest.mark.parametrize("kind", [list, tuple])
def test_a_search_of_a_list_runs_python_eq_interpreted(kind: type) -> None:
    """``5 in objs`` ran each element's Python ``__eq__`` in C, unseen: a cached call kept the traced
    answer after the caller changed what that ``__eq__`` reads (Note [A list searched by Python __eq__],
    jitcore/interpreter/protocols.py)."""

    class Tagged:
        def __init__(self, v: int) -> None:
            self.v = v

        def __eq__(self, other: object) -> bool:
            return self.v == other

        __hash__ = object.__hash__

    objs = kind([Tagged(1), Tagged(2)])

    def program(x: torch.Tensor) -> torch.Tensor:
        return x * (2 if 5 in objs else 3)

    jitted = jitcore.jit(program)
    assert jitted(torch.ones(2)).tolist() == [3.0, 3.0]
    objs[0].v = 5
    assert jitted(torch.ones(2)).tolist() == program(torch.ones(2)).tolist() == [2.0, 2.0]


def test_a_search_that_changes_the_list() -> None:
    """An ``__eq__`` that shortens the list it is searched in ends the search, as C's does."""
    log: list[int] = []

    class Shrinks:
        def __init__(self, v: int, seq: list) -> None:
            self.v, self.seq = v, seq

        def __eq__(self, other: object) -> bool:
            log.append(self.v)
            self.seq.pop()
            return False

        __hash__ = object.__hash__

    def program(x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        seq: list = []
        seq.extend(Shrinks(i, seq) for i in range(4))
        found = 7 in seq
        return x * (2 if found else 3), len(seq)

    expected = program(torch.ones(2))
    eager_log = list(log)
    log.clear()
    actual = jitcore.jit(program)(torch.ones(2))
    assert actual[0].tolist() == expected[0].tolist() and actual[1] == expected[1]
    assert log == eager_log == [0, 1]


class _Lookups(TypeLookups):
    """``TypeLookups`` over objects none of which has a path (all of them made by the program)."""

    def __init__(self) -> None:
        self._type_lookups: dict = {}
        self.bound: list = []

    def path_of(self, obj: Any) -> None:
        return None

    def bind_state(self, value: Any, path: Any, name: str) -> None:
        self.bound.append(name)

    def guard(self, *args: Any, **kwargs: Any) -> None:
        self.bound.append(args)


def test_a_class_the_program_made_is_not_held_by_its_lookups() -> None:
    """A special method looked up on a class the program made, for an object without a path, pins nothing
    and remembers nothing of the class: its key in the pass's table held it to the pass's end, so a class
    the program made and dropped outlived ``gc.collect()`` (3.13's test_inspect
    TestGetattrStatic.test_cache_does_not_cause_classes_to_persist jitted; Note [A special method is looked
    up on the class])."""
    import gc
    import weakref

    lookups = _Lookups()

    class Made:
        def __len__(self) -> int:
            return 0

    obj = Made()
    lookups.bind_type_lookup(obj, Made, "__len__")
    watch = weakref.ref(Made)
    del Made, obj
    gc.collect()
    assert watch() is None
    assert lookups.bound == []
