"""``torch.Generator`` objects the traced program makes: created and seeded in the computation.

``torch.Generator(device)`` and ``g.manual_seed(s)`` inside a jitted function are recorded as
operations of the trace (jitcore/proxies/generator.py explains why a generator made while tracing
cannot be a constant), so every call makes its own generator, seeded with that call's number, and the
draws that name it (``torch.rand(3, generator=g)``) run from its state as eagerly. Invariants:
- the creation and seeding records carry the ``random`` tag: executors keep them in program order
  with the draws, and never compile them;
- the seed is recorded as the program gave it: a specialized number is a constant (guarded by the
  prologue as any number argument), a dynamic number stays a name;
- a generator's state read or set by the program (``get_state``/``set_state`` of torch's default
  generator, of the caller's or of one made inside) is a record in program order with the draws, never
  read or written at trace time (Note [The state of torch's default generator]).
"""

from __future__ import annotations

from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.ir import Symbol, current_context
from jitcore.langctx.scalars import VALUE_ARGUMENTS
from jitcore.langctx.shadows import evaluate
from jitcore.langctx.torch import TORCH_TABLE
from jitcore.proxies import TensorProxy
from jitcore.proxies.generator import HANDLERS, RECORDED, GeneratorProxy

__all__ = ["MANUAL_SEED", "NEW_GENERATOR", "SET_STATE", "STATE", "generator_state", "set_generator_state",
           "state_lookasides"]


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
# cannot be ordered with them.
#
# So ``get_state`` and ``set_state`` are records of the computation too, of a real generator (the
# default one, bound by reference) or of a generator proxy (the caller's, or one the program made):
# ``STATE`` returns the state as a uint8 tensor of the computation, ``SET_STATE`` writes one back.
# Both carry the ``random`` tag, so executors keep them in program order with the draws (a get is the
# state at that point of the stream, a set makes later draws repeat eager's), on every call; the
# probe that answers value reads runs them in order from the call's state (jit/probe.py), and the grad
# transform copies them as recorded, as it copies a generator proxy's records (``RECORDED``,
# transforms/grad.py). ``set_state`` of a tensor that is not a state of that generator's size (which
# eager refuses) is refused (JC-T001: the call runs eagerly, and raises as eagerly). The rest of a
# real generator's state methods (``initial_seed``, ``seed``, ``manual_seed``, offsets) are refused:
# they answer or take a Python number, which a record does not give back (``torch.manual_seed`` is
# recorded whole instead: langctx/thread_state.py).
#
# Note [The random state while tracing]
# ``torch.manual_seed`` is recorded whole, and its record runs natively where it is recorded (in the
# pass, and again in the grad transform's replay of the forward): each seeded the caller's default
# generator at trace time. When the program read the state before seeding it (``fork_rng`` or
# ``freeze_rng_state`` around ``torch.manual_seed``, OpInfo's ``wrapper_set_seed``), the first call's
# computation read the seeded state instead of the caller's and restored that. So the pass
# (jit/interpretation.py) and the replay (transforms/grad.py) put the RNG states back as they found
# them: the computation, or the eager run of a call the pass could not trace, starts from the call's.
_STATE_METHODS = ("seed", "initial_seed", "manual_seed", "graphsafe_get_state", "graphsafe_set_state",
                  "clone_state", "get_offset", "set_offset")


def generator_state(generator: torch.Generator) -> torch.Tensor:
    """What the computation runs for ``generator.get_state()``: its state at this point."""
    return generator.get_state()


def set_generator_state(generator: torch.Generator, state: torch.Tensor) -> None:
    """What the computation runs for ``generator.set_state(state)``."""
    generator.set_state(state)


def _real(generator: Any) -> torch.Generator:
    return generator.placeholder if isinstance(generator, GeneratorProxy) else generator


# The dispatch keys ``no_dispatch()`` excludes: torch.testing's ``freeze_rng_state`` reads the state in
# such a block, where the shadow of the state (a fake tensor) could not be made.
_PYTHON_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.Python).add(  # noqa: SLF001
    torch._C.DispatchKey.PythonTLSSnapshot)  # noqa: SLF001


def _state_meta(generator: Any) -> Any:
    size = _real(generator).get_state().shape  # a read of its size only: every state has one size
    keys = (torch._C._dispatch_tls_local_include_set(),  # noqa: SLF001
            torch._C._dispatch_tls_local_exclude_set() - _PYTHON_KEYS)  # noqa: SLF001
    with torch._C._ForceDispatchKeyGuard(*keys):  # noqa: SLF001
        return evaluate(lambda: torch.empty(size, dtype=torch.uint8), (), {})


def _set_state_meta(generator: Any, state: Any) -> None:
    expected = _real(generator).get_state().shape
    if not isinstance(state, TensorProxy) or state.dtype != torch.uint8 \
            or tuple(state.shape) != tuple(expected):
        raise UnsupportedOperationError(
            f"torch.Generator.set_state of {getattr(state, 'shape', type(state).__name__)}: jitcore records "
            f"the state of a generator as a uint8 tensor of shape {tuple(expected)}")


STATE = Symbol(id="torch.Generator.get_state", name="get_state", langctx="torch", fn=generator_state,
               path=None, meta=_state_meta,
               tags=frozenset({"random"}))
SET_STATE = Symbol(id="torch.Generator.set_state", name="set_state", langctx="torch", fn=set_generator_state,
                   path=None, meta=_set_state_meta,
                   tags=frozenset({"random"}))
RECORDED.update((STATE.id, SET_STATE.id))


def _get_state(generator: Any) -> Any:
    """``g.get_state()`` called by the traced program (a real generator or a proxy)."""
    return STATE(generator)


def _set_state(generator: Any, new_state: Any) -> Any:
    """``g.set_state(s)``: recorded; returns ``g`` as eagerly."""
    SET_STATE(generator, new_state)
    return generator


HANDLERS["get_state"] = _get_state
HANDLERS["set_state"] = _set_state


def _refusing(name: str) -> Any:
    def refuse(generator: torch.Generator, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedOperationError(
            f"torch.Generator.{name} of {generator!r} (torch's default generator or another real one): "
            "the computation records its state (get_state, set_state), not this",
            hints=("read or seed the generator outside the jitted function; seed it with torch.manual_seed "
                   "inside",),
        )

    return refuse


def state_lookasides() -> dict[Any, Any]:
    """Lookasides recording ``get_state``/``set_state`` of a real generator and refusing its other state
    methods (Note [The state of torch's default generator])."""
    refused = {getattr(torch.Generator, name): _refusing(name) for name in _STATE_METHODS
               if hasattr(torch.Generator, name)}
    return {**refused, torch.Generator.get_state: _get_state, torch.Generator.set_state: _set_state}
