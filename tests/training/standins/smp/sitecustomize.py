"""Stand-in for SMP v2's `torch.sagemaker` (ships only in the SMP image). A sitecustomize installs
it as sys.modules["torch.sagemaker"] in every process, torchrun's workers included, without
shadowing the real torch. It records init() (and whether the default process group existed) and
transform(); the real PyTorch FSDP does the sharding."""

import json
import os
import sys
import types

from record import record


def init() -> None:
    import torch.distributed as dist

    record(
        "tsm.init",
        process_group_initialized=dist.is_initialized(),
        mp_parameters=json.loads(os.environ.get("SM_HP_MP_PARAMETERS", "{}")),
    )


def transform(model):
    record("tsm.transform", model=type(model).__name__)
    return model


module = types.ModuleType("torch.sagemaker")
module.init = init
module.transform = transform
sys.modules["torch.sagemaker"] = module
