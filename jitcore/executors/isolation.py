"""Compiling a region without disturbing what the program's other threads do with torch meanwhile.

Note [Torch's process-global state while compiling]
``compile_fx`` was written to run on the thread that asked for it, with nothing else compiling or
calling torch.compile'd code at the same time: while it compiles it sets state that is one per
process. jitcore compiles on a background thread (background.py) while the program keeps running,
possibly calling its own ``torch.compile``'d modules. What the compile sets, and what jitcore does:

- FX's "is tracing" flag (``torch.fx._symbolic_trace._is_fx_tracing_flag``, set by every
  ``Tracer.trace``: AOTAutograd's ``make_fx``, inductor's pattern tracing). Dynamo reads it on
  *every* call of a torch.compile'd function and refuses ("Detected that you are using FX to
  symbolically trace a dynamo-optimized function"): a torch.compile'd model called on the main
  thread failed while jitcore compiled. The two readers (``is_fx_tracing``,
  ``is_fx_symbolic_tracing``) are made thread-aware: true only on a thread that is inside a
  ``Tracer.trace`` (a per-thread depth kept by a wrapper of ``Tracer.trace``) *and* when the flag is
  set, so a thread that lowers the flag itself (torch's higher-order ops compile with it off) still
  sees it off. Their code objects are replaced, because Dynamo keeps a reference to the function
  made when ``torch.compile`` wrapped the model; the flag itself is untouched.
- The random number generators: AOTAutograd and inductor save the CPU (and CUDA) generator's state
  before tracing and restore it after (``preserve_rng_state``), which on another thread *rewinds*
  the draws the program made meanwhile (measured: a loop of ``torch.rand`` repeated 1,028 draws).
  On jitcore's compile thread ``preserve_rng_state`` restores nothing. That relies on the compile
  drawing no random numbers, which holds without autotuning (jitcore does not turn it on; with
  ``max_autotune`` inductor draws benchmark inputs on the device): tested, the program's draws during
  a compile are eager's.
- Dynamo's own state while *it* compiles (``torch.compiler.is_compiling``'s flag, the current
  ``make_fx`` tracer, the lazy-graph-module flag, compiled autograd's compiler, the dispatch-mode
  flags of ``torch.utils._python_dispatch``): jitcore's compiles hold Dynamo's compile lock
  (``torch._dynamo.convert_frame.compile_lock``, which torch takes itself around each frame compile
  and each lazy backward compile), so a torch.compile on another thread never compiles at the same
  time as jitcore; it waits for the region being compiled (seconds, once per new graph).
- Configuration (``torch._inductor.config`` and the other config modules): thread-local in torch
  (a ``ContextVar`` per entry), so a background compile would not see the settings the program made;
  jobs run in a copy of the submitting thread's context (background.py).
- Already per thread, nothing to do: grad mode, the dispatch-mode stack (the fake mode), the
  ``TracingContext``, inductor's ``V``, the autograd multithreading and saved-tensor-hook switches.

Left as they are (documented in docs/executors.md): while a compile runs, the program's *own*
``make_fx``/``torch.export`` of a higher-order op on another thread could see jitcore's current
``make_fx`` tracer, ``torch.fx`` graph modules made on another thread may come out lazy
(``_LazyGraphModule``), and compiled autograd is switched off process-wide during AOTAutograd's
trace. None of them is reached by a torch.compile'd model's calls or by eager code.

Invariants:
- ``compiling()`` takes Dynamo's compile lock before jitcore's ``COMPILE_LOCK`` (one order, so no
  deadlock with a thread holding Dynamo's lock that then compiles a jitcore region);
- the readers are replaced once per process, at the first compile, and only when their code is the
  one this module knows (else it logs and leaves them: the flag then stays process-wide);
- outside jitcore's compile thread the RNG functions behave as torch wrote them.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

from jitcore.executors import background
from jitcore.executors.regions import LOG

__all__ = ["compiling", "traces_here"]

_TRACING = threading.local()  # .depth: how many Tracer.trace calls this thread is inside
_INSTALLED = False

# the readers as torch 2.x writes them, but true only on a thread inside Tracer.trace
_READERS = '''
def is_fx_tracing() -> bool:
    is_fx_tracing_warning()
    return _is_fx_tracing_flag and _jitcore_traces_here()


def is_fx_symbolic_tracing() -> bool:
    return _is_fx_tracing_flag and _jitcore_traces_here() and not torch.compiler.is_compiling()
'''
_KNOWN_NAMES = {"is_fx_tracing": {"is_fx_tracing_warning", "_is_fx_tracing_flag"},
                "is_fx_symbolic_tracing": {"_is_fx_tracing_flag", "torch", "compiler", "is_compiling"}}


def traces_here() -> bool:
    """Whether this thread is inside an FX ``Tracer.trace`` (counted once ``compiling`` has run)."""
    return getattr(_TRACING, "depth", 0) > 0


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Hold while compiling a region: Dynamo's compile lock, then jitcore's ``COMPILE_LOCK``; the
    first call makes the process-global state listed in the Note safe for other threads."""
    from torch._dynamo.convert_frame import compile_lock

    with compile_lock, background.COMPILE_LOCK:
        _install()
        yield


def _install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    _INSTALLED = True
    _thread_aware_fx_tracing()
    _no_rewind_on_the_compile_thread()


def _thread_aware_fx_tracing() -> None:
    import torch.fx._symbolic_trace as symbolic_trace

    readers = {name: getattr(symbolic_trace, name, None) for name in _KNOWN_NAMES}
    for name, fn in readers.items():
        if fn is None or set(fn.__code__.co_names) != _KNOWN_NAMES[name]:
            LOG.warning("torch.fx.%s is not the code jitcore knows: FX's tracing flag stays "
                        "process-wide (a torch.compile'd call on another thread may fail while "
                        "jitcore compiles)", name)
            return
    original = symbolic_trace.Tracer.trace

    @functools.wraps(original)
    def trace(self: Any, *args: Any, **kwargs: Any) -> Any:
        _TRACING.depth = getattr(_TRACING, "depth", 0) + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _TRACING.depth -= 1

    symbolic_trace.Tracer.trace = trace
    symbolic_trace.__dict__["_jitcore_traces_here"] = traces_here
    made: dict[str, Any] = {}
    exec(compile(_READERS, symbolic_trace.__file__, "exec"), vars(symbolic_trace), made)  # noqa: S102
    for name, fn in readers.items():
        fn.__code__ = made[name].__code__


def _no_rewind_on_the_compile_thread() -> None:
    import torch._dynamo.utils as dynamo_utils
    import torch._functorch.aot_autograd as aot_autograd

    original = dynamo_utils.preserve_rng_state

    def preserve_rng_state() -> Any:
        if background.on_compile_thread():
            return contextlib.nullcontext()
        return original()

    dynamo_utils.preserve_rng_state = preserve_rng_state
    if getattr(aot_autograd, "preserve_rng_state", None) is original:
        aot_autograd.preserve_rng_state = preserve_rng_state
