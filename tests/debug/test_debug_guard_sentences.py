"""Issue 18.4: every guard kind reads as a sentence (explain, logs), and printed prologues name
their constants after what they check."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from jitcore.debug.explain import explain_text
from jitcore.diagnostics.logs import entry_added
from jitcore.prologue import guards as G
from jitcore.prologue.paths import Path, Root
from jitcore.prologue.shape_guards import ShapeCondition

RAW = re.compile(r"Path\(|Root\(|Step\(|object at 0x")


def all_kinds():
    """Every guard kind of the table (a new kind joins this test, and must have an example below)."""
    return sorted(G.GUARD_KINDS)


def example_guard(kind):
    args = Path(Root("args", "args"))
    x, y = args.index(0), args.index(1)
    expected = {
        "tensor": G.TensorSpec.of(torch.zeros(2, 3), with_strides=True),
        "type": torch.Tensor,
        "len": 2,
        "keys": ("a", "b"),
        "value": 3,
        "contents": (1, 2),
        "identity": torch.nn.Linear(2, 2),
        "absent": "name",
        "hasattr": ("weight", True),
        "alias": y,
        "distinct": (x, y),
        "flatten": (TwoTensor, ("a", "b"), None),
        "check": None,
        "storages": ((x, y), (0, 0)),
        "shape": ShapeCondition("{0}.size()[0] == {1}.size()[0]", (x, y)),
        "members": frozenset({2, 5}),
        "member": ("gelu", False),
        "predicate": G.Predicate(lambda a, b: a % b == 0, (x, y), True, "((args[0] % args[1]) == 0)"),
    }
    assert kind in expected, f"guard kind {kind} has no example here"
    return G.Guard(x, kind, expected[kind])


@pytest.mark.parametrize("kind", all_kinds())
def test_every_guard_kind_has_a_sentence(kind):
    sentence = example_guard(kind).describe()
    assert "args[0]" in sentence and not RAW.search(sentence), sentence
    assert not sentence.endswith(f"passes the {kind} check"), sentence  # not the generic fallback
    assert "\n" not in sentence


def test_guard_kinds_are_a_table():
    """The kinds are the table's and the Literal's: nothing checks a kind the table does not hold."""
    import typing

    assert set(G.GUARD_KINDS) == set(typing.get_args(G.GuardKindName))
    with pytest.raises(AssertionError, match="unknown guard kind"):
        G.Guard(Path(Root("args", "args")), "no such kind", 3)


def test_predicate_guard_checks_renders_and_explains_alike():
    """A branch on dynamic numbers (Note [Predicate guards]): the check, the prologue's expression and
    the sentence agree; a recomputation that raises is a failure, not an error."""
    guard = example_guard("predicate")
    assert guard.failure(None, (6, 3)) is None
    assert "to be true" in guard.failure(None, (7, 3))
    assert guard.failure(None, (7, 0)) is not None  # 7 % 0 raises: the call is traced again
    bound: dict[str, object] = {}

    def bind(value):
        bound[f"c{len(bound)}"] = value
        return f"c{len(bound) - 1}"

    expression = guard.render_failure("v", bind, ("a", "b"))
    assert eval(expression, dict(bound), {"a": 6, "b": 3}) is False  # noqa: S307 - the generated check
    assert eval(expression, dict(bound), {"a": 7, "b": 0}) is True  # noqa: S307
    assert guard.describe() == "((args[0] % args[1]) == 0) is true"


def test_distinct_guard_of_a_subclass_input_reads_as_words():
    """The reproduction: ``args[0].a: distinct (Path(root=Root(kind='args', ...`` in explain."""
    jf = jitcore.jit(lambda x: x * 2)
    jf(TwoTensor(torch.rand(3), torch.rand(3)))
    text = explain_text(jf)
    assert not RAW.search(text), text
    assert "args[0].a, args[0].b are 2 different objects" in text


def test_explain_of_a_transformer_layer_is_one_line_per_guard():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0).eval()
    jf = jitcore.jit(layer)
    jf(torch.randn(4, 2, 16))
    text = explain_text(jf)
    assert not RAW.search(text)
    (entry,) = jf.entries
    checks = text.split("accepts a call when\n", 1)[1].split("\n  computation inputs:", 1)[0].splitlines()
    assert len(checks) == len(entry.prologue.guards) + len(entry.prologue.state)
    assert checks == [f"  - {line}" for line in entry.prologue.sentences()]
    prologue = str(jitcore.last_prologue_traces(jf)[-1])
    assert not re.search(r"__c\d+\b", prologue), "constants must be named after what they check"
    assert re.search(r"if v\d+ is not __is_\w+: return None", prologue)  # identity checks name their path
    assert "is not __float32" in prologue  # a dtype by its name


def test_logs_use_the_same_sentences(caplog):
    jf = jitcore.jit(lambda x: x * 2)
    jf(TwoTensor(torch.rand(3), torch.rand(3)))
    with caplog.at_level(logging.INFO, logger="jitcore.guards"):
        entry_added(jf, jf.entries[0], [])
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "jitcore.guards")
    assert all(line in logged for line in jf.entries[0].prologue.sentences())
    assert not RAW.search(logged)


def test_named_constants_still_compile_and_check():
    """The named constants are the prologue's bindings: the compiled fast path uses them too."""
    jf = jitcore.jit(lambda x, d: x * d["k"])
    x = torch.rand(3)
    assert torch.equal(jf(x, {"k": 2.0}), x * 2.0)
    assert torch.equal(jf(x.double(), {"k": 2.0}), x.double() * 2.0)  # another dtype: a miss, retraced
    assert jf.misses == 2
    text = str(jitcore.last_prologue_traces(jf)[-1])
    assert not re.search(r"__c\d+\b", text) and "__float64" in text


def test_miss_messages_quote_the_same_sentence():
    jf = jitcore.jit(lambda x: x * 2)
    jf(torch.rand(4, 8))
    jf(torch.rand(2, 8))
    (reason,) = jitcore.miss_reasons(jf)[-1]
    first = next(e for e in jf.entries if e.number == 1)
    (guard,) = [g for g in first.prologue.guards if g.kind == "tensor"]
    assert str(reason) == (
        "cache entry 1: args[0].shape[0]: expected 4, got 2 "
        "(the check: args[0] is a Tensor of shape (4, 8), torch.float32, on cpu, requires_grad=False)"
    )
    assert reason.check == guard.describe() and reason.check in explain_text(jf)


def test_a_keys_miss_names_the_keys_added_and_removed():
    """A module's ``__dict__`` has dozens of keys: the sentence cuts both lists short, so a miss says
    which keys came and went (here an attribute a library sets on the first call, as transformers'
    `_output_capturing_hooks_installed`)."""
    state = {f"key_{i:02d}": i for i in range(40)}
    jf = jitcore.jit(lambda x, d: x * len(d))
    x = torch.rand(3)
    jf(x, state)
    state["installed_late"] = True
    del state["key_03"]
    assert torch.equal(jf(x, state), x * len(state))
    (reason,) = jitcore.miss_reasons(jf)[-1]
    assert "(added ['installed_late']; removed ['key_03'])" in str(reason), str(reason)
    state["key_03"] = 3
    del state["installed_late"]
    jf(x, dict(reversed(list(state.items()))))
    assert "(the same keys in another order)" in str(jitcore.miss_reasons(jf)[-1][0])
