"""How a caller's tensor becomes an input of the computation: the tensor half of ``Provenance``.

A tensor the pass reaches (an argument, a global, an attribute, one read past the hooks) is bound
once per pass: a plain tensor (or ``nn.Parameter``, or a plain subclass) becomes an input proxy
read again through its path on every call; a traceable subclass has its structure guarded and its
inner tensors bound the same way, and the program sees a proxy around their shadows; a NumPy array
is a tensor input seen as torch._numpy's ndarray.

Invariants:
- a tensor object gets one proxy per pass, however many paths reach it (a second path is an
  ``alias`` guard);
- jitcore's own reads of a tensor's metadata never run a subclass's ``__torch_function__``;
- every object bound has one ``Reached`` record for the pass's length (Note [One map of reached
  objects]), so no id is reused while the pass runs.
"""

from __future__ import annotations

import dataclasses
import enum
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from jitcore.dispatch.shadow_map import DispatchState
from jitcore.errors import EagerOnlyValue, LazyState
from jitcore.jit.ctx_numbers import bind_ctx_numbers
from jitcore.jit.ragged import ragged_dims
from jitcore.jit.state_kinds import is_plain_instance
from jitcore.jit.state_names import qualified_name
from jitcore.jit.subclass_inputs import (
    answered_layout,
    answers_its_sizes,
    ctx_places,
    ctx_snapshot,
    following_inner,
    follows,
    has_symbols,
    refusal,
    shadow_around,
)
from jitcore.langctx.shadows import TensorValues, untraced_kind
from jitcore.prologue import Path, Root, TensorSpec
from jitcore.prologue.ctx_sizes import SizedContext, with_sizes
from jitcore.prologue.literals import is_literal_value
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.protocol import (
    has_nested_ints,
    has_own_protocol,
    instance_attributes,
    is_torch_cache,
    tensor_flatten,
)
from jitcore.proxies.typed import is_plain_subclass, retype

__all__ = ["Reached", "TensorBinding"]


class TensorBinding:
    """The tensor-binding methods of ``Provenance`` (jit/provenance.py), which owns the state below
    and gives them ``path_of``, ``guard`` and ``bind_state``."""

    values: TensorValues
    inputs: list[tuple[Path, TensorProxy, torch.Tensor]]
    real_values: dict[int, torch.Tensor]
    subclass_inputs: list[tuple[TensorProxy, Path]]
    bound_layouts: dict[int, tuple]
    dynamic_dims: Callable[[Path, torch.Tensor], frozenset[int]] | None
    dynamic_strides: Callable[[Path, torch.Tensor], frozenset[int]] | None
    symbolic_subclass_inputs: int  # how many were bound with symbolic sizes
    symbolic_subclasses: bool  # whether subclass inputs that follow an inner tensor may have symbolic sizes
    on_remember: Callable[[Any, Path], None] | None
    _reached: dict[int, Reached]
    _static_only: int
    natively: Callable[[torch.Tensor], bool]
    _ragged: dict[Path, frozenset[int]]
    _layouts_of: set[int]

    # Note [A shadow the program reads back]
    # Code torch runs natively on shadows can keep one where the program later reads it: DTensor's
    # C++ dispatch of an embedding over a row-sharded table (``RowwiseParallel`` on ``nn.Embedding``)
    # stores the mask it computed in the placement's ``MaskBuffer``, and the reduction DTensor's Python
    # runs later (interpreted) reads it back to zero the masked rows. That fake tensor is the shadow of
    # a value of this pass: the program gets its proxy. Before, it was bound as a captured tensor of
    # the caller's, a FakeTensor jitcore refused (JC-J002), and the eager run that followed found the
    # fake mask left in the buffer and raised.
    def bind_leaked_tensor(self, tensor: torch.Tensor) -> TensorProxy:
        """A real tensor reached a torch call without passing a hook (iteration, an opaque call):
        bind it through the path it was remembered by, or — if none — by identity. A shadow of this
        pass is its proxy (Note [A shadow the program reads back])."""
        known = self.values.known(tensor)
        if known is not None:
            return known
        path = self.path_of(tensor)
        if path is None and self.natively(tensor):  # Note [Tensors a native composite makes]
            path = Path(Root("bound", f"<tensor a composite made {tuple(tensor.shape)}>", tensor))
        elif path is None:  # held weakly: once the tensor is gone, the entry misses instead of keeping it
            path = Path(Root("bound", f"<captured tensor {tuple(tensor.shape)}>", weakref.ref(tensor))).call()
        return self._tensor(tensor, path, "c")

    # Note [Tensors a native composite makes]
    # A torch function whose C++ composite reads values under grad runs natively on the proxies (Note
    # [Composites that read values under grad], jit/read_arguments.py), as do jitcore's own expressions of
    # such calls (``index_fill`` through a mask, Note [Masks whose values carry gradients]). Their
    # factories take no traced tensor, so they run on real tensors: ``combinations``' triangular mask,
    # ``index_fill``'s bool mask reach the records of the ops after them as tensors no path names.
    # Held weakly, as a caller's captured tensor is, such a tensor lived only as long as the pass's
    # garbage: when a collection freed it before the computation ran, the first call passed None as
    # that input ("unwrap_if_dead() ... Invoked with: None"), and later calls missed and traced again.
    # It is the composite's constant (made from sizes the entry guards, or from a value a checked read
    # guards), so the entry holds it.
    # So does a tensor functorch's code made under a transform (``natively(tensor)``: Note [Tensors
    # functorch's code makes from numbers], jit/function_transforms.py).

    def bound_proxy(self, tensor: torch.Tensor) -> TensorProxy | None:
        """The proxy a caller's tensor is bound to in this pass, or None (not bound yet)."""
        found = self._reached.get(id(tensor))
        return found.bound if found is not None and isinstance(found.bound, TensorProxy) else None

    def _numpy_value(self, value: Any, path: Path, name: str) -> Any:
        """A NumPy array is a tensor input (read through ``from_numpy`` by the prologue) that the
        program sees as torch._numpy's ndarray over its proxy; a NumPy scalar is a literal (docs/numpy.md)."""
        from jitcore.numpy import boundary, bridge

        if not isinstance(value, boundary.np.ndarray):
            self.guard(path, "type", type(value))
            self.guard(path, "value", value)
            return value
        found = self._reached.get(id(value))
        wrapped = None if found is None else found.bound
        if wrapped is None:
            boundary.check_array(value, path.describe())
            self.guard(path, "type", type(value))
            proxy = self._tensor(boundary.array_to_tensor(value), boundary.tensor_path(path), name)
            wrapped = bridge.wrap(proxy)
            self._bound(value, wrapped, path)
        return wrapped

    # Note [Reading the caller's tensors]
    # jitcore's own reads of a tensor's metadata (to bind and guard it) run with subclass
    # ``__torch_function__`` off: eager never runs it for them, and torch's RedispatchTensor logs every
    # call into a list it carries (the log grew by jitcore's reads; its length guarded never matched).
    def _tensor(self, tensor: torch.Tensor, path: Path, name: str) -> TensorProxy:
        found = self._reached.get(id(tensor))
        proxy = None if found is None else found.bound
        if proxy is None:
            with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [Reading the caller's tensors]
                proxy = self._new_tensor(tensor, path, name)
        elif found.bound_at != path:
            self.guard(path, "alias", found.bound_at)  # one tensor, reached two ways
        return proxy

    def _new_tensor(self, tensor: torch.Tensor, path: Path, name: str) -> TensorProxy:
        """A tensor the pass binds for the first time: its proxy, registered."""
        if torch.nn.parameter.is_lazy(tensor):  # made by its module's first call, which runs eagerly
            self.guard(path, "type", type(tensor))
            raise LazyState(f"{_argument(path, name)} is a lazy module's {type(tensor).__name__}: the call "
                            "that makes it runs eagerly and the next one is traced")
        kind = untraced_kind(tensor) if type(tensor) in (torch.Tensor, torch.nn.Parameter) else None
        if kind is not None:  # what the eager entry accepts (Note [Eager entries], jit/api.py)
            self.guard(path, "type", type(tensor))
            self.guard(path.attr(kind[0]), "value", kind[1])
            raise EagerOnlyValue(f"{_argument(path, name)} is {kind[2]}: jitcore traces strided tensors")
        if type(tensor) in (torch.Tensor, torch.nn.Parameter) or is_plain_subclass(type(tensor)):
            symbolic = self.dynamic_dims is not None and not self._static_only
            dims = self.dynamic_dims(path, tensor) if symbolic else self._ragged.get(path, frozenset())
            strides = self.dynamic_strides(path, tensor) if symbolic and self.dynamic_strides else frozenset()
            name = qualified_name(path) or name  # linear1.weight -> linear1_weight
            proxy = self.values.input_proxy(tensor, name, dims, keep_zero_one=path in self._ragged,
                                            dynamic_strides=strides)
            if self.values.shape_env is not None:
                shadow = proxy.shadow
                self.bound_layouts[id(proxy)] = (
                    tuple(shadow.shape), tuple(shadow.stride()), shadow.storage_offset())
            if type(tensor) is not torch.Tensor:  # nn.Parameter, Tagged(torch.Tensor): proxies/typed.py
                retype(proxy, type(tensor))
                self._bind_tensor_attributes(proxy, tensor, path)
            self.inputs.append((path, proxy, tensor))
        else:
            proxy = self._subclass(tensor, path, name)
        self._bound(tensor, proxy, path)
        self.real_values[id(proxy)] = tensor
        return proxy

    def _bound(self, obj: Any, bound: Any, path: Path) -> None:
        """Record that ``obj``, first found at ``path``, is ``bound`` for the program."""
        reached = self._reached.get(id(obj))
        if reached is None:
            reached = self._reached[id(obj)] = Reached(obj)
        reached.bound, reached.bound_at = bound, path

    def _subclass(self, tensor: torch.Tensor, path: Path, name: str) -> TensorProxy:
        """A tensor-subclass input: its structure is guarded, its inner tensors become inputs."""
        cls = type(tensor)
        refused = refusal(tensor, path)
        if refused is not None:
            self.guard(path, "type", cls)  # what the eager entry accepts (Note [Eager entries], jit/api.py)
            raise refused
        names, ctx = tensor_flatten(tensor)
        self.guard(path, "type", cls)
        nested = has_nested_ints(tensor)  # Note [Nested ints], jitcore/langctx/shadows.py
        spec = TensorSpec.of_nested(tensor) if nested else TensorSpec.of_subclass(tensor)
        strides_answered = spec.layout_from_inner and not spec.outer_from_inner  # Note [A wrapper that
        leading = None if nested or (spec.layout_from_inner and not strides_answered) \
            else following_inner(tensor, names, sizes_only=strides_answered)  # answers its strides]
        answered = not nested and answers_its_sizes(spec, tensor, names)  # Note [A wrapper that answers ...]
        symbolic = (leading is not None or answered) and self.dynamic_dims is not None \
            and self.symbolic_subclasses
        places = ctx_places(tensor, ctx, self.dynamic_dims(path.attr(leading), getattr(tensor, leading))) \
            if symbolic and not answered else ()  # Note [A flatten ctx that holds the outer sizes], ...
        if not symbolic:  # before the ctx: a ctx holding the sizes misses on them (a symbolic pass next)
            self.guard(path, "tensor", spec)
        guarded = ctx_snapshot(ctx)  # Note [A subclass input's own containers], jit/subclass_inputs.py
        pinned_ctx, numbers = ctx, []  # what the rebuilt value is made from; ctx numbers bound
        if self.counters and not places and getattr(cls, "__metadata_guard__", None) is None:
            # Note [A float of a flatten ctx that changes between calls], jit/ctx_numbers.py
            ctx, guarded, numbers = bind_ctx_numbers(ctx, guarded, path, self.counters, lambda value, place:
                                                     self.bind_dynamic_number(value, place, f"{name}_ctx"))
        self.guard(path, "flatten", (cls, tuple(names), SizedContext((guarded, places)) if places
                                                     else guarded))
        if nested:
            self.values.allow_nested_ints()
            self._ragged.update(ragged_dims(names, ctx, tensor, path, self.dynamic_dims))
        self._static_only += not symbolic
        try:
            inner = {n: self._tensor(getattr(tensor, n), path.attr(n), f"{name}_{n}") for n in names}
        finally:
            self._static_only -= not symbolic
        if spec.layout_from_inner:
            self._layouts_of.update(id(p) for p in inner.values())
        layout = None
        shadows = {n: p.shadow for n, p in inner.items()}
        if symbolic and answered:  # Note [A wrapper that answers its sizes], jit/subclass_inputs.py
            if any(map(has_symbols, shadows.values())):
                self.symbolic_subclass_inputs += 1  # first: StaticSubclassShapes keeps only these static
                layout = answered_layout(self.values, tensor, shadows, ctx, path)
            self.guard(path, "tensor", spec)  # reads no size: the class's dispatch answers them
        elif symbolic:  # Note [Subclass inputs that follow an inner tensor], jit/subclass_inputs.py
            lead = inner[leading].shadow
            if has_symbols(lead):
                layout = tuple(lead.shape), tuple(lead.stride())
                ctx = with_sizes(ctx, places, layout[0])
                spec = dataclasses.replace(TensorSpec.of(tensor, with_strides=False, traced=layout),
                                           layout_from_inner=True) if strides_answered else \
                    TensorSpec.of(tensor, with_strides=True, traced=(*layout, tensor.storage_offset()))
                self.guard(path, "shape", follows(path, path.attr(leading), sizes_only=strides_answered))
                self.symbolic_subclass_inputs += 1
            self.guard(path, "tensor", spec)
        try:
            shadow = shadow_around(self.values, tensor, shadows, ctx, nested=nested, path=path, layout=layout)
        except Exception:
            if not numbers:
                raise
            for number in numbers:  # Note [A ctx number its class cannot rebuild with], jit/ctx_numbers.py
                number.specialize()
            shadow = shadow_around(self.values, tensor, shadows, pinned_ctx, nested=nested, path=path,
                                   layout=layout)
        rebuilt = instance_attributes(shadow)
        carried = not nested and has_own_protocol(cls) and _carries_attributes(cls)
        for key, value in instance_attributes(tensor).items():  # Note [A subclass input's own containers]
            if type(value) in (list, dict, set) and getattr(shadow, key, None) is value:
                self.bind_state(value, path.attr(key), key)
            elif carried and _not_reproduced(key, value, rebuilt, names, pinned_ctx, cls):
                # Note [An attribute the flatten protocol does not report]
                object.__setattr__(shadow, key, self.bind_state(value, path.attr(key), key))
            elif carried and _tensor_not_rebuilt(key, value, rebuilt, names):
                # Note [A tensor attribute the rebuilt value lacks]
                object.__setattr__(shadow, key, self._tensor(value, path.attr(key), f"{name}_{key}").shadow)
            elif carried and _object_not_rebuilt(key, value, rebuilt, names):
                # Note [An object attribute the rebuilt value does not derive]
                object.__setattr__(shadow, key, self.bind_state(value, path.attr(key), key))
        proxy = DispatchState.of(self.values).adopt(shadow, self.values.names.claim(name))
        if not nested:  # Note [A wrapper that answers its own layout, while tracing], proxies/subclass.py
            proxy.set_policy(_layout_policy(spec))
        self.subclass_inputs.append((proxy, path))
        if self.on_remember is not None:  # attributes the program sets on it are set on the caller's
            self.on_remember(proxy, path)
        return proxy

    def _bind_tensor_attributes(self, proxy: TensorProxy, tensor: torch.Tensor, path: Path) -> None:
        """The Python attributes of a plain subclass's tensor (``t.tag``, a ``__slots__`` field):
        on its proxy, each bound as state through the tensor's path; what the program writes there
        is performed on the tensor after each call (its snapshot: jit/effects.py)."""
        attributes = instance_attributes(tensor)
        for key, value in attributes.items():
            proxy.__dict__[key] = self.bind_state(value, path.attr(key), key)
        if self.on_remember is not None:
            self.on_remember(proxy, path)


# Note [One map of reached objects]
# An object the pass reached is known by its id for the pass's length: remembered (the program reads
# attributes or items from it: ``path``), bound to what the program sees (a tensor's proxy, a
# generator's, a NumPy array's wrapper: ``bound``, first found at ``bound_at``), or both (a tensor
# held by a remembered container, then used). One record per id holds the object itself, so no id is
# reused while the pass runs; ``finish`` drops them all.
@dataclasses.dataclass(slots=True, eq=False)
class Reached:
    """What the pass knows of one object it reached (Note [One map of reached objects])."""

    obj: Any
    path: Path | None = None  # where it was remembered
    bound: Any = None  # what the program sees for it: a TensorProxy, a GeneratorProxy, an ndarray wrapper
    bound_at: Path | None = None  # where it was first bound


def _argument(path: Path, name: str) -> str:
    """``'x' (args[0])``: the parameter's name and where it was found."""
    where = path.describe()
    return f"{name!r} ({where})" if name and name != where else where


# Note [An attribute the flatten protocol does not report]
# A wrapper input is rebuilt for tracing by its class's ``__tensor_unflatten__``, which often passes
# only what ``__tensor_flatten__`` reports: ``K(inner["a"])`` where the caller's value was made as
# ``K(a, k=3.0)`` gets ``__init__``'s default ``k=1.0``. What the class's ``__torch_dispatch__`` or the
# program read from ``x.k`` was that default (outputs scaled by 1.0 where eager scales by 3.0); a log
# list the dispatch appends to, made anew by unflatten (``LogT(inner["a"], [])``), grew on the rebuilt
# value while the caller's stayed empty. An instance attribute of the caller's value that the rebuilt
# one lacks, or holds as another literal, or as another tensor-free list/dict/set, is set on the
# rebuilt one and bound as state at its path: a literal guarded by value (another ``k`` retraces), a
# container as the caller's own (Note [A subclass input's own containers]: what the dispatch appends
# is appended to the caller's on every call).
# A literal the rebuilt value holds equal to the caller's is carried too (Note [An attribute the
# rebuilt value happens to hold]). Not carried: what the rebuilt value holds as anything else (a ctx or
# size rebuilt from symbolic sizes, ``with_sizes``: the caller's concrete value would pin an entry per
# size), objects and containers holding tensors, and the attributes of torch's own subclasses (a
# nested jagged tensor's ``_size``/``_strides`` hold the nested int of this pass: the caller's would
# break torch's asserts).
_ABSENT = object()

# Note [An attribute the rebuilt value happens to hold]
# A literal the rebuilt value holds equal to the caller's was not carried, so it was not guarded: where
# the rebuilt value got it from a constructor's default (``K(inner["a"])``, ``k=1.0``) and the caller's
# ``k`` was that default on the traced call, a later call with ``K(a, k=3.0)`` ran that entry, scaled by
# 1.0 where eager scales by 3.0 (a wrong answer; an interned value, ``bits = 8``, even the same object).
# Such a literal is carried as any other: guarded by value at its path (a number that changed between
# calls is dynamic from the next trace on, Note [Numbers that change between calls become dynamic],
# jit/numbers.py). One the ctx gave (the very object a ctx entry holds: ``{"scale": self.scale}``) is
# left to the ``flatten`` guard, which checks it as the class asks (its ``__metadata_guard__`` may accept
# another tag up to case: a guard by value there would add misses the class does not want).
# Only for a class with a ``__metadata_guard__``: "the very object" is no proof that the attribute came
# from the ctx, because equal literals are often one object (the constants of one code object are
# merged: ``{"scale": 1.0}`` and ``self.extra = 1.0`` in one ``__new__``; small ints, True, False, None
# and short strings are shared process-wide), so an ``extra`` the caller later set to 3.0 ran the entry
# traced with 1.0 (a wrong answer). Without a ``__metadata_guard__`` the ``flatten`` guard compares the
# ctx with ``==``, so a guard by value on an attribute that did come from it adds no miss.


def _carries_attributes(cls: type) -> bool:
    """Whether a subclass's instance attributes outside its flatten protocol are carried to its
    rebuilt value: not for torch's own classes (their test classes aside)."""
    module = getattr(cls, "__module__", "") or ""
    return not module.startswith("torch.") or module.startswith("torch.testing.")


def _not_reproduced(key: str, value: Any, attributes: dict[str, Any], names: list[str], ctx: Any,
                    cls: type) -> bool:
    """Whether the caller's attribute ``key`` (holding ``value``) of a ``cls`` is one to carry over the
    rebuilt value's ``attributes`` (``names``: the inner tensors; ``ctx``: the flatten ctx it was rebuilt
    from): Note [An attribute the flatten protocol does not report]."""
    if key in names or is_torch_cache(key):
        return False
    rebuilt = attributes.get(key, _ABSENT)
    if is_literal_value(value):  # Note [An attribute the rebuilt value happens to hold]
        if rebuilt is _ABSENT or not is_literal_value(rebuilt):
            return rebuilt is _ABSENT
        from_ctx = getattr(cls, "__metadata_guard__", None) is not None and any(  # Note [An attribute
            rebuilt is leaf for leaf in tree_leaves(ctx))  # the rebuilt value happens to hold]
        return not from_ctx or type(rebuilt) is not type(value) or rebuilt != value
    if rebuilt is value:
        return False
    if type(value) in (list, dict, set):
        return (rebuilt is _ABSENT or type(rebuilt) in (list, dict, set) and all(
            is_literal_value(leaf) for leaf in tree_leaves(rebuilt))) and not any(
            isinstance(leaf, torch.Tensor) for leaf in tree_leaves(value))
    return False


# Note [A tensor attribute the rebuilt value lacks]
# A caller may set a tensor on a wrapper value outside its flatten protocol (an adapter's delta on a
# frozen weight, ``w.delta = d``; a dequantized copy the class memoizes on the instance the first time
# its ``__torch_dispatch__`` runs). The rebuilt value got what ``__init__`` sets (None, or nothing), so
# the class's code read None there: the trace computed without the delta, and every later call too (a
# wrong answer; the ``== None`` guard of the traced call only made the next call trace again, as wrong).
# A plain tensor attribute of the caller's value where the rebuilt value holds None or nothing is bound
# as an input of its own at its path (``args[0].delta``, guarded as any input is) and set on the rebuilt
# value as its shadow. Where the rebuilt value holds a tensor, that tensor is its class's function of the
# inner tensors (``self.scale_inv = 1 / scale`` in ``__init__``) and stays.
def _tensor_not_rebuilt(key: str, value: Any, attributes: dict[str, Any], names: list[str]) -> bool:
    """Whether the caller's attribute ``key`` holds a plain tensor where the rebuilt value's
    ``attributes`` hold None or nothing (``names``: the inner tensors): Note [A tensor attribute the
    rebuilt value lacks]."""
    if key in names or is_torch_cache(key) or type(value) not in (torch.Tensor, torch.nn.Parameter):
        return False
    rebuilt = attributes.get(key, _ABSENT)
    return rebuilt is None or rebuilt is _ABSENT


# Note [An object attribute the rebuilt value does not derive]
# Besides literals and tensors, a caller's wrapper value holds objects outside its flatten protocol that
# its ``__torch_dispatch__`` reads: an enum member (a rounding mode), a config dataclass, a tuple or
# dict of tensors (a LoRA pair), a function (an activation to apply), set by ``__init__`` to a default
# or by the caller afterwards. The rebuilt value held ``__init__``'s object, so the trace computed with
# the default and no guard looked at the caller's (a wrong answer on every call after the caller set
# another). Such an attribute is carried to the rebuilt value and bound as state at its path (its reads
# guarded as any state's: an enum member by identity, a plain instance by the attributes read, a
# container item by item) where the rebuilt value holds None or nothing there, an enum member, or a plain
# instance of the same class holding no tensor and no symbolic number. Not carried: what the rebuilt value
# derives from its inner tensors or sizes (an object or container holding a tensor, a SymInt, a proxy),
# and a default function or other object (a per-instance closure guarded by identity would be a miss
# per value).
def _object_not_rebuilt(key: str, value: Any, attributes: dict[str, Any], names: list[str]) -> bool:
    """Whether the caller's attribute ``key`` holds an object to carry over the rebuilt value's
    ``attributes`` (``names``: the inner tensors): Note [An object attribute the rebuilt value does not
    derive]."""
    if key in names or is_torch_cache(key) or is_literal_value(value) or isinstance(value, torch.Tensor):
        return False
    rebuilt = attributes.get(key, _ABSENT)
    if rebuilt is None or rebuilt is _ABSENT:
        return True
    if isinstance(rebuilt, enum.Enum):
        return True
    return type(rebuilt) is type(value) and is_plain_instance(rebuilt) and not any(
        isinstance(leaf, _DERIVED) for leaf in tree_leaves(list(vars(rebuilt).values())))


_DERIVED = (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool, NumberProxy)


def _layout_policy(spec: TensorSpec) -> str | None:
    """The ``dispatch_sizes_strides_policy`` a wrapper input answers its layout by, as its spec found
    it (None: torch's defaults, read from its outer metadata)."""
    if spec.outer_from_inner:
        return "sizes"
    return "strides" if spec.layout_from_inner else None
