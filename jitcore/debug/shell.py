"""The debugger's command line: pdb's conventions over a ``Debugger``.

Commands: ``n``/``next``, ``s``/``step``, ``c``/``continue``, ``b``/``break`` [FILE:LINE | op],
``p``/``print`` EXPR, ``pp`` EXPR, ``!``STATEMENT, a bare expression, ``l``/``list``,
``w``/``where``/``bt``, ``u``/``up``, ``d``/``down``, ``restart``, ``diff`` [all],
``trace`` run|torch, ``q``/``quit``,
``help``. An empty line repeats the last command, as in pdb. Reading from the terminal goes
through ``input()`` with readline loaded (line editing, the Up arrow recalls history); tests feed
commands through ``stdin`` (an ``io.StringIO``, or the process's standard input).
Invariant: an error of a command (of the debugged op, of an expression) is printed as ``***``
and the session goes on.
"""

from __future__ import annotations

import cmd
import linecache
import pprint
import sys
from typing import IO, Any

from jitcore.debug.debugger import Debugger
from jitcore.executors import is_lowered
from jitcore.ir import BoundSymbol, print_trace

__all__ = ["DebuggerShell"]


class DebuggerShell(cmd.Cmd):
    """pdb-like commands driving a Debugger."""

    prompt = "(jitcore-debug) "

    def __init__(
        self, debugger: Debugger, stdin: IO[str] | None = None, stdout: IO[str] | None = None
    ) -> None:
        super().__init__(stdin=stdin, stdout=stdout)
        # input() with readline for the process's own standard input: line editing and history
        self.use_rawinput = stdin is None or stdin is sys.stdin
        self.debugger = debugger
        self.frame_offset = 0  # 0: the innermost user frame of the current op; 'up' counts outwards
        self.intro = (
            f"jitcore debugger: {len(debugger.trace.bound_symbols)} ops in the computation trace; "
            "'help' lists the commands"
        )

    # --- printing ----------------------------------------------------------------------------------
    def say(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def show_current(self) -> None:
        d = self.debugger
        bsym = d.current
        if bsym is None:
            self.say(f"the trace has finished; output: {_short(d.output)}")
            return
        self.say(f"{'  ' * d.depth}-> [{d.index}{'.' * d.depth}] {_statement(bsym)}")
        if bsym.source:
            frame = bsym.source[-1]
            code = linecache.getline(frame.filename, frame.lineno).rstrip()
            self.say(f"   {frame.filename}:{frame.lineno} in {frame.function}")
            if code:
                self.say(f"   >> {code.strip()}")
                if frame.col is not None and frame.end_col is not None and frame.end_lineno == frame.lineno:
                    indent = len(code) - len(code.lstrip())
                    self.say("      " + " " * (frame.col - indent) + "^" * max(frame.end_col - frame.col, 1))
        if bsym.subsymbols:
            self.say(f"   ({len(bsym.subsymbols)} subsymbols: 's' steps into them, 'n' runs the op whole)")

    def preloop(self) -> None:
        if self.intro:
            self.say(self.intro)
            self.intro = None
        self.show_current()

    def emptyline(self) -> bool:
        return self.onecmd(self.lastcmd) if self.lastcmd else False

    def default(self, line: str) -> bool:
        """``!statement``, or a bare expression or statement over the values (as pdb)."""
        text = line[1:] if line.startswith("!") else line
        mode = _python_mode(text)
        if mode is None:
            word = line.split()[0] if line.split() else line
            self.say(f"unknown command {word!r}; 'help' lists the commands")
        elif mode == "exec":
            self.debugger.execute(text)
        else:
            value = self.debugger.evaluate(text)
            if value is not None:
                self.say(repr(value))
        return False

    def onecmd(self, line: str) -> bool:
        try:
            return super().onecmd(line)
        except Exception as exc:  # noqa: BLE001 - an error of the debugged op or expression is shown, not fatal
            self.say(f"*** {type(exc).__name__}: {exc}")
            return False

    # --- commands ----------------------------------------------------------------------------------
    def do_next(self, arg: str) -> bool:
        """n(ext): run the current op (and all its subsymbols) and stop at the next one."""
        self.debugger.next()
        self.frame_offset = 0
        self.show_current()
        return False

    def do_step(self, arg: str) -> bool:
        """s(tep): step into the current op's subsymbols (a subclass's aten ops), or run it."""
        self.debugger.step()
        self.frame_offset = 0
        self.show_current()
        return False

    def do_continue(self, arg: str) -> bool:
        """c(ontinue): run until a breakpoint or the end of the trace."""
        hit = self.debugger.continue_()
        self.frame_offset = 0
        if hit is not None:
            self.say("breakpoint")
        self.show_current()
        detail = self.debugger.hit_detail(hit) if hit is not None else None
        if detail:
            self.say(f"   ({detail}: 'n' runs it)")
        return False

    def do_restart(self, arg: str) -> bool:
        """restart: start the call over from the first op, keeping the breakpoints."""
        self.debugger = self.debugger.restarted()
        self.frame_offset = 0
        self.say("restarted")
        self.show_current()
        return False

    def do_up(self, arg: str) -> bool:
        """u(p): select the frame that called the selected one (the user's stack of the current op)."""
        return self._move_frame(+1)

    def do_down(self, arg: str) -> bool:
        """d(own): select the frame the selected one called."""
        return self._move_frame(-1)

    def _move_frame(self, by: int) -> bool:
        stack = self.debugger.stack()
        if not stack:
            self.say("*** no user stack recorded for this op")
            return False
        wanted = self.frame_offset + by
        if not 0 <= wanted < len(stack):
            self.say("*** oldest frame" if by > 0 else "*** newest frame")
            return False
        self.frame_offset = wanted
        frame = stack[len(stack) - 1 - wanted]
        self.say(f"> {frame.filename}:{frame.lineno} in {frame.function}")
        code = linecache.getline(frame.filename, frame.lineno).strip()
        if code:
            self.say(f"  {code}")
        return False

    def do_break(self, arg: str) -> bool:
        """b(reak) [FILE:LINE | OP]: stop before ops recorded from that user line, or calls of that op
        (``aten.mm``, ``torch.matmul``); without argument, list the breakpoints."""
        if not arg.strip():
            for i, point in enumerate(self.debugger.breakpoints):
                self.say(f"{i}: {point.spec}")
            if not self.debugger.breakpoints:
                self.say("no breakpoints")
            return False
        try:
            point = self.debugger.break_at(arg)
        except ValueError as exc:  # a breakpoint that can never be hit, refused with the reason
            self.say(f"*** {exc}")
            return False
        self.say(f"breakpoint {len(self.debugger.breakpoints) - 1} at {point.spec}")
        return False

    def do_print(self, arg: str) -> bool:
        """p(rint) EXPR: the value of a trace variable (``p t3``) or an expression over them (``p
        t3.sum()``)."""
        if not arg.strip():
            self.say("p needs a name or an expression, e.g. 'p t0'")
            return False
        self.say(repr(self.debugger.evaluate(arg)))
        self._say_trace_name(arg)
        return False

    def do_pp(self, arg: str) -> bool:
        """pp EXPR: like p, pretty-printed."""
        if not arg.strip():
            self.say("pp needs a name or an expression, e.g. 'pp t0'")
            return False
        self.say(pprint.pformat(self.debugger.evaluate(arg)))
        self._say_trace_name(arg)
        return False

    def _say_trace_name(self, arg: str) -> None:
        name = arg.strip()
        if name.isidentifier() and name not in self.debugger.values and name not in self.debugger.scratch:
            binding = self.debugger.binding_of(name)
            if binding is not None:
                self.say(f"({binding})")

    def do_list(self, arg: str) -> bool:
        """l(ist): the computation trace around the current op ('->' marks it)."""
        d = self.debugger
        printed = print_trace(d.trace)
        lines = printed.source.splitlines()
        current_line = (
            next(
                (
                    n
                    for n, b in printed.bound_symbol_lines.items()
                    if b is d._levels[0].bound_symbols[min(d.index, len(d._levels[0].bound_symbols) - 1)]
                ),
                None,
            )
            if d.trace.bound_symbols
            else None
        )
        start = max((current_line or 1) - 5, 1)
        for n in range(start, min(start + 11, len(lines) + 1)):
            self.say(f"{n:4} {'->' if n == current_line and not d.finished else '  '} {lines[n - 1]}")
        return False

    def do_where(self, arg: str) -> bool:
        """w(here) / bt: the user's stack that recorded the current op (innermost last)."""
        stack = self.debugger.stack()
        if not stack:
            self.say("no user stack recorded for this op")
        selected = len(stack) - 1 - self.frame_offset
        for depth, frame in enumerate(stack):
            code = linecache.getline(frame.filename, frame.lineno).strip()
            mark = "> " if depth == selected and self.frame_offset else ""
            self.say(f"{'  ' * depth}{mark}{frame.filename}:{frame.lineno} in {frame.function}")
            if code:
                self.say(f"{'  ' * depth}  {code}")
        return False

    def do_diff(self, arg: str) -> bool:
        """diff: run the function eagerly and report the first op whose value differs. At a fused
        region (a call an executor made), compare its outputs with its ops run one by one on torch
        instead; 'diff all' always compares the whole call with eager."""
        current = self.debugger.current
        if arg.strip() != "all" and current is not None and is_lowered(current):
            self.say(str(self.debugger.diff_region()))
            return False
        found = self.debugger.diff()
        self.say("no divergence: every op matches eager" if found is None else str(found))
        return False

    def do_trace(self, arg: str) -> bool:
        """trace run | trace torch: restart on the trace that runs (fused regions as calls, 's'
        steps into one), or on the torch-level trace (the default), keeping the breakpoints."""
        choice = arg.strip()
        if choice not in ("run", "torch"):
            self.say("*** trace run | trace torch")
            return False
        old = self.debugger
        if old.entry is None:
            self.say("*** this debugger runs a given trace")
            return False
        self.debugger = Debugger(old.jfn, old.args, old.kwargs, executed=choice == "run")
        self.debugger.breakpoints += [p for p in old.breakpoints if p.index is None]
        self.frame_offset = 0
        self.say(f"restarted on the {'trace that runs' if choice == 'run' else 'torch-level trace'}: "
                 f"{len(self.debugger.trace.bound_symbols)} ops")
        self.show_current()
        return False

    def do_quit(self, arg: str) -> bool:
        """q(uit): leave the debugger."""
        return True

    def do_EOF(self, arg: str) -> bool:
        """End of input: leave the debugger."""
        return True

    do_n, do_s, do_c, do_cont, do_b, do_p = do_next, do_step, do_continue, do_continue, do_break, do_print
    do_l, do_w, do_bt, do_q, do_exit = do_list, do_where, do_where, do_quit, do_quit
    do_u, do_d = do_up, do_down


def _python_mode(text: str) -> str | None:
    """``"eval"`` for an expression, ``"exec"`` for other statements, None for what is not Python."""
    for mode in ("eval", "exec"):
        try:
            compile(text, "<jitcore-debug>", mode)
        except SyntaxError:
            continue
        return mode
    return None


def _statement(bsym: BoundSymbol) -> str:
    from jitcore.ir import Trace

    probe = Trace(name="probe", bound_symbols=[bsym], imports={})
    text = print_trace(probe, source=None).source.splitlines()
    line = next((row for row in text if row.startswith("  ") and not row.strip().startswith("#")), "")
    return line.strip().lstrip("# ").split("  # ")[0] if line else bsym.symbol.id


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 400 else text[:400] + " ..."
