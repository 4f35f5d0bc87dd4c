"""torch's control-flow operators (``torch.cond``, ``while_loop``, ``map``) and ``torch.compile`` called
inside a jitted function.

Eagerly each of these compiles its functions with Dynamo (``torch.compile(..., backend="eager")``)
before it runs them, which a traced function cannot do (Dynamo writes the process environment and
cannot trace jitcore's values): a call reaching one ran eagerly (JC-J002). Their meaning is plain
Python control flow, and that is what tracing runs, on the interpreter:
- ``torch.cond(pred, true_fn, false_fn, operands)``: ``bool(pred)`` (a value read when ``pred`` is a
  tensor: checked on every call, the other branch is a trace of its own, jit/value_reads) and the
  branch it picks, called with the operands;
- ``while_loop(cond_fn, body_fn, carried)``: the loop, each test a value read (one trace per trip
  count);
- ``map(f, xs, *args)``: ``f`` on each slice of ``xs`` along its first dimension, the results stacked;
- ``torch.compile(fn)``: ``fn`` itself, interpreted (jitcore traces it with the rest of the program,
  as it does with a function compiled outside, ``compiled_original`` in jit/code_kinds.py).
``flex_attention``'s higher-order operator runs its dense implementation (``sdpa_dense``, what eager
runs on CPU tensors), interpreted. Any other higher-order operator reached with the program's values
(``scan``) makes the call an eager entry (JC-J002): torch's operators dispatch on the values'
types, and a traced tensor is not one they have a rule for.
Invariant: the lookasides run the user's functions through ``current_run().call``, so the functions'
reads are guarded and their effects recorded like the program's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optree
import torch

from jitcore.errors import EagerOnlyValue
from jitcore.interpreter import current_run

__all__ = ["control_flow_lookasides", "higher_order_operator"]


def control_flow_lookasides() -> dict[Any, Callable[..., Any]]:
    import torch._higher_order_ops as hops

    found: dict[Any, Callable[..., Any]] = {torch.cond: _cond, torch.compile: _compile}
    if hasattr(hops, "while_loop"):
        found[hops.while_loop] = _while_loop
    if hasattr(hops, "map"):
        found[hops.map] = _map
    return found


def higher_order_operator(fn: Any) -> Callable[..., Any] | None:
    """What a call of ``fn`` runs when ``fn`` is a higher-order operator (None: it is not one)."""
    # the type alone: a user's __getattribute__ would be asked for __class__ (Note [Asking a callable its
    # kind], dispatch/resolver.py)
    if not issubclass(type(fn), torch._ops.HigherOrderOperator):  # noqa: SLF001
        return None
    dense = _dense_implementation(fn)
    if dense is not None:
        return lambda *args, **kwargs: current_run().call(dense, *args, **kwargs)

    def runs_eagerly(*args: Any, **kwargs: Any) -> Any:
        raise EagerOnlyValue(f"torch's higher-order operator {fn.name()!r} is not traced: the call runs "
                             "eagerly")

    return runs_eagerly


def _dense_implementation(fn: Any) -> Callable[..., Any] | None:
    """The implementation eager runs for a higher-order operator on plain CPU tensors, written with
    torch operations, for the operators whose one is: ``flex_attention``'s ``sdpa_dense`` (its
    ``score_mod`` and ``mask_mod`` under vmap, which is traced: jit/function_transforms.py)."""
    import importlib

    flex = importlib.import_module("torch._higher_order_ops.flex_attention")
    if fn is flex.flex_attention:
        return flex.sdpa_dense
    return None


def _cond(pred: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any], operands: Any = ()) -> Any:
    if not isinstance(operands, (tuple, list)):
        raise RuntimeError("Expect operands to be a tuple of possibly nested dict/list/tuple that only "
                           f"consists of tensor leaves, but got {operands}.")
    if isinstance(pred, torch.Tensor) and pred.numel() != 1:
        raise RuntimeError(f"Expected pred to be bool or single-element tensor, but got {pred}.")
    run = current_run()
    branch = true_fn if run.call(bool, pred) else false_fn
    return run.call(branch, *operands)


def _while_loop(cond_fn: Callable[..., Any], body_fn: Callable[..., Any], carried_inputs: Any) -> Any:
    if not isinstance(carried_inputs, (tuple, list)):
        raise RuntimeError(f"carried_inputs must be a tuple or list, got {type(carried_inputs)}")
    run = current_run()
    carried = tuple(carried_inputs)
    while run.call(bool, run.call(cond_fn, *carried)):
        out = run.call(body_fn, *carried)
        carried = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return carried


def _map(f: Callable[..., Any], xs: Any, *args: Any) -> Any:
    run = current_run()
    leaves, spec = optree.tree_flatten(xs, none_is_leaf=True)
    count = leaves[0].shape[0]
    results = [run.call(f, optree.tree_unflatten(spec, [leaf[i] for leaf in leaves]), *args)
               for i in range(count)]
    out_leaves = [optree.tree_leaves(r, none_is_leaf=True) for r in results]
    out_spec = optree.tree_structure(results[0], none_is_leaf=True)
    stacked = [run.call(torch.stack, [r[j] for r in out_leaves]) for j in range(len(out_leaves[0]))]
    return optree.tree_unflatten(out_spec, stacked)


def _compile(model: Any = None, **options: Any) -> Any:
    if model is None:
        return lambda fn: fn
    return model
