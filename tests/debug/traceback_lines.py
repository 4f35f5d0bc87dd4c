"""Helpers for comparing printed tracebacks with eager's.

The suite may wrap ``JittedFunction.__call__`` (tests/conftest.py checks every call for escaped
proxies); its frame is the test suite's, not the user's nor jitcore's, and neither eager nor a user
of jitcore sees it. These helpers drop frames of any ``conftest.py`` before comparing.
"""

from __future__ import annotations

import os
import traceback


def is_suite_frame(filename: str) -> bool:
    return os.path.basename(filename) == "conftest.py"


def printed_lines(exc: BaseException) -> list[str]:
    """``traceback.format_exception(exc)`` as lines, without the entries of the suite's own frames."""
    out: list[str] = []
    skipping = False
    for line in "".join(traceback.format_exception(exc)).splitlines():
        if line.startswith('  File "'):
            skipping = is_suite_frame(line.split('"')[1])
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return out


def frames(exc: BaseException) -> list[tuple[str, int, str]]:
    """(file, line, function) of each traceback entry, without the suite's own frames."""
    entries = traceback.extract_tb(exc.__traceback__)
    return [(f.filename, f.lineno, f.name) for f in entries if not is_suite_frame(f.filename)]
