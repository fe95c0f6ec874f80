"""Run training exactly as a SageMaker framework container does, on this machine.

The real SageMaker training toolkit (sagemaker-training + sagemaker-pytorch-training) reads an
`/opt/ml` tree: hyperparameters, resource and input-data config, channels. This module writes
that tree under a directory of our choosing and runs the toolkit's `train` command, which then
downloads (here: unpacks) `sagemaker_submit_directory`, picks the launcher from the
distribution hyperparameters (torchrun for torch_distributed) and starts our entry point.
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


def encode_hyperparameters(values: Mapping[str, Any]) -> dict[str, str]:
    """The SageMaker SDK's encoding: every value a string holding JSON (strings carry their own quotes)."""
    return {key: json.dumps(value) for key, value in values.items()}


def prepare(base: Path, hyperparameters: Mapping[str, str], channels: Mapping[str, Path], instance_type: str = "local") -> Path:
    """Write the /opt/ml tree under `base`; channel folders are copied in as File-mode input."""
    config = base / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    for folder in ("model", "output", "output/data", "code"):
        (base / folder).mkdir(parents=True, exist_ok=True)  # without output/, a failing script exits 0
    (config / "hyperparameters.json").write_text(json.dumps(dict(hyperparameters), indent=1))
    group = "homogeneousCluster"
    resource = {
        "current_host": HOST,
        "hosts": [HOST],
        "network_interface_name": "lo",
        "current_instance_type": instance_type,
        "current_group_name": group,
        "instance_groups": [{"instance_group_name": group, "instance_type": instance_type, "hosts": [HOST]}],
    }
    (config / "resourceconfig.json").write_text(json.dumps(resource, indent=1))
    input_config = {
        name: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}
        for name in channels
    }
    (config / "inputdataconfig.json").write_text(json.dumps(input_config, indent=1))
    for name, source in channels.items():
        destination = base / "input" / "data" / name
        shutil.rmtree(destination, ignore_errors=True)
        shutil.copytree(source, destination)
    return base


def run(base: Path, environment: Mapping[str, str] | None = None, timeout: float = 600) -> ContainerRun:
    """Run the toolkit's `train` entry point against the tree at `base`."""
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SAGEMAKER_"))}
    env.update(environment or {})
    env.update(
        SAGEMAKER_BASE_DIR=str(base),
        SAGEMAKER_TRAINING_MODULE=PYTORCH_TOOLKIT_MODULE,
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",  # the toolkit calls torchrun by name
    )
    result = subprocess.run([str(bin_dir / "train")], env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return ContainerRun(base, result.returncode, result.stdout, result.stderr)
