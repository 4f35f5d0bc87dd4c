"""Ops whose errors depend on tensor values, called inside the program's own ``try`` blocks.

Invariant: a call of an op listed in ``_VALUE_ERRORS`` (an index out of range, a singular matrix, a
negative probability: errors that only the values decide) made while an interpreted frame of the
program's own code (not torch's, jitcore's or the standard library's) is inside a ``try`` block with an
``except`` clause is refused (JC-T001: the call runs eagerly, Note [Errors the values decide, inside a
try block]). Such ops elsewhere are recorded.
"""

from __future__ import annotations

import contextlib
import dis
import types
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from jitcore.errors import JitcoreError, UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.interpreter.frame import Frame
from jitcore.interpreter.tracebacks import DRIVEN_CODES
from jitcore.ir import Proxy, tree_any
from jitcore.jit.code_kinds import is_library_file
from jitcore.proxies.number import NumberProxy

__all__ = ["refuse_caught_read_error", "refuse_caught_value_errors"]


# Note [Errors the values decide, inside a try block]
# The computation runs after tracing, outside the interpreter: an op that raises because of its
# inputs' values (``torch.linalg.inv`` of a singular matrix, ``x[i]`` or ``torch.gather`` with an
# index out of range, ``torch.multinomial`` of negative probabilities) raises from the computation,
# where none of the program's handlers is. ``try: y = torch.linalg.inv(a) except LinAlgError: y = ...``
# returned eager's fallback eagerly and raised jitted; a ``finally`` clause around it did not run.
# Shapes and dtypes are known while tracing, so errors they decide are raised there, where the
# interpreter routes them to the program's handlers; only errors the values decide are not. So a call
# of an op that raises on values, made inside a ``try`` block with an ``except`` clause (its handler
# enters by PUSH_EXC_INFO and matches with CHECK_EXC_MATCH, or is a bare ``except:``; a ``finally`` or
# ``with`` block between the call and the clause is looked through) in a frame of the program's own
# code, is refused and the call runs eagerly, unless the clause names classes (globals, builtins and
# their attributes) none of which catches such an error (``except NotImplementedError:``, torchao's NF4
# around its table's ops), or whose every path raises again (torch_geometric's ``_index_select_safe``
# re-raises an IndexError with its own message: the call raises either way, only the message differs;
# counting it made every PyG model run eagerly). The same op outside such a block is recorded: its error,
# if any, propagates out of the call as eager's does. A ``with`` block counts as such a clause where its
# exit may suppress the error: ``contextlib.suppress`` of a class that catches it, a ``@contextmanager``
# of the program whose generator has an ``except`` clause, a program's ``__exit__`` that may return a
# true value, a ``contextlib.ExitStack`` holding such an exit (pushed or entered into it before the call;
# a ``callback()``'s wrapper returns None). A call that raised while run on the values it reads
# (``narrow`` with a tensor start, ``ctc_loss``'s lengths, ``sparse_coo_tensor``'s invariants:
# jit/value_reads.py) inside such a block is refused too: the handler it reached would be traced with no
# check of those values, and later calls with values that do not raise got the handler's result. The
# refusal itself passes a bare ``except:`` and a ``with`` exit (interpreter/opcodes/exceptions.py, Note
# [Refusals pass bare excepts]). Not detected: the ``except`` clauses of torch and the standard library
# (``nn.Module._call_impl`` wraps every forward with hooks in one that re-raises; counting them made
# every model with a hook run eagerly) and ``finally`` clauses (transformers wraps model forwards in
# ``try: ... finally:`` to reset its own state); where the computation then raises, the call runs
# eagerly for the ``finally`` bodies' effects (Note [Effects of a raising call], jit/raising_calls.py).

# short names (in-place forms without their trailing ``_``) of torch-level symbols that raise on values
_VALUE_ERRORS = frozenset({
    # linalg: singular or not positive-definite input, or no convergence
    "inv", "inverse", "inv_ex", "cholesky", "cholesky_ex", "solve", "solve_ex", "lu_factor",
    "lu_factor_ex", "ldl_factor", "ldl_factor_ex", "tensorinv", "tensorsolve", "matrix_power", "eigh",
    "eigvalsh", "eig", "eigvals", "svd", "svdvals", "lstsq", "cholesky_inverse",
    # an index out of range
    "gather", "scatter", "scatter_add", "scatter_reduce", "index_select", "index_add", "index_copy",
    "index_fill", "index_put", "index_reduce", "take", "take_along_dim", "put", "embedding",
    "embedding_bag", "one_hot", "nll_loss", "cross_entropy", "multi_margin_loss",
    "multilabel_margin_loss",
    # other values: probabilities, counts, asserts
    "multinomial", "bernoulli", "binomial", "poisson", "normal", "bincount", "repeat_interleave",
    "binary_cross_entropy", "_assert_async", "_assert_scalar", "kl_div",
    # a sorter or unpooling index out of range, a mask with more elements set than the source has,
    # lengths that do not sum to the size, a histogram range that is not finite
    "searchsorted", "max_unpool1d", "max_unpool2d", "max_unpool3d", "masked_scatter", "segment_reduce",
    "histc", "histogram",
})
_INDEXING = frozenset({"__getitem__", "__setitem__"})


def _integer_tensor(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return isinstance(value, Proxy) and isinstance(dtype, torch.dtype) and not dtype.is_floating_point \
        and not dtype.is_complex and dtype is not torch.bool


def _value_index(value: Any) -> bool:
    """An index item checked against the sizes only at run time: an integer tensor, or a number the
    computation reads (``x[i.tolist()]``, ``x[int(n)]``; once its value was seen to change, an unbacked
    symbol: Note [Sizes that values decide])."""
    return _integer_tensor(value) or (isinstance(value, NumberProxy) and value.python_type is int) \
        or (isinstance(value, torch.SymInt) and bool(free_unbacked_symbols(value)))


def _raises_on_values(symbol: Any, args: tuple) -> bool:
    name = symbol.name
    if name in _INDEXING:
        return len(args) > 1 and tree_any(args[1], _value_index)
    return name in _VALUE_ERRORS or (name.endswith("_") and name[:-1] in _VALUE_ERRORS)


# what an ``except`` clause loads before CHECK_EXC_MATCH: the class or a tuple of classes
_CLASS_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_ATTR", "LOAD_FAST", "LOAD_DEREF", "LOAD_CONST",
                          "BUILD_TUPLE", "PUSH_NULL", "LOAD_FAST_CHECK", "LOAD_FROM_DICT_OR_GLOBALS"})


# the errors the listed ops raise on values: a clause that catches none of them lets theirs through, as
# the computation's does (torchao's NF4 ``__torch_function__`` catches NotImplementedError around its
# table's ops: counting it made every NF4 model run eagerly)
_RAISED_ON_VALUES = (IndexError, RuntimeError, torch._C._LinAlgError, ValueError)  # noqa: SLF001
_UNKNOWN = object()


def _catches(frame: Frame, instructions: list, target: int) -> bool:
    """The handler at ``target`` is an ``except`` clause (bare, typed or ``except*``) that may catch an
    error the listed ops raise on values (``_RAISED_ON_VALUES``; a class it cannot name: it may)."""
    following = instructions[target + 1:target + 12]
    if following and following[0].opname == "POP_TOP":
        return not _always_raises(instructions, target + 2)  # a bare ``except:``
    loaded: list = []
    for offset, inst in enumerate(following):
        if inst.opname in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH"):  # then the jump to the next clause
            return _may_catch(loaded[-1] if loaded else _UNKNOWN) \
                and not _always_raises(instructions, target + offset + 3)
        if inst.opname not in _CLASS_LOADS:
            return False
        _load(frame, inst, loaded)
    return False


_JUMPS = frozenset(dis.opname[op] for op in {*dis.hasjrel, *dis.hasjabs, *getattr(dis, "hasjump", ())})
_UNCONDITIONAL = frozenset({"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_ABSOLUTE", "JUMP_BACKWARD_NO_INTERRUPT",
                            "JUMP", "JUMP_NO_INTERRUPT"})
_LEAVES = frozenset({"POP_EXCEPT", "RETURN_VALUE", "RETURN_CONST", "YIELD_VALUE"})


def _always_raises(instructions: list, start: int) -> bool:
    """Every path through an ``except`` clause's body from ``start`` raises (its error again, or another:
    torch_geometric's ``_index_select_safe`` re-raises an IndexError with its own message) before it
    leaves the handler (POP_EXCEPT) or returns: the call raises then whether or not the clause runs
    (Note [Errors the values decide, inside a try block]). Exception edges are not followed."""
    seen: set[int] = set()
    pending = [start]
    while pending:
        index = pending.pop()
        if index in seen:
            continue
        if index >= len(instructions) or len(seen) > 4096:
            return False
        seen.add(index)
        inst = instructions[index]
        if inst.opname in ("RAISE_VARARGS", "RERAISE"):
            continue
        if inst.opname in _LEAVES:
            return False
        if inst.opname in _JUMPS:
            if not isinstance(inst.argval, int):
                return False
            pending.append(inst.argval)
            if inst.opname in _UNCONDITIONAL:
                continue
        pending.append(index + 1)
    return True


def _load(frame: Frame, inst: Any, loaded: list) -> None:
    """What ``inst`` of an ``except`` clause pushes, where it names a global, a builtin, an attribute
    of one, a constant or a tuple of them; ``_UNKNOWN`` for a local or a cell."""
    name, op = inst.argval, inst.opname
    if op == "PUSH_NULL":
        return
    if op in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS") and isinstance(name, str):
        builtins = frame.builtins if isinstance(frame.builtins, dict) else vars(frame.builtins)
        scopes = (frame.locals, frame.globals, builtins) if op == "LOAD_NAME" else (frame.globals, builtins)
        loaded.append(next((scope[name] for scope in scopes if isinstance(scope, dict) and name in scope),
                           _UNKNOWN))
    elif op == "LOAD_ATTR" and loaded and isinstance(name, str):
        owner = loaded.pop()
        loaded.append(_UNKNOWN if owner is _UNKNOWN else getattr(owner, name, _UNKNOWN))
    elif op == "LOAD_CONST":
        loaded.append(name)
    elif op == "BUILD_TUPLE" and isinstance(inst.arg, int) and len(loaded) >= inst.arg:
        items = loaded[len(loaded) - inst.arg:]
        del loaded[len(loaded) - inst.arg:]
        loaded.append(_UNKNOWN if any(i is _UNKNOWN for i in items) else tuple(items))
    else:
        loaded.append(_UNKNOWN)


def _may_catch(matched: Any) -> bool:
    """Whether an ``except`` clause matching ``matched`` (a class or a tuple of them) may catch one of
    ``_RAISED_ON_VALUES``."""
    if type(matched) is tuple:
        return any(_may_catch(m) for m in matched)
    if isinstance(matched, type) and issubclass(matched, BaseException):
        return any(issubclass(raised, matched) for raised in _RAISED_ON_VALUES)
    return True


def _suppresses(frame: Frame, instructions: list, entry: Any) -> bool:
    """The handler of ``entry`` is a ``with`` block's exit whose ``__exit__`` may suppress an error the
    listed ops raise on values (``contextlib.suppress(IndexError)``, a program's own context manager
    whose ``__exit__`` may return a true value, or whose generator has an ``except`` clause, or an
    ``ExitStack`` holding one of these)."""
    if entry.target + 1 >= len(instructions) or instructions[entry.target + 1].opname != "WITH_EXCEPT_START":
        return False
    stack = frame.stack
    if not 0 < entry.depth <= len(stack):
        return False
    return _exit_suppresses(stack[entry.depth - 1])  # under the handler's lasti and exceptions


def _exit_suppresses(exit_: Any) -> bool:
    """An ``__exit__`` (or an ``ExitStack`` callback taking its arguments) that may suppress an error the
    listed ops raise on values."""
    manager = getattr(exit_, "__self__", None)
    if isinstance(manager, contextlib.ExitStack):  # those pushed so far; a ``callback()``'s returns None
        callbacks = getattr(manager, "_exit_callbacks", None)
        return callbacks is None or any(_exit_suppresses(callback) for _, callback in callbacks
                                        if not hasattr(callback, "__wrapped__"))
    if isinstance(manager, contextlib.suppress):
        return _may_catch(getattr(manager, "_exceptions", _UNKNOWN))
    if isinstance(manager, contextlib._GeneratorContextManager):  # noqa: SLF001 - @contextmanager's
        code = getattr(getattr(manager, "gen", None), "gi_code", None)
        code = DRIVEN_CODES.get(id(code), (None, code))[1]  # an interpreted generator's driver: its code
        return code is not None and not is_library_file(code.co_filename) and _has_except_clause(code)
    code = getattr(getattr(exit_, "__func__", exit_), "__code__", None)
    return code is not None and not is_library_file(code.co_filename) and _may_return_true(code)


def _has_except_clause(code: types.CodeType) -> bool:
    """``code`` has an ``except`` clause (typed, bare or ``except*``)."""
    instructions = list(dis.get_instructions(code))
    return any(inst.opname in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH")
               or (inst.opname == "PUSH_EXC_INFO" and following.opname == "POP_TOP")
               for inst, following in zip(instructions, instructions[1:]))


def _may_return_true(code: types.CodeType) -> bool:
    """Some ``return`` of ``code`` returns another value than a false constant."""
    instructions = list(dis.get_instructions(code))
    for before, inst in zip([None, *instructions], instructions):
        if inst.opname == "RETURN_CONST" and inst.argval:
            return True
        if inst.opname == "RETURN_VALUE" and not (before is not None and before.opname == "LOAD_CONST"
                                                  and not before.argval):
            return True
    return False


def _in_try_block(frame: Frame) -> bool:
    """The frame's current instruction is inside a ``try`` block with an ``except`` clause: the handlers
    covering it, innermost first (a handler's own code is covered by the next one out), include one."""
    instructions, info = frame.instructions, frame.info
    entry = info.handler_for(frame.instruction.index)
    for _ in range(64):
        if entry is None:
            return False
        if instructions[entry.target].opname == "PUSH_EXC_INFO" \
                and (_catches(frame, instructions, entry.target) or _suppresses(frame, instructions, entry)):
            return True
        entry = info.handler_for(entry.target)  # a finally, a with block's exit, a cleanup: the next out
    return False


def refuse_caught_value_errors(symbol: Any, args: tuple) -> None:
    """Refuse a call of an op whose errors the values decide inside the program's ``try`` block
    (Note [Errors the values decide, inside a try block])."""
    if symbol.langctx != "torch" or not _raises_on_values(symbol, args):
        return
    _refuse_in_try_block(symbol)


def _refuse_in_try_block(symbol: Any) -> None:
    run = current_run()
    if run is None:
        return
    for frame in reversed(run.frames):
        if not is_library_file(frame.code.co_filename) and _in_try_block(frame):
            where = frame.position()
            raise UnsupportedOperationError(
                f"{symbol.id} is called inside a try block ({where}): its error depends on the tensors' "
                "values, raised when the computation runs, where the block's except or finally clause "
                "cannot catch it",
                hints=("call the op outside the try block, or check its inputs (torch.linalg.inv_ex, "
                       "a bounds check) instead of catching its error",),
            )


def refuse_caught_read_error(symbol: Any, error: BaseException) -> None:
    """Refuse a call that raised ``error`` while run on the values it reads (a tensor start of
    ``narrow``, ``ctc_loss``'s lengths, ``sparse_coo_tensor``'s invariants) inside the program's
    ``try`` block: its handler would be traced with no check of those values (Note [Errors the values
    decide, inside a try block])."""
    if isinstance(error, JitcoreError) or symbol.langctx != "torch":
        return
    _refuse_in_try_block(symbol)
