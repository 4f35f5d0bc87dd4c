"""GeneratorProxy: a ``torch.Generator`` the traced program made, while it is traced.

Eagerly, ``g = torch.Generator().manual_seed(s)`` makes a new generator on every call, and each
draw with ``generator=g`` advances *its* state. A generator made while tracing and kept in the trace
as a constant would be made once: a cached call would continue its stream instead of starting it
again. So its creation and seeding are recorded (jitcore/langctx/generators.py), and the program
holds this proxy. Invariants:
- ``placeholder`` is a real generator of the same device, never drawn from for the program (it
  answers a new generator's ``initial_seed``); the shadow computations (fake tensors) receive None
  where the program passed the proxy: a draw's metadata does not depend on its generator, and
  torch's refs of ``exponential_``, ``cauchy_``, ``log_normal_`` assert it is None;
- ``get_state``/``set_state`` are records of the computation (Note [The state of torch's default
  generator], langctx/generators.py); what a proxy cannot answer without running the computation as a
  Python number (``seed()``) is refused with a clear error, never answered from the placeholder's state;
- the same holds for a generator the caller holds (an argument, a global: jit/provenance.py binds it
  to a proxy; ``held_by_caller`` is the default, the safe one): its ``initial_seed()`` is the caller's
  generator's, which the placeholder does not know, so it is refused until the program seeds it.
"""

from __future__ import annotations

from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.ir.proxy import Proxy
from jitcore.ir.tree import tree_has

__all__ = ["RECORDED", "GeneratorProxy", "is_generator_record"]


class GeneratorProxy(Proxy):
    """A generator made by the traced program: a name, its device, and the seed it was given."""

    __slots__ = ("held_by_caller", "name", "placeholder", "seed_value")

    def __init__(self, name: str, device: Any = "cpu", *, held_by_caller: bool = True) -> None:
        self.name = name
        self.placeholder = torch.Generator(device=device)
        self.seed_value: Any = None  # the number manual_seed was given (a number proxy stays a name)
        self.held_by_caller = held_by_caller  # False only for one the program makes (langctx/generators.py)

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
        generator's default seed; refused for the caller's generator not seeded by the program."""
        if self.seed_value is not None:
            return self.seed_value
        if self.held_by_caller:  # the caller's generator's seed: not the placeholder's
            return self.__getattr__("initial_seed")
        return self.placeholder.initial_seed()

    def get_state(self) -> Any:
        """``g.get_state()``, recorded (Note [The state of torch's default generator])."""
        return _handler("get_state")(self)

    def set_state(self, new_state: Any) -> GeneratorProxy:
        """``g.set_state(s)``, recorded; returns ``g`` as eagerly."""
        return _handler("set_state")(self, new_state)

    def __getattr__(self, name: str) -> Any:
        if self.held_by_caller:
            raise UnsupportedOperationError(
                f"torch.Generator.{name}: a generator the caller holds supports manual_seed, device and "
                "draws (generator=g) inside a jitted function; its state is not read while tracing",
                hints=("read the generator's state outside the jitted function",),
            )
        raise UnsupportedOperationError(
            f"torch.Generator.{name}: a generator made inside a jitted function supports manual_seed, "
            "initial_seed, device and draws (generator=g); its state is not available while tracing",
            hints=("make and seed the generator outside the jitted function and draw from it inside",),
        )


# Set by jitcore/langctx/generators.py: name -> the callable recording that generator method.
HANDLERS: dict[str, Any] = {}
# Ids of the symbols of a real generator's state (langctx/generators.py): copied as recorded by the grad
# transform, as the records naming a proxy are.
RECORDED: set[str] = set()


def is_generator_record(bsym: Any) -> bool:
    """Whether a bound symbol makes, seeds, draws from or reads or sets the state of a generator: the
    grad transform copies it as recorded."""
    return bsym.symbol.id in RECORDED or tree_has((bsym.args, bsym.kwargs, bsym.output), GeneratorProxy)


def _handler(name: str) -> Any:
    return HANDLERS[name]
