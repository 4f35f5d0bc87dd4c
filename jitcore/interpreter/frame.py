"""Frame: the state of one interpreted function activation (value stack, fast locals, position).

Invariants:
- ``frame.index`` is the index of the *next* instruction; the instruction being executed (or, for a frame
  that is calling out or suspended, the one it is waiting in) is ``instructions[index - 1]``.
- ``frame.fast`` holds CPython's "localsplus" layout: locals, then cells, then free variables; an unbound
  slot holds ``NULL``. ``frame.stack`` is a plain list holding values only (no wrappers); ``NULL`` marks
  the "no self" slot of the 3.11 call protocol.
- ``frame.exc_value`` is the exception this frame is currently handling (CPython's per-frame view of
  ``exc_info``); the one a new exception is chained to is the first non-None walking ``back``.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

from dataclasses import dataclass
from types import CodeType, FunctionType
from typing import TYPE_CHECKING

from jitcore.interpreter.instructions import CodeInfo, Instruction

if TYPE_CHECKING:
    from jitcore.interpreter.run import Run

__all__ = ["NULL", "Frame", "Position"]


# The empty slot: an unbound local, or the absent ``self`` of a 3.11 call sequence. A plain ``object()``,
# which the garbage collector does not track: an instance of a Python class would be listed by
# ``gc.get_objects()``, and a program looping over those (``for o in gc.get_objects():``, a memory
# debugging idiom) would store it in a local and then find that local unbound.
NULL = object()


@dataclass(frozen=True, slots=True)
class Position:
    """A source span of user code, as CPython's ``co_positions`` reports it (any part may be None)."""

    filename: str
    lineno: int | None
    end_lineno: int | None
    col: int | None
    end_col: int | None
    function_name: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function_name}"


class Frame:
    """One interpreted activation. Created by the run for every interpreted call, class body or generator."""

    __slots__ = (
        "back",
        "builtins",
        "caught",
        "code",
        "exc_value",
        "extra_locals",
        "f_locals",
        "fast",
        "function",
        "globals",
        "index",
        "info",
        "jump",
        "kw_names",
        "locals",
        "pending",
        "proxy",
        "result",
        "run",
        "stack",
        "tb_entry",
        "trace",
        "trace_flags",
        "trace_lasti",
        "trace_line",
    )

    # Note [Frames of plain calls]
    # calls.call_function, the path of every interpreted call with plain positional arguments, sets these
    # slots itself on ``object.__new__(Frame)`` instead of calling ``Frame(...)``: on 3.11 and 3.13 the class
    # call costs ~1,000 machine instructions of the ~15,000 an interpreted call costs. A slot added here
    # must be added there too (test_frames_of_plain_calls compares the two).
    def __init__(self, run: Run, code: CodeType, info: CodeInfo, globals: dict, builtins: dict,
                 function: FunctionType | None, fast: list, back: Frame | None,
                 locals: dict | None = None) -> None:
        self.run = run
        self.code = code
        self.info = info
        self.fast = fast  # the caller builds it (arguments first), ``info.nlocalsplus`` slots
        self.stack: list = []
        self.index = 0
        self.globals = globals
        self.builtins = builtins
        self.locals = locals
        self.function = function
        self.kw_names: tuple[str, ...] = ()
        self.exc_value: BaseException | None = None
        self.back = back
        # ``result`` is set by RETURN_VALUE/YIELD_VALUE before it is read; ``pending`` is set by the generator
        # code, ``tb_entry`` by tracebacks.add_frame, ``caught`` by loop._route, ``trace`` and ``trace_flags``
        # (the frame's ``f_trace``, ``f_trace_lines`` and ``f_trace_opcodes``) by its frame object,
        # ``trace_line`` and ``trace_lasti`` by tracing.py, ``jump`` (a jump set in a yield's ``return``
        # event) by line_jumps.py, ``proxy`` (a weak reference to the frame's frame
        # object) by lookasides.frame_proxy, ``f_locals`` (before 3.13, the dict ``locals()`` returns in a
        # function frame) and ``extra_locals`` (3.13: names written into ``frame.f_locals`` that are no
        # local's) by frame_locals.py, which read them with a default: left
        # unset here to keep frame creation cheap.

    @property
    def instructions(self) -> list[Instruction]:
        """The decoded instructions of ``code``."""
        return self.info.instructions

    @property
    def instruction(self) -> Instruction:
        """The instruction being executed (or waited in, for a frame that is calling out or suspended)."""
        return self.instructions[max(self.index - 1, 0)]

    def position(self) -> Position:
        """The source span of the current instruction."""
        inst = self.instruction
        lineno = inst.lineno
        if lineno is None:
            lineno = self._nearest_line()
        return Position(self.code.co_filename, lineno, inst.end_lineno, inst.col, inst.end_col,
                        self.code.co_name)

    def _nearest_line(self) -> int | None:
        for inst in reversed(self.instructions[: max(self.index, 1)]):
            if inst.lineno is not None:
                return inst.lineno
        return self.code.co_firstlineno

    def where(self) -> str:
        """``"file:line"`` of the current instruction, for error messages."""
        pos = self.position()
        return f"{pos.filename}:{pos.lineno}"

    def handled_exception(self) -> BaseException | None:
        """The exception a newly raised one gets as ``__context__`` (CPython's topmost ``exc_info``)."""
        frame: Frame | None = self
        while frame is not None:
            if frame.exc_value is not None:
                return frame.exc_value
            frame = frame.back
        return None

    def __repr__(self) -> str:
        return f"<Frame {self.code.co_name} at {self.where()}>"
