"""jit/code_kinds.py's predicates: ``is_library_file`` remembered per name (Note [Library files
remembered]) answers as the prefix rule does, before and after its table fills."""

from __future__ import annotations

import json
import os

import torch

import jitcore
from jitcore.jit import code_kinds
from jitcore.jit.code_kinds import STDLIB_DIR, TORCH_DIR, is_library_file

_NAMES = (
    torch.__file__, os.path.join(TORCH_DIR, "utils", "_pytree.py"), json.__file__,
    os.path.join(STDLIB_DIR, "collections", "__init__.py"), jitcore.__file__, "<frozen abc>",
    __file__, "<string>", "<jitcore-prologue-0123>", "/home/user/model.py", "",
)


def _by_prefix(name: str) -> bool:
    return name.startswith(code_kinds._LIBRARY_DIRS) or name.startswith("<frozen ")


def test_library_files_answer_as_the_prefix_rule() -> None:
    expected = [_by_prefix(n) for n in _NAMES]
    assert expected[:6] == [True] * 6 and expected[6:] == [False] * 5
    assert [is_library_file(n) for n in _NAMES] == expected
    assert [is_library_file(n) for n in _NAMES] == expected  # asked again: from the table


def test_the_table_of_library_files_stays_bounded() -> None:
    for i in range(code_kinds._LIBRARY_FILES_MAX + 10):
        is_library_file(f"<jitcore-prologue-{i}>")
    assert len(code_kinds._LIBRARY_FILES) <= code_kinds._LIBRARY_FILES_MAX
    assert [is_library_file(n) for n in _NAMES] == [_by_prefix(n) for n in _NAMES]
