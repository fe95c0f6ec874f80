"""Which framework image a job runs, chosen as the SageMaker SDK's estimator chooses it
(`image_uris.get_training_image_uri`), from the facts file (see facts.py).

- Trainium types run the Neuron DLC; SMP v2 (torch_distributed + smdistributed.modelparallel) runs
  the SMP image; everything else runs the PyTorch training DLC, cpu or gpu by instance type.
- A version is valid for a launcher when an image exists for it *and* the SDK's launcher list names
  it: torch_distributed, smdataparallel (SMDDP) and Trainium have lists; mpi has none. Versions only
  SDK 3.x's tables know, newer than every version of SDK 2.x's torch_distributed list, are taken as
  valid for torch_distributed: the 2.x list predates them and SDK 3.x validates no versions.
  SMDDP is a library inside the image, so its list stays exact.
- An alias ("2.1") resolves as the SDK resolves it for that image family, and the tag then names
  the exact version it stands for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainstack import facts
from trainstack.facts import ImageKind, ImageVersion, Instance, version_key

# The launchers a `distribution` enables, named as the SDK's lists name them.
TORCH_DISTRIBUTED = "torch_distributed"
SMDATAPARALLEL = "smdataparallel"
MPI = "mpi"
# The tag's device part per image family (see `processor`).
PROCESSORS: dict[ImageKind, tuple[str, ...]] = {"dlc": ("cpu", "gpu"), "smp": ("gpu",), "neuron": ("neuron",)}
IMAGE_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.(?P<suffix>[a-z0-9.-]+)"
    r"/(?P<repository>[a-z0-9-]+):(?P<tag>.+)$"
)


@dataclass(frozen=True)
class FrameworkVersion:
    """An exact framework version for a spec's `framework_version` (or its default)."""

    version: str
    written: str | None  # what the spec wrote, when it differs (an alias); None when exact or defaulted

    def describe(self) -> str:
        if self.written is None:
            return self.version
        return f'{self.version} (the SDK\'s alias "{self.written}")'


def image_kind(strategy: str, instance: Instance) -> ImageKind:
    if instance.neuron:
        return "neuron"
    return "smp" if strategy == "smp" else "dlc"


def processor(kind: ImageKind, instance: Instance) -> str:
    """The device part of the image tag."""
    if kind == "neuron":
        return "neuron"
    return "gpu" if instance.kind == "gpu" else "cpu"


def framework_image_version(uri: str) -> ImageVersion | None:
    """The facts of the framework image `uri` names (its runtime among them), or None when the facts
    file lists no such image in that region and account."""
    match = IMAGE_URI.match(uri)
    partition = facts.partition(match["region"]) if match else None
    if match is None or partition is None or facts.load().partitions[partition] != match["suffix"]:
        return None
    for kind, table in facts.load().images.items():
        if table.repository != match["repository"]:
            continue
        for entry in table.versions.values():
            if entry.registries.get(match["region"]) != match["account"]:
                continue
            suffixes = {entry.suffix, *entry.suffix_by_instance.values()}
            tags = {
                facts.image_tag(entry.version, processor, py_version, suffix)
                for processor in PROCESSORS[kind]
                for py_version in entry.py_versions
                for suffix in suffixes
            }
            if match["tag"] in tags:
                return entry
    return None


def supported_versions(kind: ImageKind, launchers: frozenset[str]) -> tuple[str, ...]:
    """The exact PyTorch versions that have an image of this kind and that every enabled launcher supports."""
    if kind == "neuron":
        allowed = facts.launcher_versions("trainium_torch_distributed")
        return tuple(v for v in facts.versions(kind) if v in allowed)
    versions = facts.versions(kind)
    if TORCH_DISTRIBUTED in launchers:
        listed = facts.launcher_versions(TORCH_DISTRIBUTED)
        newest = max(listed, key=version_key)
        versions = tuple(
            v
            for v in versions
            if v in listed or (facts.image_version(kind, v).sdk_major == 3 and version_key(v) > version_key(newest))
        )
    if SMDATAPARALLEL in launchers:
        versions = tuple(v for v in versions if v in facts.launcher_versions(SMDATAPARALLEL))
    return versions


def resolve(kind: ImageKind, launchers: frozenset[str], written: str | None) -> FrameworkVersion | None:
    """The exact version: the newest supported one when `written` is None, else what `written`
    names if it is supported; None when it names nothing supported."""
    supported = supported_versions(kind, launchers)
    if written is None:
        return FrameworkVersion(supported[-1], None) if supported else None
    exact = facts.resolve_version(kind, written)
    if exact is None or exact not in supported:
        return None
    return FrameworkVersion(exact, None if exact == written else written)


def image_uri(kind: ImageKind, version: str, py_version: str, region: str, instance: Instance) -> str:
    """The framework image URI, or `facts.ImageUnavailableError` (e.g. no SMP image in that region)."""
    return facts.image_uri(kind, version, py_version, region, instance.name, processor(kind, instance))


def repository(kind: ImageKind) -> str:
    return facts.load().images[kind].repository


def default_base_image(region: str) -> str:
    """The framework image the project image builds on when nothing names another: the GPU PyTorch
    training DLC of the newest version torch_distributed supports, in `region` (ddp and fsdp jobs;
    smddp and smp need their own base, see `make image`)."""
    kind: ImageKind = "dlc"
    framework = resolve(kind, frozenset({TORCH_DISTRIBUTED}), None)
    if framework is None:
        raise facts.ImageUnavailableError("no PyTorch training DLC in the facts file", ())
    version = framework.version
    return facts.image_uri(kind, version, facts.default_py_version(kind, version), region, "", "gpu")
