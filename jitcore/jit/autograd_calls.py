"""Autograd called by the traced program: ``loss.backward()``, ``torch.autograd.backward`` and
``torch.autograd.grad`` inside a jitted function (a training step: forward, backward, optimizer).

While tracing, a backward is one record, ``autograd_grad(outputs, inputs, grad_outputs)``
(jitcore/langctx/backward.py): its
gradients are computed on the shadows' autograd graph (torch's own engine on fake tensors), so
their metadata is exact and an error eager would raise (a non-scalar output without a gradient, an
output that does not require grad) is raised at the user's line. Every trace holding such a record
goes through the grad transform (jitcore/transforms/grad.py), whose replay runs the record under its
recording mode: the executed trace holds the backward's aten ops, like any other op.

``.grad`` is kept as eager keeps it:
- an input's gradient that exists when the backward runs is accumulated into in place (the caller's
  gradient tensor is written, as eager's ``AccumulateGrad`` does with grad mode off);
- where there is none, the input's ``.grad`` is set: to the gradient's shadow while tracing (native
  reads such as an optimizer's ``p.grad`` then see it and map it back to its proxy), and on every
  call to the computed gradient, by the side-effect replay (jitcore/jit/effects.py);
- a tensor made inside the function that requires grad keeps its gradient for the rest of the pass.

torch's function transforms (``torch.func.vmap``, ``grad``, ``jacrev``, ...) wrap tensors in
functorch's own levels, which tracing does not model: a call that reaches one runs eagerly, with one
warning (JC-J002), instead of tracing a wrong program.

``create_graph=True`` (a gradient penalty, a Hessian-vector product) records a backward whose ops are
themselves differentiated by the grad transform. Without ``retain_graph`` (or ``create_graph``), the
graph's saved buffers are freed on the pass's shadows as eagerly, so a second backward through them
raises eager's error at the user's line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.nested._internal.nested_tensor import NestedTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

import jitcore
from jitcore.dispatch.resolver import NO_OVERRIDE, handle_torch_function
from jitcore.errors import DataDependentError, EagerOnlySubclass, EagerOnlyValue, UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.jit.function_transforms import TransformTensors, function_transform_lookasides
from jitcore.jit.inner_hooks import Hooked, InnerHooks, engine_order
from jitcore.langctx.backward import AUTOGRAD_GRAD, free_graph, graph_leaves, graph_nodes
from jitcore.langctx.reads import runs_under_autograd
from jitcore.proxies import TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["AutogradCalls"]


class AutogradCalls:
    """The autograd calls of one tracing pass (the pass hands itself in: its provenance, snapshots
    and tensor values)."""

    def __init__(self, tracing_pass: Any) -> None:
        self._pass = tracing_pass
        self._inner_grads: dict[int, Any] = {}  # id(proxy made inside) -> its gradient, this pass
        self._unfreed: dict[int, Any] = {}  # id(node) -> a shadow graph's node a backward could not free
        self.transforms = TransformTensors(tracing_pass.held.bind)  # jit/function_transforms.py
        # hooks the program registers on tensors it computes: jit/inner_hooks.py
        self.hooks = InnerHooks(lambda p: tracing_pass.provenance.input_of(p) is not None)

    # --- what the program calls ----------------------------------------------------------------------
    def lookasides(self) -> dict[Any, Callable[..., Any]]:
        found: dict[Any, Callable[..., Any]] = {torch.autograd.backward: self.backward,
                                                torch.autograd.grad: self.grad}
        found.update(function_transform_lookasides(self.transforms))
        return found

    def tensor_backward(self, tensor: TensorProxy, gradient: Any = None, retain_graph: Any = None,
                        create_graph: bool = False, inputs: Any = None) -> None:
        """``tensor.backward(...)``."""
        self.backward(tensor, gradient, retain_graph, create_graph, inputs=inputs)

    def backward(self, tensors: Any, grad_tensors: Any = None, retain_graph: Any = None,
                 create_graph: bool = False, grad_variables: Any = None, inputs: Any = None) -> None:
        """``torch.autograd.backward``: gradients accumulated into the leaves' ``.grad``."""
        outputs = _as_list(tensors)
        relevant = _tensors(outputs) + (_tensors(_as_list(inputs)) if inputs is not None else ())
        overridden = handle_torch_function(torch.autograd.backward, relevant, (tuple(outputs),), dict(
            grad_tensors=grad_tensors, retain_graph=retain_graph, create_graph=create_graph,
            inputs=tuple(_as_list(inputs)) if inputs is not None else None))
        if overridden is not NO_OVERRIDE:  # a subclass's __torch_function__ handled it, as eagerly
            return overridden
        grad_outputs = _as_list(grad_tensors) if grad_tensors is not None else [None] * len(outputs)
        if inputs is None:
            self._refuse_the_callers_graph(outputs)
        leaves = _as_list(inputs) if inputs is not None else self._leaves(outputs)
        hooked = self.hooks.reached(_grad_fns(outputs))  # Note [Hooks registered inside the program]
        if hooked and (inputs is not None or create_graph):
            raise UnsupportedOperationError(
                "backward(inputs=...) or backward(create_graph=True) through a tensor with a hook registered "
                "inside the jitted function is not supported")
        order: list[int] = []
        grads = self._record(outputs, [*leaves, *(h.proxy for h in hooked)], grad_outputs, bool(create_graph),
                             retain_graph, order=order if hooked else None)
        held = {id(s) for s in _shadows([*outputs, *grad_outputs, *leaves])}  # Note [A gradient eager steals]
        held.update(id(g.shadow) for g in grads[len(leaves):] if g is not None)
        for i in _in_engine_order(order, len(leaves), len(hooked)):
            grad = grads[i]
            if grad is None:
                continue
            if i >= len(leaves):
                self._run_inner_hooks(hooked[i - len(leaves)], grad)
                continue
            leaf = leaves[i]
            grad = self._run_hooks(leaf, "_backward_hooks", grad)  # Note [A caller's tensor hooks]
            stealable = id(grad.shadow) not in held
            held.add(id(grad.shadow))
            self._accumulate(leaf, grad, bool(create_graph), stealable)
            self._run_hooks(leaf, "_post_accumulate_grad_hooks", leaf)

    def _run_inner_hooks(self, hooked: Hooked, grad: TensorProxy) -> None:
        """The hooks the program registered on a tensor it computed, on its gradient, then its retained
        gradient (Note [Hooks registered inside the program], jit/inner_hooks.py)."""
        run = current_run()
        for hook in tuple(hooked.hooks.values()):
            if run.call(hook, grad) is not None:
                raise UnsupportedOperationError(
                    "a hook registered inside the jitted function on a tensor it computed returns a new "
                    "gradient: what flows on to the leaves is not traced")
        if hooked.retained:
            old = self._inner_grads.get(id(hooked.proxy))
            self._inner_grads[id(hooked.proxy)] = (
                grad.clone(memory_format=torch.contiguous_format) if old is None else old + grad)

    def grad(self, outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: Any = None,
             create_graph: bool = False, only_inputs: bool = True, allow_unused: bool | None = None,
             is_grads_batched: bool = False, materialize_grads: bool = False) -> tuple[Any, ...]:
        """``torch.autograd.grad``: the gradients themselves; no ``.grad`` is touched."""
        outs, ins = _as_list(outputs), _as_list(inputs)
        relevant = _tensors(outs) + _tensors(ins)
        overridden = handle_torch_function(torch.autograd.grad, relevant, (tuple(outs), tuple(ins)),
                                           dict(grad_outputs=grad_outputs, retain_graph=retain_graph,
                                                create_graph=create_graph, only_inputs=only_inputs,
                                                allow_unused=allow_unused, is_grads_batched=is_grads_batched,
                                                materialize_grads=materialize_grads))
        if overridden is not NO_OVERRIDE:  # a subclass's __torch_function__ handled it, as eagerly
            return overridden
        grad_outs = _as_list(grad_outputs) if grad_outputs is not None else [None] * len(outs)
        if self.hooks.reached(_grad_fns(outs)):
            raise UnsupportedOperationError(
                "torch.autograd.grad through a tensor with a hook registered inside the jitted function "
                "is not supported")
        if is_grads_batched:
            grads = self._record_batched(outs, ins, grad_outs, bool(create_graph), retain_graph)
        else:
            grads = self._record(outs, ins, grad_outs, bool(create_graph), retain_graph)
        # Note [A caller's tensor hooks]
        grads = tuple(g if g is None else self._run_hooks(i, "_backward_hooks", g)
                      for i, g in zip(ins, grads))
        if not (allow_unused or materialize_grads) and any(g is None for g in grads):
            raise RuntimeError("One of the differentiated Tensors appears to not have been used in the "
                               "graph. Set allow_unused=True if this is the desired behavior.")
        if materialize_grads:
            grads = tuple(torch.zeros_like(i) if g is None else g for g, i in zip(grads, ins))
        return tuple(grads)

    # Note [A caller's tensor hooks]
    # Hooks the caller registered on its tensors (``w.register_hook(fn)``,
    # ``w.register_post_accumulate_grad_hook(fn)``: gradient scaling, logging, an optimizer step per
    # parameter in the backward) run eagerly when a backward reaches them: ``fn(grad)`` before the
    # gradient is accumulated or captured by ``torch.autograd.grad`` (a result that is not None
    # replaces it), ``fn(tensor)`` after ``.grad`` is set. The pass's backward runs on the shadows,
    # which hold none of them, so a backward inside the function ignored them (values differed from
    # eager's, their effects never happened). Each such hook dict of a reached caller tensor is read
    # as state at its path (guarded: None, or the same functions under the same keys, as a module's
    # hook dicts are), and its hooks are interpreted there, so what they compute and write is traced
    # and replayed as the program's own code is. Per leaf, in the order the pass walks the leaves,
    # which for hooks of different leaves that write one object may differ from the engine's.
    def _run_hooks(self, proxy: Any, name: str, value: Any) -> Any:
        """Run the hooks ``name`` of the caller's tensor behind ``proxy`` on ``value`` (the Note above);
        returns the value a pre-hook replaced."""
        found = self._pass.provenance.input_of(proxy) if isinstance(proxy, TensorProxy) else None
        if found is None:
            if name == "_backward_hooks":  # a leaf made inside (Note [Hooks registered inside the program])
                for hook in self.hooks.leaf_hooks(proxy):
                    result = current_run().call(hook, value)
                    value = value if result is None else result
            return value
        path, tensor = found
        hooks = self._pass.provenance.bind_state(getattr(tensor, name, None), path.attr(name))
        if not hooks:
            return value
        run = current_run()
        for hook in tuple(hooks.values()):
            result = run.call(hook, value)
            if name == "_backward_hooks" and result is not None:
                value = result
        return value

    def read_grad(self, proxy: TensorProxy) -> Any:
        """``proxy.grad``: an input's, read through its path; one a backward of this pass set."""
        if id(proxy) in self._inner_grads:
            return self._inner_grads[id(proxy)]
        found = self._pass.provenance.input_of(proxy)
        if found is None:
            raise UnsupportedOperationError(
                f"torch.Tensor.grad: {proxy.name} is computed by the program and no backward of this "
                "function set its gradient")
        path, tensor = found
        return self._pass.grad_value(tensor, path)

    # --- recording -------------------------------------------------------------------------------
    def _record(self, outputs: list, inputs: list, grad_outputs: list, create_graph: bool,
                retain_graph: Any, order: list[int] | None = None) -> tuple[Any, ...]:
        """The backward's record; with ``order``, the engine's order of reaching ``inputs`` is noted in it."""
        eager_op = runs_under_autograd(self._pass.trace.bound_symbols)
        if eager_op is not None:  # Note [Value-shaped ops under grad] in jitcore/jit/value_reads.py
            through, why = eager_op.symbol.name, "whose outputs' shapes depend on tensor values"
            if "autograd_function" in eager_op.symbol.tags:  # Note [A Function whose forward reads values]
                function = eager_op.args[0] if eager_op.args else None
                through = f"{getattr(function, '__qualname__', through)}.apply"
                why = "whose forward reads tensor values"
            raise DataDependentError(
                f"a backward inside the jitted function through {through}, {why}: it runs under torch's "
                "autograd, and its gradient graph exists only when it runs",
                hints=("call backward() on the jitted function's output, outside it",))
        if self._pass.logs.in_dispatch():  # Note [A library's dispatch logs its ops], jit/log_records.py
            raise EagerOnlyValue(
                "a backward inside the jitted function over a tensor subclass whose __torch_dispatch__ "
                "(torch's LoggingTensor) logs the ops it is given: the backward's ops it logs are not traced",
                hints=("disable the logger, or call backward() on the jitted function's output",))
        for i, (out, grad) in enumerate(zip(outputs, grad_outputs)):  # eager's checks and messages
            if isinstance(out, TensorProxy) and not out.requires_grad:
                raise RuntimeError(
                    f"element {i} of tensors does not require grad and does not have a grad_fn")
            if grad is None and isinstance(out, TensorProxy) and out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
        roots = _grad_fns(outputs)
        if self._unfreed and any(id(n) in self._unfreed for n in graph_nodes(roots)):
            raise EagerOnlySubclass(  # Note [A graph the pass could not free]
                "a second backward through a graph whose first backward ran a tensor subclass's "
                "backward code that reads values without retain_graph")
        self._pass.trace.imports.setdefault("jitcore", jitcore)
        with engine_order(inputs, order) if order is not None else contextlib.nullcontext():
            if create_graph:
                grads = tuple(AUTOGRAD_GRAD(outputs, inputs, grad_outputs, create_graph=True))
            else:
                grads = tuple(AUTOGRAD_GRAD(outputs, inputs, grad_outputs))
        if not (create_graph if retain_graph is None else retain_graph):  # eager frees the graph's buffers
            fake_mode = self._pass.context.values.fake_mode
            with self._pass.snapshots.writing_nothing():  # Note [Freeing runs the backward again]
                freed = free_graph(_shadows(outputs), _shadows(inputs), _shadows(grad_outputs), fake_mode)
            if not freed:
                self._unfreed.update((id(n), n) for n in graph_nodes(roots))
        return grads

    # Note [Freeing runs the backward again]
    # ``free_graph`` runs the backward a second time on the shadows. A user subclass's
    # ``__torch_dispatch__`` runs again there on the pass's interpreter, state-tracked as the program's
    # code is, so its ``LOG.append(func.__name__)`` for the backward's ops (``ones_like``, ``expand``,
    # ``mm``) was recorded twice and replayed twice on every call where eager logs once. Its writes are
    # undone after it: the recorded backward made the program's.

    # Note [A graph the pass could not free]
    # Freeing the shadows' graph runs the backward again on the shadows, natively. A subclass whose own
    # backward code reads values (MaskedTensor's ``mul`` in ``exp``'s backward compares the operands'
    # masks with ``.item()``) cannot run there: ``m.exp().sum().backward()`` raised where eager
    # computes. Its gradients were recorded already (the reads answered by the probe), so only the
    # freeing is skipped; a later backward through any node of that graph, which eager may refuse
    # ("backward through the graph a second time") or not, runs the call eagerly, which answers as
    # eager does.

    def _record_batched(self, outputs: list, inputs: list, grad_outputs: list, create_graph: bool,
                        retain_graph: Any) -> tuple[Any, ...]:
        """``is_grads_batched=True`` (``torch.autograd.functional.jacobian(..., vectorize=True)``):
        eager vmaps the backward over the first dimension of every grad_output. A backward is linear
        in its grad_outputs, so one backward per row, stacked, gives eager's gradients; each is an
        ordinary record (the graph kept for the next row), differentiated like any other."""
        rows = {g.shape[0] if isinstance(g, torch.Tensor) and g.dim() > 0 else None for g in grad_outputs}
        if len(rows) != 1 or None in rows or 0 in rows:  # eager's vmap raises, or passes a None through
            raise UnsupportedOperationError(
                "torch.autograd.grad(is_grads_batched=True) inside a jitted function needs every "
                "grad_output to be a tensor with the same number of rows, at least one")
        (count,) = rows
        keep = create_graph if retain_graph is None else retain_graph
        per_row = [self._record(outputs, inputs, [g[i] for g in grad_outputs], create_graph,
                                True if i < count - 1 else keep) for i in range(count)]
        return tuple(None if column[0] is None else torch.stack(column) for column in zip(*per_row))

    # Note [A backward into the caller's graph]
    # An input that requires grad and is no leaf (an activation the caller computed) has the caller's
    # graph behind it: eagerly, ``loss.backward()`` inside the function goes on through it into the
    # caller's leaves (``base.grad``). The pass holds only the input's shadow, whose history is torch's
    # marker that raises ("Tried to backward() through example input"), so the call raised where eager
    # computes. Such a backward runs the call eagerly (JC-J002); ``torch.autograd.grad`` and
    # ``backward(inputs=...)``, which stop at what they name, are traced as before.
    def _refuse_the_callers_graph(self, outputs: list) -> None:
        # a subclass input's shadow has the marker's history too (Note [A caller's non-leaf subclass
        # value], jitcore/jit/subclass_inputs.py)
        provenance = self._pass.provenance
        inputs = [proxy for _path, proxy, _tensor in provenance.inputs]
        inputs += [proxy for proxy, _path in provenance.subclass_inputs]
        behind = {id(node): node for node in _grad_fns(inputs) if node is not None}  # kept: ids of live
        roots = _grad_fns(outputs)
        if behind and any(id(node) in behind for node in graph_nodes(roots)):
            raise EagerOnlyValue(
                "backward() inside the function reaches an input that requires grad and is no leaf: its "
                "gradient goes on into the caller's graph, outside the trace",
                hints=("call backward() on the jitted function's output, outside it",),
            )

    def _leaves(self, outputs: list) -> list[TensorProxy]:
        """The leaves the outputs' graph reaches (what ``backward()`` accumulates into), in the
        order the graph is walked from the outputs."""
        values = self._pass.context.values
        roots = _grad_fns(outputs)
        leaves = [values.proxy_for(leaf) for leaf in graph_leaves(roots)]
        return [*_leaf_outputs(outputs, leaves), *leaves]

    def _accumulate(self, leaf: TensorProxy, grad: TensorProxy, create_graph: bool, stealable: bool) -> None:
        found = self._pass.provenance.input_of(leaf)
        if found is None:  # made inside the function: its gradient lives as long as the pass
            old = self._inner_grads.get(id(leaf))
            if old is None:
                self._inner_grads[id(leaf)] = _first_grad(leaf, grad, create_graph, stealable, detach=False)
            else:
                self._inner_grads[id(leaf)] = old + grad if create_graph else old.add_(grad)
            return
        path, tensor = found
        old = self._pass.grad_value(tensor, path)
        if old is None:
            self._set_grad(tensor, path, _first_grad(leaf, grad, create_graph, stealable, detach=True))
        elif create_graph:  # grad mode is on in the backward: eager's AccumulateGrad adds out of place
            self._set_grad(tensor, path, old + grad)
        else:
            old.add_(grad)  # in place into the caller's gradient tensor, as eager accumulates

    def write_grad(self, proxy: TensorProxy, value: Any) -> None:
        """``proxy.grad = value`` in the program (``w.grad = None``, ``w.grad = torch.zeros_like(w)``):
        an input's gradient set as a backward's first gradient is, an effect replayed on every call; a
        tensor made inside keeps it for the rest of the pass."""
        if value is not None and not isinstance(value, TensorProxy):
            raise UnsupportedOperationError(
                f"torch.Tensor.grad: assigning a {type(value).__qualname__} to .grad of a traced tensor "
                "is not supported; assign None or a tensor the program computes")
        found = self._pass.provenance.input_of(proxy)
        if found is None:
            if value is None:
                self._inner_grads.pop(id(proxy), None)
            else:
                self._inner_grads[id(proxy)] = value
            return
        path, tensor = found
        if value is None:
            self._pass.snapshots.take(tensor, path)
            tensor.grad = None
        else:
            self._set_grad(tensor, path, value)

    def _set_grad(self, tensor: torch.Tensor, path: Any, grad: TensorProxy) -> None:
        """The caller's ``tensor.grad`` set to ``grad``: to its shadow while tracing (native reads such
        as an optimizer's ``p.grad`` see it: Pass.grad_value maps it back), and on every call to the
        computed gradient, an effect the side-effect replay makes (jit/effects.py)."""
        self._pass.snapshots.take(tensor, path)
        values = self._pass.context.values
        values.bind(grad.shadow, grad)  # (a subclass gradient's shadow too)
        held = _grad_to_hold(tensor, grad.shadow, values.fake_mode)
        if held is not grad.shadow:
            values.alias(held, grad)
        tensor.grad = held  # torch's setter checks it as eager's does (shape, dtype, device)


# Note [A gradient eager steals]
# A leaf's first gradient is stored by eager's ``AccumulateGrad`` as the very tensor the backward made
# only when nothing else holds it and its strides are the leaf's (the gradient layout contract); else
# it stores a copy with the leaf's strides (``clone_obey_contract``), and always a copy when grad mode is
# on (``create_graph=True``). The pass stored the gradient itself: ``(a + b).sum().backward()`` gave
# ``a`` and ``b`` one expanded tensor of stride 0 as ``.grad`` (the next call's accumulation raised
# "more than one element of the written-to tensor refers to a single memory location"), and nn.LSTM's
# two biases one shared tensor, so accumulating over calls added each bias's gradient twice. A gradient
# that is an output, a grad_output, a leaf, or another leaf's gradient of the same backward, or whose
# strides are not provably the leaf's, is stored as eager's copy.
def _first_grad(leaf: TensorProxy, grad: TensorProxy, create_graph: bool, stealable: bool,
                detach: bool) -> TensorProxy:
    """What a leaf's ``.grad`` is first set to by a backward (the Note above), with the ops eager's
    ``AccumulateGrad`` runs for it (a subclass's ``__torch_dispatch__`` sees them)."""
    if leaf.is_nested or leaf.is_sparse or grad.is_sparse:
        return grad  # a jagged or sparse gradient: eager's rules for them are not modelled
    if stealable and not create_graph and _obeys_layout_contract(grad.shadow, leaf.shadow):
        # Note [AccumulateGrad's detach]; a view (a Linear weight's gradient is ``mm(...).t()``) is
        # stored as eager's ``detach()`` of it, no view: ``p.grad.detach_()`` works on it
        if (detach and isinstance(grad, SubclassTensorProxy)) or _is_view(grad.shadow):
            return grad.detach()
        return grad
    if is_non_overlapping_and_dense_or_false(leaf.shadow):
        copy = grad.new_empty_strided(leaf.shape, leaf.stride(), dtype=grad.dtype, device=leaf.device)
        return copy.copy_(grad)
    return grad.clone(memory_format=torch.contiguous_format)


def _is_view(tensor: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        return tensor._is_view()  # noqa: SLF001


def _obeys_layout_contract(grad: torch.Tensor, leaf: torch.Tensor) -> bool:
    """torch's ``obeys_layout_contract``, answered without a guard: False where not provable."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        if is_non_overlapping_and_dense_or_false(leaf):
            return all(statically_known_true(g != 0) if statically_known_true(size == 1)
                       else statically_known_true(g == v)
                       for size, g, v in zip(grad.shape, grad.stride(), leaf.stride()))
        return grad.is_contiguous()


# Note [AccumulateGrad's detach]
# Eagerly ``backward()`` stores a leaf's first gradient as ``new_grad.detach()`` (AccumulateGrad, grad
# mode off): a subclass's ``__torch_dispatch__`` sees that ``detach``, after the backward's ops. The
# pass stored the gradient itself: a logging class's cached calls logged one op less, and the order
# differed from eager's. The pass detaches a subclass gradient it stores as ``.grad`` so too.


# Note [The gradient a caller's jagged tensor holds]
# While tracing, a leaf of the caller's gets its gradient's shadow as ``.grad`` so that native reads
# see it (the pass maps it back to the gradient's proxy). torch's ``.grad`` setter checks that the
# sizes match, and a nested jagged tensor's ragged size is a nested int: the caller's tensor has its
# own (``j1``), the shadow the pass's symbolic one, which torch cannot compare with it
# (AttributeError: 'NestedIntNode' object has no attribute 'hint', where eager computes). The leaf
# holds instead a jagged tensor over the shadow's values and the caller's offsets: the caller's
# ragged size, the shadow's values. The effect replayed on every call stores the computed gradient,
# built over the caller's offsets as eager's is.


# Note [The gradient of a leaf with symbolic sizes]
# Likewise, a caller's plain leaf whose gradient has symbolic sizes in the pass (``values`` of an NJT
# made inside, of a batch of another total length): torch's ``.grad`` setter compared the sizes and
# so guarded them (``Eq(s0, 10)``), and the pass kept no symbol: a training step with its backward
# inside traced an entry per size. The leaf holds a fake tensor of its own sizes and strides instead,
# an alias of the gradient's proxy (native reads of ``.grad`` map back to it, ``Pass.grad_value``).


# Note [The gradient of a wrapper leaf with symbolic sizes]
# So for a caller's wrapper subclass leaf (a TwoTensor requiring grad, its sizes symbolic: Note [Subclass
# inputs that follow an inner tensor], subclass_inputs.py) whose gradient is a value of its class: the
# setter's size check made ``s0`` a constant, the pass kept no symbol, and a function whose backward runs
# inside traced an entry per batch size. The leaf holds a value of the gradient's class rebuilt by its
# ``__tensor_unflatten__`` over fake inner tensors of the caller's inner sizes and strides, with the
# caller's outer ones; where that cannot be made (another structure, a ctx holding sizes), the gradient's
# shadow itself, as before.
def _wrapper_grad_to_hold(tensor: torch.Tensor, shadow: Any, fake_mode: Any) -> Any:
    cls = type(shadow)
    if type(tensor) is not cls or not is_traceable_wrapper_subclass(shadow) or not _symbolic(shadow):
        return shadow
    try:
        names, ctx = shadow.__tensor_flatten__()
        if list(names) != list(tensor.__tensor_flatten__()[0]) or any(
                isinstance(v, (torch.SymInt, torch.SymFloat)) for v in torch.utils._pytree.tree_leaves(ctx)):
            return shadow
        inner = {}
        for name in names:
            grad_inner, caller_inner = getattr(shadow, name), getattr(tensor, name)
            if type(grad_inner) is not FakeTensor or type(caller_inner) is not torch.Tensor:
                return shadow
            with fake_mode:
                inner[name] = torch.empty_strided(tuple(caller_inner.shape), tuple(caller_inner.stride()),
                                                  dtype=grad_inner.dtype, device=grad_inner.device)
        held = cls.__tensor_unflatten__(inner, ctx, tuple(tensor.shape), tuple(tensor.stride()))
    except Exception:  # noqa: BLE001 - the class will not rebuild it so: the shadow, as before
        return shadow
    return held if type(held) is cls and held.shape == tensor.shape else shadow


def _grad_to_hold(tensor: torch.Tensor, shadow: Any, fake_mode: Any) -> Any:
    """What ``tensor.grad`` holds while tracing for the gradient whose shadow is ``shadow`` (Notes
    [The gradient a caller's jagged tensor holds], [The gradient of a leaf with symbolic sizes],
    [The gradient of a wrapper leaf with symbolic sizes])."""
    if type(tensor) is torch.Tensor and type(shadow) is FakeTensor and _symbolic(shadow):
        with fake_mode:
            return torch.empty_strided(tuple(tensor.shape), tuple(tensor.stride()), dtype=shadow.dtype,
                                       device=shadow.device)
    if type(tensor) is not NestedTensor and type(tensor) is not torch.Tensor:
        return _wrapper_grad_to_hold(tensor, shadow, fake_mode)
    if type(tensor) is not NestedTensor or type(shadow) is not NestedTensor:
        return shadow
    return NestedTensor(shadow.values(), tensor.offsets(), lengths=tensor.lengths(),
                        _ragged_idx=tensor._ragged_idx)  # noqa: SLF001 - NJT's layout field


def _symbolic(shadow: torch.Tensor) -> bool:
    return any(type(n) is torch.SymInt for n in (*shadow.shape, *shadow.stride()))


def _in_engine_order(order: list[int], leaves: int, hooked: int) -> Iterator[int]:
    """The indices of a backward's leaves and hooked tensors in the order torch's engine reached them
    (``order``, from marker hooks); where it is not known, the hooked tensors first, then the leaves."""
    seen: set[int] = set()
    fallback = [*range(leaves, leaves + hooked), *range(leaves)]
    for i in (*order, *fallback) if order else fallback:
        if i not in seen:
            seen.add(i)
            yield i


def _shadows(values: list) -> list:
    return [v.shadow if isinstance(v, TensorProxy) else v for v in values]


def _tensors(values: list) -> tuple:
    return tuple(v for v in values if isinstance(v, torch.Tensor))


def _as_list(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


# Note [An output that is a leaf]
# ``out.backward()`` where ``out`` requires grad and has no ``grad_fn`` (a subclass whose
# ``__torch_function__`` rebuilds results with ``_make_subclass(cls, r, require_grad=r.requires_grad)``,
# torch's RedispatchTensor: each result is a fresh leaf) accumulates into ``out.grad`` eagerly. The
# graph walk from the outputs' ``grad_fn`` found no leaf, and the recorded ``autograd.grad`` with no
# inputs raised "`inputs` argument to `grad()` cannot be empty" where eager computes. Such an output is
# a leaf of its own backward.
def _leaf_outputs(outputs: list, leaves: list) -> list[TensorProxy]:
    """The outputs that are leaves requiring grad themselves and not among ``leaves`` (the Note above)."""
    found: list[TensorProxy] = []
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        for v in outputs:
            if isinstance(v, TensorProxy) and v.shadow.requires_grad and v.shadow.grad_fn is None \
                    and not any(v is u for u in (*leaves, *found)):
                found.append(v)
    return found


def _grad_fns(values: list) -> list[Any]:
    """The ``grad_fn`` of the shadows of the tensor proxies among ``values``, read without their classes'
    ``__torch_function__`` (Note [jitcore's reads of a shadow], jitcore/transforms/jit_hook.py)."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
        return [v.shadow.grad_fn for v in values if isinstance(v, TensorProxy)]
