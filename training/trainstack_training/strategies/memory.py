"""Activation memory techniques, applied per transformer block before any parallel wrapping."""

from __future__ import annotations

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper, offload_wrapper

from trainstack_training.config import TrainConfig


def apply_activation_memory(model: nn.Module, config: TrainConfig) -> None:
    """Checkpointing keeps only each block's input; offloading moves saved activations to CPU.

    Together, the checkpointed inputs are what gets offloaded. The wrappers' name prefixes are
    dropped by torch.distributed.checkpoint's state-dict helpers, so checkpoints stay portable
    between runs with and without these options.
    """
    blocks = getattr(model, "blocks", None)
    if blocks is None or not (config.activation_checkpointing or config.activation_offloading):
        return
    for index, block in enumerate(blocks):
        if config.activation_checkpointing:
            block = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False)
        if config.activation_offloading:
            block = offload_wrapper(block)
        blocks[index] = block
