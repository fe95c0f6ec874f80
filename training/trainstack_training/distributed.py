"""One distributed bootstrap: every rank-dependent decision lives here.

Three ways a process is started, one context out:
- torchrun (what the SageMaker toolkit runs for torch_distributed and SMP): `RANK`, `WORLD_SIZE`,
  `LOCAL_RANK`, `LOCAL_WORLD_SIZE`; `MASTER_ADDR`/`MASTER_PORT` name its rendezvous store.
- mpirun (the toolkit's MPI launcher, `distribution={"mpi": ...}`, and SMDDP's): Open MPI's
  `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK`,
  `OMPI_COMM_WORLD_LOCAL_SIZE`. The master is `MASTER_ADDR` when the PyTorch toolkit set it, else
  the first host of `SM_HOSTS` (the toolkit's master host); the port `MASTER_PORT`, else 7777.
- one plain process: world size 1, no process group.

Ranks are numbered node by node (torchrun does so; the toolkit's mpirun maps `-map-by slot`), so a
rank's node is `rank // local_world_size`. Each host has its own `/opt/ml/checkpoints`, so one
process per node (local rank 0) acts for the node's directory.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainstack_contract.config import TrainConfig
from trainstack_contract.runtime_requirements import Need, meets
from trainstack_training import sagemaker_libraries, transport

# The process group's own timeout outlasts every limit the watchdog applies (startup_timeout at most,
# or a longer fixed step_timeout) by this much, so the watchdog, which names the stuck ranks and dumps
# their stacks, fires first; the timeout remains the backstop should the watchdog's thread not run.
PROCESS_GROUP_GRACE = timedelta(seconds=60)
TOOLKIT_MASTER_PORT = "7777"  # what sagemaker-pytorch-training exports as MASTER_PORT


@dataclass(frozen=True)
class Launch:
    """This process's place in the job, as its launcher described it."""

    launcher: str  # "torchrun", "mpirun" or "none"
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int


def read_launch(environ: Mapping[str, str] | None = None) -> Launch:
    """torchrun's variables when present (they describe the worker even when torchrun itself was
    started by mpirun), else Open MPI's, else a single process."""
    environ = os.environ if environ is None else environ
    if "RANK" in environ:
        world_size = int(environ.get("WORLD_SIZE", "1"))
        return Launch(
            "torchrun",
            int(environ["RANK"]),
            int(environ.get("LOCAL_RANK", "0")),
            world_size,
            int(environ.get("LOCAL_WORLD_SIZE", str(world_size))),
        )
    if "OMPI_COMM_WORLD_RANK" in environ:
        return Launch(
            "mpirun",
            int(environ["OMPI_COMM_WORLD_RANK"]),
            int(environ["OMPI_COMM_WORLD_LOCAL_RANK"]),
            int(environ["OMPI_COMM_WORLD_SIZE"]),
            int(environ["OMPI_COMM_WORLD_LOCAL_SIZE"]),
        )
    return Launch("none", 0, 0, 1, 1)


def mpi_rendezvous(launch: Launch, environ: Mapping[str, str]) -> dict[str, str]:
    """The torchrun-style variables an mpirun-started rank exports, so that `init_process_group`'s
    env:// and everything else that reads them (SMDDP, SMP) sees one launcher contract."""
    address = environ.get("MASTER_ADDR") or next(iter(json.loads(environ.get("SM_HOSTS", "[]") or "[]")), "")
    if not address:
        if launch.world_size > launch.local_world_size:
            raise RuntimeError("mpirun across hosts needs MASTER_ADDR or SM_HOSTS to find the master host")
        address = "127.0.0.1"  # one host: the master is this one
    return {
        "RANK": str(launch.rank),
        "LOCAL_RANK": str(launch.local_rank),
        "WORLD_SIZE": str(launch.world_size),
        "LOCAL_WORLD_SIZE": str(launch.local_world_size),
        "MASTER_ADDR": address,
        "MASTER_PORT": environ.get("MASTER_PORT", TOOLKIT_MASTER_PORT),
    }


@dataclass(frozen=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str
    local_world_size: int = 1
    host: str = "localhost"  # SageMaker's host name (algo-N) where known; for logs

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_node_main(self) -> bool:
        """The one process per node that acts for the node's own checkpoint directory."""
        return self.local_rank == 0

    @property
    def node_rank(self) -> int:
        return self.rank // self.local_world_size

    @property
    def node_name(self) -> str:
        """How logs name this node: each host logs to its own stream, so say which one this is."""
        return f"node {self.node_rank} ({self.host})"

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    def data_split(self, per_node: bool) -> tuple[int, int]:
        """This rank's index among the ranks that read one data set together, and their number: the
        whole job for a data set every host holds, the node's ranks when each node has its own
        (ShardedByS3Key)."""
        return (self.local_rank, self.local_world_size) if per_node else (self.rank, self.world_size)


def process_group_timeout(config: TrainConfig) -> timedelta:
    return timedelta(seconds=max(config.startup_timeout, config.step_timeout)) + PROCESS_GROUP_GRACE


def init_distributed(config: TrainConfig) -> DistContext:
    """Initialize the process group the strategy needs, pick this rank's device, and on EFA hosts
    make sure NCCL uses EFA between them."""
    launch = read_launch()
    if launch.launcher == "mpirun":
        os.environ.update(mpi_rendezvous(launch, os.environ))
    if torch.cuda.is_available():
        device = torch.device("cuda", launch.local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    if config.strategy == "smddp":
        # The SMDDP module must be imported before init: importing it registers the "smddp" backend.
        sagemaker_libraries.import_smddp()
        backend = "smddp"
    else:
        backend = "nccl" if device.type == "cuda" else "gloo"
    if launch.world_size == 1 and dcp_needs_process_group() and not dist.is_initialized():
        # Under a launcher its variables (and torchrun's own store) say where; a plain process has none.
        alone = {"init_method": f"tcp://127.0.0.1:{_free_port()}", "rank": 0, "world_size": 1}
        dist.init_process_group(
            backend=backend, timeout=process_group_timeout(config), **(alone if launch.launcher == "none" else {})
        )
    elif launch.world_size > 1 and not dist.is_initialized():
        check_efa = transport.check_required(
            config.require_efa_transport, backend, launch.world_size, launch.local_world_size, os.environ
        )
        # Before the process group: NCCL reads its debug settings once, when it first starts.
        init_lines = transport.prepare(os.environ, Path(config.output_dir), launch.rank) if check_efa else None
        dist.init_process_group(backend=backend, timeout=process_group_timeout(config))
        if init_lines:
            # NCCL creates its communicator at the first collective; this barrier is it.
            transport.require_efa(init_lines.read_during(dist.barrier), os.environ)
    if config.strategy == "smp":
        # After the default process group: tsm.init() reads mp_parameters and builds SMP's own groups.
        sagemaker_libraries.import_smp().init()
    return DistContext(
        rank=launch.rank,
        local_rank=launch.local_rank,
        world_size=launch.world_size,
        device=device,
        backend=backend,
        local_world_size=launch.local_world_size,
        host=os.environ.get("SM_CURRENT_HOST") or socket.gethostname(),
    )


DCP_WITHOUT_PROCESS_GROUP = Need("a one-process checkpoint", "DCP runs without a process group from torch 2.3", torch="2.3")


def dcp_needs_process_group() -> bool:
    """torch 2.2's distributed checkpoint gathers keys over the default process group even for one
    process (its `load` ignores `no_dist`); from torch 2.3 it runs without one. A one-process run on
    2.2 therefore gets a one-rank group."""
    return not meets(torch.__version__, DCP_WITHOUT_PROCESS_GROUP)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def seed_step(seed: int, step: int, context: DistContext) -> None:
    """Seed every generator for one optimizer step from (seed, step, rank) rather than saving
    per-rank generator states: a restart repeats the same draws, and a checkpoint does not depend
    on how many ranks wrote it."""
    torch.manual_seed(((seed * 1_000_003 + step) * 65_537 + context.rank) % 2**63)


def all_reduce_mean(value: torch.Tensor, context: DistContext) -> torch.Tensor:
    if context.is_distributed:
        dist.all_reduce(value, op=dist.ReduceOp.AVG if context.backend == "nccl" else dist.ReduceOp.SUM)
        if context.backend != "nccl":  # gloo has no AVG
            value /= context.world_size
    return value


@dataclass(frozen=True)
class Agreed:
    stop: bool  # some rank was asked to stop (SIGTERM)
    save: bool  # a checkpoint is due by wall clock (rank 0's)


class StopVote:
    """Whether any rank was asked to stop (one rank's SIGTERM stops every rank at the same step), and
    whether a checkpoint is due by time, agreed without a blocking collective per step: each step
    starts an all-reduce (MAX) of this rank's flags on a CPU (gloo) group and reads the one started the
    step before, long finished. The GPU stream is never waited on for it. A flag raised during step n
    is therefore acted on at the end of step n + 1: at most two steps, then the checkpoint save."""

    def __init__(self, context: DistContext) -> None:
        self.context = context
        # On GPUs a gloo group of its own (every rank creates it, in the same order): NCCL would tie the
        # flag to the GPU stream. A gloo job's own group serves: its collectives run in issue order.
        self.group = dist.new_group(backend="gloo") if context.is_distributed and context.backend != "gloo" else None
        self.pending: tuple[Any, torch.Tensor] | None = None

    @property
    def lag(self) -> int:
        """How many steps after its flags an answer comes: one across processes, none in one."""
        return 1 if self.context.is_distributed else 0

    def any_rank(self, stop: bool, save: bool = False) -> Agreed:
        """This step's flags go out; the answer is the previous step's, the same on every rank."""
        if not self.context.is_distributed:
            return Agreed(stop, save)
        tensor = torch.tensor([1.0 if stop else 0.0, 1.0 if save else 0.0])
        work = dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        previous, self.pending = self.pending, (work, tensor)
        if previous is None:
            return Agreed(False, False)
        previous[0].wait()
        return Agreed(bool(previous[1][0].item()), bool(previous[1][1].item()))

    def close(self) -> None:
        """Let the last all-reduce finish before the process group goes."""
        if self.pending is not None:
            self.pending[0].wait()
            self.pending = None


def all_gather(value: Any, context: DistContext, group: dist.ProcessGroup | None = None) -> list[Any]:
    """Every rank's (picklable) value, in rank order, on every rank (over `group`, else the default group)."""
    if not context.is_distributed:
        return [value]
    gathered: list[Any] = [None] * context.world_size
    dist.all_gather_object(gathered, value, group=group)
    return gathered


def from_main(value: Any, context: DistContext) -> Any:
    """Rank 0's value on every rank: a decision taken once, so no two ranks can decide differently."""
    if not context.is_distributed:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def barrier(context: DistContext, group: dist.ProcessGroup | None = None) -> None:
    if context.is_distributed:
        dist.barrier(group=group)


def shutdown(context: DistContext) -> None:
    if context.is_distributed and dist.is_initialized():
        dist.destroy_process_group()


# What `hold_until_exit` keeps: never released, so never destroyed before the process ends.
_HELD_UNTIL_EXIT: list[object] = []


def hold_until_exit(holder: object) -> None:
    """Keep `holder` (a DDP module) alive until the process exits: train.py leaves with os._exit, so
    it is never destroyed. DDP's reducer destroys its gloo process group with the GIL held, and that
    destructor joins the group's worker thread; when the worker is at that moment releasing a finished
    collective (the all-gather a failing rank has just returned from), freeing its tensors needs the
    GIL, and both threads wait for each other for good (pytorch/pytorch#56297, still so in torch 2.13:
    py-spy showed ~Reducer -> ~ProcessGroupGloo -> thread::join against runLoop ->
    ~AsyncAllgatherWork -> gil_scoped_acquire). Seen as a host hung after its job had failed: the
    traceback's end freed the model."""
    _HELD_UNTIL_EXIT.append(holder)
