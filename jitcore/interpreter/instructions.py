"""Decoding a code object, once, into the Instructions the run loop executes.

Invariants:
- A code object is decoded at most once per process (cache keyed by ``id(code)``; the entry holds the
  code, so the id cannot be reused while cached): decoding costs ~100 us, a call must not pay it.
- Instruction indices are compact (CACHE entries are dropped); jump arguments are decoded to target
  *indices*, so a jump is ``frame.index = inst.argval``.
- The exception table is parsed lazily, only when an exception is raised in that code.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import dataclasses
import inspect
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any

from jitcore.interpreter.private_modules import private_copy

dis = private_copy("dis")  # decoding must not see a program's builtins.len (private_modules.py)

__all__ = ["CODE_INFO", "CodeInfo", "ExceptionEntry", "Instruction", "decode", "dropped_before",
           "raw_instructions"]

_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


@dataclass(frozen=True, slots=True)
class Instruction:
    """One decoded bytecode instruction.

    Attributes:
        opcode: numeric opcode.
        opname: its CPython name.
        arg: the raw (EXTENDED_ARG-folded) argument, or None.
        argval: the resolved argument: constant, name, comparison operator, or jump target *index*.
        offset: byte offset in ``co_code`` (what CPython's ``f_lasti`` reports).
        index: position in ``CodeInfo.instructions``.
        lineno, end_lineno, col, end_col: the source span from ``co_positions`` (any may be None).
        next: for a fused instruction, the second instruction of its run, whose ``next`` is the third
            (Note [Fused instructions]).
        after: ``index + 1``, what the run loop sets ``frame.index`` to when it fetches this instruction
            (precomputed: one attribute load per dispatch instead of an addition).
    """

    opcode: int
    opname: str
    arg: int | None
    argval: object
    offset: int
    index: int
    lineno: int | None
    end_lineno: int | None
    col: int | None
    end_col: int | None
    next: Instruction | None = None
    after: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "after", self.index + 1)


@dataclass(frozen=True, slots=True)
class ExceptionEntry:
    """One row of the exception table, in instruction indices (``start <= i < end``)."""

    start: int
    end: int
    target: int
    depth: int
    lasti: bool


class CodeInfo:
    """Everything the interpreter derives from one code object, computed once."""

    __slots__ = (
        "_exception_table",
        "_handler_at",
        "_index_of",
        "_fused_hooked",
        "binder",
        "code",
        "driver",
        "instructions",
        "local_slots",
        "ncells_free",
        "nlocalsplus",
        "raisers",
        "simple_argcount",
        "stand_ins",
        "plain_fused",
        "unbound_after_args",
        "yield_resumes",
        "_yield_statement_ends",
    )

    def __init__(self, code: CodeType) -> None:
        self.code = code
        self.instructions, self._index_of = _decode_instructions(code)
        # ``fused`` once made (Note [Fused on first use]); the plain runs' loops read it, ``fused`` else
        self.plain_fused: list[Instruction] | None = None
        self._yield_statement_ends: frozenset[int] | None = None
        # where a frame that yielded stops (the index after each YIELD_VALUE): the generator driver tells a
        # yield from a return by it
        self.yield_resumes = frozenset(inst.index + 1 for inst in self.instructions
                                       if inst.opname == "YIELD_VALUE")
        self._fused_hooked: dict[frozenset[int], list[Instruction]] = {}
        # positional-only calls with exactly this many arguments need no binding (-1: always bind). Code that
        # is not CO_OPTIMIZED (module-level code called as ``FunctionType(code, globals)()``) takes the bound
        # path too, which gives it its globals as locals.
        simple = not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | _GENERATOR_FLAGS) \
            and code.co_flags & inspect.CO_OPTIMIZED
        self.simple_argcount = code.co_argcount if simple and not code.co_kwonlyargcount else -1
        self.nlocalsplus = (
            len(code.co_varnames)
            + len([c for c in code.co_cellvars if c not in code.co_varnames])
            + len(code.co_freevars)
        )
        self.ncells_free = len(code.co_freevars)
        from jitcore.interpreter.frame import NULL  # frame.py imports this module

        # what follows the arguments in the fast locals of a call that needs no binding (all unbound)
        self.unbound_after_args = (NULL,) * (self.nlocalsplus - max(self.simple_argcount, 0))
        self._exception_table: tuple[ExceptionEntry, ...] | None = None
        self._handler_at: list[ExceptionEntry | None] | None = None
        self.binder = None
        self.driver = None  # the generator driver of this code, made by generators.make_generator
        self.raisers: dict = {}  # instruction index -> its traceback entries' raiser (tracebacks.py)
        self.stand_ins: dict = {}  # instruction index -> its caller stand-in (tracebacks.caller_stand_in)
        # the names of the fast locals and the indices of the cells among them, once asked (tracebacks.py)
        self.local_slots: tuple[tuple[str, ...], tuple[int, ...]] | None = None

    # Note [Fused on first use]
    # A plain run (no hook sees instructions: ``interpret`` without hooks) executes ``fused``; a jit's
    # run, whose load hooks see some opcodes, executes ``fused_without(hooked)`` and never ``fused``.
    # Fusing every code object both ways when it was decoded was ~2% of a Hugging Face model's first
    # call (the jit's runs fused 93 code objects twice for BERT), so each is made when first asked.
    # The loops of plain runs read ``plain_fused`` (a slot: no call on the hot path) and ask ``fused``
    # only while it is None.
    @property
    def fused(self) -> list[Instruction]:
        """The instructions with the registered runs fused, for a run no hook sees (made on first use)."""
        fused = self.plain_fused
        if fused is None:
            fused = self.plain_fused = _fuse(self.instructions)
        return fused

    @property
    def yield_statement_ends(self) -> frozenset[int]:
        """The indices in ``fused`` of the fused RESUME; POP_TOP of yield statements, which a generator
        resumed with ``fused`` skips (Note [Yield statements] in generators.py)."""
        ends = self._yield_statement_ends
        if ends is None:
            ends = self._yield_statement_ends = frozenset(
                inst.index for inst in self.fused if inst.opname == _YIELD_STATEMENT_END)
        return ends

    def fused_without(self, hooked: frozenset[int]) -> list[Instruction]:
        """The fused instructions for a run whose load hooks must see the opcodes ``hooked``: only
        runs free of them are fused (computed once per code object and set of opcodes)."""
        if not hooked:
            return self.fused
        found = self._fused_hooked.get(hooked)
        if found is None:
            found = self._fused_hooked[hooked] = _fuse(self.instructions, hooked)
        return found

    def index_at(self, offset: int) -> int:
        """The index of the instruction at byte ``offset``, or of the first kept after it where the decoding
        dropped that one (Note [Dropped instructions])."""
        return self._index_of[offset]

    def exception_table(self) -> tuple[ExceptionEntry, ...]:
        """The parsed exception table (parsed on first use)."""
        if self._exception_table is None:
            index_of = self._index_of
            n = len(self.instructions)
            entries = []
            for e in dis._parse_exception_table(self.code):
                end = index_of.get(e.end, n)
                entries.append(ExceptionEntry(index_of[e.start], end, index_of[e.target], e.depth, e.lasti))
            self._exception_table = tuple(entries)
        return self._exception_table

    def handler_for(self, index: int) -> ExceptionEntry | None:
        """The innermost exception-table entry covering instruction ``index``, or None."""
        handlers = self._handler_at
        if handlers is None:  # per instruction, made on the first exception raised in this code
            table = self.exception_table()
            handlers = self._handler_at = [
                next((entry for entry in table if entry.start <= i < entry.end), None)
                for i in range(len(self.instructions))
            ]
        return handlers[index]


_YIELD_STATEMENT_END = "RESUME+POP_TOP"


# Note [Dropped instructions]
# PRECALL, EXTENDED_ARG, NOP and the RESUME at a function's start do nothing in this interpreter (dis
# already folds EXTENDED_ARG into the next argument), so they are not decoded: a jump or exception-table
# offset that names one of them maps to the next instruction kept. RESUME stays: the generator code reads
# its argument to tell a suspended ``yield from``/``await`` from a plain ``yield``.
_DROPPED = frozenset(dis.opmap[name] for name in ("PRECALL", "EXTENDED_ARG", "NOP") if name in dis.opmap)
_RESUME = dis.opmap["RESUME"]
_CACHE = dis.opmap["CACHE"]


# Note [FOR_ITER targets]
# On 3.13 a ``for`` loop ends with ``END_FOR; POP_TOP`` and FOR_ITER's argument names the END_FOR, but an
# exhausted FOR_ITER pops the iterator itself and skips both (``JUMPBY(oparg + 2)``): END_FOR is reached
# only by other jumps. Decoding points FOR_ITER's jump past the two, so the handler stays ``frame.index =
# inst.argval`` on every version. 3.12 ends the loop with one ``END_FOR`` (which pops two) and its exhausted
# FOR_ITER skips it (``JUMPBY(oparg + 1)``). (3.11's FOR_ITER jumps straight past the loop.)
_FOR_ITER = dis.opmap["FOR_ITER"]
_FOR_ITER_SKIP = {(3, 11): 0, (3, 12): 1}.get(sys.version_info[:2], 2)


# what decoding reads of one instruction: (offset, opcode, opname, arg, argval, lineno, end_lineno, col,
# end_col), as ``dis.get_instructions`` gives them
_Raw = tuple[int, int, str, "int | None", Any, "int | None", "int | None", "int | None", "int | None"]


def _raw_by_dis(code: CodeType) -> list[_Raw]:
    out = []
    for ins in dis.get_instructions(code):
        pos = ins.positions
        out.append((ins.offset, ins.opcode, ins.opname, ins.arg, ins.argval,
                    pos.lineno, pos.end_lineno, pos.col_offset, pos.end_col_offset))
    return out


# Note [Decoding 3.11 bytecode without dis]
# ``dis.get_instructions`` makes three passes over a code object (jump labels, line starts, the
# instructions), formats every argument's repr and builds two namedtuples per instruction: about two
# thirds of decoding, and decoding was a quarter of a tiny Llama's first call (0.5 s of about 2 s,
# 100 code objects). On 3.11 the same fields come from one pass over ``co_code`` written after
# CPython 3.11's dis.py (``_unpack_opargs`` and ``_get_instructions_bytes``): inline caches skipped,
# EXTENDED_ARG folded (signed, as dis wraps it), arguments resolved per opcode family (a LOAD_CONST's
# constant, KW_NAMES's ``dis.UNKNOWN``, names with LOAD_GLOBAL's halved index, relative jumps to byte
# offsets, locals and cells, comparison operators, FORMAT_VALUE's pair), positions one per code unit.
# tests/interpreter/test_interp_decoding.py compares it with dis field by field over thousands of code
# objects. Other versions decode with dis.
def _raw_311(code: CodeType) -> list[_Raw]:
    co_code = code.co_code
    names, consts, varname = code.co_names, code.co_consts, code._varname_from_oparg
    positions = list(code.co_positions())
    n_positions = len(positions)
    out = []
    extended_arg = caches = 0
    for offset in range(0, len(co_code), 2):
        if caches:
            caches -= 1
            continue
        op = co_code[offset]
        deop = _DEOP[op]
        caches = _CACHES[deop]
        argval = arg = None
        if deop >= _HAVE_ARGUMENT:
            arg = co_code[offset + 1] | extended_arg
            extended_arg = (arg << 8) if deop == _EXTENDED_ARG else 0
            if extended_arg >= _INT_OVERFLOW:
                extended_arg -= 2 * _INT_OVERFLOW
            family = _FAMILY[deop]
            if family == 0:
                argval = arg
            elif family == 1:  # hasconst
                argval = consts[arg] if deop == _LOAD_CONST else dis.UNKNOWN
            elif family == 2:  # hasname
                argval = names[arg // 2] if deop == _LOAD_GLOBAL else names[arg]
            elif family == 3:  # hasjabs
                argval = arg * 2
            elif family == 4:  # hasjrel
                argval = offset + 2 + (-arg if deop in _BACKWARD else arg) * 2
            elif family == 5:  # haslocal, hasfree
                argval = varname(arg)
            elif family == 6:  # hascompare
                argval = dis.cmp_op[arg]
            else:  # FORMAT_VALUE
                argval = (dis.FORMAT_VALUE_CONVERTERS[arg & 0x3][0], bool(arg & 0x4))
        else:
            extended_arg = 0
        unit = offset // 2  # dis reads positions one per code unit, None past their end
        lineno, end_lineno, col, end_col = positions[unit] if unit < n_positions else _NO_POSITION
        out.append((offset, op, _OPNAME[op], arg, argval, lineno, end_lineno, col, end_col))
    return out


def _families() -> list[int]:
    family = [0] * 256
    families = ((dis.hasconst, 1), (dis.hasname, 2), (dis.hasjabs, 3), (dis.hasjrel, 4), (dis.haslocal, 5),
                (dis.hasfree, 5), (dis.hascompare, 6), ([dis.opmap["FORMAT_VALUE"]], 7))
    for ops, number in families:
        for op in ops:
            if not family[op]:  # dis tests the families in this order
                family[op] = number
    return family


_NO_POSITION = (None, None, None, None)
if sys.version_info[:2] == (3, 11):
    _DEOP = [dis._deoptop(op) for op in range(256)]
    _CACHES = dis._inline_cache_entries
    _OPNAME = dis._all_opname
    _HAVE_ARGUMENT, _EXTENDED_ARG, _INT_OVERFLOW = dis.HAVE_ARGUMENT, dis.EXTENDED_ARG, dis._INT_OVERFLOW
    _LOAD_CONST, _LOAD_GLOBAL = dis.opmap["LOAD_CONST"], dis.opmap["LOAD_GLOBAL"]
    _BACKWARD = frozenset(op for op in range(256) if "JUMP_BACKWARD" in dis.opname[op])
    _FAMILY = _families()
    _raw = _raw_311
else:
    _raw = _raw_by_dis


def _decode_instructions(code: CodeType) -> tuple[list[Instruction], dict[int, int]]:
    index_of: dict[int, int] = {}
    kept_raw = []
    for raw in _raw(code):
        index_of[raw[0]] = len(kept_raw)
        opcode = raw[1]
        # Note [Dropped instructions]: RESUME 0 (function start) too; RESUME after a yield (arg >= 1) is kept
        if not (opcode in _DROPPED or (opcode == _RESUME and not raw[3])):
            kept_raw.append(raw)
    out: list[Instruction] = []
    for offset, decoded, opname, arg, argval, lineno, end_lineno, col, end_col in kept_raw:
        opcode = decoded
        if opcode == _CACHE and dis.opname[code._co_code_adaptive[offset]][0] == "<":
            opcode = code._co_code_adaptive[offset]  # Note [Unknown opcodes] in registry.py
            opname = dis.opname[opcode]
        if decoded in _JUMPS:
            argval = index_of[argval]
            if decoded == _FOR_ITER:
                argval += _FOR_ITER_SKIP
        out.append(Instruction(opcode, opname, arg, argval, offset, len(out), lineno, end_lineno, col,
                               end_col))
    return out, index_of


def raw_instructions(code: CodeType) -> list[tuple]:
    """Every instruction of ``code``, dropped ones included, as ``(offset, opcode, opname, arg, argval,
    lineno, end_lineno, col, end_col)`` (``dis.get_instructions``' fields; a jump's argval: its target's
    offset)."""
    return _raw(code)


def dropped_before(code: CodeType) -> tuple[list[tuple[tuple[int, int, int | None], ...]], dict[int, int]]:
    """For each decoded instruction, the ``(offset, opcode, lineno)`` of the instructions dropped just before
    it (Note [Dropped instructions]), and the byte offset each jump (by its index) targets: a trace function
    sees the dropped instructions' lines and the start's RESUME where CPython executes them (tracing.py)."""
    out: list[tuple[tuple[int, int, int | None], ...]] = []
    targets: dict[int, int] = {}
    dropped: list[tuple[int, int, int | None]] = []
    for offset, opcode, _opname, arg, argval, lineno, *_ in _raw(code):
        if opcode in _DROPPED or (opcode == _RESUME and not arg):
            dropped.append((offset, opcode, lineno))
        else:
            if opcode in _JUMPS:
                targets[len(out)] = argval
            out.append(tuple(dropped))
            dropped.clear()
    return out, targets


def _fuse(instructions: list[Instruction], hooked: frozenset[int] = frozenset()) -> list[Instruction]:
    """``instructions`` with registered runs replaced, at their first index, by a fused instruction
    (runs containing an opcode of ``hooked`` excepted: a hook must see those one by one)."""
    from jitcore.interpreter.registry import fused_jumps, fused_opcodes

    runs = fused_opcodes(hooked)
    lengths = sorted({len(k) for k in runs})
    starts = {k[0] for k in runs}
    out = list(instructions)
    n = len(instructions)
    opcodes = [inst.opcode for inst in instructions]
    # The runs are chosen to leave the fewest dispatches on straight-line code (dynamic programming from
    # the end over the registered runs starting at each index): greedy fusing from the start can miss
    # one in two. On a tie, fusing (and the longer run) wins.
    best = [0] * (n + 1)  # best[i]: dispatches needed for instructions[i:]
    choice: list[tuple[int, int] | None] = [None] * n  # (length, synthetic opcode) of the run fused at i
    for i in range(n - 1, -1, -1):
        best[i] = 1 + best[i + 1]
        if opcodes[i] not in starts:  # most instructions start no registered run
            continue
        for length in lengths:
            if i + length <= n:
                code = runs.get(tuple(opcodes[i : i + length]))
                if code is not None and 1 + best[i + length] <= best[i]:
                    best[i] = 1 + best[i + length]
                    choice[i] = (length, code)
    i = 0
    while i < n:
        if choice[i] is None:
            i += 1
            continue
        length, code = choice[i]
        run = instructions[i : i + length]
        chained = run[-1] if length == 2 else None  # a pair's second half is the shared instruction itself
        if chained is None:
            for inst in reversed(run[1:]):
                chained = _replaced(inst, inst.opcode, inst.opname, chained)
        opname = "+".join(inst.opname for inst in run)
        out[i] = _replaced(run[0], code, opname, chained)
        i += length
    jumps = fused_jumps()  # Note [Fused jumps]
    for i, inst in enumerate(instructions):
        target = out[inst.argval] if inst.opcode in _BACKWARD_JUMPS else None
        opcode = jumps.get((inst.opcode, target.opname)) if target is not None else None
        if opcode is not None:
            opname = f"{inst.opname}->{target.opname}"
            out[i] = _replaced(inst, opcode, opname, target)
    return out


# _replaced copies these fields (``after`` follows from ``index``): a new field must be added there too
_FIELDS = ["opcode", "opname", "arg", "argval", "offset", "index", "lineno", "end_lineno", "col", "end_col",
           "next", "after"]
assert [f.name for f in dataclasses.fields(Instruction)] == _FIELDS


def _replaced(inst: Instruction, opcode: int, opname: str, next_: Instruction | None) -> Instruction:
    """``dataclasses.replace(inst, opcode=..., opname=..., next=...)`` without its per-call field walk."""
    return Instruction(opcode, opname, inst.arg, inst.argval, inst.offset, inst.index, inst.lineno,
                       inst.end_lineno, inst.col, inst.end_col, next_)


_BACKWARD_JUMPS = frozenset(dis.opmap[name] for name in ("JUMP_BACKWARD",) if name in dis.opmap)


# The decode cache, ``id(code) -> CodeInfo`` (an entry holds its code, so the id stays valid). Public so
# that the call fast path can probe it without a function call; only ``decode`` writes it.
CODE_INFO: dict[int, CodeInfo] = {}


def decode(code: CodeType) -> CodeInfo:
    """The (cached) CodeInfo of ``code``."""
    info = CODE_INFO.get(id(code))
    if info is not None and info.code is code:
        return info
    info = CodeInfo(code)
    CODE_INFO[id(code)] = info
    return info
