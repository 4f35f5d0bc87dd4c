"""DTensor over torch's OpInfo database (issue 15): a selection of op_db entries across the families
(pointwise, reductions, views, matmul/linear, indexing, normalization, losses, factories, random ops,
value reads), each entry's first float32 sample as DTensors on a world-size-1 mesh in this process
(``Replicate()`` and ``Shard(0)``), eagerly and jitted, compared by tests/dispatch/dtensor_opinfo.py.
Entries that do not pass are listed with their reason in ``dtensor_opinfo_known_failures.DTENSOR``; a
listed entry must still fail. At world size 2, ``dtensor_opinfo.WORLD_SIZE_2``'s entries are checked in
test_dtensor.py's world-size-2 processes (one spawn for both files). The whole database is swept by hand
at both world sizes; the results are in docs/subclasses.md, "DTensor".
"""

from __future__ import annotations

from typing import Any

import pytest
from dtensor_opinfo import WORLD_SIZE_2, check_dtensor_entry
from dtensor_opinfo_known_failures import DTENSOR
from opinfo_harness import OPS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SELECTION = (
    # pointwise
    "abs", "exp", "log", "sin", "tanh", "sigmoid", "neg", "sqrt", "rsqrt", "erf", "nn.functional.gelu",
    "nn.functional.relu", "nn.functional.silu", "clamp", "floor", "reciprocal", "add", "sub", "mul",
    "div.no_rounding_mode", "pow", "maximum", "minimum", "where", "lerp", "addcmul", "addcdiv", "atan2",
    "fmod", "remainder", "eq", "lt",
    # reductions
    "sum", "mean", "amax", "amin", "max.reduction_with_dim", "argmax", "prod", "std", "var", "norm",
    "linalg.vector_norm", "logsumexp", "cumsum", "all", "any", "softmax", "softmax.with_dtype",
    "log_softmax", "topk", "sort",
    # views and shapes
    "view", "reshape", "permute", "transpose", "t", "flatten", "unsqueeze", "squeeze", "expand", "narrow",
    "select", "split", "chunk", "cat", "stack", "unflatten", "movedim", "repeat", "flip", "roll", "tril",
    "triu", "diagonal", "tensor_split", "clone", "contiguous", "to", "nn.functional.pad.constant",
    "nn.functional.pad.reflect",
    # matmul and linear
    "mm", "bmm", "matmul", "addmm", "baddbmm", "nn.functional.linear", "einsum", "dot", "mv", "outer",
    "addmv", "__rmatmul__", "nn.functional.conv2d", "nn.functional.scaled_dot_product_attention",
    # indexing
    "__getitem__", "index_select", "gather", "scatter_add", "index_add", "index_copy", "index_put",
    "masked_fill", "take_along_dim", "nn.functional.embedding",
    # normalization
    "nn.functional.layer_norm", "nn.functional.group_norm", "nn.functional.batch_norm",
    "nn.functional.rms_norm", "nn.functional.normalize", "native_layer_norm", "nn.functional.instance_norm",
    # losses
    "nn.functional.cross_entropy", "nn.functional.mse_loss", "nn.functional.l1_loss",
    "nn.functional.nll_loss", "nn.functional.binary_cross_entropy", "nn.functional.smooth_l1_loss",
    "nn.functional.kl_div", "nn.functional.huber_loss", "nn.functional.gaussian_nll_loss",
    # factories and random draws
    "zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "empty_like", "nn.functional.dropout",
    "bernoulli", "cauchy",
    # value reads
    "item", "equal",
)


def test_selection_and_known_failures_are_op_db_entries() -> None:
    assert len(set(SELECTION)) == len(SELECTION)
    assert set(SELECTION) <= set(OPS), sorted(set(SELECTION) - set(OPS))
    assert set(WORLD_SIZE_2) <= set(OPS), sorted(set(WORLD_SIZE_2) - set(OPS))
    assert set(DTENSOR) <= set(SELECTION), sorted(set(DTENSOR) - set(SELECTION))


@pytest.mark.parametrize("name", SELECTION)
def test_dtensor_op_matches_eager(mesh: Any, name: str) -> None:
    outcome = check_dtensor_entry(OPS[name], mesh)
    if name in DTENSOR:
        assert outcome.status != "pass", f"{name} passes now: remove it from dtensor_opinfo_known_failures"
    else:
        assert outcome.status == "pass", f"{name}: {outcome.detail}"
