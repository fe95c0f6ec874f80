"""Per-region image registries, as the twin's CreateTrainingJob sees them.

SageMaker pulls a job's image from ECR in the job's region; a framework image exists only where
the SageMaker SDK's tables say it does (trainstack.facts), and a project image only where it was
pushed. The twin refuses a request whose image does not exist in its region, and knows what each
image runs: its entry (ENTRYPOINT plus the `train` argument SageMaker passes), its environment,
the programs it has that this machine lacks, and its software (torch, Python, packages), which the
twin provides as an environment of its own (runtimes.py) when a job on it starts.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from trainstack import facts, images
from trainstack.entrypoint import FRAMEWORK_IMAGE_ENTRY
from trainstack.facts import Runtime
from trainstack.images import TORCH_DISTRIBUTED

IMAGES = Path(__file__).resolve().parent / "images"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The PyTorch framework images set this, so their toolkit's `train` runs the PyTorch container's trainer.
PYTORCH_TRAINING_MODULE = "sagemaker_pytorch_container.training:main"
# `RUN pip install ... -r FILE` in a Dockerfile: the packages an image adds at build time.
REQUIREMENTS_FILE = re.compile(r"pip install\b.*\s-r\s+(?P<file>\S+)$")


class ImageNotFoundError(ValueError):
    """The image does not exist in the job's region (CreateTrainingJob's ValidationException)."""


@dataclass(frozen=True)
class TwinImage:
    entry: tuple[str, ...]
    runtime: Runtime  # the image's torch, Python and packages
    extra_packages: tuple[str, ...] = ()  # pip requirements the image installs on top (a project image's pins)
    environment: dict[str, str] = field(default_factory=dict)  # PATH: the runtime's bin goes in front of it
    programs: dict[str, str] = field(default_factory=dict)  # executable name -> its text, put on PATH


def framework_image(runtime: Runtime) -> TwinImage:
    """A SageMaker PyTorch training image: the toolkit's `train` under the image's entry script."""
    return TwinImage(
        entry=FRAMEWORK_IMAGE_ENTRY,
        runtime=runtime,
        environment={
            "PATH": SYSTEM_PATH,
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "SAGEMAKER_TRAINING_MODULE": PYTORCH_TRAINING_MODULE,
        },
        programs={"start_with_right_hostname.sh": (IMAGES / "start_with_right_hostname.sh").read_text()},
    )


def project_image(dockerfile: Path) -> TwinImage:
    """The project's own image as its Dockerfile describes it: the framework image it builds on
    (the stack's default base, `images.default_base_image`) plus what the Dockerfile adds — the
    packages of its `pip install -r` files, ENV lines, and an exec-form ENTRYPOINT whose programs
    come from COPY lines (the paths in the image stand for the files in the build context)."""
    version = images.resolve("dlc", frozenset({TORCH_DISTRIBUTED}), None)
    assert version is not None, "the facts file lists no PyTorch training image"
    base = framework_image(facts.image_version("dlc", version.version).runtime)
    packages = []
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
        elif instruction == "RUN" and (listed := REQUIREMENTS_FILE.search(argument)):
            packages += _requirements(dockerfile.resolve().parent / listed["file"])
    entry = base.entry if entrypoint is None else (*(copies.get(part, part) for part in entrypoint), "train")
    # SageMaker runs a training image with the argument `train`, appended to its ENTRYPOINT.
    return TwinImage(entry, base.runtime, tuple(packages), environment, base.programs)


def project_image_uri(dockerfile: Path, region: str, account: str) -> str:
    """Where the stack's project image lives, as CDK names a DockerImageAsset it publishes: the
    bootstrap's container-assets repository, tagged with a hash of what the image is built from."""
    built_from = dockerfile.read_bytes() + "\n".join(project_image(dockerfile).extra_packages).encode()
    digest = hashlib.sha256(built_from).hexdigest()
    return f"{account}.dkr.ecr.{region}.amazonaws.com/cdk-hnb659fds-container-assets-{account}-{region}:{digest}"


def _requirements(path: Path) -> list[str]:
    """A requirements file's requirements; one the build context lacks (the user's optional one) has none."""
    if not path.exists():
        return []
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines() if line.split("#", 1)[0].strip()]


class ImageRegistry:
    """AWS's framework images exist where the facts file says, but for `missing` ones (the registry of
    a region where AWS has not published them: `local serve --missing-image`); `register` adds project images."""

    def __init__(self, missing: frozenset[str] = frozenset()) -> None:
        self._pushed: dict[str, TwinImage] = {}
        self.missing = missing

    def register(self, uri: str, image: TwinImage) -> None:
        self._pushed[uri] = image

    def resolve(self, uri: str, region: str) -> TwinImage:
        if uri in self._pushed:
            return self._pushed[uri]
        host = uri.split("/", 1)[0]
        if f".dkr.ecr.{region}." not in host:
            raise ImageNotFoundError(f"image {uri} is not in an ECR registry of {region}; SageMaker pulls from the job's region")
        entry = images.framework_image_version(uri)
        if entry is None or uri in self.missing:
            raise ImageNotFoundError(f"image {uri} does not exist in {region}")
        return framework_image(entry.runtime)

    def batch_get_image(self, registry_id: str, repository: str, image_ids: list[dict[str, str]], region: str) -> dict:
        """ECR's BatchGetImage over the images this registry holds in `region`, answered as ECR answers:
        each image by tag with its digest, the others as failures (ImageNotFound); RepositoryNotFoundError
        where no image of the registry lives in that repository. The manifest lists no layers (the twin
        pulls nothing), and the digest is its sha256, as an image's digest is its manifest's."""
        prefix = f"{registry_id}.dkr.ecr.{region}.amazonaws.com/{repository}:"
        if not self._holds_repository(registry_id, repository, region):
            raise RepositoryNotFoundError(
                f"The repository with name '{repository}' does not exist in the registry with id '{registry_id}'"
            )
        found, failures = [], []
        for image_id in image_ids:
            tag = image_id.get("imageTag", "")
            try:
                self.resolve(prefix + tag, region)
            except ImageNotFoundError:
                failures.append({"imageId": image_id, "failureCode": IMAGE_NOT_FOUND, "failureReason": IMAGE_NOT_FOUND_REASON})
                continue
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "config": {"mediaType": CONFIG_MEDIA_TYPE, "size": 0, "digest": _sha256(prefix + tag)},
                    "layers": [],
                }
            )
            found.append(
                {
                    "registryId": registry_id,
                    "repositoryName": repository,
                    "imageId": {"imageDigest": _sha256(manifest), "imageTag": tag},
                    "imageManifest": manifest,
                    "imageManifestMediaType": MANIFEST_MEDIA_TYPE,
                }
            )
        return {"images": found, "failures": failures}

    def _holds_repository(self, registry_id: str, repository: str, region: str) -> bool:
        pushed = {uri.rsplit(":", 1)[0] for uri in self._pushed}
        if f"{registry_id}.dkr.ecr.{region}.amazonaws.com/{repository}" in pushed:
            return True
        return any(
            entry.registries.get(region) == registry_id
            for table in facts.load().images.values()
            if table.repository == repository
            for entry in table.versions.values()
        )


class RepositoryNotFoundError(LookupError):
    """No such repository in the registry (ECR's RepositoryNotFoundException)."""


IMAGE_NOT_FOUND = "ImageNotFound"  # BatchGetImage's failureCode for a tag the repository lacks, and its reason
IMAGE_NOT_FOUND_REASON = "Requested image not found"
MANIFEST_MEDIA_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"


def _sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()
