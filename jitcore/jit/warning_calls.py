"""The program's ``warnings.warn`` calls: recorded while tracing, issued on every call as eagerly.

``warnings.warn(f"step {i}: loss rose")`` inside a jitted function warns on every eager call, subject
to the filters and the once-per-location registry as that call finds them (``simplefilter("always")``
shows each; the default filter shows one per location and text). Issued while tracing only, a cached
call warned nothing. While tracing, the pass's lookaside for ``warnings.warn`` records the call as an
``Effect`` of kind ``"warn"`` (jitcore/jit/effects.py) in program order among the prints and log records
(jitcore/jit/printing.py), with the location CPython's ``warn`` would blame (the interpreted frame
``stacklevel`` up: ``warning_location``); after each run of the computation the entry calls
``warnings.warn_explicit`` with it and the registry of the blamed module as that call finds it.

What a warning can carry: a message that is text (a ``str``, or text made from numbers read from
tensors or dynamic numbers: each call's), or a ``Warning`` instance whose arguments are plain values
(None, numbers, strings). Any other message (an object whose ``__str__`` could read state changed later
in the call) is refused with UnsupportedOperationError (JC-T001): without ``fullgraph`` that call runs
eagerly. A warning a library's tensor-subclass code issues (code taken as it is while tracing) is
issued while tracing, as before. A warning the filters make an exception (``simplefilter("error")``) is
raised at its line while tracing, as eagerly (the program may catch it); whether the filters do so is
checked on every call (a change is a miss). A warning issued while the filters or the display hooks are
the program's own (Note [Warnings under the program's own filters]) is dropped when they ignore it, raised
when they make it an error, and refused otherwise.

Invariant: a replayed warning is the ``warn_explicit`` call eager makes for a call taking the same path,
made after torch's computation (as prints and records are).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.interpreter.lookasides import warning_location
from jitcore.jit.effects import Effect
from jitcore.prologue import Path, Root
from jitcore.proxies.text import TextProxy

__all__ = ["Warnings"]

_PLAIN_ARGS = (type(None), bool, int, float, str)


def _action(category: type, text: str, module: str, lineno: int) -> str:
    """The action of the first filter that matches this warning now, as ``warn_explicit`` finds it."""
    for action, message, cat, mod, ln in warnings.filters:
        if (message is None or message.match(text)) and issubclass(category, cat) \
                and (mod is None or mod.match(module)) and (ln == 0 or lineno == ln):
            return action
    return warnings.defaultaction


def _raises(category: type, text: str, module: str, lineno: int) -> bool:
    """Whether the filters now make this warning an exception (``"error"``)."""
    return _action(category, text, module, lineno) == "error"


# Note [Warnings under the program's own filters]
# A warning is replayed after the computation, under the filters and display hooks the caller has then.
# Inside the program's own ``with warnings.catch_warnings(): simplefilter("ignore")`` (or ``record=True``,
# unittest's ``assertWarns``, a ``showwarning`` it installs) eager decides at the ``warn`` by the program's
# filters and delivers to the program's hooks, which are gone when the replay runs: jitted, an ignored
# warning was shown to the caller, and a recorded one never reached the program's list (CPython's
# test_re: four ``assertWarns`` failed). So the filters (their contents) and hooks are taken when the pass
# starts; a ``warn`` that finds them changed is decided at once by the program's filters: "ignore" drops
# it, "error" raises it at its line, and any other action (shown or recorded through the program's hooks,
# which the computation cannot replay) is refused (JC-T001: the call runs eagerly). The caller's filters
# and hooks are checked on every call, since the program's filters start as a copy of them.
def _display_state() -> tuple:
    """What decides where a warning goes: the filters' contents and the hooks that show it."""
    return tuple(warnings.filters), warnings.showwarning, warnings._showwarnmsg_impl


@dataclasses.dataclass(frozen=True, slots=True)
class _DisplayCheck:
    """A prologue ``check``: None while the caller's filters and hooks are those the pass started with."""

    expected: tuple

    def __call__(self) -> str | None:
        return None if _display_state() == self.expected else "the warnings filters or hooks changed"


@dataclasses.dataclass(frozen=True, slots=True)
class _RaisesCheck:
    """A prologue ``check``: None while the filters make the warning an exception as while tracing."""

    where: tuple[type, str, str, int]
    expected: bool

    def __call__(self) -> str | None:
        if _raises(*self.where) == self.expected:
            return None
        category, _text, module, lineno = self.where
        return f"the warnings filters now {'do not ' if self.expected else ''}make the {category.__name__} " \
               f"of {module}:{lineno} an exception"


class Warnings:
    """The ``warnings.warn`` calls of one pass, appended to ``effects`` (the prints' list: one order)."""

    def __init__(self, effects: list[Effect], guard: Callable[..., None], untracked: Callable[[Any], bool],
                 warn_now: Callable[..., None]) -> None:
        """Args:
            effects: the pass's print effects (warnings join them in program order).
            guard: ``Provenance.guard``.
            untracked: whether a frame is subclass code whose effects happen while tracing only.
            warn_now: the interpreter's ``warnings.warn`` (issues the warning at once).
        """
        self.effects, self._guard, self._untracked, self._warn_now = effects, guard, untracked, warn_now
        self._at_start = _display_state()  # the caller's (Note [Warnings under the program's own filters])

    def lookasides(self) -> dict[Any, Callable[..., Any]]:
        import warnings

        return {warnings.warn: self._warn}

    def _warn(self, message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, *,
              skip_file_prefixes: tuple[str, ...] = ()) -> None:
        run = current_run()
        frames = list(reversed(run.frames)) if run is not None else []
        if source is not None or (frames and self._untracked(frames[0])):
            return self._warn_now(message, category, stacklevel, source,
                                  skip_file_prefixes=skip_file_prefixes)
        message, category, filename, lineno, globals_ = warning_location(
            message, category, stacklevel, skip_file_prefixes)
        if not (isinstance(message, (str, TextProxy)) or isinstance(message, Warning)
                and all(isinstance(a, _PLAIN_ARGS) for a in message.args)):
            raise UnsupportedOperationError(
                f"warnings.warn() with a {type(message).__qualname__} message, whose text a later call could "
                "not make as eagerly, which jitcore cannot issue again on a cached call",
                hints=("warn with a string (an f-string of numbers is fine)",),
            )
        module = globals_.get("__name__", "<string>")
        if isinstance(message, TextProxy) and message.shows_tensors():
            message.specialize()  # a tensor's text: the filters need the characters now (raises JC-T001)
        text = str(message) if not isinstance(message, TextProxy) else message.text_of(
            [n.value for n in message.numbers()])
        where = (category, text, module, lineno)
        if _display_state() != self._at_start:  # Note [Warnings under the program's own filters]
            return self._under_program_filters(where, message, text, stacklevel, skip_file_prefixes)
        raises = _raises(*where)
        check = _RaisesCheck(where, raises)
        self._guard(Path(Root("bound", f"warnings.filters for {module}:{lineno}", check)).call(), "check",
                    None)
        if raises:  # an exception at this line, as eagerly: the program may catch it
            return self._warn_now(message if not isinstance(message, TextProxy) else text, category,
                                  stacklevel, source, skip_file_prefixes=skip_file_prefixes)
        path = Path(Root("bound", f"the warnings registry of {module}", globals_))
        self.effects.append(Effect(path, "warn", (category, filename, lineno, module), [message]))
        return None

    def _under_program_filters(self, where: tuple[type, str, str, int], message: Any, text: str,
                               stacklevel: int, skip_file_prefixes: tuple[str, ...]) -> None:
        """A warning issued while the filters or hooks are the program's: decided now by them."""
        check = _DisplayCheck(self._at_start)
        self._guard(Path(Root("bound", "warnings.filters and hooks", check)).call(), "check", None)
        action = _action(*where)
        if action == "ignore":
            return None
        if action == "error":
            return self._warn_now(message if not isinstance(message, TextProxy) else text, where[0],
                                  stacklevel, None, skip_file_prefixes=skip_file_prefixes)
        raise UnsupportedOperationError(
            f"a {where[0].__name__} issued under warnings filters or hooks the function set itself (a "
            "catch_warnings(record=True), assertWarns or showwarning of its own), which the computation "
            "cannot deliver to them again",
            hints=("issue the warning outside the function's own catch_warnings block",),
        )
