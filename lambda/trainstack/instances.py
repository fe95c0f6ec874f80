"""What trainstack knows about SageMaker training instance types: the catalog in the facts file
(botocore's TrainingInstanceType enum, completed from the SDK's GPU table, AWS's HyperPod table and
sourced hand facts; see tools/facts/).

A type missing here is refused by validation rather than guessed at: a wrong guess about GPUs,
EFA or local NVMe is exactly what fails after the cluster is billed.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainstack import facts

InstanceType = facts.Instance
CATALOG: Mapping[str, InstanceType] = facts.instances()

# The toolkit sets these itself only for the types its own lists name, and the toolkit inside a
# framework image is often older than the pinned one (p5/p5e are missing before 5.1.x): a job on
# any EFA type sets them, since setting them twice is harmless and missing them means TCP.
EFA_ENVIRONMENT = {"FI_PROVIDER": "efa"}
# Only where EFA supports GPUDirect RDMA: elsewhere libfabric refuses to start with it set.
RDMA_ENVIRONMENT = {"FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1"}


def lookup(name: str) -> InstanceType | None:
    return CATALOG.get(name)


def efa_environment(instance: InstanceType) -> dict[str, str]:
    """The EFA variables a job on this type sets, whatever the toolkit in its image does."""
    if not instance.efa:
        return {}
    return {**EFA_ENVIRONMENT, **(RDMA_ENVIRONMENT if instance.rdma else {})}
