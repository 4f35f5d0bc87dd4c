"""The program one tracing pass produced: pass 1, its prologue, and what the stages after it read.

``Pass.run`` (jit/interpretation.py) makes a TracedProgram; the stages of a miss (jit/api.py: grad,
flatten, executors, prologue) read it. Invariants:
- the stages read a TracedProgram and do not change it: what they make of it (``specialized``: its
  numbers as constants) is a new value they return;
- ``trace.args`` are the tensor inputs (``first_inputs`` in the same order), then the dynamic
  numbers, then the generators, as the prologue's ``inputs`` are.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

import jitcore
from jitcore.ir import BoundSymbol, Trace
from jitcore.jit import nondeterministic, numbers, outputs
from jitcore.jit.effects import Effects, StateSnapshots
from jitcore.prologue import Guard, Path, PrologueBuilder
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.transforms.grad import unproduced_subclasses
from jitcore.transforms.symbolic_sizes import SymbolicSizes

__all__ = ["Specialized", "TracedProgram"]


class TracedProgram:
    """What a finished pass produced: traces, prologue, and the inputs of the first call."""

    def __init__(self, trace: Trace, prologue: PrologueBuilder, first_inputs: list[torch.Tensor],
                 number_inputs: list[tuple[Path, NumberProxy]] | None = None) -> None:
        self.trace = trace
        self.prologue = prologue
        self.first_inputs = first_inputs
        self.number_inputs = number_inputs or []  # dynamic numbers: trailing arguments of the trace
        self.epilogue: Any = None  # turns NumPy outputs back into NumPy values (docs/numpy.md)
        self.structure: outputs.OutputStructure | None = None  # rebuilds output objects (jit/outputs.py)
        self.read_numbers: list[tuple[NumberProxy, BoundSymbol]] = []  # t.item() results, with their checks
        # clock reads and random draws, each with what made it (jit/nondeterministic.py)
        self.per_call_numbers: list[tuple[NumberProxy, str]] = []
        self.effects: Effects | None = None  # side effects replayed after the computation (jit/effects.py)
        # a value-decided error may reach handlers the computation skips: a call whose computation raises
        # runs eagerly (Note [Handlers a raising computation skips], jit/caught_errors.py)
        self.reruns_on_raise = False
        # its trace answers the call that made it only; calls like it run eagerly, refused by this (Note [A
        # cached function that raised, caught], jit/lru_caches.py)
        self.this_call_only: BaseException | None = None
        self.filed = True  # False: its entry answers this call only, and no entry is filed for later ones
        self.snapshots: StateSnapshots | None = None  # the state the pass reached, as the call found it
        self.size_inputs: list[
            tuple[Path, NumberProxy]
        ] = []  # symbolic sizes: trailing arguments (jit/shapes.py)
        self.read_sizes: list[NumberProxy] = []  # sizes values decided, read in the trace (jit/shapes.py)
        # the numbers that name the pass's size symbols, for the grad transform's replay (None: none, or
        # dynamic numbers among them; Note [Symbolic sizes through the grad transform])
        self.symbolic_sizes: SymbolicSizes | None = None
        # tensor-subclass inputs and the paths they were bound at (Provenance._subclass), inner ones
        # first: the computation takes their inner tensors; the grad transform, the outer ones too
        self.subclass_inputs: list[tuple[SubclassTensorProxy, Path]] = []
        # the outer sizes, strides, offset and ctx of the subclass values pass 2 builds, computed from
        # the size inputs of a pass with symbolic sizes (Note [Subclass values' sizes], jit/shapes.py)
        self.outer_layouts: dict[int, tuple] = {}
        # a dispatch mode ran over tensors that require grad: pass 1 runs under torch's autograd
        self.modes_under_autograd = False  # (Note [A dispatch mode under autograd], dispatch/modes.py)

    def symbolic_numbers(self) -> list[NumberProxy]:
        """The dynamic numbers the trace uses that the program did not specialize (symbolic sizes too)."""
        read = [n for n, _check in self.read_numbers if not n.specialized]
        read += [n for n, _made_by in self.per_call_numbers]
        sizes = [n for _path, n in self.size_inputs] + self.read_sizes
        return numbers.symbolic(self.trace, self.prologue, self.number_inputs) + read + sizes

    def specialized(self, *, check_reads: bool = True,
                    unguarded: frozenset[int] = frozenset()) -> Specialized:
        """The program with every dynamic number a constant of its entry (``numbers.specialize``) and
        every number read from a tensor checked (jit/value_reads.py; ``check_reads=False``: the grad
        transform checks those it needs, ``kept_reads``); this program is not changed."""
        if self.per_call_numbers:  # a clock read or a random draw: no entry could serve another call
            raise nondeterministic.needed_value(self.per_call_numbers[0][1])  # with its value
        guards, dropped = numbers.specialize(self.trace, self.prologue, self.number_inputs, unguarded)
        checks = [check for n, check in self.read_numbers if not n.specialized] if check_reads else []
        if not dropped and not checks:
            return Specialized(self.trace, guards, dropped)
        trace = dataclasses.replace(
            self.trace, args=[a for i, a in enumerate(self.trace.args) if i not in dropped],
            bound_symbols=[*self.trace.bound_symbols, *checks], imports=dict(self.trace.imports))
        if checks:
            trace.imports.setdefault("jitcore", jitcore)
        return Specialized(trace, guards, dropped)

    def kept_reads(self) -> list[tuple[NumberProxy, BoundSymbol]]:
        """The numbers read with ``item()`` that the program kept as names, each with its check."""
        return [(n, check) for n, check in self.read_numbers if not n.specialized]

    @functools.cached_property
    def unproduced_subclasses(self) -> list[SubclassTensorProxy]:
        """``grad.unproduced_subclasses`` of pass 1, walked once per program (the grad stage's two uses)."""
        return unproduced_subclasses(self.trace)


@dataclasses.dataclass(frozen=True, slots=True)
class Specialized:
    """A program's pass 1 with its dynamic numbers made constants: the trace (a copy where it differs:
    the numbers are no longer arguments, the read numbers' checks are recorded), the value guards
    the prologue must add, and the positions of the prologue's inputs it no longer passes."""

    trace: Trace
    guards: tuple[Guard, ...]
    dropped: frozenset[int]
