"""Dynamic loss scaling for mixed precision (MXNet AMP / PyTorch GradScaler behaviour).

The loss gradient is seeded with ``scale`` so small fp16 gradients do not flush to zero. After each step the
trainer reports whether every gradient was finite: an overflow skips the step and lowers the scale; after
``growth_interval`` clean steps in a row the scale rises again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class DynamicLossScaler:
    scale: float = 2.0**15
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    min_scale: float = 2.0**-14
    max_scale: float = 2.0**24
    #: Clean steps since the last change.
    good_steps: int = 0
    #: Steps skipped because of overflow, in total.
    skipped: int = 0

    def update(self, finite: bool) -> bool:
        """Record one step's overflow check; True when the step should be applied."""
        if not finite:
            self.scale = max(self.scale * self.backoff_factor, self.min_scale)
            self.good_steps = 0
            self.skipped += 1
            return False
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale = min(self.scale * self.growth_factor, self.max_scale)
            self.good_steps = 0
        return True

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> DynamicLossScaler:
        return cls(**state)
