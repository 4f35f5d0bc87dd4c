"""The layers of docs/architecture.md hold: no upward import, no import of another package's private name.

The layer order is read from the table "Layers" of docs/architecture.md (first row: the ground floor),
so the document and this test cannot drift apart. Every ``import`` of every module of ``jitcore`` is
read with ``ast``, imports inside functions included (a lazy import is still a dependency).
Rules:
- a module imports only from its own layer and the layers listed before it;
- ``from jitcore.x.y import _name`` is refused when ``x`` is another package: a name another package
  needs is published (no leading underscore, in ``__all__``);
- ``import jitcore`` (the package root, as a namespace that generated code's dotted paths start from)
  is allowed everywhere: it names no layer's contents.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jitcore"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def layer_order() -> list[str]:
    """The units of the "Layers" table, bottom first: ``ir`` for ``jitcore/ir/``, ``errors`` for
    ``jitcore/errors.py``, ``jitcore`` for the public API (``jitcore/__init__.py``, ``__main__.py``)."""
    text = ARCHITECTURE.read_text()
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    units = []
    for line in table.splitlines():
        first = line.split("|")[1].strip() if line.startswith("|") else ""
        for name in re.findall(r"`jitcore/([A-Za-z_]+)(?:/|\.py)`", first):
            units.append("jitcore" if name in ("__init__", "__main__") else name)
    return list(dict.fromkeys(units))


def unit_of(module: str) -> str:
    """``jitcore.jit.api`` -> ``jit``; ``jitcore.errors`` -> ``errors``; ``jitcore`` -> ``jitcore``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] != "__main__" else "jitcore"


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join(parts), path))
    return found


def imports(path: Path, module: str) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names) for every jitcore import in the file (relative ones resolved)."""
    out = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.startswith("jitcore.")]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([target] if target else []))
            if target == "jitcore" or target.startswith("jitcore."):
                out.append((node.lineno, target, [a.name for a in node.names]))
    return out


def check(module: str, path: Path, rank: dict[str, int]) -> tuple[list[str], list[str]]:
    """The upward imports and the private cross-package imports of one module."""
    unit = unit_of(module)
    assert unit in rank, f"{path}: its layer {unit!r} is not in docs/architecture.md"
    upward, private = [], []
    for line, target, names in imports(path, module):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{line}"
        for imported in [f"{target}.{n}" for n in names] if target == "jitcore" else [target]:
            dest = unit_of(imported)
            if dest in rank and rank[dest] > rank[unit]:
                upward.append(f"{where}: {unit} imports {imported} ({dest} is above it)")
        if unit_of(target) != unit and target != "jitcore":
            private += [
                f"{where}: {target}.{n}" for n in names if n.startswith("_") and not n.startswith("__")
            ]
    return upward, private


def violations() -> tuple[list[str], list[str]]:
    rank = {unit: i for i, unit in enumerate(layer_order())}
    upward, private = [], []
    for module, path in modules():
        up, priv = check(module, path, rank)
        upward += up
        private += priv
    return upward, private


def test_the_layer_table_names_every_package() -> None:
    order = layer_order()
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules_at_root = {p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert packages | modules_at_root <= set(order), sorted((packages | modules_at_root) - set(order))
    assert order[-1] == "jitcore", "the public API (jitcore/__init__.py) is the top layer"


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward, _ = violations()
    assert not upward, "\n".join(upward)


def test_no_module_imports_another_packages_private_name() -> None:
    _, private = violations()
    assert not private, "\n".join(private)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from jitcore.jit.api import jit\n", "upward"),
        ("def f():\n    from jitcore.debug.explain import explain\n", "upward"),
        ("from jitcore.ir.printer import _private_helper\n", "private"),
        ("from jitcore.ir import Trace\nimport jitcore\n", None),
    ],
)
def test_the_checks_catch_what_they_claim(tmp_path: Path, source: str, expected: str | None) -> None:
    """The rules run on a made-up module of the ``langctx`` layer (so a check cannot pass vacuously)."""
    path = tmp_path / "probe.py"
    path.write_text(source)
    rank = {unit: i for i, unit in enumerate(layer_order())}
    upward, private = check("jitcore.langctx.probe", path, rank)
    found = {"upward"} if upward else set()
    found |= {"private"} if private else set()
    assert found == ({expected} if expected else set())
