"""op_db entries that do not match eager through jitcore.jit, each with the reason.

Entries that need tensor *values* while tracing (``nonzero``, ``item``, ``equal``, ``unique``, ...) are
not listed: jitcore reads those values and checks them on every call (docs/user-guide.md, "Value
reads"); with ``fullgraph=True`` they raise DataDependentError instead (tests/jit/test_jit_value_reads.py).
"""

JIT: dict[str, str] = {}

# Failures of the wider selection (jit_opinfo.more_samples: float32's samples after the first three, and
# float64, complex64 and bool), each with its reason.
JIT_MORE: dict[str, str] = {}

# Failures on CUDA only (``JITCORE_OPINFO_DEVICE=cuda``; seen on an NVIDIA H200 with torch 2.11, 2026-12-04,
# docs/executors.md "CUDA"): the fused attention kernels, which have no CPU samples.
_RNG_STATE = ("its third output, the RNG seed and offset a dropout would use, differs from eager's; the "
              "attention output is equal")
JIT_CUDA: dict[str, str] = {
    "torch.ops.aten._flash_attention_forward": _RNG_STATE,
    "torch.ops.aten._efficient_attention_forward": _RNG_STATE,
}
