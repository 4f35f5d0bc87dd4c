"""Function records differentiated alone, where pass 1 runs under torch's autograd.

An entry that keeps a dynamic number symbolic under autograd runs pass 1 itself (its torch-level calls)
under torch's autograd (Note [Dynamic numbers under autograd], jit_hook.py). A ``MyFn.apply`` record
there calls ``apply`` natively, and where the Function's forward makes tensor-subclass values (torchao's
``Float8Linear`` casts to ``Float8TrainingTensor`` inside its ``autograd.Function``), every cached call ran
the classes' ``__torch_dispatch__``, in the forward and in the backward. Such a record is split alone by
the grad transform: its own forward and backward traces (plain tensors and aten ops) behind one
autograd node (``GradComputation``), called in the record's place with the record's tensor arguments.
The numbers outside it stay symbolic, under torch's autograd as before.

Invariants:
- a record is replaced only where its own split is what eager computes on every call the entry takes:
  it takes plain tensors and Python numbers (no subclass value), the numbers names in its traces that
  torch decided nothing with (Note [A number a split Function takes]), holds no value read and computes
  no number but Python arithmetic on those it takes, each comparison of which its call checks (Note
  [Python arithmetic on a split Function's numbers], function_numbers.py),
  its arguments have static sizes or sizes of the pass, each read from one of its arguments (a multiple
  of it plus a constant too) or taken as the entry's size number (Note [A split Function over symbolic
  sizes]) and its replay assumes nothing
  more of them (what it assumes of an int it takes is a condition its call checks: Note [A split
  Function's int as a size], replayed_numbers.py), its traces rely on no argument's symbolic layout,
  and its backward writes no Python state;
- otherwise the record stays and calls ``apply`` natively, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

import optree
import sympy
import torch
from torch.overrides import TorchFunctionMode

from jitcore.diagnostics.boundary import on_error as prepare_error
from jitcore.executors import record_lowered
from jitcore.ir import BoundSymbol, Proxy, Symbol, Trace, walk
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.transforms.autograd import GradComputation
from jitcore.transforms.autograd_function import run_autograd_function
from jitcore.transforms.backward_effects import BackwardWatch, watching
from jitcore.transforms.backward_errors import RAISE
from jitcore.transforms.function_numbers import Condition, assumed_conditions, evaluate, interpreted_forward
from jitcore.transforms.grad import GradTraces, grad_transform
from jitcore.transforms.mincut import saved_for_fusion
from jitcore.transforms.replayed_numbers import Assumed
from jitcore.transforms.saved_values import SavedValues
from jitcore.transforms.symbolic_sizes import SymbolicSizes

__all__ = ["FunctionsSplit", "split_functions"]


@dataclasses.dataclass(frozen=True, slots=True)
class FunctionsSplit:
    """The Function records of pass 1 split alone, and their traces.

    Attributes:
        replacements: id of a record of pass 1 -> the record that calls its split in its place.
        backwards: the splits' backward traces, in the order of the records (each followed by its
            lowering, once lowered): what ``last_backward_traces`` shows for the entry.
        conditions: the comparisons the splits' forwards and backwards made of their numbers (the
            backward's are the entry's guards: Note [A split Function's backward computing with its
            numbers], function_numbers.py).
    """

    replacements: dict[int, BoundSymbol]
    backwards: list[Trace]
    conditions: list[Condition] = dataclasses.field(default_factory=list)

    def applied(self, trace: Trace) -> Trace:
        """``trace`` with the records replaced (a record not of pass 1 stays)."""
        if not self.replacements:
            return trace
        bound = [self.replacements.get(id(b), b) for b in trace.bound_symbols]
        return dataclasses.replace(trace, bound_symbols=bound)


def split_functions(trace: Trace, executor: Any, owner: Any, state: Callable[[], Any],
                    watched: list[Any], sizes: SymbolicSizes | None = None) -> FunctionsSplit:
    """The Function records of ``trace`` whose forward makes tensor-subclass values, each split alone
    where it can be (module docstring).

    Args:
        trace: pass 1 of an entry that runs under torch's autograd, holding no subclass value itself.
        executor: compiles each split's forward and backward together.
        owner: the JittedFunction whose errors the backwards raise (held weakly).
        state: a context manager factory putting the program's state back as pass 1 found it after
            the transform's replay (Note [The grad transform's replay writes no state], jit_hook.py).
        watched: the objects whose writes by a backward make a record stay.
        sizes: the pass's symbolic sizes (None: static), which a record's tensors may have (Note [A split
            Function over symbolic sizes]).
    """
    replacements: dict[int, BoundSymbol] = {}
    backwards: list[Trace] = []
    conditions: list[Condition] = []
    for bsym in trace.bound_symbols:
        split = _split(bsym, executor, owner, state, watched, backwards, sizes) \
            if _splittable(bsym, sizes) else None
        if split is not None:
            replacements[id(bsym)] = split
            conditions += split.symbol.fn.conditions
    return FunctionsSplit(replacements, backwards, conditions)


def _splittable(bsym: BoundSymbol, sizes: SymbolicSizes | None) -> bool:
    """Whether ``bsym`` applies a Function whose forward makes subclass values, over tensors only."""
    if "autograd_function" not in bsym.symbol.tags or not bsym.subsymbols:
        return False
    leaves = optree.tree_leaves((bsym.args, bsym.kwargs, bsym.output), none_is_leaf=True)
    if any(_number_argument(v) for v in optree.tree_leaves(bsym.output, none_is_leaf=True)):
        return False
    proxies = [v for v in leaves if isinstance(v, Proxy) and not _number_argument(v)]
    if any(not isinstance(v, TensorProxy) or isinstance(v, SubclassTensorProxy) for v in proxies):
        return False
    if not any(isinstance(v, TensorProxy) for v in proxies):
        return False
    if any(not _static(v) for v in proxies) and (sizes is None or _size_sources(bsym, sizes) is None) \
            and not _sized_by_its_numbers(bsym):
        return False
    inner = [sub for _depth, sub in walk(bsym.subsymbols)]
    if any(sub.symbol.tags & _NOT_SPLIT for sub in inner):
        return False
    roots = {id(r) for v in leaves if _number_argument(v) for r in v.roots}
    if any(isinstance(v, Proxy) and not isinstance(v, TensorProxy) and not _arithmetic_of(sub, v, roots)
           for sub in inner for v in optree.tree_leaves(sub.output, none_is_leaf=True)):
        return False  # a number the forward computes (a counter, a read): Note [Numbers a Function's ...]
    if _writes_an_argument(proxies, inner):
        return False
    return any(isinstance(v, SubclassTensorProxy)
               for sub in inner for v in optree.tree_leaves((sub.args, sub.output), none_is_leaf=True))


def _sized_by_its_numbers(bsym: BoundSymbol) -> bool:
    """Whether only outputs have symbolic sizes, in an entry whose numbers are sizes (``x.reshape(s, -1)``):
    the split's replay computes them from its stand-ins (Note [A split Function's int as a size],
    replayed_numbers.py)."""
    arguments = optree.tree_leaves((bsym.args[1:], bsym.kwargs), none_is_leaf=True)
    return any(_number_argument(v) and type(v.value) is int for v in arguments) \
        and all(_static(v) for v in arguments if isinstance(v, TensorProxy))


def _arithmetic_of(sub: BoundSymbol, value: Any, roots: set[int]) -> bool:
    """Whether ``value``, an output of ``sub``, is Python arithmetic on the record's numbers, which the
    split computes as the forward does (Note [Python arithmetic on a split Function's numbers],
    function_numbers.py)."""
    return isinstance(value, NumberProxy) and value.made_by is not None \
        and all(id(r) in roots for r in value.roots) \
        and not any(isinstance(v, TensorProxy) for v in optree.tree_leaves((sub.args, sub.kwargs)))


def _writes_an_argument(arguments: list[Proxy], inner: list[BoundSymbol]) -> bool:
    """Whether the forward writes in place into one of the record's tensors or a view of one: the
    split's node would not rebase the caller's tensor as ``apply`` with ``mark_dirty`` does."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        shadows = {id(a.shadow) for a in arguments if isinstance(a, TensorProxy)}

        def into_one(value: Any) -> bool:
            return isinstance(value, TensorProxy) and (
                id(value.shadow) in shadows or id(getattr(value.shadow, "_base", None)) in shadows)

        def writes(b: BoundSymbol) -> bool:
            in_place = "inplace" in b.symbol.tags or b.kwargs.get("inplace") is True
            return (in_place and bool(b.args) and into_one(b.args[0])) or into_one(b.kwargs.get("out"))

        return any(writes(b) for b in inner)


# Note [A number a split Function takes]
# A Function taking the scale of a float8-style cast (``Scaled.apply(x, w, scale)``, the scale a dynamic
# number changing per call) was never split: the record ran ``apply`` natively on every cached call, the
# subclass's ``__torch_dispatch__`` in its forward and backward with it (5 TwoTensor dispatches per warm
# call of tests/dispatch/test_subclasses_by_others_28.py's scaled pairs). Its numbers are arguments of
# the split: the grad transform hands the user's forward a stand-in for each (an unbacked SymFloat or
# SymInt, as for a read number under grad: Note [A read number under grad], replayed_numbers.py), which
# the fake tensors and autograd carry into the records of both traces (``mul(w, scale)`` in the backward,
# the number among the saved values). ``torch.tensor(scale)`` and ``x.new_tensor(scale)`` (a float8 cast's
# scale tensor) need the value in torch's factory: while the split is recorded they are made as
# ``torch.full((), scale)`` with the dtype and device torch gives them (``_ScalarTensorsOfStandIns``), the
# same values. Where torch decided something with one (``pow``'s backward, a size; the forward's own
# Python arithmetic and comparisons are recorded: Note [Python arithmetic on a split Function's numbers]),
# the transform raises or asks for the number's value (the ``_VALUE_USED`` check), and the record stays:
# ``apply`` runs as before. ``SplitCall`` compares each
# number's type with the traced one (an int where a float was traced runs ``apply``).
class _ScalarTensorsOfStandIns(TorchFunctionMode):
    """``torch.tensor(s)``, ``torch.as_tensor(s)`` and ``x.new_tensor(s)`` of a stand-in ``s`` (a SymFloat
    or SymInt) made as ``torch.full((), s)`` with the dtype and device torch gives them (Note [A number a
    split Function takes]): torch's factory needs the number's value."""

    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in (torch.tensor, torch.as_tensor) and len(args) == 1 and _stand_in(args[0]) \
                and set(kwargs) <= {"dtype", "device", "requires_grad"}:
            dtype = kwargs.get("dtype") or (torch.get_default_dtype() if isinstance(args[0], torch.SymFloat)
                                            else torch.int64)
            return torch.full((), args[0], dtype=dtype, device=kwargs.get("device"),
                              requires_grad=bool(kwargs.get("requires_grad", False)))
        if func is torch.Tensor.new_tensor and len(args) == 2 and _stand_in(args[1]) \
                and set(kwargs) <= {"dtype", "device", "requires_grad"}:
            base = args[0]
            return torch.full((), args[1], dtype=kwargs.get("dtype") or base.dtype,
                              device=kwargs.get("device") or base.device,
                              requires_grad=bool(kwargs.get("requires_grad", False)))
        return func(*args, **kwargs)


def _stand_in(value: Any) -> bool:
    return type(value) in (torch.SymFloat, torch.SymInt)


def _number_argument(value: Any) -> bool:
    """A Python int or float of the pass (a dynamic number, arithmetic on one, a read): the split takes it
    as an argument, a name in its traces (Note [A number a split Function takes])."""
    return isinstance(value, NumberProxy) and type(value.value) in (int, float)


def _value_used(*_args: Any) -> None:
    raise AssertionError("a split Function's number was used as a value")  # never run: the record stays


# the check ReplayedNumbers adds where torch used a number's value: then the record is not split
_VALUE_USED = BoundSymbol(
    Symbol(id="split_function_value_used", name="value_used", langctx="torch", fn=_value_used, path=None,
           meta=_value_used, tags=frozenset({"check"})), (), {}, None)


_NOT_SPLIT = frozenset({"check", "data_dependent", "backward", "per_call", "python_random", "random"})


_Source = tuple[int | None, int | None, int, int]  # (leaf, dim, scale, offset): _size_sources


# Note [A split Function over symbolic sizes]
# ``Scaled.apply(x, w, scale)`` on a batch whose size changes per call (/tmp/ao53-probes/p5_split_sizes.py):
# the entry keeps the batch size symbolic and runs pass 1 under torch's autograd, and the record was never
# split (its tensors have symbolic sizes): 5 TwoTensor dispatches on every warm call. The split is recorded
# with the pass's sizes, as the main grad transform replays an entry with symbolic sizes (Note [Symbolic
# sizes through the grad transform], symbolic_sizes.py): its shadows keep the pass's SymInts, the records'
# sizes are rewritten as the pass's size numbers, and those numbers are inputs of the split, which
# ``SplitCall`` reads from the call's tensors (each symbol is a size of one of the record's tensors: its
# ``(argument, dim)``). The entry's prologue checks what pass 1 assumed of the sizes; a split whose replay
# assumed more (a guard, an assert, a replacement) or relies on a symbolic layout stays a record.
def _size_sources(bsym: BoundSymbol, sizes: SymbolicSizes) -> dict[Any, _Source] | None:
    """symbol -> (argument among the record's leaves, dim of that tensor or None for a number taken as it
    is, scale, offset: the dim's size is ``scale * symbol + offset``) of each size symbol in the record's
    tensors (arguments and outputs), ``(None, None, 1, 0)`` for one no argument gives (the entry's own
    size number, taken by the record); None where a symbol is none of the pass's size numbers."""
    leaves = optree.tree_leaves((bsym.args[1:], bsym.kwargs), none_is_leaf=True)
    names = sizes.names()
    sources: dict[Any, _Source] = {}
    numbered = {id(n): symbol for symbol, n in names.items()}
    linear: list[tuple[Any, tuple[int, int, int, int]]] = []
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        for k, v in enumerate(leaves):
            if id(v) in numbered:  # a number the record takes that is a size (``x.reshape(n, -1)``)
                sources.setdefault(numbered[id(v)], (k, None, 1, 0))
            elif isinstance(v, TensorProxy):
                for d, n in enumerate(v.shadow.shape):
                    if type(n) is torch.SymInt and n.node.expr in names:
                        sources.setdefault(n.node.expr, (k, d, 1, 0))
                    elif type(n) is torch.SymInt and (found := _linear(n.node.expr, names)) is not None:
                        linear.append((found[0], (k, d, *found[1:])))  # Note [A size of a split's ...]
        for symbol, where in linear:  # a plain size where there is one
            sources.setdefault(symbol, where)
        everything = optree.tree_leaves((bsym.args, bsym.kwargs, bsym.output), none_is_leaf=True)
        for v in everything:
            if not isinstance(v, TensorProxy):
                continue
            shadow = v.shadow
            for n in (*shadow.shape, *shadow.stride(), shadow.storage_offset()):
                if type(n) is not torch.SymInt:
                    continue
                for symbol in n.node.expr.free_symbols - sources.keys():
                    if symbol not in names:
                        return None
                    sources[symbol] = (None, None, 1, 0)  # Note [A size of a split's tensor that is ...]
    return sources


# Note [A size of a split's tensor that is an expression]
# ``F.apply(x.flatten(0, 1), w, s)`` with ``x`` of size ``(s0, 2, 3)``: the record's tensor has size
# ``2*s0``, no plain size of any argument, so the record stayed (/tmp/ao54-probes/p8_split_sizes.py ``3d``:
# 5 TwoTensor dispatches per warm call). A size ``scale * s0 + offset`` (integers, ``scale`` not 0) gives
# ``s0`` as ``(size - offset) // scale`` of each call's tensor, exactly, for every call the entry's
# prologue accepts. A size of any other form (``s0*s1`` of ``x.flatten(0, 1)``, ``s0 // 2`` of
# ``x[: x.shape[0] // 2]``) gives no symbol back (/tmp/ao56-probes/p13_split_size_forms.py ``prod``, ``half``:
# the record stayed, 5 TwoTensor dispatches per warm call): the symbol is then the entry's own size number
# (a size input the prologue reads, or a size the computation computes before the record), passed to the
# split as a trailing argument of its record (``SplitCall.taken``). The prologue checks what pass 1
# assumed of it, and a split whose replay assumed more stays a record (``_split``), as for every size.
def _linear(expr: Any, names: dict[Any, NumberProxy]) -> tuple[Any, int, int] | None:
    """(symbol, scale, offset) where ``expr`` is ``scale * symbol + offset`` of one of ``names``."""
    free = expr.free_symbols
    if len(free) != 1 or not free <= names.keys():
        return None
    (symbol,) = free
    try:
        poly = sympy.Poly(expr, symbol)
    except sympy.PolynomialError:
        return None
    coeffs = poly.all_coeffs()
    if poly.degree() != 1 or not all(c.is_Integer for c in coeffs) or coeffs[0] == 0:
        return None
    return symbol, int(coeffs[0]), int(coeffs[1])


def _static(value: TensorProxy) -> bool:
    shadow = value.shadow
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        return all(type(n) is int for n in (*shadow.shape, *shadow.stride(), shadow.storage_offset()))


def _split(bsym: BoundSymbol, executor: Any, owner: Any, state: Callable[[], Any], watched: list[Any],
           backwards: list[Trace], sizes: SymbolicSizes | None) -> BoundSymbol | None:
    """The record calling ``bsym``'s split (its backward trace appended to ``backwards``); None where
    it stays (module docstring)."""
    leaves = optree.tree_leaves((bsym.args[1:], bsym.kwargs), none_is_leaf=True)
    args: list[Proxy] = []
    for v in leaves:
        if (isinstance(v, TensorProxy) or _number_argument(v)) and not any(v is a for a in args):
            args.append(v)
    # Note [A split Function over symbolic sizes]: each size a number the split takes, read per call
    sources = _size_sources(bsym, sizes) if sizes is not None else {}
    if sources is None:
        return None
    names = sizes.names() if sizes is not None else {}
    size_numbers = {id(names[symbol]): (names[symbol], where) for symbol, where in sources.items()}
    args = [a for a in args if id(a) not in size_numbers]
    read: list[tuple[int, int, int | None, int, int]] = []  # (position among the split's arguments, leaf,
    # dim, scale, offset)
    taken: list[NumberProxy] = []  # the entry's own size numbers, trailing arguments of the record
    for number, (leaf, dim, scale, offset) in size_numbers.values():
        if leaf is None:  # Note [A size of a split's tensor that is an expression]
            leaf = len(leaves) + len(taken)
            taken.append(number)
        read.append((len(args), leaf, dim, scale, offset))
        args.append(number)
    before = sizes.state() if sizes is not None else None
    asserted = len(sizes.asserts()) if sizes is not None else 0
    # Note [Python arithmetic on a split Function's numbers]: the forward interpreted, its branches checked
    cls, conditions = interpreted_forward(bsym.args[0])
    applied = dataclasses.replace(bsym, args=(cls, *bsym.args[1:]))
    alone = Trace(name="function_forward", args=args, bound_symbols=[applied], output=bsym.output)
    numbers = [v for v in args if isinstance(v, NumberProxy) and id(v) not in size_numbers]
    # Note [A number a split Function takes]: each a name, the check added where torch used its value
    reads = [(root, _VALUE_USED) for n in numbers for root in n.roots]
    watch = BackwardWatch(watched)
    assumed = Assumed() if numbers else False  # Note [A split Function's int as a size], replayed_numbers.py
    try:
        with state(), watching(watch), _ScalarTensorsOfStandIns() if numbers else contextlib.nullcontext():
            grad = grad_transform(alone, (), (), reads, sizes if sources else None, assumed)
        if assumed:
            conditions += assumed_conditions(assumed.conditions, assumed.names)
            assumed.sealed = True
    except Exception:  # noqa: BLE001 - the record stays: apply raises there what eager raises
        return None
    if sizes is not None and (sizes.state() != before or len(sizes.asserts()) != asserted):
        return None  # the replay assumed more of the sizes than the entry's prologue checks
    if (watch.effects is not None and watch.effects.writes) or grad.input_flags or grad.returned_inputs \
            or grad.fresh_leaves or grad.assembly is not None or grad.views is not None \
            or any(b.symbol is RAISE or b.symbol is _VALUE_USED.symbol for b in grad.forward.bound_symbols) \
            or any(b.symbol is RAISE for b in grad.backward.bound_symbols):
        return None
    positions = [next((k for k, a in enumerate(args) if a is v), None) if isinstance(v, Proxy) else None
                 for v in leaves]
    expected = _expected(args, grad)
    if expected is None:
        return None
    computation = _computation(grad, executor, owner, len(args), backwards)
    call = SplitCall(computation, positions, expected, _checked(args, conditions), tuple(read), len(taken))
    conditions.sealed = True  # Note [A split Function's backward computing with its numbers]
    symbol = Symbol(id="split_function", name="split_function", langctx="torch", fn=call, path=None,
                    meta=bsym.symbol.meta, tags=bsym.symbol.tags)
    header = f"{_function_name(bsym)}.apply, split alone: Note [A Function split alone]"
    return BoundSymbol(symbol, (*bsym.args, *taken), bsym.kwargs, bsym.output, bsym.subsymbols, bsym.source,
                       header)


# Note [A Function split alone]
# torchao's ``Float8Linear`` computes through ``matmul_with_hp_or_float8_args``, an ``autograd.Function``
# whose forward casts its plain arguments to ``Float8TrainingTensor`` and whose outputs are plain: pass 1
# holds no subclass value at its top level, so an entry with a dynamic number (AdamW's step-derived
# floats, a scale changing per call) runs pass 1 under torch's autograd, and the record called ``apply``:
# 12 ``__torch_dispatch__`` calls on every cached call of a two-layer step, forward and backward.
# Specializing the numbers so that the whole trace goes through the grad transform instead makes one
# entry per AdamW step. The record alone is what needs no number: the grad transform splits it, with
# the record's tensors as the inputs, into a forward and a backward over plain tensors (recorded from the
# user's forward and backward as for a whole program), and the computation calls that node in the
# record's place; the numbers around it stay symbolic, under torch's autograd.
# The split's traces are recorded for its arguments' metadata. Their sizes, dtypes and devices follow from
# the entry's guards (symbolic sizes read per call: Note [A split Function over symbolic sizes]), but the
# layout of a value the program computed, and the ``requires_grad`` of each, are not guarded: ``SplitCall``
# compares the strides and storage offset of each argument the traces rely on, and every ``requires_grad``,
# with the recorded ones, and calls ``apply`` natively (as before) where one differs. A record stays as it
# was where its split would not be eager's on every call: a number or subclass value among its arguments or
# outputs, a value read, a number computed or a random draw in its forward (which the split would fix), an
# in-place write into an argument (``mark_dirty``'s rebase), a backward that writes Python state or raises,
# outputs the node cannot hand back as they are (an input returned, a fresh leaf).
def _expected(args: list[Proxy], grad: GradTraces) -> tuple[tuple[int, Any, Any], ...] | None:
    """(position, (strides, storage offset) or None, requires_grad) of each tensor argument, (position,
    the number's type, None) of each number: what the split's traces were recorded for, where they rely
    on the layout (Note [A Function split alone])."""
    expected: list[tuple[int, Any, Any]] = []
    for k, a in enumerate(args):
        if isinstance(a, NumberProxy):
            expected.append((k, type(a.value), None))
            continue
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
            shadow = a.shadow
            layout = (tuple(shadow.stride()), shadow.storage_offset())
            requires_grad = shadow.requires_grad
        relied = grad.layout is not None and grad.layout.relies_on(a)
        if relied and any(type(n) is not int for n in (*layout[0], layout[1])):
            return None  # a symbolic layout no call could be compared with
        expected.append((k, layout if relied else None, requires_grad))
    return tuple(expected)


def _checked(args: list[Proxy], conditions: list[Condition]) -> tuple[tuple[tuple[int, int], ...],
                                                                     tuple[Condition, ...]]:
    """((position, id) of each number argument), the conditions over them (Note [Python arithmetic on a
    split Function's numbers])."""
    numbers = tuple((k, id(a)) for k, a in enumerate(args) if isinstance(a, NumberProxy))
    return (numbers if conditions else ()), tuple(conditions)


class SplitCall:
    """Calls a Function record's split with the record's arguments (``fn, *args, **kwargs`` as the
    record holds them, then the entry's size numbers it takes), or ``apply`` natively where an argument's
    layout or ``requires_grad`` is not what the split was recorded for (Note [A Function split alone])."""

    def __init__(self, computation: GradComputation, positions: list[int | None],
                 expected: tuple[tuple[int, Any, Any], ...],
                 checked: tuple[tuple[tuple[int, int], ...], tuple[Condition, ...]] = ((), ()),
                 sizes: tuple[tuple[int, int, int | None, int, int], ...] = (), taken: int = 0) -> None:
        self.computation = computation
        self.positions = positions  # per leaf of (args after the class, kwargs): its tensor argument
        self.expected = expected
        self.numbers, self.conditions = checked
        self.sizes = sizes  # (argument, leaf, dim, scale, offset) of each size the split takes
        self.taken = taken  # how many of the entry's size numbers trail the record's arguments

    def __call__(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        if self.taken:  # Note [A size of a split's tensor that is an expression]
            args, taken = args[:-self.taken], args[-self.taken:]
        else:
            taken = ()
        leaves = [*optree.tree_leaves((args, kwargs), none_is_leaf=True), *taken]
        tensors: list[Any] = [None] * len(self.expected)
        for leaf, k in zip(leaves, self.positions):
            if k is not None:
                tensors[k] = leaf
        for k, leaf, dim, scale, offset in self.sizes:  # Note [A split Function over symbolic sizes]
            tensors[k] = leaves[leaf] if dim is None else (leaves[leaf].shape[dim] - offset) // scale
        for k, layout, requires_grad in self.expected:
            t = tensors[k]
            if not (type(t) is layout if requires_grad is None else _as_recorded(t, layout, requires_grad)):
                return run_autograd_function(cls, *args, **kwargs)
        if self.conditions and not self._as_traced(tensors):
            return run_autograd_function(cls, *args, **kwargs)
        return self.computation(*tensors)

    def _as_traced(self, arguments: list[Any]) -> bool:
        """Whether each comparison the forward made of its numbers comes out as traced for these."""
        values = {key: arguments[k] for k, key in self.numbers}
        try:
            return all(evaluate(c.predicate, values) == c.outcome for c in self.conditions)
        except Exception:  # noqa: BLE001 - apply raises what the forward raises eagerly
            return False


def _function_name(bsym: BoundSymbol) -> str:
    cls = bsym.args[0] if bsym.args else None
    return getattr(cls, "__qualname__", "Function")


def _computation(grad: GradTraces, executor: Any, owner: Any, n_inputs: int,
                 backwards: list[Trace]) -> GradComputation:
    """The autograd node running ``grad``'s traces, compiled together (as ``differentiate`` does); the
    backward trace and its lowering are recorded into ``backwards``."""
    jfn = weakref.ref(owner)

    def on_error(exc: BaseException) -> None:
        if jfn() is not None:
            prepare_error(jfn(), exc)

    def for_fusion(fusible: Any) -> tuple[Trace, Trace] | None:
        return saved_for_fusion(grad.forward, grad.forward_body, grad.backward, grad.backward_body, fusible)

    backwards.append(grad.backward)
    saved = SavedValues(grad.forward.output[1], record_lowered([grad.forward]))
    select = executor.compile_together(
        (grad.forward, grad.backward), (saved.lowered, record_lowered(backwards)), for_fusion)
    return GradComputation(grad, saved.tracking(select), n_inputs, on_error, saved.of)


def _as_recorded(t: Any, layout: tuple[tuple[int, ...], int] | None, requires_grad: bool) -> bool:
    return type(t) in _PLAIN and t.requires_grad == requires_grad and (
        layout is None or (t.stride(), t.storage_offset()) == layout)


_PLAIN = (torch.Tensor, torch.nn.Parameter)
