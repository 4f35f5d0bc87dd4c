"""Dynamic shapes: which input sizes a trace keeps symbolic, and the entry such a trace becomes.

``jitcore.jit(fn, dynamic=None|True|False)`` has torch.compile's meaning:
- ``None`` (automatic): every input is static until a dimension of it is seen with two different
  sizes; the next trace makes that dimension symbolic (it stays so for that input);
- ``True``: every dimension of every argument tensor is symbolic from the first call (module
  parameters and buffers stay static);
- ``False``: every size is static (an entry per shape), except dimensions marked with
  ``jitcore.mark_dynamic(t, dim)``, which are symbolic in every mode.
The sizes of a value-shaped op's outputs (``x[mask]``) become symbolic the same way once seen to
change (Note [Sizes that values decide]).

A symbolic dimension is a symbol of the pass's ShapeEnv (``s0``, ``s1``, ...) on the input's shadow
(jitcore/langctx/shadows.py); torch computes every size from it and records, as guards, whatever it
assumed (0 and 1 are specialized, relations between inputs, every size Python code compared or used
as an int). After the pass, ``finish`` turns the trace into one that runs for every size the guards
accept: each symbol is an input of the computation read from its tensor (``s0 = x.shape[1]`` in the
prologue), each size an op was given (``view``, ``expand``, ``arange(n)``) is computed from them by
recorded arithmetic (``n1 = operator.mul(s0, 4)``), and each ShapeEnv guard is a ``shape`` check of
the prologue.

Invariants:
- a cached call never returns what eager would not: every guard the ShapeEnv produced is checked,
  and a size the program read in Python is guarded or specialized by torch itself;
- what the symbolic path cannot handle (a tensor-subclass output whose flatten ctx holds a size: Note
  [Subclass values' sizes]; a nested jagged tensor's ragged sizes are symbolic: jitcore/jit/ragged.py;
  side effects holding sizes, a size expression without a Python form, a size only a stride determines)
  raises StaticShapes: the jit traces the call again with static shapes and logs why
  (docs/user-guide.md, "When jitcore retraces"); where the pass gave subclass inputs symbolic sizes,
  only those become static (StaticSubclassShapes; Note [Subclass inputs that follow an inner tensor],
  jitcore/jit/subclass_inputs.py);
- a symbolic entry of a plain program is never differentiated by the grad transform: its sizes are
  numbers of the computation, so it runs under torch's autograd (Note [Dynamic numbers under
  autograd]); one of a tensor-subclass program is, where the replay keeps its sizes symbolic (Note
  [Symbolic sizes through the grad transform], jitcore/transforms/symbolic_sizes.py).
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable
from typing import Any

import optree
import sympy
import torch

from jitcore.ir import BoundSymbol, TraceContext, tracing
from jitcore.jit.dynamic_marks import marked_dims
from jitcore.jit.ragged import is_nested_symbol
from jitcore.langctx.reads import SHAPE_OF, SIZE_OF, ReadSite, ValueCheckFailed
from jitcore.prologue import Guard, Path
from jitcore.prologue.shape_guards import ShapeCondition
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import SYMBOLIC_NUMBERS, NumberProxy
from jitcore.proxies.subclass import SubclassTensorProxy, inner_tensors_first
from jitcore.transforms.symbolic_sizes import SymbolicSizes, condition_check, map_symbolic

__all__ = ["ShapePolicy", "StaticShapes", "StaticSubclassShapes", "finish", "is_symbolic"]



# Note [Sizes that values decide]
# A value-shaped op (``nonzero``, ``x[mask]``, ``masked_select``, ``unique``: jit/value_reads.py) gets
# outputs with the sizes the probe's values give, each checked on every call: a call whose mask has
# another count goes to another entry, one entry per count (a loss over ``y > 0`` traced again on
# most calls). When such a check fails on a cached call (``ShapePolicy.note_read``), the dimensions
# that changed are symbols in the function's next traces, as an input's dimension becomes symbolic
# once seen with two sizes: the output's shadow gets an unbacked symbol of the pass's ShapeEnv
# (``u0``, no value to guard on), torch computes the sizes of everything after it from the symbol,
# and ``finish`` reads the symbol from the output after the op on every call
# (``u0 = jitcore.langctx.reads.size_of(t1, 0)``), so a ``view``, ``new_zeros`` or ``arange`` of it
# takes each call's size. The check still compares the other sizes. A pass also remembers each
# site's traced sizes (``ShapePolicy.read_dims``): a site that traces another size than the last
# pass did is symbolic from then on, even where its own check was never reached.
# What torch cannot decide about such a size without its value (a branch on ``len(x[mask]) > 4``,
# two masks' sizes compared, as ``mse_loss`` compares its inputs', ``int(n)``) it decides with the
# traced value (the ShapeEnv's ``real_tensor_prop_unbacked_vals``), as a deferred runtime assert;
# ``finish`` checks each such condition in the computation once its sizes are read
# (``check_read(<the size condition u0 > 4>, True, ...)``), so a call on which it does not hold goes
# to another entry: one entry per outcome, not per count (``int(n)`` pins the count itself). What the
# symbolic path cannot handle (a size stored into Python state, any error) traces the call again
# with static sizes for value-shaped outputs (``refuse_reads``, logged). ``dynamic=False`` keeps
# them static.


# Note [Counts that values decide]
# An integer read with ``item()`` or ``tolist()`` is a name of the computation, checked by value where
# the program needs its value (Note [The numbers of tolist], jit/value_reads.py): given as a size
# (``x.split(counts.tolist())``, an MoE's tokens per expert), it is one entry per value. When such a
# check fails on a cached call, the read's numbers are unbacked symbols of the ShapeEnv in the
# function's next traces, as a value-shaped output's sizes are: the program gets a SymInt (``u0``)
# whose traced value torch uses where it cannot decide without one (a deferred runtime assert, as
# ``Eq(u0 + u1 + u2, 8)`` for the split, each checked by the computation once its sizes are known),
# torch computes every size after it from the symbol, and ``finish`` names it by the read's own
# number (``[n0, n1, n2] = torch.Tensor.tolist(t0)``; ``torch.split(t2, [n0, n1, n2])``), so a call
# with other counts runs the same entry. Every element of a ``tolist()`` is one site; a float or bool
# read stays a checked name. A site is a symbol from the next trace on as well when a pass pinned other
# values at it than the pass before (``ShapePolicy.numbers_traced``): a miss on the input's shape
# teaches it as a failed check does, so ``v.split(lengths.tolist())`` with ``len(v)`` changing too
# is general from the third call, not one entry per list of lengths. A condition may relate the
# counts to an input's symbolic size (a split's lengths sum to ``v``'s: ``Eq(u0 + u1 + u2, s0)``): it
# is checked once the counts are read, with the input's size a size input of the computation, so a
# call whose lengths do not sum to its size goes to another entry, where torch raises as eagerly.


def _number_site(site: ReadSite) -> tuple | None:
    """The policy's key of an integer read's site: an ``item()``, or a whole ``tolist()`` (its elements'
    sites are ``tolist()[i]...``); None for other reads."""
    if site.what == "item()" or site.what.startswith("tolist()["):
        return site.what.split("[", 1)[0], site.key[1]
    return None


# Note [Strides seen to change]
# An input may come back with the sizes it was traced with but other strides: a window of a buffer
# that grows (a sliding-window KV cache keeps ``full[:, :, -w + 1:]`` of a concatenation whose length
# is the prompt's, so its strides are the prompt's too). Where the trace relied on those strides (a
# decision to copy or not, made from a layout that derives from the input: Note [Strides apart from the
# storage offset] in jitcore/langctx/layout.py), the prologue checked them, and every prompt length was
# one more entry. In automatic mode, the strides of an input that changed at the same sizes are
# symbols in the function's next traces (``StatelessSymbolicContext``'s ``dynamic_strides``), as a
# dimension seen with two sizes is: the prologue reads them (``s3 = args[1].stride()[1]``) and checks
# what torch assumed of them (a contiguity decision: the guards of that decision), not their values.
# The storage offset is then not checked unless an op took absolute offsets: torch keeps the offset of
# a tensor with static sizes static, so an offset that was relied on still pins the entry.


# Note [A miss for another reason with other sizes]
# A miss is reported by the first check of each entry that fails, and an input's sizes are checked after
# the state the program reads: a training step's first call sees every ``p.grad`` None, its second a
# tensor, so the second call misses on ``weight.grad == None`` whatever its batch size. That miss says
# nothing of the sizes, and a static pass used to follow: with the batch size changing on every call,
# the third call missed on the shape and traced a third, symbolic entry. As torch.compile's automatic
# dynamic compares each input's sizes with the last frame's whatever made it recompile, a pass also
# has a ShapeEnv when a tensor input of the last trace, at the same path, comes with other sizes
# (``ShapePolicy._sizes_changed``); ``dims_for`` then makes exactly those dimensions symbols.


class StaticShapes(Exception):
    """The symbolic path cannot handle this program; the message says why (it is logged)."""


class StaticSubclassShapes(StaticShapes):
    """The symbolic path cannot handle this program's subclass inputs with symbolic sizes; their sizes
    are static from now on, other inputs' may still be symbolic."""


class ShapePolicy:
    """One jitted function's choice of symbolic dimensions (the ``dynamic=`` option), and what its
    misses taught it (automatic mode)."""

    def __init__(self, dynamic: bool | None) -> None:
        if dynamic not in (None, True, False):
            raise ValueError(f"dynamic must be None, True or False, not {dynamic!r}")
        self.dynamic = dynamic
        self.refused: str | None = None  # why the symbolic path is off for this function (logged once)
        self._seen: dict[Path, tuple[int, ...]] = {}  # the last shape of each tensor input
        self._dims: dict[Path, frozenset[int]] = {}  # dimensions found to change (automatic mode)
        # Note [Strides seen to change]: the last strides of each tensor input, and those found to change
        self._strides_seen: dict[Path, tuple[int, ...]] = {}
        self._stride_dims: dict[Path, frozenset[int]] = {}
        # Note [Sizes that values decide]: value-shaped outputs' dimensions found to change, by site key
        self._read_dims: dict[tuple, frozenset[int]] = {}
        self._read_seen: dict[tuple, tuple[int, ...]] = {}  # the last traced shape of each
        self.reads_refused: str | None = None  # why value-shaped outputs keep static sizes (logged)
        # why subclass inputs keep static sizes (logged; Note [Subclass inputs that follow an inner
        # tensor], jit/subclass_inputs.py)
        self.subclasses_refused: str | None = None
        # Note [Counts that values decide]: the sites of integers read with item()/tolist() found to change
        self._read_numbers: set[tuple] = set()
        self._read_numbers_seen: dict[tuple, list[int]] = {}  # the values each site pinned in the last pass

    def symbolic_pass(self, args: tuple, kwargs: dict, shape_changed: bool, numbers: bool = False) -> bool:
        """Whether the next trace should have a ShapeEnv: sizes may be symbolic in it (``numbers``: the
        call has dynamic numbers, which are symbols where they are sizes: jit/number_sizes.py)."""
        if self.refused is not None:
            return False
        if numbers and self.dynamic is not False:
            return True
        learnt = self._dims or self._stride_dims
        if self.dynamic is True or (self.dynamic is None and (shape_changed or learnt)):
            return True
        if self.dynamic is None and self._sizes_changed(args, kwargs):  # Note [A miss for another reason
            return True  # with other sizes]
        if (self._read_dims or self._read_numbers) and self.reads_refused is None:
            return True
        return any(marked_dims(t) for t in _tensors((args, kwargs)))

    def _sizes_changed(self, args: tuple, kwargs: dict) -> bool:
        """Whether a tensor input the last trace saw (by path) has other sizes in this call, with as many
        dimensions: those ``dims_for`` makes symbolic (Note [A miss for another reason with other sizes])."""
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - no subclass code for jitcore's reads
            for path, shape in self._seen.items():
                try:
                    value = path.get(args, kwargs)
                    if isinstance(value, torch.Tensor) and value.dim() == len(shape) and value.shape != shape:
                        return True
                except Exception:  # noqa: BLE001, S112 - a path this call does not have: no size to compare
                    continue
        return False

    def note_read(self, failed: ValueCheckFailed) -> None:
        """A cached call's value check failed: where it is the sizes of a value-shaped output that
        changed, those dimensions are symbols in the next trace (Note [Sizes that values decide])."""
        site, expected, got = failed.site, failed.expected, failed.got
        if self.dynamic is False or self.refused is not None or self.reads_refused is not None:
            return
        key = _number_site(site)
        if key is not None and type(expected) is int and type(got) is int:
            self._read_numbers.add(key)  # Note [Counts that values decide]
            return
        if not site.what.startswith(SHAPE_OF) or len(expected) != len(got):
            return
        for part, (before, now) in enumerate(zip(expected, got)):  # the sizes of each output
            self._note_changed((site.key, part), before, now)

    def read_dims(self, site: ReadSite, part: int, shape: tuple[int, ...]) -> frozenset[int]:
        """The dimensions of output ``part`` of the value-shaped op checked at ``site`` that are symbols
        in a symbolic pass: those seen to change, by a failed check or by a pass that traced another
        size than the last one did (``shape``: the size now, remembered)."""
        if self.dynamic is False or self.refused is not None or self.reads_refused is not None:
            return frozenset()
        key = (site.key, part)
        before, self._read_seen[key] = self._read_seen.get(key), shape
        if before is not None:
            self._note_changed(key, before, shape)
        return self._read_dims.get(key, frozenset())

    def _note_changed(self, key: tuple, before: tuple, now: tuple) -> None:
        """The dimensions of a value-shaped output whose sizes differ (None: not compared) are symbols."""
        changed = frozenset(i for i, (a, b) in enumerate(zip(before, now)) if a is not None and a != b)
        if changed and len(before) == len(now):
            self._read_dims[key] = self._read_dims.get(key, frozenset()) | changed

    def read_number(self, site: ReadSite) -> bool:
        """Whether the integer read at ``site`` (``item()``, an element of ``tolist()``) is an unbacked
        symbol in a symbolic pass: its value was seen to change (Note [Counts that values decide])."""
        if self.dynamic is False or self.refused is not None or self.reads_refused is not None:
            return False
        return _number_site(site) in self._read_numbers

    def numbers_traced(self, pinned: list[tuple[ReadSite, int]]) -> bool:
        """Remember the integers a pass read and pinned (their value was needed: a size, an index; or
        a constant of a subclass's code), by site and order of reading: a site that pinned other
        values than the last pass did is a symbol from then on, as if its check had failed (Note
        [Counts that values decide]). Returns whether a site became a symbol."""
        if self.dynamic is False or self.refused is not None or self.reads_refused is not None:
            return False
        learnt = False
        traced: dict[tuple, list[int]] = {}
        for site, value in pinned:
            key = _number_site(site)
            if key is not None:
                traced.setdefault((key, site.what), []).append(value)
        for place, values in traced.items():
            before = self._read_numbers_seen.get(place)
            self._read_numbers_seen[place] = values
            if before is not None and before != values and place[0] not in self._read_numbers:
                self._read_numbers.add(place[0])
                learnt = True
        return learnt

    def refuse_reads(self, reason: str) -> None:
        """Value-shaped outputs keep static sizes from now on (the symbolic pass could not use them)."""
        self.reads_refused = reason

    def dims_for(self, path: Path, tensor: torch.Tensor) -> frozenset[int]:
        """The dimensions of the input ``tensor`` (found at ``path``) that the pass makes symbolic."""
        dims = marked_dims(tensor)
        if self.dynamic is True and path.root.kind in ("args", "kwargs"):
            return frozenset(range(tensor.dim()))
        if self.dynamic is None:
            before = self._seen.get(path)
            changed = frozenset(i for i, (a, b) in enumerate(zip(before or (), tensor.shape)) if a != b)
            if before is not None and len(before) == tensor.dim() and changed:
                self._dims[path] = self._dims.get(path, frozenset()) | changed
            dims |= self._dims.get(path, frozenset())
        return frozenset(d for d in dims if d < tensor.dim())

    def stride_dims_for(self, path: Path, tensor: torch.Tensor) -> frozenset[int]:
        """The dimensions of the input ``tensor`` (at ``path``) whose strides the pass makes symbolic:
        those seen to change at the same sizes (automatic mode; Note [Strides seen to change])."""
        if self.dynamic is not None or tensor.layout is not torch.strided:
            return frozenset()
        before, shape = self._strides_seen.get(path), self._seen.get(path)
        if before is not None and shape == tuple(tensor.shape) and len(before) == tensor.dim():
            changed = frozenset(i for i, (a, b) in enumerate(zip(before, tensor.stride())) if a != b)
            if changed:
                self._stride_dims[path] = self._stride_dims.get(path, frozenset()) | changed
        return self._stride_dims.get(path, frozenset())

    def seen(self, paths: list[Path], tensors: list[torch.Tensor]) -> None:
        """Remember the shapes and strides of a traced call's tensor inputs."""
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - no subclass code for jitcore's reads
            for path, tensor in zip(paths, tensors):
                self._seen[path] = tuple(tensor.shape)
                if tensor.layout is torch.strided and not tensor.is_nested:
                    self._strides_seen[path] = tuple(tensor.stride())

    def refuse_subclasses(self, reason: str) -> None:
        """Subclass inputs keep static sizes from now on (a pass that gave them symbolic ones failed)."""
        self.subclasses_refused = reason

    def refuse(self, reason: str) -> None:
        """Turn the symbolic path off for this function (traces are static from now on)."""
        self.refused = reason


def finish(program: Any, provenance: Any, values: Any,
           read_sizes: dict[sympy.Symbol, tuple[Any, int, int]] | None = None,
           read_numbers: dict[sympy.Symbol, NumberProxy] | None = None,
           number_sizes: dict[sympy.Symbol, tuple[Path, NumberProxy, torch.SymInt]] | None = None,
           ) -> list[str]:
    """Make a pass's trace run for every size its ShapeEnv's guards accept (see the module docstring).

    Args:
        program: the TracedProgram (its trace, prologue and number inputs are completed).
        provenance: the pass's Provenance (its tensor inputs and their paths).
        values: the pass's TensorValues (its ShapeEnv).
        read_sizes: the sizes that values decided, each with the output and dimension it is the size
            of and its traced value (``ValueReads.sizes``, Note [Sizes that values decide]).
        read_numbers: the integers read with ``item()``/``tolist()`` that are symbols, each with the
            read's number (``ValueReads.number_symbols``, Note [Counts that values decide]).
        number_sizes: the dynamic numbers given as sizes that are symbols, each with its input's path,
            the input and its SymInt (``NumberSizes.symbols``, Note [Dynamic numbers as sizes] in
            jitcore/jit/number_sizes.py).

    Returns:
        The symbolic sizes, described (``args[0].shape[1] (s0)``); empty when every size was static.

    Raises:
        StaticShapes: the symbolic path cannot handle this program.
    """
    env = values.shape_env
    read_sizes, read_numbers, number_sizes = read_sizes or {}, read_numbers or {}, number_sizes or {}
    dynamic = [(path, proxy) for path, proxy, _t in provenance.inputs if _has_symbols(proxy.shadow)]
    if not dynamic and not read_sizes and not read_numbers and not number_sizes:
        return []
    # a pass that gave subclass inputs symbolic sizes falls back to static ones for those only
    error = StaticSubclassShapes if provenance.symbolic_subclass_inputs else StaticShapes
    if _symbolic_nested_input(provenance.subclass_inputs, env) is not None:
        raise StaticShapes("a nested jagged tensor has a symbolic size other than its ragged one")
    rebuilt = _rebuilt_subclass_values(program.trace, provenance.subclass_inputs)
    if program.effects is not None and _holds_sizes(program.effects.constants()):
        # a size stored into state is computed per call where it is a slot (Note [A size stored into
        # state], jit/effects.py); elsewhere it would be the traced one on every call
        raise StaticShapes("a size is stored into Python state by a side effect, which keeps static shapes")
    layouts = provenance.bound_layouts
    if any(not _same_layout(_layout(proxy.shadow), layouts[id(proxy)]) for _path, proxy in dynamic):
        raise StaticShapes("an input's shape or strides changed in place (resize_, squeeze_, t_, ...)")
    sources = _symbol_sources(dynamic)
    rewriter = _SizeRewriter(program, env, sources, read_sizes, read_numbers, number_sizes)
    rewriter.rewrite_trace(rebuilt, error)
    program.outer_layouts = rewriter.layouts
    if dynamic or number_sizes:
        _add_guards(program, env, dynamic, number_sizes)
    described = [f"{path.describe()}.shape[{i}] ({expr})" for path, proxy in dynamic
                 for i, size in enumerate(proxy.shadow.shape)
                 if type(size) is torch.SymInt and not (expr := env.simplify(size.node.expr)).is_number]
    # a stride that is a symbol of its own (Note [Strides seen to change]) makes the entry symbolic too
    described += [f"{path.describe()}.stride()[{i}] ({expr})" for path, proxy in dynamic
                  for i, stride in enumerate(proxy.shadow.stride())
                  if type(stride) is torch.SymInt and (expr := env.simplify(stride.node.expr)).is_symbol]
    return described + [f"{proxy.name}.shape[{dim}] ({symbol}, decided by values)"
                        for symbol, (proxy, dim, _size) in read_sizes.items()] + [
        f"{number.name} ({symbol}, read from values)" for symbol, number in read_numbers.items()] + [
        f"{path.describe()} ({symbol})" for symbol, (path, _number, _size) in number_sizes.items()]


# Note [Subclass values' sizes]
# A subclass value's outer shape and strides are arguments of the record that rebuilds it from its
# inner tensors (``unflatten_tensor_subclass(TwoTensor, {...}, ctx, (s0, 4), (4, 1))``, made when pass 2
# is flattened), and of the record that restrides an argument taken whole (``x.t_()``). Built from the
# shadow, a symbolic one would be the pass's SymInt, handed to the caller as the output's shape
# (``torch.Size([s0])``); so ``finish`` computes, for each subclass value pass 2 builds or restrides
# (``_rebuilt_subclass_values``: the outputs, their inner subclass values, the subclass inputs), its
# outer sizes, strides, storage offset and flatten ctx from the size inputs, as it computes the sizes
# ops are given (``TracedProgram.outer_layouts``; the arithmetic precedes the trace's output), and
# pass 2's records take those. Intermediate subclass values are never built at run time: their sizes
# need nothing. A flatten ctx holding a symbolic size inside an object raises StaticShapes (the
# subclass inputs' sizes alone become static where they were symbolic: Note [Subclass inputs that
# follow an inner tensor], jit/subclass_inputs.py). A nested jagged tensor's ragged sizes are constants
# of the trace (its nested int) and stay as they are (jitcore/jit/ragged.py), in its strides too
# (``4*j``); its other sizes are computed as any subclass value's. Its class rebuilds a real value from
# the inner tensors alone (``__tensor_unflatten__`` reads the outer sizes of fake ones only), and its
# flatten ctx holds no size, so one the program makes from symbolic inputs (``as_nested_tensor([a, b])``
# of tensors whose every size is a symbol: its feature size too) keeps them symbolic. A nested jagged
# input with a symbolic size other than a ragged one traces static shapes, as before.
def _symbolic_nested_input(inputs: list[tuple[SubclassTensorProxy, Path]],
                           env: Any) -> SubclassTensorProxy | None:
    """A nested jagged input with a symbolic size or stride other than a ragged one, or None (Note
    above)."""
    def symbolic(size: Any) -> bool:
        if type(size) is not torch.SymInt:
            return False
        expr = env.simplify(size.node.expr)
        return not expr.is_number and not any(is_nested_symbol(env, s) for s in expr.free_symbols)

    for value, _path in inputs:
        shadow = value.shadow
        if _is_jagged(value) and (any(map(symbolic, shadow.shape)) or any(map(symbolic, shadow.stride()))):
            return value
    return None


def _is_jagged(value: SubclassTensorProxy) -> bool:
    # Note [jitcore's reads of a shadow] (transforms/jit_hook.py): the codebook dequantizes for layout
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
        return value.shadow.layout is torch.jagged


def _rebuilt_subclass_values(trace: Any,
                             inputs: list[tuple[SubclassTensorProxy, Path]]) -> list[SubclassTensorProxy]:
    """The subclass values pass 2 may build or restride: the trace's outputs, the subclass values inside
    them, and the subclass inputs (Note above)."""
    found: dict[int, SubclassTensorProxy] = {}
    leaves = optree.tree_leaves(trace.output, none_is_leaf=True)
    stack = [v for v in leaves if isinstance(v, SubclassTensorProxy)]
    stack += [proxy for proxy, _path in inputs]
    given = {id(proxy) for proxy, _path in inputs}
    while stack:
        value = stack.pop()
        if id(value) not in found and not (id(value) in given and _is_jagged(value)):  # an input's ragged
            found[id(value)] = value  # sizes are constants of the trace
            stack.extend(v for v in value.inner_tensors().values() if isinstance(v, SubclassTensorProxy))
    return list(found.values())


def _holds_sizes(tree: Any) -> bool:
    """Whether a symbolic size is reachable from ``tree`` (containers and objects' attributes)."""
    stack, seen = [tree], set()
    while stack:
        value = stack.pop()
        if isinstance(value, SYMBOLIC_NUMBERS):
            return True
        if id(value) in seen or isinstance(value, (torch.Tensor, type, str, bytes, int, float)):
            continue
        seen.add(id(value))
        if isinstance(value, (tuple, list, set, frozenset)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif hasattr(value, "__dict__") and not callable(value):
            stack.extend(vars(value).values())
    return False


def is_symbolic(prologue: Any) -> bool:
    """Whether a cache entry's prologue accepts tensors of more than one shape (its sizes are
    checked by ``shape`` guards): the cache files it under every dispatch key."""
    return any(g.kind == "tensor" and None in g.expected.shape for g in prologue.guards)


def _layout(shadow: torch.Tensor) -> tuple:
    return tuple(shadow.shape), tuple(shadow.stride()), shadow.storage_offset()


def _same_layout(a: tuple, b: tuple) -> bool:
    """Sizes, strides and offsets compared without guards (SymInts by their expressions)."""
    def same(x: Any, y: Any) -> bool:
        if type(x) is torch.SymInt and type(y) is torch.SymInt:
            return x.node.expr == y.node.expr
        return type(x) is type(y) and x == y

    return all(len(p) == len(q) and all(map(same, p, q)) for p, q in zip(a[:2], b[:2])) and same(a[2], b[2])


def _has_symbols(shadow: torch.Tensor) -> bool:
    """Whether a size or stride of ``shadow`` is a SymInt (symbolic, or specialized by a guard)."""
    return any(type(s) is torch.SymInt for s in (*shadow.shape, *shadow.stride()))


def _symbol_sources(dynamic: list[tuple[Path, Any]]) -> dict[sympy.Symbol, tuple[Path, int]]:
    """Each size symbol's first place among the inputs: (the path that reads it, its traced value); a
    dimension's size (``x.shape[1]``), else a stride (``x.stride()[0]``: Note [Strides seen to change])."""
    sources: dict[sympy.Symbol, tuple[Path, int]] = {}
    for kind in ("shape", "stride"):
        for path, proxy in dynamic:
            sizes = proxy.shadow.shape if kind == "shape" else proxy.shadow.stride()
            read = path.attr("shape") if kind == "shape" else path.attr("stride").call()
            for i, size in enumerate(sizes):
                if type(size) is torch.SymInt and isinstance(size.node.expr, sympy.Symbol):
                    sources.setdefault(size.node.expr, (read.index(i), size.node.hint))
    return sources


class _SizeRewriter:
    """Replaces the SymInts a trace recorded by ints or NumberProxies computed from size inputs."""

    def __init__(self, program: Any, env: Any, sources: dict[sympy.Symbol, tuple[Path, int]],
                 read_sizes: dict[sympy.Symbol, tuple[Any, int, int]],
                 read_numbers: dict[sympy.Symbol, NumberProxy],
                 number_sizes: dict[sympy.Symbol, tuple[Path, NumberProxy, torch.SymInt]]) -> None:
        self.program = program
        self.env = env
        self.sources = sources
        self._read_at: dict[int, list[tuple[sympy.Symbol, int, int]]] = {}  # output proxy id -> its symbols
        for symbol, (proxy, dim, size) in read_sizes.items():
            self._read_at.setdefault(id(proxy), []).append((symbol, dim, size))
        # a read number's id -> its symbol (Note [Counts that values decide]): named once its read is made
        self._numbers_at = {id(number): (symbol, number) for symbol, number in read_numbers.items()}
        self._numbers = frozenset(read_numbers)  # named by their reads, never read from an output
        self._unbacked = bool(read_sizes or read_numbers)  # sizes after some ops are read from their outputs
        # what torch decided about those sizes with their traced values: checked once they are read
        self._conditions = [ra.expr for ras in env.deferred_runtime_asserts.values() for ra in ras]
        self.inputs: list[tuple[NumberProxy, Path]] = []  # each size input and the path that reads it
        # each symbol's name in the computation; a dynamic number's is its input (jit/number_sizes.py)
        self._symbols: dict[sympy.Symbol, NumberProxy] = {s: n for s, (_p, n, _size) in number_sizes.items()}
        self._numbers_are_inputs = bool(number_sizes)  # the grad transform makes dynamic numbers constants
        self._computed: dict[sympy.Expr, NumberProxy] = {}
        self._pending: list[BoundSymbol] = []
        self._source: Any = None  # the record being rewritten: arithmetic for it is printed under its line
        self._context = TraceContext(program.trace, scopes=[self._pending],
                                     source_provider=lambda: self._source)
        self.layouts: dict[int, tuple] = {}  # Note [Subclass values' sizes]

    def rewrite_trace(self, rebuilt: list[SubclassTensorProxy] = (),
                      error: type[StaticShapes] = StaticShapes) -> None:
        """Rewrite the trace's records and output; ``rebuilt``: the subclass values the computation
        builds or restrides, whose outer sizes, strides, offset and flatten ctx are computed too
        (``layouts``: Note [Subclass values' sizes])."""
        trace = self.program.trace
        rewritten: list[BoundSymbol] = []
        with tracing(self._context):
            for bsym in trace.bound_symbols:
                self._source = bsym.source
                new = self._bound_symbol(bsym)
                rewritten.extend(self._pending)
                self._pending.clear()
                rewritten.append(new)
                if self._unbacked:
                    rewritten.extend(self._read_sizes(bsym))
                    self._name_numbers(bsym)
                    rewritten.extend(self._checked_conditions())
            trace.output = self._map(trace.output)
            for value in rebuilt:
                self.layouts[id(value)] = self._layout(value, error)
            rewritten.extend(self._pending)
        if self._conditions:
            missing = self._conditions[0]
            raise StaticShapes(f"the size condition {missing} has a size no op of the trace reads")
        trace.bound_symbols[:] = rewritten
        for symbol in self.sources:  # unused sizes are inputs too: the entry is symbolic (see finish)
            if self.env.simplify(symbol) == symbol:
                self._symbol(symbol)
        self.inputs.sort(key=lambda item: _symbol_number(item[0].name))
        if not self._numbers_are_inputs:  # for the grad transform's replay (transforms/symbolic_sizes.py)
            self.program.symbolic_sizes = SymbolicSizes(
                self.env, {id(n): (n, symbol) for symbol, n in self._symbols.items()})
        for proxy, size_path in self.inputs:  # after the tensors and numbers, as the prologue reads them
            trace.args.append(proxy)
            self.program.prologue.add_input(size_path, proxy.name)
            self.program.size_inputs.append((size_path, proxy))

    def _layout(self, value: SubclassTensorProxy, error: type[StaticShapes]) -> tuple:
        """The outer sizes, strides and storage offset and the flatten ctx of a subclass value, each
        size an int or a number of the computation."""
        _names, ctx = value.inner_flatten()
        shadow = value.shadow
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
            metadata = (tuple(shadow.shape), tuple(shadow.stride()), shadow.storage_offset())
        layout = self._map((*metadata, ctx))
        if _holds_sizes(layout[3]):
            raise error(f"the flatten ctx of {value.name}, a {value.subclass.__qualname__}, holds a symbolic "
                        "size jitcore cannot compute per call")
        return layout

    def _read_sizes(self, bsym: BoundSymbol) -> list[BoundSymbol]:
        """After the op that made a value-shaped output: each of its sizes that values decide, read
        from it (``u0 = size_of(t1, 0)``), a name of the computation from there on; so is each size
        torch made a new unbacked symbol of (``x[:n]`` with ``n`` a read count:
        ``ValueReads.value_sizes``)."""
        records = []
        known = self.env.real_tensor_prop_unbacked_vals
        for output in inner_tensors_first(optree.tree_leaves(bsym.output, none_is_leaf=True)):
            sizes = list(self._read_at.pop(id(output), ()))
            if isinstance(output, TensorProxy) and not sizes:
                sizes = [(size.node.expr, dim, known[size.node.expr])
                         for dim, size in enumerate(output.shadow.shape)
                         if type(size) is torch.SymInt and size.node.expr in known
                         and size.node.expr not in self._symbols and size.node.expr not in self._numbers]
            for symbol, dim, size in sizes:
                if symbol in self._symbols:
                    continue  # read from an earlier output already
                number = NumberProxy(self.program.trace.names.claim(str(symbol)), int(size))
                self._symbols[symbol] = number
                self.program.read_sizes.append(number)
                records.append(BoundSymbol(SIZE_OF, (output, dim), {}, number, (), bsym.source))
        return records

    def _name_numbers(self, bsym: BoundSymbol) -> None:
        """After an ``item()``/``tolist()`` read: each of its numbers that is a symbol is that symbol's
        name from there on (Note [Counts that values decide])."""
        for output in optree.tree_leaves(bsym.output, none_is_leaf=True):
            found = self._numbers_at.pop(id(output), None) if isinstance(output, NumberProxy) else None
            if found is not None:
                symbol, number = found
                self._symbols[symbol] = number

    def _checked_conditions(self) -> list[BoundSymbol]:
        """A check of each condition on sizes that values decide whose sizes are all read by now:
        ``len(x[mask]) > 4`` traced True is ``check_read(<the size condition u0 > 4>, True, ...)``, so a
        call whose count says otherwise goes to another entry (Note [Sizes that values decide])."""
        ready = [c for c in self._conditions
                 if all(s in self._symbols or s in self.sources for s in c.free_symbols)]
        if not ready:
            return []
        self._conditions = [c for c in self._conditions if c not in ready]
        records = []
        for condition in ready:
            symbols = sorted(condition.free_symbols, key=str)
            operands = [self._symbol(s) for s in symbols]  # an input's size is a size input from here on
            records.append(condition_check(condition, symbols, operands, self._source, StaticShapes))
        return records

    def _bound_symbol(self, bsym: BoundSymbol) -> BoundSymbol:
        if "bookkeeping" in bsym.symbol.tags:  # never run (a subclass input's or result's rebuild in
            return bsym  # pass 1): its outer sizes stay the shadow's, which pass 2 compares with
        args, kwargs = self._map((bsym.args, bsym.kwargs))
        subsymbols = tuple(self._bound_symbol(b) for b in bsym.subsymbols)
        unchanged = all(a is b for a, b in zip(subsymbols, bsym.subsymbols))
        if args is bsym.args and kwargs is bsym.kwargs and unchanged:
            return bsym
        return BoundSymbol(bsym.symbol, args, kwargs, bsym.output, subsymbols, bsym.source, bsym.header)

    def _map(self, tree: Any) -> Any:
        """``tree`` with each SymInt replaced; a SymFloat or SymBool computed from sizes (``d ** 0.5``)
        is specialized and guarded."""
        return map_symbolic(tree, self._leaf)

    def _leaf(self, value: Any) -> Any:
        if type(value) is torch.SymInt:
            return self._size(value)
        if type(value) is torch.SymFloat:
            return value.node.guard_float("", 0)
        return value.node.guard_bool("", 0)

    def _size(self, size: torch.SymInt) -> int | NumberProxy | torch.SymInt:
        expr = self.env.simplify(size.node.expr)
        if expr.is_number:
            return int(expr)
        if any(is_nested_symbol(self.env, s) for s in expr.free_symbols):
            return size  # a ragged size: a constant of the trace, as in a static pass (Note [Nested ints])
        return self._expr(expr)

    def _expr(self, expr: sympy.Expr) -> Any:
        """The value of a size expression: an int, a size input, or recorded arithmetic on them."""
        if expr.is_Integer:
            return int(expr)
        if expr in self._computed:
            return self._computed[expr]
        if isinstance(expr, sympy.Symbol):
            value = self._symbol(expr)
        else:
            value = self._operation(expr)
        self._computed[expr] = value
        return value

    def _symbol(self, symbol: sympy.Symbol) -> NumberProxy:
        found = self._symbols.get(symbol)
        if found is None:
            source = self.sources.get(symbol)
            if source is None:
                raise StaticShapes(f"the size {symbol} is not the size of an input dimension")
            size_path, hint = source
            found = NumberProxy(self.program.trace.names.claim(str(symbol)), int(hint))
            self._symbols[symbol] = found
            self.inputs.append((found, size_path))
        return found

    def _operation(self, expr: sympy.Expr) -> Any:
        from jitcore.langctx.python import apply

        name = type(expr).__name__
        operands = [self._expr(a) for a in expr.args]
        if isinstance(expr, (sympy.Add, sympy.Mul)):
            if any(not a.is_integer for a in expr.args):
                raise StaticShapes(f"the size {expr} has a non-integer term")
            op = operator.add if isinstance(expr, sympy.Add) else operator.mul
            value = operands[0]
            for operand in operands[1:]:
                value = apply(op, value, operand)
            return value
        if name in _BINARY and len(operands) == 2:
            return apply(_BINARY[name], *operands)
        if name in ("Min", "Max"):  # Note [The least of symbolic sizes] (langctx/python.py)
            value = operands[0]
            for operand in operands[1:]:
                value = apply(builtins.min if name == "Min" else builtins.max, value, operand)
            return value
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) >= 1:
            value = operands[0]
            for _ in range(int(expr.exp) - 1):
                value = apply(operator.mul, value, operands[0])
            return value
        raise StaticShapes(f"the size {expr} has no Python form jitcore records ({name})")


def _symbol_number(name: str) -> int:
    """``s12`` -> 12: size inputs follow the symbols' order of creation (other names last)."""
    digits = name[1:]
    return int(digits) if name.startswith("s") and digits.isdigit() else 1 << 30


# torch's sympy functions on sizes (torch.utils._sympy.functions) and the Python operator of each.
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "FloorDiv": operator.floordiv,
    "CleanDiv": operator.floordiv,
    "Mod": operator.mod,
    "PythonMod": operator.mod,
}


def _add_guards(program: Any, env: Any, dynamic: list[tuple[Path, Any]],
                number_sizes: dict[sympy.Symbol, tuple[Path, NumberProxy, torch.SymInt]]) -> None:
    """Each guard of the ShapeEnv as a ``shape`` check over the tensors and dynamic numbers it reads."""
    from torch._dynamo.source import LocalSource, TensorProperty

    numbers = list(number_sizes.values())
    paths = [path for path, _proxy in dynamic] + [path for path, _number, _size in numbers]
    index = {proxy.name: i for i, (_path, proxy) in enumerate(dynamic)}
    index.update((number.name, len(dynamic) + i) for i, (_path, number, _size) in enumerate(numbers))

    def source_ref(source: Any) -> str:
        if isinstance(source, LocalSource):  # a dynamic number (Note [Dynamic numbers as sizes])
            return "{%d}" % index[source.local_name]
        tensor = "{%d}" % index[source.base.local_name]
        if source.prop is TensorProperty.SIZE:
            return f"{tensor}.shape[{source.idx}]"
        if source.prop is TensorProperty.STRIDE:
            return f"{tensor}.stride()[{source.idx}]"
        return f"{tensor}.storage_offset()"

    placeholders = [proxy.shadow for _path, proxy in dynamic] + [size for _path, _number, size in numbers]
    sources = [LocalSource(proxy.name) for _p, proxy in dynamic] + [
        LocalSource(number.name) for _p, number, _size in numbers]
    kept = env.guards  # Note [A guard every nested int passes]
    env.guards = [g for g in kept if not _passed_by_nested_ints(env, g.expr)]
    try:
        expressions = env.produce_guards(placeholders, sources, source_ref=source_ref)
    finally:
        env.guards = kept
    for expression in expressions:
        used = sorted({int(n) for n in _placeholders(expression)})
        renumbered = expression
        for new, old in enumerate(used):
            renumbered = renumbered.replace("{%d}" % old, "{#%d}" % new)
        renumbered = renumbered.replace("{#", "{")
        condition = ShapeCondition(renumbered, tuple(paths[i] for i in used))
        program.prologue.add_guard(Guard(condition.paths[0], "shape", condition))


# Note [A guard every nested int passes]
# torch code that compares an NJT's sizes with a number (NestedTensor's ``layer_norm`` checks
# ``normalized_shape`` against its sizes) adds the guard ``Ne(s3, 8)`` over the symbol of an
# intermediate nested int (the ragged size of an NJT an op made: its source is torch's
# ``EphemeralSource``, which names no input). A nested int equals no number, so the guard holds on
# every call; asked to print it, ``source_ref`` raised AttributeError, and every such program (an NJT
# training step with a LayerNorm) traced one static entry per ragged structure. Such guards are left
# out of the prologue; any other guard over a nested int still raises (static shapes).
def _passed_by_nested_ints(env: Any, expr: sympy.Basic) -> bool:
    """``expr`` is ``Ne(j, n)`` for a nested int ``j`` and a number ``n``: true for every nested int."""
    if not isinstance(expr, sympy.Ne):
        return False
    a, b = expr.args
    return (a.is_Symbol and b.is_number and is_nested_symbol(env, a)) or (
        b.is_Symbol and a.is_number and is_nested_symbol(env, b))


def _placeholders(expression: str) -> list[str]:
    import re

    return re.findall(r"\{(\d+)\}", expression)


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in a tree of tuples, lists and dicts, each container visited once (an argument may
    contain itself)."""
    found: list[torch.Tensor] = []
    stack, seen = [tree], set()
    while stack:
        value = stack.pop()
        if issubclass(type(value), torch.Tensor):
            found.append(value)
        elif issubclass(type(value), (tuple, list, dict)) and id(value) not in seen:
            seen.add(id(value))
            stack.extend(value.values() if isinstance(value, dict) else value)
    return found
