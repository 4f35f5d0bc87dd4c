"""User-controlled text never runs as code in generated prologues and traces.

Each payload is placed where user text can reach generated source: attribute names (``setattr``),
dict keys, keyword-argument names (also as the computation's parameters, for dynamic numbers),
string values, function names and qualnames, a module's ``__name__``, a code object's
``co_filename`` and ``co_name``, dataclass field names. A payload that
ran would set ``builtins.JITCORE_SMUGGLED`` (the sentinel); each test checks that it is unset, that the
jitted results equal eager's, and that the printed prologue and trace still compile.
"""

from __future__ import annotations

import builtins
import dataclasses
import types

import pytest
import torch
from reliability_helpers import outcome, same_outcome

import jitcore

_SET = "__import__('builtins').__setattr__('JITCORE_SMUGGLED', 1)"
PAYLOADS = [
    f"a\n{_SET}\n",
    f"a\r\n  {_SET}",
    f"a\u2028{_SET}",
    f"w[{_SET}]",
    f"x'); {_SET}; ('",
    f'x"); {_SET}; ("',
    f"x\\'); {_SET}  # ",
    f"# coding: unicode_escape\\u000a{_SET}",
    "\ufb01eld",  # 'ﬁeld': NFKC-normalises to 'field'
    "field",
    "0abc",
    "",
    "import",
    "__c0",
    "torch",
    "args",
    "v0",
    f"{{{_SET}}}",
    "\x00nul",
    "é" * 70,
]


@pytest.fixture(autouse=True)
def _sentinel():
    assert not hasattr(builtins, "JITCORE_SMUGGLED")
    yield
    smuggled = hasattr(builtins, "JITCORE_SMUGGLED")
    if smuggled:
        delattr(builtins, "JITCORE_SMUGGLED")
    assert not smuggled, "a payload ran"


def _check(fn, jfn, *args, **kwargs):
    same_outcome(outcome(jfn, *args, **kwargs), outcome(fn, *args, **kwargs))
    for prologue in jitcore.last_prologue_traces(jfn):
        compile(str(prologue), "<prologue>", "exec")  # printable and valid Python
    for trace in jitcore.last_traces(jfn):
        compile(str(trace), "<trace>", "exec")


def test_attribute_names_set_with_setattr() -> None:
    holder = types.SimpleNamespace()
    for i, name in enumerate(PAYLOADS):
        setattr(holder, name, float(i + 1))
    names = list(PAYLOADS)

    def f(x):
        return [x * getattr(holder, name) for name in names]

    jf = jitcore.jit(f)
    x = torch.ones(2)
    _check(f, jf, x)
    holder.field = 100.0  # the look-alike 'ﬁeld' must not read this one
    _check(f, jf, x)
    setattr(holder, PAYLOADS[0], -1.0)
    _check(f, jf, x)


def test_dict_keys() -> None:
    def f(d):
        return {k: v * len(k) for k, v in d.items()}

    jf = jitcore.jit(f)
    d = {name: torch.full((2,), float(i)) for i, name in enumerate(PAYLOADS)}
    _check(f, jf, d)
    _check(f, jf, {k: v + 1 for k, v in d.items()})
    _check(f, jf, dict(reversed(list(d.items()))))


def test_keyword_argument_names() -> None:
    def f(x, **kwargs):
        return [x * v for v in kwargs.values()], sorted(kwargs)

    jf = jitcore.jit(f)
    x = torch.ones(2)
    kwargs = {name: torch.full((2,), float(i)) for i, name in enumerate(PAYLOADS) if name not in ("x",)}
    _check(f, jf, x, **kwargs)
    _check(f, jf, x, **{PAYLOADS[0]: x})


def test_keyword_argument_names_of_dynamic_numbers() -> None:
    """Dynamic numbers become parameters of the computation named after their keyword."""

    def f(x, **kwargs):
        return [x * v + v for v in kwargs.values()]

    jf = jitcore.jit(f, dynamic_numbers=True)
    x = torch.ones(2)
    kwargs = {name: float(i) for i, name in enumerate(PAYLOADS) if name not in ("x",)}
    _check(f, jf, x, **kwargs)
    _check(f, jf, x, **{k: v + 0.5 for k, v in kwargs.items()})
    assert jitcore.cache_misses(jf) == 1


def test_string_values() -> None:
    def f(x, s):
        return (x * 2 if s.startswith("a") else x * 3), s + "!"

    jf = jitcore.jit(f)
    x = torch.ones(2)
    for s in PAYLOADS:
        _check(f, jf, x, s)


def test_global_and_closure_string_values() -> None:
    value = PAYLOADS[0]

    def f(x):
        return x * len(value), value

    jf = jitcore.jit(f)
    _check(f, jf, torch.ones(2))
    value = PAYLOADS[4]
    _check(f, jf, torch.ones(2))


@pytest.mark.parametrize("name", PAYLOADS[:9])
def test_function_names_and_qualnames(name: str) -> None:
    def f(x):
        return x + 1

    f.__name__ = name or "f"
    f.__qualname__ = name or "f"
    jf = jitcore.jit(f)
    _check(f, jf, torch.ones(2))
    assert name in repr(jf) or not name or "\n" in name or "\u2028" in name or "\r" in name


def test_module_name() -> None:
    module = types.ModuleType(PAYLOADS[0])
    module.scale = 2.0
    module.__name__ = PAYLOADS[3]

    def f(x):
        return x * module.scale

    jf = jitcore.jit(f)
    _check(f, jf, torch.ones(2))
    module.scale = 3.0
    _check(f, jf, torch.ones(2))


@pytest.mark.parametrize("filename", [PAYLOADS[0], PAYLOADS[1], PAYLOADS[7], "<jitcore-prologue-0>"])
def test_code_filename_and_name(filename: str) -> None:
    def f(x):
        return (x * 2).sin()

    f.__code__ = f.__code__.replace(co_filename=filename, co_name=PAYLOADS[3], co_qualname=PAYLOADS[4])
    jf = jitcore.jit(f)
    _check(f, jf, torch.ones(2))
    _check(f, jf, torch.ones(3))


def test_dataclass_field_names() -> None:
    """Field names must be identifiers (Python rejects 'ﬁeld' in make_dataclass): names that clash
    with generated code's own names, and non-ASCII ones, whose NFKC form is the same (NFKC-changing names
    break make_dataclass itself)."""
    names = ["torch", "args", "kwargs", "__c0", "v0", "t0", "x", "\u00e9t\u00e9"]
    Point = dataclasses.make_dataclass("Point", [(n, torch.Tensor) for n in names])

    def f(p):
        return [getattr(p, f.name) * (i + 1) for i, f in enumerate(dataclasses.fields(p))]

    jf = jitcore.jit(f)
    _check(f, jf, Point(*(torch.full((2,), float(i)) for i in range(len(names)))))
    _check(f, jf, Point(*(torch.full((2,), float(-i)) for i in range(len(names)))))
    _check(f, jf, Point(*(torch.full((3,), float(i)) for i in range(len(names)))))


def test_miss_explanations_show_payloads_as_data() -> None:
    holder = types.SimpleNamespace(**{PAYLOADS[0]: 1.0})

    def f(x):
        return x * getattr(holder, PAYLOADS[0])

    jf = jitcore.jit(f)
    jf(torch.ones(2))
    setattr(holder, PAYLOADS[0], 2.0)
    jf(torch.ones(2))
    reasons = jitcore.miss_reasons(jf)[-1]
    assert reasons and "expected 1.0, got 2.0" in str(reasons[0])


class _Tagged(torch.Tensor):
    """A wrapper subclass whose flatten ctx is a user string (the tag)."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, tag: str):
        return torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), dtype=elem.dtype, device=elem.device,
            requires_grad=elem.requires_grad,
        )

    def __init__(self, elem: torch.Tensor, tag: str) -> None:
        self.elem = elem
        self.tag = tag

    def __tensor_flatten__(self):
        return ["elem"], self.tag

    @staticmethod
    def __tensor_unflatten__(inner, tag, outer_size, outer_stride):
        return _Tagged(inner["elem"], tag)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tags = [a.tag for a in args if isinstance(a, _Tagged)]
        unwrapped = [a.elem if isinstance(a, _Tagged) else a for a in args]
        out = func(*unwrapped, **kwargs)
        return _Tagged(out, "+".join(tags)) if isinstance(out, torch.Tensor) else out


@pytest.mark.parametrize("tag", [PAYLOADS[0], PAYLOADS[4], PAYLOADS[8]])
def test_tensor_subclass_flatten_context(tag: str) -> None:
    def f(t):
        return t * 2

    jf = jitcore.jit(f)
    for t in (_Tagged(torch.ones(2), tag), _Tagged(torch.ones(2), "plain"), _Tagged(torch.ones(2), tag)):
        expected, actual = outcome(f, t), outcome(jf, t)
        same_outcome(actual, expected)
        if expected[0] == "ok":
            assert actual[1].tag == expected[1].tag
