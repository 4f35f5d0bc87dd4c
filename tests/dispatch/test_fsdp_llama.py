"""A tiny Hugging Face Llama sharded with ``fully_shard`` (FSDP2: each decoder layer a unit, the model the
root), trained under ``jitcore.jit`` at world size 1 (gloo, in this process), compared with eager.

FSDP's hooks run eagerly and each decoder layer's forward is traced between them (Note [FSDP2: hooks
eager, each unit's forward jitted], jitcore/jit/fsdp_units.py). World size 2 of the same mechanism is
tested on an MLP in tests/dispatch/test_dtensor.py (``fully_shard``).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.distributed as dist
import transformers  # in the test extras: a missing install fails here, it is never skipped
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import jitcore
from jitcore.jit.fsdp_units import jitted_unit


@pytest.fixture(scope="module")
def mesh():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def test_fully_shard_llama_training_steps(mesh) -> None:
    """Three AdamW steps with ``loss.backward()`` inside the jitted step: loss, gradients and parameters
    equal eager's after every step, and each decoder layer's jitted forward is hit on the later steps
    (before, the whole step ran eagerly and no layer was traced)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64)
    base = transformers.LlamaForCausalLM(config)

    def sharded() -> torch.nn.Module:
        model = copy.deepcopy(base)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    def step(m: torch.nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = m(input_ids=tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        return loss

    model, reference = sharded(), sharded()
    opt, reference_opt = (torch.optim.AdamW(m.parameters(), lr=0.01) for m in (model, reference))
    jitted = jitcore.jit(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            tokens = torch.randint(0, 64, (2, 8))
            torch.testing.assert_close(jitted(model, opt, tokens), step(reference, reference_opt, tokens))
            for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
                assert isinstance(p, DTensor), name
                torch.testing.assert_close(p.grad.full_tensor(), q.grad.full_tensor())
                torch.testing.assert_close(p.full_tensor(), q.full_tensor())
    for layer in model.model.layers:
        forward = jitted_unit(layer)
        assert forward is not None and forward.fallback_reason is None
        assert (jitcore.cache_misses(forward), jitcore.cache_hits(forward)) == (1, 2), forward.miss_log
