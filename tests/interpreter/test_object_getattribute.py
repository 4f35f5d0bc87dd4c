"""``object.__getattribute__`` called from a Python ``__getattribute__`` hook (``super().__getattribute__
(name)``, as transformers' ``PreTrainedConfig`` does) runs the property or descriptor it finds on the
interpreter (jitcore/interpreter/attributes.py, ``object_getattribute``). Natively, that property's code
ran from C, which the jit's watch of C calls (jitcore/jit/native_python.py) refuses: every Hugging Face
model ran eagerly under ``jitcore.jit`` (JC-T001 naming ``PreTrainedConfig.output_attentions``)."""

from __future__ import annotations

import torch

import jitcore
from jitcore.interpreter import interpret


class Config:
    """A hook that renames keys, then asks ``object.__getattribute__`` (as transformers' configs do)."""

    aliases = {"width": "hidden"}

    def __init__(self, hidden: int, scale: float) -> None:
        self.hidden = hidden
        self.scale = scale

    def __getattribute__(self, key: str):
        if key != "aliases" and key in super().__getattribute__("aliases"):
            key = super().__getattribute__("aliases")[key]
        return super().__getattribute__(key)

    @property
    def doubled(self) -> float:
        return self.scale * 2


def program(x: torch.Tensor, config: Config) -> torch.Tensor:
    return x[..., : config.width] * config.doubled + object.__getattribute__(config, "scale")


def test_interpreted_as_eager():
    config = Config(3, 0.5)
    x = torch.rand(2, 4)
    assert torch.equal(interpret(program)(x, config), program(x, config))


def test_a_config_read_through_super_getattribute_is_traced_and_guarded():
    jitted = jitcore.jit(program)
    config = Config(3, 0.5)
    for hidden, scale in [(3, 0.5), (3, 0.5), (2, 0.5), (3, 1.5), (3, 1.5)]:
        config.hidden, config.scale = hidden, scale
        x = torch.rand(2, 4)
        torch.testing.assert_close(jitted(x, config), program(x, config))
    assert jitted.fallback_reason is None
    assert jitcore.cache_misses(jitted) == 3  # one entry per (hidden, scale) seen, as guarded values


def test_the_slot_reached_through_a_method_wrapper_errors_as_eagerly():
    config = Config(3, 0.5)

    def missing(c):
        return super(Config, c).__getattribute__("nothing")

    try:
        missing(config)
    except AttributeError as exc:
        expected = str(exc)
    try:
        interpret(missing)(config)
    except AttributeError as exc:
        assert str(exc) == expected
    else:
        raise AssertionError("expected AttributeError")
