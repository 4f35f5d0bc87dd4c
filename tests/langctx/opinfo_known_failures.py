"""OpInfo entries that do not pass the differential suites, each with the real reason.

``TORCH`` is for test_langctx_opinfo_torch.py, ``ATEN`` for test_langctx_opinfo_aten.py. An entry
listed here must still fail (``check_listed``): when a fix makes it pass, the test says so and the
entry is removed.
Entries whose outputs need tensor values raise jitcore's DataDependentError by design and are listed
with the reason ``DATA_DEPENDENT``; they are not counted as passes.
"""

from __future__ import annotations

from typing import Any

DATA_DEPENDENT = "data-dependent output (by design)"

# --- reasons shared by several entries --------------------------------------------------------------
SPARSE = "sparse layouts are not supported: TensorProxy shadows are strided tensors"
INPLACE_CAST = (
    "in-place variant on int64: torch's fake kernel of {m} computes in float and copies back without "
    "eager's check that the result type can be cast to the input's dtype (other in-place kernels, "
    "sin_, div_, sqrt_, do check), so the trace does not raise eager's RuntimeError"
)

# Entries whose outputs (shapes or Python values) depend on tensor values: jitcore raises
# DataDependentError at trace time, at both levels.
_DATA_DEPENDENT_ENTRIES = (
    "allclose",  # returns a Python bool computed from the values
    "equal",  # returns a Python bool computed from the values
    "argwhere",
    "bincount",
    "combinations",  # masked_select inside
    "corrcoef",  # checks its weights with torch.equal
    "cov",  # checks its weights with torch.equal
    "istft",  # checks its window with torch.equal
    "linalg.lstsq",  # output shapes depend on the driver's rank results
    "linalg.lstsq.grad_oriented",
    "masked_select",
    "narrow",  # start given as a tensor
    "nn.functional.ctc_loss",
    "nn.functional.gaussian_nll_loss",  # checks torch.any(var < 0) to raise eagerly
    "nn.functional.one_hot",  # num_classes=-1 means max(input) + 1
    "nonzero",
    "tensor_split",  # indices given as a tensor
    "unique",
    "unique_consecutive",
)

TORCH: dict[str, str] = {
    **dict.fromkeys(_DATA_DEPENDENT_ENTRIES, DATA_DEPENDENT),
    "item": DATA_DEPENDENT,  # aten._local_scalar_dense, reached through the C method descriptor
    "sparse.mm.reduce": SPARSE,
    "sparse.sampled_addmm": SPARSE,
    "ldexp": INPLACE_CAST.format(m="ldexp_"),
    "logit": INPLACE_CAST.format(m="logit_"),
}

ATEN: dict[str, str] = {
    **dict.fromkeys(_DATA_DEPENDENT_ENTRIES, DATA_DEPENDENT),
    "item": DATA_DEPENDENT,  # aten._local_scalar_dense
    "sparse.mm.reduce": SPARSE,
    "sparse.sampled_addmm": SPARSE,
}


def check_listed(name: str, outcome: Any, reason: str | None) -> None:
    """Assert ``outcome`` agrees with the list: unlisted entries pass, listed ones still fail the
    way their reason says (data-dependent ones with DataDependentError)."""
    if reason is None:
        assert outcome.status == "pass", f"{name}: {outcome.status}: {outcome.detail}"
    elif reason == DATA_DEPENDENT:
        assert outcome.status == "data-dependent", (
            f"{name} is listed as data-dependent but its outcome is {outcome.status}: {outcome.detail}"
        )
    else:
        assert outcome.status == "fail", f"{name} now passes: remove it from opinfo_known_failures"
