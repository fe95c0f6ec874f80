"""Plain DDP under torchrun: NCCL on GPU, gloo on CPU. Also the base of smddp."""

from __future__ import annotations

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainstack_contract.config import TrainConfig
from trainstack_training.distributed import DistContext, hold_until_exit
from trainstack_training.strategies.base import Parallelized
from trainstack_training.strategies.memory import apply_block_wrappers


def apply(model: nn.Module, config: TrainConfig, context: DistContext) -> Parallelized:
    model.to(context.device)
    apply_block_wrappers(model, config)
    if not context.is_distributed:
        return Parallelized(module=model, model=model)
    wrapped = DistributedDataParallel(
        model,
        device_ids=[context.local_rank] if context.device.type == "cuda" else None,
        bucket_cap_mb=config.bucket_cap_mb,
        gradient_as_bucket_view=config.gradient_as_bucket_view,
        static_graph=config.static_graph,
    )
    hold_until_exit(wrapped)  # its reducer must not destroy the process group under the GIL
    return Parallelized(module=wrapped, model=model, no_sync=wrapped.no_sync, replicated=True)
