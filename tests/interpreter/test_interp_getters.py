"""``operator.attrgetter`` called with its reads interpreted (jitcore/interpreter/getters.py): C's results
and errors, natively and interpreted; the reads reach the run's load hook."""

from __future__ import annotations

import operator
import os
import sys
import types

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check

from jitcore.interpreter import Hooks, interpret


class Node:
    def __init__(self, n: int) -> None:
        self.n = n
        self.child = types.SimpleNamespace(depth=n + 1)

    @property
    def twice(self) -> int:
        return self.n * 2


@pytest.mark.parametrize("call", [
    lambda: operator.attrgetter("n")(Node(1)),
    lambda: operator.attrgetter("n", "twice", "child.depth")(Node(2)),
    lambda: sorted([Node(3), Node(1), Node(2)], key=operator.attrgetter("twice"))[0].n,
    lambda: list(map(operator.attrgetter("child.depth"), [Node(4), Node(5)])),
    lambda: operator.attrgetter("missing")(Node(1)),
    lambda: operator.attrgetter("child.missing")(Node(1)),
    lambda: operator.attrgetter("n")(),
    lambda: operator.attrgetter("n")(Node(1), Node(2)),
    lambda: operator.attrgetter("n")(obj=Node(1)),
], ids=["one", "several", "sort_key", "map", "missing", "missing_dotted", "no_argument", "two_arguments",
        "keyword"])
def test_attrgetter_matches_c(call) -> None:
    check(call)


def test_the_reads_reach_the_load_hook() -> None:
    seen: list[str] = []

    def on_load_attr(frame: object, obj: object, name: str, value: object) -> object:
        seen.append(name)
        return value

    def f() -> tuple:
        return operator.attrgetter("n", "child.depth")(Node(7))

    assert interpret(f, Hooks(on_load_attr=on_load_attr))() == (7, 8)
    assert seen.count("n") == 1 and "child" in seen and "depth" in seen
