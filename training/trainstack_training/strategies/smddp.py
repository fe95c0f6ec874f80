"""SageMaker distributed data parallel: the "smddp" process-group backend under plain DDP.

The backend itself is chosen in `distributed.init_distributed`, which imports the SMDDP module
before `init_process_group`. SMDDP cannot be mixed with other process groups, so nothing here
creates one (no SyncBatchNorm, no `new_group`).
"""

from __future__ import annotations

from torch import nn

from trainstack_contract.config import TrainConfig
from trainstack_training.distributed import DistContext
from trainstack_training.strategies import ddp
from trainstack_training.strategies.base import Parallelized


def apply(model: nn.Module, config: TrainConfig, context: DistContext) -> Parallelized:
    if context.backend != "smddp":
        raise RuntimeError(f"strategy 'smddp' needs the smddp process group, not {context.backend!r}")
    return ddp.apply(model, config, context)
