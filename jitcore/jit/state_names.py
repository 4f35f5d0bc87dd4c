"""Qualified names of module state (``layers.0.attn.q_proj.weight``) read from the paths that reach it.

A tensor the traced program reads from an ``nn.Module`` enters the trace through a path such as
``self._modules['layers']._modules['0'].__dict__['_parameters']['weight']``: torch's own bookkeeping
(``_modules``, ``_parameters``, ``_buffers``, ``__dict__``) interleaved with the names a user knows.
``qualified_name`` drops the bookkeeping and keeps the names, giving what ``named_parameters()``
would call it. Invariants:
- a pure function of the path (no module is looked at), so it also names state reached through a
  module argument (``@jitcore.jit`` on a ``forward`` method: ``args[0]`` is the module);
- only paths through module state are named (a bookkeeping step, or the jitted module's ``self``);
  anything else answers None and keeps the name tracing gave it.
"""

from __future__ import annotations

from jitcore.ir import Trace
from jitcore.prologue import Path

__all__ = ["note_state_inputs", "qualified_name"]

# torch.nn.Module's registries: the step after one of them is a user-visible name.
_REGISTRIES = frozenset({"_modules", "_parameters", "_buffers"})
# Attribute steps that name nothing: an instance dict, and a jitted submodule's original (jitcore's
# JittedModule keeps it out of ``_modules``: ``named_parameters()`` call it ``inner.weight``).
_TRANSPARENT = frozenset({"__dict__", "_orig_mod"})


def qualified_name(path: Path) -> str | None:
    """``linear1.weight`` for a path through module state; None for any other path.

    Args:
        path: how a value was reached (see jitcore/prologue/paths.py).

    Returns:
        The dotted name ``named_parameters()``/``named_buffers()`` use for it, relative to the
        jitted module (or to the module argument the path starts at); None when the path does not
        go through module state.
    """
    steps = list(path.steps)
    root = path.root
    if root.kind in ("args", "kwargs"):
        if not steps:
            return None
        steps = steps[1:]  # the argument itself (the module ``self`` of a jitted forward)
    elif not (root.kind == "bound" and root.label == "self"):
        return None
    parts: list[str] = []
    through_registry = root.kind == "bound"
    for step in steps:
        if step.kind == "attr" and step.value in _TRANSPARENT:
            continue
        if step.kind not in ("attr", "key", "index") or not isinstance(step.value, (str, int)):
            return None
        if step.value in _REGISTRIES and step.kind in ("attr", "key"):
            through_registry = True
            continue
        parts.append(str(step.value))
    return ".".join(parts) if parts and through_registry else None


def note_state_inputs(input_paths: list[Path], input_names: list[str], traces: list[Trace]) -> None:
    """Print next to each trace input from module state the name its module knows it by.

    Args:
        input_paths, input_names: a prologue's ``inputs`` and ``input_names`` (in the same order).
        traces: the traces of that cache entry (every pass, forward and backward): each input of
            theirs that keeps its name gets the note.
    """
    notes = {name: qn for path, name in zip(input_paths, input_names) if (qn := qualified_name(path))}
    for trace in traces:
        trace.input_notes.update(notes)
