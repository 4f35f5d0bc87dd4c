"""torch's generated Python bindings as faster callees for aten overloads, where provably the same call.

A trace calls ``torch.ops.aten.addmm.default(b, x, w)``; generated code binds that name to the
overload's ``_op``, pybind's schema-matching path (3.0 us for the 8-16-8 MLP's addmm). torch's own
binding of the same operator, ``torch._C._VariableFunctions.addmm`` (what ``torch.addmm`` is), goes
through the generated PythonArgParser and costs 2.4 us. It is a different front door to the same
dispatcher entry, so it is used only where the call it receives is provably the same call (Note
[Bindings that take the same call]).

Invariants:
- a binding is chosen per compiled trace, from every call of the overload the trace makes; any call
  not proven equivalent keeps ``_op`` for the whole trace;
- the bindings' signatures, in the parser's order, come from torchgen (the generator of those
  bindings, shipped with torch) through ``python_signatures.py``; they are used only with torch built
  from the commit they were derived from, and each one is checked against the live schema before use;
- only functional overloads with one Tensor result and exactly-typed tensor, number and int-list
  arguments qualify: no factory (a ``DeviceContext`` rewrites torch factories' device, not aten's),
  no ``out=``, no structseq or list results.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch._ops import OpOverload

from jitcore.langctx import python_signatures
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.tensor import TensorProxy

__all__ = ["python_binding", "derive_signatures"]

# Note [Bindings that take the same call]
# ``_op`` and torch's generated binding of an aten name (a function of ``torch._C._VariableFunctions``,
# or a method of ``torch._C.TensorBase``) both end in ``at::_ops::<overload>::call``; they differ in
# how they get there. The binding tries the name's Python signatures in order (deprecated ones such
# as ``addmm(Scalar beta, Tensor input, ...)`` included) and calls the overload of the first that
# parses; ``_op`` converts by one schema. A call is handed to the binding only when, for the kinds of
# its arguments (a plain tensor, an int, a float, a bool, None, a list of ints; anything else keeps
# ``_op``):
# - every signature before the overload's own certainly fails to parse it (too many positional
#   arguments, a missing required one, an unknown keyword, or an argument its type never accepts),
#   judged by the parser's rules for those kinds, any doubt counting as a possible match. A Python
#   number reaches a ``Tensor`` parameter only for the names in ``_NUMBERS_AS_TENSORS`` (the parser's
#   ``should_allow_numbers_as_tensors``: ``torch.add(t, 2)`` parses by ``add(Tensor, Tensor)``);
#   elsewhere it never does, so ``torch.pow(t, 2.)`` skips ``pow(Tensor, Tensor)`` and
#   ``pow(Scalar, Tensor)`` and takes ``pow(Tensor input, Scalar exponent)``, ``pow.Tensor_Scalar``;
# - the overload's own signature certainly parses it, and matches the live schema parameter by
#   parameter (order, keyword-only split, name, type, default), so that each argument is converted
#   to the same C++ value (an int to an int64 Scalar, a float to a double, a bool to a bool, in both);
# - the overload is functional with one Tensor result: the binding wraps it as ``_op`` does, and
#   aliasing is the operator's own.
# Tensor arguments must be proxies of plain ``torch.Tensor``/``Parameter`` values: neither runs a
# ``__torch_function__`` (which would receive ``torch.addmm`` instead of ``aten.addmm.default``),
# and a caller's mode is off torch's stacks while a jitted call runs (Note [Modes around the call]);
# DeviceContext rewrites only torch's factories, which no binding here is. An int out of int64's range
# raises in both (the same RuntimeError or OverflowError for a Scalar; torch's own binding is what
# eager called). tests/langctx/test_python_bindings.py runs every admitted OpInfo call both ways.

_T, _I, _F, _B, _N, _L = "T", "I", "F", "B", "N", "L"  # kinds of an argument at a call site
_ALL = frozenset((_T, _I, _F, _B, _N, _L))
# Python parameter type -> (kinds it certainly accepts, kinds it may accept). Numbers may reach a
# Tensor (``allow_numbers_as_tensors``), a 0-dim tensor a number parameter, an int an int list.
_ACCEPTS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "Tensor": (frozenset(_T), frozenset((_T, _I, _F, _B))),
    "Scalar": (frozenset((_I, _F, _B)), frozenset((_T, _I, _F, _B))),
    "int64_t": (frozenset(_I), frozenset((_T, _I, _B))),
    "SymInt": (frozenset(_I), frozenset((_T, _I, _B))),
    "double": (frozenset((_I, _F)), frozenset((_T, _I, _F, _B))),
    "bool": (frozenset(_B), frozenset((_T, _B))),
    "IntArrayRef": (frozenset(_L), frozenset((_T, _I, _L))),
    "SymIntArrayRef": (frozenset(_L), frozenset((_T, _I, _L))),
    "ScalarType": (frozenset(), frozenset()),  # a dtype or a Python number type: never one of the kinds
    "MemoryFormat": (frozenset(), frozenset()),
    "Layout": (frozenset(), frozenset()),
    "Device": (frozenset(), frozenset((_I,))),  # an int is a device index
}
# the schema's type (``Argument.real_type``, optional stripped) for each Python parameter type a target
# may have; ScalarType, MemoryFormat and Layout only ever pass None (no kind is a dtype or a format)
_SCHEMA_TYPES = {"Tensor": "Tensor", "Scalar": "number", "int64_t": "int", "SymInt": "int", "double": "float",
                 "bool": "bool", "IntArrayRef": "List[int]", "SymIntArrayRef": "List[int]",
                 "ScalarType": "ScalarType", "MemoryFormat": "MemoryFormat", "Layout": "Layout"}
# python_arg_parser.cpp's should_allow_numbers_as_tensors: the only names whose Tensor parameters
# accept a Python number (wrapped as a 0-dim tensor); any other name's Tensor parameter refuses one
_NUMBERS_AS_TENSORS = frozenset(
    f"{name}{suffix}"
    for name in ("add", "div", "divide", "mul", "multiply", "sub", "subtract", "true_divide", "floor_divide")
    for suffix in ("", "_", "_out")
) | {"to", "_to_copy", "copy_", "copy", "_conj"}
_NUMPY_ALIASES = frozenset(("axis", "keepdims", "x", "a", "x1", "x2", "self"))
_NUMBERS = {int: _I, float: _F, bool: _B}  # exact types: a bool is not an int here, nor an IntEnum
_NO_DEFAULT = object()
_PLAIN = (torch.Tensor, torch.nn.Parameter)


class _Param:
    __slots__ = ("type", "size", "optional", "name", "default", "keyword_only")

    def __init__(self, text: str, keyword_only: bool) -> None:
        declared, _, rest = text.partition(" ")
        name, eq, default = rest.partition("=")
        self.optional = declared.endswith("?")
        declared = declared.removesuffix("?")
        self.type, _, size = declared.partition("[")
        self.size = size.rstrip("]")
        self.name = name
        self.default = default if eq else _NO_DEFAULT
        self.keyword_only = keyword_only

    def allows_none(self) -> bool:
        return self.optional or self.default == "None"


@functools.cache
def _parse(signature: str) -> tuple[str, tuple[_Param, ...], bool]:
    """``addmm(Tensor input, ..., *, Scalar beta=1)|deprecated`` -> (name, parameters, deprecated)."""
    text, _, flags = signature.partition("|")
    name, _, inner = text.partition("(")
    params, keyword_only, depth, start = [], False, 0, 0
    inner = inner[:-1]
    pieces = []
    for i, ch in enumerate(inner + ","):
        depth += ch in "[{(" and 1 or ch in "]})" and -1 or 0
        if ch == "," and depth == 0:
            pieces.append(inner[start:i].strip())
            start = i + 1
    for piece in filter(None, pieces):
        if piece == "*":
            keyword_only = True
        else:
            params.append(_Param(piece, keyword_only))
    return name, tuple(params), "deprecated" in flags


def _kind(value: Any) -> str | None:
    """The kind of one argument of a recorded call; None for anything the rules do not cover."""
    if isinstance(value, TensorProxy):
        return _T if value.python_type in _PLAIN else None
    if type(value) in _PLAIN:  # a tensor constant, or a real call's argument
        return _T
    if value is None:
        return _N
    kind = _NUMBERS.get(value.python_type if isinstance(value, NumberProxy) else type(value))
    if kind is not None:
        return kind
    if type(value) in (list, tuple) and all(_kind(v) == _I for v in value):
        return _L
    return None


def _outcome(signature: str, positional: list[str], keywords: dict[str, str]) -> str:
    """Whether PythonArgParser parses arguments of these kinds with ``signature``: yes, no or maybe."""
    name, params, _ = _parse(signature)
    numbers_as_tensors = name in _NUMBERS_AS_TENSORS
    max_positional = sum(not p.keyword_only for p in params)
    if max_positional == 1 and params[0].type in ("IntArrayRef", "SymIntArrayRef") and positional \
            and positional[0] != _L:
        return "maybe"  # varargs ints (``x.view(2, -1)``)
    if len(positional) > max_positional:
        return "no"
    left, verdict = dict(keywords), "yes"
    for i, param in enumerate(params):
        kind = positional[i] if i < len(positional) else left.pop(param.name, None)
        if kind is None:
            if param.default is _NO_DEFAULT:
                return "no"
            continue
        certain, possible = _ACCEPTS.get(param.type, (frozenset(), _ALL))
        if param.type == "Tensor" and not numbers_as_tensors:
            possible = certain
        if param.size and param.type in ("IntArrayRef", "SymIntArrayRef"):
            possible = possible | {_I}
        if kind == _N and param.allows_none():
            continue
        if kind in certain:
            continue
        if kind not in possible:
            return "no"
        verdict = "maybe"
    return "no" if left else verdict


def _literal(text: str) -> Any:
    value = ast.literal_eval(text.replace("{", "[").replace("}", "]"))
    return tuple(value) if isinstance(value, list) else value


def _same_as_schema(params: tuple[_Param, ...], schema: Any, method: bool) -> bool:
    """Whether the overload's own Python signature takes its schema's parameters, in order, as the
    schema declares them: each argument reaches the same schema parameter and converts alike."""
    arguments = list(schema.arguments)
    if method:
        if not arguments or arguments[0].name != "self" or str(arguments[0].type) != "Tensor":
            return False
        arguments = arguments[1:]
    params = tuple(p for p in params if not (p.name == "out" and p.keyword_only))
    if len(params) != len(arguments):
        return False
    for param, argument in zip(params, arguments, strict=True):
        real = str(argument.real_type)
        optional = real.startswith("Optional[")
        if _SCHEMA_TYPES.get(param.type) != (real[9:-1] if optional else real) or optional != param.optional \
                or param.keyword_only != argument.kwarg_only:
            return False
        if argument.name != param.name and not (argument.name == "self" and param.name == "input"):
            return False
        has_default = argument.has_default_value()
        if has_default != (param.default is not _NO_DEFAULT):
            return False
        if has_default:
            try:
                mine, theirs = _literal(param.default), argument.default_value
            except (ValueError, SyntaxError):
                return False
            theirs = tuple(theirs) if isinstance(theirs, list) else theirs
            if type(mine) is not type(theirs) or mine != theirs:
                return False
    return True


def _qualifies(schema: Any) -> bool:
    """Functional, one Tensor result, a tensor argument (not a factory)."""
    return not schema.is_mutable and len(schema.returns) == 1 and str(schema.returns[0].type) == "Tensor" \
        and any(str(a.type).startswith("Tensor") for a in schema.arguments)


@functools.cache
def _candidate(op: OpOverload) -> tuple[Callable[..., Any], tuple, int, bool] | None:
    """(binding, its name's signatures, the overload's index among them, method) or None."""
    if python_signatures.TORCH_SOURCE != torch.version.git_version or op.namespace != "aten":
        return None
    schema = op._schema  # noqa: SLF001
    if not _qualifies(schema):
        return None
    overload = op._opname if op._overloadname == "default" else f"{op._opname}.{op._overloadname}"  # noqa: SLF001
    for table, owner, method in ((python_signatures.FUNCTIONS, torch._C._VariableFunctions, False),  # noqa: SLF001
                                 (python_signatures.METHODS, torch._C.TensorBase, True)):  # noqa: SLF001
        signatures = table.get(op._opname)  # noqa: SLF001
        binding = getattr(owner, op._opname, None)  # noqa: SLF001
        if signatures is None or binding is None:
            continue
        for index in range(0, len(signatures), 2):
            signature, target = signatures[index], signatures[index + 1]
            _, params, deprecated = _parse(signature)
            if target == overload and not deprecated:
                if _same_as_schema(params, schema, method):
                    return binding, signatures, index, method
                break
    return None


def python_binding(op: OpOverload, calls: Iterable[tuple[tuple, dict]] | None) -> Callable[..., Any] | None:
    """torch's generated binding for ``op`` when it takes each of ``calls`` (a compiled trace's calls of
    ``op``: args and kwargs as recorded) exactly as ``op._op`` does; None otherwise."""
    found = _candidate(op) if calls else None
    if found is None:
        return None
    binding, signatures, index, method = found
    for args, kwargs in calls:
        positional = [_kind(a) for a in args]
        keywords = {k: _kind(v) for k, v in kwargs.items()}
        if None in positional or None in keywords.values() or _NUMPY_ALIASES & keywords.keys():
            return None
        if method:
            if not positional or positional[0] != _T:
                return None
            positional = positional[1:]
        if _outcome(signatures[index], positional, keywords) != "yes":
            return None
        if any(_outcome(s, positional, keywords) != "no" for s in signatures[:index:2]):
            return None
    return binding


def derive_signatures() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """The torch functions' and Tensor methods' parser signatures, in their parser's order, each followed
    by the aten overload it calls, as torchgen generates them (needs ``torchgen``, shipped with torch;
    seconds). A name is kept, up to its last signature, where one of its overloads can be a target
    here; a method only where the function cannot take that overload."""
    import os

    import torchgen
    from torchgen.gen import parse_native_yaml
    from torchgen.packaged.autograd import gen_python_functions as gen

    root = os.path.join(os.path.dirname(torchgen.__file__), "packaged")
    native = parse_native_yaml(os.path.join(root, "ATen/native/native_functions.yaml"),
                               os.path.join(root, "ATen/native/tags.yaml")).native_functions
    native = [f for f in native if gen.should_generate_py_binding(f)]
    tables: list[dict[str, tuple[str, ...]]] = []
    taken: set[str] = set()
    for method, pred in ((False, gen.is_py_torch_function), (True, gen.is_py_variable_method)):
        pairs = gen.load_signatures(native, os.path.join(root, "autograd/deprecated.yaml"), method=method)
        table = {}
        for name, overloads in gen.group_filter_overloads(pairs, pred).items():
            rows = [(g.signature.signature_str(symint=True), str(g.base.func.name))
                    for g in gen.group_overloads(overloads, symint=True)]
            last = max((i for i, (signature, overload) in enumerate(rows)
                        if overload not in taken and _may_target(signature, overload, method)), default=None)
            if last is not None:
                table[str(name)] = tuple(x for row in rows[:last + 1] for x in row)
        taken |= {table[n][i + 1] for n in table for i in range(0, len(table[n]), 2)
                  if _may_target(table[n][i], table[n][i + 1], method)}
        tables.append(dict(sorted(table.items())))
    return tables[0], tables[1]


def _may_target(signature: str, overload: str, method: bool) -> bool:
    name, _, overload_name = overload.partition(".")
    op = getattr(getattr(torch.ops.aten, name, None), overload_name or "default", None)
    _, params, deprecated = _parse(signature)
    return isinstance(op, OpOverload) and not deprecated and _qualifies(op._schema) \
        and _same_as_schema(params, op._schema, method)  # noqa: SLF001


def _write_signatures(path: str) -> None:
    functions, methods = derive_signatures()
    lines = [
        '"""torch\'s Python binding signatures, generated by ``python -m jitcore.langctx.python_bindings``',
        "from torchgen (do not edit): name -> (signature as its parser lists it, the aten overload it calls,",
        "...), in the parser's order, up to the last overload jitcore may call through the binding.",
        '"""',
        "",
        f"TORCH_SOURCE = {torch.version.git_version!r}  # torch.version.git_version: {torch.__version__}",
    ]
    for label, table in (("FUNCTIONS", functions), ("METHODS", methods)):
        lines.append(f"{label}: dict[str, tuple[str, ...]] = {{")
        lines += [f"    {name!r}: {rows!r}," for name, rows in table.items()]
        lines.append("}")
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    _write_signatures(python_signatures.__file__)
