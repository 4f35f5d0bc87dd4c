"""``njt_op_db`` entries that do not match eager through jitcore.jit (tests/dispatch/test_njt_opinfo.py),
each with the reason. An entry eager itself rejects for a nested jagged tensor is not listed: the
jitted call must raise the same exception, which is a pass."""

FORWARD: dict[str, str] = {
    "nn.functional.embedding": (
        "a cached call asks the NJT of indices its layout and sizes (prim.layout, aten.sym_size: four "
        "NestedTensor dispatches) in the autograd Function's apply, which is given the NJT although no "
        "gradient flows to it (integer indices; Note [Subclass inputs the autograd Function is given])"
    ),
}

BACKWARD: dict[str, str] = {
    "index_put": (
        "eager's backward raises (the gradient of ``values().sum()`` is an expanded NJT, and index_put's "
        "backward refuses a non-contiguous one); jitcore records the backward for a contiguous tangent "
        "(jitcore/transforms/tangents.py, flatten_tangent) and computes the gradient"
    ),
}
