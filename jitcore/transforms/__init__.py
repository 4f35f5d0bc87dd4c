"""Transforms of traces; each owns its rules. ``grad``: forward and backward traces (docs/autograd.md).

``differentiate`` is the jit's one entry point: for a traced call whose inputs require grad it
returns the computation that connects the call to torch autograd (None otherwise, so the no-grad
path is untouched).
"""

from jitcore.transforms.jit_hook import differentiate

__all__ = ["differentiate"]
