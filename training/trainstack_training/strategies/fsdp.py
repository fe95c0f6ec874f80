"""Open FSDP2: `fully_shard` each transformer block, then the root."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from trainstack_training.config import TrainConfig
from trainstack_training.distributed import DistContext
from trainstack_training.precision import compute_dtype
from trainstack_training.strategies.base import Parallelized
from trainstack_training.strategies.memory import apply_block_wrappers


def apply(model: nn.Module, config: TrainConfig, context: DistContext) -> Parallelized:
    if not config.cpu_offload:
        model.to(context.device)
    apply_block_wrappers(model, config)
    dtype = compute_dtype(config.precision)
    options = {
        # Parameters compute in the run's precision; gradients reduce in fp32 for stable sums.
        "mp_policy": MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32),
        "reshard_after_forward": config.reshard_after_forward,
    }
    if config.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy()
    for block in getattr(model, "blocks", []):
        fully_shard(block, **options)
    fully_shard(model, **options)

    def no_sync():
        return _GradientSyncPaused(model)

    accumulate = contextlib.nullcontext if config.reduce_every_micro_step else no_sync
    return Parallelized(module=model, model=model, no_sync=accumulate, shards_optimizer_state=True)


class _GradientSyncPaused:
    """FSDP2's equivalent of DDP's no_sync(): accumulate unsharded gradients locally."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __enter__(self) -> None:
        self.model.set_requires_gradient_sync(False)

    def __exit__(self, *exc: object) -> None:
        self.model.set_requires_gradient_sync(True)
