"""Where the SageMaker framework images live (see shared/reference/sagemaker-contract.md §2)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageRepository:
    """An AWS-owned ECR repository that training jobs pull framework images from."""

    account: str
    name: str


# The PyTorch training Deep Learning Containers (ddp, smddp, fsdp).
PYTORCH_TRAINING = ImageRepository(account="763104351884", name="pytorch-training")
# SageMaker model parallel v2 needs its own image, not the plain DLC.
SMP_TRAINING = ImageRepository(account="658645717510", name="smdistributed-modelparallel")

FRAMEWORK_REPOSITORIES = (PYTORCH_TRAINING, SMP_TRAINING)
