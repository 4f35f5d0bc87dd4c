"""Lookasides of the NumPy bridge that hold no per-pass state: torch/NumPy interoperation and
repairs of ``torch._numpy`` where it departs from NumPy (or from what a trace may record).

Invariants: each function here is called in place of a callable of the interpreted program, with
that callable's arguments; what it cannot handle it passes on as the interpreter would have
(``native``: an opaque call), so a program that never meets NumPy behaves as without the bridge.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch._numpy as tnp
import torch._numpy._util as tnp_util

from jitcore.dispatch.lookasides import as_subclass
from jitcore.dispatch.resolver import NO_OVERRIDE, handle_torch_function
from jitcore.interpreter import current_run
from jitcore.interpreter.callbacks import abs_
from jitcore.interpreter.calls import call_function, opaque
from jitcore.interpreter.conversions import divmod_, pow_, round_
from jitcore.ir import Proxy, tree_has
from jitcore.langctx.torch import TORCH_TABLE
from jitcore.numpy.boundary import wrap
from jitcore.numpy.indexing import positive_steps
from jitcore.proxies import TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = [
    "BOOL_AS_INT",
    "BUILTIN_OPERATORS",
    "DTYPE_FGET",
    "asarray",
    "bool_as_int",
    "builtin_operator",
    "convert_to_tensor",
    "dtype_of",
    "native",
    "nbytes",
    "tensor_numpy",
    "with_positive_steps",
]

_ASTYPE = tnp.ndarray.astype
DTYPE_FGET = vars(tnp.ndarray)["dtype"].fget
_TORCH_NUMPY_DIR = os.path.dirname(tnp.__file__) + os.sep


def asarray(data: Any, **kwargs: Any) -> Any:
    """``torch.asarray`` (not recordable) on a traced tensor: ``torch.as_tensor`` when equivalent."""
    as_tensor = TORCH_TABLE.lookup(torch.as_tensor)
    if isinstance(data, TensorProxy) and as_tensor is not None and set(kwargs) <= {"dtype", "device"}:
        return as_tensor(data, **kwargs)
    return opaque(current_run(), torch.asarray, (data,), kwargs)  # as if there were no lookaside


# Builtins that call a dunder natively; on a wrapper the dunder must run on the interpreter.
BUILTIN_OPERATORS = ((abs, "__abs__"), (divmod, "__divmod__"), (pow, "__pow__"), (round, "__round__"))


# The parameters of those builtins that may be given by keyword (``round(number=x, ndigits=2)``).
_KEYWORDS: dict[Any, tuple[str, ...]] = {round: ("number", "ndigits"), pow: ("base", "exp", "mod")}


def builtin_operator(builtin: Callable[..., Any], dunder: str, *args: Any, **kwargs: Any) -> Any:
    if kwargs:  # keywords that continue the positional arguments are taken as them
        following = _KEYWORDS.get(builtin, ())[len(args):len(args) + len(kwargs)]
        if set(following) != set(kwargs):
            return native(builtin, args, kwargs)  # the builtin's own answer or error
        args = (*args, *(kwargs[name] for name in following))
    if not args:
        return native(builtin, args, {})
    value, *rest = args
    return _operator(builtin, dunder, value, *rest)


def _operator(builtin: Callable[..., Any], dunder: str, value: Any, *args: Any) -> Any:
    if issubclass(type(value), tnp.ndarray) and not (builtin is pow and len(args) > 1):
        return current_run().call(getattr(type(value), dunder), value, *args)
    if builtin is divmod or builtin is pow and len(args) == 1:
        other = args[0] if args else None
        if isinstance(other, tnp.ndarray):
            return current_run().call(getattr(type(other), "__r" + dunder[2:]), other, value)
    if builtin is abs and not args:
        return abs_(value)  # a Python __abs__ interpreted (interpreter/callbacks.py)
    if any(_user_dunder(v) for v in (value, *args)):  # interpreted (interpreter/conversions.py)
        return _INTERPRETED[builtin](value, *args)
    return native(builtin, (value, *args), {})


_INTERPRETED: dict[Any, Callable[..., Any]] = {divmod: divmod_, pow: pow_, round: round_}
_DUNDERS = ("__divmod__", "__rdivmod__", "__pow__", "__rpow__", "__round__")


def _user_dunder(value: Any) -> bool:
    """Whether ``value`` is a program's object with a Python dunder of these builtins (not a proxy), or
    one of a class that may gain one (its lookups are the run's: Note [A special method is looked up on
    the class], jit/provenance.py)."""
    # found without reading ``__class__`` (``isinstance`` does) or running a descriptor's ``__get__`` (a
    # class attribute read does): CPython's test_descr counts both
    t = type(value)
    known = _FIXED_ANSWERS.get(t)
    if known is not None:
        return known
    if issubclass(t, Proxy):
        return False
    if all(k.__flags__ & _IMMUTABLE_TYPE for k in t.__mro__):
        answer = _FIXED_ANSWERS[t] = any(type(_static_lookup(t, name)) is types.FunctionType
                                         for name in _DUNDERS)
        return answer
    return True


# Note [Builtin operators of immutable classes]
# ``divmod(i, 3)``, ``pow(x, 2)``, ``round(x, 1)`` of ints and floats went through ``_user_dunder`` per
# argument: five MRO walks each, ~10 us of the ~27 us a jitted ``divmod`` of two ints cost (2.7 us
# interpreted, /tmp/cpy45-probes/p3e.py), in every program once NumPy is imported. A class whose MRO holds
# only immutable classes (``int``, ``float``, ``str``, ``Fraction`` is not: a Python class) can gain no
# attribute, so its answer is kept; a Python class is looked up on every call, as it may be changed.
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE
_FIXED_ANSWERS: dict[type, bool] = {}


def _static_lookup(t: type, name: str) -> Any:
    """``name`` as the first class in ``t``'s MRO that has it holds it (None: none has it)."""
    return next((vars(k)[name] for k in t.__mro__ if name in vars(k)), None)


def in_user_code() -> bool:
    """Whether the interpreted frame making the current call is outside torch._numpy."""
    frames = current_run().frames
    return bool(frames) and not frames[-1].code.co_filename.startswith(_TORCH_NUMPY_DIR)


def dtype_of(wrapper: Any) -> Any:
    """``wrapper.dtype``: NumPy's own dtype for the user's code, torch._numpy's for torch._numpy."""
    dtype = DTYPE_FGET(wrapper)
    return np.dtype(dtype.name) if in_user_code() else dtype


def nbytes(wrapper: Any) -> int:
    """``a.nbytes`` as NumPy defines it (torch._numpy reads the storage, which a proxy lacks)."""
    return wrapper.tensor.numel() * wrapper.tensor.dtype.itemsize


def convert_to_tensor(data: Any) -> Any:
    """torch._numpy's ``torch.as_tensor(data)``, recorded with the dtype it infers now.

    torch._numpy changes the default dtype around this call (to float64, as NumPy infers); the
    recorded call must not depend on the default dtype when the trace runs, so it names the dtype.
    """
    run = current_run()
    if tree_has(data, (TensorProxy, tnp.ndarray)):
        return call_function(run, tnp_util._try_convert_to_tensor, (data,), None)
    try:
        dtype = torch.as_tensor(data).dtype  # on Python constants only
    except Exception as exc:  # noqa: BLE001 - as torch._numpy reports it
        raise NotImplementedError(
            f"failed to convert {data} to ndarray. \nInternal error is: {exc}."
        ) from None
    return run.call(torch.as_tensor, data, dtype=dtype)


def tensor_numpy(provenance: Any, tensor: Any, **kwargs: Any) -> Any:
    """``tensor.numpy()``: the wrapper over the tensor (sharing it, as NumPy shares memory); for a
    tensor whose class has a ``__torch_function__``, what that answers (Note [numpy() through a
    class's __torch_function__])."""
    if isinstance(tensor, TensorProxy):
        answered = handle_torch_function(torch.Tensor.numpy, (tensor,), (tensor,), kwargs)
        if answered is not NO_OVERRIDE:
            return answered
    force = kwargs.pop("force", False)
    if kwargs:
        raise TypeError(f"numpy() got an unexpected keyword argument '{next(iter(kwargs))}'")
    if isinstance(tensor, SubclassTensorProxy) or _has_python_dispatch(tensor):
        raise RuntimeError(".numpy() is not supported for tensor subclasses.")
    if not isinstance(tensor, TensorProxy):
        tensor = provenance.bind_leaked_tensor(tensor)
    # torch refuses a tensor that requires grad only while grad mode is on
    # (an autograd.Function's forward, which runs with grad off, calls ``x.numpy()`` on its inputs).
    if tensor.requires_grad and torch.is_grad_enabled() and not force:
        raise RuntimeError(
            "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
        )
    if tensor.dtype not in TORCH_DTYPES_WITH_NUMPY:
        raise TypeError(f"Got unsupported ScalarType {str(tensor.dtype).removeprefix('torch.').capitalize()}")
    if tensor.python_type is not torch.Tensor:
        tensor = as_subclass(tensor, torch.Tensor)  # the array forgets the class: torch.from_numpy's is plain
    return wrap(tensor.detach() if force and tensor.requires_grad else tensor)


# Note [numpy() through a class's __torch_function__]
# Eagerly ``x.numpy()`` on an instance of a class with a ``__torch_function__`` of its own hands that
# method ``Tensor.numpy`` (with ``force=`` where the call passed it) first; the array is what it
# returns (through ``super().__torch_function__``: the method again, with subclass torch functions
# off). The bridge's lookaside took the call before the class saw it: a class that logs, refuses or
# answers ``numpy()`` itself was skipped. It now asks the class first, as torch's own check does.
def _has_python_dispatch(tensor: Any) -> bool:
    """Whether a tensor the program holds (not traced) is one torch's ``numpy()`` refuses: an instance
    of a subclass with a ``__torch_dispatch__`` of its own."""
    return (isinstance(tensor, torch.Tensor) and not isinstance(tensor, TensorProxy)
            and torch._C._dispatch_keys(tensor).has(torch._C.DispatchKey.Python))


TORCH_DTYPES_WITH_NUMPY = frozenset({
    torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32,
    torch.uint64, torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128,
})


# its default integer.
BOOL_AS_INT = frozenset({"cumsum", "cumprod"})


def bool_as_int(args: tuple, kwargs: dict) -> tuple:
    if not args or not isinstance(args[0], tnp.ndarray) or kwargs.get("dtype") is not None:
        return args
    if args[0].tensor.dtype is not torch.bool:
        return args
    return (call_function(current_run(), _ASTYPE, (args[0], tnp.dtype("int64")), None), *args[1:])


def with_positive_steps(array: Any, index: Any) -> tuple[Any, Any]:
    """``array[index]`` rewritten without negative-step slices (see jitcore/numpy/indexing.py)."""
    rewrite = positive_steps(index, tuple(array.shape)) if isinstance(array, tnp.ndarray) else None
    if rewrite is None:
        return array, index
    flips, index = rewrite
    if flips:
        array = current_run().call(tnp.flip, array, flips)
    return array, index


def native(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Call ``fn`` as the interpreter would have without the bridge's lookaside (opaquely)."""
    return opaque(current_run(), fn, args, kwargs)
