"""Hypothesis-generated small programs agree natively and interpreted."""

from __future__ import annotations

import os
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from jitcore.interpreter import Hooks

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check

_OPS = ["+", "-", "*", "//", "%", "**", "<<", ">>", "&", "|", "^", "/", "<", "<=", "==", "!=", "and", "or"]


@st.composite
def expressions(draw, depth=0):
    if depth > 3 or draw(st.booleans()):
        return draw(st.sampled_from(["a", "b", "c", "1", "2", "-3", "0", "True", "None", "x[0]", "len(x)"]))
    op = draw(st.sampled_from(_OPS))
    left = draw(expressions(depth + 1))
    right = draw(expressions(depth + 1))
    if op == "**":
        right = "2"
    if op in ("<<", ">>"):
        right = "3"
    return f"({left} {op} {right})"


@st.composite
def programs(draw):
    lines = ["def program(a, b, c, x):", "    acc = []"]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["assign", "if", "loop", "try", "comp"]))
        e1, e2 = draw(expressions()), draw(expressions())
        if kind == "assign":
            lines += [f"    a = {e1}", "    acc.append(a)"]
        elif kind == "if":
            lines += [f"    if {e1}:", f"        acc.append({e2})", "    else:", "        acc.append('else')"]
        elif kind == "loop":
            lines += [
                "    for i in range(3):",
                f"        b = {e1}",
                "        if b == 2:",
                "            break",
                "        acc.append(b)",
            ]
        elif kind == "try":
            lines += [
                "    try:",
                f"        acc.append({e1})",
                "    except (ZeroDivisionError, TypeError) as e:",
                "        acc.append(type(e).__name__)",
                "    finally:",
                "        acc.append('f')",
            ]
        else:
            lines += [f"    acc.append([{e1} for a in range(3) if {e2}])"]
    lines.append("    return acc")
    return "\n".join(lines)


@settings(max_examples=60, deadline=None)
@given(programs(), st.integers(-5, 5), st.integers(-5, 5), st.integers(-5, 5))
def test_generated_programs_agree(source, a, b, c):
    namespace: dict = {}
    exec(compile(source, "<generated>", "exec"), namespace)  # noqa: S102 - generated test program
    check(namespace["program"], a, b, c, [a, b])
    # the same program without fused instructions (a hooked run) must agree too
    check(namespace["program"], a, b, c, [a, b], hooks=Hooks(on_instruction=lambda frame, inst: None))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-100, 100), max_size=20))
def test_generators_over_inputs_agree(xs):
    def gen(items):
        for item in items:
            if item % 3 == 0:
                continue
            sent = yield item * 2
            if sent:
                yield sent

    def consume(items):
        g = gen(items)
        out = []
        for v in g:
            out.append(v)
            if v > 50:
                out.append(g.send("sent"))
        return out, sum(x for x in items if x > 0), sorted(items, key=lambda v: (v % 5, v))

    check(consume, xs)
