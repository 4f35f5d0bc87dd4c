"""``njt_op_db`` entries that do not match eager through jitcore.jit (tests/dispatch/test_njt_opinfo.py),
each with the reason. An entry eager itself rejects for a nested jagged tensor is not listed: the
jitted call must raise the same exception, which is a pass."""

FORWARD: dict[str, str] = {
    "nn.functional.embedding": (
        "the sample's weight requires grad, so the cached call runs the entry's autograd Function, whose C "
        "apply reads the layout and sizes of the NJT it returns (prim.layout, aten.sym_size: four "
        "NestedTensor dispatches) to record it in autograd's graph, as an eager NJT op's node does; any "
        "NJT output of an entry under grad does (linear(njt, w) with w requiring grad)"
    ),
}

BACKWARD: dict[str, str] = {}
