"""OpInfo entries whose forward + backward through jitcore does not match eager, each with its reason.

Used by test_grad_opinfo.py: a listed entry must still fail (so the list cannot rot). Reads of tensor
values are checked reads (docs/user-guide.md, "Value reads"). A composite op that reads values of its
own inputs inside torch's decomposition while they require grad runs natively on the traced tensors,
its aten ops recorded one by one, with their autograd (Note [Composites that read values under grad],
jit/value_reads.py): ``gaussian_nll_loss``, ``cov``, ``corrcoef``, ``istft`` and ``combinations`` (its
``aten.masked_select`` an index by the mask's coordinates) pass that way. An op whose output shape
the values decide and whose outputs carry gradients (``ctc_loss``, ``lstsq``) runs under torch's own
autograd (Note [Value-shaped ops under grad], jit/value_reads.py): values and gradients equal eager's,
with no backward trace. A boolean
``index_put`` whose values require grad writes through the mask's coordinates, and ``index_fill``
with such a value is a ``where`` over the filled positions (Note [Masks whose values carry
gradients], langctx/reads.py). jitcore traces dense tensors only.
"""

from __future__ import annotations

VALUE_SHAPED_UNDER_AUTOGRAD = (
    "values and gradients match eager, but the harness requires a backward trace: the op's output shapes "
    "depend on values and its outputs carry gradients, so the entry runs its trace under torch's own "
    "autograd (Note [Value-shaped ops under grad]), which records none"
)
SPARSE = (
    "sparse CSR inputs run eagerly (JC-J002: jitcore traces strided tensors), so no backward trace is "
    "recorded; the values and gradients are eager's"
)
NOTHING_TO_COMPARE = (
    "OpInfo's samples hold no tensor that requires grad (mean and size are numbers): the harness "
    "has nothing to differentiate, and an entry with no sample compared fails"
)
VIEW_OF_AN_INPUT_LEFT = (
    "values and gradients match eager, but the harness requires a backward trace: a sample returns a view of "
    "its input made by a call that reads a tensor's value or another tensor (narrow's and tensor_split's "
    "tensor arguments, meshgrid), which cannot be made after the autograd Function, so the entry runs pass 1 "
    "under torch's autograd or eagerly (Note [A view left to the Function], transforms/view_outputs.py)"
)

KNOWN_FAILURES: dict[str, str] = {
    "linalg.lstsq": VALUE_SHAPED_UNDER_AUTOGRAD,
    "linalg.lstsq.grad_oriented": VALUE_SHAPED_UNDER_AUTOGRAD,
    "meshgrid.list_of_tensors": VIEW_OF_AN_INPUT_LEFT,
    "narrow": VIEW_OF_AN_INPUT_LEFT,
    "nn.functional.ctc_loss": VALUE_SHAPED_UNDER_AUTOGRAD,
    "normal.number_mean": NOTHING_TO_COMPARE,
    "sparse.mm.reduce": SPARSE,
    "sparse.sampled_addmm": SPARSE,
    "tensor_split": VIEW_OF_AN_INPUT_LEFT,
}

# Entries differentiable in complex64 whose first samples in it do not pass (test_grad_opinfo.py's
# complex64 test), each with its reason.
PHASE_DEPENDENT = (
    "OpInfo's random grad_outputs make the loss depend on the phase of the complex singular vectors: "
    "eager's svd_backward rejects both samples, so nothing is compared (jitted, the backward's "
    "check_close raises too: tests/transforms/test_grad_backward_checks.py)"
)

COMPLEX_KNOWN_FAILURES: dict[str, str] = {
    "linalg.lstsq": VALUE_SHAPED_UNDER_AUTOGRAD,
    "linalg.lstsq.grad_oriented": VALUE_SHAPED_UNDER_AUTOGRAD,
    "meshgrid.list_of_tensors": VIEW_OF_AN_INPUT_LEFT,
    "narrow": VIEW_OF_AN_INPUT_LEFT,
    "pca_lowrank": PHASE_DEPENDENT,
    "sparse.sampled_addmm": SPARSE,
    "svd_lowrank": PHASE_DEPENDENT,
    "tensor_split": VIEW_OF_AN_INPUT_LEFT,
}
