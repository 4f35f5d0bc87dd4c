"""Transforms of traces; each owns its rules. ``grad``: forward and backward traces (docs/autograd.md).

``differentiate`` is the jit's one entry point, the grad stage of a miss: for a traced call whose
inputs require grad it returns the computation that connects the call to torch autograd (None in
its ``GradStage`` otherwise, so the no-grad path is untouched).
"""

from jitcore.transforms.jit_hook import Differentiated, GradStage, StaticSizesNeeded, differentiate

__all__ = ["Differentiated", "GradStage", "StaticSizesNeeded", "differentiate"]
