"""jit/pytree_calls.py: torch's pytree helpers run natively over trees the call made (Note [Pytree walks
run natively]) and are interpreted otherwise; every program's values, mutated state, exceptions and
cache entries equal eager's either way."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.utils._pytree as pytree
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from jitcore.jit import pytree_calls

Pair = collections.namedtuple("Pair", ["x", "y"])


class _Count:
    """Counts the helper calls that went to the interpreter."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        original = pytree_calls._interpreted

        def counted(fn, *args, **kwargs):
            self.names.append(fn.__name__)
            return original(fn, *args, **kwargs)

        monkeypatch.setattr(pytree_calls, "_interpreted", counted)


def _same(a, b) -> None:
    fa, sa = pytree.tree_flatten(a)
    fb, sb = pytree.tree_flatten(b)
    assert sa == sb
    for x, y in zip(fa, fb, strict=True):
        assert type(x) is type(y)
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
        else:
            assert x == y


def test_a_subclass_dispatch_takes_its_arguments_apart_natively(monkeypatch) -> None:
    count = _Count(monkeypatch)

    def f(x):
        return (x.sin() * 2 + 1).sum(dim=0)

    a = torch.randn(3, 4)
    x = TwoTensor(a, a.clone())
    j = jitcore.jit(f)
    _same(j(x), f(x))
    assert count.names == []  # TwoTensor's tree_map_only/tree_flatten/tree_leaves/tree_unflatten
    _same(j(x), f(x))


# programs whose trees are the call's own: native; their callbacks record ops
def _program_tree(x, y):
    tree = {"a": x, "b": (y, 2, [x + 1, None]), "c": "text"}
    leaves, spec = pytree.tree_flatten(tree)
    doubled = pytree.tree_map(lambda t: t * 2 if isinstance(t, torch.Tensor) else t, tree)
    only = pytree.tree_map_only((torch.Tensor,), lambda t: t.cos(), tree)
    back = pytree.tree_unflatten([v for v in leaves], spec)
    return doubled, only, back, len(pytree.tree_leaves(tree))


def _map_with_rests(x, y):
    return pytree.tree_map(lambda a, b: a + b, (x, [y]), (y, [x]))


def _map_with_is_leaf(x, y):
    return pytree.tree_map(lambda t: t if isinstance(t, list) else t + 1, (x, [y, y]),
                           is_leaf=lambda n: isinstance(n, list))


def _named_and_ordered(x, y):
    tree = (Pair(x, y), collections.OrderedDict(k=y))
    return pytree.tree_map_only(torch.Tensor, torch.neg, tree), pytree.tree_leaves(tree)


def _predicate(x, y):
    return pytree.tree_map_only(lambda t: isinstance(t, torch.Tensor) and t.dim() == 1, lambda t: t * 3,
                                [x, y.view(2, 2)])


def _builtin_callbacks(x, y):
    return pytree.tree_map(torch.neg, [x, (y,)]), pytree.tree_map(type, [x, 1, "s"]), \
        pytree.tree_map_only(torch.Tensor, torch.exp, {"k": x, "n": 2})


def _shared_and_cyclic(x, y):
    inner = [x, y]
    shared = pytree.tree_map(lambda t: t + 1, (inner, inner))
    loop: list = [x]
    loop.append(loop)
    try:
        pytree.tree_leaves(loop)
    except RecursionError:
        return shared, "recursion"
    return shared, "none"


def _raises(x, y):
    def bad(t):
        raise ValueError(f"no {t.shape[0]}")

    try:
        pytree.tree_map(bad, [x, y])
    except ValueError as e:
        return x + 1, str(e)
    return x, ""


@pytest.mark.parametrize("program", [_program_tree, _map_with_rests, _map_with_is_leaf,
                                     _named_and_ordered, _predicate, _builtin_callbacks,
                                     _shared_and_cyclic, _raises])
def test_programs_over_pytrees_equal_eager(program) -> None:
    j = jitcore.jit(program)
    for n in (4, 4, 6):
        x, y = torch.randn(4), torch.randn(4)
        if n == 6:
            x = torch.randn(4) * 3
        _same(j(x, y), program(x, y))


class _Holder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.extra = {"scale": torch.ones(4)}
        self.log: dict = {}

    def forward(self, x):
        self.log[len(self.log)] = 1  # a dict only stored into, then flattened: its keys are read
        n = len(pytree.tree_leaves(self.log))
        return pytree.tree_map(lambda t: t * x, self.extra)["scale"] + n


def test_a_callers_container_is_walked_by_the_interpreter(monkeypatch) -> None:
    count = _Count(monkeypatch)
    eager, jitted = _Holder(), _Holder()
    j = jitcore.jit(jitted)
    for _ in range(4):
        x = torch.randn(4)
        _same(j(x), eager(x))
        jitted.extra["scale"] = jitted.extra["scale"] + 1
        eager.extra["scale"] = eager.extra["scale"] + 1
    assert jitted.log == eager.log
    assert "tree_leaves" in count.names and "tree_map" in count.names
