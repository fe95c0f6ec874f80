"""The framework facts: images per region and version, Python versions, aliases, launcher lists,
SMP parameters and the instance catalog, read from `facts.json`.

`facts.json` is generated from the pinned SageMaker SDK's own tables by `make facts`
(tools/facts/generate.py); this module only reads it, so the Lambda never imports the SDK. Every
answer here is a lookup: the choices trainstack makes with these facts live in images.py,
instances.py and the rules package.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

FACTS_PATH = Path(__file__).with_name("facts.json")

ImageKind = Literal["dlc", "smp", "neuron"]
IMAGE_KINDS: tuple[ImageKind, ...] = ("dlc", "smp", "neuron")
InstanceKind = Literal["cpu", "gpu", "trn"]


@dataclass(frozen=True)
class Runtime:
    """What a framework image runs a script on: its torch, its Python and the packages the built-in
    script may import (tools/facts/hand_facts.py says where each was read)."""

    torch: str
    python: str  # "3.11"
    packages: Mapping[str, bool | str | None]  # True/False installed or not, None unknown; transformers: its version

    def has(self, package: str) -> bool | None:
        """Whether the image installs `package`: True, False, or None where no source says."""
        value = self.packages.get(package)
        return None if value is None else value is not False

    @property
    def numpy_major(self) -> str:
        return str(self.packages.get("numpy") or "")


@dataclass(frozen=True)
class ImageVersion:
    """One framework version of one image family."""

    version: str
    py_versions: tuple[str, ...]
    registries: Mapping[str, str]  # region -> the AWS account whose ECR holds the image there
    suffix: str  # what the tag carries after the Python version (SMP's CUDA, Neuron's SDK/OS), or ""
    suffix_by_instance: Mapping[str, str]  # instance types whose suffix differs (SMP 2.0.1 on p5: cu121)
    sdk_major: int  # 2: in SDK 2.x's table; 3: only SDK 3.x's table lists it
    runtime: Runtime


@dataclass(frozen=True)
class ImageTable:
    kind: ImageKind
    repository: str
    aliases: Mapping[str, str]  # "2.1" -> "2.1.0", as the SDK resolves it for this image family
    versions: Mapping[str, ImageVersion]


@dataclass(frozen=True)
class Instance:
    name: str
    kind: InstanceKind
    accelerators: int = 0  # GPUs, or NeuronCores on Trainium (one training process each); 0 on CPU types
    accelerator_memory_gib: float = 0.0  # per accelerator
    efa: bool = False
    rdma: bool = False  # EFA with GPUDirect RDMA (FI_EFA_USE_DEVICE_RDMA=1 is safe)
    local_nvme: bool = False  # SageMaker rejects VolumeKmsKeyId for these
    sdk_refusal: str | None = None  # the SDK refuses this type for every covered version (p2)
    # The planner's figures (tools/facts/hand_facts.py, each with its source): the accelerator, its
    # dense tensor-core peaks, the links collectives use, the host, and the on-demand price.
    gpu: str = ""
    bf16_tflops: float = 0.0
    fp16_tflops: float = 0.0
    tf32_tflops: float = 0.0
    gpu_link_gbytes: float = 0.0  # per GPU to its peers, one direction: NVLink, or PCIe without it
    network_gbits: float = 0.0  # per instance (EFA where it has EFA)
    host_memory_gib: float = 0.0
    price_per_hour: float | None = None  # SageMaker training, on demand, as Facts.prices says where and when

    @property
    def peak_tflops(self) -> dict[str, float]:
        return {k: v for k, v in (("bf16", self.bf16_tflops), ("fp16", self.fp16_tflops), ("tf32", self.tf32_tflops)) if v}

    @property
    def neuron(self) -> bool:
        return self.kind == "trn"


@dataclass(frozen=True)
class Facts:
    generated: str
    sources: Mapping[str, str]
    partitions: Mapping[str, str]  # partition -> DNS suffix of its ECR hosts
    regions: Mapping[str, str]  # region -> partition
    images: Mapping[ImageKind, ImageTable]
    launchers: Mapping[str, tuple[str, ...]]  # the SDK's launcher version lists, verbatim
    trainium_distributions: tuple[str, ...]  # the only `distribution` keys the SDK allows on Trainium
    smddp_instance_types: tuple[str, ...]
    smp_parameters: Mapping[str, str]  # SMP v2 key -> "int" | "bool"
    smp_v1_parameters: frozenset[str]
    toolkit_efa: tuple[str, ...]  # where sagemaker-training (the pinned version) sets FI_PROVIDER=efa
    toolkit_rdma: tuple[str, ...]  # ... and FI_EFA_USE_DEVICE_RDMA=1
    instances: Mapping[str, Instance]
    unsourced_instances: tuple[str, ...]  # in the API's enum, but no source gives their accelerators
    prices: Mapping[str, str]  # as_of, region, currency and source of the instances' prices


class ImageUnavailableError(ValueError):
    """No image exists for what was asked; `choices` lists what does."""

    def __init__(self, reason: str, choices: tuple[str, ...]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.choices = choices


@cache
def load(path: Path = FACTS_PATH) -> Facts:
    data = json.loads(path.read_text())
    registries = data["registries"]
    return Facts(
        generated=data["generated"],
        sources=data["sources"],
        partitions=data["partitions"],
        regions=data["regions"],
        images={kind: _table(kind, data["images"][kind], registries) for kind in IMAGE_KINDS},
        launchers={name: tuple(versions) for name, versions in data["launchers"].items()},
        trainium_distributions=tuple(data["trainium_distributions"]),
        smddp_instance_types=tuple(data["smddp_instance_types"]),
        smp_parameters=data["smp_parameters"],
        smp_v1_parameters=frozenset(data["smp_v1_parameters"]),
        toolkit_efa=tuple(data["toolkit_efa"]),
        toolkit_rdma=tuple(data["toolkit_rdma"]),
        instances={name: _instance(name, facts) for name, facts in data["instances"].items()},
        unsourced_instances=tuple(data["unsourced_instances"]),
        prices=data["prices"],
    )


def _table(kind: ImageKind, table: dict[str, Any], registries: list[dict[str, str]]) -> ImageTable:
    versions = {
        version: ImageVersion(
            version=version,
            py_versions=tuple(entry["py"]),
            registries=registries[entry["registries"]],
            suffix=entry.get("suffix", ""),
            suffix_by_instance=entry.get("suffix_by_instance", {}),
            sdk_major=entry["sdk"],
            runtime=Runtime(entry["runtime"]["torch"], entry["runtime"]["python"], entry["runtime"]["packages"]),
        )
        for version, entry in sorted(table["versions"].items(), key=lambda item: version_key(item[0]))
    }
    return ImageTable(kind, table["repository"], table["aliases"], versions)


def _instance(name: str, facts: dict[str, Any]) -> Instance:
    return Instance(
        name=name,
        kind=facts["kind"],
        accelerators=facts.get("accelerators", 0),
        accelerator_memory_gib=facts.get("memory_gib", 0.0),
        efa=facts.get("efa", False),
        rdma=facts.get("rdma", False),
        local_nvme=facts.get("nvme", False),
        sdk_refusal=facts.get("refused"),
        gpu=facts.get("gpu", ""),
        bf16_tflops=facts.get("bf16_tflops", 0.0),
        fp16_tflops=facts.get("fp16_tflops", 0.0),
        tf32_tflops=facts.get("tf32_tflops", 0.0),
        gpu_link_gbytes=facts.get("gpu_link_gbytes", 0.0),
        network_gbits=facts.get("network_gbits", 0.0),
        host_memory_gib=facts.get("host_memory_gib", 0.0),
        price_per_hour=facts.get("price_per_hour"),
    )


def version_key(version: str) -> tuple[int, ...]:
    """Numeric order for versions ("2.10.0" after "2.9.0"); a non-numeric part sorts first."""
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def resolve_version(kind: ImageKind, text: str) -> str | None:
    """The exact version `text` names for this image family (itself, or what its alias means), or None."""
    table = load().images[kind]
    exact = table.aliases.get(text, text)
    return exact if exact in table.versions else None


def aliases_of(kind: ImageKind) -> Mapping[str, str]:
    return load().images[kind].aliases


def versions(kind: ImageKind) -> tuple[str, ...]:
    return tuple(load().images[kind].versions)


def image_version(kind: ImageKind, version: str) -> ImageVersion:
    return load().images[kind].versions[version]


def default_py_version(kind: ImageKind, version: str) -> str:
    """The Python the image of this exact version is built with (the newest, if it has several)."""
    return max(image_version(kind, version).py_versions, key=lambda py: int(py.removeprefix("py")))


def image_regions(kind: ImageKind, version: str) -> tuple[str, ...]:
    return tuple(sorted(image_version(kind, version).registries))


def partition(region: str) -> str | None:
    return load().regions.get(region)


def image_uri(kind: ImageKind, version: str, py_version: str, region: str, instance_type: str, processor: str) -> str:
    """The image URI the SDK builds for this exact version, Python, region and instance type, or
    `ImageUnavailableError`. `processor` is the tag's device part: cpu, gpu, or neuron."""
    facts = load()
    table = facts.images[kind]
    entry = table.versions.get(version)
    if entry is None:
        raise ImageUnavailableError(f"no {table.repository} image for PyTorch {version}", tuple(table.versions))
    if py_version not in entry.py_versions:
        raise ImageUnavailableError(
            f"the {table.repository} image for PyTorch {version} is built for {', '.join(entry.py_versions)}", entry.py_versions
        )
    account = entry.registries.get(region)
    if account is None:
        raise ImageUnavailableError(
            f"no {table.repository} image for PyTorch {version} in {region}", image_regions(kind, version)
        )
    tag = image_tag(version, processor, py_version, entry.suffix_by_instance.get(instance_type, entry.suffix))
    host = f"ecr.{region}.{facts.partitions[facts.regions[region]]}"
    return f"{account}.dkr.{host}/{table.repository}:{tag}"


def image_tag(version: str, processor: str, py_version: str, suffix: str) -> str:
    """The tag as the SDK writes it: `2.3.0-gpu-py311`, with SMP's CUDA or Neuron's suffix after it."""
    return "-".join(part for part in (version, processor, py_version, suffix) if part)


def repositories(region: str) -> tuple[tuple[str, str], ...]:
    """Every (account, repository) a job in `region` may pull a framework image from."""
    pairs = {
        (entry.registries[region], table.repository)
        for table in load().images.values()
        for entry in table.versions.values()
        if region in entry.registries
    }
    return tuple(sorted(pairs))


def launcher_versions(launcher: str) -> tuple[str, ...]:
    """The SDK's own version list for a launcher: torch_distributed, smdataparallel, trainium_torch_distributed."""
    return load().launchers[launcher]


def instance(name: str) -> Instance | None:
    return load().instances.get(name)


def instances() -> Mapping[str, Instance]:
    return load().instances


def trainium_distributions() -> tuple[str, ...]:
    return load().trainium_distributions


def smddp_instance_types() -> tuple[str, ...]:
    return load().smddp_instance_types


def smp_parameters() -> Mapping[str, str]:
    return load().smp_parameters


def smp_v1_parameters() -> frozenset[str]:
    return load().smp_v1_parameters


def prices() -> Mapping[str, str]:
    """Where and when the catalog's prices were read (as_of, region, currency, source)."""
    return load().prices
