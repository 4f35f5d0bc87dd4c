"""The ``inductor`` executor: regions of the flattened trace compiled by torch's inductor.

A region becomes an FX graph (fx_graph.py) compiled with ``torch._inductor.compile_fx.compile_fx``
on example inputs of the traced metadata: C++/OpenMP kernels on CPU, Triton on CUDA. Compiled code
is cached on disk by inductor's own caches (docs/executors.md: location, clearing).

What it does not claim (those run on torch, and the reason is what ``claim`` returns):
- symbols of other languages than torch/aten, custom operators (``torch.ops.<lib>``), lowered calls;
- tags ``inplace`` (and ``out=``), ``random`` (eager's RNG stream must be matched draw for draw),
  ``global_state``, ``check`` and ``data_dependent`` (value reads), ``subclass`` (wrapper
  rebuilds), ``autograd_function``;
- calls reading tensor-subclass proxies, tensor constants or non-strided tensors, a float number
  other than as an operand, ``alpha=`` or clamp bound (Note [Float reads in a region] in
  float_reads.py), and calls whose
  outputs are not all plain tensors (or, for int arithmetic on numbers, ints); ``empty``-like
  factories (their memory is uninitialized, so no compiler may reuse or reorder it unseen).

Symbolic sizes and int numbers are compiled symbolically, floats as 0-d tensors (symbolic.py, Note
[Symbolic regions]); a region running under torch's autograd (``Region.grad``) is compiled with the
inputs that require grad requiring it, so inductor (through AOTAutograd) compiles its forward and
backward, as torch.compile does for a training graph.

Note [Variants of a region]
A symbolic region's compile may add guards (a size it specialized, a relation it assumed) that a
later call breaks. As torch.compile recompiles a frame, such a call makes a new *variant*: the
region compiled again with the call's sizes as the symbols' hints (symbolic.compile_inputs), so its
guards are chosen for them. The call itself, and calls taken by no variant while it compiles, run
the region's FX graph on torch; the variant is compiled on the background thread (on the call when
the background is off) and is then tried after the earlier ones, first whose guards hold wins. At
most ``VARIANT_LIMIT`` (8, torch.compile's ``recompile_limit``) variants; after that, or after a
variant that fails to compile or does not take the sizes it was made for, sizes no variant takes
run on torch. Each step is logged.

Note [Static regions of a symbolic entry]
A region's inputs can have static sizes in an entry whose calls do not: the grad transform's forward
of a symbolic nested-jagged entry holds the ragged total length as a number of the computation,
while the values tensor entering the region keeps the traced length, so the region is compiled for
that length. Inductor's code checks its inputs' sizes and strides (``assert_size_stride``); a call
it refuses whose sizes or strides differ from those compiled for runs the region's FX graph, as a
call of other strides does. Only a refusal of the very sizes and strides compiled for is raised.

Note [Fusion and summation order]
A sum a region computes (the gradient of a weight broadcast over rows: a sum over the rows) is summed
in inductor's order, row after row, where eager's kernel sums in a cascade: the two round differently,
by up to about ``n * eps * sum(|terms|)`` each from the exact sum. The region's result is
torch.compile's bit for bit; docs/executors.md ("Tolerances") has the measurements and why the sums
stay in the regions.

Invariant: a compiled variant is called only with inputs of the strides it was compiled for and on
which the guards its compile added hold; any other call (the prologue does not always guard
strides) runs the region's FX graph instead, which calls the same torch functions the torch
executor would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import jitcore.executors.background as background
from jitcore.executors.float_reads import is_float_number, reads_floats_as_eager
from jitcore.executors.fx_graph import annotate_examples, region_graph
from jitcore.executors.interface import Region
from jitcore.executors.isolation import compiling
from jitcore.executors.regions import LOG
from jitcore.executors.symbolic import compile_inputs
from jitcore.ir import BoundSymbol, Proxy, proxies_in, tree_any
from jitcore.proxies import NumberProxy, TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["InductorExecutor", "REFUSED_TAGS"]

# tag -> why a symbol carrying it stays on torch
REFUSED_TAGS: dict[str, str] = {
    "inplace": "writes a tensor in place",
    "random": "draws random numbers (eager's RNG stream is matched by running it on torch)",
    "global_state": "changes global state",
    "check": "checks a value read while tracing",
    "data_dependent": "has an output shape that depends on values",
    "subclass": "builds a tensor subclass",
    "autograd_function": "runs a user autograd.Function",
    "fusion": "is already lowered",
}
_LANGUAGES = ("torch", "aten")
_OWN_OPERATORS = ("torch.ops.aten.", "torch.ops.prims.")
_UNINITIALIZED = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")
# Python arithmetic on ints (sizes computed from sizes, int dynamic numbers) fused with the tensors
_INT_ARITHMETIC = ("operator.add", "operator.sub", "operator.mul", "operator.floordiv", "operator.mod",
                   "operator.neg", "operator.pos")


class InductorExecutor:
    """Fuses regions of plain-tensor torch/aten calls with inductor (see the module docstring)."""

    def __init__(self, name: str = "inductor", *, min_region: int = 2, recompute: bool = True) -> None:
        """Args:
            name: the executor's name (another instance may be registered under another name).
            min_region: fewer consecutive claimed ops stay on torch: fusing one op saves nothing
                measurable and costs a compile.
            recompute: the grad transform's saved values are chosen for fusion when this executor
                fuses the traces: the backward recomputes the cheap ops it fuses instead of saving
                their outputs (jitcore/transforms/mincut.py).
        """
        self.name = name
        self.min_region = min_region
        self.recompute = recompute

    trains = True  # compiles regions that run under torch's autograd (Region.grad)

    def claim(self, bsym: BoundSymbol) -> str | None:
        symbol = bsym.symbol
        if symbol.id in _INT_ARITHMETIC:
            values = [*proxies_in((bsym.args, bsym.kwargs)), *proxies_in(bsym.output)]
            if all(isinstance(p, NumberProxy) and p.python_type is int for p in values):
                return None
            return "is arithmetic on other than ints"
        if symbol.langctx not in _LANGUAGES:
            return f"is a {symbol.langctx} symbol"
        if symbol.id.startswith("torch.ops.") and not symbol.id.startswith(_OWN_OPERATORS):
            return "is a custom operator"
        for tag in symbol.tags:
            if tag in REFUSED_TAGS:
                return REFUSED_TAGS[tag]
        if "out" in bsym.kwargs:
            return "writes an out= tensor"
        if symbol.name.split(".")[0] in _UNINITIALIZED:
            return "returns uninitialized memory"
        for value in proxies_in((bsym.args, bsym.kwargs)):
            why = _refused_float(bsym) if is_float_number(value) else _refused_input(value)
            if why is not None:
                return why
        if tree_any((bsym.args, bsym.kwargs), _is_tensor_constant):
            return "reads a tensor constant"
        outputs = proxies_in(bsym.output)
        if (not outputs or not _only_proxies(bsym.output)
                or any(not isinstance(p, TensorProxy) or _refused_input(p) for p in outputs)):
            return "returns something other than plain tensors"
        return None

    def fuse(self, region: Region) -> Callable[..., Any]:
        return _Variants(region, _compile(region, None)).call


VARIANT_LIMIT = 8  # compiled variants of one region at most (torch.compile's recompile_limit)


@dataclass(frozen=True)
class _Variant:
    """One compile of a region: its code, the guards the compile added, the strides it takes."""

    compiled: Callable[..., Any]
    guards: Callable[[Sequence[Any]], bool] | None
    sizes: tuple[tuple[Any, ...] | None, ...]  # per input, its example's sizes (None: not a tensor)
    strides: tuple[tuple[Any, ...] | None, ...]
    convert: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None  # floats to 0-d tensors

    def compiled_for(self, args: tuple[Any, ...]) -> bool:
        """Whether ``args`` have the static sizes and strides the code was compiled for: its own input
        checks then refuse them for another reason, which is an error (Note [Static regions of a
        symbolic entry])."""
        return all(z is None or (all(type(n) is int for n in (*z, *s)) and z == a.shape and s == a.stride())
                   for a, z, s in zip(args, self.sizes, self.strides))


def _compile(region: Region, shapes: Sequence[Any] | None) -> _Variant:
    """``region`` compiled for its traced sizes, or (``shapes``) for those of a call."""
    from torch._guards import TracingContext, tracing  # imported on first use: ~1 s
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    graphs: list[Any] = []

    def inner_compile(*args: Any, **kwargs: Any) -> Any:
        graphs.append(compile_fx_inner(*args, **kwargs))
        return graphs[-1]

    # what compiling sets process-wide: isolation.py, Note [Torch's process-global state while compiling]
    with compiling():
        inputs = compile_inputs(region, shapes)
        graph = region_graph(region, floats_as_tensors=bool(inputs.floats))
        annotate_examples(graph, inputs.fake_mode, inputs.examples)
        context = TracingContext(inputs.fake_mode)
        with tracing(context), torch.set_grad_enabled(region.grad):
            compiled = compile_fx(graph, inputs.examples, inner_compile=inner_compile)
    if not region.grad and not inputs.floats:
        compiled = _unwrapped(compiled, graphs, context.fw_metadata, region, inputs)
    sizes = tuple(tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in inputs.examples)
    strides = tuple(tuple(t.stride()) if isinstance(t, torch.Tensor) else None for t in inputs.examples)
    return _Variant(compiled, inputs.guards(), sizes, strides, inputs.converter())


# Note [Calling inductor's code without AOTAutograd's wrapper]
# ``compile_fx`` returns inductor's compiled graph inside AOTAutograd's runtime wrapper (and Dynamo's
# disable wrapper): for a 20-op region 4.75 us a call, the compiled graph itself 2.32 us
# (/tmp/lin52-probes/wrapper_cost.py), more than the prologue and the call layers of a small program
# together. For an inference region the wrapper does these things only (torch/_functorch/_aot_autograd/
# runtime_wrappers.py): regenerates outputs that alias inputs or other outputs, writes back mutated
# inputs, threads effect tokens and functionalized RNG state, turns grad mode off around the call and
# autocast off when it was on at compile time. A region mutates no input and draws no random numbers
# (the claim refuses in-place, ``out=``, random and effectful calls). So a region compiled for inference
# (not ``Region.grad``), with static sizes and no float numbers, none of whose outputs is a view or
# shares memory with an input or another output (its FX graph run on the compile's fake inputs) is
# called as the compiled graph itself, with grad mode off; a call under autocast goes through the
# wrapper. The compiled graph is the one ``inner_compile`` made, or, where AOTAutograd's disk cache
# answered (no ``inner_compile`` call, no metadata), the one CompiledFxGraph inside the wrapper's
# closures; none found, the wrapper stays.
def _wrapper_does_nothing(metadata: Any, graph: Any, fake_mode: Any, examples: Sequence[Any]) -> bool:
    """Whether AOTAutograd's runtime wrapper of an inference region only turns grad mode off (Note
    above): static tensor inputs; no output aliasing an input or another output, nor a view (run on
    the compile's fake examples); and, where this compile traced the region (``metadata``, None on a
    disk-cache hit), AOTAutograd's own account agreeing. The region's calls mutate no input and draw
    no random numbers (the claim refuses them)."""
    from torch._functorch._aot_autograd.schemas import OutputType

    if not all(isinstance(t, torch.Tensor) for t in examples):
        return False
    if not all(type(n) is int for t in examples for n in (*t.shape, *t.stride())):
        return False
    if metadata is not None and not (
            metadata.num_mutated_inp_runtime_indices == 0 and metadata.num_intermediate_bases == 0
            and not metadata.tokens and not metadata.is_rng_op_functionalized
            and all(o.output_type is OutputType.non_alias for o in metadata.output_info)):
        return False
    with fake_mode, torch.no_grad():
        outputs = graph(*examples)
    storages = [t.untyped_storage()._cdata for t in examples]  # noqa: SLF001
    for output in outputs:
        if not isinstance(output, torch.Tensor) or output._base is not None:  # noqa: SLF001
            return False
        storage = output.untyped_storage()._cdata  # noqa: SLF001
        if storage in storages:
            return False
        storages.append(storage)
    return True


def _unwrapped(compiled: Callable[..., Any], graphs: list[Any], metadata: Any, region: Region,
               inputs: Any) -> Callable[..., Any]:
    """``compiled`` without AOTAutograd's wrapper where it does nothing (Note above), else itself;
    a question this cannot answer keeps the wrapper."""
    try:
        inner = graphs[0] if len(graphs) == 1 else _compiled_graph_inside(compiled) if not graphs else None
        if inner is not None and _wrapper_does_nothing(metadata, region_graph(region), inputs.fake_mode,
                                                       inputs.examples):
            return _Unwrapped(compiled, inner).call
    except Exception as exc:  # noqa: BLE001 - the wrapper is always right
        LOG.info("a fused region keeps AOTAutograd's wrapper: %s: %s", type(exc).__name__, exc)
    return compiled


def _compiled_graph_inside(compiled: Callable[..., Any]) -> Any:
    """Inductor's compiled graph inside ``compile_fx``'s callable when AOTAutograd's disk cache made it
    (no ``inner_compile`` call): found through the wrappers' closures, None unless exactly one."""
    from torch._inductor.output_code import CompiledFxGraph

    found: list[Any] = []
    seen: set[int] = set()
    layer: list[Any] = [compiled]
    for _ in range(8):
        after: list[Any] = []
        for obj in layer:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, CompiledFxGraph):
                found.append(obj)
                continue
            for cell in getattr(obj, "__closure__", None) or ():
                try:
                    after.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
            after.extend(getattr(obj, name) for name in ("__wrapped__", "compiled_fn") if hasattr(obj, name))
            if not isinstance(obj, type) and isinstance(getattr(obj, "__dict__", None), dict):
                after.extend(v for v in vars(obj).values() if callable(v) or isinstance(v, CompiledFxGraph))
        layer = after
    return found[0] if len(found) == 1 else None


class _Unwrapped:
    """A region's compiled graph called directly (Note [Calling inductor's code without AOTAutograd's
    wrapper]); ``wrapped`` (``compile_fx``'s callable) under autocast. Inductor's code is called
    without the compiled graph's ``__call__`` where that call does nothing but call it (Note
    [Calling the compiled graph's code])."""

    def __init__(self, wrapped: Callable[..., Any], graph: Callable[[list[Any]], Any]) -> None:
        import torch._inductor.debug as inductor_debug
        from torch._inductor.output_code import CompiledFxGraph

        self.wrapped, self.graph = wrapped, graph
        self.profiler, self.inductor_debug = torch.autograd.profiler, inductor_debug
        # its __call__'s work is known (the Note), for the torch this was written against (2.13)
        self.direct = (type(graph) is CompiledFxGraph and hasattr(graph, "_compile_context")
                       and hasattr(inductor_debug, "RECORD_GRAPH_EXECUTION")
                       and hasattr(self.profiler, "_is_profiler_enabled"))

    def call(self, *args: Any) -> Any:
        if torch._C._is_any_autocast_enabled():  # noqa: SLF001
            return self.wrapped(*args)
        graph = self.graph
        # Note [Calling the compiled graph's code]
        if self.direct and graph._compile_context is None and not self.profiler._is_profiler_enabled \
                and not self.inductor_debug.RECORD_GRAPH_EXECUTION:
            graph = graph.current_callable
        if torch.is_grad_enabled():
            torch._C._set_grad_enabled(False)  # noqa: SLF001
            try:
                return graph(list(args))
            finally:
                torch._C._set_grad_enabled(True)  # noqa: SLF001
        return graph(list(args))


# Note [Calling the compiled graph's code]
# ``CompiledFxGraph.__call__`` (torch/_inductor/output_code.py) calls ``self.current_callable(inputs)``,
# inductor's generated ``call``, and around it: appends to inductor's graph-execution record when its
# debug flag ``RECORD_GRAPH_EXECUTION`` is on; enters the autotune cache bundler's compile context while
# the graph still holds one (``_compile_context``, cleared on the call after the bundler ends: the
# first call); opens a profiler range ("## Call CompiledFxGraph ... ##") when torch's profiler is on;
# and flushes the thread's runtime compile metrics (what a lazy compile inside the call gathered: a
# log record). With the flag off, no context held and the profiler off, the call is the generated
# code's call alone, which an unwrapped region makes itself: ~1 us a region (a 20-op chain's cached
# call 7.3 -> 6.4 us, a 3-Linear MLP's under no_grad 27.9 -> 22.5 us: /tmp/spd56-probes/direct_ab.py).
# The metrics of such a lazy compile are flushed by the next flush instead (a log record, no value).
# In every other case, and for a graph of another type, the compiled graph's ``__call__`` runs, as before.


class _Variants:
    """A fused region's compiled variants (Note [Variants of a region]); ``call`` runs it."""

    def __init__(self, region: Region, first: _Variant) -> None:
        self.region = region
        self.variants: tuple[_Variant, ...] = (first,)  # replaced whole: a call reads one tuple
        self.graph = region_graph(region)
        self.convert = first.convert
        self.compiling = False
        self.closed = False  # no further variants: the limit was reached or a compile failed

    def call(self, *args: Any) -> Any:
        values = self.convert(args) if self.convert is not None else args
        for variant in self.variants:
            if variant.guards is None or variant.guards(values):
                try:
                    return variant.compiled(*values)
                except AssertionError:  # inductor's own input checks: sizes and strides
                    if variant.compiled_for(args):
                        raise  # the sizes and strides it was compiled for: not a layout the code rejects
                return self.graph(*args)  # other sizes or strides than compiled for: the same torch calls
        self._add_variant(args)
        return self.graph(*args)

    def _add_variant(self, args: tuple[Any, ...]) -> None:
        """Compile a variant for ``args``' sizes (in the background when it is on) unless one is
        being compiled or no further one is made; this call runs on torch."""
        if self.compiling or self.closed:
            return
        sizes = [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]
        if len(self.variants) >= VARIANT_LIMIT:
            self.closed = True
            LOG.warning("a fused region's guards failed for sizes %s and it has %d variants (the "
                        "limit): sizes none of them takes run on torch", sizes, VARIANT_LIMIT)
            return
        shapes = [(tuple(a.shape), tuple(a.stride())) if isinstance(a, torch.Tensor) else a for a in args]
        LOG.info("a fused region's guards failed for sizes %s: compiling variant %d for them (they "
                 "run on torch until it is ready)", sizes, len(self.variants) + 1)
        self.compiling = True

        def add() -> None:
            try:
                variant = _compile(self.region, shapes)
                if variant.guards is not None and not variant.guards(self._stand_ins(shapes)):
                    raise ValueError(f"the variant compiled for sizes {sizes} does not take them")
                self.variants = (*self.variants, variant)
            except Exception as exc:  # noqa: BLE001 - a failed variant leaves those sizes on torch
                self.closed = True  # a further variant would most likely fail the same way
                LOG.warning("a variant of a fused region failed: %s: %s; sizes its variants do not "
                            "take run on torch", type(exc).__name__, exc)
            finally:
                self.compiling = False

        if background.background_enabled() and not background.on_compile_thread():
            background.submit("a fused region's variant", add)
        else:
            add()

    def _stand_ins(self, shapes: Sequence[Any]) -> tuple[Any, ...]:
        """Arguments of ``shapes``' sizes and strides (meta tensors) for checking guards."""
        args = tuple(torch.empty_strided(*shape, device="meta") if isinstance(shape, tuple) else shape
                     for shape in shapes)
        return self.convert(args) if self.convert is not None else args


def _refused_float(bsym: BoundSymbol) -> str | None:
    """None when a float number is read as eager reads it in a region (Note [Float reads in a
    region] in float_reads.py)."""
    if reads_floats_as_eager(bsym):
        return None
    return "reads a float number other than as an operand, alpha or clamp bound"


def _refused_input(value: Proxy) -> str | None:
    if isinstance(value, SubclassTensorProxy):
        return "reads a tensor subclass"
    if isinstance(value, NumberProxy):
        return None if value.python_type is int else f"reads a {value.python_type.__name__} number"
    if not isinstance(value, TensorProxy):
        return f"reads a {type(value).__name__}"
    if value.shadow.layout != torch.strided:
        return "reads a non-strided tensor"
    return None


def _is_tensor_constant(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, Proxy)


def _only_proxies(value: Any) -> bool:
    return not tree_any(value, lambda leaf: not isinstance(leaf, Proxy))
