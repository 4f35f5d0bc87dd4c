"""CALL_INTRINSIC_1 / CALL_INTRINSIC_2 (3.12+): small operations CPython moved out of their own opcodes
(``+x``, ``print`` of an interactive expression, ``import *``, the StopIteration-in-generator error, the
async-generator wrap, ``except*``'s re-raise, list-to-tuple) and PEP 695's type-parameter constructors.

Invariants:
- Each intrinsic is an entry of a table indexed by the instruction's argument, in the order of
  ``dis._intrinsic_1_descs`` / ``dis._intrinsic_2_descs``; ``CALL_INTRINSIC_1 k`` pops one operand and pushes
  ``INTRINSIC_1[k](frame, operand)``.
- Intrinsics that run user code (``+x``) or read the frame (``import *``, the generator error) are
  implemented here; the rest (TypeVar, ParamSpec, TypeAliasType, Generic[...] and friends: pure C with
  lazily evaluated bounds) run natively through a two-instruction code object calling CPython's own
  intrinsic (Note [Native intrinsics]), so they behave exactly as CPython's.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import dis
import inspect
from collections.abc import Callable
from types import FunctionType

from jitcore.interpreter.errors import InterpreterError
from jitcore.interpreter.frame import Frame
from jitcore.interpreter.generators import AsyncGenWrapped
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.opcodes.build import print_expr
from jitcore.interpreter.opcodes.exceptions import prep_reraise_star
from jitcore.interpreter.opcodes.load_store import import_star
from jitcore.interpreter.protocols import unary_op
from jitcore.interpreter.registry import handles

__all__ = ["INTRINSIC_1", "INTRINSIC_2"]


def _stopiteration_error(frame: Frame, exc: object) -> object:
    """A StopIteration (StopAsyncIteration in an async generator) leaving a generator becomes a
    RuntimeError caused by it (PEP 479); anything else is returned as is."""
    flags = frame.code.co_flags
    message = None
    if isinstance(exc, StopIteration):
        if flags & inspect.CO_ASYNC_GENERATOR:
            message = "async generator raised StopIteration"
        elif flags & inspect.CO_COROUTINE:
            message = "coroutine raised StopIteration"
        else:
            message = "generator raised StopIteration"
    elif flags & inspect.CO_ASYNC_GENERATOR and isinstance(exc, StopAsyncIteration):
        message = "async generator raised StopAsyncIteration"
    if message is None:
        return exc
    error = RuntimeError(message)
    error.__cause__ = exc
    error.__context__ = exc
    return error


def _print(frame: Frame, value: object) -> None:
    print_expr(frame, value)


def _import_star(frame: Frame, module: object) -> None:
    import_star(frame, module)


def _unary_positive(frame: Frame, value: object) -> object:
    return unary_op(frame.run, "__pos__", value)


def _async_gen_wrap(frame: Frame, value: object) -> AsyncGenWrapped:
    return AsyncGenWrapped(value)


def _list_to_tuple(frame: Frame, value: list) -> tuple:
    return tuple(value)


def _prep_reraise_star(frame: Frame, orig: object, excs: object) -> object:
    return prep_reraise_star(orig, excs)


def _invalid(frame: Frame, *operands: object) -> object:
    raise InterpreterError("invalid intrinsic function", frame.where())


# Note [Native intrinsics]
# CPython's intrinsic functions are not reachable from Python, but a code object can call them: the template
# ``def f(a): return +a`` compiles to ``RESUME; LOAD_FAST a; CALL_INTRINSIC_1 <UNARY_POSITIVE>;
# RETURN_VALUE`` and ``def f(a, b): return a + b`` has at least as many code units as ``RESUME; LOAD_FAST a;
# LOAD_FAST b; CALL_INTRINSIC_2 k; RETURN_VALUE`` (as many on 3.13, whose LOAD_FAST_LOAD_FAST saves the unit
# BINARY_OP's inline cache takes; one more on 3.12, filled by a NOP before the return). Replacing the
# bytecode (same length, so the line table still fits; no instruction of it has inline caches) gives a native
# function per intrinsic, made with the interpreted frame's globals so that TypeVar & co. record the user's
# module.
def _native_intrinsic(arity: int, index: int) -> Callable:
    namespace: dict = {}
    source = "def f(a): return +a\n" if arity == 1 else "def f(a, b): return a + b\n"
    exec(compile(source, "<jitcore intrinsic>", "exec"), namespace)  # noqa: S102 - a fixed template
    template = namespace["f"].__code__
    op = dis.opmap
    body = [op["RESUME"], 0, op["LOAD_FAST"], 0]
    if arity == 2:
        body += [op["LOAD_FAST"], 1]
    body += [op[f"CALL_INTRINSIC_{arity}"], index]
    body += [op["NOP"], 0] * ((len(template.co_code) - len(body)) // 2 - 1) + [op["RETURN_VALUE"], 0]
    if len(body) != len(template.co_code):
        raise InterpreterError(f"intrinsic template of arity {arity} has an unexpected size")
    code = template.replace(co_code=bytes(body), co_stacksize=arity, co_name=f"intrinsic_{arity}_{index}")

    def intrinsic(frame: Frame, *operands: object) -> object:
        # run with the frame's globals: the typing intrinsics read the caller's ``__name__`` (``__module__``)
        return FunctionType(code, frame.globals)(*operands)

    return intrinsic


_INTRINSIC_1_HERE: dict[str, Callable] = {
    "INTRINSIC_1_INVALID": _invalid,
    "INTRINSIC_PRINT": _print,
    "INTRINSIC_IMPORT_STAR": _import_star,
    "INTRINSIC_STOPITERATION_ERROR": _stopiteration_error,
    "INTRINSIC_ASYNC_GEN_WRAP": _async_gen_wrap,
    "INTRINSIC_UNARY_POSITIVE": _unary_positive,
    "INTRINSIC_LIST_TO_TUPLE": _list_to_tuple,
}
_INTRINSIC_2_HERE: dict[str, Callable] = {
    "INTRINSIC_2_INVALID": _invalid,
    "INTRINSIC_PREP_RERAISE_STAR": _prep_reraise_star,
}


def _table(arity: int, descriptions: list[str], here: dict[str, Callable]) -> list[Callable]:
    return [here.get(name) or _native_intrinsic(arity, index) for index, name in enumerate(descriptions)]


INTRINSIC_1: list[Callable] = _table(1, getattr(dis, "_intrinsic_1_descs", []), _INTRINSIC_1_HERE)
INTRINSIC_2: list[Callable] = _table(2, getattr(dis, "_intrinsic_2_descs", []), _INTRINSIC_2_HERE)


@handles("CALL_INTRINSIC_1", since=(3, 12))
def call_intrinsic_1(frame: Frame, inst: Instruction) -> None:
    """TOS = intrinsic[inst.arg](TOS)."""
    frame.stack[-1] = INTRINSIC_1[inst.arg](frame, frame.stack[-1])


@handles("CALL_INTRINSIC_2", since=(3, 12))
def call_intrinsic_2(frame: Frame, inst: Instruction) -> None:
    """TOS = intrinsic[inst.arg](TOS1, TOS)."""
    stack = frame.stack
    second = stack.pop()
    stack[-1] = INTRINSIC_2[inst.arg](frame, stack[-1], second)
