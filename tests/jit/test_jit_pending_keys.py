"""A dynamic number as the key of a dict of state only stored into, added to a set only added to, or
pushed onto a heap only pushed onto (issue 14).

``hist[step] = x.sum()``, ``seen.add(n)`` and ``heapq.heappush(heap, (x.sum().item(), step))`` made one
cache entry per value: the store hashed the number (or C compared it), which specialized it. Such a store
is now replayed with each call's number (Note [A key only stored], Note [An element only added], Note [An
item only pushed], jitcore/jit/pending_keys.py); where the program reads the container again in the same
call, the number is guarded by value as before. Every program here runs a sequence of calls eagerly and
jitted, and every call's result and the container (a dict's items with their keys' types, in order; a
set's members; a heap's items in order) are compared with eager's.
"""

from __future__ import annotations

import bisect
import collections
import heapq
from bisect import insort
from heapq import heappush

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import jitcore
from tests.jit.jit_helpers import check_calls_around_a_change
from tests.jit.test_jit_side_effect_programs import same, snap, x_of

PROGRAMS = {}


def program(fn):
    PROGRAMS[fn.__name__] = fn
    return fn


@program
def metrics_by_step():
    hist = {0: torch.zeros(()), 5: torch.ones(())}  # steps 0 and 5 overwrite an item there, in its place

    def f(x, step):
        hist[step] = x.sum()
        return x * 2

    return f, hist


@program
def two_keys_of_one_step():
    hist = {}

    def f(x, step):
        hist[step] = x.sum()
        hist[step + 1] = x.max()
        hist[step] = x.min()  # the first key again: its value replaced, its place kept
        return x

    return f, hist


@program
def computed_key_then_step():
    hist = {2: -1.0}

    def f(x, step):
        hist[step % 3] = x.sum()
        hist[step] = step * 2  # equal to ``step % 3`` for small steps: one item then, as eagerly
        return x - 1

    return f, hist


@program
def attribute_dict_of_a_module():
    class Tracker(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.by_step = collections.defaultdict(list)

        def forward(self, x, step):
            self.by_step[step] = x.mean()
            return x + 1

    tracker = Tracker()
    return tracker, tracker.by_step


@program
def stored_then_constant_key():  # Note [A key only stored]: the other key's store settles the step first
    hist = {1: 0.0}

    def f(x, step):
        hist[step] = x.sum()
        hist[1] = x.max()
        return x

    return f, hist


@program
def stored_then_measured():  # a read after the store: the key is guarded by value, as before
    hist = {}

    def f(x, step):
        hist[step] = x.sum()
        return x * len(hist)

    return f, hist


@program
def stored_then_tested():
    hist = {}

    def f(x, step):
        hist[step] = x.sum()
        return x + (1 if step - 1 in hist else 0)

    return f, hist


@program
def read_through_an_alias():  # an alias read before the store, measured after it
    hist = {}
    holder = [hist]

    def f(x, step):
        alias = holder[0]
        hist[step] = x.sum()
        return x * len(alias)

    return f, hist


@program
def seen_steps():  # Note [An element only added]
    seen = {0, "start"}

    def f(x, n):
        seen.add(n)
        seen.add(n % 3)
        seen.add("any")
        return x * 2

    return f, seen


@program
def seen_labels_of_values():
    seen = set()

    def f(x, n):
        seen.add(int(x.argmax()) + n)
        return x

    return f, seen


@program
def seen_on_an_object():
    class Visits:
        def __init__(self):
            self.nodes = set()

    visits = Visits()

    def f(x, n):
        visits.nodes.add(n)
        return x - 1

    return f, visits.nodes


@program
def seen_then_measured():  # a read after the add: the element is guarded by value, as before
    seen = set()

    def f(x, n):
        seen.add(n)
        return x + len(seen)

    return f, seen


@program
def seen_then_discarded():
    seen = {1, 2}

    def f(x, n):
        seen.add(n)
        seen.discard(1)
        return x

    return f, seen


@program
def heap_of_losses():  # Note [An item only pushed]
    heap = [(0.25, -1)]

    def f(x, step):
        heapq.heappush(heap, (x.sum().item(), step))
        heapq.heappush(heap, (float(step % 3), step + 100))
        return x * 2

    return f, heap


@program
def heap_on_an_object_by_name():
    class Queue:
        def __init__(self):
            self.items = []

    queue = Queue()

    def f(x, step):
        heappush(queue.items, (step, x.mean().item()))
        return x + 1

    return f, queue.items


@program
def sorted_by_loss():  # bisect.insort: Note [An item only pushed]
    top = [(0.5, -1)]

    def f(x, step):
        bisect.insort(top, (x.sum().item(), step))
        insort(top, (float(step % 3), step + 100))
        return x * 2

    return f, top


@program
def heap_then_popped():  # a read after the push: the heap is bound whole, as before
    heap = []

    def f(x, step):
        heapq.heappush(heap, (x.sum().item(), step))
        if len(heap) > 3:
            heapq.heappop(heap)
        return x - heap[0][0]

    return f, heap


def _state(container: object) -> object:
    if isinstance(container, set):  # membership, and no element of jitcore's
        return sorted(map(repr, container)), sorted(type(k).__name__ for k in container)
    return snap(container), [type(k) for k in container]


def _run(name: str, steps: list[int], jit: bool) -> tuple[list, object]:
    fn, hist = PROGRAMS[name]()
    if jit:
        fn = jitcore.jit(fn)
    outcomes = []
    for i, step in enumerate(steps):
        out = fn(x_of(i), step)
        outcomes.append((snap(out), _state(hist)))
    return outcomes, fn


def _check(name: str, steps: list[int]) -> object:
    expected, _ = _run(name, steps, jit=False)
    got, jitted = _run(name, steps, jit=True)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert same(a, b), f"call {i} (step {steps[i]}): {a!r} != {b!r}"
    return jitted


STEPS = [0, 1, 2, 1, 5, 0, 7, 7, 3, 8]


def test_a_key_only_stored_is_replayed_per_call() -> None:
    """The issue's program: 10 calls, the step first specialized, then one entry for every step."""
    for name in ("metrics_by_step", "two_keys_of_one_step", "computed_key_then_step",
                 "attribute_dict_of_a_module", "seen_steps", "seen_labels_of_values", "seen_on_an_object",
                 "heap_of_losses", "heap_on_an_object_by_name", "sorted_by_loss"):
        jitted = _check(name, STEPS)
        assert jitcore.cache_misses(jitted) == 2, (name, jitcore.miss_reasons(jitted))


def test_a_key_read_back_is_guarded() -> None:
    """A read of the dict after the store depends on the key: one entry per step, every answer eager's."""
    for name in ("stored_then_constant_key", "stored_then_measured", "stored_then_tested",
                 "read_through_an_alias", "seen_then_measured", "seen_then_discarded", "heap_then_popped"):
        jitted = _check(name, STEPS)
        assert jitcore.cache_misses(jitted) > 2, name


def test_a_key_from_a_value_read() -> None:
    """``hist[int(x.argmax())] = ...``: a number read from a tensor, stored as each call's key."""
    hist = {}

    def f(x, step):
        hist[int(x.argmax())] = step
        return x * 2

    jf = jitcore.jit(f)
    expected = {}
    for i in range(8):
        x = x_of(i)
        assert same(snap(jf(x, i)), snap(x * 2))
        expected[int(x.argmax())] = i
        assert same(snap(hist), snap(expected)) and [type(k) for k in hist] == [int] * len(hist)
    assert jitcore.cache_misses(jf) <= 2


def test_a_state_number_that_changes_keys_the_store() -> None:
    state = {"step": 0}
    hist = {}

    def read():
        hist[state["step"]] = 1.5
        return 2.0

    def change():
        state["step"] = 7

    check_calls_around_a_change(read, change)
    assert hist == {0: 1.5, 7: 1.5} and [type(k) for k in hist] == [int, int]


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(sorted(PROGRAMS)), st.lists(st.integers(0, 6), min_size=2, max_size=8))
def test_stores_keyed_by_steps_match_eager(name: str, steps: list[int]) -> None:
    _check(name, steps)


class _Loss:
    """An item C compares through Python code (its ``__lt__``)."""

    def __init__(self, v: float) -> None:
        self.v = v

    def __lt__(self, other: _Loss) -> bool:
        return self.v < other.v

    def __repr__(self) -> str:
        return f"_Loss({self.v})"


def _insort_measured(s, x):
    bisect.insort(s, round(x.sum().item(), 3))
    return x * len(s)


def _imported_pushes(s, x):
    insort(s, 2)
    heappush(s, 1)
    return x * len(s)


def _measured_into_the_item(s, x):
    n = len(s)
    heapq.heappush(s, (n, "a"))
    return x * len(s)


def _left_and_right(s, x):
    bisect.insort_left(s, (1, "b"))
    bisect.insort_right(s, (1, "a"))
    return x * 3


def _pushed_then_appended(s, x):  # the appends' replayed order would not be the program's: bound whole
    bisect.insort(s, 3)
    s.append(0)
    return x * len(s)


def _appended_then_pushed(s, x):
    s.append(0)
    heapq.heappush(s, 3)
    return x * len(s)


def _pushed_by_a_key(s, x):  # a key= argument: C calls Python code, the call runs eagerly
    bisect.insort(s, 3, key=lambda v: -v)
    return x * 2


def _pushed_python_items(s, x):  # C compares through ``_Loss.__lt__``: the call runs eagerly
    bisect.insort(s, _Loss(x.sum().item()))
    return x * len(s)


_PUSHED_ARGUMENTS = {  # program -> (the list passed, whether it traces once over 20 calls)
    _insort_measured: (lambda: [0.0, 1.0], True),
    _imported_pushes: (lambda: [1, 5], True),
    _measured_into_the_item: (list, True),
    _left_and_right: (list, True),
    _pushed_then_appended: (lambda: [1, 5], False),
    _appended_then_pushed: (lambda: [1, 5], False),
    _pushed_by_a_key: (lambda: [5, 1], False),
    _pushed_python_items: (lambda: [_Loss(0.0)], False),
}


@pytest.mark.parametrize("fn", list(_PUSHED_ARGUMENTS), ids=lambda fn: fn.__name__)
def test_a_list_argument_only_pushed_onto(fn) -> None:
    """``bisect.insort(s, v)``, ``heapq.heappush(s, v)`` on a list argument traced once over 20 calls, the
    push replayed onto each call's list (Note [A list argument only pushed onto]); before, every call
    traced again. Appends around the pushes, and items or keys C compares through Python code, bind the
    list whole as before. Every call's result and the list after it are eager's."""
    make, once = _PUSHED_ARGUMENTS[fn]
    eager, traced, jf = make(), make(), jitcore.jit(fn)
    for i in range(20):
        x = x_of(i)
        expected, got = fn(eager, x), jf(traced, x)
        assert same(snap(got), snap(expected)), i
        assert repr(traced) == repr(eager), (i, traced, eager)
    if once:
        assert jitcore.cache_misses(jf) == 1, jitcore.miss_reasons(jf)
