"""The NumPy bridge of one tracing pass: NumPy calls run as ``torch._numpy`` code on the interpreter.

``torch._numpy`` is NumPy's API written in Python over torch operations. The bridge's lookasides
send each NumPy callable to its ``torch._numpy`` counterpart, which the interpreter then runs like
any Python code, so only its torch calls on proxies are recorded: the trace holds tensors only and
the ``torch._numpy.ndarray`` wrappers live in the interpreted program alone.

Lookasides (see ``NumpyBridge.lookasides``; the stateless ones live in ``lookasides.py``):
- ``np.*`` (``numpy``, ``numpy.linalg``, ``numpy.fft``) -> the same-named ``torch._numpy`` callable,
  interpreted, after NumPy values among the arguments (arrays, scalars, dtypes) are converted;
  ufunc methods (``np.add.reduce``) -> their function forms;
- methods and operators of ``torch._numpy.ndarray`` (and of NumPy scalars meeting one, and the
  builtins ``abs``/``pow``/``divmod``/``round``) -> the same, with the same argument conversion
  and scalar bookkeeping; ``isinstance`` and ``a.dtype`` answer with NumPy's types for user code;
- ``Tensor.numpy()`` on a proxy -> a wrapper of the proxy; ``torch.from_numpy`` / ``as_tensor`` /
  ``tensor`` / ``asarray`` of a wrapper -> its proxy;
- NumPy callables without a counterpart: run natively on constants, UnsupportedNumPyError when they
  meet traced values (``np.random.*`` and ``np.random.Generator`` methods always).

Note [NumPy scalars]: ``torch._numpy`` returns 0-d arrays where NumPy returns scalars (``np.sum(a)``
is an ``np.float64``). The bridge asks NumPy itself which results are scalars: when a call gives a
0-d array, the same NumPy call runs on zero-stride placeholder arrays of the arguments' shapes and
dtypes, and the wrapper is marked a scalar when NumPy returned one (falling back to the rule "0-d
results are scalars except from ``ARRAY_RETURNING`` functions" when the placeholder call fails).
Marked wrappers leave the trace as NumPy scalars and enter later placeholder calls as scalars.

Note [NumPy dtypes]: ``torch._numpy`` follows NumPy's promotion rules, with a few gaps (an integer
array divided by an integer gives torch's default float, float32, where NumPy gives float64). The
placeholder call of Note [NumPy scalars] also runs for results of up to ``_PLACEHOLDER_LIMIT``
elements, and a result whose dtype or shape differs from NumPy's is cast or reshaped to it
(recorded as torch operations), except for in-place results, which must stay the operand itself;
a list or tuple of results takes the container type NumPy gives (``np.split`` gives a list).

Invariant: the bridge never records anything itself; everything recorded comes from torch calls
inside interpreted ``torch._numpy`` code.
"""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch._numpy as tnp
import torch._numpy._util as tnp_util
from torch.fx.experimental.symbolic_shapes import optimization_hint

from jitcore.dispatch.lookasides import DISPATCH_LOOKASIDES
from jitcore.dispatch.resolver import NO_OVERRIDE, handle_torch_function
from jitcore.errors import DataDependentError
from jitcore.interpreter import current_run
from jitcore.interpreter.calls import call_function, canonical
from jitcore.ir import tree_any
from jitcore.langctx.torch import TORCH_TABLE
from jitcore.numpy.boundary import SUPPORTED_DTYPES, Epilogue, array_to_tensor, check_array, wrap
from jitcore.numpy.errors import unsupported, user_position
from jitcore.numpy.lookasides import (
    BOOL_AS_INT,
    BUILTIN_OPERATORS,
    DTYPE_FGET,
    asarray,
    bool_as_int,
    builtin_operator,
    convert_to_tensor,
    dtype_of,
    in_user_code,
    native,
    nbytes,
    tensor_numpy,
    with_positive_steps,
)
from jitcore.numpy.table import ARRAY_RETURNING, NumpyCallable, numpy_callables
from jitcore.proxies import TensorProxy

__all__ = ["NumpyBridge", "wrap"]

_FAILED = object()
_ASTYPE = tnp.ndarray.astype
_RESHAPE = tnp.ndarray.reshape
# Results up to this many elements are checked against NumPy on placeholders (Note [NumPy dtypes]).
_PLACEHOLDER_LIMIT = 1 << 16


# Note [Placeholders of symbolic sizes]
# In a pass with symbolic sizes (a NumPy array whose shape changed between calls), a wrapper's sizes
# are SymInts. The placeholder arrays of Note [NumPy scalars] need ints: made from the sizes
# themselves (``np.broadcast_to(..., tuple(a.shape))``), every size was guarded equal to the traced
# one, and every NumPy program traced an entry per shape (``x * 2`` over arrays of 4, 5, 6 rows: 3
# entries). The placeholders take the sizes' hints (the traced call's sizes) without guarding them:
# which results are scalars, and their dtypes, do not depend on sizes the ShapeEnv keeps symbolic
# (0 and 1 stay static). Where torch._numpy's result shape differs from NumPy's at the hints, the
# reshape to NumPy's shape compares the symbolic shape with it, which guards those sizes, so the
# entry keeps exactly the sizes the reshape was traced for.
def _hint(size: Any) -> int:
    """``size`` as an int: a symbolic one by its hint, unguarded (Note [Placeholders of symbolic sizes])."""
    return optimization_hint(size) if isinstance(size, torch.SymInt) else size


def _hints(shape: Any) -> tuple[int, ...]:
    return tuple(_hint(size) for size in shape)
_DTYPE_EQ = tnp.DType.__eq__

# Binary operators of NumPy scalars that can meet a torch._numpy.ndarray.
_SCALAR_OPERATORS = tuple(
    f"__{r}{op}__"
    for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
               "lshift", "rshift")
    for r in ("", "r")
) + ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")


class NumpyBridge:
    """One pass's NumPy state: which wrappers NumPy would have as scalars; the lookasides.

    Args:
        provenance: the pass's Provenance (binds NumPy arrays read from state or made natively).
    """

    def __init__(self, provenance: Any) -> None:
        self.provenance = provenance
        self._scalars: dict[int, Any] = {}
        self._outer_isinstance = DISPATCH_LOOKASIDES.get(isinstance, isinstance)  # what ours wrap
        self._outer_type = DISPATCH_LOOKASIDES.get(type, type)

    # --- scalars (Note [NumPy scalars]) -------------------------------------------------------------
    def is_scalar(self, value: Any) -> bool:
        return id(value) in self._scalars

    def _mark(self, value: Any) -> None:
        self._scalars[id(value)] = value  # holds the wrapper, so that its id is not reused

    def _as_numpy_would(
        self, result: Any, numpy_fn: Callable[..., Any], name: str, args: tuple, kwargs: dict
    ) -> Any:
        """``result`` with the dtype, shape, scalar-ness and container NumPy gives (Notes [NumPy
        scalars], [NumPy dtypes])."""
        arrays = _array_positions(result)
        if not arrays or all(w.ndim and _hint(w.size) > _PLACEHOLDER_LIMIT for _, w in arrays):
            return result
        eager = self._on_placeholders(numpy_fn, args, kwargs)
        fixed: dict[int | None, Any] = {}
        operands = (*args, *kwargs.values())
        for position, wrapper in arrays:
            if _is_argument(wrapper, operands):
                continue  # an in-place result (``a += 1``, ``out=``) stays the operand itself
            real = eager if position is None or eager is _FAILED else _item(eager, position)
            if isinstance(real, (np.ndarray, np.generic)):
                wrapper = self._conform(wrapper, real)
            if wrapper.ndim == 0 and (
                isinstance(real, np.generic) if eager is not _FAILED else name not in ARRAY_RETURNING
            ):
                self._mark(wrapper)
            fixed[position] = wrapper
        if isinstance(result, tnp.ndarray):
            return fixed.get(None, result)
        if type(result) not in (tuple, list):
            return result  # a named tuple: as torch._numpy made it
        items = [fixed.get(i, v) for i, v in enumerate(result)]
        container = type(eager) if type(eager) in (tuple, list) and len(eager) == len(items) else type(result)
        return container(items)

    def _conform(self, wrapper: Any, real: Any) -> Any:
        """``wrapper`` cast and reshaped to what NumPy gave on placeholders, where they differ."""
        if np.dtype(wrapper.dtype.name) != real.dtype and real.dtype in SUPPORTED_DTYPES:
            wrapper = call_function(current_run(), _ASTYPE, (wrapper, tnp.dtype(real.dtype.name)), None)
        # Note [Placeholders of symbolic sizes]: equal at the hints, the shapes are taken as equal; where
        # they differ, comparing the symbolic shape with NumPy's guards it, so the reshape's sizes hold
        if _hints(wrapper.shape) != real.shape and tuple(wrapper.shape) != real.shape \
                and wrapper.size == real.size:
            wrapper = call_function(current_run(), _RESHAPE, (wrapper, real.shape), None)
        return wrapper

    def _on_placeholders(self, numpy_fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        try:
            placeholder_args, placeholder_kwargs = _map_tree(self._placeholder, (args, kwargs))
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return numpy_fn(*placeholder_args, **placeholder_kwargs)
        except Exception:  # noqa: BLE001 - any failure means: use the rule instead
            return _FAILED

    def _placeholder(self, value: Any) -> Any:
        if isinstance(value, tnp.ndarray):
            dtype = np.dtype(value.dtype.name)
            if self.is_scalar(value):
                return np.zeros((), dtype)[()]
            return np.broadcast_to(np.zeros((), dtype), _hints(value.shape))
        if isinstance(value, TensorProxy):
            raise TypeError("no placeholder for a tensor")
        if isinstance(value, tnp.DType):
            return np.dtype(value.name)
        if isinstance(value, type) and issubclass(value, tnp.generic):
            return np.dtype(tnp.dtype(value).name).type
        return value

    # --- NumPy values entering torch._numpy -------------------------------------------------------
    def to_torch_numpy(self, value: Any) -> Any:
        """``value`` as torch._numpy takes it: arrays bound and wrapped, scalars as marked 0-d
        arrays, NumPy dtypes and scalar types as torch._numpy's."""
        if isinstance(value, np.ndarray):
            return self._bind_array(value)
        if isinstance(value, np.generic):
            if np.dtype(type(value)) not in SUPPORTED_DTYPES:
                raise unsupported(
                    f"a NumPy scalar of type {type(value).__name__}", "torch's NumPy layer has no such dtype"
                )
            wrapped = current_run().call(tnp.asarray, value.item(), dtype=np.dtype(type(value)).name)
            self._mark(wrapped)
            return wrapped
        if isinstance(value, np.dtype):
            return _torch_numpy_dtype(value)
        if isinstance(value, type) and issubclass(value, np.generic):
            return _torch_numpy_dtype(np.dtype(value)).type
        return value

    def _bind_array(self, array: np.ndarray) -> Any:
        path = self.provenance.path_of(array)
        if path is not None:
            return self.provenance.bind_state(array, path)
        check_array(array, "a NumPy array made while tracing")
        return wrap(self.provenance.bind_leaked_tensor(array_to_tensor(array)))

    def _convert_arguments(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if kwargs.get("dtype") in (object, str, bytes):
            raise unsupported(
                f"dtype={kwargs['dtype'].__name__}",
                "torch's NumPy layer supports bool, integer, float and complex dtypes",
            )
        if not _has_numpy_value(args) and not _has_numpy_value(kwargs):
            return args, kwargs
        return _map_tree(self.to_torch_numpy, (args, kwargs))

    # --- outputs -----------------------------------------------------------------------------------
    def split_output(self, output: Any) -> tuple[Any, Epilogue | None]:
        """The output with tensors in place of wrappers, and the epilogue that converts them back."""
        return Epilogue.split(output, lambda v: isinstance(v, tnp.ndarray), self.is_scalar)

    # --- lookasides --------------------------------------------------------------------------------
    def lookasides(self) -> dict[Any, Callable[..., Any]]:
        """Replacements for NumPy's callables and torch._numpy's methods, for this pass."""
        table: dict[Any, Callable[..., Any]] = {}
        for entry in numpy_callables():
            table[canonical(entry.numpy_fn)] = self._numpy_lookaside(entry)
        for name, fn in vars(tnp.ndarray).items():
            if isinstance(fn, types.FunctionType):
                table[fn] = functools.partial(self._call_method, fn, name)
        table[tnp.DType.__eq__] = self._dtype_eq
        table[DTYPE_FGET] = dtype_of
        table[vars(tnp.ndarray)["nbytes"].fget] = nbytes
        table[isinstance] = self._isinstance
        table[type] = self._type
        for scalar_type in _numpy_scalar_types():
            for name in _SCALAR_OPERATORS:
                slot = getattr(scalar_type, name, None)
                if slot is not None:
                    table[slot] = functools.partial(self._scalar_operator, slot, name)
        for builtin, dunder in BUILTIN_OPERATORS:
            table[builtin] = functools.partial(builtin_operator, builtin, dunder)
        numpy_of_tensor = functools.partial(tensor_numpy, self.provenance)
        table[vars(TensorProxy)["numpy"]] = numpy_of_tensor
        table[torch.Tensor.numpy] = numpy_of_tensor
        table[torch.from_numpy] = self._from_numpy
        for factory in (torch.as_tensor, torch.tensor):
            table[factory] = functools.partial(
                self._tensor_from_array, TORCH_TABLE.lookup(factory) or factory
            )
        table[torch.asarray] = functools.partial(self._tensor_from_array, asarray)
        for name in _UFUNC_METHODS:
            table[getattr(np.ufunc, name)] = functools.partial(self._ufunc_method, name)
        table[tnp_util._try_convert_to_tensor] = convert_to_tensor
        return table

    def _numpy_lookaside(self, entry: NumpyCallable) -> Callable[..., Any]:
        if entry.torch_fn is None:
            return functools.partial(self._call_uncovered, entry)
        return functools.partial(self._call_numpy, entry)

    def _call_numpy(self, entry: NumpyCallable, *args: Any, **kwargs: Any) -> Any:
        if isinstance(entry.numpy_fn, type) and not _has_traced_value((args, kwargs)):
            return native(entry.numpy_fn, args, kwargs)  # np.float32(2.0): a constant
        if entry.short_name in _CONVERTERS and args and isinstance(args[0], TensorProxy):
            # Note [np.asarray of a tensor whose class has a __torch_function__]
            dtype = kwargs.get("dtype", args[1] if len(args) > 1 else None)
            answered = handle_torch_function(torch.Tensor.__array__, args[:1], args[:1], {"dtype": dtype})
            if answered is not NO_OVERRIDE:
                args = (answered, *args[1:])
        converted_args, converted_kwargs = self._convert_arguments(args, kwargs)
        if entry.short_name in BOOL_AS_INT:
            converted_args = bool_as_int(converted_args, converted_kwargs)
        try:
            result = current_run().call(entry.torch_fn, *converted_args, **converted_kwargs)
        except NotImplementedError as exc:
            raise unsupported(
                entry.name, f"torch's NumPy layer does not implement this use ({exc})"
            ) from None
        return self._as_numpy_would(result, entry.numpy_fn, entry.short_name, args, kwargs)

    def _call_uncovered(self, entry: NumpyCallable, *args: Any, **kwargs: Any) -> Any:
        if entry.name.startswith("np.random."):
            raise unsupported(
                entry.name,
                "NumPy's random generator cannot be recorded as torch operations",
                hints=("draw the random arrays outside the jitted function and pass them in",
                       "or use torch's generator (torch.randn, ...) on tensors"),
            )
        if _has_traced_value((args, kwargs)):
            raise unsupported(
                entry.name, "torch's NumPy layer (torch._numpy) does not implement this function"
            )
        return native(entry.numpy_fn, args, kwargs)  # constants only: NumPy computes a constant

    def _call_method(self, fn: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "tolist":
            raise DataDependentError(
                "ndarray.tolist() needs the array's values, which are not known while tracing",
                hints=("return the array and call .tolist() on the result",),
                where=user_position(),
            )
        if name == "__getitem__" and len(args) == 2:
            args = with_positive_steps(*args)
        converted_args, converted_kwargs = self._convert_arguments(args, kwargs)
        if name in BOOL_AS_INT:
            converted_args = bool_as_int(converted_args, converted_kwargs)
        try:
            # interpreted directly: through ``run.call`` this lookaside would find itself again
            result = call_function(current_run(), fn, converted_args, converted_kwargs)
        except NotImplementedError as exc:
            raise unsupported(
                f"ndarray.{name}", f"torch's NumPy layer does not implement this use ({exc})"
            ) from None
        return self._as_numpy_would(result, _method_caller(name), name, args, kwargs)

    def missing_attribute(self, obj: Any, name: Any) -> None:
        """``obj.name`` raised AttributeError for the program: when ``obj`` is a wrapper and NumPy's arrays
        have ``name`` (``a.tobytes``, ``a.ctypes``), which torch's NumPy layer does not implement, eagerly
        the program would have it: UnsupportedNumPyError (the call runs eagerly), not NumPy's answer
        changed into an AttributeError."""
        if type(obj) is tnp.ndarray and type(name) is str and hasattr(np.ndarray, name):
            raise unsupported(f"ndarray.{name}", "torch's NumPy layer (torch._numpy) does not implement it")

    def _isinstance(self, value: Any, cls: Any) -> bool:
        """``isinstance``: a wrapper is an ``np.ndarray``, or the NumPy scalar type it stands for."""
        if type(value) is tnp.ndarray:
            if type(cls) is tuple:
                return any(self._isinstance(value, c) for c in cls)
            if cls is np.ndarray:
                return not self.is_scalar(value)
            if isinstance(cls, type) and issubclass(cls, np.generic):
                return self.is_scalar(value) and issubclass(np.dtype(value.dtype.name).type, cls)
        return self._outer_isinstance(value, cls)

    def _type(self, *args: Any, **kwargs: Any) -> Any:
        """``type(a)`` in user code: ``np.ndarray``, or the NumPy scalar type a scalar stands for; other
        calls (``type(name, bases, ns, **kwargs)``, a class statement's) are the next lookaside's."""
        if len(args) == 1 and not kwargs and type(args[0]) is tnp.ndarray and in_user_code():
            wrapper = args[0]
            return np.dtype(wrapper.dtype.name).type if self.is_scalar(wrapper) else np.ndarray
        return self._outer_type(*args, **kwargs)

    def _dtype_eq(self, dtype: Any, other: Any) -> Any:
        other = self.to_torch_numpy(other) if isinstance(other, (np.dtype, type)) else other
        return _DTYPE_EQ(dtype, other)

    def _scalar_operator(self, slot: Any, name: str, scalar: Any, other: Any = None) -> Any:
        if not isinstance(other, tnp.ndarray):
            return native(slot, (scalar, other), {})
        wrapped = self.to_torch_numpy(scalar)
        return current_run().call(getattr(tnp.ndarray, name), wrapped, other)  # its lookaside marks scalars

    def _ufunc_method(self, name: str, ufunc: Any, *args: Any, **kwargs: Any) -> Any:
        """``np.add.reduce(a, axis)`` and the like: as the function form (``np.sum(a, axis=0)``);
        torch._numpy's ufuncs have no methods."""
        if not _has_traced_value((args, kwargs)):
            return native(getattr(ufunc, name), args, kwargs)
        form = _UFUNC_FORMS.get((ufunc.__name__, name))
        if form is None or len(args) > 2 or not set(kwargs) <= {"axis", "dtype", "keepdims"}:
            raise unsupported(
                f"np.{ufunc.__name__}.{name}", "torch._numpy's ufuncs have no methods",
                hints=(_UFUNC_HINT,),
            )
        if len(args) < 2:
            kwargs.setdefault("axis", 0)  # a ufunc method's default axis, unlike the function form's
        entry = _entries_by_function()[getattr(np, form)]
        return self._call_numpy(entry, *args, **kwargs)

    def _tensor_from_array(self, factory: Callable[..., Any], data: Any, *args: Any, **kwargs: Any) -> Any:
        """``torch.as_tensor(a)`` and the like on an array: the same call on the array's tensor."""
        if isinstance(data, np.ndarray):
            data = self._bind_array(data)
        if isinstance(data, tnp.ndarray):
            data = data.tensor
            if factory is TORCH_TABLE.lookup(torch.tensor) and not args \
                    and set(kwargs) <= {"dtype", "device", "requires_grad"}:
                return _copy_of_array(data, **kwargs)
        return factory(data, *args, **kwargs)

    def _from_numpy(self, array: Any) -> Any:
        if isinstance(array, tnp.ndarray):
            return array.tensor
        if isinstance(array, np.ndarray):
            return self._bind_array(array).tensor
        return native(torch.from_numpy, (array,), {})


# Note [np.asarray of a tensor whose class has a __torch_function__]
# Eagerly ``np.asarray(x)`` (``np.array``, ``np.asanyarray``, ``np.ascontiguousarray``) converts a tensor
# through ``x.__array__(dtype=...)``, which hands ``Tensor.__array__`` to the class's
# ``__torch_function__``: the array is what that answers. torch._numpy's conversion read the tensor's
# attributes instead, handing the class two ``__get__`` calls and never ``__array__``. Those
# functions now ask the class first (its answer, through ``super()``, is ``Tensor.__array__`` run with
# subclass torch functions off: ``x.numpy()``, Note [numpy() through a class's __torch_function__]).
# Other NumPy functions of a tensor still hand the class what torch._numpy calls (``np.sin(x)``: eager
# hands ``__array__`` and ``__array_wrap__``).
_CONVERTERS = frozenset({"asarray", "array", "asanyarray", "ascontiguousarray"})


def _copy_of_array(tensor: TensorProxy, dtype: Any = None, device: Any = None,
                   requires_grad: bool = False) -> Any:
    """``torch.tensor(array)``: a copy of the array's tensor, recorded as ``detach().to(..., copy=True)``.
    ``torch.tensor`` of that tensor computes the same but warns "To copy construct from a tensor ...",
    while tracing and on every cached call, where eager's ``torch.tensor`` of an array never does."""
    out = TORCH_TABLE.lookup(torch.Tensor.detach)(tensor)
    out = TORCH_TABLE.lookup(torch.Tensor.to)(out, device=device, dtype=dtype, copy=True)
    return TORCH_TABLE.lookup(torch.Tensor.requires_grad_)(out, True) if requires_grad else out


_UFUNC_METHODS = ("reduce", "accumulate", "reduceat", "outer", "at")


_UFUNC_HINT = (
    "use the function form: np.add.reduce -> np.sum, np.multiply.reduce -> np.prod, "
    "np.maximum.reduce -> np.max, np.add.accumulate -> np.cumsum"
)

# ufunc methods with a function form of the same meaning (given the same axis).
_UFUNC_FORMS: dict[tuple[str, str], str] = {
    ("add", "reduce"): "sum", ("multiply", "reduce"): "prod", ("maximum", "reduce"): "max",
    ("minimum", "reduce"): "min", ("logical_and", "reduce"): "all", ("logical_or", "reduce"): "any",
    ("add", "accumulate"): "cumsum", ("multiply", "accumulate"): "cumprod",
}


@functools.cache
def _entries_by_function() -> dict[Any, NumpyCallable]:
    return {entry.numpy_fn: entry for entry in numpy_callables()}


@functools.cache
def _numpy_scalar_types() -> tuple[type, ...]:
    return tuple(sorted({np.dtype(d).type for d in SUPPORTED_DTYPES}, key=lambda t: t.__name__))


def _torch_numpy_dtype(dtype: np.dtype) -> Any:
    if dtype not in SUPPORTED_DTYPES:
        raise unsupported(
            f"NumPy dtype {dtype}", "torch's NumPy layer supports bool, integer, float and complex dtypes"
        )
    return tnp.dtype(dtype.name)


# Functions torch._numpy leaves to a torch kernel that has no bool version; NumPy sums booleans as
def _method_caller(name: str) -> Callable[..., Any]:
    def call_method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, name)(*args, **kwargs)

    return call_method


def _array_positions(result: Any) -> list[tuple[int | None, Any]]:
    """The wrappers among a result: itself, or the elements of a tuple result."""
    if isinstance(result, tnp.ndarray):
        return [(None, result)]
    if isinstance(result, (tuple, list)):
        return [(i, v) for i, v in enumerate(result) if isinstance(v, tnp.ndarray)]
    return []


def _is_argument(value: Any, args: tuple) -> bool:
    """An in-place operation returns its operand: it must stay the same object."""
    return any(value is a for a in args)


def _item(value: Any, position: int) -> Any:
    try:
        return value[position]
    except Exception:  # noqa: BLE001
        return None


def _map_tree(fn: Callable[[Any], Any], tree: Any) -> Any:
    """``fn`` on the leaves of nested tuples, lists and dicts (other containers are leaves)."""
    t = type(tree)
    if t is tuple or t is list:
        return t(_map_tree(fn, v) for v in tree)
    if t is dict:
        return {k: _map_tree(fn, v) for k, v in tree.items()}
    return fn(tree)


def _has_numpy_value(tree: Any) -> bool:
    return tree_any(tree, lambda v: isinstance(v, (np.ndarray, np.generic, np.dtype))
                     or (isinstance(v, type) and issubclass(v, np.generic)))


def _has_traced_value(tree: Any) -> bool:
    return tree_any(tree, lambda v: isinstance(v, (tnp.ndarray, TensorProxy, np.ndarray)))
