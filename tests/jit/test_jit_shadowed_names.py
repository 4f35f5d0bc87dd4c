"""A name the program found in a builtin or a base class, shadowed by the caller after a call: the next
call sees the new binding, as eagerly (Note [One absence per name], jitcore/jit/provenance.py).

Each name found that way is guarded absent from the namespace that would shadow it (the module's globals,
a subclass's or an instance's ``__dict__``). The guards were kept per namespace, so only the first name
was checked: shadowing the second builtin a function read (``abs`` after ``len``), or the second method
of a base class, left the cached call with the old answer (issue 14, /tmp/cpy45-probes/p3i.py, p3j.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import jitcore


def _builtins_read(x: torch.Tensor) -> torch.Tensor:
    return x * len([1, 2]) + abs(-3) + max(1, 2)


@pytest.fixture
def _module_globals() -> Iterator[dict]:
    added = globals()
    yield added
    for name in ("len", "abs", "max"):
        added.pop(name, None)


@pytest.mark.parametrize("shadowed", ["len", "abs", "max"])
def test_a_global_shadowing_any_builtin_read_is_seen(shadowed: str, _module_globals: dict) -> None:
    jf = jitcore.jit(_builtins_read)
    x = torch.ones(1)
    assert torch.equal(jf(x), _builtins_read(x))
    _module_globals[shadowed] = lambda *args: 100
    assert torch.equal(jf(x), _builtins_read(x)), shadowed
    del _module_globals[shadowed]
    assert torch.equal(jf(x), _builtins_read(x))


class _Base:
    def a(self) -> int:
        return 1

    def b(self) -> int:
        return 2


class _Sub(_Base):
    pass


def _methods_read(x: torch.Tensor, obj: _Base) -> torch.Tensor:
    return x * obj.a() + obj.b()


@pytest.mark.parametrize("where", ["subclass", "instance"])
@pytest.mark.parametrize("method", ["a", "b"])
def test_a_subclass_or_instance_attribute_shadowing_any_method_read_is_seen(method: str, where: str) -> None:
    cls = type("Sub", (_Sub,), {})
    obj, x = cls(), torch.ones(1)
    jf = jitcore.jit(_methods_read)
    assert torch.equal(jf(x, obj), _methods_read(x, obj))
    if where == "subclass":
        setattr(cls, method, lambda self: 50)
    else:
        setattr(obj, method, lambda: 70)
    assert torch.equal(jf(x, obj), _methods_read(x, obj)), (method, where)


def _shadows_while_running(x: torch.Tensor) -> torch.Tensor:
    total = x * len([1])
    globals()["len"] = lambda v: 10  # the program shadows the builtin it read (Note [Builtins read again])
    try:
        return total + len([1]) + abs(-1)
    finally:
        del globals()["len"]


def test_a_builtin_the_program_shadows_while_running_is_read_again() -> None:
    jf = jitcore.jit(_shadows_while_running)
    for _ in range(3):
        assert torch.equal(jf(torch.ones(1)), _shadows_while_running(torch.ones(1)))
