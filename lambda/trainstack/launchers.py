"""The launcher hyperparameters a `distribution` becomes: what the SageMaker SDK 2.x PyTorch
estimator renders (`PyTorch._pytorch_distribution_configuration` and
`Framework._distribution_configuration`), which is what the framework containers' toolkit reads
(docs/sagemaker-contract.md §1). tests/facts checks it against the SDK itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def launcher_hyperparameters(distribution: Mapping[str, Any], instance_type: str) -> dict[str, str]:
    """`distribution` as a checked plan holds it: only enabled launchers, pytorchddp already
    rewritten to smdistributed.dataparallel (as the SDK's estimator does). Values are JSON strings."""
    values: dict[str, Any] = {}
    mpi = distribution.get("mpi")
    if mpi is not None:
        values["sagemaker_mpi_enabled"] = True
        if mpi.get("processes_per_host"):
            values["sagemaker_mpi_num_of_processes_per_host"] = mpi["processes_per_host"]
        values["sagemaker_mpi_custom_mpi_options"] = mpi.get("custom_mpi_options", "")
    smdistributed = distribution.get("smdistributed")
    if smdistributed:
        parameters = smdistributed.get("modelparallel", {}).get("parameters")
        if parameters:  # the SDK leaves mp_parameters out when there are none
            values["mp_parameters"] = parameters
        dataparallel = smdistributed.get("dataparallel")
        values["sagemaker_distributed_dataparallel_enabled"] = dataparallel is not None
        values["sagemaker_instance_type"] = instance_type
        if dataparallel is not None:
            values["sagemaker_distributed_dataparallel_custom_mpi_options"] = dataparallel.get("custom_mpi_options", "")
    if "torch_distributed" in distribution:
        values["sagemaker_torch_distributed_enabled"] = True
        values["sagemaker_instance_type"] = instance_type
    return {key: json.dumps(value) for key, value in values.items()}
