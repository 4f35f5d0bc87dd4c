"""OpInfo entries whose forward + backward through jitcore does not match eager, each with its reason.

Used by test_grad_opinfo.py: a listed entry must still fail (so the list cannot rot). Reads of tensor
values are checked reads (docs/user-guide.md, "Value reads"), but not yet where a composite op reads
values of its own inputs inside torch's decomposition while they require grad (``cov`` checks
``aten.equal``, ``gaussian_nll_loss`` an ``item``): the grad transform replays the op on shadows and
cannot read there. jitcore traces dense tensors only.
"""

from __future__ import annotations

DATA_DEPENDENT = (
    "data-dependent inside a composite op whose inputs require grad: the grad transform's replay "
    "on shadows cannot read values there (DataDependentError)"
)
SPARSE = "sparse CSR inputs: jitcore traces strided (dense) tensors only (UnsupportedInputError, by design)"
NOTHING_TO_COMPARE = (
    "OpInfo's samples hold no tensor that requires grad (mean and size are numbers): the harness "
    "has nothing to differentiate, and an entry with no sample compared fails"
)

KNOWN_FAILURES: dict[str, str] = {
    "combinations": DATA_DEPENDENT,
    "corrcoef": DATA_DEPENDENT,
    "cov": DATA_DEPENDENT,
    "index_fill": DATA_DEPENDENT,
    "index_put": DATA_DEPENDENT,
    "linalg.lstsq": DATA_DEPENDENT,
    "linalg.lstsq.grad_oriented": DATA_DEPENDENT,
    "nn.functional.ctc_loss": DATA_DEPENDENT,
    "nn.functional.gaussian_nll_loss": DATA_DEPENDENT,
    "normal.number_mean": NOTHING_TO_COMPARE,
    "sparse.mm.reduce": SPARSE,
    "sparse.sampled_addmm": SPARSE,
}
