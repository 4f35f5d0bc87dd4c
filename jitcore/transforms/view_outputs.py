"""Outputs that are views, under autograd: made after the call's autograd Function, from their base,
by the program's own view calls (Note [Views an autograd call returns]).

``view_outputs`` finds, from the grad transform's replay, each output leaf that is a view and the
chain of pass-1 calls that made it from its base; ``ViewOutputs.make`` runs those calls on the
call's real base after the Function applied.

Invariants:
- a regenerated view's base is a tensor the caller's program also had: an input of the call, another
  output, or an intermediate the Function hands back as an extra (hidden) output;
- each call of a chain is a top-level pass-1 record of a torch function that took exactly one
  tensor, as its first positional argument (or a second one only for its static sizes: ``view_as``,
  Note [A view call with a second tensor]; ``broadcast_tensors``, each output its own input's
  ``expand``: Note [The outputs of broadcast_tensors]), and made a view of the base (the replay's shadows say
  so), so running it on the real base makes what eager made: the same ``_base``, strides, view
  ``grad_fn`` and creation kind (a ``split`` output stays a multi-output view);
- nothing is regenerated in a program that makes a call for its effect, except grad and inference
  mode sets (each call of a chain runs in the mode the program made it in) and the calls no view call
  reads (a seed, the default dtype, autocast: Note [Calls made for their effect beside views]);
- a view of a tensor whose storage an in-place call writes after the view (or a call of its chain)
  was made is made as autograd makes it again, ``as_strided`` of its base for a plain tensor, its
  chain replayed for a subclass (Note [A view whose base is written]);
- no output leaf that is a view stays an output of the Function: where one cannot be made so, the
  grad transform refuses the entry (``ViewLeftToTheFunction``), which then runs pass 1 under torch's
  autograd, or eagerly (Note [A view left to the Function]).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optree
import torch

from jitcore.ir import BoundSymbol, Proxy, Trace, drop_unread
from jitcore.langctx.thread_state import ENTER_INFERENCE_MODE, EXIT_INFERENCE_MODE, STATE_CHANGE_SYMBOLS
from jitcore.proxies import NumberProxy, TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.transforms.symbolic_sizes import SizesNotRewritten

__all__ = [
    "ViewLeftToTheFunction", "ViewOutputs", "drop_views_made_after", "numbers_taken", "plan",
    "refuse_views_left", "view_outputs",
]


# Note [Views an autograd call returns]
# A call whose inputs require grad runs as one ``torch.autograd.Function`` (autograd.py). A tensor
# a Function returns that is a view (``(x * 2).view(-1)``, ``z[0]``, ``x.t()``) is marked by torch as
# a view made in a custom Function: the caller's in-place op on it raised ("Output 0 of
# JitcoreFunction is a view and is being modified inplace"), where eagerly it rebases the base's
# history (``CopySlices``) and the gradient is right; ``_base`` and ``grad_fn`` differed too.
# As AOTAutograd does (runtime_wrappers.py), such an output is not an output of the Function: its base
# is (an input, another output, or the intermediate it views, handed back as a hidden output), and
# after the apply the view is made from that base by replaying the program's own view calls (the
# pass-1 records ``torch.Tensor.view(z, -1)``, ``torch.Tensor.__getitem__(t, slice(...))``), under
# autograd: ``_base``, strides, ``grad_fn`` type and creation kind are eager's, a view of a leaf
# input raises on an in-place op as eagerly, and a ``split`` output keeps eager's multi-output error.
# The backward is derived with the base as the Function's output, so gradients through the view
# reach it through the view's own node. The forward's own view ops that made those outputs are read
# by nothing then, and dropped (``drop_views_made_after``: an aten view of static arguments cannot
# raise where it ran once); ``GradTraces.forward_body`` keeps them for what recomputes. A call pays
# about a microsecond per view call replayed (docs/autograd.md); a call without a view output keeps
# the plain apply (Note [A call with nothing around the apply], autograd.py).

# tags of the records a chain may not hold: their calls are not plain views of one tensor
_NOT_A_VIEW_CALL = frozenset((
    "inplace", "check", "bookkeeping", "autograd_function", "backward", "global_state", "data_dependent",
    "per_call",
))

Root = tuple[str, int]  # ("arg", i) / ("subclass", i): an input; ("output", k): the Function's k-th output
# where the program made a view: "grad" (grad mode on), "no_grad" (a ``no_grad`` block) or "inference"
# (a ``torch.inference_mode()`` block): Note [The mode a view is made in]
Mode = str
# (fn, the args after the viewed tensor, kwargs, slot viewed, ((slot made, index in the output or None), ...),
#  the mode the program made it in)
Made = tuple[tuple[int, int | None], ...]
Step = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], int, Made, Mode]


@dataclass(frozen=True, slots=True, eq=False)
class ViewOutputs:
    """How the view outputs of a call are made after its autograd Function.

    Attributes:
        roots: ``(slot, root)`` of each base: an input of the call or an output of the Function.
        steps: the view calls, in program order, each reading one slot and filling others.
        positions: ``(position among the output's leaves, slot)`` of each view output.
        n_slots: how many values one call holds.
        hidden: the forward's proxies of the intermediates handed back as extra outputs (after the
            output's own tensors, in this order).
        numbers: pass 1's numbers the view calls take (sizes: Note [View calls of symbolic sizes]),
            ``_Number(k)`` in their arguments.
        number_outputs: the index among the Function's outputs of each of ``numbers`` (grad.py).
        n_strided: how many of ``steps``, first, make a view with ``as_strided`` of its base (Note [A
            view whose base is written]).
    """

    roots: tuple[tuple[int, Root], ...]
    steps: tuple[Step, ...]
    positions: tuple[tuple[int, int], ...]
    n_slots: int
    hidden: tuple[TensorProxy, ...]
    numbers: tuple[NumberProxy, ...] = ()
    number_outputs: tuple[int, ...] = ()
    n_strided: int = 0

    def make(self, leaves: list[Any], outputs: Sequence[Any], inputs: Sequence[Any],
             input_index: Callable[[str, int], int]) -> None:
        """Fill ``leaves`` (the output's leaves) at the view positions, from ``outputs`` (the
        Function's) and ``inputs`` (the call's, numbered by ``input_index``)."""
        values: list[Any] = [None] * self.n_slots
        for slot, (kind, i) in self.roots:
            values[slot] = outputs[i] if kind == "output" else inputs[input_index(kind, i)]
        numbers = [outputs[k] for k in self.number_outputs] if self.number_outputs else None
        for fn, rest, kwargs, viewed, written, mode in self.steps:
            if numbers is not None:  # Note [View calls of symbolic sizes]
                rest, kwargs = _filled((rest, kwargs), numbers)
            if mode == "grad":
                out = fn(values[viewed], *rest, **kwargs)
            else:  # Note [The mode a view is made in]
                with torch.no_grad() if mode == "no_grad" else torch.inference_mode():
                    out = fn(values[viewed], *rest, **kwargs)
            for slot, index in written:
                values[slot] = out if index is None else out[index]
        for position, slot in self.positions:
            leaves[position] = values[slot]


Found = list[tuple[int, Any, TensorProxy]]  # (position among the output's leaves, base, its replay proxy)
Chains = dict[int, tuple[BoundSymbol, int | None, Any]]  # id(value) -> (record, index in its output, viewed)
# id(view) -> (its base, size, stride, storage offset, whether it is one output of several, the mode
# it was made in): Note [A view whose base is written]
Strided = dict[int, tuple[Any, tuple[int, ...], tuple[int, ...], int, bool, Mode]]


def view_outputs(
    trace: Trace, leaves: Sequence[Any], replayed: Callable[[Any], Any], subclass_inputs: Sequence[Any],
    sized: Callable[[NumberProxy], bool] = lambda number: False,
) -> tuple[Found, Chains, Strided] | None:
    """The view outputs of pass 1 ``trace`` that can be made after the Function (None: none).

    Args:
        trace: the pass-1 trace.
        leaves: the leaves of its output (pass-1 values).
        replayed: the replay's proxy of a pass-1 value (None where it made none).
        subclass_inputs: pass 1's subclass input proxies, in the computation's order.
        sized: whether a number of pass 1 is a size the replay keeps symbolic (Note [View calls of
            symbolic sizes]); a view call taking another number stays the Function's output.

    Returns:
        ``(position, base (a pass-1 value), the replay's proxy of the base)`` of each view leaf, the
        records making them (by id of the pass-1 value each makes), and the views made with
        ``as_strided`` (Note [A view whose base is written]): what ``plan`` takes.
    """
    if any(_sets_state(b) for b in trace.bound_symbols):
        return None
    order = {id(b): k for k, b in enumerate(trace.bound_symbols)}
    # the last in-place call that may write each storage (the roots of each of its tensors):
    # Note [A view whose base is written]
    last_write: dict[int, int] = {}
    changed: dict[int, list[BoundSymbol]] = {}  # id(value) -> the in-place calls changing its metadata
    for k, b in enumerate(trace.bound_symbols):
        if _changes_metadata(b):  # Note [A view's metadata changed in place]
            changed.setdefault(id(b.args[0]), []).append(b)
            if _base_of(replayed(b.args[0])) is not None:  # a view's: no write
                continue
        if _writes(b):
            for v in optree.tree_leaves((b.args, b.kwargs, b.output), none_is_leaf=True):
                if isinstance(v, TensorProxy):
                    last_write[id(_root(replayed(v)))] = k
    mode_at = _modes(trace)
    producers: dict[int, tuple[BoundSymbol, int | None]] = {}  # the call that made each value
    for bsym in trace.bound_symbols:
        if _writes(bsym):  # returns the tensor it wrote, made before
            continue
        # a call returning a tensor it was given (``t.to(t.dtype)``, ``t.contiguous()`` of a contiguous t)
        # made nothing: the value's maker is the call before it
        given = {id(v) for v in optree.tree_leaves((bsym.args, bsym.kwargs), none_is_leaf=True)
                 if isinstance(v, Proxy)}
        out = bsym.output
        if isinstance(out, Proxy) and id(out) not in given:
            producers[id(out)] = (bsym, None)
        elif isinstance(out, (tuple, list)):
            for k, v in enumerate(out):
                if isinstance(v, Proxy) and id(v) not in given:
                    producers[id(v)] = (bsym, k)
    inputs = {id(a) for a in trace.args} | {id(p) for p in subclass_inputs}
    by_shadow: dict[int, Any] = {}
    for value in (*trace.args, *subclass_inputs, *(v for v, _ in _record_values(trace))):
        proxy = replayed(value) if isinstance(value, Proxy) else None
        if isinstance(proxy, TensorProxy):
            by_shadow.setdefault(id(proxy.shadow), value)
    found: Found = []
    chains: Chains = {}
    strided: Strided = {}
    for position, leaf in enumerate(leaves):
        if not isinstance(leaf, TensorProxy) or id(leaf) in inputs:
            continue
        proxy = replayed(leaf)
        base_shadow = _base_of(proxy)
        base = by_shadow.get(id(base_shadow)) if base_shadow is not None else None
        if base is None:
            continue
        write = last_write.get(id(base_shadow), -1)
        chain = _chain(leaf, base, base_shadow, producers, replayed, sized)
        if chain is not None:
            steps = _in_order(chain, leaf, base)
            reshaped = _metadata_changes(steps, base, changed, order, sized)
            if reshaped is None:
                continue
            # Note [A view whose base is written]: the calls made before the last write give way to
            # as_strided of what the last of them made, as autograd makes that view again
            before = [step for step in steps if order[id(step[1][0])] < write]
            if before and reshaped:  # (the pivot's layout where the write was made is not at hand)
                continue
            chain.update(reshaped)
            if before and not isinstance(proxy, SubclassTensorProxy):  # a subclass view replays its chain
                pivot, (bsym, index, _source) = before[-1]
                layout = _plain_layout(replayed(pivot), base_shadow)
                if layout is None:
                    continue
                strided[id(pivot)] = (base, *layout, index is not None, mode_at[order[id(bsym)]])
                chain = {key: made for key, made in chain.items() if order[id(made[0])] > write}
            chains.update(chain)
            found.append((position, base, replayed(base)))
            continue
        made = producers.get(id(leaf))
        if made is not None and write > order[id(made[0])] and id(leaf) not in changed:
            layout = _plain_layout(proxy, base_shadow)
            if layout is not None:  # Note [A view whose base is written]
                strided[id(leaf)] = (base, *layout, made[1] is not None, mode_at[order[id(made[0])]])
                found.append((position, base, replayed(base)))
    return (found, chains, strided) if found else None


# Note [A view whose base is written]
# ``v = z.view(-1); z.mul_(2); return z, v`` (or ``v.add_(1)``): eagerly the write bumps the version
# of ``z``'s storage after ``v`` was made, and autograd, reading ``v.grad_fn``, makes ``v``'s node
# again from its base: ``as_strided`` of ``z`` with ``v``'s sizes, strides and offset
# (``AsStridedBackward0``; a plain strided tensor has no view function to replay). Replaying the
# program's view calls after the Function would give ``ViewBackward0``, and a view of a base written
# before the view was made keeps its own node, which the replay gives. So a view made from a base
# some in-place call writes after it (the last such write follows the view's call) is made as
# ``base.as_strided(size, stride, offset)``, as autograd makes it again (plain tensors of static
# layout), in the grad mode the program made it in. Within a chain, ``u = z.view(-1); z.mul_(2);
# v = u[::2]``, eagerly ``u[::2]`` first makes ``u``'s node again: what the last call before the last
# write made is ``as_strided`` of the base, and the calls after the write are replayed on it
# (``SliceBackward0`` over ``AsStridedBackward0``). A tensor subclass (TwoTensor) has a view function,
# which autograd replays instead: its chain is replayed whatever the writes (``ViewBackward0``).
# Autograd refuses to make again the node of a ``split``/``unbind`` output or of a view made under
# ``no_grad`` (reading ``grad_fn`` raises, and so does an in-place op on it); such a view is
# ``as_strided`` with eager's creation kind (``_as_strided_of_several``; under ``no_grad``), so an
# in-place op on it raises eager's error; its base's version is then bumped, so that reading its
# ``grad_fn`` or a backward through it raises as eagerly (Note [The version of a written base],
# view_versions.py). A chain whose pivot has no static layout is not made so (Note [A view left to
# the Function]).


def plan(
    found: Found, chains: Chains, strided: Strided, trace: Trace, leaves: Sequence[Any],
    subclass_inputs: Sequence[Any], kept: Sequence[Any],
) -> ViewOutputs:
    """The ``ViewOutputs`` of ``view_outputs``'s result.

    Args:
        found, chains, strided: from ``view_outputs``.
        trace, leaves, subclass_inputs: as for ``view_outputs``.
        kept: the Function's outputs made from the output's own tensors (replay proxies, each once).
    """
    slots: dict[int, int] = {}  # id(pass-1 value) -> its slot

    def slot(key: int) -> int:
        return slots.setdefault(key, len(slots))

    args = {id(a): i for i, a in enumerate(trace.args)}
    subclasses = {id(p): i for i, p in enumerate(subclass_inputs)}
    roots: list[tuple[int, Root]] = []
    hidden: list[TensorProxy] = []
    for _position, base, proxy in found:
        if id(base) in slots:
            continue
        if id(base) in args:
            root: Root = ("arg", args[id(base)])
        elif id(base) in subclasses:
            root = ("subclass", subclasses[id(base)])
        else:
            outputs = [*kept, *hidden]  # the Function's outputs, the hidden ones after the output's
            k = next((k for k, v in enumerate(outputs) if v is proxy), None)
            if k is None:
                k = len(outputs)
                hidden.append(proxy)
            root = ("output", k)
        roots.append((slot(id(base)), root))
    steps: list[Step] = []
    numbers: list[NumberProxy] = []
    # Note [A view whose base is written]: first, as they read only bases; a chain's later calls read them
    for key, (base, size, stride, offset, several, mode) in strided.items():
        fn = _as_strided_of_several if several else torch.Tensor.as_strided
        steps.append((fn, (size, stride, offset), {}, slots[id(base)], ((slot(key), None),), mode))
    for bsym, mode in zip(trace.bound_symbols, _modes(trace)):  # program order: a chain's earlier calls first
        made = [(key, k) for key, (b, k, _source) in chains.items() if b is bsym]
        if not made:
            continue
        if bsym.symbol.fn is torch.broadcast_tensors:  # Note [The outputs of broadcast_tensors]: a call each
            for key, k in made:
                fn, rest, kwargs = _call_of(bsym, index=k)  # type: ignore[misc] - a chain's calls have one
                rest, kwargs = _numbered((rest, kwargs), numbers)
                steps.append((fn, rest, kwargs, slot(id(chains[key][2])), ((slot(key), None),), mode))
            continue
        source = chains[made[0][0]][2]
        # Note [A view's metadata changed in place]: the call changes the value it is given, in place
        written = ((slot(id(source)), None),) if _changes_metadata(bsym) \
            else tuple((slot(key), k) for key, k in made)
        fn, rest, kwargs = _call_of(bsym)  # type: ignore[misc] - a chain's calls have one
        rest, kwargs = _numbered((rest, kwargs), numbers)  # Note [View calls of symbolic sizes]
        steps.append((fn, rest, kwargs, slot(id(source)), written, mode))
    positions = tuple((position, slots[id(leaf)]) for position, leaf in enumerate(leaves)
                      if id(leaf) in chains or id(leaf) in strided)
    return ViewOutputs(tuple(roots), tuple(steps), positions, len(slots), tuple(hidden), tuple(numbers),
                       n_strided=len(strided))


# Note [A view left to the Function]
# A view output the Function returned itself was no eager view: for a plain tensor, an in-place op of
# the caller's on it raised "Output 1 of JitcoreFunction is a view and is being modified inplace" where
# eager computes, and its ``grad_fn`` was the Function's; for a tensor subclass (TwoTensor) it was a new
# tensor, no view at all, which the caller's in-place op wrote without writing its base: a wrong
# gradient, with no error. Where ``view_outputs`` cannot make a view output after the Function (a call
# made for an effect jitcore does not know, a view call reading another tensor such as
# ``torch.meshgrid``, a pivot of no static layout, beside an output the program assembles), the grad
# transform raises ``ViewLeftToTheFunction``; the entry runs pass 1 under torch's autograd (every call
# of a subclass program then resolves its dispatch, as eagerly), or, where pass 1 cannot run so, the
# call runs eagerly (JC-J002). ``jitcore.explain`` shows the reason.
# Note [A view of a base the caller cannot reach]
# Only a view whose base the caller can reach is refused: the base is (the base of) an input or of another
# output. A view of an intermediate no output or input shares (``conv1d``'s squeeze of its conv2d, a 3-d
# ``linear``'s view of its matmul, a nested jagged tensor's view of its values buffer) stays the Function's
# output, as before the refusal: its values and gradients are eager's, the caller's in-place write of it
# writing nothing else the caller sees; what differs is its view metadata (``_is_view()``, ``grad_fn``),
# and for a plain tensor an in-place write of it raises "Output 0 of JitcoreFunction is a view" where
# eager computes. Refusing it made every such entry run pass 1 under torch's autograd: 53 OpInfo entries
# lost their traced backward, and float8/DTensor linears and nested jagged SDPA dispatched on warm calls.
class ViewLeftToTheFunction(Exception):  # noqa: N818 - a refusal, as SizesNotRewritten
    """An output that is a view cannot be made after the Function (Note [A view left to the Function])."""


def refuse_views_left(
    trace: Trace, leaves: Sequence[Any], views: ViewOutputs | None, replayed: Callable[[Any], Any],
    subclass_inputs: Sequence[Any], assembled: bool,
) -> None:
    """Raise ``ViewLeftToTheFunction`` where an output leaf is a view (its replay shadow is one) that
    ``views`` does not make, and no input.

    Args:
        trace, leaves, replayed, subclass_inputs: as for ``view_outputs``.
        views: the plan of the views made after the Function (None: none is).
        assembled: the Function's outputs are assembled (the views stay its outputs then).
    """
    made = {position for position, _slot in views.positions} if views is not None else set()
    given = {id(v) for v in (*trace.args, *subclass_inputs)}
    bases = {position: _base_of(replayed(leaf)) for position, leaf in enumerate(leaves)
             if isinstance(leaf, TensorProxy) and id(leaf) not in given and position not in made}
    # Note [A view of a base the caller cannot reach]
    inputs = [_root(replayed(v)) for v in (*trace.args, *subclass_inputs)]
    outputs = [_root(replayed(leaf)) for leaf in leaves]

    def reached(position: int, base: torch.Tensor) -> bool:
        others = (root for p, root in enumerate(outputs) if p != position)
        return any(root is base for root in (*inputs, *others))

    left = next((position for position, base in bases.items()
                 if base is not None and reached(position, base)), None)
    if left is None:
        return
    effect = next((b for b in trace.bound_symbols if _sets_state(b)), None)
    why = ("beside a tensor subclass the program assembles" if assembled
           else f"in a program that calls {effect.symbol.name} for its effect" if effect is not None
           else "made by a call that reads another tensor or number, or from a base written after it")
    raise ViewLeftToTheFunction(
        f"output {left} of the function is a view that cannot be made after the call's autograd node, {why}")


def _as_strided_of_several(base: torch.Tensor, size: Any, stride: Any, offset: int) -> torch.Tensor:
    """``base.as_strided(size, stride, offset)`` of a view that is one of several outputs of its call
    (a ``split`` output): an in-place op on it raises eager's multi-output error (Note [A view whose
    base is written])."""
    view = base.as_strided(size, stride, offset)
    if view.requires_grad:
        torch._C._autograd._set_creation_meta(view, _MULTI_OUTPUT_NODE)  # noqa: SLF001
    return view


_MULTI_OUTPUT_NODE = torch._C._autograd.CreationMeta.MULTI_OUTPUT_NODE  # noqa: SLF001


def drop_views_made_after(forward: Trace) -> None:
    """Drop from ``forward`` the aten view ops whose results nothing reads (the views the call makes
    after its Function; Note [Views an autograd call returns])."""
    drop_unread(forward, _an_aten_view)


def _an_aten_view(bsym: BoundSymbol) -> bool:
    fn = bsym.symbol.fn
    return isinstance(fn, torch._ops.OpOverload) and fn.is_view and "inplace" not in bsym.symbol.tags  # noqa: SLF001


def _chain(
    leaf: Any, base: Any, base_shadow: torch.Tensor, producers: dict[int, tuple[BoundSymbol, int | None]],
    replayed: Callable[[Any], Any], sized: Callable[[NumberProxy], bool],
) -> Chains | None:
    """The records making ``leaf`` from ``base`` by views (by id of the value each makes: the record,
    the index of that value in its output, the value it viewed), or None."""
    chain: Chains = {}
    value = leaf
    while value is not base:  # (a value met twice: no chain, never a loop)
        if len(chain) > 16 or id(value) in chain or id(value) not in producers:
            return None
        bsym, index = producers[id(value)]
        source = _viewed(bsym, sized, index)
        if source is None:
            return None
        shadow = getattr(replayed(source), "shadow", None)
        if shadow is not base_shadow and _base_of(replayed(source)) is not base_shadow:
            return None
        chain[id(value)] = (bsym, index, source)
        value = source
    return chain


# Note [A view's metadata changed in place]
# ``v = z.view(4, 8); v.unsqueeze_(0)`` (``squeeze_``, ``t_``, ``transpose_``, ``swapdims_``,
# ``as_strided_``) changes ``v``'s sizes and strides in place, not its data: eagerly its node becomes
# the op's (``UnsqueezeBackward1``), and the version of the storage stays. Counted as a write, ``v``
# was ``as_strided`` of its base (``AsStridedBackward0``), and for a tensor subclass, whose chain is
# replayed, the call was not made at all: a view of pass 1's first sizes (``z[1:]`` then ``t_()`` of a
# TwoTensor came back (3, 8) where eager's is (8, 3): wrong shapes and values). Such a call on a value
# of a view's chain is a step of that chain, made in program order on the value after the Function
# (in place, as eagerly). On a base, after the chain's first call, it changes what the chain reads:
# a plain view is then made by ``as_strided`` (it counts as a write of the base), a subclass view is
# not made after the Function (Note [A view left to the Function]); so too a chain whose base is
# written and whose values are changed so (the pivot's layout at the write is not known).
_METADATA_IN_PLACE = frozenset((
    torch.Tensor.unsqueeze_, torch.Tensor.squeeze_, torch.Tensor.t_, torch.Tensor.transpose_,
    torch.Tensor.swapdims_, torch.Tensor.swapaxes_, torch.Tensor.as_strided_, torch.as_strided_,
))


def _changes_metadata(bsym: BoundSymbol) -> bool:
    return bsym.symbol.fn in _METADATA_IN_PLACE and bool(bsym.args) and isinstance(bsym.args[0], TensorProxy)


def _metadata_changes(
    steps: list[tuple[Any, tuple[BoundSymbol, int | None, Any]]], base: Any,
    changed: dict[int, list[BoundSymbol]], order: dict[int, int], sized: Callable[[NumberProxy], bool],
) -> Chains | None:
    """The in-place metadata calls on the values of a chain (``steps``, from ``_in_order``), as chain
    entries keyed by the record's id (None: the chain cannot be made after the Function: Note [A
    view's metadata changed in place])."""
    first = order[id(steps[0][1][0])] if steps else -1
    if isinstance(base, SubclassTensorProxy) and any(order[id(b)] > first for b in changed.get(id(base), ())):
        return None
    found: Chains = {}
    for value, _made in steps:
        for b in changed.get(id(value), ()):
            if _call_of(b, sized) is None:
                return None
            found[id(b)] = (b, None, value)
    return found


def _in_order(chain: Chains, leaf: Any, base: Any) -> list[tuple[Any, tuple[BoundSymbol, int | None, Any]]]:
    """The values of ``chain`` with the record making each, from the base's view to ``leaf``."""
    steps = []
    value = leaf
    while value is not base:
        made = chain[id(value)]
        steps.append((value, made))
        value = made[2]
    return steps[::-1]


# Note [The mode a view is made in]
# A view the program makes inside ``with torch.no_grad():`` is eagerly a view of no-grad mode, and one
# made inside ``with torch.inference_mode():`` a view of inference mode (``CreationMeta``): an in-place
# op on either outside raises, each with its own message. Made after the Function, each view call runs
# in the mode the program made it in, read from the trace's records: grad mode sets
# (``_set_grad_enabled``) and inference mode blocks (``enter_inference_mode``/``exit_inference_mode``,
# innermost last). The call runs under autograd, so grad mode is on, inference mode off, at its start.
def _modes(trace: Trace) -> list[Mode]:
    """The mode (``Mode``) each record of ``trace`` is made in."""
    modes: list[Mode] = []
    grad, inference = True, [False]
    for bsym in trace.bound_symbols:
        if bsym.symbol.fn is _SET_GRAD_ENABLED:
            grad = bool(bsym.args[0])
        elif bsym.symbol is ENTER_INFERENCE_MODE:
            inference.append(bool(bsym.args[0]) if bsym.args else True)
        elif bsym.symbol is EXIT_INFERENCE_MODE and len(inference) > 1:
            inference.pop()
        modes.append("inference" if inference[-1] else "grad" if grad else "no_grad")
    return modes


def _viewed(bsym: BoundSymbol, sized: Callable[[NumberProxy], bool], index: int | None = None) -> Any:
    """The one tensor ``bsym`` views, its first positional argument (the ``index``-th of
    ``broadcast_tensors``, which makes output ``index``); None: not a call of that shape."""
    if any(t in _NOT_A_VIEW_CALL for t in bsym.symbol.tags) or not bsym.args:
        return None
    if bsym.symbol.fn is torch.broadcast_tensors:  # Note [The outputs of broadcast_tensors]
        if index is None or index >= len(bsym.args) or bsym.kwargs or _call_of(bsym, sized, index) is None:
            return None
        return bsym.args[index] if isinstance(bsym.args[index], TensorProxy) else None
    first = bsym.args[0]
    if not isinstance(first, TensorProxy) or _call_of(bsym, sized) is None:
        return None
    return first


# Note [A view call with a second tensor]
# ``x.view_as(y)``, ``x.expand_as(y)``, ``x.reshape_as(y)`` read only ``y``'s sizes: torch defines them
# as ``x.view(y.size())`` (and ``expand``, ``reshape``), the node is the same (``ViewBackward0``,
# ``ExpandBackward0``). Made after the Function, such a call is that call with ``y``'s sizes, static
# in the trace; ``y`` need not be at hand (an intermediate the Function does not return).
_SIZED_BY_ANOTHER = {
    torch.Tensor.view_as: torch.Tensor.view,
    torch.Tensor.expand_as: torch.Tensor.expand,
    torch.Tensor.reshape_as: torch.Tensor.reshape,
}


# Note [The outputs of broadcast_tensors]
# ``torch.broadcast_tensors(a, b)`` makes its k-th output as ``args[k].expand(shape)`` (an input of that
# shape is returned as it is), the shape of the output: ``ExpandBackward0`` eagerly. Made after the
# Function, each output is that call on its own input, with the output's sizes (as a second tensor's,
# Note [A view call with a second tensor]). Before, such an output stayed the Function's (for a
# TwoTensor no view; since Note [A view left to the Function], an entry running pass 1 under autograd).
def _call_of(
    bsym: BoundSymbol, sized: Callable[[NumberProxy], bool] = lambda number: True, index: int | None = None,
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None:
    """What a view call of ``bsym`` makes its view with, after its first argument (its output
    ``index``'s, for ``broadcast_tensors``); None: it reads another proxy, a tensor or a number of
    the trace that is not ``sized``."""
    fn, rest, kwargs = bsym.symbol.fn, bsym.args[1:], dict(bsym.kwargs)
    by_sizes = _SIZED_BY_ANOTHER.get(fn)
    if by_sizes is not None and len(rest) == 1 and not kwargs and isinstance(rest[0], TensorProxy):
        sizes = tuple(rest[0].shape)  # Note [A view call with a second tensor]
        if not all(type(n) in (int, torch.SymInt) for n in sizes):
            return None
        fn, rest = by_sizes, (sizes,)
    elif fn is torch.broadcast_tensors:  # Note [The outputs of broadcast_tensors]
        out = bsym.output
        if index is None or not isinstance(out, (tuple, list)) or not isinstance(out[index], TensorProxy):
            return None
        sizes = tuple(out[index].shape)
        if not all(type(n) in (int, torch.SymInt) for n in sizes):
            return None
        fn, rest, kwargs = torch.Tensor.expand, (sizes,), {}
    for v in _leaves((rest, kwargs)):
        if isinstance(v, Proxy) and not (isinstance(v, NumberProxy) and sized(v)):
            return None
        if isinstance(v, torch.SymInt) and not sized(v):  # a size of the pass (``y.shape`` of view_as)
            return None
    return fn, rest, kwargs


def _leaves(tree: Any) -> list[Any]:
    """The leaves of ``tree`` and the bounds of the slices among them (``z[: x.shape[0] // 2]``: a
    slice is no pytree node, and its bound, replayed as it was, was pass 1's number)."""
    leaves = optree.tree_leaves(tree, none_is_leaf=True)
    return leaves + [b for v in leaves if type(v) is slice for b in (v.start, v.stop, v.step)]


# Note [View calls of symbolic sizes]
# In an entry of symbolic sizes that the grad transform differentiates (a TwoTensor over changing
# sizes), a view call takes sizes as numbers of the pass (``z.view(z.shape[0], -1)``,
# ``z[: x.shape[0] // 2]``, ``z.view_as(y)``). Each call has its own: the forward computes them from its
# sizes (the arithmetic ``rewrite_sizes`` records) and returns them after the output's numbers, and the
# view call takes them there (``_Number(k)`` in its arguments, filled per call). Before, such a view
# stayed the Function's output: for a subclass a new tensor, not a view, which the caller's in-place op
# wrote without writing the base.
@dataclass(frozen=True, slots=True)
class _Number:
    k: int


def _numbered(tree: Any, numbers: list[NumberProxy]) -> Any:
    """``tree`` with each number proxy (in a slice too) replaced by ``_Number(its index in numbers)``."""
    def number(v: Any) -> Any:
        if not isinstance(v, (NumberProxy, torch.SymInt)):
            return v
        k = next((k for k, n in enumerate(numbers) if n is v), None)
        if k is None:
            k = len(numbers)
            numbers.append(v)
        return _Number(k)
    return optree.tree_map(
        lambda v: slice(number(v.start), number(v.stop), number(v.step)) if type(v) is slice else number(v),
        tree, none_is_leaf=True)


def numbers_taken(
    views: ViewOutputs, values: Sequence[Any], returned: Sequence[Any], offset: int,
) -> ViewOutputs:
    """``views`` taking its numbers from the Function's outputs (Note [View calls of symbolic sizes]).

    Args:
        views: ``plan``'s result.
        values: the forward's value of each of ``views.numbers`` (a number proxy, or an int).
        returned: the numbers the forward returns, after its ``offset`` tensor outputs.

    Raises:
        SizesNotRewritten: a number the forward does not return.
    """
    taken: list[int] = []
    filled: list[Any] = []
    for value in values:
        if type(value) is int:
            filled.append(value)
            continue
        k = next((k for k, n in enumerate(returned) if n is value), None)
        if k is None:
            raise SizesNotRewritten("a view call's number is no number the forward returns")
        filled.append(_Number(len(taken)))
        taken.append(offset + k)
    steps = tuple((fn, *_filled((rest, kwargs), filled), viewed, written, mode)
                  for fn, rest, kwargs, viewed, written, mode in views.steps)
    return dataclasses.replace(views, steps=steps, number_outputs=tuple(taken))


def _filled(tree: Any, numbers: Sequence[Any]) -> Any:
    """``tree`` with each ``_Number(k)`` (in a slice too) replaced by ``numbers[k]``."""
    def number(v: Any) -> Any:
        return numbers[v.k] if type(v) is _Number else v
    return optree.tree_map(
        lambda v: slice(number(v.start), number(v.stop), number(v.step)) if type(v) is slice else number(v),
        tree, none_is_leaf=True)


def _base_of(proxy: Any) -> torch.Tensor | None:
    """The base of the replay's shadow of ``proxy`` where that shadow is a view."""
    if not isinstance(proxy, TensorProxy):
        return None
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        shadow = proxy.shadow
        return shadow._base if shadow._is_view() else None  # noqa: SLF001


_SET_GRAD_ENABLED = torch._C._set_grad_enabled  # noqa: SLF001 - what a ``no_grad`` block records


def _writes(bsym: BoundSymbol) -> bool:
    return "inplace" in bsym.symbol.tags or "out" in bsym.kwargs


# Note [Calls made for their effect beside views]
# A program that makes a call for its effect (``torch.manual_seed``, ``torch.set_default_dtype``,
# ``with torch.autocast(...)``, ``with torch.inference_mode()``) kept every view output the Function's:
# for a tensor subclass a new tensor, no view, which the caller's in-place op wrote without writing its
# base (a wrong gradient: x.grad sum 35.9616 where eager has 53.9424, /tmp/grd55-probes/fallback_tt.py).
# No view call reads the random state, the default dtype, or autocast's settings (no view op is one
# autocast casts), so those leave the views to be made after the Function; inference mode blocks are
# followed as grad mode is (Note [The mode a view is made in]). Another such call (one jitcore does not
# know) still leaves its views the Function's, and the entry then runs pass 1 under torch's autograd
# (Note [A view left the Function's]).
_READ_BY_NO_VIEW_CALL = frozenset((
    torch.random.manual_seed, torch.set_default_dtype, torch.autocast,  # (the block's object, made)
    *(fn for fn in STATE_CHANGE_SYMBOLS if fn is not _SET_GRAD_ENABLED),  # autocast's settings
))


def _sets_state(bsym: BoundSymbol) -> bool:
    """A call made for its effect other than an in-place write, a grad or inference mode set (which
    ``plan`` follows: Note [The mode a view is made in]) and one no view call reads (Note [Calls made
    for their effect beside views]); a check makes no value either, and changes nothing."""
    tags = bsym.symbol.tags
    if bsym.symbol.fn in _READ_BY_NO_VIEW_CALL or bsym.symbol in (ENTER_INFERENCE_MODE, EXIT_INFERENCE_MODE):
        return False
    if "global_state" in tags:
        return True
    return not _record_outputs(bsym) and not _writes(bsym) and "check" not in tags \
        and "bookkeeping" not in tags \
        and not (bsym.symbol.fn is _SET_GRAD_ENABLED and len(bsym.args) == 1 and not bsym.kwargs)


Layout = tuple[tuple[int, ...], tuple[int, ...], int]


def _plain_layout(proxy: TensorProxy, base: torch.Tensor) -> Layout | None:
    """The size, stride and storage offset of a plain view's shadow over a plain base, where all
    are static (None otherwise)."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        shadow = proxy.shadow
        if isinstance(proxy, SubclassTensorProxy) or not isinstance(base, torch._subclasses.FakeTensor) \
                or not isinstance(shadow, torch._subclasses.FakeTensor):
            return None
        size, stride, offset = tuple(shadow.shape), tuple(shadow.stride()), shadow.storage_offset()
    if not all(type(n) is int for n in (*size, *stride, offset)):
        return None
    return size, stride, offset


def _root(proxy: Any) -> Any:
    """The replay's shadow of ``proxy``, or its base where it is a view (None: no tensor)."""
    if not isinstance(proxy, TensorProxy):
        return None
    base = _base_of(proxy)
    return proxy.shadow if base is None else base


def _record_outputs(bsym: BoundSymbol) -> list[Any]:
    return [v for v in optree.tree_leaves(bsym.output, none_is_leaf=True) if isinstance(v, Proxy)]


def _record_values(trace: Trace) -> list[tuple[Any, BoundSymbol]]:
    return [(v, b) for b in trace.bound_symbols for v in _record_outputs(b)]
