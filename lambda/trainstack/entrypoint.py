"""How a script-mode job's container is started so that a stop reaches the training processes.

SageMaker stops a job (StopTrainingJob, spot reclaim) by sending SIGTERM to the container's PID 1,
then SIGKILL about 120 s later. In the framework images PID 1 is `bash -m start_with_right_hostname.sh`
running the toolkit's `train` as a child; neither forwards the signal, so the training script never
hears it (docs/sagemaker-contract.md §4). trainstack therefore starts the container
through `AlgorithmSpecification.ContainerEntrypoint` — the mechanism the SageMaker SDK 3.x uses for
its own drivers — with `training/container_entry.py` as PID 1. It runs the image's own entry as its
child (which keeps that script's host-name setup) and forwards SIGTERM to the training processes.
The file travels as a small input channel, downloaded before the container starts.
"""

from __future__ import annotations

from trainstack.s3uri import split_s3_uri

ENTRY_FILE = "container_entry.py"  # in training/, shipped as a file asset of its own
ENTRY_CHANNEL = "trainstack_entry"
# The framework DLCs' ENTRYPOINT (aws/deep-learning-containers, pytorch/training/docker/.../Dockerfile)
# followed by the argument SageMaker passes to a training container.
FRAMEWORK_IMAGE_ENTRY = ("bash", "-m", "start_with_right_hostname.sh", "train")
INPUT_DATA_ROOT = "/opt/ml/input/data"


def entry_path(entry_s3_uri: str) -> str:
    """Where the entry file lands in the container: a channel keeps each object's base name."""
    _, key = split_s3_uri(entry_s3_uri)
    return f"{INPUT_DATA_ROOT}/{ENTRY_CHANNEL}/{key.rsplit('/', 1)[-1]}"


def container_entrypoint(entry_s3_uri: str) -> list[str]:
    return ["python3", entry_path(entry_s3_uri), *FRAMEWORK_IMAGE_ENTRY]
