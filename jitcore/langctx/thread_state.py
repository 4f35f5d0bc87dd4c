"""The calling thread's torch settings: a snapshot that can be put back.

Records of a trace change the thread's settings when they run (``no_grad()``'s
``_set_grad_enabled``, ``torch.set_default_dtype``): the probe runs them on real values and the grad
transform replays them on shadows. Both put the settings back afterwards, also when a record raises
(a replay that stopped inside ``generate``'s ``no_grad`` left grad mode off in the caller's thread).

Invariant: ``ThreadState.take()`` followed by ``restore()`` leaves grad mode, the autocast settings of
each device type, the autocast cache flag and the default dtype as they were at ``take()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ThreadState"]

_AUTOCAST_DEVICES = ("cpu", "cuda")


@dataclass(frozen=True, slots=True)
class ThreadState:
    grad: bool
    autocast: tuple[tuple[str, bool, torch.dtype], ...]
    autocast_cache: bool
    default_dtype: torch.dtype

    @staticmethod
    def take() -> ThreadState:
        return ThreadState(
            torch.is_grad_enabled(),
            tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES),
            torch.is_autocast_cache_enabled(),
            torch.get_default_dtype(),
        )

    def restore(self) -> None:
        torch.set_grad_enabled(self.grad)
        for device, enabled, dtype in self.autocast:
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(self.autocast_cache)
        torch.set_default_dtype(self.default_dtype)
