"""torch's pytree helpers run natively over trees the trace made, their callbacks interpreted.

A tensor subclass's ``__torch_dispatch__`` (TwoTensor's, torchao's, most wrappers') takes every op's
arguments apart with ``torch.utils._pytree`` (``tree_map_only``, ``tree_flatten``, ``tree_leaves``,
``tree_unflatten``): interpreted, that code was about two thirds of a TwoTensor program's first call.
Its answer depends only on the tree's structure (the types of its nodes and the registry of node types)
and on the callbacks it is given. When every node is provably what the interpreted code would see, the
walk runs natively and only the callbacks are interpreted (Note [Pytree walks run natively]).

Invariants:
- The native path is taken only when the interpreted one would give the same tree, call the same
  callbacks on the same leaves in the same order, and read no caller's state: each container of the
  tree is an exact ``tuple``/``list``/``dict`` the call made (no caller's object, no argument's
  container) met once (a container shared or in a cycle goes to the interpreter), every dict key is
  a ``str`` or ``int``, and each leaf is a leaf under both its own class
  and the class it stands for (``python_type``: a proxy answers TwoTensor). Anything else (an
  ``is_leaf`` callback, ``rests``, a registered or named-tuple node, a ``functools.partial`` callback)
  is interpreted as before.
- Outside a trace the lookasides are never installed (they are hooks of the jit's run).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch.utils._pytree as pytree

from jitcore.dispatch.lookasides import python_type
from jitcore.interpreter import current_run
from jitcore.interpreter.callbacks import through
from jitcore.interpreter.calls import call, call_function

__all__ = ["pytree_lookasides"]

_NODES = (tuple, list, dict)
_KEYS = (str, int)
# the node functions the native walk relies on: torch's own for the three builtin containers
_OWN_FLATTEN = {tuple: pytree._tuple_flatten, list: pytree._list_flatten, dict: pytree._dict_flatten}  # noqa: SLF001
_SPECS = (pytree.TreeSpec, type(pytree._LEAF_SPEC))  # noqa: SLF001


# Note [Pytree walks run natively]
# Interpreting ``tree_map_only(TwoTensor, lambda x: x.a, args)`` for one op ran ~300 interpreted frames
# (``tree_is_leaf``, ``_get_node_type``, ``is_namedtuple_class``, ``TreeSpec.__post_init__``,
# ``functools.wraps``), four such maps per op. What those frames decide: for each node, whether
# ``type(node)`` (as the program sees it) is a registered node type, and how the registered node's
# torch-written flatten/unflatten functions take it apart. For an exact tuple, list or dict those
# functions only read the container (``list(d)``, ``d.values()``), as C code reading a container would;
# such a read is sound for a container the call made (its contents are the trace's own values) and is
# not for a caller's container (a dict guarded by type only, jit/appends.py, would be read unguarded):
# a caller's container, or an argument's, sends the call to the interpreter. A leaf is a leaf when
# neither its own class nor the class it stands for is a registered node or a tuple subclass (a named
# tuple or structseq is decided by the interpreted code). Then ``tree_flatten``/``tree_unflatten`` run
# natively (the same torch functions, the same TreeSpec), and ``tree_map``/``tree_map_only`` call their
# callback (and ``isinstance`` of ``map_only``) for each leaf, in the order the interpreted walk calls
# them and as it calls them: ``tree_map``'s as ``map`` does (``through``: a builtin without a lookaside
# natively), ``tree_map_only``'s as ``map_only``'s interpreted ``wrapped`` does (the interpreter's
# call). The recorded trace and the source stack of recorded ops are the same: pytree's frames are
# library frames, never in a source stack. What differs: a callback that
# raises has no pytree frames between it and the caller in its traceback; ``functools.wraps`` of
# ``map_only`` is not run (it only reads the callback, a plain function, and builds a discarded wrapper).
def pytree_lookasides(made_here: Callable[[Any], bool]) -> dict[Any, Callable[..., Any]]:
    """Lookasides for torch's pytree helpers; ``made_here(container)``: whether the call made it."""

    def native_tree(tree: Any) -> bool:
        stack, seen = [tree], set()
        while stack:
            node = stack.pop()
            kind = type(node)
            if kind in _NODES:
                if id(node) in seen:  # shared or cyclic (the interpreted walk's RecursionError): interpreted
                    return False
                seen.add(id(node))
                if not made_here(node) or pytree.SUPPORTED_NODES.get(kind) is None or \
                        pytree.SUPPORTED_NODES[kind].flatten_fn is not _OWN_FLATTEN[kind]:
                    return False
                if kind is dict:
                    if any(type(k) not in _KEYS for k in node):
                        return False
                    stack.extend(node.values())
                else:
                    stack.extend(node)
            elif not _leaf_class(kind) or not _leaf_class(python_type(node)):
                return False
        return True

    def native_spec(spec: Any) -> bool:
        stack = [spec]
        while stack:
            node = stack.pop()
            if type(node) not in _SPECS:
                return False
            kind = node.type
            if kind is None:
                continue
            if kind not in _NODES or pytree.SUPPORTED_NODES[kind].unflatten_fn is not _OWN_UNFLATTEN[kind]:
                return False
            if kind is dict and any(type(k) not in _KEYS for k in node._context):  # noqa: SLF001
                return False
            stack.extend(node._children)  # noqa: SLF001
        return True

    def walk(fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (``tree_flatten``, ``tree_leaves``) run natively over a tree the call made."""
        def walked(tree: Any, is_leaf: Any = None) -> Any:
            if is_leaf is None and current_run() is not None and native_tree(tree):
                return fn(tree)
            return _interpreted(fn, tree, is_leaf=is_leaf)

        return walked

    def tree_unflatten(leaves: Any, treespec: Any) -> Any:
        if current_run() is not None and type(leaves) in (list, tuple) and made_here(leaves) \
                and native_spec(treespec):
            return _tree_unflatten(leaves, treespec)
        return _interpreted(_tree_unflatten, leaves, treespec)

    def tree_map(func: Any, tree: Any, *rests: Any, is_leaf: Any = None) -> Any:
        run = current_run()
        if rests or is_leaf is not None or run is None or not native_tree(tree):
            return _interpreted(_tree_map, func, tree, *rests, is_leaf=is_leaf)
        leaves, spec = _tree_flatten(tree)
        each = through(run, func)  # as the interpreted ``map(func, leaves)`` calls it (callbacks.map_)
        return spec.unflatten([each(leaf) for leaf in leaves])

    def tree_map_only(kinds: Any, /, func: Any, tree: Any, is_leaf: Any = None) -> Any:
        run = current_run()
        if is_leaf is not None or run is None or type(func) is not types.FunctionType \
                or not _types(kinds) or not native_tree(tree):
            return _interpreted(_tree_map_only, kinds, func, tree, is_leaf=is_leaf)
        leaves, spec = _tree_flatten(tree)
        return spec.unflatten([call(run, func, (leaf,), None) if call(run, isinstance, (leaf, kinds), None)
                               else leaf for leaf in leaves])

    return {_tree_flatten: walk(_tree_flatten), _tree_leaves: walk(_tree_leaves),
            _tree_unflatten: tree_unflatten, _tree_map: tree_map, _tree_map_only: tree_map_only}


_tree_flatten = pytree.tree_flatten
_tree_leaves = pytree.tree_leaves
_tree_unflatten = pytree.tree_unflatten
_tree_map = pytree.tree_map
_tree_map_only = pytree.tree_map_only
_OWN_UNFLATTEN = {tuple: pytree._tuple_unflatten, list: pytree._list_unflatten,  # noqa: SLF001
                  dict: pytree._dict_unflatten}  # noqa: SLF001


def _leaf_class(kind: type) -> bool:
    """Whether torch's pytree takes an object of class ``kind`` for a leaf without asking the class
    anything but its tuple base (a tuple subclass may be a named tuple or structseq: not decided here)."""
    return kind not in pytree.SUPPORTED_NODES and not issubclass(kind, tuple)


def _types(kinds: Any) -> bool:
    """Whether ``map_only``'s predicate is ``isinstance(x, kinds)`` with classes only."""
    if type(kinds) is tuple:
        return all(isinstance(k, type) for k in kinds)
    return isinstance(kinds, type)


def _interpreted(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn`` run as the program's own code (the interpreter's call of the original function)."""
    run = current_run()
    if run is None:
        return fn(*args, **kwargs)
    return call_function(run, fn, args, kwargs or None)
