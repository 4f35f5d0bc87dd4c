"""op_db entries that do not match eager through the inductor executor, each with the reason (an
entry whose region inductor cannot compile is not here: it runs on torch and passes; the log says
why). ``INDUCTOR``: forward values (test_op_through_inductor_matches_eager); ``INDUCTOR_GRAD``:
values and gradients (test_op_gradients_through_inductor_match_eager); ``INDUCTOR_SYMBOLIC``: forward
values with every size symbolic."""

INDUCTOR: dict[str, str] = {
    "torch.ops.aten._efficient_attention_forward": "no CPU dtype (a CUDA-only kernel): nothing to compare",
}

INDUCTOR_GRAD: dict[str, str] = {}

# every size symbolic (dynamic=True): test_op_with_symbolic_sizes_through_inductor_matches_eager
INDUCTOR_SYMBOLIC: dict[str, str] = {
    "torch.ops.aten._efficient_attention_forward": "no CPU dtype (a CUDA-only kernel): nothing to compare",
}
