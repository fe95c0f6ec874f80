"""What wraps each transformer block before any parallel wrapping: activation checkpointing and
offloading, then torch.compile (torchtitan's order: checkpoint, compile, then shard)."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper, offload_wrapper

from trainstack_contract.config import TrainConfig


def apply_block_wrappers(model: nn.Module, config: TrainConfig) -> None:
    """Checkpointing keeps only each block's input; offloading moves saved activations to CPU;
    compiling fuses each block's kernels.

    Together, the checkpointed inputs are what gets offloaded. The wrappers' name prefixes are
    dropped by torch.distributed.checkpoint's state-dict helpers, so checkpoints stay portable
    between runs with and without these options.
    """
    blocks = getattr(model, "blocks", None)
    if blocks is None or not (config.activation_checkpointing or config.activation_offloading or config.compile):
        return
    for index, block in enumerate(blocks):
        if config.activation_checkpointing:
            block = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False)
        if config.activation_offloading:
            block = offload_wrapper(block)
        if config.compile:  # per block: every block has the same graph, so one compilation serves all
            block = torch.compile(block)
        blocks[index] = block
