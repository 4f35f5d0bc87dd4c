"""Modes the caller entered around a call of a jitted function, traced as modes the program enters.

Note [Modes around the call]
A TorchFunctionMode or TorchDispatchMode the caller entered around the call (``with Log():``, torch's
``LoggingTensorMode``, a mode that rewrites ``aten.mul``) is offered every op of every call eagerly.
Such a call is traced as the function wrapped in ``under_the_callers_modes``: the modes are taken off
torch's stacks for the call (``lifted``), passed as the wrapper's first two arguments (a tuple per
stack), and pushed by the wrapper onto the trace's own stacks (``UserModes``, jitcore/dispatch/modes.py),
as for a mode object the program enters inside the function. So what a mode does is traced (its
rewrite is in the trace; its state effects, such as ``self.ops.append(str(func))``, are replayed on the
caller's instance by each cached call, jitcore/jit/effects.py), and the prologue guards the modes as
any argument: the number of modes on each stack, each mode's type, and what the trace read of it (a
flag it tests). A fresh ``with Log():`` per call is a hit. These calls have a cache of their own (the
wrapper's JittedFunction, its hits and misses counted as the jitted function's): a call with no mode
never meets an entry traced under one, nor the reverse. A dispatch mode over tensors that require grad
makes an entry that runs pass 1 under torch's autograd, so a backward run under the mode hands it
eager's backward ops (Note [A dispatch mode under autograd], jitcore/dispatch/modes.py). Where a mode
cannot be traced, the usual fallbacks apply: such a mode that rewrites the op it was handed makes an
eager entry whose calls run the wrapper natively, the modes back on torch's stack, with a warning that
says why.

Invariants:
- while the wrapper's JittedFunction runs, torch's stacks hold none of the caller's modes: they are put
  back, in their order, before the call returns or raises;
- modes this cannot take run the call eagerly, as before: an infra mode (FakeTensorMode, ...); a
  user mode below a ``with torch.device(...)`` entered after it (torch's DeviceContext stays on torch's
  stack; one entered before the modes stays below them); modes entered around a module's call while
  module-wide hooks are registered (``FlopCounterMode``'s module tracker registers them anew for each
  counter, keyed by new handle ids: the prologue guards a hook dict's keys and each hook's identity,
  so every call would trace again; around a plain function the hooks are not read).
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._device

__all__ = ["WRAPPER_FILE", "CallerModes", "callers_modes", "under_the_callers_modes"]

# Note [The wrapper is the program's code]
# jitcore's own code runs natively when interpreted code calls it (resolve_operator_or_own): the wrapper
# would then push the modes on torch's stacks, where they see jitcore's fake shadows. Its code carries
# a file name of its own, outside the package, so it is interpreted as the program's code is.
WRAPPER_FILE = "<jitcore caller's modes>"
_DEVICE_CONTEXT = torch.utils._device.DeviceContext  # noqa: SLF001


@dataclass(frozen=True, slots=True)
class CallerModes:
    """The caller's user modes, outermost first: those on the function stack, then the dispatch stack."""

    function: tuple[Any, ...]
    dispatch: tuple[Any, ...]

    def label(self) -> str:
        return type((self.dispatch or self.function)[-1]).__qualname__

    @contextlib.contextmanager
    def lifted(self) -> Iterator[None]:
        """Off torch's stacks inside (the trace's stacks hold them while tracing), back on after."""
        for _ in self.dispatch:
            torch._C._pop_torch_dispatch_stack(None)  # noqa: SLF001
        for _ in self.function:
            torch._C._pop_torch_function_stack()  # noqa: SLF001
        try:
            yield
        finally:
            for mode in self.function:
                torch._C._push_on_torch_function_stack(mode)  # noqa: SLF001
            for mode in self.dispatch:
                torch._C._push_on_torch_dispatch_stack(mode)  # noqa: SLF001


def callers_modes(jitted: Any = None) -> CallerModes | str | None:
    """The user modes on torch's stacks now; None where there are none (``torch.device`` only); a
    reason where the call of ``jitted`` (a JittedFunction) must run eagerly under them (Note [Modes
    around the call])."""
    function = [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]  # noqa: SLF001
    dispatch = [torch._C._get_dispatch_stack_at(i) for i in range(torch._C._len_torch_dispatch_stack())]  # noqa: SLF001
    users = [m for m in function if not isinstance(m, _DEVICE_CONTEXT)]
    if not users and not dispatch:
        return None
    innermost = type((dispatch or users)[-1]).__qualname__
    if any(getattr(m, "is_infra_mode", lambda: False)() for m in dispatch):
        return f"the mode {innermost} entered around the call (an infra mode of torch's is active)"
    module = isinstance(getattr(jitted, "module", None), torch.nn.Module)
    if _module_hooks() and (module or _runs_modules(jitted)):
        return (f"the mode {innermost} entered around a call that runs modules (module-wide hooks are "
                "registered, as FlopCounterMode's module tracker registers them anew for each counter: "
                "the prologue guards those hooks by their keys and identity, so each call would trace again)")
    taken = function[len(function) - len(users):]
    if any(isinstance(m, _DEVICE_CONTEXT) for m in taken):
        return (f"the mode {innermost} entered around the call (a torch.device context entered after it: "
                "jitcore traces modes entered around the call only above torch.device)")
    return CallerModes(tuple(taken), tuple(dispatch))


# Note [Module-wide hooks under the caller's modes]
# FlopCounterMode's module tracker registers module-wide hooks (bound methods of a tracker made per
# counter, keyed by new handle ids) on entering. A call that runs modules reads those hook dicts, which
# the prologue guards by their keys and the identity of each hook (Note [Functions a dict of state
# holds], jit/provenance.py): traced, each fresh counter would trace again, and an eager entry too would
# miss on every call. So around a module's call, or a function whose trace under the caller's modes read
# those dicts (``_runs_modules``, after its first miss: it runs a module), the call runs eagerly while
# module-wide hooks are registered. A function that runs no module is traced (FlopCounterMode around it
# counts as eagerly, and a fresh counter per call is a hit).
_HOOK_DICTS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_hooks",
               "_global_backward_pre_hooks")


def _runs_modules(jitted: Any) -> bool:
    """Whether the last trace of ``jitted`` under the caller's modes (its wrapper's last miss) guarded a
    module-wide hook dict (Note [Module-wide hooks under the caller's modes])."""
    prologue = getattr(getattr(jitted, "_under_modes", None), "last_prologue", None)
    namespace = vars(torch.nn.modules.module)
    return prologue is not None and any(
        g.path.root.obj is namespace and g.path.steps and g.path.steps[0].value in _HOOK_DICTS
        for g in prologue.guards)


def _module_hooks() -> bool:
    m = torch.nn.modules.module
    return bool(m._global_forward_pre_hooks or m._global_forward_hooks or m._global_backward_hooks  # noqa: SLF001
                or m._global_backward_pre_hooks)  # noqa: SLF001


def under_the_callers_modes(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` called with the caller's modes pushed, as the program would push them (interpreted: the
    pushes go to the trace's stacks, jitcore/dispatch/modes.py; run natively: to torch's)."""

    def under_the_callers_modes(function_modes: tuple, dispatch_modes: tuple, /, *args: Any,
                                **kwargs: Any) -> Any:
        for mode in function_modes:
            torch._C._push_on_torch_function_stack(mode)  # noqa: SLF001
        for mode in dispatch_modes:
            torch._C._push_on_torch_dispatch_stack(mode)  # noqa: SLF001
        try:
            return fn(*args, **kwargs)
        finally:
            for _ in dispatch_modes:
                torch._C._pop_torch_dispatch_stack(None)  # noqa: SLF001
            for _ in function_modes:
                torch._C._pop_torch_function_stack()  # noqa: SLF001

    code = under_the_callers_modes.__code__.replace(co_filename=WRAPPER_FILE)
    wrapper = types.FunctionType(code, under_the_callers_modes.__globals__, code.co_name, None,
                                 under_the_callers_modes.__closure__)
    wrapper.__signature__ = _signature(fn)
    return wrapper


# Note [The wrapper's parameters]
# ``dynamic_numbers`` names parameters of the function, and a pass finds an argument's name from the
# signature of the function it traces: here the wrapper's. Its signature is the function's behind the two
# mode tuples, so ``dynamic_numbers=("n",)`` names the same argument under a mode as without one (before,
# names were not passed on, and the wrapper's ``*args`` named them ``args_0``...: a number argument under a
# mode was specialized, one entry per value).
def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        signature = inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn)
    except (TypeError, ValueError):
        return None  # no signature: names are matched per call, as for the function itself
    taken = {p.name for p in signature.parameters.values()}
    modes = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY)
             for name in _unused(("function_modes", "dispatch_modes"), taken)]
    return signature.replace(parameters=[*modes, *signature.parameters.values()])


def _unused(names: tuple[str, ...], taken: set[str]) -> list[str]:
    """``names``, each with underscores in front until no parameter of the function has it."""
    out = []
    for name in names:
        while name in taken:
            name = "_" + name
        out.append(name)
    return out
