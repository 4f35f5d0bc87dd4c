"""``jitcore.report(exc)``: an error as the user's program sees it, rendered with rich.

The report shows the exception (type, message, notes), the user's stack as a tree (innermost
last), the innermost user line with the failing span highlighted, the failing op's inputs as a
table, and for jitcore's own errors their hints and the page that explains the code. Output that
is not a terminal gets the same content as plain text.
Invariant: reporting reads the exception; it never changes it.
"""

from __future__ import annotations

import linecache
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, TracebackType
from typing import IO, Any

from jitcore.diagnostics.boundary import is_internal_file, traceback_points
from jitcore.diagnostics.context import context_of
from jitcore.diagnostics.tracebacks import source_frame

__all__ = ["error_code_page", "install_report_hook", "render_report", "report", "user_frames"]

DOCS_URL = "docs/errors/{code}.md"


@dataclass(frozen=True, slots=True)
class ShownFrame:
    """One frame of a report: where, and the span of the failing expression on its line."""

    filename: str
    lineno: int
    function: str
    col: int | None
    end_col: int | None

    @property
    def line(self) -> str:
        return linecache.getline(self.filename, self.lineno).rstrip("\n")


def user_frames(exc: BaseException) -> list[ShownFrame]:
    """The frames of ``exc``'s traceback that are not jitcore's, outermost first (a kept reason's too: Note
    [A kept reason holds no frames], jitcore/diagnostics/boundary.py)."""
    shown = []
    for code, line, lasti in traceback_points(exc):
        if is_internal_file(code.co_filename):
            continue
        lineno, col, end_col = _position(code, line, lasti)
        shown.append(ShownFrame(code.co_filename, lineno, code.co_name, col, end_col))
    return shown


def _position(code: CodeType, lineno: int, lasti: int) -> tuple[int, int | None, int | None]:
    where = source_frame(code, lasti, lineno)
    if where.end_lineno == lineno:  # a span on one line: the columns of its carets
        return lineno, where.col, where.end_col
    return lineno, None, None


def error_code_page(exc: BaseException) -> str | None:
    """``docs/errors/<CODE>.md`` for jitcore's own errors, else None."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code.startswith("JC-"):
        return DOCS_URL.format(code=code)
    return None


def render_report(exc: BaseException) -> str:
    """The report of ``exc`` as plain text."""
    lines = [f"{type(exc).__qualname__}: {_message(exc)}"]
    lines += [f"  {line}" for note in getattr(exc, "__notes__", ()) for line in str(note).splitlines()]
    frames = user_frames(exc)
    if frames:
        lines.append("Your stack (innermost last):")
        for depth, frame in enumerate(frames):
            lines.append(f"{'  ' * (depth + 1)}{frame.filename}:{frame.lineno} in {frame.function}")
            lines.append(f"{'  ' * (depth + 2)}{frame.line.strip()}")
        last = frames[-1]
        if last.col is not None and last.end_col is not None and last.line:
            lines.append("Failing expression:")
            lines.append(f"  {last.line}")
            lines.append("  " + " " * last.col + "^" * max(last.end_col - last.col, 1))
    context = context_of(exc)
    if context is not None and context.inputs:
        lines.append(f"Inputs of {context.op}:")
        lines += [f"  {name}: {meta or '(not a tensor)'}" for name, meta in context.inputs]
    if context is not None and context.statement:
        lines.append(f"Failing line of the compiled trace: {context.statement}")
    lines += [f"hint: {hint}" for hint in _hints(exc)]
    page = error_code_page(exc)
    if page:
        lines.append(f"See {page}")
    return "\n".join(lines) + "\n"


def report(exc: BaseException, file: IO[str] | None = None, *, color: bool | None = None) -> None:
    """Write a report of ``exc`` (an exception that left a jitted function, or any exception).

    Args:
        exc: the exception.
        file: where to write (default: ``sys.stderr``).
        color: force rich rendering (True) or plain text (False); default: rich on a terminal.
    """
    file = sys.stderr if file is None else file
    terminal = color if color is not None else bool(getattr(file, "isatty", lambda: False)())
    if not terminal:
        file.write(render_report(exc))
        return
    _rich_report(exc, file)


def _rich_report(exc: BaseException, file: IO[str]) -> None:
    from rich.console import Console, Group
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.table import Table
    from rich.text import Text
    from rich.tree import Tree

    console = Console(file=file, force_terminal=True, width=110)
    parts: list[Any] = [Text(_message(exc), style="bold")]
    parts += [Text(note, style="dim") for note in getattr(exc, "__notes__", ())]
    frames = user_frames(exc)
    if frames:
        tree = Tree("[bold]your stack[/bold] (innermost last)")
        node = tree
        for frame in frames:
            node = node.add(
                f"[cyan]{frame.function}[/cyan]  {frame.filename}:{frame.lineno}  "
                f"[dim]{frame.line.strip()}[/dim]"
            )
        parts.append(tree)
        last = frames[-1]
        if last.line:
            # From linecache, not the file: notebooks and exec'd code have lines but no file.
            syntax = Syntax(
                "".join(linecache.getlines(last.filename)),
                "python",
                line_numbers=True,
                highlight_lines={last.lineno},
                line_range=(max(last.lineno - 2, 1), last.lineno + 1),
            )
            if last.col is not None and last.end_col is not None:
                syntax.stylize_range(
                    "bold red underline", (last.lineno, last.col), (last.lineno, last.end_col)
                )
            parts.append(syntax)
    context = context_of(exc)
    if context is not None and context.inputs:
        table = Table(title=f"inputs of {context.op}", title_justify="left")
        table.add_column("argument")
        table.add_column("metadata")
        for name, meta in context.inputs:
            table.add_row(name, meta or "(not a tensor)")
        parts.append(table)
    if context is not None and context.statement:
        parts.append(Text(f"failing line of the compiled trace: {context.statement}"))
    parts += [Text(f"hint: {hint}", style="green") for hint in _hints(exc)]
    page = error_code_page(exc)
    if page:
        parts.append(Text(f"see {page}", style="blue"))
    console.print(
        Panel(Group(*parts), title=f"[bold red]{type(exc).__qualname__}[/bold red]", title_align="left")
    )


def _message(exc: BaseException) -> str:
    summary = getattr(exc, "summary", None)
    if isinstance(summary, str) and getattr(exc, "code", None):
        where = getattr(exc, "where", None)
        return f"[{exc.code}] {summary}" + (f" (at {where})" if where else "")  # hints are listed apart
    return str(exc)


def _hints(exc: BaseException) -> list[str]:
    hints = getattr(exc, "hints", None)
    if isinstance(hints, tuple):
        return list(hints)
    hint = getattr(exc, "hint", None)
    return [hint] if isinstance(hint, str) and hint else []


def install_report_hook(enable: bool = True) -> Callable[..., Any]:
    """Render uncaught errors that passed through jitcore with ``report`` (``sys.excepthook``).

    Args:
        enable: True installs the hook; False restores the hook that was there before.

    Returns:
        The ``sys.excepthook`` now in place.
    """
    current = sys.excepthook
    previous = getattr(current, "_jitcore_previous", None)
    if not enable:
        if previous is not None:
            sys.excepthook = previous
        return sys.excepthook
    if previous is not None:
        return current  # already installed

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if context_of(exc) is None and error_code_page(exc) is None:
            current(kind, exc, tb)
            return
        report(exc)

    hook._jitcore_previous = current  # type: ignore[attr-defined]
    sys.excepthook = hook
    return hook
