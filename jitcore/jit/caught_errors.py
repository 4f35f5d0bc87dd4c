"""Ops whose errors depend on tensor values, called inside ``try`` blocks and ``with`` blocks.

Invariants: a call of an op listed in ``_VALUE_ERRORS`` (an index out of range, a singular matrix, a
negative probability: errors that only the values decide) made while an interpreted frame of the
program's own code (not torch's, jitcore's or the standard library's) is inside a ``try`` block whose
``except`` clause may catch the error and carry on, or a ``with`` block whose own exit may suppress it,
is refused (JC-T001: the call runs eagerly, Note [Errors the values decide, inside a try block]). Where
only handlers that raise again, or library code's handlers, may catch it, the call is recorded and the
entry runs eagerly on a call whose computation raises (Note [Handlers a raising computation skips]).
Such ops elsewhere are recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import dis
import enum
import types
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from jitcore.errors import JitcoreError, UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.interpreter.frame import Frame
from jitcore.interpreter.generators import generator_frame
from jitcore.interpreter.instructions import decode
from jitcore.ir import Proxy, tree_any
from jitcore.jit.code_kinds import is_library_file
from jitcore.proxies.number import NumberProxy

__all__ = ["raises_on_values", "refuse_caught_read_error", "refuse_caught_value_errors"]


class Catching(enum.IntEnum):
    """What the handlers around a call may do with an error its values decide, weakest first."""

    NONE = 0  # none may catch it: the computation's error is eager's
    RERUN = 1  # caught only to raise again, or by library code: a call whose computation raises runs eagerly
    REFUSE = 2  # the program's own clause or exit may catch it and carry on: the call runs eagerly


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
# re-raises an IndexError with its own message; counting it made every PyG model run eagerly: such a call
# is recorded, Note [Handlers a raising computation skips]). The same op outside such a block is
# recorded: its error, if any, propagates out of the call as eager's does. A ``with`` block counts as
# such a clause where its exit may suppress the error: ``contextlib.suppress`` of a class that catches
# it, a ``@contextmanager`` of the program whose generator has an ``except`` clause around its ``yield``
# that may catch it, a program's ``__exit__`` that may return a true value, a ``contextlib.ExitStack``
# holding such an exit (pushed or entered into it before the call; a ``callback()``'s wrapper returns
# None). A call that raised while run on the values it reads (``narrow`` with a tensor start,
# ``ctc_loss``'s lengths, ``sparse_coo_tensor``'s invariants: jit/value_reads.py) inside such a block is
# refused too: the handler it reached would be traced with no check of those values, and later calls with
# values that do not raise got the handler's result. The refusal itself passes a bare ``except:`` and a
# ``with`` exit (interpreter/opcodes/exceptions.py, Note [Refusals pass bare excepts]). Not refused: the
# handlers of torch and the standard library (``nn.Module._call_impl`` wraps every forward with hooks in
# one that re-raises; counting them made every model with a hook run eagerly: Note [Handlers a raising
# computation skips]) and ``finally`` clauses (transformers wraps model forwards in ``try: ...
# finally:`` to reset its own state); where the computation then raises, the call runs eagerly for the
# ``finally`` bodies' effects (Note [Effects of a raising call], jit/raising_calls.py).

# Note [Handlers a raising computation skips]
# Two kinds of handler were passed over by the rule above, and the computation's error then left the call
# where eager's did not: the program's clause that catches the error only to raise another
# (``except IndexError as e: raise ValueError(...) from e``: jitted raised IndexError, eager ValueError;
# an outer ``except ValueError:`` around it returned eagerly and raised jitted), and a clause or exit of
# torch's or the standard library's code that catches it and carries on (``with self.assertRaises(
# IndexError):``, a ``@contextmanager`` of the standard library with an ``except`` clause). Refusing them
# would run every model with a forward hook eagerly (``nn.Module._call_impl``), so such a call is recorded
# as before, and the pass marks its entry (``Catching.RERUN``, ``TracedProgram.reruns_on_raise``): a call
# whose computation raises runs eagerly then (jit/raising_calls.py, as for an entry with Python effects),
# with eager's exception or eager's result; a call that returns pays nothing. A pass so marked that the
# program's exception stops runs the call eagerly too (the handler the pass took may not be eager's:
# ``assertRaises`` of an index that only the values put out of range), as one that made effects does
# (Note [A program that raises], jit/eager_entries.py). Library clauses that only raise again
# (``_call_impl``'s) are not counted: their error is the op's own. A ``@contextmanager`` generator's
# ``except`` clauses around the ``yield`` it is suspended at count by the classes they name, as a ``try``
# block's do: ``except KeyError:`` there catches none of these errors, and the call is recorded (it was
# refused for any clause). Left as before: an entry whose computation writes an input through a view or
# ``.data`` cannot be run again (Note [A raise before the computation writes an input]): it raises the
# op's error.

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


def raises_on_values(symbol: Any, args: tuple) -> bool:
    """Whether a call of ``symbol`` (a torch-level one) on ``args`` may raise an error that only the
    values decide (``_VALUE_ERRORS``, an index by an integer tensor or a number read per call)."""
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


@dataclasses.dataclass(frozen=True, slots=True)
class _Names:
    """Where an ``except`` clause's class names are looked up, as a frame's are: a generator function's."""

    globals: dict
    builtins: Any
    locals: dict


def _catches(frame: Frame | _Names, instructions: list, target: int) -> Catching:
    """Whether the handler at ``target`` is an ``except`` clause (bare, typed or ``except*``) that may catch
    an error the listed ops raise on values (``_RAISED_ON_VALUES``; a class it cannot name: it may):
    ``REFUSE`` where it may carry on, ``RERUN`` where every path through it raises again."""
    start = target + 1
    for _ in range(_CLAUSES):  # a clause that cannot catch it: the next one (a bare one last)
        following = instructions[start:start + 11]
        if following and following[0].opname == "POP_TOP":  # a bare ``except:``
            return Catching.RERUN if _always_raises(instructions, start + 1) else Catching.REFUSE
        loaded: list = []
        for offset, inst in enumerate(following):
            if inst.opname in ("CHECK_EXC_MATCH", "CHECK_EG_MATCH"):  # then the jump to the next clause
                if _may_catch(loaded[-1] if loaded else _UNKNOWN):
                    body = start + offset + 2
                    return Catching.RERUN if _always_raises(instructions, body) else Catching.REFUSE
                jump = instructions[start + offset + 1] if start + offset + 1 < len(instructions) else None
                if inst.opname == "CHECK_EG_MATCH" or jump is None or "IF_FALSE" not in jump.opname \
                        or not isinstance(jump.argval, int) or jump.argval <= start:
                    return Catching.NONE
                start = jump.argval
                break
            if inst.opname not in _CLASS_LOADS:
                return Catching.NONE
            _load(frame, inst, loaded)
        else:
            return Catching.NONE
    return Catching.NONE


# Note [The clauses after one that cannot catch]: ``except KeyError: ... except: ...`` (unittest's
# ``testPartExecutor``: ``except KeyboardInterrupt``, ``except SkipTest``, then a bare ``except:``) is
# looked at clause by clause: only the first was, so a singular ``torch.linalg.inv`` there was recorded
# and the computation's LinAlgError reached the caller where eagerly the bare clause caught it
# (tests/jit/test_jit_caught_errors.py ``bare_except_after_typed``). A clause that cannot catch the error
# jumps to the next one when its class check misses; the walk follows that jump.
_CLAUSES = 32


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


def _load(frame: Frame | _Names, inst: Any, loaded: list) -> None:
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


def _suppresses(frame: Frame, instructions: list, entry: Any) -> Catching:
    """Whether the handler of ``entry`` is a ``with`` block's exit whose ``__exit__`` may suppress an error
    the listed ops raise on values (``contextlib.suppress(IndexError)``, a context manager whose
    ``__exit__`` may return a true value, or whose generator has an ``except`` clause that may catch it
    around its ``yield``, or an ``ExitStack`` holding one of these): ``REFUSE`` for the program's own,
    ``RERUN`` for library code's or a generator's clause that raises again (Note [Handlers a raising
    computation skips])."""
    if entry.target + 1 >= len(instructions) or instructions[entry.target + 1].opname != "WITH_EXCEPT_START":
        return Catching.NONE
    stack = frame.stack
    if not 0 < entry.depth <= len(stack):
        return Catching.NONE
    return _exit_suppresses(stack[entry.depth - 1])  # under the handler's lasti and exceptions


def _exit_suppresses(exit_: Any) -> Catching:
    """What an ``__exit__`` (or an ``ExitStack`` callback taking its arguments) may do with an error the
    listed ops raise on values."""
    manager = getattr(exit_, "__self__", None)
    if isinstance(manager, contextlib.ExitStack):  # those pushed so far; a ``callback()``'s returns None
        callbacks = getattr(manager, "_exit_callbacks", None)
        if callbacks is None:
            return Catching.REFUSE
        return max((_exit_suppresses(callback) for _, callback in callbacks
                    if not hasattr(callback, "__wrapped__")), default=Catching.NONE)
    if isinstance(manager, contextlib.suppress):
        return Catching.REFUSE if _may_catch(getattr(manager, "_exceptions", _UNKNOWN)) else Catching.NONE
    if isinstance(manager, contextlib._GeneratorContextManager):  # noqa: SLF001 - @contextmanager's
        return _generator_catching(getattr(manager, "gen", None))
    code = getattr(getattr(exit_, "__func__", exit_), "__code__", None)
    if code is None or not _may_return_true(code):
        return Catching.NONE
    return _owned(Catching.REFUSE, code)


def _owned(catching: Catching, code: types.CodeType) -> Catching:
    """``catching`` of a handler in ``code``: library code's that may carry on counts as ``RERUN``, library
    code's that raises again not at all (Note [Handlers a raising computation skips])."""
    if not is_library_file(code.co_filename):
        return catching
    return Catching.RERUN if catching is Catching.REFUSE else Catching.NONE


def _generator_catching(gen: Any) -> Catching:
    """What a ``@contextmanager``'s generator ``gen``, suspended at its ``yield``, may do with an error
    thrown in there: its handlers covering that ``yield`` (an interpreted generator's frame, with the
    ``with`` blocks it is inside), or, for a native one, the ``except`` clauses covering any ``yield``."""
    frame = generator_frame(gen)
    if frame is not None:
        return _in_try_block(frame)
    code = getattr(gen, "gi_code", None)
    if not isinstance(code, types.CodeType):
        return Catching.NONE
    native = getattr(gen, "gi_frame", None)
    return _owned(_catching_around_yields(code, getattr(native, "f_globals", None)), code)


def _catching_around_yields(code: types.CodeType, namespace: Any) -> Catching:
    """The strongest of the ``except`` clauses that cover a ``yield`` of the generator ``code`` (their
    names looked up in the globals ``namespace``; an unknown name may catch)."""
    namespace = namespace if isinstance(namespace, dict) else {}
    names = _Names(namespace, namespace.get("__builtins__", {}), {})
    info = decode(code)
    instructions, found = info.instructions, Catching.NONE
    for inst in instructions:
        if inst.opname != "YIELD_VALUE":
            continue
        entry = info.handler_for(inst.index)
        for _ in range(64):
            if entry is None or found is Catching.REFUSE:
                break
            if instructions[entry.target].opname == "PUSH_EXC_INFO":
                found = max(found, _catches(names, instructions, entry.target))
            entry = info.handler_for(entry.target)
    return found


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


def _in_try_block(frame: Frame) -> Catching:
    """What the handlers covering the frame's current instruction, innermost first (a handler's own code is
    covered by the next one out), may do with the error: the strongest of their ``except`` clauses and
    ``with`` exits (Notes [Errors the values decide, inside a try block], [Handlers a raising computation
    skips])."""
    instructions, info = frame.instructions, frame.info
    entry = info.handler_for(frame.instruction.index)
    found = Catching.NONE
    for _ in range(64):
        if entry is None or found is Catching.REFUSE:
            return found
        if instructions[entry.target].opname == "PUSH_EXC_INFO":
            clause = _owned(_catches(frame, instructions, entry.target), frame.code)
            found = max(found, clause, _suppresses(frame, instructions, entry))
        entry = info.handler_for(entry.target)  # a finally, a with block's exit, a cleanup: the next out
    return found


def refuse_caught_value_errors(symbol: Any, args: tuple) -> bool:
    """Refuse a call of an op whose errors the values decide inside the program's ``try`` block
    (Note [Errors the values decide, inside a try block]).

    Returns:
        Whether handlers that a raising computation would skip may catch its error: the entry must run
        eagerly on a call whose computation raises (Note [Handlers a raising computation skips]).

    Raises:
        UnsupportedOperationError: the program's own handler may catch the error and carry on."""
    if symbol.langctx != "torch" or not raises_on_values(symbol, args):
        return False
    return _refuse_in_try_block(symbol) is Catching.RERUN


def _refuse_in_try_block(symbol: Any) -> Catching:
    run = current_run()
    if run is None:
        return Catching.NONE
    found = Catching.NONE
    for frame in reversed(run.frames):
        catching = _in_try_block(frame)
        if catching is Catching.REFUSE and is_library_file(frame.code.co_filename):
            catching = Catching.RERUN  # library code's handlers are never refused (Note [Handlers a ...])
        found = max(found, catching)
        if found is Catching.REFUSE:
            where = frame.position()
            raise UnsupportedOperationError(
                f"{symbol.id} is called inside a try block ({where}): its error depends on the tensors' "
                "values, raised when the computation runs, where the block's except or finally clause "
                "cannot catch it",
                hints=("call the op outside the try block, or check its inputs (torch.linalg.inv_ex, "
                       "a bounds check) instead of catching its error",),
            )
    return found


def refuse_caught_read_error(symbol: Any, error: BaseException) -> None:
    """Refuse a call that raised ``error`` while run on the values it reads (a tensor start of
    ``narrow``, ``ctc_loss``'s lengths, ``sparse_coo_tensor``'s invariants) inside the program's
    ``try`` block: its handler would be traced with no check of those values (Note [Errors the values
    decide, inside a try block])."""
    if isinstance(error, JitcoreError) or symbol.langctx != "torch":
        return
    _refuse_in_try_block(symbol)
