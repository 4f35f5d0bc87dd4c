"""What jitcore knows about an error: the phase, the op being recorded or run, its inputs, the source.

An ``ErrorContext`` is attached to the exception itself (``exc.jitcore_context``) so that the
exception's type, message and identity stay the user's; ``jitcore.report`` renders it, and the
jit's error boundary turns it into a one-line PEP 678 note.
Invariant: attaching a context never changes an exception's type, args or message.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from jitcore.ir import Proxy, SourceFrame

__all__ = ["ErrorContext", "context_of", "describe_argument", "note_failed_call"]

ATTRIBUTE = "jitcore_context"


@dataclass(frozen=True, slots=True)
class ErrorContext:
    """Where in jitcore's work an exception arose.

    Attributes:
        phase: ``"tracing"`` (while jitcore interpreted the function), ``"execution"`` (while a
            compiled trace ran), ``"backward"`` (an error autograd raised when jitcore derived
            the backward, raised again by ``backward()``), ``"backward-internal"`` (one jitcore's
            own code raised then, kept as a JC-I002 error) or ``"eager"`` (the call ran eagerly
            because tracing it raised: Note [A program that raises], jit/eager_entries.py) or
            ``"eager-after-computation"`` (because its computation raised: jit/raising_calls.py) or
            ``"eager-raising-entry"`` (a raising entry accepted it: jit/raising_entries.py).
        label: what was jitted (``model``, ``module Net``); '' until the jit's boundary fills it.
        entry: the cache entry being run, when known (an existing entry's number, as ``repr(jfn)``
            and ``explain`` count them).
        op: the operation (``torch.matmul``) being recorded or run, when one was.
        inputs: (name, metadata) of the op's arguments, e.g. ``("t0", "cpu f32[4, 8]")``.
        statement: the line of the computation trace that failed (execution errors).
        source: the user's stack that produced the op, outermost first.
        attempt: while tracing, which trace of the function this was (failed ones included).
    """

    phase: str
    label: str = ""
    entry: int | None = None
    op: str | None = None
    inputs: tuple[tuple[str, str], ...] = ()
    statement: str | None = None
    source: tuple[SourceFrame, ...] | None = None
    hints: tuple[str, ...] = field(default=())

    attempt: int | None = None

    def with_call(self, label: str, entry: int | None) -> ErrorContext:
        return replace(self, label=label, entry=entry)

    def with_attempt(self, label: str, attempt: int) -> ErrorContext:
        """The context of an error while tracing: which trace of ``label`` (1 for the first) failed (a
        raising entry's call keeps its entry's number: it exists)."""
        entry = self.entry if self.phase == "eager-raising-entry" else None
        return replace(self, label=label, attempt=attempt, entry=entry)

    def note(self) -> str:
        """The PEP 678 note: what jitcore was doing when the error arose (one line), then hints.

        Only cache entries that exist are numbered; a trace that failed made none, so it is named
        by its trace attempt (the function's n-th trace, failed ones included).
        """
        if self.entry is not None:
            what = f"{self.label} (cache entry {self.entry})"
        elif self.attempt is not None:
            what = f"{self.label} (trace attempt {self.attempt})"
        else:
            what = self.label
        if self.phase == "backward":
            text = (
                f"jitcore: raised in the backward of {what}, as eagerly: autograd raised it when jitcore "
                "derived the backward, and every backward() through this entry raises it again"
            )
        elif self.phase == "backward-internal":
            text = (
                f"jitcore: raised in the backward of {what}: jitcore's own code failed when it derived "
                "the backward (a jitcore bug, not an error of your program), and every backward() "
                "through this entry raises it again"
            )
        elif self.phase == "eager":
            text = (
                f"jitcore: raised while running {self.label} eagerly: tracing this call raised, so it ran "
                "as eager runs it, effects included"
            )
        elif self.phase == "eager-raising-entry":  # Note [Raising entries] (jit/raising_entries.py)
            text = (
                f"jitcore: raised while running {what} eagerly: tracing a call like it raised, so calls "
                "like it run as eager runs them, effects included, until one returns"
            )
        elif self.phase == "eager-after-computation":  # Note [Effects of a raising call]
            text = (
                f"jitcore: raised while running {self.label} eagerly: its cached computation raised, so the "
                "call ran as eager runs it, effects included"
            )
        elif self.phase == "execution":
            text = f"jitcore: raised while running the compiled trace of {what}"
            if self.statement:
                text += f" at `{self.statement}`"
        else:
            text = f"jitcore: raised while tracing {what}"
            if self.op:
                args = ", ".join(f"{n}: {m}" if m else n for n, m in self.inputs)
                text += f", recording {self.op}({args})"
        if self.source:
            frame = self.source[-1]
            text += f" from {_short_path(frame.filename)}:{frame.lineno}"
        return "\n".join([text, *(f"hint: {hint}" for hint in self.hints)])


def context_of(exc: BaseException) -> ErrorContext | None:
    """The context jitcore attached to ``exc``, if any."""
    context = getattr(exc, ATTRIBUTE, None)
    return context if isinstance(context, ErrorContext) else None


def attach(exc: BaseException, context: ErrorContext) -> None:
    try:
        setattr(exc, ATTRIBUTE, context)
    except (AttributeError, TypeError):  # an exception class with __slots__ and no __dict__
        pass


def note_failed_call(
    exc: BaseException, symbol: Any, args: tuple, kwargs: dict, source: tuple[SourceFrame, ...] | None
) -> None:
    """Record on ``exc`` the symbol call that raised it while tracing (the innermost call wins)."""
    if context_of(exc) is not None:
        return
    inputs = [describe_argument(a) for a in args]
    inputs += [(f"{k}={name}", meta) for k, v in kwargs.items() for name, meta in [describe_argument(v)]]
    attach(
        exc,
        ErrorContext(
            "tracing",
            op=getattr(symbol, "id", str(symbol)),
            inputs=tuple(inputs),
            source=source,
            hints=_shape_hints(getattr(symbol, "name", ""), args),
        ),
    )


_MATMUL_NAMES = frozenset({"matmul", "mm", "bmm", "__matmul__", "__rmatmul__"})


def _shape_hints(name: str, args: tuple) -> tuple[str, ...]:
    """A hint for the shape errors worth explaining: matrix products whose inner sizes differ."""
    if name not in _MATMUL_NAMES or len(args) < 2:
        return ()
    a, b = args[0], args[1]
    if name == "__rmatmul__":
        a, b = b, a
    shape_a, shape_b = getattr(a, "shape", None), getattr(b, "shape", None)
    if not isinstance(a, Proxy) or not isinstance(b, Proxy) or shape_a is None or shape_b is None:
        return ()
    if len(shape_a) < 1 or len(shape_b) < 1:
        return ()
    inner_b = shape_b[-2] if len(shape_b) >= 2 else shape_b[0]
    if shape_a[-1] == inner_b:
        return ()
    which = "second-to-last" if len(shape_b) >= 2 else "only"
    return (
        (
            f"in a matrix product, the left operand's last size ({shape_a[-1]}) "
            f"must equal the right operand's "
            f"{which} size ({inner_b})"
        ),
    )


def describe_argument(value: Any) -> tuple[str, str]:
    """(name, metadata) of an argument: ``("x", "cpu f32[4, 8]")`` for a proxy, ``("2", "")`` else."""
    if isinstance(value, Proxy):
        return value.name, value.describe()
    if isinstance(value, (tuple, list)) and any(isinstance(v, Proxy) for v in value):
        inner = ", ".join(describe_argument(v)[0] for v in value)
        return f"[{inner}]", ", ".join(m for _n, m in map(describe_argument, value) if m)
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an int too long for repr, a broken __repr__: the user's error wins
        text = f"<{type(value).__qualname__}>"
    return (text if len(text) <= 40 else text[:37] + "..."), ""


def _short_path(filename: str) -> str:
    import os

    try:
        relative = os.path.relpath(filename)
    except ValueError:
        return filename
    return relative if not relative.startswith("..") else filename
