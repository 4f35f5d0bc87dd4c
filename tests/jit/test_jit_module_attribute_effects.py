"""Writes of a module's attributes (``cfg.count += 1``, ``cfg.last = y``) inside a jitted function: effects
replayed on every call, as eagerly (Note [A module's attributes written], jitcore/jit/code_kinds.py).

Differential: twin modules, one written eagerly and one under jitcore; every result and the modules'
attributes compared after every call, and the number of traces counted.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from jit_helpers import assert_same

import jitcore

_NAMES = ("count", "last", "value", "log", "scale")


def _module(name: str) -> types.ModuleType:
    m = types.ModuleType(name)
    m.count, m.last, m.value, m.log, m.scale = 0, None, 0, [], 2.0
    return m


@pytest.fixture
def imported() -> Iterator[Callable[[str], types.ModuleType]]:
    """Modules in ``sys.modules`` (as an import leaves them), removed after the test."""
    made: list[str] = []

    def make(name: str) -> types.ModuleType:
        sys.modules[name] = _module(name)
        made.append(name)
        return sys.modules[name]

    yield make
    for name in made:
        del sys.modules[name]


def _same_module(a: types.ModuleType, b: types.ModuleType) -> None:
    for name in _NAMES:
        assert_same(getattr(a, name), getattr(b, name))


def run_both(fn: Callable[[types.ModuleType, torch.Tensor], Any], eager: types.ModuleType,
             jitted: types.ModuleType, calls: int, *,
             before: Callable[[types.ModuleType, int], None] | None = None) -> Any:
    """``fn(module, x)`` eagerly on ``eager`` and jitted on ``jitted`` for ``calls`` inputs; returns the
    jitted function."""
    jf = jitcore.jit(fn)
    torch.manual_seed(0)
    for i in range(calls):
        if before is not None:
            before(eager, i)
            before(jitted, i)
        x = torch.randn(3)
        assert_same(jf(jitted, x), fn(eager, x))
        _same_module(jitted, eager)
    return jf


def _counted(m: types.ModuleType, x: torch.Tensor) -> torch.Tensor:
    m.count += 1
    return x * m.count


def _stored(m: types.ModuleType, x: torch.Tensor) -> torch.Tensor:
    m.value = 7
    m.last = x * m.scale
    return x + 1


def _logged(m: types.ModuleType, x: torch.Tensor) -> torch.Tensor:
    m.count = m.count + 1
    m.log.append(x.sum())
    setattr(m, "last", x.max())  # noqa: B010 - the C call's store, under test
    return x


@pytest.mark.parametrize("fn", [_counted, _stored, _logged], ids=["counter", "stored", "setattr_and_log"])
@pytest.mark.parametrize("where", ["imported", "made"])
def test_a_module_argument_written_as_eagerly(fn, where, imported) -> None:
    """Before: the writes stayed in the module as the pass made them (a TensorProxy in ``m.last``), no cached
    call made them again (``m.value`` stayed what the caller set), and a counter's third call raised
    UnboundLocalError."""
    make = imported if where == "imported" else _module
    jf = run_both(fn, make("user_eager_m"), make("user_jit_m"), 30,
                  before=lambda m, i: setattr(m, "value", -i))
    assert jitcore.cache_misses(jf) == 1


def test_a_module_global_counted_and_read_back(imported) -> None:
    """A module named by a global of the function: its counter advances on every call (100 calls, one trace),
    and the value the program wrote is read back as written."""
    eager, jitted = imported("user_eager_g"), imported("user_jit_g")
    namespace: dict[str, Any] = {}
    source = ("def f(x):\n    cfg.count += 1\n    cfg.value = cfg.count * 2\n"
              "    return x * cfg.value + cfg.scale\n")
    exec(compile(source, "<module_counter>", "exec"), namespace)  # noqa: S102 - a function over a global
    fe = types.FunctionType(namespace["f"].__code__, {"cfg": eager})
    fj = types.FunctionType(namespace["f"].__code__, {"cfg": jitted})
    jf = jitcore.jit(fj)
    for _ in range(100):
        x = torch.randn(3)
        assert_same(jf(x), fe(x))
    _same_module(jitted, eager)
    assert jitted.count == 100 and jitcore.cache_misses(jf) == 1


def test_a_module_the_program_makes_is_its_own() -> None:
    """A module made inside the function is new on every call: nothing is replayed on another."""

    def f(x: torch.Tensor) -> tuple:
        m = types.ModuleType("inner")
        m.count = 1
        m.count += 1
        return x * m.count, m.count

    jf = jitcore.jit(f)
    for _ in range(3):
        x = torch.randn(2)
        assert_same(jf(x), f(x))


# --- the module's own globals written and read by the program (Notes [The program's globals() dict] and [A
# global the program made], jitcore/jit/state_reads.py)

_GLOBALS_PROGRAMS = {
    "globals_subscript": "def f(x):\n    globals()['n'] = globals().get('n', 0) + 1\n"
                         "    return x * globals()['n']\n",
    "globals_held": "def f(x):\n    d = globals()\n    d['n'] = d.get('n', 0) + 1\n    return x * d['n']\n",
    "global_from_get": "def f(x):\n    global n\n    n = globals().get('n', 0) + 1\n    return x * n\n",
    "stored_then_named": "def f(x):\n    globals()['n'] = 7\n    return x * n\n",
    "global_made": "def f(x):\n    global n\n    n = 7\n    return x * n\n",
}


@pytest.mark.parametrize("source", list(_GLOBALS_PROGRAMS.values()), ids=list(_GLOBALS_PROGRAMS))
@pytest.mark.parametrize("start", [None, 0], ids=["absent", "zero"])
def test_the_modules_globals_the_program_writes_are_the_modules(source: str, start: Any, imported) -> None:
    """Before: ``globals()`` handed the program the module's dict as no state: its reads constants of the
    trace, its stores no effect (eager 1, 2, 3, ...; jit 1, 1, 1, the module's ``n`` stuck at 1); a global
    the program created, then read by name, raised KeyError on every call (/tmp/eff53-probes/
    globals_dbg2.py)."""
    modules = imported("user_eager_globals"), imported("user_jit_globals")
    code = compile(source, "<globals_program>", "exec").co_consts[0]
    eager, jitted = (types.FunctionType(code, vars(m)) for m in modules)
    if start is not None:
        for m in modules:
            m.n = start
    jf = jitcore.jit(jitted)
    for i in range(6):
        if i == 4:
            for m in modules:
                m.n = 10
        x = torch.randn(3)
        assert_same(jf(x), eager(x))
        assert vars(modules[1]).get("n") == vars(modules[0]).get("n")
    assert jitcore.cache_misses(jf) <= 3
