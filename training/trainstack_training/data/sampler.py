"""Which examples each rank reads at each step, as a pure function of one resumable position.

`position` counts examples consumed by the whole job (not per rank), so a restart with a
different data-parallel degree continues from exactly the same place in the data: the global batch
is re-split over the new ranks instead of each rank's private cursor being lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ShardPlan:
    """How the examples of one global batch are split: micro-step major, then rank."""

    rank: int
    world_size: int
    micro_batch_size: int
    grad_accum: int

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.grad_accum * self.world_size

    def slice_for(self, micro_step: int) -> tuple[int, int]:
        """Offset and length of this rank's micro-batch within the global batch."""
        offset = (micro_step * self.world_size + self.rank) * self.micro_batch_size
        return offset, self.micro_batch_size


class EpochShuffle:
    """A fresh seeded permutation per epoch: deterministic for a seed, no state to save."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self._epoch = -1
        self._order: list[int] = []

    def __call__(self, position: int) -> int:
        epoch, within = divmod(position, self.size)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._order = torch.randperm(self.size, generator=generator).tolist()
            self._epoch = epoch
        return self._order[within]


def micro_batch_indices(plan: ShardPlan, shuffle: EpochShuffle, position: int, micro_step: int) -> list[int]:
    offset, length = plan.slice_for(micro_step)
    return [shuffle(position + offset + i) for i in range(length)]
