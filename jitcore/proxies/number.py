"""NumberProxy: a Python number the user declared dynamic (``jitcore.jit(fn, dynamic_numbers=...)``).

A dynamic number is an input of the computation instead of a constant of it. While tracing, the
program sees a NumberProxy standing for an ``int`` or a ``float`` (``type(n)``, ``isinstance`` and
``n.__class__`` answer that class through the jit's lookasides):
- Python arithmetic with numbers (``n * 2``, ``1 - n``, ``-n``, ``abs(n)``, ``float(n)``) is
  recorded as a symbol of the python language context and gives a new NumberProxy;
- as an operand torch takes as a value (``x * n``, ``torch.clamp(x, max=n)``; decided by
  ``jitcore.langctx.scalars``) it stays a name in the trace;
- a comparison (``n % 2 == 0``) is recorded the same way and gives a NumberProxy of a ``bool``;
- the truth of a number (``if n % 2 == 0:``, ``while i < n``, ``not n``) is guarded as a *predicate*
  where its inputs allow (Note [Predicate guards]): the outcome, recomputed from the inputs' values
  in the prologue, not the values themselves, so a counter that a branch tests does not make a new
  cache entry per value;
- every other use needs the value itself — an int in a shape or an index, formatting, hashing, a
  C function — and *specializes* the number: the value is returned and the dynamic inputs it was
  computed from are guarded by value, as if they had not been declared dynamic.

An ``ObjectProxy`` is the same for a value made anew by every call that is not a number (a datetime,
bytes, a UUID): passed on, formatted or compared as a number is; any other use needs its value.

Invariants:
- ``value`` is what the proxy computes for the call being traced; code outside this module and
  ``jitcore.langctx.python`` reads it only through ``specialize()``, which records the guards first
  (the grad transform reads ``value`` directly after specializing every input);
- ``roots`` are the dynamic inputs the value depends on (an input is its own root);
- the number's type (int or float) is guarded for every dynamic input, so the result type of every
  recorded arithmetic operation is fixed for the cache entry.
"""

from __future__ import annotations

import decimal
import fractions
import operator
from collections.abc import Callable
from typing import Any

import torch

from jitcore.ir import Proxy

__all__ = [
    "STAND_INS", "SYMBOLIC_NUMBERS", "NumberProxy", "ObjectProxy", "formula", "operations",
    "records_arithmetic", "replace_numbers", "specialize_all", "symbolic_number_class",
    "traced_symbol_values", "traced_value",
]


_SLOTS = frozenset(("name", "value", "roots", "on_specialize", "on_predicate", "specialized", "made_by",
                    "per_call"))


class NumberProxy(Proxy):
    """A named int or float whose value is an input of the trace."""

    __slots__ = tuple(sorted(_SLOTS))

    def __init__(self, name: str, value: int | float, roots: tuple[NumberProxy, ...] = (),
                 on_specialize: Callable[[], None] | None = None,
                 made_by: tuple[Callable[..., Any], tuple] | None = None) -> None:
        super().__init__(name)
        self.value = value
        self.roots = roots or (self,)
        self.on_specialize = on_specialize
        # an input's: guards the truth of a number computed from inputs; False when it cannot
        # (Note [Predicate guards])
        self.on_predicate: Callable[[NumberProxy, bool], bool] | None = None
        self.specialized = False  # set on an input once the program needed its value
        self.made_by = made_by  # (fn, operands) for a number computed by recorded arithmetic
        # read anew by every call (a clock, a draw: jit/nondeterministic.py): no call but this one has its
        # value, so a hash or an index of a number computed from it specializes (Note [Hashing a computed
        # number])
        self.per_call = False

    @property
    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        kind = type(self.value).__name__
        return f"{kind}, specialized to {self.value!r}" if self.specialized else kind

    def specialize(self) -> int | float:
        """The value, with the dynamic inputs it depends on guarded by value from now on."""
        for root in self.roots:
            if root.on_specialize is not None:
                root.on_specialize()
                root.specialized = True
        return self.value

    def __repr__(self) -> str:
        return repr(self.specialize())

    def __str__(self) -> str:
        return str(self.value_for_text())

    def __format__(self, spec: str) -> str:
        return format(self.value_for_text(), spec)

    def value_for_text(self) -> int | float:
        """The value, for making its text: a computed int's guarded as the predicate ``number == value``, any
        other specialized (Note [The text of a computed number])."""
        return self._value_by_predicate() if type(self.value) is int else self.specialize()

    def __hash__(self) -> int:
        return hash(self._value_by_predicate())  # Note [Hashing a computed number]

    def _value_by_predicate(self) -> int | float:
        """The value, guarded as the predicate ``number == value`` where the number is computed (Note
        [Hashing a computed number]); else specialized."""
        if self.made_by is not None and self.value == self.value and not any(r.per_call for r in self.roots) \
                and bool(self == self.value):
            return self.value
        return self.specialize()

    def __bool__(self) -> bool:
        outcome = bool(self.value)
        for root in self.roots:  # the prologue's guard (inputs only), or the computation's check (reads)
            hook = root.on_predicate
            if hook is not None and hook(self, outcome):
                return outcome
        return bool(self.specialize())

    def __int__(self) -> int:
        return int(self.specialize())

    def __float__(self) -> float:
        return float(self.specialize())

    def __complex__(self) -> complex:
        return complex(self.specialize())

    def __index__(self) -> int:
        if type(self.value) is not int:
            raise TypeError(f"'{type(self.value).__name__}' object cannot be interpreted as an integer")
        return self._value_by_predicate()  # ``range(n % 4)``: Note [Hashing a computed number]

    def __round__(self, ndigits: int | None = None) -> Any:
        return round(self.specialize(), ndigits)

    def __trunc__(self) -> int:
        return self.specialize().__trunc__()

    def __floor__(self) -> int:
        return self.specialize().__floor__()

    def __ceil__(self) -> int:
        return self.specialize().__ceil__()

    def __getattr__(self, name: str) -> Any:
        # ``n.real``, ``n.is_integer()``: the number's own attributes need its value. Other names
        # (duck-typing probes such as ``__tensor_flatten__``) are absent, as on a number.
        if name in _SLOTS:  # an instance made without __init__ (``object.__new__``): no value to ask
            raise AttributeError(f"'NumberProxy' object has no attribute '{name}'")
        if name.startswith("__") or not hasattr(type(self.value), name):
            raise AttributeError(f"'{type(self.value).__name__}' object has no attribute '{name}'")
        return getattr(self.specialize(), name)

    # --- comparisons are recorded; with a tensor, the tensor's reflected operator records them ----
    def __eq__(self, other: Any) -> Any:
        return _compare(operator.eq, self, other)

    def __ne__(self, other: Any) -> Any:
        return _compare(operator.ne, self, other)

    def __lt__(self, other: Any) -> Any:
        return _compare(operator.lt, self, other)

    def __le__(self, other: Any) -> Any:
        return _compare(operator.le, self, other)

    def __gt__(self, other: Any) -> Any:
        return _compare(operator.gt, self, other)

    def __ge__(self, other: Any) -> Any:
        return _compare(operator.ge, self, other)


class ObjectProxy(NumberProxy):
    """A value made anew by every call that is not a number (``datetime.now()``, ``uuid.uuid4()``,
    ``os.urandom(n)``: Note [Values made anew on every call], jitcore/jit/nondeterministic.py): a name
    passed on as a number's is; its items, length and iteration need its value, as its attributes do."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        return self.specialize()[key]

    def __len__(self) -> int:
        return len(self.specialize())

    def __iter__(self) -> Any:
        return iter(self.specialize())

    def __contains__(self, item: Any) -> bool:
        return item in self.specialize()


_NUMBERS = (int, float, bool)


# Numbers Python's own operators mix with an int or a float that no NumberProxy operation records: with
# one of them the number is specialized and the operation computed on its value (``randrange(9) * 1j``).
_VALUE_OPERANDS = (complex, fractions.Fraction, decimal.Decimal)


def _compare(op: Callable[[Any, Any], bool], a: NumberProxy, b: Any) -> Any:
    if isinstance(b, NumberProxy) or type(b) in _NUMBERS or type(b) in SYMBOLIC_NUMBERS:
        return _ARITHMETIC[0](op, a, b)
    if type(b) in _VALUE_OPERANDS:
        return op(a.specialize(), b)
    return NotImplemented


# Note [Hashing a computed number]
# ``seen.add(i % 4)``, ``counts[step // 10] += 1``: a set or dict hashes the number, which needs its value;
# specialized, it pinned the inputs it was computed from by value (``i == 5``), an entry per ``i``
# where ``i % 4`` takes four values. A hash depends only on the value, so a computed number (one made
# by recorded arithmetic, not a NaN) guards the predicate ``number == value`` instead (Note [Predicate
# guards]), and every call whose number has that value shares the entry. Where no root can guard a
# predicate, ``__bool__`` of the comparison specializes, as before. An input itself is guarded by
# value either way. ``__index__`` (``range(n % 4)``, ``xs[n % 4]``, a slice bound) needs only the value
# too: before, ``H.tags.update(f"t{k}" for k in range(n % 4))`` pinned ``n`` itself, an entry per call
# (12 in 12: /tmp/eff58-probes/genupd.py), now one per value of ``n % 4``. Not for a number computed from
# one read anew by every call (``range(10)[time.time_ns() % 10]``, ``{random.randrange(3): v}``): no
# entry could serve another call, which its predicate would check in the computation and miss on
# almost every call (a trace per call); it specializes, and the call runs eagerly (JC-T001, Note [Clock
# reads and random draws on every call], jit/nondeterministic.py).
# Note [The text of a computed number]
# ``metrics[f"loss_{i % 2}"].append(v)``, ``str(step % 4)``: the text of a computed number needs only its
# value, as its hash does (Note [Hashing a computed number]); specialized, it pinned the inputs it was
# computed from (``i == 10``), an entry per call (12 in 12: /tmp/eff58-probes/fstr_key.py). An int's text is
# a function of its value alone, so ``value_for_text`` guards ``number == value`` as ``__hash__`` does, and
# an entry serves every call whose number has that value (the inputs' types are guarded, so the computed
# number's type is the traced one's). Not a float: ``-0.0 == 0.0`` holds but their texts differ, so a float
# (and a bool, whose equality with an int also holds) is specialized, as before.
# Note [Predicate guards]
# A branch on a dynamic number (``if self.last_epoch % self.step_size != 0:`` in an LR scheduler, a
# counter that a schedule tests) needs only the branch's outcome, not the number's value. Guarding the
# value would make a new cache entry for every value of a counter the program increments. Instead,
# the inputs' provenance (``on_predicate``, set on each input) guards the outcome: the prologue
# recomputes the number from the inputs' values with ``formula`` and compares its truth with the
# traced one. A predicate whose inputs are not all such inputs (a number read from a tensor) falls back
# to specializing. A predicate whose recomputation raises (``n % m`` with m == 0) fails, so the call
# is traced again and raises where eager does. The prologue recomputes every predicate on every call,
# so a long one (``while n > 0: n -= 1`` makes the k-th test k operations deep) or one past a pass's
# budget of predicates specializes instead: one value guard is then cheaper than the predicates.
# ``n in container`` (``last_epoch in self.milestones``, a Counter) would hash the number: when the
# container holds constants and its ``in`` is CPython's own, it is recorded as ``operator.contains``
# of those constants instead (jitcore/langctx/python.py ``member``), a predicate like any other, and
# the container's members are guarded where its own guards do not fix them. C code that only compares
# (``bisect``) is handed the proxy, so each of its comparisons is a predicate.
# A number read from a tensor (``t.item()``, ``float(loss)``) is not known in the prologue: a predicate
# over one (``if loss.item() < best:``) is checked inside the computation where its operands are
# computed, as a read is (jitcore/jit/value_reads.py); a call whose outcome differs runs another entry.
# Every root's hook is asked, so a predicate mixing inputs and reads is checked in the computation.
_SIGNS = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
          operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.eq: "==",
          operator.ne: "!=", operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=",
          operator.lshift: "<<", operator.rshift: ">>", operator.and_: "&", operator.or_: "|",
          operator.xor: "^"}
_PREFIXES = {operator.neg: "-", operator.pos: "+", operator.invert: "~"}
_TEXT_LIMIT = 240


def operations(number: NumberProxy, limit: int) -> int:
    """How many recorded operations ``number`` is computed by (counting stops past ``limit``)."""
    seen: set[int] = set()
    pending = [number]
    while pending and len(seen) <= limit:
        node = pending.pop()
        if isinstance(node, NumberProxy) and node.made_by is not None and id(node) not in seen:
            seen.add(id(node))
            pending.extend(node.made_by[1])
    return len(seen)


def formula(number: NumberProxy) -> tuple[Callable[..., Any], Callable[[list[str]], str]]:
    """``number`` as a function of its roots' values (in ``number.roots`` order; it raises what Python
    raises for them), and as text over names for the roots. Each operation is computed once per call
    (the prologue runs this on every call)."""
    index = {id(r): i for i, r in enumerate(number.roots)}
    order = _operations_in_order(number, index)  # each shared operation once (n2 = n1 + n1)

    def compute(*roots: Any) -> Any:
        done: dict[int, Any] = {}

        def value(node: Any) -> Any:
            if not isinstance(node, NumberProxy):
                return node
            i = index.get(id(node))
            return roots[i] if i is not None else done[id(node)]

        for node in order:
            fn, operands = node.made_by
            done[id(node)] = fn(*(value(o) for o in operands))
        return value(number)

    def text(names: list[str]) -> str:
        done: dict[int, str] = {}

        def part(node: Any) -> str:
            if not isinstance(node, NumberProxy):
                return repr(node)
            i = index.get(id(node))
            return names[i] if i is not None else done[id(node)]

        for node in order:
            fn, operands = node.made_by
            parts = [part(o) for o in operands]
            if fn is operator.contains:
                done[id(node)] = f"({parts[1]} in {parts[0]})"
            elif fn in _SIGNS:
                done[id(node)] = f"({parts[0]} {_SIGNS[fn]} {parts[1]})"
            elif fn in _PREFIXES:
                done[id(node)] = f"{_PREFIXES[fn]}{parts[0]}"
            else:
                done[id(node)] = f"{getattr(fn, '__name__', fn)}({', '.join(parts)})"
        shown = part(number)  # a shared operand is written out at each use: cut what no one reads
        return shown if len(shown) <= _TEXT_LIMIT else shown[:_TEXT_LIMIT] + "..."

    return compute, text


def _operations_in_order(number: NumberProxy, roots: dict[int, int]) -> list[NumberProxy]:
    """The operations ``number`` is computed by, each once, operands before their users."""
    order: list[NumberProxy] = []
    seen: set[int] = set()

    def visit(node: Any) -> None:
        if not isinstance(node, NumberProxy) or id(node) in roots or id(node) in seen:
            return
        seen.add(id(node))
        for operand in node.made_by[1]:
            visit(operand)
        order.append(node)

    visit(number)
    return order


# How arithmetic on NumberProxies is recorded: the python language context's ``apply``, which registers
# itself when it is imported (the language contexts stand on the proxies: this module never imports them).
_ARITHMETIC: list[Callable[..., Any]] = []


def records_arithmetic(apply: Callable[..., Any]) -> Callable[..., Any]:
    """Register ``apply(fn, *operands)`` as what NumberProxy operators call (jitcore/langctx/python.py)."""
    _ARITHMETIC[:] = [apply]
    return apply


def _arithmetic(op: Callable[..., Any], *, reflected: bool = False) -> Callable[[NumberProxy, Any], Any]:
    def method(self: NumberProxy, other: Any) -> Any:
        if type(other) in _VALUE_OPERANDS:
            return op(other, self.specialize()) if reflected else op(self.specialize(), other)
        if not (isinstance(other, NumberProxy) or type(other) in _NUMBERS or type(other) in SYMBOLIC_NUMBERS):
            return NotImplemented  # a tensor's reflected operator (x.__rmul__(n)), a list's repetition, ...
        apply = _ARITHMETIC[0]
        return apply(op, other, self) if reflected else apply(op, self, other)

    method.__name__ = f"__{'r' if reflected else ''}{op.__name__.strip('_')}__"
    return method


def _unary(op: Callable[[Any], Any]) -> Callable[[NumberProxy], Any]:
    def method(self: NumberProxy) -> Any:
        return _ARITHMETIC[0](op, self)

    method.__name__ = f"__{op.__name__.strip('_')}__"
    return method


# Note [Bitwise operators of a dynamic number]
# ``1 << n``, ``n & 1``, ``n | m``, ``n ^ m`` and ``~n`` raised "unsupported operand type(s)" once ``n``
# became a dynamic number (test_int's test_pylong_roundtrip jitted, ``hibit = 1 << (bits - 1)``): the
# proxy had only the arithmetic operators. They are recorded as the arithmetic ones are.
_BITWISE = (operator.lshift, operator.rshift, operator.and_, operator.or_, operator.xor)
for _op in (operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
            operator.pow, *_BITWISE):
    _name = _op.__name__.strip("_")
    setattr(NumberProxy, f"__{_name}__", _arithmetic(_op))
    setattr(NumberProxy, f"__r{_name}__", _arithmetic(_op, reflected=True))
for _op in (operator.neg, operator.pos, operator.abs, operator.invert):
    setattr(NumberProxy, f"__{_op.__name__.strip('_')}__", _unary(_op))


def _with_value(name: str, op: Callable[[Any, Any], Any], *, reflected: bool = False) -> Callable[..., Any]:
    """An ObjectProxy's operator: recorded with another name as a number's (its result specializes
    both where it is no number: ``now() - start``), computed on its value with anything else
    (``now() > datetime(2000, 1, 1)``: the program needs the value)."""
    recorded = getattr(NumberProxy, name)

    def method(self: NumberProxy, other: Any) -> Any:
        if isinstance(other, NumberProxy):
            return recorded(self, other)
        value = self.specialize()
        return op(other, value) if reflected else op(value, other)

    method.__name__ = name
    return method


for _op in (operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
            operator.pow):
    _name = _op.__name__.strip("_")
    setattr(ObjectProxy, f"__{_name}__", _with_value(f"__{_name}__", _op))
    setattr(ObjectProxy, f"__r{_name}__", _with_value(f"__r{_name}__", _op, reflected=True))
for _op in (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
    setattr(ObjectProxy, f"__{_op.__name__}__", _with_value(f"__{_op.__name__}__", _op))
ObjectProxy.__hash__ = NumberProxy.__hash__  # type: ignore[method-assign]  # __eq__ set: keep the hash
del _op, _name


def specialize_all(tree: Any, kinds: type | tuple[type, ...] = NumberProxy) -> Any:
    """``tree`` (nested tuples, lists, dicts, slices) with each NumberProxy (each instance of ``kinds``: a
    TextProxy too) replaced by its specialized value.

    Only containers that hold one are copied; every other one is passed as the very object
    (``zip(opt.param_groups, lrs)`` must hand the optimizer's own dicts to the loop that writes them)."""
    return replace_numbers(tree, lambda number: number.specialize(), kinds)


def replace_numbers(tree: Any, replace: Callable[[Any], Any],
                    kinds: type | tuple[type, ...] = NumberProxy, _open: frozenset[int] = frozenset()) -> Any:
    """``tree`` with each instance of ``kinds`` replaced by ``replace(it)``, looking into tuples (named
    tuples too: Note [A named tuple handed to C holds values]), lists, dicts and slices (``x[:, a:b]``:
    torch reads the bounds as ints); only containers holding one are copied. A container reached again
    inside itself (``state.append(state)``) is passed as it is there: its numbers are replaced where it
    is first reached."""
    if isinstance(tree, kinds):
        return replace(tree)
    t = type(tree)
    if (t is tuple or t is list or t is dict) and id(tree) in _open:
        return tree
    if t is tuple or t is list:
        inner = _open | {id(tree)}
        items = [replace_numbers(v, replace, kinds, inner) for v in tree]
        return tree if all(a is b for a, b in zip(items, tree)) else t(items)
    if issubclass(t, tuple) and t.__flags__ & _HEAP_TYPE and id(tree) not in _open:
        items = [replace_numbers(v, replace, kinds, _open | {id(tree)}) for v in tree]
        return tree if all(a is b for a, b in zip(items, tree)) else _tuple_like(tree, items)
    if t is dict:
        inner = _open | {id(tree)}
        items = {k: replace_numbers(v, replace, kinds, inner) for k, v in tree.items()}
        return tree if all(items[k] is v for k, v in tree.items()) else items
    if t is slice:
        parts = (tree.start, tree.stop, tree.step)
        bounds = [replace_numbers(v, replace, kinds) for v in parts]
        return tree if all(a is b for a, b in zip(bounds, parts)) else slice(*bounds)
    return tree


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, namedtuple() or type()


# Note [A named tuple handed to C holds values]
# ``pickle.dumps(Point(n, 2))`` with ``n`` a dynamic number (an int argument that changed between calls)
# handed the named tuple to C as it was, proxy and all: pickle walked into the proxy's own state and
# raised where eager pickles. A tuple of a class made in Python (``collections.namedtuple``,
# ``typing.NamedTuple``, a ``class T(tuple)``) is looked into as a tuple is, and where it holds a number to
# replace, C gets a copy of the same class made by ``tuple.__new__`` (a named tuple's own ``_make`` does the
# same), with the instance's ``__dict__`` copied where it has one (pickle and ``copy`` read it as the
# state). A class whose nearest C base is not ``tuple`` (a structseq: ``tuple.__new__`` refuses it) is
# handed on as it is, as before.
def _tuple_like(tree: tuple, items: list) -> tuple:
    """A copy of the tuple-subclass instance ``tree`` holding ``items`` (Note [A named tuple handed to C
    holds values]); ``tree`` itself where its class cannot be made so."""
    try:
        made = tuple.__new__(type(tree), items)
    except TypeError:  # tuple.__new__(X) is not safe: a C base of its own
        return tree
    try:
        state = object.__getattribute__(tree, "__dict__")
    except AttributeError:  # __slots__ = (): a named tuple
        return made
    object.__getattribute__(made, "__dict__").update(state)
    return made


# The numbers of a ShapeEnv that a pass with symbolic sizes hands the program where eager has an int,
# float or bool (``x.shape[0]``: jitcore/jit/shapes.py).
SYMBOLIC_NUMBERS = (torch.SymInt, torch.SymFloat, torch.SymBool)

# Classes whose values stand for values of another class to the program (``type(v)`` answers that one):
# the id of a caller's tensor is an ``int`` (jitcore/jit/tensor_keys.py registers its class).
STAND_INS: dict[type, type] = {}


def symbolic_number_class(value: Any) -> type | None:
    """The class a symbolic number stands for (int, float or bool); None for any other value, and for a
    nested jagged tensor's ragged size or another SymInt with a C++ node (eager has those too)."""
    if type(value) not in SYMBOLIC_NUMBERS:
        return None
    node = getattr(value, "node", None)
    return None if node is None or node.is_nested_int() else node.pytype


def traced_symbol_values(env: Any) -> dict[Any, Any]:
    """The value each symbol of the ShapeEnv ``env`` had in the traced call (``var_to_val`` before torch
    2.12); a size that values decided (unbacked, Note [Sizes that values decide] in jitcore/jit/shapes.py)
    has the one the pass gave it."""
    backed = env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val
    return {**env.real_tensor_prop_unbacked_vals, **backed}


def traced_value(number: Any) -> Any:
    """The traced call's value of a symbolic number, without a guard; any other value (a nested int
    included) as it is."""
    kind = symbolic_number_class(number)
    if kind is None:
        return number
    node = number.node
    if node.hint is not None:
        return node.hint
    return kind(node.expr.xreplace(traced_symbol_values(node.shape_env)))
