"""What value reads ask of a call's arguments and of the records it made: whether a tree holds a kind
of value, whether its tensors need grad, which storages records write; and running a call natively or on
copies of what it writes (helpers of jit/value_reads.py).

Invariant: nothing here records or binds; each function only reads the values it is given (``unwritten``
copies the tensors a call may write, so running the call leaves the caller's untouched).
"""

from __future__ import annotations

from typing import Any

import optree
import torch

from jitcore.errors import DataDependentError
from jitcore.ir import BoundSymbol, Symbol
from jitcore.jit.probe import may_write, written_arguments
from jitcore.proxies import TensorProxy

_AUTOGRAD = torch._C.DispatchKey.AutogradFunctionality

__all__ = ["holds", "natively", "needs_grad", "storage", "storage_or_none", "unwritten", "writes_outside"]


# Note [A value-shaped call that writes its arguments]
# Adam with a tensor learning rate steps each parameter with ``param.addcdiv_(m, d, value=-lr / c)``,
# ``value`` a 0-dim tensor that torch reads as a Scalar: the fake kernel cannot run, so the call runs
# on the values to learn its outputs. Run so on the caller's parameter, it stepped the model while
# tracing, and the computation stepped it again (the first call's loss and weights were wrong). A call
# that may write its arguments runs on copies of them here; the probe runs its record later with its
# own copy on write, as it runs every record.
def unwritten(symbol: Symbol, args: tuple, kwargs: dict, values: tuple[tuple, dict]) -> tuple[tuple, dict]:
    """``values`` (the real arguments of a call of ``symbol``), with copies of the plain tensors the
    call may write."""
    if not may_write(BoundSymbol(symbol, args, kwargs, None)):
        return values
    plain = (torch.Tensor, torch.nn.Parameter)
    return optree.tree_map(lambda v: v.clone() if type(v) in plain else v, values, none_is_leaf=True)


# Note [Composites that read values under grad]
# A torch function whose C++ composite reads values inside (``torch.cov`` checks its weights with
# ``torch.equal``, ``gaussian_nll_loss`` checks ``var < 0`` with ``item``) fails on shadows as a
# whole. Read as a whole on the values, its outputs would carry no derivative. Where that read is
# refused because inputs require grad (``narrow`` and ``tensor_split`` with tensor arguments are
# read as numbers first, and pass), it runs natively instead, with torch functions off: traced
# tensors are tensors, so each aten op of the composite reaches their ``__torch_dispatch__`` and is
# recorded (with its autograd on the shadows, jitcore/langctx/aten.py ``_torch_dispatch``) and
# differentiated on its own, and only the op that reads values becomes a checked read.
# When that fails too (an op whose output shape the values decide must carry a gradient, or C++ that
# reads a traced tensor's data directly), what it recorded is dropped and the original error stands.
def natively(fn: Any, args: tuple, kwargs: dict) -> Any:
    try:
        return fn(*args, **kwargs)
    except DataDependentError:
        return NotImplemented
    except RuntimeError as exc:  # C++ read a traced tensor's data directly (it has none)
        if "data is not allocated yet" in str(exc):
            return NotImplemented
        raise


def writes_outside(records: list[BoundSymbol]) -> bool:
    """Whether one of ``records`` writes a tensor whose storage none of them made."""
    made: set[int] = set()
    for bsym in records:
        if may_write(bsym):
            written = written_arguments(bsym) or [bsym.args[0] if bsym.args else None, bsym.kwargs.get("out")]
            for value in optree.tree_leaves(written, none_is_leaf=True):
                if isinstance(value, TensorProxy) and storage_or_none(value) not in made:
                    return True
        for value in optree.tree_leaves(bsym.output, none_is_leaf=True):
            if isinstance(value, TensorProxy) and not holds(TensorProxy, (bsym.args, bsym.kwargs)) \
                    and (key := storage_or_none(value)) is not None:
                made.add(key)  # a factory (zeros, empty): a fresh storage
    return False


def storage_or_none(proxy: TensorProxy) -> int | None:
    try:
        return storage(proxy)
    except (RuntimeError, NotImplementedError):  # a wrapper subclass: no storage of its own
        return None


# Note [Below autograd nothing needs grad]
# A ``__torch_dispatch__`` runs below autograd: the dispatcher excluded the autograd keys on its way
# there, so the ops a subclass's dispatch calls on its inner tensors record no graph, eagerly, even
# where those tensors require grad (a wrapper made inside the function over ``x`` and ``x * 2``, ``x``
# requiring grad, then indexed by a boolean mask: ``aten.index.Tensor(x, [mask])``'s output does not
# require grad). Such a value-shaped output carries no gradient and is read as any other; counted as
# needing grad, its read was refused and the whole call ran eagerly (JC-J002).
def needs_grad(args: tuple, kwargs: dict) -> bool:
    """Whether a call of these arguments records a graph: grad mode on, autograd not excluded by the
    dispatcher (Note [Below autograd nothing needs grad]), a tensor argument requiring grad."""
    if torch._C._dispatch_tls_is_dispatch_key_excluded(_AUTOGRAD):  # noqa: SLF001 - the Note above
        return False
    return torch.is_grad_enabled() and any(
        isinstance(v, TensorProxy) and v.requires_grad
        for v in optree.tree_leaves((args, kwargs), none_is_leaf=True))


def holds(kind: type, tree: Any) -> bool:
    return any(isinstance(v, kind) for v in optree.tree_leaves(tree, none_is_leaf=True))


def storage(proxy: TensorProxy) -> int:
    return proxy.shadow.untyped_storage()._cdata
