"""Per-region image registries, as the twin's CreateTrainingJob sees them.

SageMaker pulls a job's image from ECR in the job's region; a framework image exists only where
the SageMaker SDK's tables say it does (trainstack.facts), and a project image only where it was
pushed. The twin refuses a request whose image does not exist in its region, and knows what each
image runs: its entry (ENTRYPOINT plus the `train` argument SageMaker passes), its environment,
and the programs it has that this machine lacks.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trainstack.entrypoint import FRAMEWORK_IMAGE_ENTRY
from trainstack.images import is_framework_image

IMAGES = Path(__file__).resolve().parent / "images"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The PyTorch framework images set this, so their toolkit's `train` runs the PyTorch container's trainer.
PYTORCH_TRAINING_MODULE = "sagemaker_pytorch_container.training:main"


class ImageNotFoundError(ValueError):
    """The image does not exist in the job's region (CreateTrainingJob's ValidationException)."""


@dataclass(frozen=True)
class TwinImage:
    entry: tuple[str, ...]
    environment: dict[str, str] = field(default_factory=dict)
    programs: dict[str, str] = field(default_factory=dict)  # executable name -> its text, put on PATH


def python_path() -> str:
    """This machine's Python environment stands in for the image's (torch, the toolkit, torchrun)."""
    return f"{Path(sys.executable).parent}:{SYSTEM_PATH}"


def framework_image() -> TwinImage:
    """A SageMaker PyTorch training image: the toolkit's `train` under the image's entry script."""
    return TwinImage(
        entry=FRAMEWORK_IMAGE_ENTRY,
        environment={
            "PATH": python_path(),
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "SAGEMAKER_TRAINING_MODULE": PYTORCH_TRAINING_MODULE,
        },
        programs={"start_with_right_hostname.sh": (IMAGES / "start_with_right_hostname.sh").read_text()},
    )


def project_image(dockerfile: Path) -> TwinImage:
    """The project's own image as its Dockerfile describes it: a framework image plus what the
    Dockerfile adds — ENV lines, and an exec-form ENTRYPOINT whose programs come from COPY lines
    (the paths in the image stand for the files in the build context)."""
    base = framework_image()
    environment, copies, entrypoint = dict(base.environment), {}, None
    for line in dockerfile.read_text().splitlines():
        instruction, _, argument = line.strip().partition(" ")
        if instruction == "ENV" and "=" in argument:
            key, _, value = argument.partition("=")
            environment[key.strip()] = value.strip()
        elif instruction == "COPY" and len(argument.split()) == 2:
            source, destination = argument.split()
            copies[destination] = str(dockerfile.resolve().parent / source)
        elif instruction == "ENTRYPOINT":
            entrypoint = json.loads(argument)
    if entrypoint is None:
        return TwinImage(base.entry, environment, base.programs)
    # SageMaker runs a training image with the argument `train`, appended to its ENTRYPOINT.
    return TwinImage((*(copies.get(part, part) for part in entrypoint), "train"), environment, base.programs)


class ImageRegistry:
    """AWS's framework images exist where the facts file says; `register` adds project images."""

    def __init__(self) -> None:
        self._pushed: dict[str, TwinImage] = {}

    def register(self, uri: str, image: TwinImage) -> None:
        self._pushed[uri] = image

    def resolve(self, uri: str, region: str) -> TwinImage:
        if uri in self._pushed:
            return self._pushed[uri]
        host = uri.split("/", 1)[0]
        if f".dkr.ecr.{region}." not in host:
            raise ImageNotFoundError(f"image {uri} is not in an ECR registry of {region}; SageMaker pulls from the job's region")
        if not is_framework_image(uri):
            raise ImageNotFoundError(f"image {uri} does not exist in {region}")
        return framework_image()
