"""OpInfo entries whose forward + backward through jitcore does not match eager, each with its reason.

Used by test_grad_opinfo.py: a listed entry must still fail (so the list cannot rot). Entries whose
outputs depend on tensor values raise jitcore's DataDependentError while tracing (by design, with or
without grad); jitcore traces dense tensors only.
"""

from __future__ import annotations

DATA_DEPENDENT = "data-dependent: the forward needs tensor values while tracing (DataDependentError, by design)"
SPARSE = "sparse CSR inputs: jitcore traces strided (dense) tensors only (UnsupportedInputError, by design)"

KNOWN_FAILURES: dict[str, str] = {
    "combinations": DATA_DEPENDENT,
    "corrcoef": DATA_DEPENDENT,
    "cov": DATA_DEPENDENT,
    "index_fill": DATA_DEPENDENT,
    "index_put": DATA_DEPENDENT,
    "linalg.lstsq": DATA_DEPENDENT,
    "linalg.lstsq.grad_oriented": DATA_DEPENDENT,
    "masked_select": DATA_DEPENDENT,
    "narrow": DATA_DEPENDENT,
    "nn.functional.ctc_loss": DATA_DEPENDENT,
    "nn.functional.gaussian_nll_loss": DATA_DEPENDENT,
    "tensor_split": DATA_DEPENDENT,
    "sparse.mm.reduce": SPARSE,
    "sparse.sampled_addmm": SPARSE,
}
