"""GeneratorProxy: a ``torch.Generator`` the traced program made, while it is traced.

Eagerly, ``g = torch.Generator().manual_seed(s)`` makes a new generator on every call, and each
draw with ``generator=g`` advances *its* state. A generator made while tracing and kept in the trace
as a constant would be made once: a cached call would continue its stream instead of starting it
again. So its creation and seeding are recorded (jitcore/langctx/generators.py), and the program
holds this proxy. Invariants:
- ``placeholder`` is a real generator of the same device, never drawn from for the program: the
  shadow computations (fake tensors) receive it where the program passed the proxy;
- what a proxy cannot answer without running the computation (``get_state``, ``seed()``) is
  refused with a clear error, never answered from the placeholder's state.
"""

from __future__ import annotations

from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.ir.proxy import Proxy

__all__ = ["GeneratorProxy"]


class GeneratorProxy(Proxy):
    """A generator made by the traced program: a name, its device, and the seed it was given."""

    __slots__ = ("name", "placeholder", "seed_value")

    def __init__(self, name: str, device: Any = "cpu") -> None:
        self.name = name
        self.placeholder = torch.Generator(device=device)
        self.seed_value: Any = None  # the number manual_seed was given (a number proxy stays a name)

    @property
    def python_type(self) -> type:
        return torch.Generator

    def describe(self) -> str:
        return f"Generator({self.placeholder.device})"

    @property
    def device(self) -> torch.device:
        return self.placeholder.device

    def manual_seed(self, seed: Any) -> GeneratorProxy:
        """``g.manual_seed(seed)``, recorded; returns ``g`` as eagerly."""
        return _handler("manual_seed")(self, seed)

    def initial_seed(self) -> Any:
        """The seed given by ``manual_seed`` (eagerly: the generator's initial seed), or a new
        generator's default seed."""
        return self.placeholder.initial_seed() if self.seed_value is None else self.seed_value

    def __getattr__(self, name: str) -> Any:
        raise UnsupportedOperationError(
            f"torch.Generator.{name}: a generator made inside a jitted function supports manual_seed, "
            "initial_seed, device and draws (generator=g); its state is not available while tracing",
            hints=("make and seed the generator outside the jitted function and draw from it inside",),
        )


# Set by jitcore/langctx/generators.py: name -> the callable recording that generator method.
HANDLERS: dict[str, Any] = {}


def _handler(name: str) -> Any:
    return HANDLERS[name]
