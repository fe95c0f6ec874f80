"""One module per strategy, all behind `apply(model, config, context) -> Parallelized`."""

from __future__ import annotations

from torch import nn

from trainstack_training.config import TrainConfig
from trainstack_training.distributed import DistContext
from trainstack_training.strategies import ddp, fsdp, smddp, smp
from trainstack_training.strategies.base import Apply, Parallelized

STRATEGIES: dict[str, Apply] = {"ddp": ddp.apply, "smddp": smddp.apply, "smp": smp.apply, "fsdp": fsdp.apply}


def builds_on_meta(config: TrainConfig, context: DistContext) -> bool:
    """Whether this rank builds the model without storage, its shards filled in by `parallelize`
    (open FSDP2 on every rank but 0)."""
    return config.strategy == "fsdp" and fsdp.builds_on_meta(context)


def parallelize(model: nn.Module, config: TrainConfig, context: DistContext) -> Parallelized:
    return STRATEGIES[config.strategy](model, config, context)
