"""torch.func's function transforms (``vmap``, ``grad``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``,
``hessian``) called by the traced program.

Note [Function transforms run on the traced tensors]
A transform wraps the program's tensors in functorch's own tensors, one level per transform
(``BatchedTensor`` for vmap, ``GradTrackingTensor`` for grad), and runs the function it was given
on them. Tracing does not model those levels itself: torch's functorch runs them, on the traced
values. This works because a traced tensor is a real ``torch.Tensor`` whose ``__torch_dispatch__``
records (jitcore/proxies/tensor.py): functorch's batching rules and its autograd sit above torch's
Python dispatch key, so what reaches the traced tensors is the plain aten ops that eager runs under
the transform (``mm`` with the batch dimension folded in, the backward formulas' ops), and those are
what the trace records.
- The transform's own code (torch/_functorch) runs natively, with ``__torch_function__`` off so that
  every call goes down to the dispatcher.
- The function handed to the transform runs on jitcore's interpreter, in the tracing pass: its reads
  of globals, closures and attributes are guarded and its Python side effects recorded, as for any
  code of the program. A torch call it makes on a functorch tensor runs natively at that point
  (``run_natively``), and its aten ops, recorded as they reach the traced tensors, take the call's
  place in the trace. A torch call on traced tensors only (a closure's tensor, which the transform
  does not wrap) is recorded as usual, except a random one: vmap batches those too
  (``randomness="different"``), so they run natively as well.
- The cached call runs the recorded aten ops: no functorch levels, no transform code.
Kept eager (JC-J002, one warning):
- ``torch.func.linearize`` (``make_fx`` under forward-mode AD loses the traced tensors' tangents);
- ``torch.func.functionalize`` (functorch cannot wrap a traced tensor in a functional tensor: an
  internal assert);
- forward-mode AD of ``torch.autograd.forward_ad`` (``with dual_level(): make_dual(x, t)``): the
  program's torch calls are recorded at the torch level, which does not see a dual tensor's tangent,
  and the trace ran ``_make_dual`` outside any level (an error where eager computes);
- an op with no batching rule under vmap (Note [vmap's fallback]);
- a tensor subclass among the transform's tensors (its dispatch would run under functorch's levels,
  which jitcore does not resolve);
- a transform that runs autograd's engine (``grad``, ``vjp``, ``jacrev``, ``hessian``) on tensors of
  a device other than the CPU, whose backward runs on the engine's device threads, outside the
  tracing pass;
- a transform inside which torch drew random numbers on a tensor that is not traced (they would be
  constants of the trace): the generators are set back and the call runs eagerly. The tensors
  functorch makes to draw on are recorded (Note [Tensors a transform makes]), so ``dropout`` and
  ``torch.rand`` under ``vmap`` and ``grad`` are traced and draw eager's numbers; this check is what
  keeps any other such draw from becoming a constant.
Differs from eager: ``dropout`` on vmap's tensors with ``randomness="same"`` raises eagerly ("same
randomness with a batched tensor input"); traced, torch's dropout for wrapped tensors draws one mask
for the batch, which is what ``"same"`` means, and no error is raised.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import optree
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from jitcore.diagnostics.context import note_failed_call
from jitcore.errors import EagerOnlyValue, EagerWhateverTheSizes
from jitcore.interpreter import current_run
from jitcore.ir import Inlined, current_context, tree_any
from jitcore.langctx.aten import op_symbol, takes_tensor
from jitcore.langctx.thread_state import rng_state, same_rng_state, set_rng_state
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import specialize_all
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["TransformTensors", "call_natively", "function_transform_lookasides", "holds_functorch_tensor",
           "run_natively"]

_functorch = torch._C._functorch  # noqa: SLF001
_is_functorch_tensor = _functorch.is_functorch_wrapped_tensor

# (module, attribute, public name, runs autograd's engine): where torch.func's transforms start
# working on tensors (the public functions only wrap: ``grad(f)(x)`` runs ``grad_impl``, ``jacrev``
# runs ``_vjp_with_argnums`` under ``vmap_impl``)
_TRANSFORMS = (
    ("torch._functorch.eager_transforms", "grad_impl", "torch.func.grad", True),
    ("torch._functorch.eager_transforms", "grad_and_value_impl", "torch.func.grad_and_value", True),
    ("torch._functorch.eager_transforms", "_vjp_with_argnums", "torch.func.vjp", True),
    ("torch._functorch.eager_transforms", "_jvp_with_argnums", "torch.func.jvp", False),
    ("torch._functorch.vmap", "vmap_impl", "torch.func.vmap", False),
)


# Note [The caller's tensors a transform is given]
# A transform's arguments can hold a caller's tensor itself, not its proxy: ``dict(m.named_parameters())``
# (per-sample gradients over ``functional_call``) hands the program the parameters (jit/held_tensors.py).
# functorch wrapped the real parameter, so what its rules computed from it natively (``linear``'s
# ``weight.t()`` under ``vmap(grad(...))``) was a real tensor that reached the traced ``mm``: a path-less
# tensor of the trace, held weakly, whose lifetime was the pass's garbage (a collection after the trace
# freed it: the first call passed None, "mm(): argument 'mat2' must be Tensor, not NoneType"), and a
# value computed once from the parameter instead of on every call. Such a tensor is bound to its input
# proxy before the transform wraps it, as a torch call binds it, so the rules run on the proxy and
# record. A functorch tensor (a nested transform's argument) is the outer transform's and stays as it is.
#
# Note [Tensors functorch's code makes from numbers]
# functorch's C++ makes real tensors of its own from the numbers a call passes: ``(q - kv) * 0.1`` on a
# BatchedTensor (flex_attention's ``score_mod``) wraps 0.1 in a 0-dim tensor (a wrapped number) that
# reaches the traced ``mul``. No path names it, so it was bound at the end of the pass as a caller's
# captured tensor, held weakly: a collection between the trace and the first call's computation freed
# it (the first call passed None as that input) and later calls missed. Every real tensor a record
# reaches under the transform is noted (``TransformTensors.made``) and the entry holds it, as a native
# composite's constants are held (Note [Tensors a native composite makes], jit/tensor_binding.py). It is
# a constant of the call: the numbers ``run_natively`` hands to torch are specialized and guarded, and
# after the caller's tensors are bound (Note [The caller's tensors a transform is given]) no other real
# tensor is among the transform's values. Holding one strongly changes only how long it lives: a
# weakly held tensor is read the same, while it lives.
class TransformTensors:
    """The tensors of one pass that its transforms see: the caller's, bound (``bind``, the pass's
    held-tensor binder), and those functorch's code made, held (``made``)."""

    def __init__(self, bind: Callable[[Any], Any]) -> None:
        self.bind = bind
        self.made: dict[int, torch.Tensor] = {}  # id -> tensor: holds it, so that no id is reused

    def made_here(self, tensor: torch.Tensor) -> bool:
        """Whether a record reached ``tensor`` under a transform (Note [Tensors functorch's code makes
        from numbers])."""
        return self.made.get(id(tensor)) is tensor

    def bound(self, tree: Any) -> Any:
        """``tree`` with the caller's tensors bound (Note [The caller's tensors a transform is given])."""
        return optree.tree_map(lambda v: self.bind(v) if _callers_tensor(v) else v, tree, none_is_leaf=True)


def _callers_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, TensorProxy) \
        and not _is_functorch_tensor(value)


def function_transform_lookasides(tensors: TransformTensors) -> dict[Any, Callable[..., Any]]:
    """What the traced program's calls of torch.func's transforms run instead."""
    import importlib

    found: dict[Any, Callable[..., Any]] = {}
    for module_name, attr, name, backward in _TRANSFORMS:
        fn = getattr(importlib.import_module(module_name), attr, None)
        if fn is not None:
            found[fn] = _traced_transform(fn, name, backward, tensors)
    eager_transforms = importlib.import_module("torch._functorch.eager_transforms")
    for attr, name in (("linearize", "torch.func.linearize"),
                       ("_wrap_all_tensors_to_functional", "torch.func.functionalize")):
        fn = getattr(eager_transforms, attr, None)
        if fn is not None:
            found[fn] = functools.partial(_runs_eagerly, name)
    found[torch._C._enter_dual_level] = functools.partial(  # noqa: SLF001
        _runs_eagerly, "forward-mode AD (torch.autograd.forward_ad.dual_level)")
    return found


def _runs_eagerly(name: str, *args: Any, **kwargs: Any) -> Any:
    """``torch.func.linearize`` traces its function with ``make_fx`` under forward-mode AD, which
    loses the tangents of traced tensors (its linear function returned zeros: a wrong answer).
    ``torch.func.functionalize`` wraps the traced tensors in functional tensors, which torch cannot do
    to a storage-less wrapper (an internal assert of functorch's ``_wrap_functional_tensor``, where
    eager computes); this is where it starts wrapping them."""
    raise EagerOnlyValue(f"{name} is not traced: the call runs eagerly")


def _traced_transform(transform: Callable[..., Any], name: str, backward: bool,
                      tensors: TransformTensors) -> Callable[..., Any]:
    def traced(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        args, kwargs = tensors.bound((args, kwargs))  # Note [The caller's tensors a transform is given]
        _check_traceable(name, backward, (args, kwargs))
        args, kwargs = specialize_all(args), specialize_all(kwargs)
        run = current_run()

        @functools.wraps(func)
        def interpreted(*inner_args: Any, **inner_kwargs: Any) -> Any:
            return run.call(func, *inner_args, **inner_kwargs)

        context = current_context()
        context.function_transforms += 1
        before = rng_state()  # Note [Tensors a transform makes]: a draw that still changes it is not traced
        fallback = _functorch._is_vmap_fallback_enabled()
        _functorch._set_vmap_fallback_enabled(False)  # Note [vmap's fallback]
        try:
            with torch._C.DisableTorchFunctionSubclass(), _TensorsMadeUnder(tensors.made):  # noqa: SLF001
                out = transform(interpreted, *args, **kwargs)
        except RuntimeError as exc:
            _raise_for_the_fallback(exc)
            note_failed_call(exc, name, args, kwargs, context.source())  # torch's own error, as eager's:
            raise  # at the user's line
        except Exception as exc:
            note_failed_call(exc, name, args, kwargs, context.source())
            raise
        finally:
            _functorch._set_vmap_fallback_enabled(fallback)
            context.function_transforms -= 1
        if not same_rng_state(before, rng_state()):  # a draw on a tensor no traced op made: a constant
            set_rng_state(before)  # the eager call draws these numbers
            raise EagerOnlyValue(f"{name} drew random numbers on a tensor torch made under the transform, "
                                 "which the trace cannot draw again: the call runs eagerly")
        return out

    return traced


class _TensorsMadeUnder(TorchDispatchMode):
    """Note [Tensors a transform makes]: functorch's rules make tensors of their own with factories
    (vmap's rules for random ops draw on a new tensor of the batch's shape; ``jacrev`` builds its
    basis; dropout under ``grad`` makes its mask), which no traced tensor reaches. This mode, active
    during the transform, sees them first: an operator with no tensor argument is recorded (its output
    is a traced tensor, so what is then done to it, a draw included, is recorded too and runs again on
    every call, in eager's order). Anything else goes on to the tensors' own dispatch. A factory the
    fake mode runs on the meta device for a shadow is not the program's. A real tensor an operator
    is given is noted in ``made`` (Note [Tensors functorch's code makes from numbers])."""

    def __init__(self, made: dict[int, torch.Tensor]) -> None:
        super().__init__()
        self._made = made

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if (
            _is_factory(func)
            and not torch._C._meta_in_tls_dispatch_include()  # noqa: SLF001
            and str(kwargs.get("device", "cpu")) != "meta"
            and current_context() is not None
        ):
            with torch._C.DisableTorchFunction():  # torch's C++ made it: no __torch_function__ sees it
                return op_symbol(func)(*args, **kwargs)
        for leaf in optree.tree_leaves((args, kwargs), none_is_leaf=True):
            if type(leaf) is torch.Tensor and not _is_functorch_tensor(leaf) and leaf.device.type != "meta":
                self._made[id(leaf)] = leaf
        return func(*args, **kwargs)


@functools.cache
def _is_factory(func: Any) -> bool:
    return not takes_tensor(func)


def _check_traceable(name: str, backward: bool, tree: Any) -> None:
    leaves = [leaf for leaf in optree.tree_leaves(tree, none_is_leaf=True) if isinstance(leaf, TensorProxy)]
    if any(isinstance(leaf, SubclassTensorProxy) for leaf in leaves):
        raise EagerWhateverTheSizes(f"{name} of a tensor subclass is not traced: the call runs eagerly")
    if backward and any(leaf.shadow.device.type != "cpu" for leaf in leaves):
        raise EagerOnlyValue(f"{name} on {leaves[0].shadow.device.type} tensors is not traced (autograd's "
                             "engine runs their backward on its device threads): the call runs eagerly")


def holds_functorch_tensor(args: tuple, kwargs: dict) -> bool:
    """Whether a call's arguments hold a tensor of a transform's level (a BatchedTensor, a
    GradTrackingTensor; the function ``vjp`` returns is called outside the transform)."""
    return tree_any((args, kwargs), _functorch_leaf)


def _functorch_leaf(value: Any) -> bool:
    return (isinstance(value, torch.Tensor) and not isinstance(value, TensorProxy)
            and _is_functorch_tensor(value))


def call_natively(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """A torch C function that is not an operation (``torch.overrides.has_torch_function``) called on
    a functorch tensor: run as it is, under the transform's levels."""
    args, kwargs = specialize_all(args), specialize_all(kwargs)
    try:
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
            return fn(*args, **kwargs)
    except RuntimeError as exc:
        _raise_for_the_fallback(exc)
        raise


def _raise_for_the_fallback(exc: RuntimeError) -> None:
    """Raises EagerOnlyValue when ``exc`` is vmap's disabled fallback refusing an op (Note [vmap's
    fallback]), wherever under the transform the op ran; returns otherwise."""
    if "hit the vmap fallback which is currently disabled" in str(exc):
        op = str(exc).split(" hit the vmap fallback", 1)[0]
        raise EagerOnlyValue(f"{op} has no batching rule under torch.func.vmap: the call runs "
                             "eagerly") from None


# Note [vmap's fallback]
# An op with no batching rule runs, under vmap, through functorch's fallback: a loop over the batch in
# C++ that writes each sample's result into memory it reads from the tensors themselves. A traced
# tensor has no memory (a storage-less wrapper), and the process crashed there (SDPA's CPU kernel in
# nn.TransformerEncoderLayer under vmap: a segmentation fault). While tracing, the fallback is
# disabled, so such an op raises instead, and the call runs eagerly (JC-J002), where the fallback runs
# on values.


def run_natively(symbol: Any, args: tuple, kwargs: dict) -> Inlined:
    """A symbol called on a functorch tensor: torch runs it under the transform's levels, and the aten
    ops that reach the traced tensors take its place in the trace (Note [Function transforms run on
    the traced tensors]). A dynamic number among its arguments becomes its value (guarded): torch's
    C code under the transform takes Python numbers."""
    return Inlined(call_natively(symbol.fn, args, kwargs), splice=True)
