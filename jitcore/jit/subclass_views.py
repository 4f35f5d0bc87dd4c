"""Tensor-subclass outputs that are views, in an entry without grad: made after the computation, from
their outer base, by the program's own view calls (Note [Subclass views without grad]).

Invariants:
- only a subclass output leaf that pass 1 made as a view, by a chain ``view_outputs`` can make again
  (jitcore/transforms/view_outputs.py), is made so; every other leaf is the flat computation's;
- a view output is the flat computation's wrapper, recorded as a view of its root base without any
  method of the class running;
- a view's base is the caller's own object where it is a subclass argument the computation can take
  whole (``subclass_arguments_passed_whole``), another output, or an intermediate the flat trace
  returns as an extra (hidden) output; a view of an input the computation cannot take whole stays
  the computation's (no view);
- the flat trace returns ``(the program's output, (the extra bases, ...))``; the wrapper hands the
  program's output on in its own structure, so what runs after it (the output's rebuild, effects)
  sees pass 1's output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import optree
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from jitcore.dispatch.flatten import subclass_arguments_passed_whole
from jitcore.ir import Trace
from jitcore.prologue import Path
from jitcore.proxies import NumberProxy
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.transforms.view_outputs import ViewOutputs, numbers_taken, plan, view_outputs

__all__ = ["SubclassViews", "subclass_views"]


# Note [Subclass views without grad]
# Without grad, a tensor-subclass program runs flat: on the inner tensors, its subclass outputs rebuilt
# at the end from what they hold (``unflatten_tensor_subclass``). A TwoTensor output that eagerly is a
# view (``z.narrow(1, 2, 3)``, ``x.T``, ``z.split(...)``) came back a new wrapper over views of the
# inner tensors: ``_is_view()`` False, ``_base`` None (/tmp/grd56-probes/many.py "tt nograd"). As under
# grad (Note [Views an autograd call returns], view_outputs.py), such an output is made after the
# computation, from its base, by the program's own view calls: ``_base``, ``_is_view()``, strides and
# creation kind are eager's. The base is the caller's argument (the flat trace takes it whole, and
# returns it as an extra output), another output, or the intermediate it views, which the flat trace
# rebuilds and returns as an extra output (eager's ``_base`` there is an object the caller cannot
# reach either). The view is made without the class (Note [A subclass view made without its class]);
# a program without such a view output is not changed.
@dataclass(frozen=True, slots=True, eq=False)
class SubclassViews:
    """How the subclass view outputs of an entry without grad are made after its computation.

    Attributes:
        views: the view calls (``ViewOutputs``); its roots are ``("output", k)``, ``k`` indexing
            ``[*kept, *extra bases]``.
        kept: the positions, among the output's leaves, of the outputs the views may read (``plan``'s
            kept outputs, in its order).
    """

    views: ViewOutputs
    kept: tuple[int, ...]

    def wrap(self, computation: Callable[..., Any]) -> Callable[..., Any]:
        """``computation`` (returning ``(output, extras)``), its view outputs then made views of their
        bases (Note [A subclass view made without its class])."""
        roots = self.roots

        def with_subclass_views(*args: Any) -> Any:
            output, extras = computation(*args)
            leaves, tree = optree.tree_flatten(output, none_is_leaf=True)
            bases = [*(leaves[p] for p in self.kept), *extras]
            done: dict[int, torch.Tensor] = {}
            for position, (root, mode) in roots.items():
                made = leaves[position]
                view = done.get(id(made))
                if view is None:
                    view = done[id(made)] = _a_view_of(bases[root], made, mode)
                leaves[position] = view
            return optree.tree_unflatten(tree, leaves)

        return with_subclass_views

    @property
    def roots(self) -> dict[int, tuple[int, str]]:
        """``position -> (index among the bases, the mode its last view call ran in)`` of each view
        output: its chain followed back to its root, which is eager's ``_base``."""
        views = self.views
        root_of = {slot: i for slot, (_kind, i) in views.roots}
        made_from: dict[int, tuple[int, str]] = {}
        for _fn, _rest, _kwargs, viewed, written, mode in views.steps:
            for slot, _index in written:
                made_from[slot] = (viewed, mode)
        found: dict[int, tuple[int, str]] = {}
        for position, slot in views.positions:
            mode = made_from[slot][1]
            while slot not in root_of:
                slot = made_from[slot][0]
            found[position] = (root_of[slot], mode)
        return found


# Note [A subclass view made without its class]
# The flat computation already made each view output's inner tensors as views of its base's inner
# tensors (``z.a.narrow(...)``) and wrapped them: the values alias as eagerly, but the wrapper is no
# view (``_is_view()`` False, ``_base`` None), and the caller's in-place write through it does not bump
# the base's version. Running the view call again on the outer base (grd58's 11dc62c) made eager's view,
# but ran the class's ``__torch_dispatch__`` on every cached call (issue 15: a cached call runs none).
# Instead a view op runs on the outer base under a dispatch mode that returns the wrapper already made:
# autograd's ADInplaceOrView kernel then records the wrapper as a view of the base (``_base``, the shared
# version counter, the creation mode), and no method of the class runs. ``aten.alias`` is that view op:
# the wrapper holds its own sizes and strides (an NJT's would be read through its dispatch), and an
# alias's replay function is what autograd would use only where the base required grad, which no
# entry without grad has (/tmp/grd59-probes/view_by_mode.py).
class _Returning(TorchDispatchMode):
    """A dispatch mode whose every op returns ``made``."""

    def __init__(self, made: torch.Tensor) -> None:
        super().__init__()
        self.made = made

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return self.made


def _a_view_of(base: torch.Tensor, made: torch.Tensor, mode: str) -> torch.Tensor:
    """``made`` recorded as a view of ``base`` made in ``mode`` (Note [A subclass view made without its
    class]); ``made`` itself where it is a view already or carries autograd's metadata."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - no __torch_function__ of the class
        if made._is_view() or made.requires_grad:  # noqa: SLF001
            return made
        if mode == "grad":
            with _Returning(made):
                return torch.ops.aten.alias.default(base)
        with torch.no_grad() if mode == "no_grad" else torch.inference_mode(), _Returning(made):
            return torch.ops.aten.alias.default(base)


def _no_input(kind: str, i: int) -> int:
    raise AssertionError(f"a subclass view's root is an output, not input {kind} {i}")


def subclass_views(
    trace: Trace, subclass_inputs: Sequence[tuple[SubclassTensorProxy, Path]],
) -> tuple[Trace, SubclassViews] | None:
    """Pass 1 ``trace`` returning the extra bases as well, and how its subclass view outputs are made
    (None: it has none ``view_outputs`` can make)."""
    leaves = optree.tree_leaves(trace.output, none_is_leaf=True)
    proxies = [proxy for proxy, _path in subclass_inputs]
    inputs = {id(p) for p in proxies}

    def found_for(candidates: list[Any]) -> Any:
        return view_outputs(trace, candidates, _itself, proxies, _a_number_of_the_trace)

    subclass_leaves = [leaf if isinstance(leaf, SubclassTensorProxy) else None for leaf in leaves]
    found = found_for(subclass_leaves)
    if found is None:
        return None
    # a view of an input is made only from the caller's object: one the computation takes whole
    viewed_inputs = [base for _position, base, _proxy in found[0] if id(base) in inputs]
    whole = {id(p) for p, _path in subclass_arguments_passed_whole(
        replace(trace, output=(trace.output, tuple(viewed_inputs))), subclass_inputs)}
    refused = {position for position, base, _proxy in found[0]
               if id(base) in inputs and id(base) not in whole}
    if refused:
        found = found_for([None if k in refused else leaf for k, leaf in enumerate(subclass_leaves)])
        if found is None:
            return None
    candidates = [None if k in refused else leaf for k, leaf in enumerate(subclass_leaves)]
    viewed = {position for position, _base, _proxy in found[0]}
    kept: list[int] = []
    for position, leaf in enumerate(leaves):
        if isinstance(leaf, SubclassTensorProxy) and position not in viewed \
                and not any(leaf is leaves[k] for k in kept):
            kept.append(position)
    # as the grad transform's: bases that are inputs become extra outputs too (the roots are outputs)
    views = plan(*found, replace(trace, args=[]), candidates, [], [leaves[k] for k in kept])
    if views.numbers:  # Note [View calls of symbolic sizes] (view_outputs.py): returned after the bases
        views = numbers_taken(views, views.numbers, views.numbers, len(kept) + len(views.hidden))
    extras = (*views.hidden, *views.numbers)
    return replace(trace, output=(trace.output, extras)), SubclassViews(views, tuple(kept))


def _a_number_of_the_trace(number: Any) -> bool:
    """A view call's number the flat trace can return: a number proxy (a SymInt of a shadow's sizes
    is no value of the trace)."""
    return isinstance(number, NumberProxy)


def _itself(value: Any) -> Any:
    return value
