"""The program's ``print`` calls: recorded while tracing, printed on every call as eagerly.

A ``print`` inside a jitted function is a Python side effect like a list append: eager prints on every
call. While tracing, ``Prints.print`` (the pass's lookaside for the builtin) does not print; it records
the call as an ``Effect`` of kind ``"print"`` (jitcore/jit/effects.py), which the entry performs after
each run of the computation, the first call's included, in program order among the prints:
- each argument's text is made while tracing, through the interpreter (``str(obj)`` runs the
  object's own ``__str__`` interpreted, so what it reads is guarded as any read of the program);
- a number read from a tensor (``print(loss.item())``) or a dynamic number stays a name: it is an
  output of the computation, and its text is made from each call's value (no guard on the value);
- ``file`` may be omitted, ``None``, ``sys.stdout`` or ``sys.stderr``: the stream is looked up in
  ``sys`` on each call (``contextlib.redirect_stdout`` around the jitted call is honoured; one the
  program makes itself is the stream it points to: Note [A stream the program redirects to]); or a
  stream the program reached through a path (an argument, state): looked up through that path on each call;
- text made from numbers of the computation (jit/texts.py) is formatted from each call's numbers;
- a plain tensor (``print("loss", x)``) is a snapshot the computation takes where the print is, printed
  with torch's text of each call's tensor (Note [A tensor the program prints]).
A ``write`` (or ``flush``) on such a stream that interpreted code calls (a logging handler's ``emit``:
``logger.warning(...)`` inside the function) is recorded the same way, as a print of that text.

When the program raises its own exception, the call runs eagerly (Note [A program that raises],
jit/eager_entries.py), which prints; the pass prints nothing.
A print whose text the pass would have to make from a traced tensor's values (``print([x])``, a
subclass, a tensor that requires grad) or that writes to a stream made inside the function stops
tracing with JC-T001 (langctx/tensor_text.py): without ``fullgraph`` that call runs eagerly.
A print inside a tensor subclass's ``__torch_dispatch__``/``__torch_function__`` that the pass
interprets is recorded the same way (eager prints it on every call too). Code that the grad transform
runs after the pass (a subclass's dispatch of a backward op) prints natively, while tracing only.

Invariants: a recorded print's text is, on every call, the text eager prints for a call taking the
same path (the pieces not named by a number are guarded through the reads that made them); nothing
is printed while tracing a pass that records it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.interpreter.protocols import to_str
from jitcore.ir import tree_has
from jitcore.jit.effects import PRINT_STREAMS, Effect
from jitcore.langctx.tensor_text import own_text, refuse_text, shown_snapshot
from jitcore.prologue import Path, Root
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.text import TextProxy

__all__ = ["Prints"]

_SYS = Path(Root("bound", "sys", sys))


class Prints:
    """The print calls of one pass, as effects in program order."""

    def __init__(self, *, path_of: Callable[[Any], Path | None]) -> None:
        self.path_of = path_of  # where an object of the caller's or of state was reached (Provenance)
        self.effects: list[Effect] = []
        # sys.stdout and sys.stderr as the call found them (Note [A stream the program redirects to])
        self._callers = tuple(getattr(sys, name) for name in PRINT_STREAMS)

    def print(self, *objects: Any, sep: str | None = " ", end: str | None = "\n", file: Any = None,
              flush: bool = False) -> None:
        """The lookaside for ``print``: records the call (see the module docstring)."""
        run = current_run()
        if tree_has(objects, TensorProxy):
            objects = tuple(_shown_tensor(obj) for obj in objects)
        for name, value in (("sep", sep), ("end", end)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be None or a string, not {type(value).__name__}")
        stream = self._stream(sys.stdout if file is None else file)
        if stream is None:
            target = f"print(..., file=<{type(file).__qualname__}>)" if file is not None else \
                f"print() to sys.stdout, which the function set to a {type(sys.stdout).__qualname__},"
            raise UnsupportedOperationError(
                f"{target} writes to a stream made inside the function, which jitcore cannot replay on "
                "cached calls",
                hints=("print to a stream the function is passed or reaches through state",),
            )
        pieces = [obj if isinstance(obj, (NumberProxy, TextProxy, TensorProxy)) else to_str(run, obj)
                  for obj in objects]
        self.effects.append(Effect(stream, "print", (
            " " if sep is None else sep, "\n" if end is None else end, bool(flush)), pieces))
        return None

    def write(self, fn: Any, args: tuple, kwargs: dict) -> int | None:
        """``stream.write(text)`` called by the program (a logging handler's ``emit``) on ``sys.stdout``
        or ``sys.stderr``: recorded as a print of ``text`` alone; its result, the length written. None
        (the call runs natively) for any other ``write``."""
        stream = self._stream(getattr(fn, "__self__", None))
        if stream is None or kwargs or len(args) != 1 or not isinstance(args[0], (str, TextProxy)):
            return None
        text = args[0]
        if isinstance(text, TextProxy) and not _result_discarded():
            text = text.specialize()  # the length written is the text's: the program reads it
        self.effects.append(Effect(stream, "print", ("", "", False), [text]))
        return len(text) if type(text) is str else 0

    def flush(self, fn: Any, args: tuple, kwargs: dict) -> bool:
        """``stream.flush()`` of a stream whose writes are recorded (a logging handler flushes after
        each record): recorded in order with them; False (the call runs natively) otherwise."""
        stream = self._stream(getattr(fn, "__self__", None))
        if stream is None or args or kwargs:
            return False
        self.effects.append(Effect(stream, "print", ("", "", True), []))
        return True

    def wrote_to(self, stream: Any) -> bool:
        """Whether the program wrote to ``stream`` in this pass (recorded, replayed after the computation)."""
        path = self._stream(stream)
        return path is not None and any(e.kind == "print" and e.path == path for e in self.effects)

    def _stream(self, stream: Any) -> Path | None:
        """Where each call finds ``stream``: ``sys.stdout``/``sys.stderr`` as the call finds them, or
        the path through which the program reached a stream of the caller's or of state (a file it is
        passed, a logging handler's); None for a stream made inside the function."""
        for name, callers in zip(PRINT_STREAMS, self._callers):
            if stream is getattr(sys, name) and stream is callers:
                return _SYS.attr(name)
        return None if stream is None else self.path_of(stream)

    # Note [A stream the program redirects to]
    # ``with contextlib.redirect_stdout(buf): print(...)`` inside the function sets ``sys.stdout`` to
    # ``buf`` while the print runs: recorded as a print to ``sys.stdout``, it was replayed after the
    # call, when ``sys.stdout`` was the caller's again (the text went to the terminal, ``buf`` stayed
    # empty). ``sys.stdout``/``sys.stderr`` stand for themselves only while they are the streams the
    # call found; a stream the program put there is that stream, reached through a path of the caller's
    # or of state (replayed there), or made inside the function (refused: the call runs eagerly).


# Note [A tensor the program prints]
# ``print(x)`` of a plain tensor shows its values, which a pass does not have. The tensor as the print
# finds it is taken into the computation (``torch.clone``: an in-place op after the print must not change
# what was printed) and becomes one of the effect's slots, so each call prints that call's tensor with
# torch's own text, as eagerly (the print options the call finds). Not so, and the call runs eagerly
# (JC-T001): a tensor inside another argument (``print([x])``, whose text the pass would make), a
# subclass or a Parameter (its class's text), and a tensor that requires grad (its text names its
# ``grad_fn``, which the computation's tensor does not share). The pass's shadow has a node, but not always
# eager's: printed through op_db (1,043 samples that require grad), 5 named another node (masked_select's
# IndexBackward0, index_fill's WhereBackward0, linalg.tensorinv's ViewBackward0 for ReshapeAliasBackward0),
# and a custom Function's is jitcore's own ``_JoinedBackward``; a wrong text is not to be printed.
def _shown_tensor(obj: Any) -> Any:
    """``obj`` as a print argument: a plain tensor's snapshot in the computation, else ``obj``."""
    if not tree_has(obj, TensorProxy):
        return obj
    text = own_text(obj)  # Note [A subclass's own text in print and str] (langctx/tensor_text.py)
    if text is not None:
        return text
    snapshot = shown_snapshot(obj)
    if snapshot is None:
        refuse_text("print")
    return snapshot


def _result_discarded() -> bool:
    """Whether the interpreted call being made is an expression statement (``stream.write(text)``,
    as logging's ``StreamHandler.emit`` writes): its result popped by the next instruction."""
    run = current_run()
    frame = run.frames[-1] if run is not None and run.frames else None
    if frame is None:
        return False
    instructions = frame.info.instructions
    return frame.index < len(instructions) and instructions[frame.index].opname == "POP_TOP"
