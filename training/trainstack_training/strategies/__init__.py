"""One module per strategy, all behind `apply(model, config, context) -> Parallelized`.

A strategy's module is imported only when a job chooses it: each needs its own part of torch
(FSDP2's `fully_shard` exists from torch 2.4, FSDP1's hybrid sharding for SMP), and a DDP job must
start on an image whose torch lacks what another strategy imports.
"""

from __future__ import annotations

import importlib

from torch import nn

from trainstack_contract.config import TrainConfig
from trainstack_training.distributed import DistContext
from trainstack_training.strategies.base import Apply, Parallelized


def strategy(name: str) -> Apply:
    """The chosen strategy's `apply`, its module imported now."""
    return importlib.import_module(f"trainstack_training.strategies.{name}").apply


def builds_on_meta(config: TrainConfig, context: DistContext) -> bool:
    """Whether this rank builds the model without storage, its shards filled in by `parallelize`
    (open FSDP2 on every rank but 0)."""
    if config.strategy != "fsdp":
        return False
    from trainstack_training.strategies import fsdp

    return fsdp.builds_on_meta(context)


def parallelize(model: nn.Module, config: TrainConfig, context: DistContext) -> Parallelized:
    return strategy(config.strategy)(model, config, context)
