"""Objects a program makes are made again per cached call by a copy plan compiled once (jitcore/jit/
copy_plans.py), with no ``copy.deepcopy`` on the cached call, and as eagerly: the same values, one object
where eager's is one object (the output, a stored value, a closure's cell, a cycle), new objects per call.

Differential: each program runs several calls eagerly and jitted; what each returns is compared by value
and by the identities inside it, the caller changes what it got, and the next call must not see it.
"""

from __future__ import annotations

import copy
import sys

import pytest
import torch

import jitcore
from jitcore.jit.api import JittedFunction

STORE: list = []


class Box:
    def __init__(self) -> None:
        self.items: list = []


def _counter(x):
    count = [0]

    def bump():
        count[0] += 1
        return count[0]

    return bump, count, x + 1


def _object_graph(x):
    class Node:
        def __init__(self, name):
            self.name = name
            self.peers = []

        def size(self):
            return len(self.peers)

    a, b = Node("a"), Node("b")
    a.peers.append(b)
    b.peers.append(a)  # a cycle through two instances' lists
    shared = [1, 2]
    pair = (shared, shared, "t")
    box = Box()
    box.items.append(pair)
    tags = {"x", "y"}
    frozen = frozenset({1, 2})
    box.items.append(tags)

    def peek():
        return a.name, len(box.items)

    STORE.append(box)  # stored and returned: one object per call
    return (a, b, pair, box, tags, frozen, peek), x + 1


def _shape(result):
    """What the caller sees, by value and by identity."""
    (a, b, pair, box, tags, frozen, peek), y = result
    return (a.name, b.name, a.peers[0] is b, b.peers[0] is a, type(a) is type(b), a.size(),
            pair[0] is pair[1], pair[0] == [1, 2], box.items[0] is pair, box.items[1] is tags,
            sorted(tags), sorted(frozen),
            peek(), STORE[-1] is box, y.tolist())


@pytest.mark.parametrize("calls", [4])
def test_an_object_graph_the_program_made_is_made_again_per_call_with_its_identities(calls):
    x = torch.ones(2)
    jitted = jitcore.jit(_object_graph)
    for runner in (_object_graph, jitted):
        STORE.clear()
        seen, classes = [], set()
        for _ in range(calls):
            result = runner(x)
            seen.append(_shape(result))
            classes.add(type(result[0][0]))
            (a, _b, pair, box, tags, _frozen, _peek), _y = result
            a.peers.append("caller")  # what the caller does to one call's must not show in the next's
            pair[0].append(3)
            box.items.append("caller")
            tags.add("caller")
        assert len(classes) == calls  # a new class per call
        assert len({id(box) for box in STORE}) == calls  # a new box per call
        if runner is _object_graph:
            eager = seen
        else:
            assert seen == eager
    assert jitted.fallback_reason is None


def test_a_cached_call_makes_the_programs_objects_with_no_deep_copy(monkeypatch):
    x = torch.ones(2)
    jitted = jitcore.jit(_counter)
    for _ in range(2):
        jitted(x)
    copies = []
    real = copy.deepcopy

    def counted(value, memo=None, _nil=[]):  # noqa: B006 - copy.deepcopy's signature
        copies.append(type(value).__name__)
        return real(value, memo, _nil)

    monkeypatch.setattr(copy, "deepcopy", counted)
    results = [jitted(x) for _ in range(3)]
    assert copies == []  # the plan made them (Note [A copy planned once per entry])
    assert jitted.fallback_reason is None
    for bump, count, y in results:  # each call's closure over its own list, the list it returns
        assert (bump(), bump(), count) == (1, 2, [2])
        assert torch.equal(y, x + 1)
    assert len({id(bump) for bump, _, _ in results}) == 3


def _plain(x):
    return x + 1


def _closure(x):
    count = [0]

    def bump():
        count[0] += 1
        return count[0]

    return bump, x + 1


def _python_calls(jitted, x) -> int:
    """How many Python functions one cached call of ``jitted`` runs from its entries' run on (not the
    checks tests/conftest.py runs around the call)."""
    calls, depth = [0], [0]

    def profile(frame, event, _arg):
        if event == "call" and (depth[0] or frame.f_code is JittedFunction._run_entries.__code__):
            calls[0] += 1
            depth[0] += 1
        elif event == "return" and depth[0]:
            depth[0] -= 1

    sys.setprofile(profile)
    try:
        jitted(x)
    finally:
        sys.setprofile(None)
    return calls[0]


def test_a_cached_call_that_makes_a_closure_runs_few_python_functions_more_than_one_that_does_not():
    # Note [A copy plan written as one function]: the closure, its cell and its list are made by one
    # generated function; the output's rebuild opens no call memo (Note [One copy needs no call's memo]).
    # Before, 13 more (steps per object, the memo's wrappers, the call memo).
    x = torch.ones(2)
    plain, closure = jitcore.jit(_plain), jitcore.jit(_closure)
    for _ in range(3):
        plain(x), closure(x)
    assert closure.fallback_reason is None
    assert _python_calls(closure, x) - _python_calls(plain, x) <= 4
    bump, y = closure(x)
    assert (bump(), bump()) == (1, 2) and torch.equal(y, x + 1)


def _recursive(x):
    def fact(n, scale=2, *, extra=0):
        return 1 if n <= 1 else n * fact(n - 1) + extra

    fact.tag = "f"
    return fact, x + 1


def _shared_with_effect(x):
    items = [1]
    pair = (items, "t")

    def show():
        return len(items)

    STORE.append(pair)
    return show, pair, items, x + 1


def _cycle_through_tuple(x):
    holder = []
    pair = (holder, 1)
    holder.append(pair)
    return (lambda: pair), x + 1  # (a cycle back to a tuple: copied by deepcopy, not planned)


def _class_holding_itself(x):
    class Node:
        def __init__(self):
            self.kids = []

        def me(self):
            return Node  # a cell holding the class: this call's class in it

    root = Node()
    root.kids.append(root)
    return Node, root, x + 1


def _shape_of(name, result):
    if name == "recursive":
        fact, y = result
        return fact(4), fact.__defaults__, fact.__kwdefaults__, fact.tag, fact.__qualname__, y.tolist()
    if name == "shared":
        show, pair, items, y = result
        items.append("caller")
        return show(), pair[0] is items, STORE[-1] is pair, y.tolist()
    if name == "cycle":
        get, y = result
        pair = get()
        pair[0].append("caller")
        return pair[0][0] is pair, len(pair[0]), y.tolist()
    node, root, y = result
    return (type(root) is node, root.kids[0] is root, root.me() is node, node.__qualname__,
            y.tolist())


@pytest.mark.parametrize("name, program", [("recursive", _recursive), ("shared", _shared_with_effect),
                                           ("cycle", _cycle_through_tuple), ("class", _class_holding_itself)])
def test_a_generated_copy_keeps_identities_cycles_and_what_effects_share(name, program):
    x = torch.ones(2)
    jitted = jitcore.jit(program)
    seen = {}
    for runner in (program, jitted):
        STORE.clear()
        results = [runner(x) for _ in range(3)]
        seen[runner] = [_shape_of(name, result) for result in results]
        assert len({id(result[0]) for result in results}) == 3  # new per call
    assert seen[jitted] == seen[program]
    assert jitted.fallback_reason is None
