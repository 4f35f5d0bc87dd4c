"""A sweep over view ops: no recorded op reads the wrong elements when the input's layout changes.

Each torch view op (and the composites that decompose into ``view``, ``_unsafe_view``,
``_reshape_alias`` and ``as_strided``) is jitted once and called with a sequence of layouts of the
same shape (contiguous, transposed, sliced with a step, expanded with zero strides, with a storage
offset) and back, with and without ``requires_grad`` (then its aten decomposition is what runs), each
call compared with eager: value, strides, exception, and the gradient of the output's sum. A layout
the trace did not rely on reuses the entry; one it relied on is a miss, never a wrong answer.
"""

from __future__ import annotations

import pytest
import torch
from test_reliability_layout import LAYOUTS, START, check_call

import jitcore

VIEW_OPS = {
    "reshape": lambda x: x.reshape(2, -1),
    "reshape_flat": lambda x: x.reshape(-1),
    "view": lambda x: x.view(-1),
    "view_as": lambda x: x.view_as(x.new_empty(x.shape)),
    "reshape_as": lambda x: x.reshape_as(torch.empty(x.numel())),
    "flatten": lambda x: x.flatten(),
    "unflatten": lambda x: x.flatten().unflatten(0, (x.shape[1], x.shape[0])),
    "ravel": lambda x: x.ravel(),
    "unfold": lambda x: x.unfold(1, 2, 1),
    "diagonal": lambda x: x.diagonal(),
    "diagonal_offset": lambda x: x.diagonal(1, 1, 0),
    "as_strided": lambda x: x.as_strided((2, 2), (1, 2)),
    "as_strided_offset": lambda x: x.as_strided((3,), (1,), 2),
    "expand": lambda x: x[:1].expand(3, -1),
    "expand_as": lambda x: x[:, :1].expand_as(x),
    "t": lambda x: x.t(),
    "transpose_reshape": lambda x: x.transpose(0, 1).reshape(-1),
    "permute_view": lambda x: x.permute(1, 0).contiguous().view(-1),
    "movedim": lambda x: x.movedim(0, 1).reshape(-1),
    "narrow": lambda x: x.narrow(1, 1, 2).reshape(-1),
    "select": lambda x: x.select(0, 1),
    "squeeze_unsqueeze": lambda x: x.unsqueeze(0).squeeze(0).reshape(-1),
    "chunk": lambda x: torch.cat([c.reshape(-1) for c in x.chunk(2, 1)]),
    "split": lambda x: x.split(1, 0)[1].reshape(-1),
    "unbind": lambda x: x.unbind(1)[0].reshape(-1),
    "contiguous": lambda x: x.contiguous(),
    "matmul_3d": lambda x: (x.unsqueeze(0).expand(2, -1, -1) @ x.t()).reshape(-1),
    "einsum": lambda x: torch.einsum("ij,kj->ik", x, x).reshape(-1),
    "swapaxes": lambda x: x.swapaxes(0, 1).flatten(),
    "clone_view": lambda x: x.clone().view(-1),
    "sum_to_size": lambda x: x.expand(2, *x.shape).sum_to_size(x.shape).reshape(-1),
}
ORDER = LAYOUTS + LAYOUTS[::-1]


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("name", sorted(VIEW_OPS))
def test_view_op_across_layouts(name: str, requires_grad: bool) -> None:
    fn = VIEW_OPS[name]

    def program(x, y):
        return fn(x) * 2

    jfn = jitcore.jit(program)
    for i, layout in enumerate(ORDER):
        props = dict(START, shape=(4, 4), layout=layout, requires_grad=requires_grad)
        check_call(program, jfn, props, i, f"{name} on {layout}")
    assert jitcore.cache_misses(jfn) <= len(LAYOUTS) + 2  # at most one entry per layout (and errors)

