"""The prologue: straight-line code that validates a call against a cache entry and unpacks it.

A Prologue is built from the guards recorded while tracing and the paths of the computation's
inputs. It renders to two functions from the same statements:
- ``prologue(args, kwargs)``: the printable trace a user reads; returns the computation's inputs,
  or None when a guard fails;
- ``cached_call(args, kwargs)``: the fast path the jit runs; the same checks, then a direct call of
  the compiled computation; returns the MISS sentinel when a guard fails. A grouped check that
  offers its guards runs them in place there (Note [Grouped checks inlined in the fast path]): the
  two functions accept exactly the same calls.
Invariants: every path is read once into a local; checks run in recording order (parents before
children); a check that raises (a missing key, a too-short tuple) counts as a failed guard; user
text reaches the source only as bound constants (see paths.py and guards.py).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from jitcore.ir import compile_source
from jitcore.prologue.guards import Guard, StateGuard
from jitcore.prologue.paths import Path
from jitcore.prologue.tensor_checks import applies, render_tensor_failure_fast, render_tensor_run_failure_fast

__all__ = ["MISS", "MissReason", "Prologue", "PrologueBuilder", "inlined_guards"]


class _Miss:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"


MISS: Any = _Miss()


@dataclass(frozen=True, slots=True)
class MissReason:
    """Why a call did not match a cache entry: the failing check, expected vs got."""

    entry: int
    where: str
    detail: str
    check: str = ""  # the failing guard's sentence (Note [Guard sentences] in guards.py)

    def __str__(self) -> str:
        place = f"{self.where}: " if self.where else ""
        needs = f" (the check: {self.check})" if self.check else ""
        return f"cache entry {self.entry}: {place}{self.detail}{needs}"


@dataclass(frozen=True, eq=False)
class Prologue:
    """Guards and input unpacking of one cache entry: a finished record (``PrologueBuilder.build``).

    Attributes:
        guards: checks on values reached through paths, in recording order.
        state: checks on implicit state (grad mode, default dtype, ...).
        inputs: paths of the computation trace's inputs, in its argument order.
        input_names: the computation's parameter names for those inputs (parallel to ``inputs``).
        header: comment lines naming what produced the prologue.
    """

    guards: tuple[Guard, ...] = ()
    state: tuple[StateGuard, ...] = ()
    inputs: tuple[Path, ...] = ()
    input_names: tuple[str, ...] = ()
    header: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("guards", "state", "inputs", "input_names", "header"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if len(self.inputs) != len(self.input_names):
            raise ValueError("a prologue's inputs and input names differ in length")

    def sentences(self) -> list[str]:
        """The checks in words, one per guard, then the implicit state: what explain, the
        ``jitcore.guards`` log and miss messages say (Note [Guard sentences] in guards.py)."""
        return [g.describe() for g in self.guards] + [s.describe() for s in self.state]

    def _render(self, name: str, miss: str, inline: bool = False) -> tuple[str, dict[str, Any], list[str]]:
        """Source of the checks (without the final return), its constants, the input variables.
        ``inline``: a grouped check that offers its guards is rendered as those guards, in place
        (Note [Grouped checks inlined in the fast path]), and a tensor guard starts with one C call
        (Note [Tensor checks in one C call], tensor_checks.py)."""
        constants: dict[str, Any] = {}
        by_id: dict[int, str] = {}

        # what the guard being rendered reads: names the objects it binds (a Path is described only
        # when it names one: most guards bind nothing new)
        hint: list[str | Path] = [""]

        def bind(obj: Any) -> str:
            found = by_id.get(id(obj))
            if found is None:
                where = hint[0]
                where = hint[0] = where if type(where) is str else where.describe()
                found = by_id[id(obj)] = _constant_name(obj, where, constants)
                constants[found] = obj
            return found

        variables: dict[Path, str] = {}
        lines: list[str] = []
        locals_made = [0]  # ``v0``, ``v1``, ...: one per path with steps, in reading order

        def var(path: Path) -> str:
            if path in variables:
                return variables[path]
            if not path.steps:
                root = path.root
                hint[0] = f"root:{root.label}"  # a bound object is named after its label (``__self``)
                expr = root.kind if root.kind in ("args", "kwargs") else bind(root.obj)
            else:
                base = var(path.parent)  # type: ignore[arg-type]
                expr = f"v{locals_made[0]}"
                locals_made[0] += 1
                lines.append(f"  {expr} = {path.render_step(base, bind)}")
            variables[path] = expr
            return expr

        def flat(guards: tuple[Guard, ...]) -> Iterable[Guard]:
            for guard in guards:
                grouped = inlined_guards(guard) if inline else None
                if grouped is not None:
                    yield from flat(grouped)
                else:
                    yield guard

        def render(guards: list[Guard]) -> None:
            i = 0
            while i < len(guards):
                run = _tensor_run(guards, i) if inline else 1
                if run > 1 and render_run(guards[i:i + run]):
                    i += run
                    continue
                guard = guards[i]
                i += 1
                v = var(guard.path)
                related = tuple(var(p) for p in guard.related)
                hint[0] = guard.path
                failure = None
                if inline and guard.kind == "tensor":  # Note [Tensor checks in one C call]
                    failure = render_tensor_failure_fast(v, guard.expected, bind, functools.partial(
                        _render_tensor_guard, guard.path, v, bind))
                if failure is None:
                    failure = guard.render_failure(v, bind, related)
                lines.append(f"  if {failure}: return {miss}")

        def render_run(run: list[Guard]) -> bool:
            """A run of tensor guards in one C call (Note [A run of tensor checks in one C call],
            tensor_checks.py); False, rendering nothing, where it does not apply."""
            tensors = [(var(guard.path), guard.expected) for guard in run]  # (reads only: lines kept)
            hint[0] = run[0].path
            paths = {v: guard.path for (v, _), guard in zip(tensors, run, strict=True)}
            failure = render_tensor_run_failure_fast(
                tensors, bind, lambda v, spec: _render_tensor_guard(paths[v], v, bind, spec))
            if failure is None:
                return False
            lines.append(f"  if {failure}: return {miss}")
            return True

        render(list(flat(self.guards)))
        for state in self.state:
            lines.append(f"  if {state.render_failure(bind)}: return {miss}")
        inputs = [var(p) for p in self.inputs]
        body = "\n".join(lines) if lines else "  pass"
        header = "".join(f"# {_escape(line)}\n" for line in self.header)
        source = (
            f"{header}import torch\n\n"
            f"def {name}(args, kwargs):\n"
            f"  try:\n{_indent(body)}\n"
            f"  except Exception:\n    return {miss}\n"
        )
        return source, constants, inputs

    def __str__(self) -> str:
        source, _, inputs = self._render("prologue", "None")
        return source + f"  return ({', '.join(inputs)}{',' if len(inputs) == 1 else ''})\n"

    def compile(self, computation: Callable[..., Any]) -> Callable[[tuple, dict], Any]:
        """The fast path: the checks, then ``computation(*inputs)``; MISS when a check fails."""
        source, constants, inputs = self._render("cached_call", "__MISS", inline=True)
        source += f"  return __computation({', '.join(inputs)})\n"
        namespace = {"torch": torch, "__MISS": MISS, "__computation": computation, **constants}
        return compile_source(source, "cached_call", namespace, tag="prologue", fast_imports=("torch",))

    def explain(self, args: tuple, kwargs: dict) -> tuple[str, str, str] | None:
        """The first failing check for this call as (where, detail, the check's sentence); None
        when all pass. The checks read the tensors with subclass ``__torch_function__`` off, as the
        fast path's do (a logging class logs no ``__get__`` for a miss)."""
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
            return self._first_failure(args, kwargs)

    def _first_failure(self, args: tuple, kwargs: dict) -> tuple[str, str, str] | None:
        for guard in self.guards:
            try:
                value = guard.path.get(args, kwargs)
                related = tuple(p.get(args, kwargs) for p in guard.related)
            except Exception as exc:  # noqa: BLE001 - a missing element is a failed guard
                detail = f"could not be read ({type(exc).__name__}: {exc})"
                return guard.path.describe(), detail, guard.describe()
            try:
                detail = guard.failure(value, related)
            except Exception as exc:  # noqa: BLE001
                detail = f"could not be checked ({type(exc).__name__}: {exc})"
            if detail is not None:
                where = guard.path.describe()
                if detail.startswith("."):
                    attribute, _, detail = detail.partition(": ")
                    where += attribute
                return where, detail, guard.describe()
        for state in self.state:
            detail = state.failure()
            if detail is not None:
                return "", detail, ""  # the detail names the state already
        return None


class PrologueBuilder:
    """A prologue being recorded: a tracing pass, then the stages after it, add to it; ``build``
    makes the finished, immutable Prologue of the cache entry.

    ``guards`` and ``state`` are read while recording (what is guarded already); the computation's
    inputs grow only through ``add_input`` (``inputs`` and ``input_names`` stay parallel).
    """

    __slots__ = ("header", "guards", "state", "_inputs", "_input_names")

    def __init__(self, header: list[str] | tuple[str, ...] = ()) -> None:
        self.header = tuple(header)
        self.guards: list[Guard] = []
        self.state: list[StateGuard] = []
        self._inputs: list[Path] = []
        self._input_names: list[str] = []

    @property
    def inputs(self) -> tuple[Path, ...]:
        """The paths of the computation's inputs so far, in its argument order."""
        return tuple(self._inputs)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self._input_names)

    def add_guard(self, guard: Guard) -> None:
        """Check ``guard`` after the guards added before it."""
        self.guards.append(guard)

    def add_state(self, guards: Iterable[StateGuard]) -> None:
        """Check the implicit state ``guards`` after the path guards."""
        self.state.extend(guards)

    def add_input(self, path: Path, name: str) -> None:
        """Make the value at ``path`` the computation's next input, its parameter named ``name``: the
        one way the inputs grow."""
        self._inputs.append(path)
        self._input_names.append(name)

    def drop_inputs(self, positions: Collection[int]) -> None:
        """Remove the computation inputs at ``positions``."""
        self._inputs = [p for i, p in enumerate(self._inputs) if i not in positions]
        self._input_names = [n for i, n in enumerate(self._input_names) if i not in positions]

    def pin_layout(self, path: Path, strides: tuple[int | None, ...], storage_offset: int | None) -> None:
        """Make the tensor guard at ``path`` check the input's strides and storage offset too (a
        trace recorded after the guards were made relied on them: the grad transform's)."""
        for i, guard in enumerate(self.guards):
            if guard.kind == "tensor" and guard.path == path and guard.expected.strides is None:
                spec = dataclasses.replace(
                    guard.expected, strides=tuple(strides), storage_offset=storage_offset
                )
                self.guards[i] = Guard(path, "tensor", spec)

    def copy(self) -> PrologueBuilder:
        """Another builder holding what this one recorded so far (added to apart from it)."""
        other = PrologueBuilder(self.header)
        other.guards, other.state = list(self.guards), list(self.state)
        other._inputs, other._input_names = list(self._inputs), list(self._input_names)
        return other

    def build(self) -> Prologue:
        """The finished prologue: what was recorded so far, as an immutable record."""
        return Prologue(tuple(self.guards), tuple(self.state), tuple(self._inputs), tuple(self._input_names),
                        self.header)

    def __str__(self) -> str:
        return str(self.build())


# Note [Named constants]: a prologue binds the objects its checks compare with (types, dtypes,
# helper functions, the objects of identity checks) as constants; each is named after what it is
# (``__Tensor``, ``__float32``, ``__same_contents``) or, for an object of an identity check, after
# the path it checks (``__is_self__backward_hooks``), so that a printed prologue reads on its own.
# Names are ASCII identifiers starting with ``__``: they never meet the prologue's own names.
_RESERVED = frozenset({"__MISS", "__computation"})


def _render_tensor_guard(path: Path, v: str, bind: Callable[[Any], str], spec: Any) -> str:
    return Guard(path, "tensor", spec).render_failure(v, bind)


def _tensor_run(guards: list[Guard], start: int) -> int:
    """How many guards from ``start`` on form a run of tensor guards checked in one C call: consecutive
    tensor guards the C check applies to, none read through another of the run (Note [A run of tensor
    checks in one C call], tensor_checks.py)."""
    paths: list[Path] = []
    for guard in guards[start:]:
        if guard.kind != "tensor" or guard.related or not applies(guard.expected) \
                or any(_starts_with(guard.path, p) for p in paths):
            break
        paths.append(guard.path)
    return len(paths)


def _starts_with(path: Path, prefix: Path) -> bool:
    return path.root == prefix.root and path.steps[:len(prefix.steps)] == prefix.steps


def inlined_guards(guard: Guard) -> tuple[Guard, ...] | None:
    """The guards a grouped check (a ``check`` guard calling a bound object) stands for, when that
    object offers them as ``inlined_guards``; None otherwise."""
    path = guard.path
    if guard.kind != "check" or path.root.kind != "bound" or len(path.steps) != 1:
        return None
    return getattr(path.root.obj, "inlined_guards", None)


# Note [Grouped checks inlined in the fast path]: a grouped check (``__state_of_Sequential()``, Note
# [Module state as one check] in jit/module_guards.py) is one line of the printed prologue and one
# explanation on a miss, but calling it on every hit cost a Python call, the group's own generated
# function, its argument tuple and dict, and reading again the paths the entry's prologue reads after
# it (``self._modules``, the parameters). Its object offers its guards (``inlined_guards``), and the
# compiled fast path renders those in place: the same checks in the same order, each returning the miss
# where the group's function returned one, so the fast path accepts exactly what it accepted before;
# paths read by both share one variable (paths compare their bound roots by identity). ``__str__``,
# ``explain`` and the guards log still show and run the group as one check.


def _constant_name(obj: Any, hint: str, taken: dict[str, Any]) -> str:
    """A fresh identifier for the constant ``obj`` bound while rendering a check of ``hint``."""
    if hint.startswith("root:"):
        stem = hint.removeprefix("root:")
    elif issubclass(type(obj), type):
        stem = obj.__qualname__
    elif issubclass(type(obj), torch.dtype):
        stem = str(obj).removeprefix("torch.")
    elif issubclass(type(obj), torch.device):
        stem = f"device_{obj}"
    elif callable(obj) and isinstance(getattr(obj, "__name__", None), str):
        stem = obj.__name__
    elif issubclass(type(obj), str) and obj.isidentifier():
        stem = f"str_{obj}"
    elif issubclass(type(obj), (tuple, str, bytes, int, float, complex, frozenset)):
        stem = f"{type(obj).__name__}_for_{hint}" if hint else type(obj).__name__
    else:
        stem = f"is_{hint}" if hint else type(obj).__name__
    stem = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", stem)).strip("_")
    if len(stem) > 40:  # the end of a path names the object; its start is shared by its siblings
        prefix = "is_" if stem.startswith("is_") else ""
        tail = stem[-(40 - len(prefix)) :]
        if stem[-len(tail) - 1] != "_":
            tail = tail.partition("_")[2] or tail  # start at a word
        stem = prefix + tail.lstrip("_")
    stem = stem or "c"
    name, n = f"__{stem}", 2
    while name in taken or name in _RESERVED:
        name, n = f"__{stem}_{n}", n + 1
    return name


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _escape(text: str) -> str:
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
