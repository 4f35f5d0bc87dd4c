"""Tangent kinds: what a backward trace was recorded for, as the type, flatten context and inner
tensors of the gradient reaching one output.

A backward trace takes plain tensors only, so a gradient of a tensor-subclass type reaches it as
its inner tensors (``__tensor_flatten__`` order, recursively for a subclass nested in another). Which
ops the backward runs depends on the gradient's class and ctx (its ``__torch_dispatch__`` resolves
the backward formulas' ops) and on its inner tensors' dtype and shape; a ``TangentKind`` records
exactly that. Invariants:
- two gradients of equal kinds are flattened to the same number of plain tensors, with the dtypes
  and shapes the backward trace was recorded for (made contiguous: it was recorded for those; an inner
  tensor of a subclass gradient that is expanded stays so: Note [An expanded inner gradient]);
- a top-level plain gradient's dtype and shape are the output's: autograd casts and checks them
  before the backward runs (so a plain kind compares by type alone);
- comparing kinds never asks a ShapeEnv: a symbolic size (a kind recorded by an entry with symbolic
  sizes) equals only the same size (Note [Tangent kinds with symbolic sizes]);
- a subclass kind names the literal attributes its gradient holds outside its flatten protocol, and
  a tangent shadow of it holds them (Note [A tangent's attribute outside its flatten protocol]).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from jitcore.dispatch.flatten import kept_attributes, outside_attributes, set_attributes
from jitcore.prologue.literals import same_literal
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.protocol import tensor_flatten, unflatten_around
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["TangentKind", "flatten_tangent", "kind_of_gradient", "kind_of_output", "symbolized",
           "tangent_shadow"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)


@dataclass(frozen=True, slots=True, eq=False)
class TangentKind:
    """The kind of one gradient (see the module docstring).

    Attributes:
        subclass: its tensor-subclass type; None for a plain tensor.
        ctx: its ``__tensor_flatten__`` context (None for a plain tensor).
        inner: ``(name, kind)`` of each inner tensor, in flatten order (empty for a plain tensor).
        shape, dtype, device: its metadata (for an inner plain tensor: what the backward takes).
        attributes: ``(name, literal)`` of its instance attributes outside its flatten protocol
            (Note [A tangent's attribute outside its flatten protocol]).
        expanded: an inner plain tensor whose strides are all 0 (Note [An expanded inner gradient]).
    """

    subclass: type | None
    ctx: Any
    inner: tuple[tuple[str, TangentKind], ...]
    shape: tuple[int, ...] | None  # None: left unread (Note [A subclass kind's outer shape unread])
    dtype: torch.dtype
    device: torch.device
    attributes: tuple[tuple[str, Any], ...] = ()
    expanded: bool = False

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TangentKind) or self.subclass is not other.subclass:
            return False
        if self.subclass is None:
            same = (self.dtype, self.device, self.expanded) == (other.dtype, other.device, other.expanded)
            return same and _same_sizes(self.shape, other.shape)
        return _same_ctx(self.ctx, other.ctx) and self.inner == other.inner \
            and _same_attributes(self.attributes, other.attributes)

    __hash__ = None  # type: ignore[assignment]  # a ctx need not be hashable

    def symbolic(self) -> bool:
        """Whether a plain tensor of this kind (an inner one included) has a symbolic size."""
        if self.subclass is None:
            return any(type(n) is not int for n in self.shape)
        return any(k.symbolic() for _n, k in self.inner)

    def leaves(self) -> int:
        """How many plain tensors a gradient of this kind is flattened to."""
        return 1 if self.subclass is None else sum(k.leaves() for _n, k in self.inner)

    def describe(self) -> str:
        """``a Tensor``, ``a TwoTensor`` or ``a Scaled with __tensor_flatten__ context 2.0``."""
        if self.subclass is None:
            return "an expanded Tensor" if self.expanded else "a Tensor"
        name = self.subclass.__qualname__
        held = "".join(f", {k}={v!r}" for k, v in self.attributes)
        return f"a {name}{held}" if self.ctx is None \
            else f"a {name}{held} with __tensor_flatten__ context {self.ctx!r}"


def _same_sizes(a: tuple, b: tuple) -> bool:
    """Equal shapes; a symbolic size equals only a size of the same expression (``SymInt == int``
    would ask its ShapeEnv, which then assumes the answer: Note [Tangent kinds with symbolic sizes])."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is int and type(y) is int:
            if x != y:
                return False
        elif x is not y and not (type(x) is type(y) is torch.SymInt and _same_symbol(x.node, y.node)):
            return False
    return True


def _same_symbol(a: Any, b: Any) -> bool:
    """Equal symbolic sizes, asking no ShapeEnv: the same expression, or the same nested int (an NJT
    gradient's outer shape holds its nested int, which has no expression)."""
    if a.is_nested_int() or b.is_nested_int():
        return a.is_nested_int() and b.is_nested_int() \
            and (a.nested_int(), a.nested_int_coeff()) == (b.nested_int(), b.nested_int_coeff())
    return bool(a.expr == b.expr)


def _same_ctx(ctx: Any, expected: Any) -> bool:
    """Equal flatten contexts, or ones that differ only in the wrapper's ``requires_grad`` (a nested
    jagged tensor's ctx holds it): a gradient's own flag, which its inner tensors do not depend on."""
    if ctx is expected:
        return True
    if type(ctx) is dict and type(expected) is dict and "requires_grad" in ctx:
        return {**ctx, "requires_grad": None} == {**expected, "requires_grad": None}
    return bool(ctx == expected)


def _same_attributes(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(k == j and same_literal(v, w) for (k, v), (j, w) in zip(a, b))


# Note [A tangent's attribute outside its flatten protocol]
# A wrapper whose dispatch reads an attribute its flatten protocol leaves out (``K(a, k=3.0)``
# scaling each result by ``k``; ``__tensor_unflatten__`` builds ``K(inner["a"])``) gets a gradient
# that holds it too (``ones_like(out)`` is ``K(ones * 3, 3.0)``), and the backward's ops run through
# the dispatch with that ``k``. The backward is recorded on a tangent shadow rebuilt by unflatten:
# it read ``k`` 1.0 there (grad 3 where eager gives 27). So a kind names the literal attributes outside
# the protocol (of the output a first backward is recorded for, a number proxy as its value then; of
# the gradient a call receives), the shadow holds them, and a gradient holding others is of another
# kind: a backward is derived for it (backward_deriver.py). The saved wrappers are the replay's
# values, which hold theirs (Note [An output's attribute outside its flatten protocol],
# jitcore/dispatch/flatten.py), and the backward's subclass gradients are rebuilt with theirs.


def _plain(t: torch.Tensor) -> TangentKind:
    return TangentKind(None, None, (), tuple(t.shape), t.dtype, t.device)


def kind_of_output(out: TensorProxy) -> TangentKind:
    """The kind of the gradient eager hands to ``out`` in the usual case (``torch.ones_like(out)``,
    autograd's own for ``out.sum().backward()``): of its class and ctx, nested ones included."""
    if not isinstance(out, SubclassTensorProxy):
        return _plain(out.shadow)
    names, ctx = out.inner_flatten()
    inner = tuple((n, kind_of_output(getattr(out, n))) for n in names)
    held = tuple((k, v.value if type(v) is NumberProxy else v) for k, v in kept_attributes(out))
    return TangentKind(out.subclass, _needing_no_grad(ctx), inner, tuple(out.shadow.shape), out.shadow.dtype,
                       out.shadow.device, held)


# Note [The usual gradient requires no grad]
# A flatten ctx may hold the wrapper's ``requires_grad`` (a nested jagged tensor's does: its
# ``__tensor_unflatten__`` makes the wrapper with it). An output requiring grad has True there, but the
# gradient autograd hands it (``torch.ones_like(out)``, a ``values().sum()``'s backward) requires none.
# The tangent a backward is recorded for is made with that ctx: with True, a backward that hands the
# gradient on as it is (``clone``, ``add``) returned a gradient that required grad and had no grad_fn,
# where eager's requires none (tests/dispatch/test_nested_jagged.py). Kinds compare without the flag
# (``_same_ctx``), so this changes no cache decision.
def _needing_no_grad(ctx: Any) -> Any:
    """``ctx`` with ``requires_grad`` False where it is a dict holding the flag (Note above)."""
    if type(ctx) is dict and ctx.get("requires_grad") is True:
        return {**ctx, "requires_grad": False}
    return ctx


def kind_of_gradient(grad: torch.Tensor, inner_of_subclass: bool = False, *,
                     outer_shape: bool = True) -> TangentKind:
    """The kind of a gradient autograd handed to the backward (``inner_of_subclass``: an inner tensor
    of one, whose expansion is part of its kind: Note [An expanded inner gradient]). ``outer_shape``
    False: a subclass's own shape is left out (None; Note [A subclass kind's outer shape unread]).

    Raises:
        TypeError: ``grad`` is a tensor subclass without the flatten protocol (nothing to trace).
    """
    if type(grad) in _PLAIN:
        if inner_of_subclass and _expanded(grad):
            return TangentKind(None, None, (), tuple(grad.shape), grad.dtype, grad.device, expanded=True)
        return _plain(grad)
    names, ctx = tensor_flatten(grad)
    inner = tuple((n, kind_of_gradient(getattr(grad, n), True)) for n in names)
    return TangentKind(type(grad), ctx, inner, tuple(grad.shape) if outer_shape else None, grad.dtype,
                       grad.device, outside_attributes(grad, type(grad), names))


# Note [A subclass kind's outer shape unread]
# A subclass kind's equality is its class, ctx, inner kinds and attributes, never its own shape; the shape
# is only what a backward derived for it is recorded with. Reading it is a ``__torch_dispatch__`` call
# where the class computes its sizes (NestedTensor's ``aten.sym_size``): one per NJT output on every call
# of an entry with symbolic sizes (``expected_kinds`` of the output), and one per NJT gradient in its
# backward. Autograd hands a node only a gradient of its output's shape (its InputMetadata check), so
# the top-level shape tells nothing the inner kinds do not: the expected kind of an output and the
# gradient's kind in the usual case leave it out (None), and a gradient of another kind, for which a
# backward is derived, is read whole (``symbolized`` takes the recorded shape where the expected one is
# None: the gradient's is the output's).


# Note [An expanded inner gradient]
# ``out.values().sum().backward()`` hands an NJT output the gradient ``ones.expand(...)`` viewed as an
# NJT: its values are expanded (strides 0), and NestedTensor's dispatch sees that: ``index_put``'s
# backward refuses a non-contiguous NJT ("If ragged dimension is not part of indices, this only works
# on contiguous NJTs"), eagerly. The backward recorded for the usual, contiguous gradient computed one
# instead. So an inner plain tensor of a subclass gradient whose strides are all 0 is a kind of its own:
# it is not made contiguous, the backward is derived for an expanded tangent shadow (once per kinds),
# and an op whose backward refuses one raises eager's exception (Note [A backward that raises],
# autograd.py). Other strides are still made contiguous (their kind would depend on the call's sizes).
def _expanded(t: torch.Tensor) -> bool:
    return t.numel() > 1 and all(s == 0 for s in t.stride())


# Note [Tangent kinds with symbolic sizes]
# Under grad, an entry with symbolic sizes that returns a subclass value (an NJT: ``lin(x).relu()``)
# records its backward for a tangent whose inner tensors have symbolic sizes (``_values`` of
# ``(s0, 8)``). The gradient a call receives has the call's own sizes (``(14, 8)``), so each call
# compares it with the kind of its own output (``kind_of_gradient`` of what the forward returned: the
# recorded kind with the call's sizes), not with the recorded one; and a gradient of another kind is
# ``symbolized`` (each plain tensor whose shape is the output's takes the recorded symbolic shape), so
# that the backward derived for it is recorded over the same sizes. ``SymInt == int`` is never
# evaluated: the ShapeEnv would add the guard ``s0 == 14`` (or a replacement), which no prologue
# checks, and the next derivation would see a specialized size.
def symbolized(kind: TangentKind, expected: TangentKind, recorded: TangentKind) -> TangentKind:
    """``kind`` (a gradient's) with the recorded symbolic shapes where its plain tensors have the
    shapes of ``expected`` (the call's output's kind, ``recorded`` with the call's sizes)."""
    if kind.subclass is None:
        if expected.subclass is None and _same_sizes(kind.shape, expected.shape):
            return TangentKind(None, None, (), recorded.shape, kind.dtype, kind.device,
                               expanded=kind.expanded)
        return kind
    names = [n for n, _k in kind.inner]
    if kind.subclass is not expected.subclass or names != [n for n, _k in expected.inner] \
            or names != [n for n, _k in recorded.inner]:
        return kind
    inner = tuple((n, symbolized(k, e, r)) for (n, k), (_n, e), (_m, r)
                  in zip(kind.inner, expected.inner, recorded.inner))
    same = expected.shape is None or _same_sizes(kind.shape, expected.shape)  # Note [A subclass kind's outer
    shape = recorded.shape if same else kind.shape  # shape unread]
    return TangentKind(kind.subclass, kind.ctx, inner, shape, kind.dtype, kind.device, kind.attributes)


def flatten_tangent(grad: torch.Tensor, kind: TangentKind, into: list[torch.Tensor]) -> None:
    """Append the backward's inputs for ``grad`` (of ``kind``) to ``into``: its plain tensors, made
    contiguous (the backward was recorded for contiguous tangents; ``sum().backward()`` hands an
    expanded one), except an expanded inner one of an expanded kind (Note [An expanded inner gradient])."""
    if kind.subclass is None:
        into.append(grad if kind.expanded else grad.contiguous())
        return
    for name, inner in kind.inner:
        flatten_tangent(getattr(grad, name), inner, into)


def tangent_shadow(
    kind: TangentKind, leaf: Any, shape: Any = None, stride: Any = None
) -> torch.Tensor:
    """A shadow gradient of ``kind``: ``leaf(kind, path)`` makes each plain tensor (contiguous, with
    the kind's metadata; ``path`` names it, ``"a_b"`` for ``grad.a.b``), subclass values are rebuilt
    around them with their class's ``__tensor_unflatten__`` (outer ``shape``/``stride`` as given,
    else the kind's shape, contiguous)."""
    return _shadow(kind, leaf, "", shape, stride)


def _shadow(kind: TangentKind, leaf: Any, path: str, shape: Any, stride: Any) -> torch.Tensor:
    if kind.subclass is None:
        return leaf(kind, path)
    inner = {
        n: _shadow(k, leaf, f"{path}_{n}" if path else n, None, None) for n, k in kind.inner
    }
    shape = tuple(kind.shape) if shape is None else tuple(shape)
    if stride is None:
        stride = torch._prims_common.make_contiguous_strides_for(shape)  # noqa: SLF001
    shadow = unflatten_around(kind.subclass, inner, kind.ctx, shape, tuple(stride))
    set_attributes(shadow, kind.attributes)  # Note [A tangent's attribute outside its flatten protocol]
    return shadow
