"""A tensor-subclass value the caller passes: whether it can be traced, and the value the program sees.

Provenance (jitcore/jit/provenance.py) binds a subclass input in three steps: ``refusal`` says why its
class cannot be traced (the call then runs eagerly, its entry keyed by the class); otherwise the inner
tensors named by ``__tensor_flatten__`` are bound as inputs of their own; ``shadow_around`` rebuilds
the value around their shadows, and that is what the program sees while tracing.
Invariants:
- a refused class is refused for every value of it (the reason depends on the class and on whether the
  value is a wrapper, which the class decides for the values a program passes);
- the rebuilt value is an instance of the caller's own class, with the caller's sizes and strides
  (symbolic ones for a nested jagged tensor) and its ``requires_grad``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from jitcore.errors import EagerOnlySubclass
from jitcore.jit.shapes import StaticSubclassShapes
from jitcore.langctx.shadows import TensorValues
from jitcore.prologue import Path
from jitcore.prologue.ctx_sizes import Place, places_of
from jitcore.prologue.shape_guards import ShapeCondition
from jitcore.proxies.protocol import eager_only_reason, has_own_protocol, is_wrapper, unflatten_around
from jitcore.proxies.subclass import is_traceable_subclass

__all__ = [
    "answered_layout", "answers_its_sizes", "ctx_places", "ctx_snapshot", "follows", "following_inner",
    "has_symbols", "refusal", "shadow_around",
]


def refusal(tensor: torch.Tensor, path: Path) -> EagerOnlySubclass | None:
    """Why ``tensor``'s class cannot be traced, as the error that sends the call to its eager entry;
    None when it can."""
    cls = type(tensor)
    reason = eager_only_reason(cls)
    if reason is not None:
        return EagerOnlySubclass(f"{path.describe()} is a {cls.__qualname__}: {reason}")
    if is_traceable_subclass(cls) and not has_own_protocol(cls) and not is_wrapper(tensor):
        return EagerOnlySubclass(
            f"{path.describe()} is a {cls.__qualname__}: a tensor subclass with __torch_dispatch__ whose "
            "values hold storage of their own (torch.Tensor._make_subclass) and no __tensor_flatten__",
            hints=(
                "make it a wrapper subclass (torch.Tensor._make_wrapper_subclass), see docs/subclasses.md",
            ),
        )
    if not is_traceable_subclass(cls):
        return EagerOnlySubclass(
            f"{path.describe()} is a {cls.__qualname__}, a tensor subclass jitcore cannot trace: "
            "it lacks __tensor_flatten__/__tensor_unflatten__ or __torch_dispatch__",
            hints=("implement the traceable wrapper-subclass protocol (see docs/subclasses.md)",),
        )
    return None


# Note [Subclass inputs that follow an inner tensor]
# A subclass input was bound with static inner shapes, so a program over a TwoTensor (or a scaled int8
# tensor: its int8 data has the outer shape, its scale ``(n, 1)``) traced one entry per batch size,
# where the same program over plain tensors traces one symbolic entry from the second shape on. Where
# the outer tensor has exactly the sizes and strides of one of its inner tensors (the first such, in
# ``__tensor_flatten__`` order: ``following_inner``), and all its inner tensors are plain, a symbolic
# pass binds the inner tensors as plain inputs are bound (a dimension seen to change is a symbol) and
# the outer shadow takes that inner shadow's sizes and strides, SymInts included: everything the
# class's ``__torch_dispatch__`` computes follows from the inner symbols, and what torch assumed of
# them (``Eq(s0, s1)`` where TwoTensor's ``__new__`` compares its halves) is a guard as for plain inputs.
# The outer sizes are not inputs of their own, so the prologue checks on every call that the caller's
# value still follows that inner tensor (a ``shape`` guard: ``x.shape == x.a.shape and x.stride() ==
# x.a.stride()``), and its ``tensor`` guard leaves the symbolic sizes to it. A subclass output with
# symbolic sizes is rebuilt from sizes the computation computes (jit/shapes.py, Note [Subclass
# values' sizes]). Any other subclass (a packed int4 weight, a nested jagged tensor, one whose
# ``__torch_dispatch__`` answers its strides) keeps static inner shapes.
def following_inner(tensor: torch.Tensor, names: list[str], *, sizes_only: bool = False) -> str | None:
    """The name of the first inner tensor of ``tensor`` with its sizes and strides (``sizes_only``: its
    sizes, for a wrapper whose ``__torch_dispatch__`` answers its strides), where all its inner tensors
    are plain strided tensors (Notes above and [A wrapper that answers its strides]); None otherwise."""
    inner = [getattr(tensor, n) for n in names]
    plain = (torch.Tensor, torch.nn.Parameter)
    if tensor.dim() == 0 or tensor.layout is not torch.strided or any(
            type(t) not in plain or t.layout is not torch.strided for t in inner):
        return None
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - jitcore's own reads
        if sizes_only:  # reading the strides would run the class's __torch_dispatch__
            return next((n for n, t in zip(names, inner) if t.shape == tensor.shape), None)
        layout = tuple(tensor.shape), tuple(tensor.stride())
        return next((n for n, t in zip(names, inner) if (tuple(t.shape), tuple(t.stride())) == layout), None)


# Note [A wrapper that answers its strides]
# A wrapper made with ``dispatch_sizes_strides_policy="strides"`` (torch.masked's MaskedTensor) has sizes
# of its own but asks its ``__torch_dispatch__`` for its strides (``aten.sym_stride``), which the prologue
# must not run, so its spec has ``layout_from_inner`` and no strides. It was bound with static inner
# shapes: a MaskedTensor program traced one entry per size, where the same program over plain tensors
# traces one symbolic entry from the second size on. Where its sizes are those of one of its inner
# tensors (``following_inner(..., sizes_only=True)``: MaskedTensor's data and mask both) and all its
# inner tensors are plain, a symbolic pass binds them as plain inputs are bound and the outer shadow
# takes that inner shadow's sizes, SymInts included; its strides stay what the class answers (the
# shadow's dispatch asks the inner shadows). The prologue checks that the caller's value still has that
# inner tensor's sizes (``follows(..., sizes_only=True)``: no stride is read), and its ``tensor`` guard
# leaves the symbolic sizes to it.


# Note [A wrapper that answers its sizes]
# A wrapper made with ``dispatch_sizes_strides_policy="sizes"`` (torch's WrapperTensorWithCustomSizes) has
# no sizes of its own: C++ asks its ``__torch_dispatch__`` (``aten.sym_size``, ``sym_stride``) each time,
# and the class computes them from its inner tensors. It was bound with static inner shapes, one entry
# per size. Where all its inner tensors are plain, a symbolic pass binds them as plain inputs are bound
# (a dimension seen to change is a symbol): the shadow's dispatch answers the sizes from the inner
# shadows, SymInts included, and what torch assumed of them is a guard as for plain inputs. The prologue
# reads no outer size of such a value (its ``tensor`` guard has ``outer_from_inner``), so it needs no
# ``shape`` guard either: the sizes are the class's function of the inner tensors, guarded themselves.
# The shadow's outer sizes and strides are what the class answers over the inner shadows
# (``answered_layout``): built with the caller's static ones, ``x.shape[1]`` read the traced int, a
# constant of the trace that no check named (a wrong answer for the next size). A class whose answer is
# not a pair of size and stride sequences keeps static inner shapes from then on (StaticSubclassShapes).
def answers_its_sizes(spec: Any, tensor: torch.Tensor, names: list[str]) -> bool:
    """Whether ``tensor`` (whose input spec is ``spec``) is a wrapper whose ``__torch_dispatch__`` answers
    its sizes, over plain strided inner tensors only (Note above)."""
    plain = (torch.Tensor, torch.nn.Parameter)
    return spec.outer_from_inner and spec.layout_from_inner and bool(names) and all(
        type(t) in plain and t.layout is torch.strided for t in (getattr(tensor, n) for n in names))


def answered_layout(values: TensorValues, tensor: torch.Tensor, shadows: dict[str, torch.Tensor], ctx: Any,
                    path: Path) -> tuple[tuple, tuple]:
    """The sizes and strides the class of ``tensor`` (a wrapper that answers its sizes) gives in its
    ``__torch_dispatch__`` for the value rebuilt around ``shadows``, SymInts of the inner shadows included
    (Note [A wrapper that answers its sizes]).

    Raises:
        StaticSubclassShapes: the class answers otherwise (its sizes stay static from now on).
    """
    cls = type(tensor)
    shadow = shadow_around(values, tensor, shadows, ctx, nested=False, path=path)
    try:
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - the queries torch's C++ makes
            sizes = cls.__torch_dispatch__(torch.ops.aten.sym_size.default, (cls,), (shadow,), {})
            strides = cls.__torch_dispatch__(torch.ops.aten.sym_stride.default, (cls,), (shadow,), {})
    except Exception as exc:  # noqa: BLE001 - the class's own code: its sizes stay static
        raise StaticSubclassShapes(f"{cls.__qualname__} raised answering its sizes: {exc}") from None
    answers = (tuple, list, torch.Size)
    if not isinstance(sizes, answers) or not isinstance(strides, answers) or len(sizes) != len(strides) \
            or not all(type(v) in (int, torch.SymInt) for v in (*sizes, *strides)):
        raise StaticSubclassShapes(f"{cls.__qualname__} answers its sizes with other than sizes and strides")
    return tuple(sizes), tuple(strides)


# Note [A flatten ctx that holds the outer sizes]
# Classes keep their outer shape, or a row count, in their ``__tensor_flatten__`` ctx (``{"shape": (n,
# 4)}``; a row-scaled int8 tensor's ``{"rows": n}``), which its ``flatten`` guard compared with ``==``: a
# subclass input that follows an inner tensor still traced one entry per batch size, and its shadow,
# rebuilt around symbolic inner tensors, got the traced ints in its ctx (a class building its outer
# shape from the ctx built a static one). Where the input is bound with symbolic sizes, each int of its
# ctx (through dicts, lists and tuples) equal to an outer size in a dimension the pass makes symbolic
# is a place of the ctx that holds that size (``ctx_places``, the first such dimension): the shadow's
# ctx holds the leading inner shadow's SymInt there, and the ``flatten`` guard compares the caller's
# ctx with the traced one where each place reads the caller's outer size (which the ``shape`` guard
# ties to the inner tensor's: jitcore/prologue/ctx_sizes.py). An int that only happened to equal a size
# fails that check on the next size and is traced again, static there. A class with a
# ``__metadata_guard__`` of its own, and any ctx that is no dict, list or tuple, keeps its ctx pinned.
def ctx_places(tensor: torch.Tensor, ctx: Any, dims: frozenset[int]) -> tuple[Place, ...]:
    """The places of ``ctx`` that hold an outer size of ``tensor`` in one of ``dims`` (Note above)."""
    if getattr(type(tensor), "__metadata_guard__", None) is not None:
        return ()
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - jitcore's own reads
        shape = tuple(tensor.shape)
    return places_of(ctx, shape, frozenset(d for d in dims if d < len(shape) and shape[d] > 1))


def follows(path: Path, inner: Path, *, sizes_only: bool = False) -> ShapeCondition:
    """The ``shape`` condition that the tensor at ``path`` has the sizes and strides (``sizes_only``: the
    sizes) of its inner tensor at ``inner`` (Notes [Subclass inputs that follow an inner tensor], [A
    wrapper that answers its strides])."""
    if sizes_only:
        return ShapeCondition("{0}.shape == {1}.shape", (path, inner))
    return ShapeCondition("{0}.shape == {1}.shape and {0}.stride() == {1}.stride()", (path, inner))


def has_symbols(shadow: torch.Tensor) -> bool:
    """Whether a size or stride of ``shadow`` is a SymInt."""
    return any(type(s) is torch.SymInt for s in (*shadow.shape, *shadow.stride()))


def shadow_around(values: TensorValues, tensor: torch.Tensor, shadows: dict[str, torch.Tensor], ctx: Any,
                  *, nested: bool, path: Path, layout: tuple | None = None) -> torch.Tensor:
    """The caller's ``tensor`` rebuilt by its class's ``__tensor_unflatten__`` around the shadows of its
    inner tensors: what the program sees for it while tracing (``layout``: its sizes and strides when
    they are an inner shadow's symbolic ones, Note [Subclass inputs that follow an inner tensor])."""
    cls = type(tensor)
    size, stride = (tensor.shape, tensor.stride()) if layout is None else layout
    if nested:
        size, stride = (values.nested_sizes(s, list(shadows.values())) for s in (size, stride))
    try:
        with values.fake_mode if nested else contextlib.nullcontext():
            shadow = unflatten_around(cls, shadows, ctx, size, stride)
    except ValueError as error:  # Note [A caller's value holds its own inner tensors], proxies/protocol.py
        raise EagerOnlySubclass(f"{path.describe()} is a {cls.__qualname__}: {error}") from None
    if type(shadow) is not cls and issubclass(cls, type(shadow)):
        # an inherited __tensor_unflatten__ that names its own class (TwoTensor's): the
        # dispatcher must see the caller's class, whose __torch_dispatch__ may override
        with contextlib.suppress(TypeError):  # a layout Python cannot switch: the base's class
            shadow.__class__ = cls
    if tensor.requires_grad and not tensor.is_leaf:  # Note [A caller's non-leaf subclass value]
        _CallersHistory.apply(torch.zeros((), requires_grad=True), [shadow])
    elif tensor.requires_grad:  # as eagerly: ``x.requires_grad``, ``(x * 2).is_leaf`` (the grad
        shadow.requires_grad_(True)  # transform reads the guard, not this)
    return shadow


# Note [A caller's non-leaf subclass value]
# A subclass input that requires grad and is no leaf (``TwoTensor(a, b) * 1``, ``nt * 1`` made by the
# caller) has the caller's graph behind it. Its shadow was a leaf requiring grad, so an in-place write
# (``x.add_(1)``, ``x[0] = 0``) raised "a leaf Variable that requires grad is being used in an in-place
# operation" while tracing, where eager computes, and ``x.is_leaf`` answered True. A plain input's
# shadow gets torch's marker history (fake-tensor conversion's ``DelayedError``: its backward raises
# "Tried to backward() through example input"); that makes a new tensor, and a subclass shadow must
# stay the object built around the inner shadows the pass bound. So the shadow gets the marker's
# history in place: it is made the output of an autograd Function that returns it (autograd sets an
# output's history on the object itself), whose backward raises the same error. A backward inside
# the function reaching it runs the call eagerly (Note [A backward into the caller's graph]); an
# entry writing into it runs pass 1 under torch's autograd (Note [In-place writes to non-leaf inputs]).
class _CallersHistory(torch.autograd.Function):
    """Gives ``holder[0]`` a history whose backward raises (the Note above); ``anchor`` is a leaf
    requiring grad, so that autograd records the call."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, holder: list[torch.Tensor]) -> torch.Tensor:
        return holder[0]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        raise RuntimeError("Internal error: Tried to backward() through example input")


# Note [A subclass input's own containers]
# A class keeps Python containers on its instances (subclass_zoo's tracer tensor logs the ops its
# ``__torch_dispatch__`` sees into a list the instance holds, often its flatten ctx too). The proxy of a
# subclass input held a copy of each list and dict (made to put the proxies of tensors inside them,
# ``DispatchState._held``), so what the program or the class's code appended there went to the copy:
# eagerly the caller's list grows by ``['mul', 'relu', 'sum']``, jitted it stayed empty (a wrong
# answer). A container that holds no tensor is now the caller's object itself, bound as state at its
# path (``args[0].log``), so the effects of the call are replayed on cached calls
# (jitcore/jit/effects.py). The ``flatten`` guard compares the caller's ctx with a snapshot taken when
# the input was bound (``ctx_snapshot``): the ctx object itself would have compared with what the call
# later appended to it, and every call missed.
def ctx_snapshot(ctx: Any) -> Any:
    """``ctx`` with its lists, dicts and sets (through tuples) copied, as it is now."""
    if type(ctx) is list:
        return [ctx_snapshot(v) for v in ctx]
    if type(ctx) is dict:
        return {k: ctx_snapshot(v) for k, v in ctx.items()}
    if type(ctx) is set:
        return set(ctx)
    if isinstance(ctx, tuple) and not hasattr(ctx, "_fields"):
        items = [ctx_snapshot(v) for v in ctx]
        if all(a is b for a, b in zip(items, ctx)):
            return ctx
        return type(ctx)(items)
    return ctx
