"""What every strategy returns: the module to run, the plain model inside it, and how to skip
gradient synchronisation on the micro-steps of an accumulation window."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from torch import nn

from trainstack_contract.config import TrainConfig
from trainstack_training.distributed import DistContext


@dataclass(frozen=True)
class Parallelized:
    module: nn.Module  # call this in the training loop
    model: nn.Module  # the single-device model inside (parameter counts, FLOPs)
    no_sync: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    shards_optimizer_state: bool = False  # parameters (hence optimizer state) are sharded
    replicated: bool = False  # every rank holds the whole model (DDP): its state is the plain model's

    @property
    def checkpointed(self) -> nn.Module:
        """The module whose state DCP saves and loads. A replica's is the plain model's: the same
        names get_state_dict gives for the DDP wrapper from torch 2.3 on, and torch 2.2's
        set_state_dict loses the wrapper's `module.` prefix on tied weights (GPT's head)."""
        return self.model if self.replicated else self.module


Apply = Callable[[nn.Module, TrainConfig, DistContext], Parallelized]
