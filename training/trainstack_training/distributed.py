"""One distributed bootstrap: every rank-dependent decision lives here.

Works under torchrun (RANK/WORLD_SIZE/LOCAL_RANK), under the SageMaker toolkit's launchers (which
set the same variables), and as a single plain process (world size 1, no process group needed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from trainstack_training import sagemaker_libraries

# A failed collective can otherwise hang a job until SageMaker's max runtime bills it out.
COLLECTIVE_TIMEOUT = timedelta(minutes=int(os.environ.get("TRAINSTACK_COLLECTIVE_TIMEOUT_MIN", "30")))


@dataclass(frozen=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def init_distributed(strategy: str) -> DistContext:
    """Initialize the process group the strategy needs and pick this rank's device."""
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    if strategy == "smddp":
        # The SMDDP module must be imported before init: importing it registers the "smddp" backend.
        sagemaker_libraries.import_smddp()
        backend = "smddp"
    else:
        backend = "nccl" if device.type == "cuda" else "gloo"
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=COLLECTIVE_TIMEOUT)
    if strategy == "smp":
        # After the default process group: tsm.init() reads mp_parameters and builds SMP's own groups.
        sagemaker_libraries.import_smp().init()
    return DistContext(rank=rank, local_rank=local_rank, world_size=world_size, device=device, backend=backend)


def all_reduce_mean(value: torch.Tensor, context: DistContext) -> torch.Tensor:
    if context.is_distributed:
        dist.all_reduce(value, op=dist.ReduceOp.AVG if context.backend == "nccl" else dist.ReduceOp.SUM)
        if context.backend != "nccl":  # gloo has no AVG
            value /= context.world_size
    return value


def any_rank(flag: bool, context: DistContext) -> bool:
    """True on every rank if it is true on any rank (e.g. one rank received SIGTERM)."""
    if not context.is_distributed:
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device=context.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def barrier(context: DistContext) -> None:
    if context.is_distributed:
        dist.barrier()


def shutdown(context: DistContext) -> None:
    if context.is_distributed and dist.is_initialized():
        dist.destroy_process_group()
