"""jitcore's own error kinds.

Invariant: every error jitcore raises on its own account is a ``JitcoreError`` with a stable
``code`` (each has a page under ``docs/errors/``), a one-line summary and hints that are actions.
Errors raised by user code or by torch are never wrapped in these: they reach the user as the
original exception.
"""

from __future__ import annotations

__all__ = [
    "JitcoreError",
    "UnsupportedOperationError",
    "DataDependentError",
    "UnsupportedInputError",
    "EagerOnlyValue",
    "EagerOnlySubclass",
    "EagerWhateverTheSizes",
]


class JitcoreError(Exception):
    """Base of jitcore's own errors.

    Attributes:
        code: stable identifier, e.g. ``JC-T001``; ``docs/errors/<code>.md`` explains it.
        hints: actions the user can take.
    """

    code = "JC-0000"
    # Whether an ``except`` clause of the traced program may catch it (jitcore/interpreter/opcodes/
    # exceptions.py). False for an error that stops tracing the call and makes it run eagerly: eager
    # raises nothing there, so a handler of the program must not run (``finally`` clauses still do).
    reaches_program = True

    def __init__(self, summary: str, *, hints: tuple[str, ...] = (), where: str | None = None) -> None:
        self.summary = summary
        self.hints = tuple(hints)
        self.where = where
        super().__init__(self._message())

    def _message(self) -> str:
        text = f"[{self.code}] {self.summary}"
        if self.where:
            text += f"\n  at {self.where}"
        for hint in self.hints:
            text += f"\n  hint: {hint}"
        return text


class UnsupportedOperationError(JitcoreError, TypeError):
    """A torch callable that jitcore cannot record was reached with tensor arguments."""

    code = "JC-T001"
    reaches_program = False


class DataDependentError(JitcoreError, RuntimeError):
    """The program needs a tensor's *values* (not its metadata) while being traced."""

    code = "JC-T002"
    reaches_program = False


class UnsupportedInputError(JitcoreError, TypeError):
    """An input of a jitted function has a kind jitcore cannot accept."""

    code = "JC-J001"


class EagerOnlyValue(UnsupportedInputError):
    """A value whose operations jitcore runs eagerly, not traced: a tensor that is not strided
    (sparse, quantized, mkldnn, a strided nested tensor), an eager-only tensor subclass
    (``EagerOnlySubclass``), a function transform of ``torch.func``. The jit runs such calls eagerly
    with a warning instead of raising (docs/errors/JC-J002.md)."""

    code = "JC-J002"
    reaches_program = False


class LazyState(EagerOnlyValue):
    """A parameter or buffer a lazy module (``nn.LazyLinear`` & co.) makes on its first call: that call
    runs eagerly (it makes the parameters, drawing their initial values from the RNG as eager does)
    and adds no cache entry; the next call is traced with the parameters made."""


class EagerOnlySubclass(EagerOnlyValue):
    """A tensor subclass whose operations jitcore runs eagerly (docs/subclasses.md, "What counts as
    traceable")."""


class EagerWhateverTheSizes(EagerOnlyValue):
    """A value jitcore runs eagerly for a reason no size decides (``torch.func.vmap``/``grad`` of a tensor
    subclass): a pass with symbolic sizes that meets it makes the eager entry itself, for every size
    (Note [Eager whatever the sizes], jitcore/jit/eager_entries.py)."""
