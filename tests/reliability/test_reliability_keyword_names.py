"""Any parameter name can be passed by keyword, including names jitcore's own entry points use.

``self``, ``fn``, ``args``, ``kwargs`` and the names of jitcore's internal parameters (``target``,
``hooks``, ``run``, ...) are ordinary user parameter names: a jitted function accepts them by
keyword exactly as eager does, on the first (traced) call and on cached calls, and an aten operator
called with its schema's ``self=`` keyword is recorded as such.
"""

from __future__ import annotations

import pytest
import torch
from reliability_helpers import outcome, same_outcome

import jitcore

NAMES = ["self", "fn", "args", "kwargs", "func", "target", "bound_self", "hooks", "run", "frame", "inst",
         "entry", "cls", "obj", "value", "path", "name", "options", "executor", "fallback", "cache_limit"]


@pytest.mark.parametrize("name", NAMES)
def test_a_parameter_of_any_name_can_be_passed_by_keyword(name: str) -> None:
    fn = eval(f"lambda {name}, y: y * {name}")  # noqa: S307 - builds a lambda with that parameter name
    jf = jitcore.jit(fn)
    x = torch.arange(3.0)
    for scale in (2, 2, 3.5, torch.full((3,), 2.0)):
        same_outcome(outcome(jf, **{name: scale, "y": x}), outcome(fn, **{name: scale, "y": x}), name)
        same_outcome(outcome(jf, scale, y=x), outcome(fn, scale, y=x), name)
    assert jitcore.cache_hits(jf) > 0


def test_keyword_only_and_var_keyword_parameters_named_like_internals() -> None:
    def g(x, *, self, fn):
        return x + self * fn

    def h(x, **kwargs):
        return x * kwargs["self"] + kwargs["kwargs"]

    x = torch.ones(2)
    for f, kwargs in ((g, {"self": 2.0, "fn": x}), (h, {"self": x, "kwargs": 3})):
        jf = jitcore.jit(f)
        for _ in range(2):
            same_outcome(outcome(jf, x, **kwargs), outcome(f, x, **kwargs))
        # a missing keyword: eager's TypeError
        same_outcome(outcome(jf, x, self=1.0), outcome(f, x, self=1.0))


def test_a_method_whose_parameter_is_passed_by_keyword() -> None:
    class Scaler:
        factor = 3.0

        @jitcore.jit
        def scale(self, x):
            return x * self.factor

    s, x = Scaler(), torch.ones(2)
    same_outcome(outcome(s.scale, x=x), outcome(Scaler.scale.fn, s, x=x))
    same_outcome(outcome(Scaler.scale, self=s, x=x), outcome(Scaler.scale.fn, self=s, x=x))


def test_an_aten_operator_called_with_its_self_keyword() -> None:
    def f(a):
        return torch.ops.aten.add.Tensor(self=a, other=a * 2)

    jf, x = jitcore.jit(f), torch.arange(4.0)
    for _ in range(2):
        same_outcome(outcome(jf, x), outcome(f, x))
    assert "self=a" in str(jitcore.last_traces(jf)[-1])
