"""Instance facts that none of the machine-read sources carries, each with where it was checked.

The generator reads GPU counts and memory from the SageMaker SDK's `instance_gpu_info.json`,
accelerator and EFA counts from AWS's own `sagemaker-hyperpod` package (`INSTANCE_RESOURCES`), and
the container toolkit's EFA lists; what is left (per-device memory the SDK table lacks, NeuronCores,
GPUDirect RDMA, local NVMe) is written here, per family, with its source. A type whose facts are in
none of these is left out of the catalog and refused: a wrong guess is what fails after billing.
"""

from __future__ import annotations

# Memory per accelerator in GiB for the families the SDK's table does not list (per GPU, or per
# NeuronCore on Trainium, the unit a training process gets). Sources: the EC2 accelerated-computing
# pages (aws.amazon.com/ec2/instance-types/<family>/, "GPU memory" / "accelerator memory" columns)
# and NVIDIA's data sheets for the GPU they name, checked November 2026.
ACCELERATOR_MEMORY_GIB: dict[str, float] = {
    "g5": 24,  # NVIDIA A10G 24 GB (g5.xlarge is missing from the SDK table; the other sizes agree)
    "g6": 24,  # NVIDIA L4 24 GB
    "g6e": 48,  # NVIDIA L40S 48 GB
    "g7e": 96,  # NVIDIA RTX PRO 6000 Blackwell Server Edition 96 GB
    "p5": 80,  # NVIDIA H100 80 GB (p5.4xlarge; the SDK table has p5.48xlarge)
    "p5e": 141,  # NVIDIA H200 141 GB
    "p5en": 141,  # NVIDIA H200 141 GB
    "p6-b200": 180,  # NVIDIA B200, 1,440 GB per instance / 8
    "p6e-gb200": 185,  # NVIDIA GB200 superchip's B200, 740 GB per instance / 4
    "p6-b300": 288,  # NVIDIA B300 (Blackwell Ultra) 288 GB
    "trn1": 16,  # Trainium: 32 GB HBM per chip shared by its 2 NeuronCores
    "trn1n": 16,
    "trn2": 24,  # Trainium2: 96 GB HBM per chip, 4 logical NeuronCores (LNC=2, the default)
}

# NeuronCores per Trainium chip: torchrun starts one process per NeuronCore. Sources: AWS Neuron
# documentation, "Trainium architecture" (2 per Trainium chip) and "Trainium2 architecture" (8
# physical, 4 logical with the default LNC=2); sagemaker-training's `num_neurons` hard-codes 64 for
# ml.trn2.48xlarge (16 chips x 4).
NEURON_CORES_PER_CHIP: dict[str, int] = {"trn1": 2, "trn1n": 2, "trn2": 4}

# Trainium chips on types that sagemaker-hyperpod's table lacks. Source: the EC2 Trn1 page
# (aws.amazon.com/ec2/instance-types/trn1/: trn1.2xlarge has 1 Trainium chip).
TRAINIUM_CHIPS: dict[str, int] = {"ml.trn1.2xlarge": 1}

# EFA on types that sagemaker-hyperpod's table lacks. Source: the EC2 User Guide, "Supported
# instance types" for EFA (g4dn.8xlarge, 12xlarge and 16xlarge; p3dn.24xlarge).
EFA_TYPES: frozenset[str] = frozenset({"ml.g4dn.8xlarge", "ml.g4dn.12xlarge", "ml.g4dn.16xlarge", "ml.p3dn.24xlarge"})

# Families whose EFA supports GPUDirect RDMA (FI_EFA_USE_DEVICE_RDMA=1). Setting it where the
# device cannot do RDMA makes libfabric fail at start, so it is never guessed. Sources: the EC2 User
# Guide, "Get started with EFA and NCCL" (p4d, p4de, p5, p5e, p5en, p6) and "EFA and Neuron"
# (trn1, trn1n, trn2); sagemaker-training 5.1.4's SM_EFA_RDMA_INSTANCES is a subset (checked).
RDMA_FAMILIES: frozenset[str] = frozenset(
    {"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6e-gb200", "p6-b300", "trn1", "trn1n", "trn2"}
)

# Families with local NVMe instance storage: SageMaker rejects VolumeKmsKeyId for them (the
# CreateTrainingJob API reference, ResourceConfig.VolumeKmsKeyId). Source: the EC2 instance-type
# specifications, "Instance store volumes" column, checked November 2026.
LOCAL_NVME_FAMILIES: frozenset[str] = frozenset(
    {
        "g4dn",
        "g5",
        "g6",
        "g6e",
        "g7e",
        "p3dn",
        "p4d",
        "p4de",
        "p5",
        "p5e",
        "p5en",
        "p6-b200",
        "p6e-gb200",
        "p6-b300",
        "trn1",
        "trn1n",
        "trn2",
        "r5d",
    }
)
