"""``torch.Generator`` objects the traced program makes: created and seeded in the computation.

``torch.Generator(device)`` and ``g.manual_seed(s)`` inside a jitted function are recorded as
operations of the trace (jitcore/proxies/generator.py explains why a generator made while tracing
cannot be a constant), so every call makes its own generator, seeded with that call's number, and the
draws that name it (``torch.rand(3, generator=g)``) run from its state as eagerly. Invariants:
- the creation and seeding records carry the ``random`` tag: executors keep them in program order
  with the draws, and never compile them;
- the seed is recorded as the program gave it: a specialized number is a constant (guarded by the
  prologue as any number argument), a dynamic number stays a name.
"""

from __future__ import annotations

from typing import Any

import torch

from jitcore.ir import Symbol, current_context
from jitcore.langctx.scalars import VALUE_ARGUMENTS
from jitcore.langctx.torch import TORCH_TABLE
from jitcore.proxies.generator import HANDLERS, GeneratorProxy

__all__ = ["MANUAL_SEED", "NEW_GENERATOR"]


def _new_meta(device: Any = "cpu") -> GeneratorProxy:
    context = current_context()
    name = context.values.names.fresh("g") if context is not None and context.values is not None else "g"
    return GeneratorProxy(name, device)


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
