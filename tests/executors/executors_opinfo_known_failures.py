"""op_db entries that do not match eager through the inductor executor, each with the reason (an
entry whose region inductor cannot compile is not here: it runs on torch and passes; the log says
why). ``INDUCTOR``: forward values (test_op_through_inductor_matches_eager); ``INDUCTOR_GRAD``:
values and gradients (test_op_gradients_through_inductor_match_eager); ``INDUCTOR_SYMBOLIC``: forward
values with every size symbolic."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transforms"))

from test_grad_known_failures import KNOWN_FAILURES as GRAD_KNOWN_FAILURES  # noqa: E402

# the full forward sweep (JITCORE_INDUCTOR_SWEEP=1, ops44: 640 of 643 pass) fails only these, which
# declare no CPU dtype, so the harness has no sample to compare
_NO_CPU_DTYPE = {
    "torch.ops.aten._efficient_attention_forward": "no CPU dtype (a CUDA-only kernel): nothing to compare",
    "torch.ops.aten._flash_attention_forward": "no CPU dtype (a CUDA-only kernel): nothing to compare",
    "nn.functional.batch_norm.without_cudnn": "no CPU dtype (the entry's variant is CUDA-only): nothing to "
                                              "compare",
}
INDUCTOR: dict[str, str] = dict(_NO_CPU_DTYPE)

# the grad harness's own known failures fail through every executor for the reason listed there
# (ctc_loss, lstsq: no backward trace is recorded; sparse inputs run eagerly): the full sweep
# (JITCORE_INDUCTOR_SWEEP=1) reported ctc_loss and sparse.mm.reduce unlisted
INDUCTOR_GRAD: dict[str, str] = dict(GRAD_KNOWN_FAILURES)

# every size symbolic (dynamic=True): test_op_with_symbolic_sizes_through_inductor_matches_eager
INDUCTOR_SYMBOLIC: dict[str, str] = dict(_NO_CPU_DTYPE)
