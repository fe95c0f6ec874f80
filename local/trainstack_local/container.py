"""The `/opt/ml` tree a SageMaker host sees, and the toolkit run on it directly (no namespaces).

The real SageMaker training toolkit (sagemaker-training + sagemaker-pytorch-training) reads an
`/opt/ml` tree: hyperparameters, resource and input-data config, channels. This module writes
that tree (the twin writes one per emulated host) and, for single-host tests of the training code,
runs the toolkit's `train` command against it with `SAGEMAKER_BASE_DIR`: it then unpacks
`sagemaker_submit_directory`, picks the launcher from the distribution hyperparameters (torchrun
for torch_distributed, mpirun for mpi) and starts the entry point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack_local.process_environment import machine_environment

PYTORCH_TOOLKIT_MODULE = "sagemaker_pytorch_container.training:main"
HOST = "localhost"  # must resolve, or the toolkit retries DNS for 15 minutes


@dataclass(frozen=True)
class ContainerRun:
    base: Path  # plays /opt/ml
    returncode: int
    stdout: str
    stderr: str

    @property
    def model_dir(self) -> Path:
        return self.base / "model"

    @property
    def output_dir(self) -> Path:
        return self.base / "output"

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0 and (self.output_dir / "success").exists()

    @property
    def failure_reason(self) -> str:
        failure = self.output_dir / "failure"
        return failure.read_text() if failure.exists() else ""


def resource_config(hosts: list[str], current_host: str, instance_type: str, interface: str) -> dict[str, Any]:
    """`resourceconfig.json` as SageMaker writes it on each host of a homogeneous cluster."""
    group = "homogeneousCluster"
    return {
        "current_host": current_host,
        "hosts": hosts,
        "network_interface_name": interface,
        "current_instance_type": instance_type,
        "current_group_name": group,
        "instance_groups": [{"instance_group_name": group, "instance_type": instance_type, "hosts": hosts}],
    }


def channel_config(mode: str = "File", distribution: str = "FullyReplicated") -> dict[str, str]:
    """One channel's entry in `inputdataconfig.json`."""
    return {"TrainingInputMode": mode, "S3DistributionType": distribution, "RecordWrapperType": "None"}


def write_config(
    base: Path, hyperparameters: Mapping[str, str], resource: Mapping[str, Any], channels: Mapping[str, Any]
) -> Path:
    """The /opt/ml tree's configuration files under `base`, and the folders SageMaker creates."""
    config = base / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    for folder in ("model", "output", "output/data", "code", "checkpoints"):
        (base / folder).mkdir(parents=True, exist_ok=True)  # without output/, a failing script exits 0
    (config / "hyperparameters.json").write_text(json.dumps(dict(hyperparameters), indent=1))
    (config / "resourceconfig.json").write_text(json.dumps(dict(resource), indent=1))
    (config / "inputdataconfig.json").write_text(json.dumps(dict(channels), indent=1))
    return base


def prepare(base: Path, hyperparameters: Mapping[str, str], channels: Mapping[str, Path], instance_type: str = "local") -> Path:
    """One host on this machine's network (`localhost`, `lo`); channel folders are copied in as File-mode input."""
    write_config(
        base, hyperparameters, resource_config([HOST], HOST, instance_type, "lo"), {name: channel_config() for name in channels}
    )
    for name, source in channels.items():
        destination = base / "input" / "data" / name
        shutil.rmtree(destination, ignore_errors=True)
        shutil.copytree(source, destination)
    return base


def run(base: Path, environment: Mapping[str, str] | None = None, timeout: float = 600) -> ContainerRun:
    """Run the toolkit's `train` entry point against the tree at `base`, with this machine's basics,
    `environment` and the toolkit's own variables: nothing else of this process's environment (an
    SM_* or SAGEMAKER_* variable of its own would steer the toolkit)."""
    bin_dir = Path(sys.executable).parent
    env = machine_environment(**(environment or {}))
    env.update(
        SAGEMAKER_BASE_DIR=str(base),
        SAGEMAKER_TRAINING_MODULE=PYTORCH_TOOLKIT_MODULE,
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",  # the toolkit calls torchrun by name
    )
    result = subprocess.run([str(bin_dir / "train")], env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return ContainerRun(base, result.returncode, result.stdout, result.stderr)
