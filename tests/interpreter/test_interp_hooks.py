"""Each hook fires with the right arguments, and its result is used."""

from __future__ import annotations

import sys

from jitcore.interpreter import Frame, Hooks, Instruction, Run, current_run, interpret

CONSTANT = 10


def test_lookaside_on_list_append_catches_bound_append():
    seen = []

    def spy(lst, value):
        seen.append(value)
        lst.append(value * 100)

    def f():
        out = []
        out.append(1)
        add = out.append
        add(2)
        return out

    assert interpret(f, Hooks(lookasides={list.append: spy}))() == [100, 200]
    assert seen == [1, 2]


def test_lookaside_on_python_function_and_method():
    def helper(x):
        return x + 1

    class C:
        def m(self, x):
            return x * 2

    def f():
        return helper(1), C().m(3)

    hooks = Hooks(
        lookasides={helper: lambda x: "replaced", C.m: lambda self, x: ("method", type(self).__name__)}
    )
    assert interpret(f, hooks)() == ("replaced", ("method", "C"))


def test_resolve_call_keeps_function_opaque():
    executed = set()

    def inner(x):
        return x * 3

    def outer(x):
        return inner(x) + 1

    def on_instruction(frame: Frame, inst: Instruction) -> None:
        executed.add(frame.code.co_name)

    hooks = Hooks(resolve_call=lambda fn: fn if fn is inner else None, on_instruction=on_instruction)
    assert interpret(outer, hooks)(2) == 7
    assert executed == {"outer"}
    executed.clear()
    assert interpret(outer, Hooks(on_instruction=on_instruction))(2) == 7
    assert executed == {"outer", "inner"}


def test_on_opaque_call_performs_builtin_calls():
    calls = []

    def on_opaque_call(fn, args, kwargs):
        calls.append((fn, args))
        return fn(*args, **kwargs)

    def f(xs):  # ``ord`` has no lookaside (``len`` has one since f6830db: a Python __len__ is interpreted)
        return ord("a"), sorted(xs)

    assert interpret(f, Hooks(on_opaque_call=on_opaque_call))([3, 1]) == (97, [1, 3])
    assert (ord, ("a",)) in calls


def test_on_instruction_sees_positions():
    positions = []

    def f(a):
        b = a + 1
        return b * 2

    def on_instruction(frame, inst):
        if inst.opname == "BINARY_OP":
            positions.append((inst.lineno - frame.code.co_firstlineno, frame.position().function_name))

    assert interpret(f, Hooks(on_instruction=on_instruction))(1) == 4
    assert positions == [(1, "f"), (2, "f")]


def test_load_hooks_replace_values():
    def make():
        captured = 5

        def f(d, obj):
            return CONSTANT + captured + d["k"] + obj.attr

        return f

    class O:
        attr = 1

    hooks = Hooks(
        on_load_global=lambda frame, name, value: value * 2 if name == "CONSTANT" else value,
        on_load_deref=lambda frame, name, value: value + 1000,
        on_load_subscr=lambda frame, container, key, value: value + 10_000,
        on_load_attr=lambda frame, obj, name, value: value + 100_000 if name == "attr" else value,
    )
    assert interpret(make(), hooks)({"k": 0}, O()) == 20 + 1005 + 10_000 + 100_001


def test_current_run_and_frames_in_lookaside():
    observed = {}

    def probe(x):
        run = current_run()
        observed["run"] = isinstance(run, Run)
        observed["frames"] = [frame.code.co_name for frame in run.frames]
        observed["position"] = run.frames[-1].position().function_name
        return run.call(lambda y: y + 1, x)

    def target(x):
        return x

    def caller(x):
        return target(x) * 2

    assert interpret(caller, Hooks(lookasides={target: probe}))(4) == 10
    assert observed == {"run": True, "frames": ["caller"], "position": "caller"}
    assert current_run() is None


def test_frames_of_plain_calls():
    """A plain call's frame (built slot by slot in calls.call_function, Note [Frames of plain calls]) has
    the slots Frame(...) sets, with the same values."""
    seen = []

    def probe():
        seen.append(current_run().frames[-1])

    def callee(a, b):
        probe()
        return a + b

    def caller(a):
        return callee(a, 2)

    assert interpret(caller, Hooks(lookasides={probe: probe}))(1) == 3
    (frame,) = seen
    assert frame.code is callee.__code__ and frame.back.code is caller.__code__
    made = Frame(frame.run, frame.code, frame.info, frame.globals, frame.builtins, frame.function,
                 list(frame.fast), frame.back)
    for name in set(Frame.__slots__) - {"stack", "index", "result"}:  # these three changed as it ran
        assert hasattr(frame, name) == hasattr(made, name), name
        if hasattr(made, name):
            assert getattr(frame, name) == getattr(made, name), name


def test_runs_nest():
    def inner_lookaside(x):
        return interpret(lambda: current_run().frames[-1].code.co_name)()

    def target(x):
        return x

    def f():
        return target(1)

    assert interpret(f, Hooks(lookasides={target: inner_lookaside}))() == "<lambda>"


def test_hooks_see_implicit_calls():
    seen = []

    class C:
        def __init__(self, v):
            self.v = v

        def __add__(self, other):
            return C(self.v + other.v)

        @property
        def double(self):
            return self.v * 2

    def spy_add(a, b):
        seen.append("add")
        return C(a.v + b.v)

    def spy_getter(obj):
        seen.append("getter")
        return obj.v * 2

    def f():
        return (C(1) + C(2)).double

    hooks = Hooks(lookasides={C.__add__: spy_add, C.double.fget: spy_getter})
    assert interpret(f, hooks)() == 6
    assert seen == ["add", "getter"]


def test_lookaside_on_c_slot_behind_operator():
    import fractions

    seen = []

    def spy_add(a, b):
        seen.append((a, b))
        return fractions.Fraction.__add__(a, b)

    class Num:
        def __init__(self, v):
            self.v = v

        def __neg__(self):
            return Num(-self.v)

    def f(a, b):
        return a + b, a[0] if isinstance(a, list) else None

    half = fractions.Fraction(1, 2)
    assert interpret(f, Hooks(lookasides={fractions.Fraction.__add__: spy_add}))(half, half) == (1, None)
    assert seen == [(half, half)]

    seen.clear()

    def g(xs):
        return xs[1]

    class L(list):
        pass

    def spy_getitem(container, key):
        seen.append(key)
        return list.__getitem__(container, key)

    assert interpret(g, Hooks(lookasides={list.__getitem__: spy_getitem}))(L([1, 2])) == 2
    assert seen == [1]


def test_frame_positions_seen_from_a_lookaside():
    seen = []

    def probe():
        frame = current_run().frames[-1]
        seen.append((frame.position(), frame.instruction.opname, frame.code.co_name))

    def target():
        return None

    def caller():
        x = 1
        target()
        return x

    interpret(caller, Hooks(lookasides={target: probe}))()
    (position, opname, name), = seen
    assert name == "caller" and opname == "CALL"
    assert position.filename == __file__
    assert position.lineno == caller.__code__.co_firstlineno + 2
    assert position.function_name == "caller"
    assert (position.col, position.end_col) == (8, 16)


def test_other_python_versions_are_refused(monkeypatch):
    import pytest

    from jitcore import interpreter
    from jitcore.interpreter import UnsupportedPythonVersion

    monkeypatch.setattr(interpreter, "SUPPORTED_VERSIONS", ((3, 99),))
    with pytest.raises(UnsupportedPythonVersion, match="supports CPython 3.99"):
        interpret(len)


def test_on_missing_attr_sees_failed_attribute_loads_the_program_catches() -> None:
    class Bag:
        present = 1

    def f(bag):
        out = []
        for name in ("present", "absent"):
            try:
                out.append(getattr(bag, name) if name == "present" else bag.absent)
            except AttributeError:
                out.append(None)
        try:
            bag.method_absent()
        except AttributeError as e:
            out.append(type(e).__name__)
        return out

    missing = []
    hooks = Hooks(on_load_attr=lambda frame, obj, name, value: value,
                  on_missing_attr=lambda frame, obj, name: missing.append((frame.code.co_name, name)))
    assert interpret(f, hooks=hooks)(Bag()) == f(Bag()) == [1, None, "AttributeError"]
    assert missing == [("f", "absent"), ("f", "method_absent")]


def test_load_hooks_see_every_hooked_load_while_the_rest_is_fused():
    from jitcore.interpreter.instructions import decode

    class P:
        k = 3

    p = P()

    def f(n):
        total = 0
        for i in range(n):
            if i % 2:  # a superinstruction (no hooked opcode in it)
                total += p.k  # LOAD_ATTR: hooked, never fused away
        return total

    seen = []

    def on_load_attr(frame, obj, name, value):
        seen.append(name)
        return value * 10

    run = Run(Hooks(on_load_attr=on_load_attr))
    assert interpret(f, Hooks(on_load_attr=on_load_attr))(6) == 90
    assert seen == ["k"] * 3
    fused = decode(f.__code__).fused_without(run.hooked)
    names = {inst.opname for inst in fused}
    # 3.11: ...+POP_JUMP_FORWARD_IF_FALSE; 3.12: ...+POP_JUMP_IF_TRUE, 3.13: ...+TO_BOOL+POP_JUMP_IF_TRUE (the
    # body jumps back)
    jump = {(3, 11): "POP_JUMP_FORWARD_IF_FALSE", (3, 12): "POP_JUMP_IF_TRUE"}.get(sys.version_info[:2],
                                                                                   "TO_BOOL+POP_JUMP_IF_TRUE")
    assert f"LOAD_FAST+LOAD_CONST+BINARY_OP+{jump}" in names
    assert not any("LOAD_ATTR" in name and "+" in name for name in names)


def test_raising_a_builtin_exception_class_is_seen_by_lookasides_and_the_opaque_call_hook():
    """``raise KeyError`` instantiates the class directly only when no lookaside or opaque-call hook is to see
    the call (opcodes/exceptions.py, _BUILTIN_EXCEPTIONS)."""

    def f(k):
        try:
            raise KeyError
        except KeyError as e:
            return type(e).__name__, e.args, k

    assert interpret(f)(1) == f(1) == ("KeyError", (), 1)
    seen = []

    def on_opaque_call(fn, args, kwargs):
        seen.append(fn)
        return fn(*args, **kwargs)

    assert interpret(f, Hooks(on_opaque_call=on_opaque_call))(2) == ("KeyError", (), 2)
    assert KeyError in seen

    class Replaced(KeyError):
        pass

    assert interpret(f, Hooks(lookasides={KeyError: lambda: Replaced("from the lookaside")}))(3) == (
        "Replaced", ("from the lookaside",), 3)

    class Unhashable(Exception):
        __hash__ = None

    def raise_unhashable():
        try:
            raise Unhashable("u")
        except Unhashable as e:
            return e.args

    assert interpret(raise_unhashable)() == raise_unhashable() == ("u",)


def _step(value):
    return value


class _Bag:
    """A container whose ``__iter__`` is a Python generator (a ``ModuleList``'s is Python too)."""

    def __init__(self, items):
        self.items = items

    def __iter__(self):
        for item in self.items:
            yield _step(item)


class _Countdown:
    """An iterator whose ``__next__`` is Python."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n == 0:
            raise StopIteration
        self.n -= 1
        return _step(self.n)


def test_iterables_that_c_builtins_iterate_are_interpreted():
    """``enumerate``, ``zip``, ``list``, ``tuple`` and ``sorted`` iterate as the ``for`` statement does:
    the Python ``__iter__``/``__next__`` they call runs on the interpreter, so its calls reach the hooks
    (natively, ``enumerate(self.layers)`` once gave a ModuleList's modules without their paths)."""
    seen = []

    def spy(value):
        seen.append(value)
        return value * 10

    def f():
        return (list(enumerate(_Bag([1, 2]), start=5)), list(zip(_Bag([3]), _Countdown(2))),
                list(_Bag([4])), tuple(_Countdown(1)), sorted(_Bag([6, 5])))

    got = interpret(f, Hooks(lookasides={_step: spy}))()
    assert got == ([(5, 10), (6, 20)], [(30, 10)], [40], (0,), [50, 60])
    assert sorted(seen) == [0, 1, 1, 2, 3, 4, 5, 6]
    assert f() == ([(5, 1), (6, 2)], [(3, 1)], [4], (0,), [5, 6])


def test_item_key_stands_in_for_the_key_of_hashed_containers_only() -> None:
    """``Hooks.item_key`` gives the key a dict, set or keys view is indexed, tested, written and deleted
    with (the jit's stand-in for a caller's tensor becomes the tensor); lists are indexed as written."""

    def f(d: dict, s: set, items: list) -> tuple:
        d["new"] = d["old"]
        del d["gone"]
        return d["new"], "a" in s, "a" in d.keys(), items[0], sorted(d)

    seen: list = []

    def item_key(frame: Frame, container: object, key: object) -> object:
        seen.append((type(container).__name__, key))
        return key.upper() if isinstance(key, str) else key

    hooks = Hooks(on_load_subscr=lambda frame, container, key, value: value,
                  on_contains=lambda frame, container, item: NotImplemented,
                  on_store=lambda frame, target, key, kind: None, item_key=item_key)
    d = {"OLD": 1, "GONE": 2}
    assert interpret(f, hooks)(d, {"A"}, [7]) == (1, True, False, 7, ["NEW", "OLD"])
    assert seen == [("dict", "old"), ("dict", "new"), ("dict", "gone"), ("dict", "new"), ("set", "a"),
                    ("dict_keys", "a")]
