"""All printing of traces: a trace becomes valid, runnable Python source.

Invariants:
- user-controlled text (names, strings, reprs, file names, source lines) never reaches the source
  as code: values print as Python literals (``repr`` of str/bytes/numbers), anything without a
  literal form becomes a constant bound by reference (``__c0``) that the caller passes as a global,
  and text inside comments is escaped to one printable line;
- one line per bound symbol, its outputs' metadata as a trailing comment; subsymbols follow as
  comments indented under their parent; after the statement that last uses an intermediate, a
  ``del`` line frees it (see Note [Deleting dead values]);
- names printed as code (function, parameters, imports, keywords) are checked identifiers;
- printing never changes the trace.
"""

from __future__ import annotations

import builtins
import keyword
import linecache
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jitcore.ir.names import RESERVED_NAMES
from jitcore.ir.proxy import Proxy
from jitcore.ir.symbol import BoundSymbol, SourceFrame
from jitcore.ir.trace import Trace
from jitcore.ir.tree import tree_has

__all__ = ["PrintedTrace", "print_trace", "proxies_in", "register_literal", "escape_comment",
           "describe_value"]

INDENT = "  "

# type -> function returning Python source for a value of that type (or None: bind it as a constant).
_LITERALS: dict[type, Callable[[Any], str | None]] = {}


def register_literal(cls: type, render: Callable[[Any], str | None]) -> None:
    """Teach the printer the literal form of ``cls`` values (e.g. ``torch.float32``)."""
    _LITERALS[cls] = render


def escape_comment(text: str) -> str:
    """``text`` as one printable comment line: control characters and line breaks escaped."""
    text = str(text)
    if text.isprintable():  # every character kept (a space is printable): most comments, at C speed
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def describe_value(value: Any) -> str:
    """The metadata comment for a proxy (``cpu f32[4, 4]``), or '' for values without one."""
    return value.describe() if isinstance(value, Proxy) else ""


@dataclass
class PrintedTrace:
    """Source text of a trace and the constants its code refers to by name."""

    source: str
    constants: dict[str, Any] = field(default_factory=dict)
    # 1-based line of the source -> the top-level bound symbol printed there (maps errors back).
    bound_symbol_lines: dict[int, BoundSymbol] = field(default_factory=dict)


class _Printer:
    def __init__(self, trace: Trace, source_mode: str | None) -> None:
        self.trace = trace
        self.source_mode = source_mode
        self.constants: dict[str, Any] = {}
        self._constant_names: dict[int, str] = {}
        self.lines: list[str] = []
        self.bound_symbol_lines: dict[int, BoundSymbol] = {}

    # --- values ------------------------------------------------------------------------------------
    def value(self, v: Any) -> str:
        if _is_proxy(v):
            return v.name
        t = type(v)
        if v is None or t is bool or v is Ellipsis:
            return repr(v)
        if t is str or t is bytes:
            return repr(v)
        if t is int:
            try:
                return repr(v)
            except ValueError:  # longer than sys.get_int_max_str_digits(): bind it instead
                return self.constant(v)
        if t is float:
            return _float(v)
        if t is complex:
            return f"complex({_float(v.real)}, {_float(v.imag)})"
        if t is tuple:
            inner = ", ".join(self.value(x) for x in v)
            return f"({inner},)" if len(v) == 1 else f"({inner})"
        if t is list:
            return "[" + ", ".join(self.value(x) for x in v) + "]"
        if t is dict:
            return "{" + ", ".join(f"{self.value(k)}: {self.value(x)}" for k, x in v.items()) + "}"
        if t is slice:
            return f"slice({self.value(v.start)}, {self.value(v.stop)}, {self.value(v.step)})"
        # Registered literals first: torch.Size is a tuple subclass with a literal form of its own.
        render = _LITERALS.get(t)
        text = render(v) if render is not None else None
        if text is not None:
            return text
        if isinstance(v, tuple):  # namedtuple or structseq (torch.return_types.max, ...)
            items = ", ".join(self.value(x) for x in v)
            cls = _import_path(t, self.trace.imports) or self.constant(t)
            if hasattr(t, "_fields") and not hasattr(t, "n_sequence_fields"):
                if _built_by_its_namedtuple(t):
                    return f"{cls}({items})"
                return f"{self.constant(tuple)}.__new__({cls}, ({items}{',' if len(v) == 1 else ''}))"
            return f"{cls}(({items}{',' if len(v) == 1 else ''}))"
        return self.constant(v)

    def constant(self, v: Any) -> str:
        name = self._constant_names.get(id(v))
        if name is None and self._builtin_name(v):  # ``bool``, ``len``: the generated code's builtins
            return v.__name__
        if name is None:
            name = self._class_name(v) or f"__c{len(self.constants)}"
            self._constant_names[id(v)] = name
            self.constants[name] = v
        return name

    def _builtin_name(self, v: Any) -> bool:
        name = getattr(v, "__name__", None)
        return (type(name) is str and getattr(builtins, name, None) is v and name not in self.trace.imports
                and name not in self.constants and name not in self.trace.names)

    def _class_name(self, v: Any) -> str | None:
        """A class constant is named after the class (``TwoTensor``) when that name is a plain
        identifier no other name of the trace uses (proxies, imports, builtins, other constants)."""
        if not isinstance(v, type):
            return None
        name = getattr(v, "__name__", None)
        # ASCII only: Python folds identifiers by NFKC, so a look-alike could name another global
        if (type(name) is not str or not name.isascii() or not name.isidentifier() or keyword.iskeyword(name)
                or name.startswith("__")
                or name in RESERVED_NAMES or name in self.trace.imports or name in self.constants
                or name in self.trace.names):
            return None
        return name

    def target(self, out: Any) -> str | None:
        """Assignment target for a bound symbol's output; None when it binds no proxy."""
        if _is_proxy(out):
            return out.name
        if isinstance(out, (tuple, list)) and tree_has(out, Proxy):
            parts = [self.target(o) or "_" for o in out]
            if type(out) is list:
                return "[" + ", ".join(parts) + "]"
            return "(" + ", ".join(parts) + (",)" if len(parts) == 1 else ")")
        return None

    # --- statements --------------------------------------------------------------------------------
    def call(self, bsym: BoundSymbol) -> str:
        callee = bsym.symbol.path or self.constant(bsym.symbol.fn)  # first: constants number in reading order
        parts = [self.value(a) for a in bsym.args]
        parts += [
            f"{k}={self.value(v)}" if _is_identifier(k) else f"**{{{self.value(k)}: {self.value(v)}}}"
            for k, v in bsym.kwargs.items()
        ]
        return f"{callee}({', '.join(parts)})"

    def statement(self, bsym: BoundSymbol) -> str:
        target = self.target(bsym.output)
        text = self.call(bsym) if target is None else f"{target} = {self.call(bsym)}"
        described = ((p.name, describe_value(p)) for p in proxies_in(bsym.output))
        meta = ", ".join(f'{name}: "{escape_comment(text)}"' for name, text in described if text)
        return f"{text}  # {meta}" if meta else text

    def bound_symbol(self, bsym: BoundSymbol, depth: int) -> None:
        pad = INDENT * (depth + 1)
        if depth == 0 and bsym.header:
            self.lines.append(f"{pad}# {escape_comment(bsym.header)}")
        if depth == 0:
            self.bound_symbol_lines[len(self.lines) + 1] = bsym
            self.lines.append(pad + self.statement(bsym))
        else:
            self.lines.append(f"{pad}# {self.statement(bsym)}")
        for sub in bsym.subsymbols:
            self.bound_symbol(sub, depth + 1)

    def source_comment(self, frames: tuple[SourceFrame, ...]) -> list[str]:
        chosen = frames if self.source_mode == "full" else frames[-1:]
        lines = []
        for f in chosen:
            code = linecache.getline(f.filename, f.lineno).strip()
            text = f"{_shown_path(f.filename)}:{f.lineno} in {f.function}" + (f": {code}" if code else "")
            lines.append(f"{INDENT}# {escape_comment(text)}")
        return lines

    def run(self) -> str:
        trace = self.trace
        params = ", ".join(_parameter(a.name if _is_proxy(a) else a) for a in trace.args)
        for i, line in enumerate(trace.header):
            text = escape_comment(line)
            # Python reads a saved file's encoding from a comment on its first two lines; a header
            # there must not choose one (``unicode_escape`` would decode a ``\u000a`` written in a
            # later comment as a line break when the printed trace is saved and run).
            self.lines.append("# " + (_COOKIE.sub(r"coding \1", text) if i < 2 else text))
        self.lines.extend(f"import {_dotted(name)}" for name in trace.imports)
        self.lines.append("")
        self.lines.append(f"def {_identifier(trace.name)}({params}):")
        for a in trace.args:
            if _is_proxy(a) and describe_value(a):
                note = trace.input_notes.get(a.name)
                self.lines.append(f'{INDENT}# {a.name}: "{escape_comment(describe_value(a))}"'
                                  + (f" {escape_comment(note)}" if note else ""))
        last_source: tuple | None = None
        dead = _dead_after(trace)
        for i, bsym in enumerate(trace.bound_symbols):
            if self.source_mode and bsym.source:
                key = _source_key(bsym.source, self.source_mode)
                if key != last_source:
                    self.lines.extend(self.source_comment(bsym.source))
                    last_source = key
            self.bound_symbol(bsym, 0)
            if dead[i]:
                self.lines.append(f"{INDENT}del {', '.join(dead[i])}")
        self.lines.append(f"{INDENT}return {self.value(trace.output)}")
        return "\n".join(self.lines) + "\n"


def _shown_path(filename: str) -> str:
    """An installed package's file as its import path shows it (``torch/nn/modules/linear.py``)."""
    _, found, inside = filename.replace("\\", "/").rpartition("/site-packages/")
    return inside if found else filename


def print_trace(trace: Trace, *, source: str | None = "innermost") -> PrintedTrace:
    """Render ``trace`` as Python source.

    Args:
        trace: the trace to print.
        source: ``"innermost"`` prints the user line above each group of ops, ``"full"`` the whole
            user stack, None no source lines.

    Returns:
        The source and the constants it refers to by name (to be passed as globals when run).
    """
    printer = _Printer(trace, source)
    text = printer.run()
    return PrintedTrace(text, printer.constants, printer.bound_symbol_lines)


_COOKIE = re.compile(r"coding([:=])")


def _is_identifier(name: Any) -> bool:
    return type(name) is str and name.isidentifier() and not keyword.iskeyword(name)


def _identifier(name: Any) -> str:
    """``name`` unchanged when it may appear in the source as a name; ValueError otherwise."""
    if not _is_identifier(name):
        raise ValueError(f"{name!r} cannot be printed as a Python name")
    return name


def _dotted(path: Any) -> str:
    """A module path such as ``torch.nn.functional``, checked part by part."""
    if type(path) is not str or not all(_is_identifier(part) for part in path.split(".")):
        raise ValueError(f"{path!r} cannot be printed as a module name")
    return path


def _parameter(name: Any) -> str:
    """A parameter of the generated function: a name, ``*name`` or ``**name``."""
    stars = len(name) - len(name.lstrip("*")) if type(name) is str else 0
    return "*" * stars + _identifier(name[stars:] if 0 < stars <= 2 else name)


def _source_key(frames: tuple[SourceFrame, ...], mode: str) -> tuple:
    """What must change for a new source comment: the lines of the frames printed."""
    chosen = frames if mode == "full" else frames[-1:]
    return tuple((f.filename, f.lineno, f.function) for f in chosen)


def _dead_after(trace: Trace) -> list[list[str]]:
    """For each top-level bound symbol, the names no later statement reads (in order of definition).

    Note [Deleting dead values]: a trace names every intermediate, so without ``del`` all of them
    stay alive until the function returns. Hand-written code rebinds one variable and frees each
    value as soon as it is replaced; keeping them alive costs memory and, for tensors that do not
    fit in cache, several times the run time (benchmarks/bench_trace_execution.py). Inputs and
    outputs are never deleted.
    """
    keep = {p.name for p in proxies_in(trace.output)} | {a.name for a in trace.args if _is_proxy(a)}
    last: dict[str, int] = {}
    for i, bsym in enumerate(trace.bound_symbols):
        for p in proxies_in((bsym.args, bsym.kwargs)) + _bound(bsym.output):
            last[p.name] = i
    dead: list[list[str]] = [[] for _ in trace.bound_symbols]
    for name, i in last.items():
        if name not in keep:
            dead[i].append(name)
    return dead

# Note [A namedtuple literal that runs no user code]
# A namedtuple is printed as its class called with its fields (``P(4)``), which makes a fresh one per call as
# eagerly. Where a subclass overrides ``__new__`` or ``__init__`` (``class Q(P): def __new__(cls, v): return
# super().__new__(cls, v * 2)``), calling the class again runs the program's code on the fields it made:
# the jitted call returned ``Q(x=8)`` where eager returned ``Q(x=4)``. Such a literal is
# ``tuple.__new__(Q, (4,))``: the same fields, no user code.
def _built_by_its_namedtuple(t: type) -> bool:
    """Whether calling the namedtuple class ``t`` with its fields runs only its namedtuple's ``__new__``."""
    base = next((k for k in t.__mro__ if "_fields" in vars(k)), None)
    return base is not None and t.__new__ is base.__new__ and t.__init__ is base.__init__


def _import_path(obj: Any, imports: dict[str, Any]) -> str | None:
    """``torch.return_types.max`` for that class when the trace imports ``torch``; None otherwise."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if type(module) is not str or type(qualname) is not str:
        return None
    first, *rest = f"{module}.{qualname}".split(".")
    found = imports.get(first)
    try:
        for part in rest:
            found = getattr(found, part, None)
    except Exception:  # noqa: BLE001 - a module's __getattr__ may raise anything: not importable
        return None
    path = f"{module}.{qualname}"
    return path if found is obj and all(_is_identifier(p) for p in path.split(".")) else None


def _bound(out: Any) -> list[Any]:
    """The proxies that the assignment to ``_Printer.target(out)`` binds."""
    if _is_proxy(out):
        return [out]
    if isinstance(out, (tuple, list)):
        return [p for o in out for p in _bound(o)]
    return []


def _float(x: float) -> str:
    if math.isnan(x):
        return "-float('nan')" if math.copysign(1.0, x) < 0 else "float('nan')"
    if math.isinf(x):
        return "float('inf')" if x > 0 else "-float('inf')"
    return repr(x)


def _is_proxy(v: Any) -> bool:
    return isinstance(v, Proxy)


def proxies_in(v: Any) -> list[Any]:
    """Every proxy in ``v`` (nested tuples, lists, dicts, slices): those ``_Printer.value`` would
    print for it, in printing order."""
    if _is_proxy(v):
        return [v]
    if isinstance(v, (tuple, list)):
        return [p for x in v for p in proxies_in(x)]
    if type(v) is dict:
        return [p for kv in v.items() for x in kv for p in proxies_in(x)]
    if type(v) is slice:
        return proxies_in((v.start, v.stop, v.step))
    return []
