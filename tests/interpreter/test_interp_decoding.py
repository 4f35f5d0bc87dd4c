"""Decoding a code object into Instructions (jitcore/interpreter/instructions.py).

Note [Decoding 3.11 bytecode without dis]: on 3.11 the fields of each instruction are read from
``co_code`` in one pass instead of through ``dis.get_instructions``; they must be dis's, field by
field, for every code object (nested code included) of several large modules.
"""

from __future__ import annotations

import collections
import dis
import importlib
import sys
import types

import pytest

from jitcore.interpreter import instructions

_MODULES = ("dis", "inspect", "collections", "typing", "dataclasses", "asyncio.base_events", "json.decoder",
            "email.message", "torch.nn.functional", "torch._tensor", "torch.nn.modules.module",
            "jitcore.interpreter.opcodes.calls", "jitcore.jit.api")


def _code_objects() -> list[types.CodeType]:
    found: list[types.CodeType] = []
    seen: set[int] = set()

    def visit(code: types.CodeType) -> None:
        if id(code) in seen:
            return
        seen.add(id(code))
        found.append(code)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                visit(const)

    for name in _MODULES:
        module = importlib.import_module(name)
        source = module.__spec__.loader.get_code(module.__name__)  # the module's own code, every nested code
        visit(source)
    return found


def _programs() -> list[types.CodeType]:
    """Code that exercises the rare arguments: EXTENDED_ARG (signed), FORMAT_VALUE, comparisons, cells,
    keyword names, backward jumps."""
    big = "def f(x):\n" + "".join(f"    v{i} = x + {i}\n" for i in range(300)) + "    return v299\n"
    text = '''
def g(a, *args, k=1, **kw):
    c = 0
    def inner():
        return c + a
    for i in range(10):
        while a < i:
            a += 1
    s = f"{a!r:>10} {k!s} {c!a} {a:{k}}"
    return inner, s, a == k, a is not k, a in kw, dict(x=1, y=2), [i for i in args if i]
'''
    codes = [compile(src, "<decoding>", "exec") for src in (big, text)]
    # fewer positions than code units (CPython's test_code injects a COPY_FREE_VARS before co_code):
    # dis gives None past their end
    codes.append(codes[1].replace(co_linetable=b""))
    codes.append(codes[1].replace(co_code=bytes([dis.opmap["NOP"], 0]) + codes[1].co_code))
    return codes


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the decoder without dis is 3.11's")
def test_decoding_without_dis_gives_dis_fields_for_every_code_object() -> None:
    codes = _code_objects() + _programs()
    stack = list(codes)
    while stack:  # the programs' nested code too
        code = stack.pop()
        for const in code.co_consts:
            if isinstance(const, types.CodeType) and const not in codes:
                codes.append(const)
                stack.append(const)
    counts: collections.Counter[str] = collections.Counter()
    for code in codes:
        fast, slow = instructions._raw_311(code), instructions._raw_by_dis(code)  # noqa: SLF001
        assert len(fast) == len(slow), code
        for a, b in zip(fast, slow, strict=True):
            assert a[:4] == b[:4] and a[5:] == b[5:], (code, a, b)
            assert a[4] is b[4] or a[4] == b[4] and type(a[4]) is type(b[4]), (code, a, b)
            counts[a[2]] += 1
    assert len(codes) > 1000, len(codes)
    for opname in ("EXTENDED_ARG", "FORMAT_VALUE", "COMPARE_OP", "KW_NAMES", "LOAD_DEREF", "JUMP_BACKWARD",
                   "LOAD_GLOBAL", "LOAD_CONST", "POP_JUMP_FORWARD_IF_FALSE", "FOR_ITER", "BINARY_OP"):
        assert counts[opname] > 0, opname


def test_decoded_instructions_are_the_same_either_way(monkeypatch: pytest.MonkeyPatch) -> None:
    codes = _code_objects()[:400]
    fast = [instructions._decode_instructions(c) for c in codes]  # noqa: SLF001
    monkeypatch.setattr(instructions, "_raw", instructions._raw_by_dis)  # noqa: SLF001
    slow = [instructions._decode_instructions(c) for c in codes]  # noqa: SLF001
    assert fast == slow
    assert dis  # the stdlib module imported above is not the interpreter's private copy
