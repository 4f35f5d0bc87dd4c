"""The pass's answer to operations that need tensor values: read them, check them on every call.

When a symbol call of the pass cannot compute its outputs from metadata alone (DataDependentError
from jitcore/langctx/shadows.py), ``ValueReads.read`` replaces the refusal:
- ops with value-dependent output shapes that have a static expression (``nonzero``, masks, ...:
  ``reads.DATA_DEPENDENT_DECOMPOSITIONS``) are recorded as that expression;
- any other call runs on the probe's real values (jitcore/jit/probe.py); ``item`` gives a name of the
  computation, ``tolist`` a list of names (Note [The numbers of tolist]), each checked from where the
  program needs its value; another Python result (``bool``, ``equal``) becomes a constant of the rest
  of the trace behind a ``check_read``; tensor results become proxies with the real shapes, each
  shape checked.
Every read is logged (``JITCORE_LOGS=graph_breaks``) and listed in ``jitcore.explain``.

Invariants: records go to the trace's top level in program order, except a read inside a tensor
subclass's code, which goes among the subclass call's operations (Note [Reads inside a subclass's
code]); with ``fullgraph=True`` every read of the program's own keeps the refusal (Note [Reads inside
a subclass's code under fullgraph]); a read value reaches the trace only through its check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import optree
import torch
from torch.fx.experimental.symbolic_shapes import (
    GuardOnDataDependentSymNode,
    _constrain_range_for_size,
    free_unbacked_symbols,
    guard_int,
)

import jitcore
from jitcore.errors import DataDependentError, EagerOnlySubclass
from jitcore.ir import BoundSymbol, Inlined, SourceFrame, Symbol, TraceContext, current_context
from jitcore.jit.probe import Probe, may_write
from jitcore.jit.read_arguments import holds, natively, needs_grad, unwritten, writes_outside
from jitcore.langctx.reads import (
    DATA_DEPENDENT_DECOMPOSITIONS,
    MASKS_UNDER_GRAD,
    READ,
    SHAPE_OF,
    UNDER_AUTOGRAD,
    ReadSite,
    output_sizes,
    same_number,
)
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.proxies.tensor import PlainTensorProxy
from jitcore.proxies.typed import only_plain_subclass_values

__all__ = ["ValueReads"]

_LOG = logging.getLogger("jitcore.graph_breaks")
_REFUSED = object()


class ValueReads:
    """The value reads of one pass."""

    def __init__(self, context: TraceContext, probe: Probe,
                 read_dims: Callable[[ReadSite, int, tuple[int, ...]], frozenset[int]] | None = None,
                 read_numbers: Callable[[ReadSite], bool] | None = None) -> None:
        """Args:
            context: the pass's trace context.
            probe: computes the values the program reads.
            read_dims: the sizes of a value-shaped output found to change between calls
                (``ShapePolicy.read_dims``, Note [Sizes that values decide] in jitcore/jit/shapes.py),
                by its shape check's site, its position among the op's outputs and its shape now
                (which it remembers); they are symbols in a pass with symbolic sizes.
            read_numbers: in a pass with symbolic sizes, whether the integer read at a site is a symbol
                (``ShapePolicy.read_number``, Note [Counts that values decide] in jitcore/jit/shapes.py).
        """
        self.context = context
        self.probe = probe
        self.read_dims = read_dims
        self.read_numbers = read_numbers
        # the symbols handed to the program for integers it read, each with the read's number
        self.number_symbols: dict[Any, NumberProxy] = {}
        # the symbols of the sizes made so, each with the output and dimension it is the size of, and
        # its traced value
        self.sizes: dict[Any, tuple[TensorProxy, int, int]] = {}
        self.sites: list[ReadSite] = []
        # numbers read with ``item()`` (names of the computation), each with the record that checks
        # its value where the program needs it (added to the trace once: ``NumberProxy.specialize``)
        self.numbers: list[tuple[NumberProxy, BoundSymbol]] = []
        # the coordinates of a mask's true elements an index read, by mask and version, with the mask
        # (Note [One mask, one count]); ``_decomposing``: how deep in DATA_DEPENDENT_DECOMPOSITIONS
        self.coordinates: dict[tuple[int, int], tuple[TensorProxy, Any]] = {}
        self._decomposing = 0
        self.natively = 0  # > 0 inside ``_enclosing_scope``: a composite or expression runs natively
        self._constants: list[tuple[ReadSite, int]] = []  # integers a subclass's code read, as constants

    def read(self, symbol: Symbol, args: tuple, kwargs: dict, error: DataDependentError,
             source: tuple[SourceFrame, ...] | None) -> Inlined:
        """The outputs of a data-dependent call, recorded as checked reads (see the module doc).

        Raises:
            EagerOnlySubclass: inside a subclass's ``__torch_function__``/``__torch_dispatch__`` where
                the read cannot be made there (Note [Reads inside a subclass's code]), or on a subclass
                value: the call runs eagerly (docs/errors/JC-J002.md).
            DataDependentError: ``error``, where no read applies (inside another symbol's resolution,
                or a value-shaped tensor that must carry gradients).
        """
        if holds(SubclassTensorProxy, (args, kwargs)) and not self.context.subclass_code \
                and len(self.context.scopes) == 2:
            # torch's C++ reading a plain index tensor next to a subclass (tensor_split(x, idx))
            retried = self._with_read_arguments(symbol, args, kwargs)
            if retried is not _REFUSED:
                return Inlined(retried)
        as_program = self._as_the_programs(args, kwargs)  # Note [Reads of spliced subclass code ...]
        subclass_code = self.context.subclass_code and not as_program
        if subclass_code and not holds(SubclassTensorProxy, (args, kwargs)):
            read = self._read_in_subclass_code(symbol, args, kwargs, error, source)
            if read is not _REFUSED:
                return read
        if subclass_code or (holds(SubclassTensorProxy, (args, kwargs)) and not as_program):
            # a subclass's dispatch that reads values it cannot read (under grad, after writes or
            # random draws in the same call): this call runs eagerly
            raise EagerOnlySubclass(
                f"a tensor subclass's code reads tensor values ({error.summary})"
            ) from error
        if len(self.context.scopes) != 2 and not as_program:
            raise error
        key = self._coordinates_key(symbol, args, kwargs)
        if key is not None and key in self.coordinates:
            return Inlined(self.coordinates[key][1])  # Note [One mask, one count]
        decomposition = DATA_DEPENDENT_DECOMPOSITIONS.get(symbol.fn)
        if decomposition is not None:
            self._decomposing += 1
            try:
                with self._enclosing_scope():
                    out = decomposition(*args, **kwargs)
            finally:
                self._decomposing -= 1
            if out is not NotImplemented:
                return Inlined(out)
        try:
            read = self._read_on_values(symbol, args, kwargs, error, source)
            if key is not None:
                self.coordinates[key] = (args[0], read.output)  # the mask kept alive: its id keys the entry
            return read
        except DataDependentError:
            if not (needs_grad(args, kwargs) and symbol.langctx == "torch"
                    and not holds(NumberProxy, (args, kwargs))):
                raise
        # Note [Composites that read values under grad], jit/read_arguments.py
        scope = self.context.scopes[-2]
        recorded = len(scope)
        out = NotImplemented
        if "autograd_function" not in symbol.tags:  # Note [A Function whose forward reads values]
            with self._enclosing_scope(), torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
                out = natively(symbol.fn, args, kwargs)
        if out is NotImplemented:
            del scope[recorded:]  # what the attempt recorded before it failed
            return Inlined(self._under_autograd(symbol, args, kwargs, error, source))
        return Inlined(out)

    # Note [A Function whose forward reads values]
    # A user's ``autograd.Function`` whose forward reads its input's values (``n = sum(v > 0 for v in
    # x.tolist())``) with inputs that require grad was run natively on the proxies as a composite: its
    # forward's ops were recorded in its place and differentiated, so the gradient was derived from them
    # (``x * n`` gave ``2 * n`` where the user's backward gives 2: a wrong answer on the calls where n
    # was not 1), and a forward building a tensor from the values raised 'Could not infer dtype of
    # NumberProxy'. A Function is never such a composite: it runs under torch's autograd on every call
    # (``_under_autograd``), its own backward the node's, its outputs' shapes checked.

    # Note [Reads of spliced subclass code in a symbolic pass]
    # A ``__torch_function__`` that computes its call through other operations has its records take
    # the call's place (``TraceContext.spliced``): an NJT's CPU SDPA (jitcore/dispatch/jagged_attention.py)
    # splits the values by ``list(lengths)`` of its offsets, and those ops land at the trace's top
    # level. In a pass with symbolic sizes such a read was refused (Note [Reads inside a subclass's
    # code]: reads are made at the top level only), so the pass raised and the function traced static
    # shapes, an entry per list of lengths. Where every call still being recorded is spliced so and the
    # read's arguments are plain, the read is the program's own: it lands at the top level in program
    # order, its integers are names and, once seen to change, unbacked symbols (Note [Counts that
    # values decide], jit/shapes.py), and its values are computed with the open calls' records so far
    # (``Probe.values_within``, refused where one of them writes a tensor it did not make, as there).
    # A check a read number needs goes to the innermost of those scopes still open
    # (``_read_number``), so it follows the read and precedes its use once spliced.
    def _as_the_programs(self, args: tuple, kwargs: dict) -> bool:
        """Whether a read inside a subclass's code is made as the program's own (the Note above)."""
        open_scopes = self.context.scopes[1:-1]
        if self.context.values.shape_env is None or not self.context.subclass_code or not open_scopes:
            return False
        if holds(SubclassTensorProxy, (args, kwargs)):
            return False
        return self._spliced_only() and not writes_outside([b for scope in open_scopes for b in scope])

    def _spliced_only(self) -> bool:
        """Whether every call still being recorded (but the innermost: the read's own) has its records
        spliced into its caller's scope: what is recorded there lands at the top level."""
        return all(id(scope) in self.context.spliced for scope in self.context.scopes[1:-1])

    def _values(self, tree: Any) -> Any:
        """``tree`` with its real values (computed inside spliced calls still being recorded too)."""
        open_scopes = self.context.scopes[1:-1]
        return self.probe.values_within(open_scopes, tree) if open_scopes else self.probe.values(tree)


    # Note [One mask, one count]
    # ``a = x[mask]; b = y[mask]`` indexes twice through the coordinates of the mask's true elements
    # (``nonzero(mask, as_tuple=True)``, langctx/reads.py): read twice, they were two value-shaped
    # outputs, two sizes, and once those were symbols, two unbacked symbols that ``a + b`` needed equal,
    # a condition checked on every call (torch.compile's unbacked symbols need it too). The
    # coordinates an index made of an unchanged mask are those of every later index by it: the pass
    # reads them once per mask and version (its shadow's ``_version``, which an in-place write to it
    # or to a view of its storage bumps) and hands the later indexes the same coordinates, so one
    # symbol is the size of both (``t5 = torch.add(t2, t4)  # f32[u0]``, no condition). Only the
    # coordinates made inside such an expression are shared: a ``nonzero`` the program calls itself
    # gives it a tensor of its own, which it may write.
    def _coordinates_key(self, symbol: Symbol, args: tuple, kwargs: dict) -> tuple[int, int] | None:
        if not self._decomposing or symbol.fn is not torch.nonzero or kwargs != {"as_tuple": True} \
                or len(args) != 1 or type(args[0]) is not PlainTensorProxy:
            return None
        return id(args[0]), args[0].shadow._version  # noqa: SLF001 - torch's version counter

    def masks_under_grad(self, symbol: Symbol, args: tuple, kwargs: dict) -> Inlined | None:
        """A write through a boolean mask whose values require grad, expressed through the mask's
        coordinates (Note [Masks whose values carry gradients], langctx/reads.py); None: not one."""
        position, expression = MASKS_UNDER_GRAD.get(symbol.fn, (0, None))
        if expression is None or len(args) <= position or self.context.subclass_code \
                or len(self.context.scopes) != 2 or not needs_grad(args[position:position + 1], {}) \
                or holds(SubclassTensorProxy, (args, kwargs)):
            return None
        with self._enclosing_scope():
            out = expression(*args, **kwargs)
        return None if out is NotImplemented else Inlined(out)

    # Note [Reads inside a subclass's code]
    # A subclass's ``__torch_dispatch__`` that reads values of its inner tensors (``t._scale.item()``,
    # ``bool(e.count_nonzero() == ...)``, ``nonzero`` in a sparse format, TwoTensor's ``item``) reads
    # them as the program would: the probe runs the records so far, then those of the calls still
    # being resolved (``Probe.values_within``), and the value becomes a constant behind a check
    # recorded where the read happened, among the call's subsymbols (the flattened computation runs
    # it on the inner tensors on every call; a differing value goes to another entry). Under grad the
    # grad transform replays the call on fake tensors, and the same reads are answered there with
    # these values, their checks recorded in the forward (jitcore/transforms/replayed_reads.py); a
    # value-shaped result that must carry gradients (a ``__torch_function__``'s ``split`` by tensor
    # lengths, NJT SDPA's) is made static by reading its integer arguments (``_with_read_arguments``).
    # Random draws of the open calls before the read, and the program's writes to subclass values
    # before the call, are read as the computation will see them (Note [The probe runs a subclass
    # call's operations], jitcore/jit/probe.py). Refused, so the call runs eagerly as before: where a
    # value-shaped result must carry gradients otherwise; where a record of the open calls writes a
    # tensor it did not make (a call the probe runs natively, an ``autograd.Function``'s, would write
    # it twice; SparseTensor's ``res[indices] = values`` into its own ``zeros`` is read); in a pass
    # with symbolic sizes (``TensorValues.shape_env``: its reads are made at the top level only, Note
    # [Reads of spliced subclass code in a symbolic pass]). A
    # static pass with
    # nested ints (the ShapeEnv of ``TensorValues.allow_nested_ints``, whose sizes stay static) reads
    # as any other: a nested jagged tensor's ``unbind``, ``chunk``, batch indexing and CPU SDPA
    # (jitcore/dispatch/jagged_attention.py) split by its offsets' values, checked on every call.
    # One read is a name instead: the ``aten._local_scalar_dense`` of a plain inner tensor, with which a
    # wrapper answers the program's ``item()`` (Note [A number a subclass's item reads] in
    # jitcore/dispatch/resolver.py).
    #
    # Note [A wrapper's item in a symbolic pass]
    # ``loss.item()`` of a TwoTensor (its dispatch runs ``aten._local_scalar_dense`` on an inner tensor,
    # Note [A number a subclass's item reads] in jitcore/dispatch/resolver.py) was refused in a pass with
    # symbolic sizes with the other number reads there: the pass raised, the function traced static sizes
    # again, and a training loop over changing batch sizes took an entry per size (5 in 5 calls; 2 for
    # a plain loss). That read of plain inner tensors, without kwargs, is a name there too, computed by
    # the probe from the open calls' records as in a static pass; a value the program needs is checked
    # as before. So is a dispatch's own ``self.scale.item()`` of a plain tensor it holds, without grad
    # (Note [A number a subclass's code reads]: a quantized weight over activations of changing sizes).
    # ``item``/``tolist`` of other values and reads under grad stay refused (the Note below).
    #
    # Note [Reads inside a subclass's code under fullgraph]
    # ``fullgraph=True`` refuses the program's own reads (issue 14: a value-dependent program is what
    # it is there to report), but not those inside a subclass's ``__torch_function__``/
    # ``__torch_dispatch__``: they are the library's code, not the program's (an NJT's ``unbind()``
    # reads its offsets), the user cannot move them out of the function, and a checked read is not a
    # split (the call is traced whole). Where such a read is refused (the cases above), the call
    # cannot run eagerly under fullgraph: the read's DataDependentError is raised.
    # Note [A number a subclass's code reads]
    # A dispatch reading a number of a plain tensor it holds (a quantized tensor's ``self.scale.item()``,
    # float8's ``amax.item()``) to compute with it gets a name, as the program's own ``item()`` does:
    # ``t.data * s`` records arithmetic on the name, and a call with another scale runs the same
    # entry. Before, the number was a constant behind a check: one entry per scale (20 misses in 20
    # calls). Where the code needs its value (``if s > 1``, ``max(amax, eps)``, a size) it is checked
    # from there, among the open calls' operations (after the read that computes it), not at the top
    # level, which the flattened computation runs before the call's operations. Not under grad (a
    # tensor of the pass requires grad): the grad transform's replay answers a subclass call's reads
    # with pass 1's constants only (jitcore/transforms/replayed_reads.py), so the number stays a checked
    # read there (named, the replay found no read to answer with and the call ran eagerly, or lost
    # the order of its records: ReplayInconsistent). A pass where a dispatch mode ran under grad keeps no
    # grad transform (Note [A dispatch mode under autograd], dispatch/modes.py): its numbers are names.
    # Note [A read in a plain subclass's __torch_function__]
    # A class without ``__torch_dispatch__`` whose ``__torch_function__`` logs or counts holds plain data,
    # its override interpreted as the program's code: a number it reads of its own instances (``super()``
    # running ``item``, or ``tolist``'s numbers) is the program's read, a name, not a constant behind a
    # check (an entry per value).
    # Note [A mask in a symbolic pass]
    # A wrapper indexed by a boolean mask (``x[m]`` of a TwoTensor) reaches its dispatch as
    # ``aten.index.Tensor`` on each inner tensor: a value-shaped read inside subclass code, checked per
    # count in a static pass. Once its count was seen to change (Note [Sizes that values decide],
    # jit/shapes.py) the next pass is symbolic, where such reads were refused: that pass traced static
    # again, an entry per count (5 in 5 calls; a plain tensor takes 2). A read of plain tensors alone whose
    # output is one tensor, with no grad, is now made there as at the top level (``_shaped_proxy``: the
    # changed dimensions are unbacked symbols, its check compares the others), among the call's records;
    # ``finish`` reads each symbol from the inner tensor of the call's top-level result that holds it
    # (``u0 = size_of(t0, 0)``, after the call: pass 2 computes ``t0``) and checks what torch decided
    # with the traced counts once they are read (TwoTensor's ``a.shape == b.shape``: ``u0 == u1``). Numbers,
    # lists, other outputs and reads under grad are still refused there.
    def _read_in_subclass_code(self, symbol: Symbol, args: tuple, kwargs: dict, error: DataDependentError,
                               source: tuple[SourceFrame, ...] | None) -> Any:
        open_scopes = self.context.scopes[1:-1]
        symbolic = self.context.values.shape_env is not None
        # Note [A wrapper's item in a symbolic pass]
        inner_number = (symbol.fn in _INNER_NUMBER_READS or symbol.fn in _NUMBER_READS) \
            and _plain_tensors(args) and not kwargs
        if symbolic and not inner_number and (symbol.fn in _NUMBER_READS or symbol.fn in _INNER_NUMBER_READS
                                              or symbol.fn in _LIST_READS or needs_grad(args, kwargs)):
            return _REFUSED  # Note [A mask in a symbolic pass] (nested ints alone leave the pass static)
        records = [b for scope in open_scopes for b in scope]
        if writes_outside(records):
            return _REFUSED
        try:
            real_args, real_kwargs = self.probe.values_within(open_scopes, (args, kwargs))
        except LookupError:  # a value the records so far do not compute
            return _REFUSED
        out = symbol.fn(*real_args, **real_kwargs)
        site = ReadSite(_describe(symbol, out), source)
        if symbol.fn in _NUMBER_READS and type(out) in (int, float) and only_plain_subclass_values(args):
            return Inlined(self._number(symbol, args, kwargs, out, site))  # the Note above
        if symbol.fn in _INNER_NUMBER_READS and type(out) in (int, float) and _plain_tensors(args) \
                and not kwargs:
            return Inlined(self._number(symbol, args, kwargs, out, site))
        if symbol.fn in _NUMBER_READS and type(out) in (int, float) and _plain_tensors(args) and not kwargs \
                and not (torch.is_grad_enabled() and self.context.values.any_requires_grad()
                         and not (self.context.modes is not None and self.context.modes.under_autograd)):
            return Inlined(self._number(symbol, args, kwargs, out, site, within_call=True))  # Note below
        if symbol.fn in _LIST_READS and only_plain_subclass_values(args):  # ``tolist()`` too
            listed = self._numbers_of_list(symbol, args, kwargs, out, site)
            if listed is not _REFUSED:
                return Inlined(listed)
        if symbolic and type(out) is not bool \
                and (not isinstance(out, torch.Tensor) or holds(SubclassTensorProxy, (args, kwargs))):
            return _REFUSED  # a value-shaped tensor of plain tensors only (Note [A mask in a symbolic pass])
        # a truth value (Note [A truth value a subclass's code reads in a symbolic pass])
        if not holds(torch.Tensor, out):
            self._record(BoundSymbol(READ, (site, out, symbol.fn, *args), kwargs, None, (), source))
            self._log(site, out)
            if type(out) is int:
                self._constants.append((site, out))
            return Inlined(out)
        if needs_grad(args, kwargs):  # value-shaped outputs that must carry gradients: static, with the
            retried = self._with_read_arguments(symbol, args, kwargs)  # sizes read (NJT SDPA's split)
            return _REFUSED if retried is _REFUSED else Inlined(retried)
        if isinstance(out, (list, tuple)):  # Note [The counts of a split in a subclass's code]
            retried = self._with_read_arguments(symbol, args, kwargs, max_ndim=0)
            if retried is not _REFUSED:
                return Inlined(retried)
        leaves = optree.tree_leaves(out, none_is_leaf=True)
        if not all(isinstance(v, torch.Tensor) for v in leaves):
            return _REFUSED
        values = self.context.values
        if symbolic:
            shape_site = _shape_site(site)
            proxies = [self._shaped_proxy(t, shape_site, i) for i, t in enumerate(leaves)]
        else:
            proxies = [values.proxy_for(values.fake_mode.from_tensor(t, static_shapes=True)) for t in leaves]
        output = optree.tree_unflatten(optree.tree_structure(out, none_is_leaf=True), proxies)
        pairs = list(zip(proxies, leaves))
        self._record_shaped(symbol, args, kwargs, output, pairs, site, {"data_dependent"})
        return Inlined(output)

    # Note [A truth value a subclass's code reads in a symbolic pass]
    # MaskedTensor's binary ops check that the masks match (``torch.eq(a, b).all().item()`` of its plain
    # inner masks). A pass with symbolic sizes refused every read that gave no tensor, so it traced static
    # again: ``x + x * x`` took an entry per size. A truth value (``bool``) read of plain tensors is no
    # size and no number computed with: a constant behind a check run on every call there too.
    # Note [The counts of a split in a subclass's code]
    # An NJT's CPU SDPA splits its values by lengths it holds as 0-dim tensors (``torch.split(v, [t23,
    # t24, ...])``, jitcore/dispatch/jagged_attention.py). A static pass without grad recorded that
    # split as a value-shaped call, its outputs' shapes checked; the symbolic pass after it reads the
    # same lengths as counts (``item()``, Note [A number of outputs that values decide]), so it had no
    # counts of the pass before to compare with (``ShapePolicy.numbers_traced``), kept an entry
    # specialized to its lengths, and only the third miss made them symbols: 3 misses where grad took 2.
    # A call with a sequence of outputs whose shapes the values decide reads its 0-dim integer tensor
    # arguments as counts here too, as the program's own call does and as it does under grad: the
    # counts pin the entry as the shape check did (checked before the op), at the sites the symbolic
    # pass reads them at, so its second miss learns them.
    # Note [Value-shaped ops under grad]
    # An op whose output shapes the values decide and whose outputs must carry gradients (``ctc_loss``,
    # ``linalg.lstsq``, an RNN over a PackedSequence) cannot go through the grad transform: it replays
    # every op on fake tensors, where such an op has no shapes. It is recorded as a value read whose
    # outputs require grad as eager's do, and the entry runs its torch-level trace under torch's own
    # autograd (jitcore/transforms/jit_hook.py, ``differentiate``), as an entry with dynamic numbers
    # does: the op runs natively on every call and autograd differentiates it as eagerly; its outputs'
    # shapes are checked on every call. What the grad transform must handle (tensor subclasses, a
    # backward inside the function) raises the refusal instead.
    def _under_autograd(self, symbol: Symbol, args: tuple, kwargs: dict, error: DataDependentError,
                        source: tuple[SourceFrame, ...] | None) -> Any:
        real_args, real_kwargs = unwritten(symbol, args, kwargs, self._values((args, kwargs)))

        def as_input(proxy: Any, real: Any) -> Any:
            needs = isinstance(proxy, TensorProxy) and proxy.requires_grad and isinstance(real, torch.Tensor)
            return real.detach().requires_grad_(True) if needs else real

        leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
        real_leaves = optree.tree_leaves((real_args, real_kwargs), none_is_leaf=True)
        grad_args, grad_kwargs = optree.tree_unflatten(
            spec, [as_input(p, r) for p, r in zip(leaves, real_leaves)])
        with torch.enable_grad(), torch.random.fork_rng(devices=[]):
            out = symbol.fn(*grad_args, **grad_kwargs)
        out_leaves, out_spec = optree.tree_flatten(out, none_is_leaf=True)
        if not all(t is None or isinstance(t, torch.Tensor) for t in out_leaves):
            raise error
        values = self.context.values
        proxies: list[Any] = []
        for t in out_leaves:
            if t is None:
                proxies.append(None)
                continue
            shadow = values.fake_mode.from_tensor(t.detach(), static_shapes=True)
            proxies.append(values.proxy_for(shadow.requires_grad_(True) if t.requires_grad else shadow))
        output = optree.tree_unflatten(out_spec, proxies)
        pairs = [(p, t) for p, t in zip(proxies, out_leaves) if p is not None]
        self._record_shaped(symbol, args, kwargs, output, pairs, ReadSite(_describe(symbol, out), source),
                            {"data_dependent", UNDER_AUTOGRAD})
        return output

    def _read_on_values(self, symbol: Symbol, args: tuple, kwargs: dict, error: DataDependentError,
                        source: tuple[SourceFrame, ...] | None) -> Inlined:
        """The call run on the values, its outputs checked reads (value-shaped tensors included).

        Raises:
            DataDependentError: ``error``, where the outputs must carry gradients that a read cannot give.
        """
        real_args, real_kwargs = unwritten(symbol, args, kwargs, self._values((args, kwargs)))
        out = symbol.fn(*real_args, **real_kwargs)
        site = ReadSite(_describe(symbol, out), source)
        if symbol.fn in _NUMBER_READS and type(out) in (int, float):
            return Inlined(self._number(symbol, args, kwargs, out, site))
        if symbol.fn in _LIST_READS:
            listed = self._numbers_of_list(symbol, args, kwargs, out, site)
            if listed is not _REFUSED:
                return Inlined(listed)
        if not holds(torch.Tensor, out):
            self._record(BoundSymbol(READ, (site, out, symbol.fn, *args), kwargs, None, (), source))
            self._log(site, out)
            return Inlined(out)
        return Inlined(self._value_shaped(symbol, args, kwargs, out, site, error))

    def _number(
        self, symbol: Symbol, args: tuple, kwargs: dict, value: int | float, site: ReadSite,
        *, within_call: bool = False,
    ) -> NumberProxy:
        """``t.item()``: a number the computation reads on every call. It stays
        a name (arithmetic on it is recorded, torch takes it as a Scalar: ``loss.item()`` logged or
        ``x * t.max().item()`` need no entry per value); where the program needs its value (``if``,
        a shape), it is checked from there on, as any read (``within_call``: read by a subclass's
        code, whose open calls' scopes may hold that check, Note [A number a subclass's code reads])."""
        number = self._read_number(value, lambda _n: (site, value, symbol.fn, *args), kwargs,
                                   within_call=within_call)
        recorded = dataclasses.replace(symbol, tags=symbol.tags | {"data_dependent"})  # run as recorded
        self._record(BoundSymbol(recorded, args, kwargs, number, (), site.source))
        self._log(site, value)
        return self._symbolic(number, site)

    # Note [The numbers of tolist]
    # ``t.tolist()`` of an int, float or bool tensor gives a list (nested as the tensor) of read numbers,
    # each a name as ``item()``'s is: ``sum(t.tolist())`` or a loop adding them up records arithmetic,
    # and a call with other values runs the same entry. The record binds every element
    # (``[n0, n1] = torch.Tensor.tolist(t)``); the structure is the tensor's shape, static in the entry
    # (a symbolic size is specialized: a ShapeEnv guard, as ``torch.compile`` does; a size that values
    # decided, which has no guard, keeps the whole list a checked read). An element whose value the
    # program needs (a branch, an index, text) is checked from there on, by its name: its own check,
    # not the whole list's. A complex tensor's list stays a checked read (no complex names).
    def _numbers_of_list(self, symbol: Symbol, args: tuple, kwargs: dict, out: Any, site: ReadSite) -> Any:
        """``t.tolist()`` as names (Note [The numbers of tolist]); _REFUSED where it stays a checked read."""
        tensor = args[0] if args else None
        if kwargs or len(args) != 1 or not isinstance(tensor, TensorProxy) or tensor.shadow.dtype.is_complex \
                or (isinstance(tensor, SubclassTensorProxy) and not only_plain_subclass_values(args)):
            return _REFUSED
        try:
            shape = [guard_int(size) for size in tensor.shadow.shape]  # a symbolic size: guarded
        except GuardOnDataDependentSymNode:
            return _REFUSED
        if tuple(torch.Size(shape)) != _list_shape(out, len(shape)):
            return _REFUSED

        sites: dict[int, ReadSite] = {}

        def name(value: Any, position: tuple[int, ...]) -> Any:
            if type(value) is list:
                return [name(v, (*position, i)) for i, v in enumerate(value)]
            if type(value) not in (int, float, bool):
                raise TypeError(type(value))
            element = ReadSite(site.what + "".join(f"[{i}]" for i in position), site.source)
            number = self._read_number(value, lambda n: (element, value, same_number, n), {})
            sites[id(number)] = element
            return number

        def for_program(value: Any) -> Any:  # the program's lists (it may write them): the record's stay
            if type(value) is list:
                return [for_program(v) for v in value]
            return self._symbolic(value, sites[id(value)])

        try:
            numbers = name(out, ())
        except TypeError:
            return _REFUSED
        recorded = dataclasses.replace(symbol, tags=symbol.tags | {"data_dependent"})  # run as recorded
        self._record(BoundSymbol(recorded, args, kwargs, numbers, (), site.source))
        self._log(site, out)
        return for_program(numbers)

    def pinned(self) -> list[tuple[ReadSite, int]]:
        """The integers the pass read whose values it needed (``ShapePolicy.numbers_traced``)."""
        named = [(check.args[0], n.value) for n, check in self.numbers
                 if n.specialized and type(n.value) is int]
        return named + self._constants

    def value_sizes(self, symbol: Symbol, args: tuple, kwargs: dict, output: Any) -> None:
        """Give each size of ``output`` (a symbol call's outputs) that torch made a new unbacked symbol
        of (``x[:n]`` with ``n`` a count: its length, ``min(n, len(x))``, as torch cannot decide which)
        the value the call has on the probe's values, as the pass does for the symbols it makes: what
        torch later decides with it is checked on every call (Note [Counts that values decide]). The
        call is run once more on those values for it (not one that writes or draws: torch then decides
        nothing with the size, and the entry traces static sizes)."""
        env = self.context.values.shape_env
        if env is None or not (self.number_symbols or self.sizes) or not self._spliced_only():
            return
        known = env.real_tensor_prop_unbacked_vals
        leaves = optree.tree_leaves(output, none_is_leaf=True)
        fresh = [(i, d, size.node.expr) for i, leaf in enumerate(leaves) if isinstance(leaf, PlainTensorProxy)
                 for d, size in enumerate(leaf.shadow.shape) if type(size) is torch.SymInt
                 and size.node.expr.is_Symbol and free_unbacked_symbols(size) and size.node.expr not in known]
        if not fresh or "random" in symbol.tags or may_write(BoundSymbol(symbol, args, kwargs, output)):
            return
        real_args, real_kwargs = self._values((args, kwargs))
        real = optree.tree_leaves(symbol.fn(*real_args, **real_kwargs), none_is_leaf=True)
        if len(real) != len(leaves):
            return
        for i, d, size_symbol in fresh:
            env.set_real_tensor_prop_unbacked_vals(size_symbol, real[i].shape[d])

    def _symbolic(self, number: NumberProxy, site: ReadSite) -> Any:
        """What the program gets for a number it read: the number, or, for an integer whose value was
        seen to change, an unbacked symbol of the pass's ShapeEnv that ``number`` names in the
        computation (Note [Counts that values decide] in jitcore/jit/shapes.py)."""
        env = self.context.values.shape_env
        if env is None or self.read_numbers is None or type(number.value) is not int \
                or not self._spliced_only() or not self.read_numbers(site):
            return number
        size = env.create_unbacked_symint()
        env.set_real_tensor_prop_unbacked_vals(size.node.expr, number.value)  # decides what torch cannot
        self.number_symbols[size.node.expr] = number
        return size

    def _read_number(self, value: int | float | bool, check: Callable[[NumberProxy], tuple],
                     kwargs: dict, *, within_call: bool = False) -> NumberProxy:
        """A number read from a tensor, a name of the computation; ``check(number)`` gives the arguments
        of the ``check_read`` recorded, once, where the program first needs its value (the innermost
        of the scopes open at the read that is still open then; ``within_call``: the open calls'
        scopes count too)."""
        checked = False
        scopes = [self.context.scopes[0]]  # the top level, and the spliced calls' scopes read in
        for scope in self.context.scopes[1:-1]:
            if id(scope) not in self.context.spliced and not within_call:
                break
            scopes.append(scope)

        def specialize() -> None:
            nonlocal checked
            if not checked:
                checked = True
                self.context.trace.imports.setdefault("jitcore", jitcore)
                now = self.context.scopes
                innermost = max(i for i, scope in enumerate(scopes) if i < len(now) and now[i] is scope)
                now[innermost].append(record)  # Note [Reads of spliced subclass code in a symbolic pass]

        number = NumberProxy(self.context.values.names.fresh("n"), value, on_specialize=specialize)
        number.on_predicate = self.check_predicate if not within_call else \
            functools.partial(self._check_predicate_within, tuple(scopes))
        arguments = check(number)
        record = BoundSymbol(READ, arguments, kwargs, None, (), arguments[0].source)
        self.numbers.append((number, record))
        return number

    def check_predicate(self, number: NumberProxy, outcome: bool, varies: bool = False) -> bool:
        """The truth of ``number`` computed from a read (``if loss.item() < best:``), checked by the
        computation where it is computed: a call whose outcome differs goes to another cache entry,
        and one whose read value differs but not the outcome stays in this one (Note [Predicate
        guards] in jitcore/proxies/number.py). False (the value itself is checked) inside another
        symbol's resolution or after the pass. ``varies``: ``ReadSite.varies``."""
        if current_context() is not self.context or len(self.context.scopes) != 1:
            return False
        site = ReadSite(f"the truth of {number.name}", self.context.source(), varies)
        self.context.trace.imports.setdefault("jitcore", jitcore)
        check = BoundSymbol(READ, (site, outcome, bool, number), {}, None, (), site.source)
        self.context.scopes[-1].append(check)
        self._log(site, outcome)
        return True

    def _check_predicate_within(self, scopes: tuple[list, ...], number: NumberProxy, outcome: bool,
                                varies: bool = False) -> bool:
        """``check_predicate`` for a number a subclass's code read (Note [A number a subclass's code
        reads]): the truth is checked among the operations of the call whose code tests it, where the
        scopes open are those open at the read (not inside another symbol's resolution)."""
        now = self.context.scopes
        if current_context() is not self.context or len(now) != len(scopes) or \
                any(a is not b for a, b in zip(now, scopes)):
            return False
        site = ReadSite(f"the truth of {number.name}", self.context.source(), varies)
        self.context.trace.imports.setdefault("jitcore", jitcore)
        now[-1].append(BoundSymbol(READ, (site, outcome, bool, number), {}, None, (), site.source))
        self._log(site, outcome)
        return True

    def _value_shaped(self, symbol: Symbol, args: tuple, kwargs: dict, out: Any, site: ReadSite,
                      error: DataDependentError) -> Any:
        """Tensor outputs whose shapes the values decided: proxies with the real metadata, checked."""
        leaves, spec = optree.tree_flatten(out, none_is_leaf=True)
        inputs = optree.tree_leaves((args, kwargs), none_is_leaf=True)
        if isinstance(out, (list, tuple)):  # Note [A number of outputs that values decide]
            retried = self._with_read_arguments(symbol, args, kwargs, max_ndim=0)
            if retried is not _REFUSED:
                return retried
        differentiable = any(
            isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) for t in leaves
        )
        if differentiable and torch.is_grad_enabled() and any(
                isinstance(v, TensorProxy) and v.requires_grad for v in inputs):
            retried = self._with_read_arguments(symbol, args, kwargs)
            if retried is _REFUSED:
                raise error  # autograd needs the op's derivative on shadows, which it cannot shape
            return retried
        if not all(isinstance(v, torch.Tensor) for v in leaves):
            raise error
        shape_site = _shape_site(site)
        # nonzero(as_tuple=True)'s coordinates have one length: one symbol (Note [One mask, one count])
        shared: dict[int, Any] | None = {} if symbol.fn is torch.nonzero and kwargs.get("as_tuple") else None
        proxies = [self._shaped_proxy(t, shape_site, i, shared) for i, t in enumerate(leaves)]
        output = optree.tree_unflatten(spec, proxies)
        pairs = list(zip(proxies, leaves))
        self._record_shaped(symbol, args, kwargs, output, pairs, site, {"data_dependent"})
        return output

    def _record_shaped(self, symbol: Symbol, args: tuple, kwargs: dict, output: Any,
                       pairs: list[tuple[TensorProxy, torch.Tensor]], site: ReadSite, tags: set[str]) -> None:
        """A value-shaped call: the op with ``tags``, a check of each output proxy's shape against the
        real output's, and the log line."""
        recorded = dataclasses.replace(symbol, tags=symbol.tags | tags)
        self._record(BoundSymbol(recorded, args, kwargs, output, (), site.source))
        proxies = tuple(proxy for proxy, _real in pairs)
        symbolic = tuple(
            tuple(d for d, size in enumerate(proxy.shadow.shape)
                  if type(size) is torch.SymInt and size.node.expr in self.sizes)
            for proxy in proxies
        )
        traced = output_sizes(tuple(real for _proxy, real in pairs), symbolic)
        check = (_shape_site(site), traced, output_sizes, proxies, symbolic)  # one check of every output
        self._record(BoundSymbol(READ, check, {}, None, (), site.source))
        self._log(site, [tuple(real.shape) for _, real in pairs])

    def _shaped_proxy(self, real: torch.Tensor, shape_site: ReadSite, part: int,
                      shared: dict[int, Any] | None = None) -> TensorProxy:
        """The proxy of output ``part`` of a value-shaped op: its sizes static, but for those that changed
        between calls before, which are symbols (Note [Sizes that values decide], jitcore/jit/shapes.py).
        ``shared``: the symbols of the op's outputs so far by dimension, where they are one size."""
        values = self.context.values
        dims = frozenset() if self.read_dims is None else self.read_dims(shape_site, part, tuple(real.shape))
        dims = frozenset(d for d in dims if d < real.ndim)
        layout = _dense_layout(real)
        if not dims or values.shape_env is None or layout is None:
            return values.proxy_for(values.fake_mode.from_tensor(real, static_shapes=True))
        env = values.shape_env
        made = {d: shared[d] for d in dims if shared is not None and d in shared}
        sizes = [made.get(d) or env.create_unbacked_symint() if d in dims else size
                 for d, size in enumerate(real.shape)]
        if shared is not None:
            shared.update((d, sizes[d]) for d in dims)
        for d in sorted(dims - made.keys()):
            _constrain_range_for_size(sizes[d])  # at least 0, with no check of its own
            # what torch cannot decide without the value (``len(x[mask]) > 4``) it decides with this one,
            # as a condition the computation checks (Note [Sizes that values decide])
            env.set_real_tensor_prop_unbacked_vals(sizes[d].node.expr, real.shape[d])
        with values.fake_mode:
            shadow = torch.empty_permuted(sizes, layout, dtype=real.dtype, device=real.device)
        proxy = values.proxy_for(shadow)
        for d in sorted(dims - made.keys()):
            self.sizes[sizes[d].node.expr] = (proxy, d, real.shape[d])
        return proxy

    def _with_read_arguments(self, symbol: Symbol, args: tuple, kwargs: dict, max_ndim: int = 1) -> Any:
        """The call again with its integer tensor arguments of at most ``max_ndim`` dimensions read as
        Python numbers (``narrow``'s tensor start, ``tensor_split``'s tensor indices): when that makes
        its shapes static, it is recorded as an ordinary, differentiable op behind the reads' checks
        (_REFUSED: it does not)."""

        def read(value: Any) -> Any:
            if isinstance(value, TensorProxy) and not isinstance(value, SubclassTensorProxy) \
                    and not value.requires_grad and value.ndim <= max_ndim \
                    and not value.dtype.is_floating_point and not value.dtype.is_complex:
                return value.item() if value.ndim == 0 else value.tolist()
            return value

        scope = self.context.scopes[-2]
        marks = len(scope), len(self.sites), len(self.numbers)
        with self._enclosing_scope():
            leaves, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True)
            read_leaves = [read(v) for v in leaves]
            if all(a is b for a, b in zip(leaves, read_leaves)):
                return _REFUSED
            read_args, read_kwargs = optree.tree_unflatten(spec, read_leaves)
            try:
                return symbol(*read_args, **read_kwargs)
            except (DataDependentError, TypeError, RuntimeError):
                # the reads made for the attempt are not the program's (ctc_loss's targets: one entry
                # per label sequence otherwise)
                del scope[marks[0]:], self.sites[marks[1]:], self.numbers[marks[2]:]
                return _REFUSED

    def _record(self, bsym: BoundSymbol) -> None:
        self.context.trace.imports.setdefault("jitcore", jitcore)  # check_read's path
        self.context.scopes[-2].append(bsym)

    def _log(self, site: ReadSite, value: Any) -> None:
        self.sites.append(site)
        if _LOG.isEnabledFor(logging.INFO):
            _LOG.info("value read %s: traced with %r, checked on every call", site, value)

    @contextlib.contextmanager
    def _enclosing_scope(self) -> Iterator[None]:
        """Records made inside go to the enclosing scope, in place of the call being read: what a
        composite or jitcore's own expression of the call runs natively (its factories' real tensors are
        its constants: Note [Tensors a native composite makes], jit/tensor_binding.py)."""
        own = self.context.scopes.pop()
        self.natively += 1
        try:
            yield
        finally:
            self.natively -= 1
            self.context.scopes.append(own)


# Note [A number of outputs that values decide]
# ``x.split(n)`` with ``n`` a tensor (``torch.div(seq_len, w, rounding_mode="trunc")`` in LED's
# attention) returns as many tensors as ``n``'s value decides: no check after the op can catch another
# count, since the computation unpacks the outputs first. Eagerly ``Tensor.split`` reads ``int(n)``
# before it splits; so does jitcore for an op with a sequence of outputs whose shapes the values
# decide: its 0-dim integer tensor arguments are read as numbers first, checked before the op,
# and the op is recorded with static shapes when that fixes them.


# Reads whose result is one number that stays symbolic until the program needs its value. Not
# ``float(t)``/``int(t)``: Python's protocol requires a real float/int from ``__float__``/``__int__``.
_NUMBER_READS = frozenset({torch.Tensor.item})
# A dispatch's read that answers ``item()`` of its own class (Note [A number a subclass's item reads])
_INNER_NUMBER_READS = frozenset({torch.ops.aten._local_scalar_dense.default})  # noqa: SLF001
# Reads whose result is a nested list of such numbers (Note [The numbers of tolist]).
_LIST_READS = frozenset({torch.Tensor.tolist})


def _plain_tensors(args: tuple) -> bool:
    return bool(args) and all(type(a) is PlainTensorProxy for a in args)


def _list_shape(value: Any, depth: int) -> tuple[int, ...]:
    """The sizes of a nested list ``depth`` deep (what ``tolist`` gave), read along its first items."""
    sizes: list[int] = []
    for _ in range(depth):
        if type(value) is not list:
            return ()
        sizes.append(len(value))
        value = value[0] if value else None
    return tuple(sizes)


def _dense_layout(t: torch.Tensor) -> tuple[int, ...] | None:
    """The order of ``t``'s dimensions in memory, outermost first, when its elements are laid out
    densely in that order (``nonzero``'s column-major output: ``(1, 0)``); None otherwise. Its storage
    offset is not kept (``nonzero(as_tuple=True)``'s second part starts after the first): a fresh
    output of a value-shaped op, its shadow starts its own storage."""
    layout = tuple(sorted(range(t.ndim), key=lambda d: -t.stride(d)))
    strides = torch.empty_permuted(t.shape, layout, device="meta").stride()
    return layout if strides == t.stride() else None


def _shape_site(site: ReadSite) -> ReadSite:
    """Where the sizes of a value-shaped op's outputs are checked."""
    return ReadSite(f"{SHAPE_OF}{site.what}", site.source)


def _describe(symbol: Symbol, out: Any) -> str:
    name = symbol.id.removeprefix("torch.Tensor.").removeprefix("torch._C.TensorBase.")
    return f"{name}()" if not holds(torch.Tensor, out) else f"{name}(...)"
