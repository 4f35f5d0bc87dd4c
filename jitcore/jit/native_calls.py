"""The tracing pass's calls of C code: what a builtin, a C method or an extension function is handed,
and the Python effects such a call has that the pass records or refuses (the interpreter's
``on_opaque_call`` and ``native_call`` hooks).

A C function cannot be interpreted: the pass calls it natively, after handing it what it may see (a
caller's object it uses by identity is pinned by a guard; dynamic numbers become values, except where
the C code keeps them as items of the program's containers: jit/numbers.py) and after taking the calls
whose results or effects differ from call to call or must be replayed (clock reads and random draws,
``print``/``write`` to the caller's streams, ``lru_cache`` wrappers, settings getters, context
variables, thread-state changes) to their own records.

Invariant: a C call the pass makes natively runs once, on values (never on proxies, except torch's own
builtins, which run on the proxies' shadows for their metadata); what it writes into reached objects
is known to the pass's snapshots (Note [Writes of the same object], jit/effects.py).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable
from typing import Any

import optree
import torch

from jitcore.dispatch.modes import MODE_STACK_FUNCTIONS, offer_native
from jitcore.dispatch.resolver import call_on_shadows
from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.ir import Proxy, tree_any, tree_has
from jitcore.jit import numbers
from jitcore.jit.code_kinds import is_torch_builtin, is_unlisted_operation
from jitcore.jit.context_variables import NOT_CONTEXT
from jitcore.jit.effects import emptied_list, written_keys
from jitcore.jit.function_transforms import call_natively, holds_functorch_tensor
from jitcore.jit.held_tensors import is_held_tensor
from jitcore.jit.lru_caches import LRU_WRAPPER, NOT_HANDLED, is_cache_clear, is_cache_info
from jitcore.jit.native_python import call_watched
from jitcore.jit.nondeterministic import NOT_A_READ, refuse_advance
from jitcore.jit.pending_keys import is_push
from jitcore.jit.set_ops import popped_unread, set_op
from jitcore.jit.settings_reads import SETTINGS_GETTERS
from jitcore.jit.state_kinds import identity_arguments
from jitcore.jit.tensor_keys import calls_weakref
from jitcore.langctx.tensor_text import own_text_of_call, refuse_text_of_tensors
from jitcore.langctx.thread_state import STATE_CHANGE_SYMBOLS
from jitcore.langctx.torch import dynamic_symbol
from jitcore.proxies.number import NumberProxy, specialize_all
from jitcore.proxies.text import TextProxy

__all__ = ["NativeCalls"]


class NativeCalls:
    """The C-call hooks of a tracing pass (``Pass`` in jit/interpretation.py), which provides the
    attributes and methods below."""

    provenance: Any
    keys: Any  # jit/tensor_keys.py's CallerKeys
    pending_keys: Any
    per_call: Any  # jit/nondeterministic.py's PerCallReads
    files: Any
    prints: Any
    settings: Any
    context_variables: Any
    lru_calls: Any
    snapshots: Any
    measured: Any
    limit: Any
    held: Any
    trace: Any
    weak_referent: Callable[..., Any]
    _has_numbers: Callable[[], bool]
    _state_change: Callable[..., Any]
    _source: Callable[[], Any]

    def _native_arguments(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """What C code is handed: a caller's object it uses by identity pins it, numbers are values."""
        if self.provenance.has_loose():
            for arg in identity_arguments(fn, args):  # ``d.get(obj)``, ``id(obj)``: its identity decides
                self.provenance.pin(arg)
        args = self.keys.arguments(fn, args)  # ``d.get(t)``, ``id(t)``: the caller's tensor t
        args = self.pending_keys.added(fn, args)  # ``seen.add(n)``: Note [An element only added]
        if type(fn) is types.WrapperDescriptorType and args and issubclass(type(args[0]), NumberProxy):
            args = (args[0].specialize(), *args[1:])  # ``int.__repr__(n)`` (json's encoder): C checks it
        # C code needs the values; a container method's receiver (``dict.get(d, k)``) keeps the program's
        # own numbers in it, as for a bound method (``d.get(k)``); a number or text receiver
        # (``float.hex(n)``) is a value to C code as any argument is
        own = 1 if isinstance(fn, types.MethodDescriptorType) and args and \
            not isinstance(args[0], (NumberProxy, TextProxy)) else 0
        passed = args[own:]
        if self._has_numbers() and tree_has((passed, kwargs), (NumberProxy, TextProxy)):
            # text made from numbers (jit/texts.py) is its characters to C code, but for a list's items
            kinds = () if numbers.stores_items(fn) else TextProxy if numbers.keeps_numbers(fn) \
                else (NumberProxy, TextProxy)
            handed = (*passed, *kwargs.values())
            numbers.values_in_lists(handed, kinds)  # Note [A list C is handed is the program's]
            args, kwargs = (*args[:own], *specialize_all(passed, kinds)), specialize_all(kwargs, kinds)
        return args, kwargs

    def _opaque_call(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if (text := own_text_of_call(fn, args, kwargs)) is not None:
            return text  # str(w), f"{w}": Note [A subclass's own text in print and str], tensor_text.py
        refuse_text_of_tensors(fn, args, kwargs)  # repr(x), print(x): langctx/tensor_text.py
        if fn is setattr and len(args) == 3 and not kwargs and self.held.store_attr(*args):
            return None  # setattr(p, "data", v): as STORE_ATTR
        if (number := self.per_call.read(fn, args, kwargs)) is not NOT_A_READ:  # time.time(), random.random()
            return number
        refuse_advance(fn, self.provenance.path_of)  # g.send(v): Note [An iterator of state advanced by its
        # methods] (jit/nondeterministic.py)
        if type(fn) is types.BuiltinMethodType:
            self.files.refuse_foreign_read(fn)  # f.read() of a file the program did not open
            if fn.__name__ == "flush" and self.prints.flush(fn, args, kwargs):  # jit/printing.py
                return None
            if fn.__name__ == "write" and (written := self.prints.write(fn, args, kwargs)) is not None:
                return written  # sys.stderr.write(...) of a stream of the caller's
        if is_push(fn) and self.pending_keys.push(fn, args, kwargs):  # Note [An item only pushed]
            return None
        if id(fn) in SETTINGS_GETTERS:  # torch.get_num_threads(): Note [Settings the program reads]
            return self.settings.read(fn, args, kwargs)
        if (read := self.context_variables.call(fn, args, kwargs)) is not NOT_CONTEXT:
            return read  # CV.get(): Note [Context variables] (jit/context_variables.py)
        fn = numbers.as_item_slot(fn, args, kwargs)  # Note [An item set by operator.setitem] (jit/numbers.py)
        args, kwargs = self._native_arguments(fn, args, kwargs)
        if (op := set_op(fn, args)) is not None:  # Note [A set's changes in program order] (jit/set_ops.py)
            frame = current_run().frames[-1]
            if op[1] == "pop" and self.snapshots.reached(op[0]) and not popped_unread(frame):
                raise UnsupportedOperationError(  # Note [A set's merges replayed as C makes them]
                    "pop() of a set the function reaches from its arguments or state returns the element its "
                    "hash table holds first, which a cached call's check of the set's contents does not see",
                    hints=("take the element outside the jitted function and pass it in as an argument",
                           "or drop pop()'s result and read the element another way (min(s), sorted(s)[0])"),
                )
            self.snapshots.note_set_op(*op)
        if type(fn) is LRU_WRAPPER and (cached := self.lru_calls.call(fn, args, kwargs)) is not NOT_HANDLED:
            return cached  # Note [A cached function's call] (jit/lru_caches.py)
        if is_cache_clear(fn):  # Note [A cache cleared inside the program] (jit/lru_caches.py)
            return self.lru_calls.clear(fn, args)
        if is_cache_info(fn) and not kwargs:  # Note [A cached function's counts] (jit/lru_caches.py)
            return self.lru_calls.info(fn, args, self.per_call)
        if (writes := written_keys(fn, args, kwargs)) is not None:  # Note [Writes of the same object]
            self.snapshots.note_write(*writes)
        if (emptied := emptied_list(fn, args)) is not None and self.measured.is_copy(emptied):
            self.snapshots.note_emptied(emptied)  # Note [A list the program empties], jit/appends.py
        if isinstance(fn, (types.BuiltinFunctionType, type)):
            symbol = STATE_CHANGE_SYMBOLS.get(fn)
            if symbol is not None:  # Note [State changes inside the traced function], langctx/thread_state.py
                return self._state_change(fn, symbol)(*args, **kwargs)
            if fn in MODE_STACK_FUNCTIONS:  # the program's modes (jitcore/dispatch/modes.py)
                return MODE_STACK_FUNCTIONS[fn](*args, **kwargs)
            if fn is torch._C._InferenceMode:  # noqa: SLF001
                raise UnsupportedOperationError(
                    "torch.inference_mode() entered inside a jitted function is not supported",
                    hints=("enter torch.inference_mode() around the call of the jitted function instead",),
                )
        if self.limit is not None and self.limit.recurses(fn, args):  # ``repr`` of a list nested 1100 deep
            return self.limit.call_native(len(current_run().frames),
                                          lambda: offer_native(fn, args, kwargs, self._native_call))
        with numbers.values_in_objects(fn, args, kwargs) if self._has_numbers() else contextlib.nullcontext():
            result = offer_native(fn, args, kwargs, self._native_call)  # to the program's modes, as eagerly
        self.measured.note_made(fn, args, result)  # Note [A list argument passed to a class's __init__]
        return self.weak_referent(fn, self.keys.dereferenced(result)) if calls_weakref(fn) else result

    @staticmethod
    def _interpreters_native_call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A C call the interpreter makes for the program's operation (a container's text for an
        f-string field, ``sorted``'s comparisons): Note [Python code a C call ran natively]."""
        refuse_text_of_tensors(fn, args, kwargs)  # f"{[x]}": Note [A container's text], tensor_text.py
        return call_watched(fn, args, kwargs)

    def _native_call(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if is_torch_builtin(fn) and (tree_has(args, Proxy) or tree_has(kwargs, Proxy)):
            if is_unlisted_operation(fn):  # torch._foreach_norm: an operation, recorded
                return dynamic_symbol(fn, f"torch.{fn.__name__}")(*args, **kwargs)
            if holds_functorch_tensor(args, kwargs):  # Note [Function transforms run on the traced tensors]
                return call_natively(fn, args, kwargs)
            if tree_any(args, is_held_tensor) or tree_any(kwargs, is_held_tensor):
                # a caller's tensor beside proxies (an optimizer's parameters, grouped by device with
                # their gradients for its foreach step): its input proxy, as for a symbol call; the
                # tensor itself would come back a value no record makes
                args, kwargs = optree.tree_map(self.held.bind, (args, kwargs), none_is_leaf=True)
            return call_on_shadows(fn, args, kwargs)  # metadata only (torch._C._group_tensors_...)
        if fn is breakpoint:
            from jitcore.diagnostics.markers import record_breakpoint

            return record_breakpoint(self.trace, self._source())  # jitcore.debug stops there
        return call_watched(fn, args, kwargs)  # Note [Python code a C call ran natively]
