"""Grouped checks of module state: a module prologue's checks of its own state as one check.

``group_state_guards`` compiles the checks of the module's state into one (Note [Module state as one
check], below). Before that, ``group_hook_guards`` makes the hooks of every submodule one fast check:

Calling a submodule runs ``torch.nn.Module.__call__``, which reads five attributes of it
(``_compiled_call_impl`` and four hook dicts) before its forward. Guarded one by one, a module of 30
submodules gets 270 prologue lines (the dict's identity, then its length, for each). What the trace
relied on is only that none of them has a hook nor a compiled call: ``group_hook_guards`` replaces
those guards by one check that walks the submodules (a fixed tuple: their identity is guarded where
they are read) and names the first one that gained a hook.

Invariants:
- only guards that pin the state "no hook, not compiled" are grouped; a submodule that had a hook
  while tracing keeps its own guards (the trace depends on that hook);
- the group check fails exactly when one of the replaced guards would have failed on a hook being
  added (a dict swapped for another empty dict passes: ``Module.__call__`` only tests it for
  emptiness);
- the check is a guard like any other: printed in the prologue, explained on a miss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from jitcore.jit.state_names import qualified_name
from jitcore.prologue import MISS, Guard, Path, Prologue, Root

__all__ = ["ModuleState", "SubmoduleHooks", "group_hook_guards", "group_state_guards"]

_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_GROUPED = frozenset((*_HOOK_DICTS, "_compiled_call_impl"))


class SubmoduleHooks:
    """Called by a prologue: None while no module in ``modules`` has a hook or a compiled call;
    otherwise which one does (the guard's explanation)."""

    __slots__ = ("modules", "names")

    def __init__(self, modules: tuple[torch.nn.Module, ...], names: tuple[str, ...]) -> None:
        self.modules = modules
        self.names = names

    def __call__(self) -> str | None:
        for m in self.modules:
            if (m._forward_pre_hooks or m._forward_hooks or m._backward_pre_hooks or m._backward_hooks
                    or m._compiled_call_impl is not None):
                return self._which(m)
        return None

    def _which(self, module: torch.nn.Module) -> str:
        name = self.names[self.modules.index(module)]
        found = [d.strip("_").replace("_", " ") for d in _HOOK_DICTS if getattr(module, d)]
        if module._compiled_call_impl is not None:
            found.append("compiled call (module.compile())")
        return f"{name} has {', '.join(found)}"

    def __repr__(self) -> str:
        return f"no hooks on {len(self.modules)} submodules"


def group_hook_guards(prologue: Prologue) -> Prologue:
    """``prologue`` with its per-submodule hook guards replaced by one SubmoduleHooks check.

    Args:
        prologue: a finished pass's prologue (guards on state reached through bound objects are
            read from those objects now, as the trace saw them).
    """
    grouped: dict[Path, list[Guard]] = {}
    for guard in prologue.guards:
        owner = _hook_owner(guard)
        if owner is not None:
            grouped.setdefault(owner, []).append(guard)
    modules, names, dropped = [], [], set()
    for owner, guards in grouped.items():
        if not all(_pins_no_hook(g) for g in guards):
            continue  # a hook the trace ran: its own guards stay
        try:
            module = owner.get((), {})
        except Exception:  # noqa: BLE001 - not readable without the call: leave its guards alone
            continue
        if not isinstance(module, torch.nn.Module):
            continue
        modules.append(module)
        names.append(qualified_name(owner) or owner.describe())
        dropped.update(id(g) for g in guards)
    if not modules:
        return prologue
    check = SubmoduleHooks(tuple(modules), tuple(n if n != "self" else "the module" for n in names))
    label = f"hooks_of_{len(modules)}_submodules"
    group = Guard(Path(Root("bound", label, check)).call(), "check", None)
    first = next(i for i, g in enumerate(prologue.guards) if id(g) in dropped)
    kept = [g for g in prologue.guards if id(g) not in dropped]
    kept.insert(first, group)
    return dataclasses.replace(prologue, guards=tuple(kept))


def _hook_owner(guard: Guard) -> Path | None:
    """The path of the module whose hook dict (or ``_compiled_call_impl``) the guard reads."""
    path = guard.path
    if path.root.kind != "bound" or not path.steps:
        return None
    last = path.steps[-1]
    if last.kind != "attr" or last.value not in _GROUPED:
        return None
    return path.parent


def _pins_no_hook(guard: Guard) -> bool:
    attribute = guard.path.steps[-1].value
    if attribute == "_compiled_call_impl":
        return guard.kind == "value" and guard.expected is None
    return guard.kind == "identity" or (guard.kind == "len" and guard.expected == 0)


class ModuleState:
    """Called by a prologue: None while the jitted module's state passes every grouped check (its
    own compiled prologue, ``checks``); otherwise the first failing one, in words."""

    __slots__ = ("checks", "_run")

    def __init__(self, checks: Prologue) -> None:
        self.checks = checks
        # compiled on the first call: the entry's fast path runs these guards in place (Note [Grouped
        # checks inlined in the fast path]), so most entries never call this one (a module with many
        # parameters spent a third of its prologue's finishing time compiling it)
        self._run: Callable[[tuple, dict], Any] | None = None

    @property
    def inlined_guards(self) -> tuple[Guard, ...]:
        """The grouped guards, for the entry's fast path to render in place (Note [Grouped checks
        inlined in the fast path], prologue/prologue.py)."""
        return self.checks.guards

    def __call__(self) -> str | None:
        if self._run is None:
            self._run = self.checks.compile(_accept)
        if self._run((), {}) is not MISS:
            return None
        why = self.checks.explain((), {})
        if why is None:
            return "a check failed"
        # torch's bookkeeping in a failing check's path, as a user names it: self.__dict__['_modules']
        # ['blocks']._modules['0'].__dict__['_parameters']['weight'] -> self.blocks.0.weight
        paths = {g.path.describe(): qualified_name(g.path) for g in self.checks.guards}
        names = sorted(((d, f"self.{q}") for d, q in paths.items() if q), key=lambda p: -len(p[0]))
        where = next((name + why[0][len(d):] for d, name in names if why[0].startswith(d)), why[0])
        return f"{where}: {why[1]}"

    def __repr__(self) -> str:
        return f"{len(self.checks.guards)} checks of the module's state"


def group_state_guards(prologue: Prologue, module: torch.nn.Module) -> Prologue:
    """``prologue`` with the checks of ``module``'s state moved into one ModuleState check (Note
    [Module state as one check]).

    Args:
        prologue: a finished pass's prologue of ``module``'s forward, bound to it as ``self``.
        module: the jitted module.
    """
    classes = {type(m) for m in module.modules()}
    grouped = [g for g in prologue.guards if _is_state_check(g, module, classes)]
    if len(grouped) < 2:
        return prologue
    dropped = {id(g) for g in grouped}
    check = ModuleState(Prologue(guards=grouped))
    label = f"state_of_{type(module).__name__}"
    group = Guard(Path(Root("bound", label, check)).call(), "check", None)
    kept = [g for g in prologue.guards if id(g) not in dropped]
    last = len(kept) if not kept or kept[-1].kind != "distinct" else len(kept) - 1
    kept.insert(last, group)  # after the cheap checks of the call's arguments
    return dataclasses.replace(prologue, guards=tuple(kept))


def _is_state_check(guard: Guard, module: torch.nn.Module, classes: set[type]) -> bool:
    """A check that reads only the module (``self``), its submodules' classes or a hook group."""
    if guard.kind in ("alias", "distinct"):
        return False  # relational: they read the call's arguments too
    root = guard.path.root
    if root.kind != "bound":
        return False
    return ((root.label == "self" and root.obj is module) or isinstance(root.obj, SubmoduleHooks)
            or (isinstance(root.obj, type) and root.obj in classes))


def _accept() -> None:
    return None


# Note [Module state as one check]: a module's forward reads a great deal of state that is not an
# input: its submodules through their registries, their classes' forward methods, attributes such as
# ``eps``, and its parameters' and buffers' metadata. Each read is guarded where it happened, so that
# a change anywhere retraces; printed one by one those guards are most of a module prologue, and grow
# with every submodule and parameter. They are compiled instead into a prologue of their own, called
# from the entry's prologue as one check (``__state_of_Decoder()``): the same generated checks, in the
# same order, so nothing is checked less; a failure is explained by that prologue (which check of which
# path, expected vs got). What stays in the entry's prologue: the call's arguments, globals and
# torch's global hook registries, the reads of the inputs, aliasing between inputs, implicit state.
