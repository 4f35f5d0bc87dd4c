"""The file system as the program sees it: what it reads is guarded, what would change it is refused.

A jitted function that reads a file (``open(p).read()``, ``json.load``, ``np.load``, ``torch.load``),
tests a path (``os.path.exists``, ``isfile``, ``isdir``), stats one or lists a directory runs that
code while tracing only: what it read becomes constants of the trace, stale once the file changes.
The pass's lookasides for those calls run them natively and add a guard that repeats the observation
on every call (Note [What a file guard compares]); when it no longer holds, the call is a miss and
traces again, as eager would read the new contents. Calls that change the file system (``open`` for
writing or appending, ``os.remove``, ``os.rename``, ``os.mkdir``, ...) happened while tracing only, so
they are refused with UnsupportedOperationError (JC-T001): without ``fullgraph`` such a call runs
eagerly. So does reading a file object the program did not open itself, or an in-memory one of the
caller's (its position moves per call), changing a ``BytesIO`` of the caller's, or ``getvalue()`` of an
in-memory file the program wrote to in the call; ``getvalue()`` of one it did not is guarded by its value.

Invariants: each replacement returns what the native call returns and raises what it raises; no
guard is added for a call that raised anything but ``OSError`` (the program's error propagates).
"""

from __future__ import annotations

import dataclasses
import genericpath
import io
import os
import weakref
from collections.abc import Callable
from stat import S_ISREG
from typing import Any

from jitcore.errors import UnsupportedOperationError
from jitcore.prologue import Path, Root

__all__ = ["FileSystem"]

# Note [What a file guard compares]
# - ``os.path.exists``/``lexists``/``isfile``/``isdir``/``islink``: the answer (True/False), so a
#   checkpoint rewritten every step does not retrace a program that only tests that it exists;
# - ``os.stat``/``os.lstat`` of a path: every field of the result but the access time (which reading
#   the file changes), or the error's class and errno;
# - a file opened for reading: its contents when it holds at most ``CONTENT_LIMIT`` bytes (read and
#   compared on every call, about as fast as a stat for small files, and exact where a stat's
#   timestamps are too coarse to see a rewrite); a bigger file by its stat signature (size, inode,
#   modification and change times), which misses a same-size rewrite within the timestamps' tick;
# - ``os.listdir``: the names; ``os.scandir``: each entry's name and kind.
# A relative path is checked as given, so it is resolved against the directory each call runs in, as
# the program's own call would be.
CONTENT_LIMIT = 64 * 1024

_WRITING_MODES = frozenset("wax+")
_PATH_TESTS = (genericpath.exists, genericpath.isfile, genericpath.isdir, os.path.lexists, os.path.islink)
_FS_CHANGES = tuple(getattr(os, name) for name in (
    "remove", "unlink", "rename", "replace", "mkdir", "rmdir", "utime", "chmod", "chown", "truncate",
    "symlink", "link", "mkfifo", "open", "write",
) if hasattr(os, name))
_READS = frozenset({"read", "readline", "readlines", "readinto", "read1", "readinto1", "peek"})
# what changes a ``BytesIO`` natively (a ``StringIO``'s ``write`` is recorded as a print: jit/printing.py)
_BYTES_WRITES = frozenset({"write", "writelines", "truncate", "seek"})


def _signature(result: os.stat_result) -> tuple:
    return (result.st_mode, result.st_ino, result.st_dev, result.st_nlink, result.st_uid, result.st_gid,
            result.st_size, result.st_mtime_ns, result.st_ctime_ns)


def _stat(stat: Callable[..., os.stat_result], path: Any) -> tuple:
    try:
        return ("stat", _signature(stat(path)))
    except OSError as err:
        return ("error", type(err), err.errno)


@dataclasses.dataclass(frozen=True, slots=True)
class FileCheck:
    """Repeats one observation of the file system (a prologue ``check`` guard calls it): None while
    it still holds, else what changed."""

    what: str  # how the guard names it: ``os.path.exists('ckpt.pt')``
    observe: Callable[[], Any]
    expected: Any

    def __call__(self) -> str | None:
        try:
            now = self.observe()
        except OSError as err:
            now = ("error", type(err), err.errno)
        return None if now == self.expected else f"{self.what} changed since the call that was traced"


def _read_state(path: Any) -> tuple:
    """A file opened for reading as its guard compares it (Note [What a file guard compares])."""
    stat = _stat(os.stat, path)
    if stat[0] != "stat" or stat[1][6] > CONTENT_LIMIT or not S_ISREG(stat[1][0]):
        return stat
    try:
        with open(path, "rb") as f:
            return ("contents", f.read(CONTENT_LIMIT + 1))
    except OSError as err:
        return ("error", type(err), err.errno)


class FileSystem:
    """One pass's lookasides for file-system calls; ``guard(path, kind, expected)`` is
    ``Provenance.guard``."""

    def __init__(self, guard: Callable[..., None], path_of: Callable[[Any], Any], *,
                 written: Callable[[Any], bool] = lambda _stream: False) -> None:
        self._guard = guard
        self._written = written  # Prints.wrote_to: writes recorded in this pass, replayed after it
        self._path_of = path_of  # Provenance.path_of: where the program reached an object of the caller's
        self._opened: weakref.WeakSet[Any] = weakref.WeakSet()  # file objects the program opened

    def lookasides(self) -> dict[Any, Callable[..., Any]]:
        table: dict[Any, Callable[..., Any]] = {fn: self._path_test(fn) for fn in _PATH_TESTS}
        table.update({fn: _refuse(f"os.{fn.__name__}()", "changes the file system") for fn in _FS_CHANGES})
        table.update({
            io.open: self._open, os.stat: self._stat(os.stat), os.lstat: self._stat(os.lstat),
            os.listdir: self._listdir, os.scandir: self._scandir,
            io.BytesIO.getvalue: self._getvalue(io.BytesIO.getvalue),
            io.StringIO.getvalue: self._getvalue(io.StringIO.getvalue),
        })
        return table

    # Note [The value of an in-memory file of state]
    # ``bio.getvalue()`` of a ``BytesIO``/``StringIO`` of the caller's or of state reads its buffer in C
    # (it moves no position, so it is not refused as ``read`` is): the bytes became a constant of the
    # trace, and a cached call returned the first call's value after the caller wrote to it (a wrong
    # answer). Such a value is guarded as a file's contents are: a check repeats ``getvalue()`` on every
    # call. One the program made in this pass is its own value, not guarded. A ``StringIO``'s ``write`` is
    # recorded as a print and made after the computation, so ``getvalue()`` after one in the same call
    # runs eagerly; a ``BytesIO``'s ``write``/``seek``/``truncate`` happened while tracing only (cached calls
    # lost them): they run eagerly too, as its ``read`` does.
    def _getvalue(self, getvalue: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def getvalue_(owner: Any) -> Any:
            value = getvalue(owner)
            path = self._path_of(owner)
            if path is not None and self._written(owner):
                raise UnsupportedOperationError(
                    f"{type(owner).__name__}.getvalue() of an in-memory file the function wrote to: its "
                    "writes are made after the computation, so it would read the value without them",
                    hints=("read the value outside the jitted function",),
                )
            if path is not None:
                self._check(f"{path.describe()}.getvalue()", lambda: getvalue(owner), value)
            return value
        return getvalue_

    def refuse_foreign_read(self, fn: Any) -> None:
        """``f.read()`` (and the other reads) of a file object the program did not open in this pass, or
        of an in-memory one (``BytesIO``) of the caller's or of state: its position moves on every call,
        which the trace's constants would not."""
        owner = getattr(fn, "__self__", None)
        if not isinstance(owner, io.IOBase) or owner in self._opened or fn.__name__ not in _READS and not (
                type(owner) is io.BytesIO and fn.__name__ in _BYTES_WRITES):
            return
        if isinstance(owner, (io.BytesIO, io.StringIO)) and self._path_of(owner) is None:
            return  # made by the program (``torch.load`` of bytes it read)
        if fn.__name__ not in _READS:  # Note [The value of an in-memory file of state]
            raise UnsupportedOperationError(
                f"{type(owner).__name__}.{fn.__name__}() changes an in-memory file of the caller's or of "
                "state: the change would happen while tracing only",
                hints=("write to the file outside the jitted function",),
            )
        raise UnsupportedOperationError(
            f"{type(owner).__name__}.{fn.__name__}() reads a file object the function did not open: "
            "each call would read on from where the last one stopped",
            hints=("read the data outside the jitted function and pass it in",),
        )

    # --- the lookasides -------------------------------------------------------------------------------
    def _check(self, what: str, observe: Callable[[], Any], expected: Any) -> None:
        check = FileCheck(what, observe, expected)
        self._guard(Path(Root("bound", what, check)).call(), "check", None)

    def _path_test(self, fn: Callable[[Any], bool]) -> Callable[[Any], bool]:
        def test(path: Any) -> bool:
            answer = fn(path)
            if isinstance(path, (str, bytes, os.PathLike)):
                self._check(f"os.path.{fn.__name__}({os.fspath(path)!r})", lambda: fn(path), answer)
            return answer
        return test

    def _stat(self, stat: Callable[..., os.stat_result]) -> Callable[..., os.stat_result]:
        def stat_(path: Any, *, dir_fd: Any = None, follow_symlinks: bool = True) -> os.stat_result:
            if dir_fd is not None or not follow_symlinks or not isinstance(path, (str, bytes, os.PathLike)):
                raise UnsupportedOperationError(
                    f"os.{stat.__name__}() of a file descriptor or relative to a directory descriptor",
                    hints=("stat the file outside the jitted function",),
                )
            what = f"os.{stat.__name__}({os.fspath(path)!r})"
            try:
                result = stat(path)
            except OSError as err:
                self._check(what, lambda: _stat(stat, path), ("error", type(err), err.errno))
                raise
            self._check(what, lambda: _stat(stat, path), ("stat", _signature(result)))
            return result
        return stat_

    def _open(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not isinstance(mode, str) or not _WRITING_MODES.isdisjoint(mode):
            _refuse(f"open({file!r}, {mode!r})", "writes a file")()
        if not isinstance(file, (str, bytes, os.PathLike)):
            _refuse(f"open() of file descriptor {file!r}", "reads a file descriptor whose position moves")()
        state = _read_state(file)
        if state[0] == "stat" and not S_ISREG(state[1][0]):
            _refuse(f"open({file!r})", "reads a device, pipe or directory, which a guard cannot compare")()
        # guarded before opening: a program catching open()'s FileNotFoundError relied on the absence
        self._check(f"the file {os.fspath(file)!r}", lambda: _read_state(file), state)
        handle = open(file, mode, *args, **kwargs)
        self._opened.add(handle)
        return handle

    def _listdir(self, path: Any = ".") -> list:
        if not isinstance(path, (str, bytes, os.PathLike)):
            _refuse("os.listdir() of a file descriptor", "reads a directory by descriptor")()
        names = os.listdir(path)
        self._check(f"os.listdir({os.fspath(path)!r})", lambda: sorted(os.listdir(path)), sorted(names))
        return names

    def _scandir(self, path: Any = ".") -> Any:
        if not isinstance(path, (str, bytes, os.PathLike)):
            _refuse("os.scandir() of a file descriptor", "reads a directory by descriptor")()

        def entries() -> list:
            with os.scandir(path) as it:
                return sorted((e.name, e.is_dir(follow_symlinks=False), e.is_symlink()) for e in it)

        self._check(f"os.scandir({os.fspath(path)!r})", entries, entries())
        return os.scandir(path)


def _refuse(what: str, why: str) -> Callable[..., Any]:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise UnsupportedOperationError(
            f"{what} {why}, which a cached call would not do again",
            hints=("do it outside the jitted function",),
        )
    return refuse
