"""SageMaker model parallel v2: `tsm.init()` (in the bootstrap), optional `tsm.transform` for
tensor parallelism, then PyTorch FSDP (the FSDP1 class, which SMP extends) with hybrid sharding."""

from __future__ import annotations

import contextlib
from typing import Any

from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from trainstack_contract.config import ConfigError, TrainConfig
from trainstack_training import sagemaker_libraries
from trainstack_training.distributed import DistContext
from trainstack_training.precision import compute_dtype
from trainstack_training.strategies.base import Parallelized
from trainstack_training.strategies.memory import apply_block_wrappers


def check_degrees(parameters: dict, world_size: int) -> tuple[int, int]:
    """Hybrid-shard and tensor-parallel degrees must tile the world; return them."""
    hybrid = int(parameters.get("hybrid_shard_degree", 0) or 0)
    tensor = int(parameters.get("tensor_parallel_degree", 1) or 1)
    for name, degree in (("hybrid_shard_degree", hybrid), ("tensor_parallel_degree", tensor)):
        if degree and world_size % degree:
            raise ConfigError(f"mp_parameters {name} = {degree} does not divide the world size {world_size}")
    if hybrid and tensor > 1 and world_size % (hybrid * tensor):
        raise ConfigError(f"hybrid_shard_degree x tensor_parallel_degree = {hybrid * tensor} does not divide {world_size}")
    return hybrid, tensor


def fsdp_options(config: TrainConfig, context: DistContext, block_types: set[type]) -> dict[str, Any]:
    """FSDP1 arguments for SMP v2: hybrid sharding when hybrid_shard_degree is between 1 and the world."""
    hybrid, _ = check_degrees(config.smp_parameters, context.world_size)
    dtype = compute_dtype(config.precision)
    return {
        "auto_wrap_policy": ModuleWrapPolicy(block_types) if block_types else None,
        "sharding_strategy": ShardingStrategy.HYBRID_SHARD if 1 < hybrid < context.world_size else ShardingStrategy.FULL_SHARD,
        "mixed_precision": MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype),
        "device_id": context.device if context.device.type == "cuda" else None,
        "use_orig_params": True,
    }


def apply(model: nn.Module, config: TrainConfig, context: DistContext) -> Parallelized:
    _, tensor = check_degrees(config.smp_parameters, context.world_size)
    tsm = sagemaker_libraries.import_smp()
    if tensor > 1:  # the config allows it for Hugging Face models only, whose wrapper hands tsm its model
        model.tensor_parallel(tsm.transform)
    apply_block_wrappers(model, config)
    block_types = {type(block) for block in getattr(model, "blocks", [])}
    # GPU only: PyTorch's FSDP1 (which SMP extends) refuses to run without an accelerator.
    wrapped = FullyShardedDataParallel(model, **fsdp_options(config, context, block_types))
    accumulate = contextlib.nullcontext if config.reduce_every_micro_step else wrapped.no_sync
    return Parallelized(module=wrapped, model=model, no_sync=accumulate, shards_optimizer_state=True)
