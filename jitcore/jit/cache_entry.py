"""A cache entry of a jitted function, and the parts it is compiled from.

A CacheEntry pairs a compiled prologue with a compiled computation; its ``cached_call`` is the two fused
(then the Python side effects the program makes, jit/effects.py). Invariants:
- an entry's prologue is what interpretation guarded plus what the stages after it rely on (the grad
  stage's guards, pinned layouts, the subclass arguments the computation takes whole), built from a copy:
  the traced program's own builder is not changed;
- the computation an entry runs rebuilds the program's output (here, or after the effects where the
  program has some), undoes its writes before a failed read check, puts the thread's settings back and
  runs a raising call eagerly, in that order from the inside out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jitcore.ir import Trace
from jitcore.jit.effects import Effects
from jitcore.jit.interpretation import TracedProgram
from jitcore.jit.raising_calls import with_eager_on_raise
from jitcore.jit.read_resume import Resumable
from jitcore.jit.read_rollback import with_rollback, with_settings_restored
from jitcore.jit.run_modes import without_torch_function
from jitcore.prologue import MISS, MissReason, Path, Prologue, PrologueBuilder
from jitcore.transforms import GradStage

__all__ = [
    "CacheEntry", "entry_computation", "identity", "not_compiled", "prologue_of", "with_output_rebuilt",
]


@dataclass(eq=False)
class CacheEntry:
    """One specialization: its prologue, its computation, and the traces they came from."""

    number: int
    prologue: Prologue
    traces: list[Trace]
    computation: Callable[..., Any]
    cached_call: Callable[[tuple, dict], Any]
    miss_reasons: list[MissReason] = field(default_factory=list)
    effects: Effects | None = None  # Python side effects performed after the computation
    plain_data: bool = False  # inputs run a __torch_function__ the trace resolved: checked and run without it
    eager_reason: BaseException | None = None  # an eager entry: calls it accepts run the function eagerly
    autograd_reason: str | None = None  # why it runs pass 1 under torch's autograd (GradStage.reason)
    this_call_only: BaseException | None = None  # answers its pass's call; an eager entry is filed instead
    filed: bool = True  # False: answers its pass's call, and nothing is filed (the next call traces again)
    resumable: Resumable | None = None  # Note [Resuming at a failed check] (jit/read_resume.py)
    resumed: Callable[..., Any] | None = None  # the computation going on after a check, as it runs
    _resume_call: Callable[[tuple, dict], Any] | None = None

    def resume_call(self) -> Callable[[tuple, dict], Any]:
        """The cached call going on after another entry's failed check (compiled on its first use)."""
        if self._resume_call is None:
            self._resume_call = self.compile_fast_path(self.resumed)
        return self._resume_call

    def compile_fast_path(self, computation: Callable | None = None) -> Callable[[tuple, dict], Any]:
        """The cached call: the prologue's checks, the computation (``self.computation`` by default),
        then the side effects."""
        cached_call = self.prologue.compile(self.computation if computation is None else computation)
        cached_call = cached_call if self.effects is None else self.effects.around(cached_call, MISS)
        return without_torch_function(cached_call) if self.plain_data else cached_call


def prologue_of(prologue: PrologueBuilder, grad: GradStage, inputs: list[tuple[Path, str]]) -> Prologue:
    """The entry's prologue: what interpretation recorded, then what the stages after it add: the
    guards the grad stage relies on (the dynamic numbers it made constants, storage sharing, the
    layouts its traces rely on), then the computation's trailing inputs (the subclass arguments it
    takes whole). The program's own builder is not changed."""
    builder = prologue.copy()
    for guard in grad.guards:
        builder.add_guard(guard)
    builder.drop_inputs(grad.dropped_inputs)
    if grad.differentiated is not None:
        for path, strides, storage_offset in grad.differentiated.layouts:
            builder.pin_layout(path, strides, storage_offset)
    for path, name in inputs:
        builder.add_input(path, name)
    return builder.build()


def identity(value: Any) -> Any:
    return value


def with_output_rebuilt(program: TracedProgram, computation: Callable[..., Any]) -> Callable[..., Any]:
    """``computation`` followed by the rebuild of the program's output."""
    if program.structure is not None:
        computation = program.structure.wrap(computation)
    if program.epilogue is not None:
        computation = program.epilogue.wrap(computation)
    return computation


def entry_computation(
    program: TracedProgram, trace: Trace, computation: Callable[..., Any]
) -> Callable[..., Any]:
    """An entry's ``computation`` as its cached call runs it: the output rebuilt (here where the program
    has no Python effects, else by them), writes undone before a failed read check, the thread's settings
    put back (Note [A computation that raises inside no_grad]) and a raise run eagerly (Note [Effects of a
    raising call])."""
    if program.effects is None:
        computation = with_output_rebuilt(program, computation)
    computation = with_rollback(trace, computation)
    computation = with_settings_restored(trace, computation)
    return with_eager_on_raise(trace, computation, program.effects, handlers=program.reruns_on_raise)


def not_compiled(args: tuple, kwargs: dict) -> Any:
    raise AssertionError("a cache entry is called before its fast path is compiled")
