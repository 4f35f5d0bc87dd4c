"""``jitcore.jit(module)``: an ``nn.Module`` that runs the original module's forward through jitcore.

A JittedModule wraps the original module, as torch.compile's ``OptimizedModule`` does, and can stand
in for it anywhere: parameters, buffers, submodules, ``state_dict``, ``train``/``eval``, ``.to()``,
``zero_grad`` and attribute reads and writes all reach the original. The forward runs through a
ForwardJit: a JittedFunction of ``module.forward`` with the module bound as state, so the module's
parameters and buffers are inputs of the trace (named after their qualified names, see
state_names.py) and everything else it reads is guarded — ``self.training`` included, so
``train()``/``eval()`` between calls select the matching cache entry.

Invariants:
- the wrapper owns no parameters, buffers, submodules or hooks: what is registered through it lands
  on the original, so ``state_dict()`` keys are the original's (no ``_orig_mod.`` prefix) and a state
  dict moves freely between the module and its wrapper;
- a call runs the original's forward pre/post hooks (and torch's global ones) eagerly around the
  jitted forward, exactly as ``torch.nn.Module.__call__`` would (Note [Hooks run eagerly]); hooks of
  submodules are part of the traced program, like the rest of their code;
- a JittedModule's forward is the one ``Module.__call__`` would call: read again at every tracing and
  guarded (replacing the class's or the instance's ``forward`` retraces); ``jitcore.jit(module.forward)``
  runs the bound method it was given, as eagerly, whatever ``module.forward`` is later (Note [A jitted
  bound forward]).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as _torch_module

from jitcore.interpreter import current_run
from jitcore.jit.api import JittedFunction, frozen_function
from jitcore.jit.interpretation import Pass, TracedProgram
from jitcore.jit.module_guards import group_hook_guards, group_state_guards
from jitcore.jit.options import label_of
from jitcore.prologue import Path, Prologue, Root

__all__ = ["ForwardJit", "JittedModule", "call_with_hooks", "jit_module"]


class ForwardJit(JittedFunction):
    """A module's ``forward``, jitted with the module bound as ``self`` (its state has paths).

    Args:
        module: the module whose forward is jitted.
        forward: ``jitcore.jit(module.forward)``'s bound method, the function it runs from then on,
            as calling that bound method eagerly would (Note [A jitted bound forward]); None for a
            JittedModule's forward, which is the one ``Module.__call__`` reads at each tracing.
        options: as for ``jitcore.jit``.
    """

    def __init__(self, module: torch.nn.Module, /, forward: Any = None, **options: Any) -> None:
        super().__init__(module.forward if forward is None else forward, **options)
        self.module = module
        self._label = label_of(module)
        self._forward = module.forward if forward is None else forward
        self._bound = forward is not None

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        run = current_run()
        if run is not None:  # Note [A jitted module inside a traced program]
            return run.call(_CALL_BOUND if self._bound else _CALL_FORWARD, self, *args, **kwargs)
        return super().__call__(*args, **kwargs)

    def _trace(self, args: tuple, kwargs: dict, shape_changed: bool = False) -> Any:
        if self._bound:
            self.fn = self._forward
        else:
            current = self.module.forward  # as Module.__call__ reads it now (guarded in _run_pass)
            self.fn = self._forward if current is self else current  # installed as the module's forward
        return super()._trace(args, kwargs, shape_changed)

    def _finish_prologue(self, prologue: Prologue) -> Prologue:
        # Once every stage has added its guards (the grad transform pins strides): the module's state
        # as one check (jitcore/jit/module_guards.py).
        return group_state_guards(group_hook_guards(prologue), self.module)

    def _run_pass(self, tracing_pass: Pass, args: tuple, kwargs: dict) -> TracedProgram:
        module = self.module
        path = Path(Root("bound", "self", module))
        tracing_pass.provenance.remember(module, path)
        if self._bound:
            pass  # the bound method given to jit is its target, as a function given to jit is
        elif "forward" in vars(module):  # an instance attribute shadows the class's forward
            shadowing = path.attr("__dict__").key("forward")
            tracing_pass.provenance.bind_state(vars(module)["forward"], shadowing, "forward")
        else:
            tracing_pass.provenance.bind_class_attribute(module, path, "forward")
        return tracing_pass.run(args, kwargs, target=self.fn, bound_self=module)


def jit_module(fn: Any, /, **options: Any) -> Any:
    """``jitcore.jit`` of a module (a JittedModule) or of a module's bound ``forward`` (a ForwardJit)."""
    if isinstance(fn, JittedModule):
        fn = fn._orig_mod  # jitting a jitted module again: the original, with these options
    if isinstance(fn, torch.nn.Module):
        return JittedModule(fn, **options)
    return ForwardJit(fn.__self__, forward=fn, **options)


# Attributes the wrapper keeps for itself; every other attribute is the original module's.
_OWN = frozenset({"_orig_mod", "jitted_forward", "_options"})
# Module methods answered by the original module (they read its registries, or register there);
# the wrapper is returned where the original returns itself.
_DELEGATED = (
    "named_parameters", "named_buffers", "named_children", "named_modules",
    "state_dict", "load_state_dict", "get_submodule", "set_submodule", "get_parameter", "get_buffer",
    "register_buffer", "register_parameter", "register_module", "add_module",
    "register_forward_pre_hook", "register_forward_hook", "register_full_backward_pre_hook",
    "register_full_backward_hook", "register_backward_hook",
    "register_state_dict_pre_hook", "register_state_dict_post_hook",
    "register_load_state_dict_pre_hook", "register_load_state_dict_post_hook",
    "train", "apply", "_apply", "requires_grad_", "zero_grad", "extra_repr",
)


class JittedModule(torch.nn.Module):
    """An ``nn.Module`` running ``module``'s forward through jitcore; see the module docstring.

    Args:
        module: the module to jit.
        options: as for ``jitcore.jit`` (``cache_limit``, ``fallback``, ``dynamic_numbers``, ...).
    """

    def __init__(self, module: torch.nn.Module, /, **options: Any) -> None:
        object.__setattr__(self, "_orig_mod", module)  # first: __getattr__ reads it
        super().__init__()
        object.__setattr__(self, "_options", dict(options))
        object.__setattr__(self, "jitted_forward", ForwardJit(module, **options))

    # --- calls -------------------------------------------------------------------------------------
    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        run = current_run()
        if run is not None:  # Note [A jitted module inside a traced program]
            return run.call(_CALL_ORIGINAL, self, *args, **kwargs)
        module = self._orig_mod
        if (module._forward_pre_hooks or module._forward_hooks or module._backward_hooks
                or module._backward_pre_hooks or _has_global_hooks()):
            return call_with_hooks(module, self.jitted_forward, args, kwargs)
        return _call_outside_a_run(self.jitted_forward, *args, **kwargs)  # Note [One call to the forward]

    def forward(self, /, *args: Any, **kwargs: Any) -> Any:
        """The jitted forward alone (no hooks), as ``module.forward(...)`` is eagerly."""
        return self.jitted_forward(*args, **kwargs)

    # --- the original module's state --------------------------------------------------------------
    @property
    def training(self) -> bool:  # type: ignore[override]
        return self._orig_mod.training

    @training.setter
    def training(self, mode: bool) -> None:
        if "jitted_forward" in self.__dict__:  # Module.__init__ sets a default: not the original's
            self._orig_mod.training = mode

    @property
    def entries(self) -> list:
        """The jitted forward's cache entries, oldest first (as ``JittedFunction.entries``)."""
        return self.jitted_forward.entries

    def __getattr__(self, name: str) -> Any:
        if name in _OWN:
            raise AttributeError(name)  # not set yet (unpickling, or a failed __init__)
        return getattr(self.__dict__["_orig_mod"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN or hasattr(type(self), name):
            object.__setattr__(self, name, value)
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OWN or name in self.__dict__:
            object.__delattr__(self, name)
        else:
            delattr(self._orig_mod, name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._orig_mod)) | set(super().__dir__()))

    # containers (Sequential, ModuleList, ModuleDict) index, iterate and measure as the original
    def __len__(self) -> int:
        return len(self._orig_mod)  # type: ignore[arg-type]

    def __bool__(self) -> bool:
        return bool(self._orig_mod)

    def __iter__(self) -> Any:
        return iter(self._orig_mod)  # type: ignore[call-overload]

    def __getitem__(self, key: Any) -> Any:
        return self._orig_mod[key]  # type: ignore[index]

    def __repr__(self) -> str:
        return f"jitcore.jit({self._orig_mod!r})"

    def __reduce__(self) -> tuple:
        """Pickled (and deep-copied) as the original module plus the options: the cache is rebuilt."""
        return (_rebuild, (self._orig_mod, self._options))


# Note [A jitted module inside a traced program]: a jitted module called by a program jitcore is
# tracing (a jitted submodule of a jitted model, a jitted module called from a jitted function) is
# the original module there (and ``jitcore.jit(module.forward)`` that module's forward): its call is
# interpreted as part of the outer trace, hooks and all, instead of starting a trace of its own on the
# outer trace's proxies. The call goes through
# ``wrapper._orig_mod`` read by interpreted code, so that the outer trace has a path to the original
# (its parameters become inputs, the wrapper's ``_orig_mod`` is guarded). That code is compiled with a
# "<frozen ...>" file name: the interpreter treats it as library code (no source line of its own).
_CALL_ORIGINAL = frozen_function(
    "def call_original(wrapper, /, *args, **kwargs):\n"
    "    return wrapper._orig_mod(*args, **kwargs)\n",
    "jitcore.jit.module",
)
_CALL_FORWARD = frozen_function(
    "def call_forward(jitted, /, *args, **kwargs):\n"
    "    return jitted.module.forward(*args, **kwargs)\n",
    "jitcore.jit.module",
)
# Note [A jitted bound forward]: ``jitcore.jit(module.forward)`` runs that bound method's function,
# whatever ``module.forward`` is later: eagerly a bound method keeps its function, and the idioms
# ``module.forward = jitcore.jit(module.forward)`` and a wrapper installed over the jitted forward
# (``module.forward = lambda *a: jitted(*a)``, accelerate's and peft's style) make ``module.forward``
# the jitted object or a caller of it, so reading it again would call itself without end.
_CALL_BOUND = frozen_function(
    "def call_bound(jitted, /, *args, **kwargs):\n"
    "    return jitted._forward.__func__(jitted.module, *args, **kwargs)\n",
    "jitcore.jit.module",
)


def _rebuild(module: torch.nn.Module, options: dict) -> JittedModule:
    return JittedModule(module, **options)


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: JittedModule, /, *args: Any, **kwargs: Any) -> Any:
        out = getattr(self._orig_mod, name)(*args, **kwargs)
        return self if out is self._orig_mod else out

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{name}`` of the original module (the wrapper is returned where it returns itself)."
    return method


for _name in _DELEGATED:
    setattr(JittedModule, _name, _delegate(_name))


# Note [Hooks run eagerly]: a forward pre/post hook of the jitted module itself runs on every call,
# on real tensors, as eagerly: it may print, count calls, capture activations or replace the
# arguments and output, none of which a trace could replay (Python side effects happen only while
# tracing). ``call_with_hooks`` is torch.nn.Module._call_impl with the jitted forward in place of
# ``self.forward``; tests/jit/test_jit_module.py runs both on the same hooks.


# Note [One call to the forward]: outside a traced program, ``ForwardJit.__call__`` only asks whether a
# run is active and then calls ``JittedFunction.__call__``. ``JittedModule.__call__`` has asked that
# already, so it calls ``JittedFunction.__call__`` itself: a Python frame, a ``super()`` and the repacked
# arguments less on every call of a jitted module (tests/jit/test_jit_module_call_overhead.py).
_call_outside_a_run = JittedFunction.__call__


def _has_global_hooks() -> bool:
    m = _torch_module
    return bool(m._global_forward_pre_hooks or m._global_forward_hooks or m._global_backward_hooks
                or m._global_backward_pre_hooks)


def call_with_hooks(module: torch.nn.Module, forward: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``module(*args, **kwargs)`` with ``forward`` as its forward: global and module hooks run as
    ``torch.nn.Module._call_impl`` runs them (pre-hooks, backward-hook setup, forward, forward hooks,
    ``always_call`` hooks also when forward raises)."""
    m = _torch_module
    called_always: set[int] = set()
    result = None
    try:
        backward_pre = []
        if module._backward_pre_hooks or m._global_backward_pre_hooks:
            backward_pre = module._get_backward_pre_hooks()
        full_backward, non_full_backward = ([], [])
        if module._backward_hooks or m._global_backward_hooks:
            full_backward, non_full_backward = module._get_backward_hooks()
        args, kwargs = _run_pre_hooks(module, args, kwargs)
        backward_hook = None
        if full_backward or backward_pre:
            backward_hook = torch.utils.hooks.BackwardHook(module, full_backward, backward_pre)
            args = backward_hook.setup_input_hook(args)
        result = forward(*args, **kwargs)
        for hook_id, hook in (*m._global_forward_hooks.items(), *module._forward_hooks.items()):
            if hook_id in module._forward_hooks_always_called or \
                    hook_id in m._global_forward_hooks_always_called:
                called_always.add(hook_id)
            if hook_id in module._forward_hooks_with_kwargs or hook_id in m._global_forward_hooks_with_kwargs:
                hook_result = hook(module, args, kwargs, result)
            else:
                hook_result = hook(module, args, result)
            if hook_result is not None:
                result = hook_result
        if backward_hook is not None:
            if not isinstance(result, (torch.Tensor, tuple)):
                warnings.warn("For backward hooks to be called, module output should be a Tensor or a "
                              f"tuple of Tensors but received {type(result)}", stacklevel=3)
            result = backward_hook.setup_output_hook(result)
        if non_full_backward:
            _register_non_full_backward_hooks(module, non_full_backward, args, result)
        return result
    except Exception:
        _run_always_called_hooks(module, args, kwargs, result, called_always)
        raise


def _run_pre_hooks(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    hooks = (*_torch_module._global_forward_pre_hooks.items(), *module._forward_pre_hooks.items())
    for hook_id, hook in hooks:
        if hook_id in module._forward_pre_hooks_with_kwargs:
            out = hook(module, args, kwargs)
            if out is not None:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {out}.")
                args, kwargs = out
        else:
            out = hook(module, args)
            if out is not None:
                args = out if isinstance(out, tuple) else (out,)
    return args, kwargs


def _register_non_full_backward_hooks(module: torch.nn.Module, hooks: list, args: tuple, result: Any) -> None:
    var = result
    while not isinstance(var, torch.Tensor):
        if isinstance(var, dict):
            var = next(v for v in var.values() if isinstance(v, torch.Tensor))
        else:
            var = var[0]
    grad_fn = var.grad_fn
    if grad_fn is not None:
        for hook in hooks:
            grad_fn.register_hook(_torch_module._WrappedHook(hook, module))
        module._maybe_warn_non_full_backward_hook(args, result, grad_fn)


def _run_always_called_hooks(module: torch.nn.Module, args: tuple, kwargs: dict, result: Any,
                             called: set[int]) -> None:
    m = _torch_module
    for hook_id, hook in m._global_forward_hooks.items():
        if hook_id in m._global_forward_hooks_always_called and hook_id not in called:
            try:
                hook_result = hook(module, args, result)
                if hook_result is not None:
                    result = hook_result
            except Exception as exc:  # noqa: BLE001 - as torch: silenced, the forward's error wins
                warnings.warn("global module forward hook with ``always_call=True`` raised an exception that "
                              f"was silenced as another error was raised in forward: {exc}", stacklevel=4)
    for hook_id, hook in module._forward_hooks.items():
        if hook_id in module._forward_hooks_always_called and hook_id not in called:
            try:
                if hook_id in module._forward_hooks_with_kwargs:
                    hook_result = hook(module, args, kwargs, result)
                else:
                    hook_result = hook(module, args, result)
                if hook_result is not None:
                    result = hook_result
            except Exception as exc:  # noqa: BLE001
                warnings.warn("module forward hook with ``always_call=True`` raised an exception that was "
                              f"silenced as another error was raised in forward: {exc}", stacklevel=4)

