"""The torch language context: what users call — torch functions, Tensor methods, operators.

Coverage comes from torch's own registry of overridable callables (``torch.overrides``), not from a
hand-written list: every overridable function of ``torch``, ``torch.nn.functional``,
``torch.linalg``, ``torch.special`` and ``torch.fft`` becomes a Symbol, and every Tensor method,
property and operator is bound in the same table (``TORCH_TABLE``) — to the function's symbol where
torch has one with the same name (``Tensor.exp`` -> ``torch.exp``), to an operator's function
(``Tensor.__add__`` -> ``torch.add``), or to a method symbol (``torch.Tensor.view``).

Invariants:
- a symbol's output metadata is computed by torch on shadows (``shadows.evaluate``);
- metadata queries (``size``, ``dim``, ``is_contiguous``, ...) are answered by TensorProxy and
  never recorded;
- the methods and operators of TensorProxy are generated from this table, so ``x.exp()``,
  ``torch.exp(x)`` and ``torch.Tensor.exp(x)`` record the same symbol;
- a torch callable jitcore cannot record raises UnsupportedOperationError naming it, never runs
  on proxies by accident.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.masked
import torch.signal.windows

from jitcore.errors import JitcoreError, UnsupportedOperationError
from jitcore.ir import Symbol, SymbolTag, current_context, register_literal
from jitcore.langctx.aten import aten_symbol, is_aten_op, takes_tensor
from jitcore.langctx.shadows import meta_of
from jitcore.langctx.table import SymbolTable
from jitcore.langctx.tensor_text import TENSOR_TEXT_METHODS, refuse_text
from jitcore.langctx.thread_state import recorded_grad_mode
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["ANSWERED_BY_PROXY", "NAMESPACES", "QUERY_NAMES", "TORCH_TABLE", "UNSUPPORTED_METHODS", "lookup",
           "proxy_members", "torch_symbol"]

TORCH_TABLE = SymbolTable("torch")

# Modules whose overridable functions become symbols, with the dotted path generated code uses.
NAMESPACES: tuple[tuple[Any, str], ...] = (
    (torch, "torch"),
    (torch.functional, "torch.functional"),
    (torch.nn.functional, "torch.nn.functional"),
    (torch.linalg, "torch.linalg"),
    (torch.special, "torch.special"),
    (torch.fft, "torch.fft"),
)

# Namespaces of operations that torch.overrides does not list (their functions are pure Python
# over torch ops): every public function of theirs is a symbol.
_UNLISTED_NAMESPACES: tuple[tuple[Any, str], ...] = (
    (torch.masked, "torch.masked"),
    (torch.signal.windows, "torch.signal.windows"),
)

# Answered from the proxy's shadow (TensorProxy defines them); never recorded.
QUERY_NAMES: frozenset[str] = frozenset(
    name for name, value in vars(TensorProxy).items() if not name.startswith("_") or name == "__len__"
) | {
    "__hash__",
    "__class__",
    "__init__",
    "__new__",
    "__torch_function__",
    "__repr__",
    "__format__",
    "__str__",
}

# Tensor methods that cannot be recorded, with the reason a user reads.
UNSUPPORTED_METHODS: dict[str, str] = {
    "register_post_accumulate_grad_hook": "tensor hooks are not supported inside a jitted function",
    "data_ptr": "a tensor's memory address is not known while tracing",
    "const_data_ptr": "a tensor's memory address is not known while tracing",
    "mutable_data_ptr": "a tensor's memory address is not known while tracing",
    "storage": "storages are not supported inside a jitted function",
    "untyped_storage": "storages are not supported inside a jitted function",
    "_typed_storage": "storages are not supported inside a jitted function",
    "share_memory_": "shared memory is not supported inside a jitted function",
    "apply_": "apply_ runs a Python callable per element on real data",
    "map_": "map_ runs a Python callable per element on real data",
    "map2_": "map2_ runs a Python callable per element on real data",
    "numpy": "converting a tensor to NumPy inside a jitted function is not supported yet",
    "__array__": "converting a tensor to NumPy inside a jitted function is not supported yet",
    "__array_wrap__": "NumPy interoperation inside a jitted function is not supported yet",
    "__dlpack__": "DLPack export is not supported inside a jitted function",
    "__dlpack_device__": "DLPack export is not supported inside a jitted function",
    "__reduce_ex__": "pickling is not supported inside a jitted function",
    "__setstate__": "unpickling is not supported inside a jitted function",
    "_make_subclass": "creating tensor subclasses this way is not supported inside a jitted function",
    "_grad": "reading .grad inside a jitted function is not supported",
    "_grad_fn": "autograd graph objects are not available while tracing",
    "_base": "view bases are not available while tracing",
    "_cdata": "a tensor's C pointer is not known while tracing",
    "_version": "version counters are not available while tracing",
    "_backward_hooks": "tensor hooks are not supported inside a jitted function",
    "_post_accumulate_grad_hooks": "tensor hooks are not supported inside a jitted function",
}

# Python's copy protocol on tensors: copies recorded as operations (jitcore/langctx/copying.py binds it).
_COPY_PROTOCOL = frozenset({"__deepcopy__"})

# Operators whose Tensor method means a torch function of the same arguments.
_OPERATORS: dict[str, str] = {
    "__add__": "add",
    "__radd__": "add",
    "__iadd__": "Tensor.add_",
    "__sub__": "sub",
    "__rsub__": "rsub",
    "__isub__": "Tensor.sub_",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__imul__": "Tensor.mul_",
    "__truediv__": "div",
    "__div__": "div",
    "__itruediv__": "Tensor.div_",
    "__idiv__": "Tensor.div_",
    "__floordiv__": "floor_divide",
    "__ifloordiv__": "Tensor.floor_divide_",
    "__mod__": "remainder",
    "__imod__": "Tensor.remainder_",
    "__pow__": "pow",
    "__ipow__": "Tensor.pow_",
    "__matmul__": "matmul",
    "__and__": "bitwise_and",
    "__rand__": "bitwise_and",
    "__iand__": "Tensor.bitwise_and_",
    "__or__": "bitwise_or",
    "__ror__": "bitwise_or",
    "__ior__": "Tensor.bitwise_or_",
    "__xor__": "bitwise_xor",
    "__rxor__": "bitwise_xor",
    "__ixor__": "Tensor.bitwise_xor_",
    "__eq__": "eq",
    "__ne__": "ne",
    "__lt__": "lt",
    "__le__": "le",
    "__gt__": "gt",
    "__ge__": "ge",
    "__neg__": "neg",
    "__abs__": "abs",
    "__invert__": "bitwise_not",
}
# Tensor methods whose arguments differ from the torch function of the same name: they get a
# symbol of their own instead of sharing the function's.
_METHOD_DIFFERS_FROM_FUNCTION: dict[str, str] = {
    "polygamma": "x.polygamma(n) is torch.polygamma(n, x)",
    "where": "x.where(cond, y) is torch.where(cond, x, y)",
    "lu": "x.lu() returns a plain tuple, torch.lu a structseq",
    "norm": "x.norm(p, dim, keepdim, dtype) but torch.norm(x, p, dim, keepdim, out, dtype)",
}
# Tensor methods torch lists as ignored by __torch_function__ that still hand it the call eagerly.
_HANDED_THOUGH_IGNORED = frozenset({"new_tensor"})


class _Handed(Exception):
    """Stops an operator at the first ``__torch_function__`` it asks."""


class _Recorder(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        raise _Handed(func)


def _handed_by_operators() -> dict[str, Any]:
    """What eager hands a ``__torch_function__`` for each operator (``x + y``: ``Tensor.add``;
    ``x // y``: ``Tensor.__floordiv__``; ``x & y``: ``Tensor.__and__``), asked of torch once, on a
    tensor of a class that records it: a table of handlers keyed by ``torch.add`` must not fire on
    ``x + y`` where eager's does not."""
    handed: dict[str, Any] = {}
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
        one = torch.ones(1, 1, dtype=torch.int64)
        operand = one.as_subclass(_Recorder)
    for name in _OPERATORS:
        try:
            method = getattr(torch.Tensor, name)
            method(operand) if name in ("__neg__", "__abs__", "__invert__") else method(operand, one)
        except _Handed as asked:
            handed[name] = asked.args[0]
        except (TypeError, AttributeError, RuntimeError):
            continue
    return handed


_HANDED = _handed_by_operators()


def torch_symbol(
    fn: Callable[..., Any], path: str | None, *, name: str | None = None, tags: frozenset[str] = frozenset()
) -> Symbol:
    """A symbol of the torch language context executing ``fn``, printed as ``path``."""
    symbol_id = (
        path or f"{getattr(fn, '__module__', None) or 'torch'}.{getattr(fn, '__qualname__', repr(fn))}"
    )
    existing = TORCH_TABLE._by_id.get(symbol_id)
    if existing is not None and existing.fn is fn:
        return existing
    symbol = Symbol(
        id=symbol_id,
        name=name or symbol_id.rsplit(".", 1)[-1],
        langctx="torch",
        fn=fn,
        path=path,
        meta=meta_of(fn),
        tags=tags | _tags_of(symbol_id),
    )
    return TORCH_TABLE.add_symbol(symbol)


def _tags_of(symbol_id: str) -> frozenset[SymbolTag]:
    module, _, name = symbol_id.rpartition(".")
    tags: set[SymbolTag] = set()
    if name.endswith("_") and not name.endswith("__"):
        tags.add("inplace")
    if name in {"__setitem__", "copy_", "set_", "resize_", "resize_as_"}:
        tags.add("inplace")
    if module in _ATEN_NAMED_MODULES and _seeded(name):
        tags.add("random")
    return frozenset(tags)


# Modules whose functions are named after the aten operator they run (``torch.nn.functional.dropout``
# runs ``aten::dropout``); elsewhere a name may be another's (``torch.signal.windows.exponential``).
_ATEN_NAMED_MODULES = frozenset(
    {"torch", "torch.Tensor", "torch.nn.functional", "torch.special", "torch.linalg"}
)


def _seeded(name: str) -> bool:
    """Whether the aten operator named ``name`` draws random numbers: its schema's tag
    ``nondeterministic_seeded`` (``F.dropout2d`` is ``aten::dropout``'s: the dimension suffix is dropped;
    ``F.normalize`` has no such operator and is not random)."""
    for candidate in (name, re.sub(r"[123]d$", "", name)):
        packet = getattr(torch.ops.aten, candidate, None)
        if isinstance(packet, torch._ops.OpOverloadPacket) and any(
            torch.Tag.nondeterministic_seeded in getattr(packet, o).tags for o in packet.overloads()
        ):
            return True
    return False


def _method(target: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return target(self, *args, **kwargs)

    return method


def _operator(target: Callable[..., Any]) -> Callable[..., Any]:
    """A binary operator: TypeError from torch means NotImplemented, as for torch.Tensor."""

    def operator(self: Any, other: Any = None, *rest: Any) -> Any:
        try:
            return target(self, other, *rest)
        except JitcoreError:
            raise  # jitcore's own errors (some are TypeErrors) are not an operand torch refuses
        except TypeError:
            return NotImplemented

    return operator


def _unary_operator(target: Callable[..., Any]) -> Callable[..., Any]:
    def operator(self: Any) -> Any:
        return target(self)

    return operator


def _unsupported(qualname: str, reason: str) -> Callable[..., Any]:
    def unsupported(*args: Any, **kwargs: Any) -> Any:
        raise UnsupportedOperationError(f"{qualname}: {reason}")

    return unsupported


class StorageMetadata:
    """What ``x.untyped_storage()`` of a traced tensor answers in a tensor subclass's protocol code:
    its size in bytes (a nested jagged tensor's constructor gives it to ``_make_wrapper_subclass``,
    whose wrapper the executed trace never builds); anything else of a storage (its data, address,
    sharing) raises JC-T001, as does ``untyped_storage()`` in the program itself (the storage size is
    not guarded)."""

    __slots__ = ("_nbytes", "_refuse")

    def __init__(self, nbytes: int, refuse: Callable[..., Any]) -> None:
        self._nbytes = nbytes
        self._refuse = refuse

    def size(self) -> int:
        return self._nbytes

    def nbytes(self) -> int:
        return self._nbytes

    def __getattr__(self, name: str) -> Any:
        self._refuse()


def _storage_metadata(refuse: Callable[..., Any]) -> Callable[..., Any]:
    def untyped_storage(self: Any) -> StorageMetadata:
        context = current_context()
        if not isinstance(self, TensorProxy) or context is None or not context.subclass_code:
            refuse()
        return StorageMetadata(self.shadow.untyped_storage().nbytes(), refuse)

    return untyped_storage


def _register_functions() -> None:
    overridable = torch.overrides.get_overridable_functions()
    for module, path in NAMESPACES:
        candidates = set(overridable.get(module, ()))
        # Canonical names first: aliases of one C function compare equal (torch.dsmm == torch.mm,
        # torch.spmm), so the name that is an aten operator's, then torch's own name, wins.
        names = sorted(dir(module), key=lambda a: (
            not hasattr(torch.ops.aten, a), getattr(getattr(module, a, None), "__name__", None) != a, a,
        ))
        for attr in names:
            fn = getattr(module, attr, None)
            try:
                if fn is None or fn not in candidates or fn in TORCH_TABLE:
                    continue
            except TypeError:  # unhashable module attributes are not functions
                continue
            # torch.functional's functions are re-exported by torch; prefer the shorter path.
            owner = "torch" if path == "torch.functional" and getattr(torch, attr, None) is fn else path
            TORCH_TABLE.bind(fn, torch_symbol(fn, f"{owner}.{attr}"))


# Factories torch does not list as overridable (they take no tensors) but that traces must record.
_NOT_FACTORIES = frozenset({"_make_dep_token", "from_file", "sparse_coo_tensor"})


def _register_factories() -> None:
    """torch.* functions that create tensors from Python values: ignored by torch.overrides, found
    through their aten schemas (a Tensor result and no Tensor argument)."""
    for fn in torch.overrides.get_ignored_functions():
        name = getattr(fn, "__name__", "")
        if getattr(torch, name, None) is not fn or name in _NOT_FACTORIES or fn in TORCH_TABLE:
            continue
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:
            continue
        overloads = [getattr(packet, o) for o in packet.overloads()]
        if any(
            len(o._schema.returns) == 1
            and str(o._schema.returns[0].type) == "Tensor"
            and not takes_tensor(o)
            for o in overloads
        ):
            TORCH_TABLE.bind(fn, torch_symbol(fn, f"torch.{name}"))


def _aten_op_on_tensors(name: str) -> bool:
    """Whether ``torch.ops.aten.<name>`` exists and an overload of it takes a Tensor."""
    packet = getattr(torch.ops.aten, name, None) if not name.startswith("__") else None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    return any(takes_tensor(getattr(packet, o)) for o in packet.overloads())


def _register_unlisted_functions() -> None:
    """torch.* builtins torch.overrides leaves out (private names like ``torch._scaled_mm``, ignored
    ones like ``torch.as_strided``) that are aten operators on tensors: they dispatch
    ``__torch_function__`` like the listed ones, so they are symbols too, printed by their path."""
    for name in sorted(dir(torch._C._VariableFunctions)):
        fn = getattr(torch, name, None)
        if fn is None or name.startswith("__") or fn in TORCH_TABLE or not _aten_op_on_tensors(name):
            continue
        if getattr(torch._C._VariableFunctions, name, None) is not fn:
            continue
        TORCH_TABLE.bind(fn, torch_symbol(fn, f"torch.{name}"))
    for module, path in _UNLISTED_NAMESPACES:
        for name in module.__all__:
            fn = getattr(module, name, None)
            if inspect.isfunction(fn) and "masked_tensor" not in name and fn not in TORCH_TABLE:
                TORCH_TABLE.bind(fn, torch_symbol(fn, f"{path}.{name}"))
    for name in ("hardswish", "hardsigmoid", "upsample", "upsample_bilinear", "upsample_nearest"):
        fn = getattr(torch.nn.functional, name, None)
        if fn is not None and fn not in TORCH_TABLE:  # listed as ignored, yet operations on tensors
            TORCH_TABLE.bind(fn, torch_symbol(fn, f"torch.nn.functional.{name}"))


def _function_symbol(name: str) -> Callable[..., Any] | None:
    if name.startswith("Tensor."):
        return TORCH_TABLE.lookup(getattr(torch.Tensor, name.removeprefix("Tensor."), None))
    return TORCH_TABLE.lookup(getattr(torch, name, None))


def _register_tensor_members() -> None:
    # Tensor properties are listed under keys of their own (their ``__get__``).
    overridable = {
        fn
        for key, fns in torch.overrides.get_overridable_functions().items()
        if key is torch.Tensor or not isinstance(key, type(torch))
        for fn in fns
    }
    ignored = torch.overrides.get_ignored_functions()
    members: dict[str, Any] = {}
    for klass in reversed(torch.Tensor.__mro__):
        members.update(vars(klass))
    # Plain methods first so that operators can refer to in-place method symbols.
    names = sorted(members, key=lambda n: (n.startswith("__"), n))
    for name in names:
        member = getattr(torch.Tensor, name, None)
        raw = members[name]
        is_property = isinstance(raw, (property, type(torch.Tensor.T)))
        key = raw.__get__ if is_property else member
        try:
            listed = key in overridable or name in _HANDED_THOUGH_IGNORED or (
                key in ignored and _aten_op_on_tensors(name)
            )
            if not listed and name not in UNSUPPORTED_METHODS:
                continue
        except TypeError:
            continue
        if name in QUERY_NAMES or name in _COPY_PROTOCOL:
            continue
        qualname = f"torch.Tensor.{name}"
        if name in UNSUPPORTED_METHODS:
            target = _unsupported(qualname, UNSUPPORTED_METHODS[name])
            if name == "untyped_storage":
                target = _storage_metadata(target)
            TORCH_TABLE.bind(member, target)
            _install(name, target, is_property)
            continue
        if is_property:
            symbol = torch_symbol(raw.__get__, f"{qualname}.__get__", name=name)
            TORCH_TABLE.bind(raw.__get__, symbol)
            _install(name, symbol, is_property=True)
            continue
        if name in _OPERATORS:
            function = _function_symbol(_OPERATORS[name])
            if function is not None:
                unary = name in ("__neg__", "__abs__", "__invert__")
                if name in _HANDED:
                    function = _called_as(_HANDED[name], function)
                target = _unary_operator(function) if unary else _operator(function)
                TORCH_TABLE.bind(member, target)
                _install_raw(name, target)
                continue
        own = name.startswith("_") or name in _METHOD_DIFFERS_FROM_FUNCTION
        shared = TORCH_TABLE.lookup(getattr(torch, name, None)) if not own else None
        symbol = shared if isinstance(shared, Symbol) else torch_symbol(member, qualname)
        if symbol is shared and name in _VARARGS_METHODS:
            target = _varargs_method(name, symbol)  # x.reshape(2, 3) is torch.reshape(x, (2, 3))
            TORCH_TABLE.bind(member, target)
            _install_raw(name, target)
            continue
        # torch.Tensor.exp(x) too (a mode's func(*args)) is handed on as Tensor.exp, not torch.exp
        target = symbol if symbol is not shared else _called_as(member, symbol)
        TORCH_TABLE.bind(member, target)
        if name.startswith("__") and name not in ("__getitem__", "__setitem__"):
            # reflected operators answer NotImplemented; ``__reversed__`` takes no operand.
            # ``__rpow__`` and ``__rmatmul__`` are torch's Python methods (``torch.pow(other, self)``)
            # with symbols of their own: ``2 ** x`` hands a subclass's ``__torch_function__``
            # ``Tensor.__rpow__`` with ``(x, 2)``, as eagerly, not ``torch.pow`` with ``(2, x)``.
            reflected = name.startswith("__r") and name != "__reversed__"
            _install_raw(name, _operator(symbol) if reflected else _method(symbol))
        else:
            _install(name, target, is_property=False)


def _takes_one_int_list(name: str) -> bool:
    """Whether every overload of ``aten.<name>`` takes exactly (self, an int or int list): then the
    method accepts the list spread out (``x.permute(1, 0)``) and the function does not."""
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return False
    overloads = [getattr(packet, o) for o in packet.overloads()]
    found_list = False
    for overload in overloads:
        positional = [a for a in overload._schema.arguments if not a.kwarg_only]
        if len(positional) != 2 or str(positional[0].type) != "Tensor":
            return False
        kind = str(positional[1].type)
        if kind not in ("int", "SymInt", "List[int]", "List[SymInt]"):
            return False
        found_list |= kind.startswith("List")
    return found_list


_VARARGS_METHODS = frozenset(
    name
    for name in dir(torch.Tensor)
    if not name.startswith("_") and callable(getattr(torch, name, None)) and _takes_one_int_list(name)
)


def _takes_one_int(name: str) -> bool:
    packet = getattr(torch.ops.aten, name)
    return any(
        str([a for a in getattr(packet, o)._schema.arguments if not a.kwarg_only][1].type)
        in ("int", "SymInt")
        for o in packet.overloads()
    )


def _varargs_method(name: str, target: Callable[..., Any]) -> Callable[..., Any]:
    # A lone int means the int overload where there is one (x.hsplit(2): two sections).
    least = 2 if _takes_one_int(name) else 1
    target = _called_as(getattr(torch.Tensor, name), target)  # handed Tensor.reshape, not torch.reshape

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) >= least and not kwargs and all(_is_size(a) for a in args):
            return target(self, tuple(args))
        return target(self, *args, **kwargs)

    return method


def _is_size(value: Any) -> bool:
    """An int, a symbolic one, a name of the computation holding an int (``x.reshape(n, -1)`` with
    ``n = t.item()``), or a one-element integer tensor (``x.reshape(b, torch.div(n, w, ...), w)``:
    torch reads its value as it parses the sizes)."""
    if type(value) in (int, torch.SymInt):
        return True
    if isinstance(value, NumberProxy):
        return type(value.value) is int
    return isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex() \
        and value.numel() == 1


_TORCH_BASES = (torch.Tensor, torch._C.TensorBase, object)  # what a proxy inherits, not what it defines


def _defined_by_proxy(name: str) -> bool:
    return any(name in vars(klass) for klass in TensorProxy.__mro__ if klass not in _TORCH_BASES)


def _called_as(member: Any, symbol: Symbol) -> Callable[..., Any]:
    """``x.exp()`` records ``torch.exp``'s symbol; a subclass's ``__torch_function__`` is still
    handed ``torch.Tensor.exp``, the callable eager hands it (``TraceContext.called_as``). No Tensor
    method takes ``out=`` (torch's method signatures have none): ``x.amax(0, out=o)`` raises eager's
    TypeError, where the function's symbol would write ``o``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if "out" in kwargs:
            raise TypeError(f"{member.__name__}() got an unexpected keyword argument 'out'")
        context = current_context()
        if context is None:
            return symbol(*args, **kwargs)
        context.called_as = member
        try:
            return symbol(*args, **kwargs)
        finally:
            context.called_as = None

    return call


def _install(name: str, target: Callable[..., Any], is_property: bool) -> None:
    if _defined_by_proxy(name):
        return
    setattr(TensorProxy, name, property(target) if is_property else _method(target))


def _install_raw(name: str, function: Callable[..., Any]) -> None:
    if not _defined_by_proxy(name):
        setattr(TensorProxy, name, function)


def _set_data(self: TensorProxy, value: Any) -> None:
    """``x.data = y``: eager's ``set_data`` makes ``x`` share ``y``'s storage, sizes and strides and keeps
    ``x``'s autograd identity (its ``requires_grad``, its grad accumulator); recorded as ``x.set_(y)``
    on ``y`` detached, with grad mode off, which is that for a ``y`` of ``x``'s dtype and device.

    Raises:
        TypeError: ``value`` is not a tensor (eager's message).
        UnsupportedOperationError: another dtype or device (eager changes ``x``'s, which a traced value
            keeps), or ``x`` is a wrapper subclass (eager swaps the outer tensor only, keeping its
            Python attributes).
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Variable data has to be a tensor, but got {type(value).__name__}")
    if isinstance(self, SubclassTensorProxy) and isinstance(value, SubclassTensorProxy) \
            and _outer_layout(self) is not None and _outer_layout(self) == _outer_layout(value):
        return  # Note [x.data = y of a wrapper subclass]: eager keeps x's inner tensors
    if isinstance(self, SubclassTensorProxy) or isinstance(value, SubclassTensorProxy):
        raise UnsupportedOperationError(
            "x.data = y on a wrapper tensor subclass is not supported while tracing, but where both are "
            "wrapper subclasses of the same sizes, strides, dtype and device")
    if (value.dtype, value.device) != (self.dtype, self.device):
        raise UnsupportedOperationError(
            f"x.data = y with another dtype or device ({self.dtype} on {self.device} given "
            f"{value.dtype} on {value.device}) is not supported while tracing")
    with recorded_grad_mode(False):
        torch.Tensor.set_(self, value.detach())


# Note [x.data = y of a wrapper subclass]
# Eager's ``set_data`` copies ``y``'s TensorImpl metadata (sizes, strides, storage) into ``x``'s and keeps
# ``x``'s Python object: a wrapper subclass keeps its inner tensors (TwoTensor's ``x.a``, ``x.b``), so
# ``x.data = y; x * 2`` computes with ``x``'s old values (/tmp/zoo55-probes/b5.py ``data_assign``). It
# was refused (JC-T001: the call ran eagerly, the class's dispatch on every call). Where ``y`` is a
# wrapper subclass too, of ``x``'s outer sizes, strides, storage offset, dtype and device, what changes is
# only the wrapper's storage, which holds no data: nothing a program computes with, so nothing is
# recorded. Any other case (other sizes, which leave ``x``'s outer sizes unlike its inner tensors, or a
# plain tensor on one side, whose real storage the wrapper would then report) is still refused.
def _outer_layout(t: SubclassTensorProxy) -> tuple | None:
    """``t``'s outer sizes, strides, storage offset, dtype and device; None where one is symbolic (compared,
    it would add a ShapeEnv guard no prologue checks)."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        shadow = t.shadow
        numbers = (*shadow.shape, *shadow.stride(), shadow.storage_offset())
        if any(type(n) is not int for n in numbers):
            return None
        return (tuple(shadow.shape), shadow.stride(), shadow.storage_offset(), shadow.dtype, shadow.device)


def _swap_tensors(t1: Any, t2: Any) -> None:
    """``torch.utils.swap_tensors`` (``Module._apply`` for a wrapper-subclass parameter: ``m.to(dtype)``,
    ``m.double()``): eager swaps the two Python objects' classes, dicts and slots in place, which a traced
    value cannot have done to the caller's object; refused (JC-T001) where one is traced, as
    ``x.data = y`` with another dtype is (``_set_data``).

    Raises:
        UnsupportedOperationError: ``t1`` or ``t2`` is a traced tensor.
    """
    if isinstance(t1, TensorProxy) or isinstance(t2, TensorProxy):
        raise UnsupportedOperationError(
            "torch.utils.swap_tensors of a traced tensor (Module.to/.double() of a module with "
            "tensor-subclass parameters swaps them) is not supported while tracing",
            hints=("convert the module outside the jitted function",))
    torch.utils.swap_tensors(t1, t2)


def _iter(self: TensorProxy) -> Any:
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(self.unbind(0))


def proxy_members() -> list[tuple[Any, Callable[..., Any], type]]:
    """The callables eager offers a ``__torch_function__`` that a proxy answers itself (its metadata:
    ``Tensor.size``, ``Tensor.shape.__get__``, ``Tensor.__len__``; ``Tensor.data.__set__``; ``backward``),
    each with a proxy class's function that answers it (a method, or a property's getter or setter)
    and that class."""
    members: list[tuple[Any, Callable[..., Any], type]] = [
        (inspect.getattr_static(torch.Tensor, "data").__set__, _set_data, TensorProxy)]
    for klass in (TensorProxy, SubclassTensorProxy):
        for name in sorted(QUERY_NAMES):
            own, eager = vars(klass).get(name), inspect.getattr_static(torch.Tensor, name, None)
            if own is None or eager is None or name.startswith("__") and name != "__len__":
                continue
            if isinstance(own, property):
                if hasattr(type(eager), "__get__") and own.fget is not None:
                    members.append((eager.__get__, own.fget, klass))
                if hasattr(type(eager), "__set__") and own.fset is not None:
                    members.append((eager.__set__, own.fset, klass))
            elif callable(own):
                members.append((_handed_for(name), own, klass))
    return members


def _handed_for(name: str) -> Any:
    """What eager hands a ``__torch_function__`` for ``x.name()`` (asked of torch: ``x.ndimension()``
    hands ``Tensor.dim``)."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
        operand = torch.ones(1, 1).as_subclass(_Recorder)
    try:
        getattr(torch.Tensor, name)(operand)
    except _Handed as asked:
        return asked.args[0]
    except (TypeError, RuntimeError):
        pass
    return getattr(torch.Tensor, name)


def _answered_by_proxy() -> dict[Any, Callable[..., Any]]:
    by_class: dict[Any, dict[bool, Callable[..., Any]]] = {}
    for eager, own, klass in proxy_members():
        by_class.setdefault(eager, {})[klass is SubclassTensorProxy] = own
    return {eager: _answer(answers) for eager, answers in by_class.items()}


def _answer(answers: dict[bool, Callable[..., Any]]) -> Callable[..., Any]:
    def answer(self: Any, *args: Any, **kwargs: Any) -> Any:
        own = answers.get(True) if isinstance(self, SubclassTensorProxy) else None
        return (own or answers[False])(self, *args, **kwargs)

    return answer


def _torch_function(func: Any, args: tuple, kwargs: dict) -> Any:
    answer = ANSWERED_BY_PROXY.get(func)
    if answer is not None:  # torch.Tensor.size(x), a mode's func(*args): what x.size() answers
        return answer(*args, **kwargs)
    target = TORCH_TABLE.lookup(func)
    if target is None and any(func is m for m in TENSOR_TEXT_METHODS):
        refuse_text(func.__qualname__)  # "{}".format(x) from C: never a symbol (langctx/tensor_text.py)
    if target is None:
        target = dynamic_symbol(func)
    return target(*args, **kwargs)


# Note [TorchScript methods]
# A TorchScript module's method (``torch.jit.script(module)``, ``torch.jit.trace(module, ...)``,
# ``torch.jit.load``) hands itself to ``__torch_function__`` when a proxy reaches it. Recorded as a
# torch symbol (its ``__module__`` is the scripted class's: ``torch.nn.modules.linear`` for a
# scripted nn.Linear), it ran on the fake shadows beside the module's real parameters and TorchScript
# raised. Run natively on the proxies instead, its ops would reach the trace at the aten level, but
# its parameters, read inside TorchScript, would be captured tensors guarded as objects, not by the
# attribute path they came from: ``sm.weight = new`` would leave cached calls on the old weight. So
# such a call is JC-T001, and the call runs eagerly (an eager entry). A TorchScript *function* holds no
# state: it is called natively and its aten ops are recorded.


def dynamic_symbol(func: Any, path: str | None = None) -> Callable[..., Any]:
    """A symbol for a torch callable outside the registries (``torch._C._nn.gelu``, ...), printed
    as ``path`` where one is given (``torch._foreach_norm``).

    An aten operator reaching ``__torch_function__`` (``OpOverload.__call__`` on a proxy) is the aten
    symbol, never a torch-level one: binding it here would shadow the aten table for every later trace.

    Raises:
        UnsupportedOperationError: ``func`` is not a torch callable.
    """
    if is_aten_op(func):
        return aten_symbol(func)
    if isinstance(func, torch._C.ScriptMethod):  # noqa: SLF001 - Note [TorchScript methods]
        raise UnsupportedOperationError(
            f"{getattr(func, '__qualname__', func)!r} is a method of a TorchScript module, which reads its "
            "module's parameters and buffers inside TorchScript, where jitcore cannot see or guard them"
        )
    module = getattr(func, "__module__", None) or ""
    if not (module.startswith("torch") or isinstance(func, torch._ops.OpOverload)):
        raise UnsupportedOperationError(
            f"{getattr(func, '__qualname__', func)!r} was called with tensors being traced, "
            "but it is not a torch operation jitcore can record"
        )
    symbol = torch_symbol(func, path)
    TORCH_TABLE.bind(func, symbol)
    return symbol


def lookup(fn: Any) -> Callable[..., Any] | None:
    """What runs instead of the torch callable ``fn`` while tracing (None: not a torch op)."""
    return TORCH_TABLE.lookup(fn)


def _register_literals() -> None:
    register_literal(torch.dtype, str)
    register_literal(torch.layout, str)
    register_literal(torch.memory_format, str)
    register_literal(torch.device, lambda d: f"torch.device({str(d)!r})")
    register_literal(torch.Size, lambda s: f"torch.Size({list(s)!r})")


_register_functions()
_register_factories()
_register_unlisted_functions()
_register_tensor_members()
_register_literals()
TensorProxy.__iter__ = _iter  # type: ignore[method-assign]
TensorProxy.data = property(TensorProxy.data.fget, _set_data)  # type: ignore[method-assign]
TORCH_TABLE.bind(torch.utils.swap_tensors, _swap_tensors)
TensorProxy.torch_function_handler = staticmethod(_torch_function)  # type: ignore[assignment]
# torch's callables a proxy answers, by the callable eager offers __torch_function__ (Note [What eager
# offers a function mode], jitcore/dispatch/modes.py)
ANSWERED_BY_PROXY: dict[Any, Callable[..., Any]] = _answered_by_proxy()
# The aten ops torch asks a wrapper's ``__torch_dispatch__`` for its layout
# (``dispatch_sizes_strides_policy``), which the handler passes on to its inner tensor: what the
# inner tensor's query answers (Note [A wrapper that answers its own layout, while tracing],
# jitcore/proxies/subclass.py).
_aten = torch.ops.aten
ANSWERED_BY_PROXY.update({
    _aten.sym_stride.default: lambda t: t.stride(), _aten.sym_size.default: lambda t: t.size(),
    _aten.dim.default: lambda t: t.dim(), _aten.sym_numel.default: lambda t: t.numel(),
    _aten.sym_storage_offset.default: lambda t: t.storage_offset(),
    _aten.is_contiguous.default: lambda t: t.is_contiguous(),
    _aten.is_contiguous.memory_format: lambda t, memory_format: t.is_contiguous(memory_format=memory_format),
})
