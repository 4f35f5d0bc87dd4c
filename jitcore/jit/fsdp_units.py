"""FSDP2 (``fully_shard``) under jitcore: its hooks run eagerly, each sharded module's forward is jitted.

Note [FSDP2: hooks eager, each unit's forward jitted]
``fully_shard(module)`` registers forward pre/post hooks on the module (FSDP's *unit*) that
all-gather its parameters into storage they resize in place (``untyped_storage().resize_``), swap
the module's ``nn.Parameter`` s for the unsharded ones and back, and register autograd hooks
(``RegisterPostBackwardFunction`` on the inputs, multi-grad hooks on the outputs, an engine callback)
that all-gather again before the backward and reduce-scatter the gradients after it. None of that is
modelled by a trace: storage resizes, parameter swaps, and hooks that must fire inside torch's own
backward. So jitcore splits the work where FSDP's hooks are, as torch.compile's per-block recipe does:

- the hooks always run eagerly, on real tensors: interpreting code that reaches one (``_pre_forward``,
  ``_post_forward``, ``fsdp_lookasides``) raises ``FSDPHooksReached`` before any hook code runs (the
  FSDP state is never left half-updated), and the call becomes an eager entry (Note [Eager entries],
  jit/api.py);
- that eager entry runs the function with every unit's ``forward`` jitted (``units_jitted``): between
  its hooks, a unit's forward sees its unsharded parameters (plain ``nn.Parameter`` s, the same
  objects every step, so the entry is hit) and is traced like ``jitcore.jit(unit.forward)``; its
  backward runs through torch's autograd, whose engine fires FSDP's backward hooks around the traced
  backward as it does eagerly, and reads the saved parameters after FSDP has gathered them again;
- a unit whose forward calls other units (the root of a nested ``fully_shard``) reaches their hooks
  while it is traced, so it becomes an eager entry the same way: its own ops (an embedding, a final
  norm) run eagerly, its units' forwards jitted. What is traced is the compute of each innermost unit.

The patch is an instance attribute ``forward`` set for the call and removed after it (never on a
unit whose ``forward`` the user set on the instance); one JittedFunction per unit is kept for the
unit's life (a WeakKeyDictionary), with the options of the jit whose call met FSDP, and made anew
when the unit's class has another ``forward`` (a jitted bound method keeps running the method it
was given: Note [A jitted bound forward], jit/module.py). A cached call of
the outer function still runs eagerly around the units (its Python, the optimizer step, FSDP's
collectives); the units' entries are hit. Not thread-safe across threads calling the same units.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from jitcore.errors import EagerOnlyValue

__all__ = ["FSDPHooksReached", "eager_call", "fsdp_lookasides", "jitted_unit", "units_jitted"]

_STATE_MODULE = "torch.distributed.fsdp._fully_shard._fsdp_state"
# unit -> its jitted forward (Note [FSDP2: hooks eager, each unit's forward jitted])
_JITTED: weakref.WeakKeyDictionary[torch.nn.Module, Any] = weakref.WeakKeyDictionary()


class FSDPHooksReached(EagerOnlyValue):
    """Tracing reached a hook of a ``fully_shard`` module: the call runs eagerly around FSDP's hooks,
    with each unit's forward jitted (Note [FSDP2: hooks eager, each unit's forward jitted])."""

    def __init__(self, module: torch.nn.Module | None) -> None:
        name = type(module).__name__ if module is not None else "module"
        super().__init__(
            f"a fully_shard (FSDP2) module's forward hook is reached ({name}): FSDP's hooks, which "
            "all-gather parameters into storage resized in place and swap the module's parameters, run "
            "eagerly, and each fully_shard module's forward runs jitted between them"
        )
        self.module = weakref.ref(module) if module is not None else None


def fsdp_lookasides() -> dict[Any, Any]:
    """FSDP2's forward hooks, when FSDP2 is imported: reaching one raises ``FSDPHooksReached``
    before any of its code runs."""
    module = sys.modules.get(_STATE_MODULE)
    if module is None:
        return {}
    return {vars(module.FSDPState)[name]: _refuse for name in ("_pre_forward", "_post_forward")}


def _refuse(state: Any, module: Any = None, *args: Any, **kwargs: Any) -> Any:
    raise FSDPHooksReached(module if isinstance(module, torch.nn.Module) else None)


def eager_call(reason: BaseException | None, fn: Callable[..., Any],
               options: dict[str, Any]) -> Callable[..., Any]:
    """How an eager entry whose reason is ``reason`` runs ``fn``: as is, or, when FSDP's hooks were
    reached, with the units' forwards jitted (``options``: the jit's, given to them)."""
    if not isinstance(reason, FSDPHooksReached) or reason.module is None:
        return fn
    met = reason.module

    def run(*args: Any, **kwargs: Any) -> Any:
        module = met()
        if module is None:
            return fn(*args, **kwargs)
        with units_jitted(module, options):
            return fn(*args, **kwargs)

    return run


def jitted_unit(unit: torch.nn.Module) -> Any:
    """The JittedFunction that runs ``unit``'s forward between FSDP's hooks, once a call met it (or None)."""
    return _JITTED.get(unit)


def _units(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The FSDP units around and below ``module``: those its FSDP state's tree knows (filled by the
    root's lazy init), and the sharded modules under it."""
    from torch.distributed.fsdp import FSDPModule

    units: dict[int, torch.nn.Module] = {id(m): m for m in module.modules() if isinstance(m, FSDPModule)}
    state = module._get_fsdp_state() if isinstance(module, FSDPModule) else None  # noqa: SLF001
    for other in getattr(getattr(state, "_state_ctx", None), "all_states", ()):
        for m in getattr(other, "_modules", ()):
            units.setdefault(id(m), m)
    return list(units.values())


@contextlib.contextmanager
def units_jitted(module: torch.nn.Module, options: dict[str, Any]) -> Iterator[None]:
    """Each FSDP unit around and below ``module`` has its forward jitted for the duration."""
    from jitcore.jit.module import ForwardJit

    patched: list[tuple[torch.nn.Module, Any]] = []
    try:
        for unit in _units(module):
            if "forward" in vars(unit):  # the user's (or an enclosing call's) instance forward
                continue
            jitted = _JITTED.get(unit)
            forward = type(unit).forward
            if jitted is None or jitted.fn.__func__ is not forward:  # new, or the class's forward replaced
                jitted = _JITTED[unit] = ForwardJit(unit, forward=forward.__get__(unit), **options)
            unit.forward = jitted
            patched.append((unit, jitted))
        yield
    finally:
        for unit, jitted in patched:
            if vars(unit).get("forward") is jitted:  # not one the function itself set meanwhile
                del unit.forward
