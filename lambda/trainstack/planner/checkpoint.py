"""What one checkpoint costs the host that writes most of it: that host's share of the checkpoint,
how long the instance's checkpoint storage takes to write it, and whether a save on SIGTERM can
finish before SageMaker kills the job.

Where /opt/ml/checkpoints lives (ResourceConfig.VolumeSizeInGB,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ResourceConfig.html): on an instance
with NVMe SSD instance storage SageMaker provisions no EBS volume and puts the checkpoint path on the
instance storage; on any other instance it is an EBS General Purpose SSD (gp2) volume of the job's
VolumeSizeInGB. AWS documents gp2's throughput but publishes no write bandwidth for instance
storage, so on NVMe the write time is not known in advance (the built-in script logs how long each
of its saves takes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainstack.planner.memory import GIB, checkpoint_bytes
from trainstack.planner.parallelism import Layout
from trainstack.planner.workload import Workload
from trainstack_contract.sigterm import SIGTERM_GRACE_SECONDS  # the grace's one home, with its source

MIB = 1024**2
GB = 1000**3

# gp2 throughput by volume size (https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html#gp2-performance):
# 170 GiB and smaller deliver at most 128 MiB/s; larger than 170 GiB and smaller than 334 GiB burst to
# 250 MiB/s only while burst credits last, so the plan counts 128 MiB/s there; 334 GiB and larger
# deliver 250 MiB/s. A small volume whose I/O credits are spent (data read onto the same volume spends
# them too) writes slower still, so on small volumes the figure is the best case.
GP2_THROUGHPUT = 128 * MIB
GP2_LARGE_VOLUME_THROUGHPUT = 250 * MIB
GP2_LARGE_VOLUME_GIB = 334
LARGE_VOLUME_SIZE_GB = math.ceil(GP2_LARGE_VOLUME_GIB * GIB / GB)  # the smallest VolumeSizeInGB in that band

NVME_WRITE_TIME_UNKNOWN = (
    "local NVMe instance storage: AWS publishes no write bandwidth for it, so the time is not known in advance "
    "(the built-in script logs how long each save takes)"
)


@dataclass(frozen=True)
class CheckpointWrite:
    """One checkpoint as the busiest host writes it to its own checkpoint storage."""

    bytes_per_host: int
    volume_size_gb: int | None  # the gp2 volume's VolumeSizeInGB; None on local NVMe
    throughput: int | None  # bytes per second; None where no source gives it (local NVMe)

    @property
    def seconds(self) -> float | None:
        return None if self.throughput is None else self.bytes_per_host / self.throughput

    @property
    def exceeds_sigterm_grace(self) -> bool:
        return self.seconds is not None and self.seconds > SIGTERM_GRACE_SECONDS

    @property
    def warning(self) -> str | None:
        if not self.exceeds_sigterm_grace:
            return None
        warning = (
            f"a checkpoint takes about {self.seconds:,.0f} s to write, longer than SageMaker's {SIGTERM_GRACE_SECONDS} s "
            "between SIGTERM and SIGKILL: a stop or spot reclaim relies on the last completed checkpoint"
        )
        if self.throughput == GP2_THROUGHPUT:
            warning += f" (volume_size_gb: {LARGE_VOLUME_SIZE_GB} or more writes at {GP2_LARGE_VOLUME_THROUGHPUT // MIB} MiB/s)"
        return warning


def checkpoint_write(workload: Workload, layout: Layout, volume_size_gb: int) -> CheckpointWrite:
    """The busiest host's share of one checkpoint and its write time on the layout's instance, whose
    checkpoint storage is local NVMe or a gp2 volume of the spec's `volume_size_gb`."""
    share = checkpoint_bytes_per_host(workload, layout)
    if layout.instance.local_nvme:
        return CheckpointWrite(share, None, None)
    return CheckpointWrite(share, volume_size_gb, gp2_throughput(volume_size_gb))


def gp2_throughput(volume_size_gb: int) -> int:
    """What a gp2 volume of this VolumeSizeInGB sustains, in bytes per second (see GP2_THROUGHPUT).
    The field counts GB by its name and gp2's bands are in GiB: converting can only place a volume
    in the slower band, never the faster one."""
    return GP2_LARGE_VOLUME_THROUGHPUT if volume_size_gb >= LARGE_VOLUME_SIZE_GB else GP2_THROUGHPUT


def checkpoint_bytes_per_host(workload: Workload, layout: Layout) -> int:
    """The most one host writes of one checkpoint: each host writes its own ranks' files. Sharded
    state (FSDP2, SMP) is split across the `shard` x `tensor` ranks of a shard group and DCP writes
    each shard once, whichever replica writes it; the plan assumes the worst placement, where one
    shard group's hosts write every shard. Replicated state (DDP, SMDDP) is counted whole on one
    host: DCP writes a replicated tensor once, from rank 0 in torch versions whose deduplication
    keeps the first copy (later ones spread the copies over the ranks), and ZeRO-1's optimizer state
    is consolidated on rank 0 and saved there."""
    total = checkpoint_bytes(workload)
    if not layout.shards_parameters:
        return total
    hosts_per_shard_group = max(1, layout.shard * layout.tensor // layout.gpus_per_node)
    return total // hosts_per_shard_group
