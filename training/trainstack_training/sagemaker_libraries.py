"""The SageMaker-only libraries (SMDDP, SMP v2), imported lazily so everything else runs anywhere.

Neither is on PyPI: they ship inside the SageMaker images. Without them the job fails at once
with the image to use, before any data is read or any GPU-hour is spent waiting.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingSageMakerLibraryError(ImportError):
    """The strategy needs a library that only the SageMaker training images ship."""


SMDDP_MODULE = "smdistributed.dataparallel.torch.torch_smddp"
SMP_MODULE = "torch.sagemaker"


def import_smddp() -> ModuleType:
    try:
        return importlib.import_module(SMDDP_MODULE)
    except ImportError as error:
        raise MissingSageMakerLibraryError(
            "strategy 'smddp' needs the SageMaker distributed data parallel library "
            f"({SMDDP_MODULE}), which ships only in the SageMaker PyTorch training DLC for PyTorch 2.2.0 or older "
            "(pytorch-training; `trainstack render` names the image for the job's region) on "
            "ml.p3.16xlarge, ml.p3dn.24xlarge, ml.p4d.24xlarge or ml.p4de.24xlarge; elsewhere use strategy 'ddp' or 'fsdp'"
        ) from error


def import_smp() -> ModuleType:
    try:
        return importlib.import_module(SMP_MODULE)
    except ImportError as error:
        raise MissingSageMakerLibraryError(
            "strategy 'smp' needs SageMaker model parallel v2 (torch.sagemaker), which ships only in the SMP image "
            "(smdistributed-modelparallel; `trainstack render` names the image for the job's region); "
            "the plain PyTorch DLC does not have it. Elsewhere use strategy 'fsdp'"
        ) from error
