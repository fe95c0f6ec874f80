"""What every strategy returns: the module to run, the plain model inside it, and how to skip
gradient synchronisation on the micro-steps of an accumulation window."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from torch import nn

from trainstack_training.config import TrainConfig
from trainstack_training.distributed import DistContext


@dataclass(frozen=True)
class Parallelized:
    module: nn.Module  # call this in the training loop
    model: nn.Module  # the single-device model inside (parameter counts, FLOPs)
    no_sync: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    shards_optimizer_state: bool = False  # parameters (hence optimizer state) are sharded


Apply = Callable[[nn.Module, TrainConfig, DistContext], Parallelized]
