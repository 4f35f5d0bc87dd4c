"""Files the program reads are guarded, calls that change the file system run eagerly
(jitcore/jit/filesystem.py): each test runs the program eagerly and jitted between the same changes
of the file system and compares what they return and leave on disk."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
import torch

import jitcore


def _quiet(jf, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the "runs eagerly" warning of an eager entry
        return jf(*args)


def test_a_file_read_inside_is_read_again_once_it_changes(tmp_path: Path) -> None:
    config = tmp_path / "scale.json"

    def f(x):
        with open(config) as fh:
            scale = json.load(fh)["scale"]
        return x * scale

    jf = jitcore.jit(f)
    x = torch.ones(3)
    for scale in (2.0, 2.0, 3.0, 3.0, 5.0):  # the same size: only the contents tell
        config.write_text(json.dumps({"scale": scale}))
        torch.testing.assert_close(jf(x), f(x))
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (3, 2)
    assert "changed since the call that was traced" in str(jitcore.miss_reasons(jf)[-1])


def test_pathlib_reads_and_a_missing_file_caught_by_the_program(tmp_path: Path) -> None:
    weights = tmp_path / "bias.txt"

    def f(x):
        try:
            bias = float(weights.read_text())
        except FileNotFoundError:
            bias = 0.0
        return x + bias

    jf = jitcore.jit(f)
    x = torch.zeros(2)
    torch.testing.assert_close(jf(x), f(x))  # no file: 0
    torch.testing.assert_close(jf(x), f(x))
    weights.write_text("1.5")  # the absence the program relied on is gone
    torch.testing.assert_close(jf(x), f(x))
    assert jf(x).tolist() == [1.5, 1.5]


def test_path_tests_are_guarded_by_their_answer(tmp_path: Path) -> None:
    flag = tmp_path / "stop"

    def f(x):
        if os.path.exists(flag):
            return x - 1
        if os.path.isdir(tmp_path) and not os.path.isfile(flag):
            return x + 1
        return x

    jf = jitcore.jit(f)
    x = torch.zeros(2)
    torch.testing.assert_close(jf(x), f(x))
    flag.write_text("")
    torch.testing.assert_close(jf(x), f(x))
    assert jf(x).tolist() == [-1.0, -1.0]
    flag.write_text("changed contents")  # exists() answers as before: no retrace
    torch.testing.assert_close(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 2


def test_stat_and_directory_listings_are_guarded(tmp_path: Path) -> None:
    def f(x):
        names = sorted(os.listdir(tmp_path))
        sizes = sum(os.stat(tmp_path / n).st_size for n in names)
        return x * len(names) + sizes + len(list(os.scandir(tmp_path)))

    jf = jitcore.jit(f)
    x = torch.ones(2)
    (tmp_path / "a").write_text("12")
    torch.testing.assert_close(jf(x), f(x))
    torch.testing.assert_close(jf(x), f(x))
    (tmp_path / "b").write_text("123")
    torch.testing.assert_close(jf(x), f(x))
    (tmp_path / "a").write_text("1234567")
    torch.testing.assert_close(jf(x), f(x))
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (3, 1)


@pytest.mark.parametrize("mode", ["w", "a", "x", "r+"])
def test_a_file_written_inside_is_written_on_every_call(tmp_path: Path, mode: str) -> None:
    def f(x, path):
        if mode == "x" and os.path.exists(path):
            os.remove(path)
        if mode == "r+" and not os.path.exists(path):
            Path(path).write_text("0")
        with open(path, mode) as fh:
            fh.write(f"{x.sum().item()}\n")
        return x * 2

    eager_file, jit_file = tmp_path / "eager.log", tmp_path / "jit.log"
    jf = jitcore.jit(f)
    for i in range(3):
        x = torch.full((2,), float(i))
        torch.testing.assert_close(_quiet(jf, x, str(jit_file)), f(x, str(eager_file)))
    assert jit_file.read_text() == eager_file.read_text()
    reason = str(jf.fallback_reason)
    assert "JC-T001" in reason and ("writes a file" in reason or "changes the file system" in reason)


def test_file_system_changes_run_eagerly(tmp_path: Path) -> None:
    def f(x, src, dst):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)
        return x + 1

    jf = jitcore.jit(f)
    for i in range(3):
        src, dst = tmp_path / "new.pt", tmp_path / "ckpt" / "last.pt"
        src.write_text(str(i))
        torch.testing.assert_close(_quiet(jf, torch.ones(2), str(src), str(dst)), torch.full((2,), 2.0))
        assert not src.exists() and dst.read_text() == str(i)  # moved by every call, as eagerly


def test_reading_a_file_object_of_the_callers_runs_eagerly(tmp_path: Path) -> None:
    data = tmp_path / "lines.txt"
    data.write_text("1\n2\n3\n4\n")

    def f(x, fh):
        return x * float(fh.readline())

    jf = jitcore.jit(f)
    with open(data) as e, open(data) as j:
        for _ in range(4):
            torch.testing.assert_close(_quiet(jf, torch.ones(1), j), f(torch.ones(1), e))


def test_torch_load_of_a_changed_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "w.pt"

    def f(x):
        w = torch.load(ckpt)
        return x @ w

    jf = jitcore.jit(f)
    x = torch.randn(2, 3)
    for i in range(3):
        torch.save(torch.full((3, 3), float(i)), ckpt)
        torch.testing.assert_close(_quiet(jf, x), f(x))


def test_in_memory_files_made_inside_are_traced_and_the_callers_are_not() -> None:
    import io

    def f(x, buffer):
        mine = io.BytesIO(b"3.5")
        return x * float(mine.read()) + float(buffer.readline())

    jf = jitcore.jit(f)
    eager_buffer, jit_buffer = io.StringIO("1\n2\n3\n"), io.StringIO("1\n2\n3\n")
    for _ in range(3):  # the caller's buffer reads on: each call runs eagerly
        torch.testing.assert_close(_quiet(jf, torch.ones(2), jit_buffer), f(torch.ones(2), eager_buffer))

    def g(x):
        return x * float(io.StringIO("2.5").read())

    jg = jitcore.jit(g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced
        for _ in range(2):
            torch.testing.assert_close(jg(torch.ones(2)), g(torch.ones(2)))
    assert jitcore.cache_hits(jg) == 1


@pytest.mark.parametrize(("make", "write"), [
    (lambda: __import__("io").BytesIO(b"abc"), lambda b: b.write(b"zzzzzzz")),
    (lambda: __import__("io").StringIO("abc"), lambda s: s.write("zzzzzzz")),
], ids=["BytesIO", "StringIO"])
def test_the_value_of_an_in_memory_file_of_state_is_read_on_every_call(make, write) -> None:
    """``getvalue()`` of the caller's in-memory file: traced, and guarded by its value (Note [The value
    of an in-memory file of state], jitcore/jit/filesystem.py): a cached call after the caller wrote
    to it returned the first call's length before."""
    from jit_helpers import check_calls_around_a_change

    buffer = make()
    check_calls_around_a_change(lambda: len(buffer.getvalue()), lambda: write(buffer))


@pytest.mark.parametrize(("kind", "text"), [("BytesIO", b"a"), ("StringIO", "a")])
def test_an_in_memory_file_of_state_the_program_writes_to_runs_eagerly(kind, text) -> None:
    """A ``BytesIO``'s write happened while tracing only, and ``getvalue()`` after a ``StringIO``'s write
    (recorded, made after the computation) read the value without it: both now run eagerly, every call
    as eager's (Note [The value of an in-memory file of state], jitcore/jit/filesystem.py)."""
    import io

    def make():
        buffer = getattr(io, kind)()
        buffer.write(text * 3)

        def f(x):
            buffer.write(text)
            return x * len(buffer.getvalue())
        return f, buffer

    (f, jit_buffer), (g, eager_buffer) = make(), make()
    jf = jitcore.jit(f)
    for _ in range(4):
        torch.testing.assert_close(_quiet(jf, torch.ones(2)), g(torch.ones(2)))
    assert jit_buffer.getvalue() == eager_buffer.getvalue()
    assert isinstance(jf.fallback_reason, jitcore.errors.UnsupportedOperationError)
