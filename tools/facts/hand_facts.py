"""Instance facts that none of the machine-read sources carries, each with where it was checked.

The generator reads GPU counts and memory from the SageMaker SDK's `instance_gpu_info.json`,
accelerator and EFA counts from AWS's own `sagemaker-hyperpod` package (`INSTANCE_RESOURCES`), and
the container toolkit's EFA lists; what is left (per-device memory the SDK table lacks, NeuronCores,
GPUDirect RDMA, local NVMe) is written here, per family, with its source. A type whose facts are in
none of these is left out of the catalog and refused: a wrong guess is what fails after billing.
"""

from __future__ import annotations

import json
from pathlib import Path

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


# ---- The planner's figures (trainstack.planner): per GPU model, per instance type, and prices ----

# Dense (no sparsity) tensor-core peaks per GPU in TFLOPS, and the GPU's link to its peers in GB/s one
# way (NVLink where the type has it; PCIe otherwise). NVIDIA's data sheets quote most tensor figures
# with 2:4 sparsity: halved here. Sources per model in the comments.
GPU_MODELS: dict[str, dict[str, float]] = {
    # V100 SXM2 data sheet: 125 TFLOPS fp16 tensor; no bf16 or TF32 (tf32 here: its 15.7 TFLOPS fp32);
    # NVLink 2.0 300 GB/s both ways.
    "V100": {"bf16_tflops": 0.0, "fp16_tflops": 125.0, "tf32_tflops": 15.7, "gpu_link_gbytes": 150.0},
    # T4 data sheet: 65 TFLOPS fp16 (mixed) tensor; no bf16 or TF32 (8.1 fp32); PCIe Gen3 x16.
    "T4": {"bf16_tflops": 0.0, "fp16_tflops": 65.0, "tf32_tflops": 8.1, "gpu_link_gbytes": 16.0},
    # A10G: NVIDIA publishes no data sheet for AWS's A10 variant; 70 TFLOPS bf16/fp16 dense is the
    # figure the entry point's MFU lines already use (training/trainstack_training/metrics.py),
    # unverified against a primary source. PCIe Gen4 x16.
    "A10G": {"bf16_tflops": 70.0, "fp16_tflops": 70.0, "tf32_tflops": 35.0, "gpu_link_gbytes": 32.0},
    # L4 data sheet: 242 bf16/fp16 and 120 TF32 with sparsity; PCIe Gen4 x16.
    "L4": {"bf16_tflops": 121.0, "fp16_tflops": 121.0, "tf32_tflops": 60.0, "gpu_link_gbytes": 32.0},
    # L40S data sheet: 733 bf16/fp16 and 366 TF32 with sparsity; PCIe Gen4 x16.
    "L40S": {"bf16_tflops": 362.0, "fp16_tflops": 362.0, "tf32_tflops": 183.0, "gpu_link_gbytes": 32.0},
    # A100 SXM data sheet: 312 bf16/fp16, 156 TF32 dense; NVLink 3 600 GB/s both ways.
    "A100": {"bf16_tflops": 312.0, "fp16_tflops": 312.0, "tf32_tflops": 156.0, "gpu_link_gbytes": 300.0},
    # H100 SXM data sheet: 1,979 bf16/fp16 and 989 TF32 with sparsity; NVLink 4 900 GB/s both ways.
    "H100": {"bf16_tflops": 989.0, "fp16_tflops": 989.0, "tf32_tflops": 494.0, "gpu_link_gbytes": 450.0},
    # H200 SXM data sheet: the H100's compute with 141 GB of HBM3e; NVLink 900 GB/s both ways.
    "H200": {"bf16_tflops": 989.0, "fp16_tflops": 989.0, "tf32_tflops": 494.0, "gpu_link_gbytes": 450.0},
    # HGX B200 data sheet, per GPU: 4.5 PFLOPS bf16/fp16 and 2.2 PFLOPS TF32 with sparsity; NVLink 5 1.8 TB/s both ways.
    "B200": {"bf16_tflops": 2250.0, "fp16_tflops": 2250.0, "tf32_tflops": 1100.0, "gpu_link_gbytes": 900.0},
}
FAMILY_GPU: dict[str, str] = {
    "p3": "V100",
    "p3dn": "V100",
    "g4dn": "T4",
    "g5": "A10G",
    "g6": "L4",
    "g6e": "L40S",
    "p4d": "A100",
    "p4de": "A100",
    "p5": "H100",
    "p5e": "H200",
    "p5en": "H200",
    "p6-b200": "B200",
}

# Prices. SageMaker's own training rates are not machine-readable offline (its pricing page renders
# them with JavaScript; the AWS Price List API needs the network), so the planner prices a type as
# the EC2 on-demand rate of the same instance times SAGEMAKER_PREMIUM. EC2 rates: us-east-1, Linux,
# from the AWS Pricing API as Karpenter generates it, kept in ec2_on_demand.json by ec2_prices.py
# (which names the commit); they include the June 2025 P4/P5 reductions. Every catalog type has one
# but the few the Pricing API has no us-east-1 on-demand rate for (p5e, p6e-gb200, trn2: capacity
# blocks and training plans, priced per offering): those have no price, and the planner says why.
_EC2_TABLE = json.loads(Path(__file__).with_name("ec2_on_demand.json").read_text())
EC2_ON_DEMAND: dict[str, float] = _EC2_TABLE["rates"]
# SageMaker training over EC2 for the same instance, the largest ratio among the pairs with both
# rates sourced: ml.g5.xlarge $1.408 vs g5.xlarge $1.006 (1.40); ml.p4d.24xlarge $37.688 vs
# p4d.24xlarge $32.7726 before the 2025 reduction (1.15). The largest, so a worst case errs high.
SAGEMAKER_PREMIUM = 1.40

PRICES = {
    "as_of": _EC2_TABLE["generated_at"][:10],
    "region": "us-east-1",
    "currency": "USD",
    "source": f"EC2 on-demand (AWS Pricing API via Karpenter's generated table) x {SAGEMAKER_PREMIUM} SageMaker premium",
}

# Per instance: network Gbit/s (baseline) and host memory GiB. Source: EC2's instance data as
# Karpenter's generated instance-type tables carry it (2026), cross-checked with the EC2 pages.
INSTANCE_FIGURES: dict[str, tuple[float, float]] = {
    "ml.p3.2xlarge": (10.0, 61.0),
    "ml.p3.8xlarge": (10.0, 244.0),
    "ml.p3.16xlarge": (25.0, 488.0),
    "ml.p3dn.24xlarge": (100.0, 768.0),
    "ml.g4dn.xlarge": (25.0, 16.0),
    "ml.g4dn.2xlarge": (25.0, 32.0),
    "ml.g4dn.4xlarge": (25.0, 64.0),
    "ml.g4dn.8xlarge": (50.0, 128.0),
    "ml.g4dn.12xlarge": (50.0, 192.0),
    "ml.g4dn.16xlarge": (50.0, 256.0),
    "ml.g5.xlarge": (10.0, 16.0),
    "ml.g5.2xlarge": (10.0, 32.0),
    "ml.g5.4xlarge": (25.0, 64.0),
    "ml.g5.8xlarge": (25.0, 128.0),
    "ml.g5.12xlarge": (40.0, 192.0),
    "ml.g5.16xlarge": (25.0, 256.0),
    "ml.g5.24xlarge": (50.0, 384.0),
    "ml.g5.48xlarge": (100.0, 768.0),
    "ml.g6.xlarge": (10.0, 16.0),
    "ml.g6.2xlarge": (10.0, 32.0),
    "ml.g6.4xlarge": (25.0, 64.0),
    "ml.g6.8xlarge": (25.0, 128.0),
    "ml.g6.12xlarge": (40.0, 192.0),
    "ml.g6.16xlarge": (25.0, 256.0),
    "ml.g6.24xlarge": (50.0, 384.0),
    "ml.g6.48xlarge": (100.0, 768.0),
    "ml.g6e.xlarge": (20.0, 32.0),
    "ml.g6e.2xlarge": (20.0, 64.0),
    "ml.g6e.4xlarge": (20.0, 128.0),
    "ml.g6e.8xlarge": (25.0, 256.0),
    "ml.g6e.12xlarge": (100.0, 384.0),
    "ml.g6e.16xlarge": (35.0, 512.0),
    "ml.g6e.24xlarge": (200.0, 768.0),
    "ml.g6e.48xlarge": (400.0, 1536.0),
    "ml.p4d.24xlarge": (400.0, 1152.0),
    "ml.p4de.24xlarge": (400.0, 1152.0),
    "ml.p5.4xlarge": (100.0, 256.0),
    "ml.p5.48xlarge": (3200.0, 2048.0),
    "ml.p5e.48xlarge": (3200.0, 2048.0),
    "ml.p5en.48xlarge": (3200.0, 2048.0),
    "ml.p6-b200.48xlarge": (3200.0, 2048.0),
}


def planner_figures(name: str, family: str) -> dict[str, float | str]:
    """The planner's figures for one type: its GPU's, and the instance's own."""
    figures: dict[str, float | str] = {}
    if family in FAMILY_GPU:
        figures["gpu"] = FAMILY_GPU[family]
        figures.update({k: v for k, v in GPU_MODELS[FAMILY_GPU[family]].items() if v})
    if name in INSTANCE_FIGURES:
        network, memory = INSTANCE_FIGURES[name]
        figures.update(network_gbits=network, host_memory_gib=memory)
    if name in EC2_ON_DEMAND:
        figures["price_per_hour"] = round(EC2_ON_DEMAND[name] * SAGEMAKER_PREMIUM, 4)
    return figures


# ---- What each framework image installs beside torch (the built-in script's runtime) ----

# The packages the built-in script imports or may import, per image, where no maintained source
# can be read at build time. Each image's torch is its PyTorch version and its Python is the tag's
# py version (the SDK's tables); these are the rest. Sources, read November 2026:
# aws/deep-learning-containers (branch master, commit f06ada0e08ec): pytorch/training/buildspec-<X>-<Y>-sm.yml,
# the SageMaker stage of pytorch/training/docker/<X.Y>/py3/<cuXXX>/Dockerfile.gpu and
# Dockerfile.sagemaker.gpu.core_packages.json; for SMP v2 images the "Release notes for the SageMaker
# model parallelism library" and the SDK's pytorch-smp.json. tensorboard arrives in the DLCs from
# 2.2 on as a dependency of torchtnt; safetensors with accelerate >= 0.25. Values: True (installed),
# False (not installed), None (no source says). numpy is the major version: "1" or "2"; where the
# DLC leaves numpy unpinned the major is what its other pins imply (2.6.0: 1.26; 2.7.1 on: 2.x),
# not checked in a running image. transformers is False, None or the version the image installs.
IMAGE_PACKAGES: dict[str, dict[str, dict[str, bool | str | None]]] = {
    "dlc": {
        "1.13.1": {"tensorboard": None, "transformers": False, "numpy": "1", "safetensors": None},
        "2.0.0": {"tensorboard": None, "transformers": False, "numpy": "1", "safetensors": None},
        # The cu118 image has no tensorboard, the cu121 one has it: the SDK's tag names neither, so no.
        "2.0.1": {"tensorboard": False, "transformers": False, "numpy": "1", "safetensors": False},
        "2.1.0": {"tensorboard": False, "transformers": False, "numpy": "1", "safetensors": False},
        "2.2.0": {"tensorboard": True, "transformers": False, "numpy": "1", "safetensors": False},
        "2.3.0": {"tensorboard": True, "transformers": False, "numpy": "1", "safetensors": True},
        "2.4.0": {"tensorboard": True, "transformers": False, "numpy": "1", "safetensors": True},
        "2.5.1": {"tensorboard": True, "transformers": False, "numpy": "1", "safetensors": True},
        "2.6.0": {"tensorboard": True, "transformers": False, "numpy": "1", "safetensors": True},
        "2.7.1": {"tensorboard": True, "transformers": False, "numpy": "2", "safetensors": True},
        "2.8.0": {"tensorboard": True, "transformers": False, "numpy": "2", "safetensors": True},
        "2.9.0": {"tensorboard": True, "transformers": False, "numpy": "2", "safetensors": True},
        "2.10.0": {"tensorboard": True, "transformers": False, "numpy": "2", "safetensors": True},
    },
    # The release notes give transformers per image (2.0.1's is unverified); they do not say whether
    # SMP images carry tensorboard, and their numpy is taken as the DLC's of the same torch line.
    "smp": {
        "2.0.1": {"tensorboard": None, "transformers": None, "numpy": "1", "safetensors": None},
        "2.1.2": {"tensorboard": None, "transformers": "4.37.1", "numpy": "1", "safetensors": None},
        "2.2.0": {"tensorboard": None, "transformers": "4.37.1", "numpy": "1", "safetensors": None},
        "2.3.1": {"tensorboard": None, "transformers": "4.40.1", "numpy": "1", "safetensors": None},
        "2.4.1": {"tensorboard": None, "transformers": "4.44.2", "numpy": "1", "safetensors": None},
        "2.5.1": {"tensorboard": None, "transformers": "4.44.2", "numpy": "1", "safetensors": None},
    },
}


def image_runtime(kind: str, version: str, py_versions: list[str]) -> dict[str, object]:
    """The torch, Python and packages of one framework image. Neuron images run torch-neuronx, which
    the built-in script does not use: their packages are not listed."""
    if kind in IMAGE_PACKAGES and version not in IMAGE_PACKAGES[kind]:
        raise SystemExit(f"hand_facts.IMAGE_PACKAGES lacks the {kind} image for PyTorch {version}: read its packages, add them")
    python = max(py_versions, key=lambda py: int(py.removeprefix("py"))).removeprefix("py")
    return {"torch": version, "python": f"{python[0]}.{python[1:]}", "packages": IMAGE_PACKAGES.get(kind, {}).get(version, {})}
