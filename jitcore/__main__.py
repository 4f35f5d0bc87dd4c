"""``python -m jitcore``: explain, debug or run a jitted function defined in a script.

The script convention: ``FILE`` defines ``FUNCTION`` (a plain function, an ``nn.Module`` instance,
or one already wrapped by ``jitcore.jit``) and ``example_inputs()`` returning ``(args, kwargs)``.
The script is loaded with ``__name__ == "__jitcore_example__"``, so its ``if __name__ ==
"__main__"`` block does not run.

    python -m jitcore explain examples/debug_mlp.py:mlp   # cache entries, checks, traces, retraces
    python -m jitcore debug examples/debug_mlp.py:mlp     # step through the computation trace
    python -m jitcore run examples/debug_mlp.py:mlp       # call it; report an error with jitcore.report
"""

from __future__ import annotations

import argparse
import runpy
import sys
from typing import Any

__all__ = ["main"]


def load(target: str) -> tuple[Any, tuple, dict]:
    """``FILE:FUNCTION`` -> (jitted function, args, kwargs).

    Raises:
        SystemExit: the target is malformed or the script lacks a name it must define.
    """
    from jitcore.jit.api import JittedFunction, jit

    filename, sep, name = target.rpartition(":")
    if not sep or not filename or not name:
        raise SystemExit(f"expected FILE:FUNCTION, got {target!r}")
    namespace = runpy.run_path(filename, run_name="__jitcore_example__")
    if name not in namespace:
        raise SystemExit(f"{filename} defines no {name!r}")
    if "example_inputs" not in namespace:
        raise SystemExit(f"{filename} defines no example_inputs() returning (args, kwargs)")
    fn = namespace[name]
    jfn = fn if isinstance(fn, JittedFunction) else jit(fn)
    args, kwargs = namespace["example_inputs"]()
    return jfn, tuple(args), dict(kwargs)


SCRIPT_HELP = """\
FILE must define FUNCTION (a function, an nn.Module instance, or a jitcore.jit result)
and example_inputs(), returning (args, kwargs) for one call. For example, model.py:

    import torch

    def model(x, w):
        return torch.relu(x @ w)

    def example_inputs():
        return (torch.randn(4, 8), torch.randn(8, 3)), {}

then:

    python -m jitcore explain model.py:model
    python -m jitcore debug model.py:model     # 'help' at the (jitcore-debug) prompt lists commands
    python -m jitcore run model.py:model

The script is loaded with __name__ == "__jitcore_example__": its `if __name__ == "__main__":`
block does not run. See docs/debugging.md.
"""


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m jitcore",
        description=__doc__.splitlines()[0],
        epilog=SCRIPT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for command, text in (
        ("explain", "what the jit did for one call"),
        ("debug", "step through the trace of one call"),
        ("run", "call the function once; report an error"),
    ):
        sub = commands.add_parser(
            command,
            help=text,
            description=text,
            epilog=SCRIPT_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument(
            "target", metavar="FILE:FUNCTION", help="a script defining FUNCTION and example_inputs()"
        )
    options = parser.parse_args(argv)
    jfn, args, kwargs = load(options.target)
    from jitcore.debug.explain import explain
    from jitcore.debug.report import report

    if options.command == "debug":
        from jitcore.debug.debugger import Debugger
        from jitcore.debug.shell import DebuggerShell

        shell = DebuggerShell(Debugger(jfn, args, kwargs), stdin=sys.stdin, stdout=sys.stdout)
        shell.cmdloop()
        return 0
    try:
        result = jfn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported to the user, then the exit status says it failed
        report(exc)
        return 1
    if options.command == "explain":
        explain(jfn)
    else:
        print(f"result: {result!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
