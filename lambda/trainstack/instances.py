"""What trainstack knows about SageMaker training instance types (shared/reference §3, §4).

A type missing here is refused by validation rather than guessed at: a wrong guess about GPUs,
EFA or local NVMe is exactly what fails after the cluster is billed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    name: str
    accelerators: int  # GPUs or Neuron devices; 0 for CPU types
    accelerator_memory_gib: int  # per accelerator
    efa: bool = False
    local_nvme: bool = False  # VolumeKmsKeyId is rejected for these
    smddp: bool = False  # SMDDP's supported instance types
    toolkit_sets_efa: bool = False  # the container toolkit exports FI_PROVIDER=efa by itself
    toolkit_sets_rdma: bool = False  # ... and FI_EFA_USE_DEVICE_RDMA=1 / RDMAV_FORK_SAFE=1
    neuron: bool = False


def _gpu(name: str, gpus: int, memory: int, **facts: bool) -> InstanceType:
    return InstanceType(name, gpus, memory, **facts)


CATALOG: dict[str, InstanceType] = {
    t.name: t
    for t in (
        _gpu("ml.p3.2xlarge", 1, 16),
        _gpu("ml.p3.8xlarge", 4, 16),
        _gpu("ml.p3.16xlarge", 8, 16, smddp=True),
        _gpu("ml.p3dn.24xlarge", 8, 32, efa=True, local_nvme=True, smddp=True, toolkit_sets_efa=True),
        _gpu("ml.p4d.24xlarge", 8, 40, efa=True, local_nvme=True, smddp=True, toolkit_sets_efa=True, toolkit_sets_rdma=True),
        _gpu("ml.p4de.24xlarge", 8, 80, efa=True, local_nvme=True, smddp=True, toolkit_sets_efa=True, toolkit_sets_rdma=True),
        _gpu("ml.p5.48xlarge", 8, 80, efa=True, local_nvme=True, toolkit_sets_efa=True),
        _gpu("ml.p5e.48xlarge", 8, 141, efa=True, local_nvme=True),
        _gpu("ml.p5en.48xlarge", 8, 141, efa=True, local_nvme=True),
        _gpu("ml.g4dn.xlarge", 1, 16, local_nvme=True),
        _gpu("ml.g4dn.12xlarge", 4, 16, efa=True, local_nvme=True, toolkit_sets_efa=True),
        _gpu("ml.g5.xlarge", 1, 24, local_nvme=True),
        _gpu("ml.g5.2xlarge", 1, 24, local_nvme=True),
        _gpu("ml.g5.12xlarge", 4, 24, local_nvme=True),
        _gpu("ml.g5.48xlarge", 8, 24, efa=True, local_nvme=True, toolkit_sets_efa=True),
        _gpu("ml.g6.xlarge", 1, 24, local_nvme=True),
        _gpu("ml.g6.12xlarge", 4, 24, local_nvme=True),
        _gpu("ml.trn1.32xlarge", 16, 32, efa=True, local_nvme=True, toolkit_sets_efa=True, toolkit_sets_rdma=True, neuron=True),
        _gpu("ml.trn1n.32xlarge", 16, 32, efa=True, local_nvme=True, neuron=True),
        _gpu("ml.m5.xlarge", 0, 0),
        _gpu("ml.m5.4xlarge", 0, 0),
        _gpu("ml.c5.4xlarge", 0, 0),
    )
}

# EFA variables the container toolkit sets only for the types it knows (p5e, p5en, trn1n are
# missing from its lists: without these, jobs there quietly fall back to TCP).
EFA_ENVIRONMENT = {"FI_PROVIDER": "efa"}
RDMA_ENVIRONMENT = {"FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1"}


def lookup(name: str) -> InstanceType | None:
    return CATALOG.get(name)


def efa_environment(instance: InstanceType) -> dict[str, str]:
    """The EFA variables a job must set itself because the toolkit will not."""
    if not instance.efa:
        return {}
    environment = {} if instance.toolkit_sets_efa else dict(EFA_ENVIRONMENT)
    if not instance.toolkit_sets_rdma and not instance.name.startswith(("ml.g", "ml.p3dn")):
        environment.update(RDMA_ENVIRONMENT)
    return environment
