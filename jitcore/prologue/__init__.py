"""Guards, prologues and the cache: what makes a cached call safe and fast."""

from jitcore.prologue.guards import Guard, StateGuard, TensorSpec
from jitcore.prologue.paths import Path, Root
from jitcore.prologue.prologue import MISS, MissReason, Prologue, PrologueBuilder, inlined_guards

__all__ = [
    "MISS", "Guard", "MissReason", "Path", "Prologue", "PrologueBuilder", "Root", "StateGuard", "TensorSpec",
    "inlined_guards",
]
