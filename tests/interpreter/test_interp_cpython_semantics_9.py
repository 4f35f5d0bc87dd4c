"""Semantics found different by the differential probes of issue 14 (2026-12-07, cpy51), checked natively
against ``interpret`` on small programs of their own."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def test_pickle_dump_writes_the_file_once_and_not_at_all_when_refused() -> None:
    """``pickle.dump(obj, file)`` is C's: one ``file.write(bytes)`` at the end, nothing written where the
    pickling is refused part-way, the protocol checked before ``file.write`` is looked up (Note [pickle.dump
    writes the file once]). Interpreted, the Python pickler wrote opcode by opcode: a refused graph left
    116 bytes (protocol 0), 56 (2) or 2 (4) in the file (/tmp/cpy50-probes/pkfile.py), and a counting file
    saw dozens of writes; a str protocol was the Python pickler's "'<' not supported" TypeError."""

    def f() -> list[object]:
        import io
        import pickle

        class Holder:
            def __init__(self, refused: bool) -> None:
                self.a = [1, 2, 3]
                self.f = (lambda: 1) if refused else "text"

        class Counting:
            def __init__(self) -> None:
                self.writes: list[tuple[str, int]] = []

            def write(self, data: object) -> int:
                self.writes.append((type(data).__name__, len(data)))
                return 0

        class LooksUp:
            def __getattr__(self, name: str) -> object:
                out.append(("looked up", name))
                raise AttributeError(name)

        out: list[object] = []
        for protocol in (0, 2, 4, 5):
            for refused in (True, False):
                file, counting = io.BytesIO(), Counting()
                for target in (file, counting):
                    try:
                        out.append(pickle.dump(Holder(refused), target, protocol))
                    except Exception as e:
                        out.append((type(e).__name__, str(e)))
                out.append((protocol, refused, file.getvalue(), counting.writes))
        for args in ((LooksUp(),), (LooksUp(), 9), (None,), (io.BytesIO(), "x")):
            try:
                pickle.dump(Holder(True), *args)
            except Exception as e:
                out.append((type(e).__name__, str(e), e.__context__))
        try:
            pickle.dumps(Holder(False), "x")
        except Exception as e:
            out.append((type(e).__name__, str(e)))
        file = io.BytesIO()
        pickle.dump(obj=Holder(False), file=file, protocol=2)
        out.append(pickle.loads(file.getvalue()).f)
        out.append(pickle.loads(pickle.dumps(obj=Holder(False))).a)
        return out

    check(f)
