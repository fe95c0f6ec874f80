"""One module per strategy, all behind `apply(model, config, context) -> Parallelized`."""

from __future__ import annotations

from torch import nn

from trainstack_training.config import TrainConfig
from trainstack_training.distributed import DistContext
from trainstack_training.strategies import ddp, fsdp, smddp, smp
from trainstack_training.strategies.base import Apply, Parallelized

STRATEGIES: dict[str, Apply] = {"ddp": ddp.apply, "smddp": smddp.apply, "smp": smp.apply, "fsdp": fsdp.apply}


def parallelize(model: nn.Module, config: TrainConfig, context: DistContext) -> Parallelized:
    return STRATEGIES[config.strategy](model, config, context)
