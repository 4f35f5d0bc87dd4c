"""The fused handlers (Note [Fused instructions], Note [Fused jumps]) behave as their instructions in
sequence: values, truthiness of non-bool results, exceptions and the line they are reported at."""

from __future__ import annotations

import sys
import traceback

import pytest
from hypothesis import given
from hypothesis import strategies as st
from interp_helpers import check

from jitcore.interpreter import interpret
from jitcore.interpreter.instructions import decode


class Truthy:
    """A comparison/arithmetic result that is not a bool: its __bool__ decides the jump."""

    def __init__(self, v):
        self.v = v

    def __bool__(self):
        return bool(self.v)

    def __lt__(self, other):
        return Truthy(self.v < other)

    def __mod__(self, other):
        return Truthy(self.v % other)


class Countdown:
    """A Python iterator: FOR_ITER on it is not native."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n == 0:
            raise StopIteration
        self.n -= 1
        return self.n


def loops(n, items):
    total = 0
    for x in items:  # FOR_ITER+STORE_FAST, then JUMP_BACKWARD->FOR_ITER+STORE_FAST
        if x % 3:  # LOAD_CONST+BINARY_OP / BINARY_OP+POP_JUMP
            total += x  # BINARY_OP+STORE_FAST
        elif x < n:  # COMPARE_OP+POP_JUMP
            total -= 1
    for x in Countdown(max(n, 0)):
        total += x
    for a, b in zip(items, items[1:]):  # FOR_ITER + UNPACK_SEQUENCE: JUMP_BACKWARD->FOR_ITER
        total += a * b
    return total


def user_types(n):
    hits = 0
    for i in range(n):
        if Truthy(i) % 2:  # LOAD_CONST+BINARY_OP, BINARY_OP+POP_JUMP
            hits += 1
        if Truthy(i) < 3:  # COMPARE_OP+POP_JUMP
            hits += 10
        t = Truthy(i)
        if t % 2:  # the superinstructions
            hits += 100
        if not t < 3:
            hits += 1000
    return hits


_EXPECTED_FUSED_311 = {
    "loops": {"FOR_ITER+STORE_FAST", "JUMP_BACKWARD->FOR_ITER+STORE_FAST", "BINARY_OP+STORE_FAST",
              "JUMP_BACKWARD->FOR_ITER"},
    "operand_runs": {"LOAD_FAST+LOAD_CONST+BINARY_OP+POP_JUMP_FORWARD_IF_FALSE",
                     "LOAD_FAST+LOAD_FAST+BINARY_OP+STORE_FAST",
                     "LOAD_FAST+LOAD_FAST+COMPARE_OP+POP_JUMP_FORWARD_IF_FALSE",
                     "LOAD_CONST+LOAD_FAST+BINARY_OP+STORE_FAST"},
}
_EXPECTED_FUSED_313 = {  # 3.13 loads two locals with LOAD_FAST_LOAD_FAST and tests with TO_BOOL
    "loops": {"FOR_ITER+STORE_FAST", "JUMP_BACKWARD->FOR_ITER+STORE_FAST", "JUMP_BACKWARD->FOR_ITER"},
    "operand_runs": {"LOAD_FAST+LOAD_CONST+BINARY_OP+TO_BOOL+POP_JUMP_IF_FALSE",
                     "LOAD_FAST_LOAD_FAST+BINARY_OP+STORE_FAST",
                     "LOAD_FAST_LOAD_FAST+COMPARE_OP+POP_JUMP_IF_FALSE",
                     "LOAD_FAST_LOAD_FAST+COMPARE_OP+POP_JUMP_IF_TRUE",
                     "LOAD_CONST+LOAD_FAST+BINARY_OP+STORE_FAST", "TO_BOOL+POP_JUMP_IF_FALSE"},
}
_EXPECTED_FUSED_312 = {  # 3.11's instructions, 3.13's conditional jumps (POP_JUMP_IF_*, either way)
    "loops": _EXPECTED_FUSED_311["loops"],
    "operand_runs": {"LOAD_FAST+LOAD_CONST+BINARY_OP+POP_JUMP_IF_FALSE",
                     "LOAD_FAST+LOAD_FAST+BINARY_OP+STORE_FAST",
                     "LOAD_FAST+LOAD_FAST+COMPARE_OP+POP_JUMP_IF_FALSE",
                     "LOAD_FAST+LOAD_FAST+COMPARE_OP+POP_JUMP_IF_TRUE",
                     "LOAD_CONST+LOAD_FAST+BINARY_OP+STORE_FAST"},
}
_EXPECTED_FUSED = {(3, 11): _EXPECTED_FUSED_311, (3, 12): _EXPECTED_FUSED_312}.get(sys.version_info[:2],
                                                                                  _EXPECTED_FUSED_313)


@pytest.mark.parametrize("name", sorted(_EXPECTED_FUSED))
def test_the_benchmark_shapes_are_fused(name: str) -> None:
    names = {inst.opname for inst in decode(globals()[name].__code__).fused}
    assert _EXPECTED_FUSED[name] <= names


@given(st.integers(-5, 20), st.lists(st.integers(-50, 50), max_size=12))
def test_loops(n, items) -> None:
    check(loops, n, items)


@given(st.integers(0, 12))
def test_non_bool_results_of_operators_decide_jumps_by_their_truth(n) -> None:
    check(user_types, n)


def _unbound(flag):
    if flag:
        x = 1
    return x + 1  # LOAD_FAST of an unbound local, fused with what follows


def test_unbound_local_in_a_fused_pair() -> None:
    check(_unbound, True)
    check(_unbound, False)


def _fails_in_second_half(d):
    a = 1
    b = a + d["k"]  # the BINARY_OP half raises TypeError
    return b


def test_exception_in_the_second_half_points_at_its_line() -> None:
    check(_fails_in_second_half, {"k": "s"})
    with pytest.raises(TypeError) as info:
        interpret(_fails_in_second_half)({"k": "s"})
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "_fails_in_second_half"
    assert frames[-1].lineno == _fails_in_second_half.__code__.co_firstlineno + 2


def _raises_from_iterator():
    total = 0
    for x in Countdown(3):
        total += 1 / x  # ZeroDivisionError on the last item, inside the loop body
    return total


def test_exception_raised_by_the_loop_body_and_by_next() -> None:
    check(_raises_from_iterator)

    def broken():
        for x in iter(lambda: 1 / 0, None):
            return x

    check(broken)


def test_jump_into_the_second_instruction_of_a_fused_pair() -> None:
    def f(items):
        out = []
        for x in items:
            if x:
                continue  # jumps back to FOR_ITER, which is the first half of a fused pair
            out.append(x)
        return out

    check(f, [0, 1, 0, 2, 0])


def operand_runs(a, b, items):
    """Two operand loads + BINARY_OP/COMPARE_OP (+ STORE_FAST / POP_JUMP_*): the superinstructions."""
    total = 0
    for x in items:
        if x % 3:  # LOAD_FAST LOAD_CONST BINARY_OP POP_JUMP_FORWARD_IF_FALSE
            total += x  # LOAD_FAST LOAD_FAST BINARY_OP STORE_FAST
        if a < x:  # LOAD_FAST LOAD_FAST COMPARE_OP POP_JUMP_FORWARD_IF_FALSE
            total -= 1
        if not x > b:  # ... POP_JUMP_FORWARD_IF_TRUE
            total += 2
        y = 10 - x  # LOAD_CONST LOAD_FAST BINARY_OP STORE_FAST
        total = total + (x * y if y else a == b)  # a run leaving its result on the stack
    return total


@given(st.one_of(st.integers(-5, 5), st.floats(allow_nan=True, width=16)), st.integers(-5, 5),
       st.lists(st.integers(-20, 20), max_size=10))
def test_superinstructions_match_cpython(a, b, items) -> None:
    check(operand_runs, a, b, items)


def test_superinstructions_on_user_types_and_errors() -> None:
    check(user_types, 7)

    def unbound_second(flag):
        if flag:
            y = 2
        x = 1
        return x + y  # the second operand is unbound

    check(unbound_second, True)
    check(unbound_second, False)

    def raises_in_operation(s):
        n = 1
        m = n + s  # TypeError at the BINARY_OP of a superinstruction
        return m

    check(raises_in_operation, "s")
    with pytest.raises(TypeError) as info:
        interpret(raises_in_operation)("s")
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].lineno == raises_in_operation.__code__.co_firstlineno + 2

    class BadBool:
        def __lt__(self, other):
            return self

        def __bool__(self):
            raise ValueError("no truth")

        def __repr__(self):
            return "BadBool()"

    def bad_truth(x, y):
        if x < y:  # the jump's truth test raises, at the jump
            return 1
        return 2

    check(bad_truth, BadBool(), 1)


def test_jump_into_the_middle_of_a_superinstruction() -> None:
    def f(items, k):
        total = 0
        for x in items:
            total = total + (x if x else k) * 2  # a conditional expression jumps to the middle of a run
        return total

    check(f, [0, 1, 2, 0], 5)


class _Point:
    def __init__(self, x, y):
        self.x = x  # 3.13: LOAD_FAST_LOAD_FAST+STORE_ATTR, twice as one run
        self.y = y
        self.z = x  # the third one alone: LOAD_FAST_LOAD_FAST+STORE_ATTR


def shapes_313(n, items):
    """Fused runs that exist on 3.13 only (and run unfused, as plain instructions, on 3.11)."""
    evens = [
        i for i in items if i % 2
    ]  # JUMP_BACKWARD->FOR_ITER+STORE_FAST_LOAD_FAST, LOAD_CONST+...+TO_BOOL+...

    def gen():
        for i in range(n):
            yield i  # RESUME+POP_TOP after the yield
    points = [_Point(i, -i) for i in gen()]
    return evens, [(p.x, p.y, p.z) for p in points], [Truthy(i).v for i in items if Truthy(i) % 2]


@given(st.integers(0, 6), st.lists(st.integers(-9, 9), max_size=8))
def test_shapes_fused_on_313(n, items) -> None:
    check(shapes_313, n, items)
    if sys.version_info >= (3, 13):
        fused = {inst.opname for code in (shapes_313.__code__, _Point.__init__.__code__)
                 for inst in decode(code).fused}
        assert {"JUMP_BACKWARD->FOR_ITER+STORE_FAST_LOAD_FAST", "LOAD_FAST_LOAD_FAST+STORE_ATTR",
                "LOAD_FAST_LOAD_FAST+STORE_ATTR+LOAD_FAST_LOAD_FAST+STORE_ATTR"} <= fused


def except_clauses(items, catch):
    """The head and end of except clauses (opcodes/except_clauses.py): a match, a miss that falls through to
    the next clause, a named exception (``e = None; del e`` at the end), a tuple, a class from a local."""
    log = []
    for x in items:
        try:
            if x == 0:
                raise ValueError(x)
            if x == 1:
                raise KeyError(x)
            if x == 2:
                raise TypeError(x)
            log.append(1 / (x - 3))
        except ValueError:
            log.append("value")
        except KeyError as e:
            log.append(("key", e.args, sys.exc_info()[0].__name__))
        except (TypeError, ZeroDivisionError) as e:
            log.append(type(e).__name__)
        finally:
            log.append(sys.exc_info()[0])
        try:
            if x < 0:
                raise OSError(x)
        except catch:  # a local class (not LOAD_GLOBAL) or a non-exception: TypeError, chained
            log.append("caught")
        except OSError:
            log.append("os")
    return log, sys.exc_info()


def _name_error_in_except_head(x):
    try:
        raise ValueError(x)
    except UndefinedName:  # noqa: F821 - NameError raised at the LOAD_GLOBAL of a fused head
        return "unreachable"


class _NotAnException:
    pass


def _type_error_in_except_head(x):
    try:
        raise ValueError(x)
    except _NotAnException:  # TypeError at the CHECK_EXC_MATCH of a fused head, chained to the ValueError
        return "unreachable"


@given(st.lists(st.integers(-2, 5), max_size=8),
       st.sampled_from([OSError, ValueError, (KeyError, OSError), int]))
def test_except_clauses_match_cpython(items, catch) -> None:
    check(except_clauses, items, catch)


def test_errors_in_a_fused_except_head() -> None:
    check(_name_error_in_except_head, 1)
    check(_type_error_in_except_head, 1)
    for fn in (_name_error_in_except_head, _type_error_in_except_head):
        with pytest.raises((NameError, TypeError)) as info:
            interpret(fn)(1)
        assert type(info.value.__context__) is ValueError
        frames = traceback.extract_tb(info.value.__traceback__)
        assert frames[-1].lineno == fn.__code__.co_firstlineno + 3
    fused = {inst.opname for inst in decode(except_clauses.__code__).fused}
    jump = "POP_JUMP_FORWARD_IF_FALSE" if sys.version_info < (3, 12) else "POP_JUMP_IF_FALSE"
    assert {f"PUSH_EXC_INFO+LOAD_GLOBAL+CHECK_EXC_MATCH+{jump}+POP_TOP",  # except ValueError:
            f"LOAD_GLOBAL+CHECK_EXC_MATCH+{jump}+STORE_FAST"} <= fused  # later clause: except KeyError as e
    assert any(name.startswith("POP_EXCEPT+LOAD_CONST+STORE_FAST+DELETE_FAST+") for name in fused)




def _yielding(items, k):
    for x in items:
        y = yield x  # LOAD_FAST + YIELD_VALUE; the value sent comes back
        yield x * k  # LOAD_FAST + BINARY_OP + YIELD_VALUE
        yield (y or x) // 3  # LOAD_CONST + BINARY_OP + YIELD_VALUE
        yield Truthy(x) % 2  # a user type's __mod__
    if k == 0:
        if items:
            last = items[-1]
        yield last  # UnboundLocalError when there are no items (3.11: a fused LOAD_FAST + YIELD_VALUE)


def yields(items, k):
    """A value computed and yielded (LOAD_FAST/LOAD_CONST + BINARY_OP + YIELD_VALUE, LOAD_FAST + YIELD_VALUE),
    on native and user types, with values sent in and a possibly unbound local yielded."""
    g = _yielding(items, k)
    out = []
    for i, v in enumerate(g):
        out.append(v)
        if i % 4 == 0:
            out.append(g.send(i))
    return [v.v if isinstance(v, Truthy) else v for v in out]


@given(st.lists(st.one_of(st.integers(-9, 9), st.floats(-3, 3)), max_size=6), st.integers(0, 3))
def test_yields_match_cpython(items, k) -> None:
    check(yields, items, k)
    names = {inst.opname for inst in decode(_yielding.__code__).fused}
    two_locals = "LOAD_FAST+BINARY_OP" if sys.version_info < (3, 13) else "LOAD_FAST_LOAD_FAST+BINARY_OP"
    assert {"LOAD_FAST+YIELD_VALUE", f"{two_locals}+YIELD_VALUE", "LOAD_CONST+BINARY_OP+YIELD_VALUE"} <= names


def _statement_yields(items, k):
    for x in items:
        yield x * k  # 3.11: LOAD_FAST+LOAD_FAST+BINARY_OP+YIELD_VALUE; its statement ends RESUME+POP_TOP
        yield x % 3  # LOAD_FAST+LOAD_CONST+BINARY_OP+YIELD_VALUE
    i = 0
    while i < k:  # 3.11: the loop's test at its end jumps backward (COMPARE_OP+POP_JUMP_BACKWARD_IF_TRUE)
        i += 1
        yield i


def filters_and_statement_yields(items, k):
    """Runs ending in a backward conditional jump (a comprehension's filter, a while loop's test at its end:
    3.11 only) or in a yield; yield statements whose value sent the driver drops without a dispatch (Note
    [Yield statements]), resumed by next(), by send() and by throw() into one of them."""
    kept = [x for x in items if x % 2]  # 3.11: ...BINARY_OP+POP_JUMP_BACKWARD_IF_FALSE
    squares = sum(a * a for a in items if Truthy(a) % 2)  # a user type's truth decides the backward jump
    g = _statement_yields(items, k)
    out = [next(g, None)]
    try:
        out.append(g.send("dropped"))
        out.append(g.throw(KeyError(k)))
    except (StopIteration, KeyError) as e:
        out.append((type(e).__name__, e.args))
    return kept, squares, out, list(_statement_yields(items, k))


@given(st.lists(st.one_of(st.integers(-9, 9), st.floats(-3, 3)), max_size=6), st.integers(0, 3))
def test_filters_and_statement_yields_match_cpython(items, k) -> None:
    check(filters_and_statement_yields, items, k)
    if sys.version_info < (3, 12):
        fused = {inst.opname for code in (_statement_yields.__code__, *(
            c for c in filters_and_statement_yields.__code__.co_consts if hasattr(c, "co_code")))
                 for inst in decode(code).fused}
        assert {"LOAD_FAST+LOAD_FAST+BINARY_OP+YIELD_VALUE", "LOAD_FAST+LOAD_CONST+BINARY_OP+YIELD_VALUE",
                "LOAD_FAST+LOAD_CONST+BINARY_OP+POP_JUMP_BACKWARD_IF_FALSE",
                "LOAD_FAST+LOAD_FAST+COMPARE_OP+POP_JUMP_BACKWARD_IF_TRUE", "RESUME+POP_TOP"} <= fused
    elif sys.version_info < (3, 13):  # 3.12: the same yields; its tests jump forward only (POP_JUMP_IF_*)
        fused = {inst.opname for inst in decode(_statement_yields.__code__).fused}
        assert {"LOAD_FAST+LOAD_FAST+BINARY_OP+YIELD_VALUE", "LOAD_FAST+LOAD_CONST+BINARY_OP+YIELD_VALUE",
                "LOAD_FAST+LOAD_FAST+COMPARE_OP+POP_JUMP_IF_FALSE", "RESUME+POP_TOP"} <= fused


def _replacing_what_is_thrown():
    try:
        yield  # a yield statement: resumed past RESUME; POP_TOP by the driver, or thrown into
    except BaseException:
        exc = KeyError("replaced")
        try:
            raise exc
        finally:
            exc.__context__ = None  # as contextlib's tests do: the chaining undone


def thrown_into_a_yield_statement(handling):
    """A generator thrown into at a yield statement raises a new exception whose context it clears, while its
    caller handles another exception or none. (The driver resumes a frame thrown into outside the except
    clause that received the exception: test_contextlib_async's test_exit_exception_explicit_none_context
    in the conformance suite is what showed it; this simpler program passes either way.)"""
    g = _replacing_what_is_thrown()
    next(g)
    try:
        if handling:
            try:
                raise ValueError("being handled by the caller")
            except ValueError:
                g.throw(IndexError())
        g.throw(IndexError())
    except KeyError as e:
        return repr(e.__context__), repr(e.__cause__), e.__suppress_context__


@pytest.mark.parametrize("handling", [False, True])
def test_thrown_into_a_yield_statement(handling) -> None:
    check(thrown_into_a_yield_statement, handling)



def test_a_hooked_run_leaves_the_plain_fusion_unmade_and_a_plain_run_makes_it_after() -> None:
    """Note [Fused on first use]: a run whose load hooks see some opcodes (as the jit's do) executes its own
    fusion and never makes ``fused``; a plain run after it fuses on first use (yield statements included),
    and both answer as CPython does."""
    from jitcore.interpreter import Hooks

    def statement_yields(items, k):  # code objects no other test has run
        for x in items:
            yield x * k
        yield k

    def fused_late(items, k):
        out = [x * k for x in items]
        g = statement_yields(items, k)
        out.append(next(g, None))
        out.append(g.send("dropped"))  # resumed past a yield statement's RESUME; POP_TOP (plain runs)
        return out, list(g)

    items, k = [3, 4, 5], 2
    infos = [decode(fused_late.__code__), decode(statement_yields.__code__)]
    hooks = Hooks(on_load_attr=lambda frame, obj, name, value: value)
    assert interpret(fused_late, hooks)(items, k) == fused_late(items, k)
    assert [info.plain_fused for info in infos] == [None, None]
    check(fused_late, items, k)
    assert all(info.plain_fused is not None and info.plain_fused is info.fused for info in infos)
    ends = {inst.index for inst in infos[1].fused if inst.opname == "RESUME+POP_TOP"}
    assert infos[1].yield_statement_ends == ends
