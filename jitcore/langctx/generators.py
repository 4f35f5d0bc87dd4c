"""``torch.Generator`` objects the traced program makes: created and seeded in the computation.

``torch.Generator(device)`` and ``g.manual_seed(s)`` inside a jitted function are recorded as
operations of the trace (jitcore/proxies/generator.py explains why a generator made while tracing
cannot be a constant), so every call makes its own generator, seeded with that call's number, and the
draws that name it (``torch.rand(3, generator=g)``) run from its state as eagerly. Invariants:
- the creation and seeding records carry the ``random`` tag: executors keep them in program order
  with the draws, and never compile them;
- the seed is recorded as the program gave it: a specialized number is a constant (guarded by the
  prologue as any number argument), a dynamic number stays a name;
- a real generator's state is never read or written while tracing (``state_lookasides``, Note [The
  state of torch's default generator]).
"""

from __future__ import annotations

from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.ir import Symbol, current_context
from jitcore.langctx.scalars import VALUE_ARGUMENTS
from jitcore.langctx.torch import TORCH_TABLE
from jitcore.proxies.generator import HANDLERS, GeneratorProxy

__all__ = ["MANUAL_SEED", "NEW_GENERATOR", "state_lookasides"]


def _new_meta(device: Any = "cpu") -> GeneratorProxy:
    context = current_context()
    name = context.values.names.fresh("g") if context is not None and context.values is not None else "g"
    return GeneratorProxy(name, device, held_by_caller=False)


def _manual_seed_meta(generator: GeneratorProxy, seed: Any) -> GeneratorProxy:
    generator.seed_value = seed
    return generator


NEW_GENERATOR = Symbol(
    id="torch.Generator",
    name="Generator",
    langctx="torch",
    fn=torch.Generator,
    path="torch.Generator",
    meta=_new_meta,
    tags=frozenset({"random"}),
)
MANUAL_SEED = Symbol(
    id="torch.Generator.manual_seed",
    name="manual_seed",
    langctx="torch",
    fn=torch.Generator.manual_seed,
    path="torch.Generator.manual_seed",
    meta=_manual_seed_meta,
    tags=frozenset({"random", "inplace"}),
)


def _generator(device: Any = "cpu") -> Any:
    """``torch.Generator(device)`` called by the traced program."""
    if current_context() is None:
        return torch.Generator(device=device)
    return NEW_GENERATOR(device)


TORCH_TABLE.bind(torch.Generator, _generator)
HANDLERS["manual_seed"] = MANUAL_SEED
VALUE_ARGUMENTS[MANUAL_SEED.id] = frozenset({1, "seed"})  # a dynamic seed stays a name


# Note [The state of torch's default generator]
# The program reaches a real ``torch.Generator`` (not a proxy) through torch's own functions:
# ``torch.get_rng_state()``, ``set_rng_state(s)``, ``initial_seed()``, ``seed()`` and
# ``random.fork_rng()`` call methods of ``torch.default_generator``. Run natively while tracing,
# they read or changed the caller's generator once, at trace time, and left nothing in the trace:
# ``s = torch.get_rng_state(); a = torch.rand(3); torch.set_rng_state(s); b = torch.rand(3)`` gave
# ``a != b``, and a cached call answered ``torch.initial_seed()`` with the seed of the traced call.
# The draws between them are records of the computation, so a state read or written at trace time
# cannot be ordered with them; these methods are refused (JC-T001: the call runs eagerly), as the
# proxy's state methods are. ``torch.manual_seed`` is recorded instead (langctx/thread_state.py).
_STATE_METHODS = ("get_state", "set_state", "seed", "initial_seed", "manual_seed", "graphsafe_get_state",
                  "graphsafe_set_state", "clone_state", "get_offset", "set_offset")


def _refusing(name: str) -> Any:
    def refuse(generator: torch.Generator, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedOperationError(
            f"torch.Generator.{name} of {generator!r} (torch's default generator or another real one): "
            "its state is not read or changed while tracing, and the computation does not record it",
            hints=("save, restore or read the random state outside the jitted function; seed it with "
                   "torch.manual_seed inside",),
        )

    return refuse


def state_lookasides() -> dict[Any, Any]:
    """Lookasides refusing the state methods of a real generator (Note [The state of torch's default
    generator])."""
    return {getattr(torch.Generator, name): _refusing(name) for name in _STATE_METHODS
            if hasattr(torch.Generator, name)}
