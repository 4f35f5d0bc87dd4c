"""op_db entries that do not match eager through jitcore.jit, each with the reason.

Data-dependent entries need tensor *values* to decide an output's shape or a Python value while
tracing; jitcore raises DataDependentError for them by design (``fallback="eager"`` runs them eagerly).
"""

DATA_DEPENDENT = "data-dependent output (by design)"

JIT: dict[str, str] = {
    'allclose': DATA_DEPENDENT,
    'argwhere': DATA_DEPENDENT,
    'bincount': DATA_DEPENDENT,
    'combinations': DATA_DEPENDENT,
    'corrcoef': DATA_DEPENDENT,
    'cov': DATA_DEPENDENT,
    'equal': DATA_DEPENDENT,
    'istft': DATA_DEPENDENT,
    'item': DATA_DEPENDENT,
    'linalg.lstsq': DATA_DEPENDENT,
    'linalg.lstsq.grad_oriented': DATA_DEPENDENT,
    'masked_select': DATA_DEPENDENT,
    'narrow': DATA_DEPENDENT,
    'nn.functional.ctc_loss': DATA_DEPENDENT,
    'nn.functional.gaussian_nll_loss': DATA_DEPENDENT,
    'nn.functional.one_hot': DATA_DEPENDENT,
    'nonzero': DATA_DEPENDENT,
    'tensor_split': DATA_DEPENDENT,
    'unique': DATA_DEPENDENT,
    'unique_consecutive': DATA_DEPENDENT,
    "addbmm": "eager addbmm_ resizes a broadcastable [1] input to [5, 10] in place (deprecated); torch's fake "
    "kernel, which computes jitcore's metadata, rejects it",
    "sparse.mm.reduce": "sparse CSR inputs: jitcore traces strided tensors (UnsupportedInputError JC-J001)",
    "sparse.sampled_addmm": "sparse CSR inputs: jitcore traces strided tensors (UnsupportedInputError JC-J001)",
}
