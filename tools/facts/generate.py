"""Write lambda/trainstack/facts.json from the pinned SageMaker SDK's own tables (`make facts`).

    .venv-sdk/bin/python -m tools.facts.generate [--output PATH]

Runs in `.venv-sdk` (created by `make sdk`), never in the Lambda: the SDK is the source of truth
at build time only. It reads
- SDK 2.x (`sagemaker`, installed): `image_uri_config/pytorch.json`, `pytorch-smp.json`,
  `pytorch-neuron.json`, `instance_gpu_info.json`, the launcher lists in `fw_utils.py`, and asks
  `image_uris` itself for what lives in code (SMP's CUDA suffix, the Neuron tag, ECR hosts);
- SDK 3.x (`sagemaker-core` + `sagemaker-train`, unpacked into .venv-sdk/sdk3): the versions its
  `pytorch.json` adds, and the SMP v2 parameter set (the `SMP` config class);
- botocore (the same version as the main venv): the `TrainingInstanceType` enum, partitions and
  ECR endpoints;
- files read, never imported (.venv-sdk/sources): sagemaker-training's EFA lists and
  sagemaker-hyperpod's `INSTANCE_RESOURCES` (accelerator and EFA counts per ml. type);
- tools/facts/hand_facts.py: the few facts none of these carries, each with its source.

The output is deterministic: the `generated` date only changes when the content does.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import functools
import json
import os
import re
import sys
import tarfile
import zipfile
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

import boto3
import botocore.session
from sagemaker import fw_utils, image_uris, utils

from tools.facts import hand_facts

# The SDK re-reads botocore's endpoint data on every URI it builds (~40 ms); the answer never
# changes within a run, so it is read once.
utils._botocore_resolver = functools.cache(utils._botocore_resolver)

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "lambda" / "trainstack" / "facts.json"
SDK3 = Path(sys.prefix) / "sdk3"
SOURCES = Path(sys.prefix) / "sources"
SMP_DISTRIBUTION = {"torch_distributed": {"enabled": True}, "smdistributed": {"modelparallel": {"enabled": True}}}
PATCH_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
INLINE_WIDTH = 110


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    content = build()
    args.output.write_text(render({"generated": generated_date(content), **content}))
    print(args.output)


def build() -> dict[str, Any]:
    instances, unsourced = instance_catalog()
    registries = Registries()
    images = {
        "dlc": dlc_table(registries),
        "smp": smp_table(registries, [name for name, facts in instances.items() if facts["kind"] == "gpu"]),
        "neuron": neuron_table(registries),
    }
    regions = sorted({region for table in registries.maps for region in table})
    toolkit_efa, toolkit_rdma = toolkit_efa_lists()
    session = boto3.session.Session()
    return {
        "sources": sources(),
        "partitions": partitions(regions),
        "regions": {region: session.get_partition_for_region(region) for region in regions},
        "registries": registries.maps,
        "images": images,
        "launchers": {
            "torch_distributed": fw_utils.TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS,
            "smdataparallel": fw_utils.SM_DATAPARALLEL_SUPPORTED_FRAMEWORK_VERSIONS["pytorch"],
            "trainium_torch_distributed": fw_utils.TRAINIUM_SUPPORTED_TORCH_DISTRIBUTED_FRAMEWORK_VERSIONS,
        },
        "trainium_distributions": fw_utils.TRAINIUM_SUPPORTED_DISTRIBUTION_STRATEGIES,
        # "local_gpu" is the SDK's local mode, not a SageMaker instance type.
        "smddp_instance_types": [t for t in fw_utils.SM_DATAPARALLEL_SUPPORTED_INSTANCE_TYPES if t.startswith("ml.")],
        "smp_parameters": smp_v2_parameters(),
        "smp_v1_parameters": smp_v1_parameters(),
        "toolkit_efa": toolkit_efa,
        "toolkit_rdma": toolkit_rdma,
        "instances": instances,
        "unsourced_instances": unsourced,
        "prices": hand_facts.PRICES,
    }


class Registries:
    """Region -> account maps, stored once each: most image versions share the same map."""

    def __init__(self) -> None:
        self.maps: list[dict[str, str]] = []

    def index(self, registry: dict[str, str]) -> int:
        ordered = dict(sorted(registry.items()))
        if ordered not in self.maps:
            self.maps.append(ordered)
        return self.maps.index(ordered)


def sdk3_config(framework: str) -> dict[str, Any]:
    return json.loads((SDK3 / "sagemaker" / "core" / "image_uri_config" / f"{framework}.json").read_text())


def dlc_table(registries: Registries) -> dict[str, Any]:
    """PyTorch training DLCs from the 2.x table plus what the 3.x table adds (newer versions, regions).

    Versions older than the first one SDK 2.x runs torch_distributed on are left out: their images
    (py36-py38, CUDA 11) predate torchrun in the toolkit."""
    sdk2, sdk3 = image_uris.config_for_framework("pytorch")["training"], sdk3_config("pytorch")["training"]
    oldest = _key(fw_utils.TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS[0])
    versions, repositories = {}, set()
    for version in sorted({*sdk2["versions"], *sdk3["versions"]}, key=_key):
        if _key(version) < oldest:
            continue
        entries = [table["versions"][version] for table in (sdk2, sdk3) if version in table["versions"]]
        registry = {region: account for entry in entries for region, account in entry["registries"].items()}
        py_versions = sorted({py for entry in entries for py in entry["py_versions"]})
        versions[version] = {
            "py": py_versions,
            "registries": registries.index(registry),
            "sdk": 2 if version in sdk2["versions"] else 3,
            "runtime": hand_facts.image_runtime("dlc", version, py_versions),
        }
        repositories.update(entry["repository"] for entry in entries)
    aliases = {**sdk2["version_aliases"], **sdk3["version_aliases"]}
    return {
        "repository": _one(repositories),
        "aliases": {alias: target for alias, target in sorted(aliases.items()) if target in versions},
        "versions": versions,
    }


def smp_table(registries: Registries, gpu_types: list[str]) -> dict[str, Any]:
    """SMP v2 images per *PyTorch* version. pytorch-smp.json is keyed by SMP library version; its
    aliases map PyTorch versions onto them ("2.3.1" -> library 2.5.0). A PyTorch version has an
    image when it is a full-version alias, or a library key its own "x.y" alias points to ("2.1" ->
    2.1.2). Library keys nothing maps a PyTorch version to (2.3.0, 2.5.0, 2.7.0, 2.8.0) have no
    image tagged with that PyTorch version. The CUDA suffix is chosen by code in the SDK
    (`get_training_image_uri`), so it is read from the URIs the SDK builds, per GPU type."""
    config = image_uris.config_for_framework("pytorch-smp")["training"]
    if config != sdk3_config("pytorch-smp")["training"]:
        raise SystemExit("pytorch-smp.json differs between SDK 2.x and 3.x: decide which one to follow")
    aliases = config["version_aliases"]
    library = {version: aliases.get(version, version) for version in [*aliases, *config["versions"]]}
    pytorch_versions = sorted(
        {
            version
            for version in library
            if PATCH_VERSION.match(version) and (version in aliases or aliases.get(".".join(version.split(".")[:2])) == version)
        },
        key=_key,
    )
    region = next(iter(config["versions"][library[pytorch_versions[0]]]["registries"]))
    versions = {}
    for version in pytorch_versions:
        entry = config["versions"][library[version]]
        suffixes = {t: _smp_suffix(region, version, entry["py_versions"][0], t) for t in gpu_types}
        common = max(set(suffixes.values()), key=list(suffixes.values()).count)
        versions[version] = {
            "library": library[version],
            "py": entry["py_versions"],
            "registries": registries.index(entry["registries"]),
            "suffix": common,
            "suffix_by_instance": {t: s for t, s in sorted(suffixes.items()) if s != common},
            "sdk": 2,
            "runtime": hand_facts.image_runtime("smp", version, entry["py_versions"]),
        }
    short_aliases = {
        alias: full
        for alias in aliases
        if not PATCH_VERSION.match(alias)
        for full in pytorch_versions
        if full.startswith(alias + ".") and library[full] == aliases[alias]
    }
    return {
        "repository": _one({e["repository"] for e in config["versions"].values()}),
        "aliases": short_aliases,
        "versions": versions,
    }


def _smp_suffix(region: str, version: str, py_version: str, instance_type: str) -> str:
    uri = image_uris.get_training_image_uri(
        region, "pytorch", version, py_version, distribution=SMP_DISTRIBUTION, instance_type=instance_type
    )
    return uri.rsplit(":", 1)[1].removeprefix(f"{version}-gpu-{py_version}-")


def neuron_table(registries: Registries) -> dict[str, Any]:
    """Trainium's Neuron DLCs; the tag's SDK/OS suffix is built in code, so it is read from the SDK's URI."""
    config = image_uris.config_for_framework("pytorch-neuron")["training"]
    if config != sdk3_config("pytorch-neuron")["training"]:
        raise SystemExit("pytorch-neuron.json differs between SDK 2.x and 3.x: decide which one to follow")
    versions = {}
    for version, entry in config["versions"].items():
        region, py_version = next(iter(entry["registries"])), entry["py_versions"][0]
        uri = image_uris.retrieve(
            "pytorch", region, version, py_version, instance_type="ml.trn1.32xlarge", image_scope="training"
        )
        versions[version] = {
            "py": entry["py_versions"],
            "registries": registries.index(entry["registries"]),
            "suffix": uri.rsplit(":", 1)[1].removeprefix(f"{version}-neuron-{py_version}-"),
            "sdk": 2,
            "runtime": hand_facts.image_runtime("neuron", version, entry["py_versions"]),
        }
    return {
        "repository": _one({e["repository"] for e in config["versions"].values()}),
        "aliases": config["version_aliases"],
        "versions": versions,
    }


def partitions(regions: Iterable[str]) -> dict[str, str]:
    """Each partition's DNS suffix, as the SDK builds ECR hosts (`ecr.<region>.<suffix>`)."""
    resolver = utils._botocore_resolver()
    suffixes: dict[str, str] = {}
    for region in regions:
        endpoint = resolver.construct_endpoint("ecr", region)
        if endpoint["hostname"] != f"ecr.{region}.{endpoint['dnsSuffix']}":
            raise SystemExit(f"ECR host {endpoint['hostname']} in {region} does not follow ecr.<region>.<suffix>")
        if suffixes.setdefault(endpoint["partition"], endpoint["dnsSuffix"]) != endpoint["dnsSuffix"]:
            raise SystemExit(f"partition {endpoint['partition']} has more than one DNS suffix")
    return dict(sorted(suffixes.items()))


def instance_catalog() -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every type in botocore's TrainingInstanceType enum with what is known of it, and the GPU
    types whose accelerator facts no source carries (left out, so refused)."""
    enum = botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingInstanceType").enum
    gpu_info = _sdk_gpu_info()
    hyperpod = _hyperpod_resources()
    toolkit_efa, _ = toolkit_efa_lists()
    oldest_version = fw_utils.TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS[0]
    catalog, unsourced = {}, []
    for name in sorted(enum, key=_instance_key):
        family = utils.get_instance_type_family(name)
        kind = {"gpu": "gpu", "trn": "trn"}.get(image_uris._processor(name, ["cpu", "gpu", "trn"]), "cpu")
        facts: dict[str, Any] = {"kind": kind}
        resources = hyperpod.get(name, {})
        if kind == "gpu":
            count = gpu_info.get(name, {}).get("Count") or resources.get("gpu")
            memory = gpu_info[name]["TotalGpuMemoryInMiB"] / 1024 / count if name in gpu_info else None
            memory = memory or hand_facts.ACCELERATOR_MEMORY_GIB.get(family)
            if not count or not memory:
                unsourced.append(name)
                continue
            facts.update(accelerators=count, memory_gib=round(float(memory), 2))
        elif kind == "trn":
            chips = resources.get("trainium") or hand_facts.TRAINIUM_CHIPS.get(name)
            per_chip = hand_facts.NEURON_CORES_PER_CHIP.get(family)
            if not chips or not per_chip:
                unsourced.append(name)
                continue
            facts.update(accelerators=chips * per_chip, memory_gib=float(hand_facts.ACCELERATOR_MEMORY_GIB[family]))
        efa = resources.get("efa", 0) > 0 or name in toolkit_efa or name in hand_facts.EFA_TYPES
        if efa:
            facts["efa"] = True
            if family in hand_facts.RDMA_FAMILIES:
                facts["rdma"] = True
        if family in hand_facts.LOCAL_NVME_FAMILIES:
            facts["nvme"] = True
        facts.update(hand_facts.planner_figures(name, family))
        refusal = _sdk_refusal(oldest_version, name) if kind == "gpu" else None
        if refusal:
            facts["refused"] = refusal
        catalog[name] = facts
    _, toolkit_rdma = toolkit_efa_lists()
    missing = [t for t in toolkit_rdma if not catalog.get(t, {}).get("rdma")]
    if missing:
        raise SystemExit(f"the toolkit turns on RDMA for {missing}; hand_facts.RDMA_FAMILIES lacks them")
    return catalog, unsourced


def _sdk_refusal(version: str, instance_type: str) -> str | None:
    """The SDK's own refusal of a type for every covered PyTorch version (p2: deprecated since 1.13)."""
    try:
        image_uris.retrieve("pytorch", "us-east-1", version, instance_type=instance_type, image_scope="training")
    except ValueError as error:
        return " ".join(str(error).split())
    return None


def _sdk_gpu_info() -> dict[str, dict[str, int]]:
    """The SDK's per-region GPU table, merged; a type that differs between regions stops generation."""
    merged: dict[str, dict[str, int]] = {}
    for region, table in json.loads(
        Path(image_uris.__file__).with_name("image_uri_config").joinpath("instance_gpu_info.json").read_text()
    ).items():
        for name, info in table.items():
            if merged.setdefault(name, info) != info:
                raise SystemExit(f"instance_gpu_info.json: {name} differs in {region}")
    return merged


def _hyperpod_resources() -> dict[str, dict[str, int]]:
    wheel = _one_file("sagemaker_hyperpod-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read("sagemaker/hyperpod/training/constants.py").decode()
    return _assigned_literal(source, "INSTANCE_RESOURCES")


def toolkit_efa_lists() -> tuple[list[str], list[str]]:
    """The types for which sagemaker-training sets FI_PROVIDER=efa, and FI_EFA_USE_DEVICE_RDMA=1."""
    archive_path = _one_file("sagemaker_training-*.tar.gz")
    with tarfile.open(archive_path) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("/src/sagemaker_training/__init__.py"))
        source = archive.extractfile(member).read().decode()
    return _assigned_literal(source, "SM_EFA_NCCL_INSTANCES"), _assigned_literal(source, "SM_EFA_RDMA_INSTANCES")


def smp_v2_parameters() -> dict[str, str]:
    """SMP v2's `torch.sagemaker.init` keys and their types, from SDK 3.x's `SMP` config class."""
    tree = ast.parse((SDK3 / "sagemaker" / "train" / "distributed.py").read_text())
    smp = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "SMP")
    fields = {}
    for node in smp.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotation = ast.unparse(node.annotation)
            fields[node.target.id] = re.fullmatch(r"Optional\[(\w+)\]", annotation).group(1)
    return fields


def smp_v1_parameters() -> list[str]:
    """The SMP v1 keys SDK 2.x validates (`fw_utils.validate_mp_config`): the keys it reads from
    `config`, not the values it compares them with."""
    import inspect

    tree = ast.parse(inspect.getsource(fw_utils.validate_mp_config))
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("validate_in", "validate_positive"):
            if isinstance(node.args[0], ast.Constant):
                keys.add(node.args[0].value)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and isinstance(node.args[0], ast.Constant):
            keys.add(node.args[0].value)
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In) and isinstance(node.left, ast.Constant):
            if getattr(node.comparators[0], "id", None) == "config":
                keys.add(node.left.value)
        elif (
            isinstance(node, ast.Subscript)
            and getattr(node.value, "id", None) == "config"
            and isinstance(node.slice, ast.Constant)
        ):
            keys.add(node.slice.value)
        elif isinstance(node, ast.For) and isinstance(node.iter, ast.List):
            keys.update(element.value for element in node.iter.elts if isinstance(element, ast.Constant))
    return sorted(keys)


def sources() -> dict[str, str]:
    def dist_version(directory: Path, name: str) -> str:
        return _one([p.name.removeprefix(f"{name}-").removesuffix(".dist-info") for p in directory.glob(f"{name}-*.dist-info")])

    return {
        "botocore": metadata.version("botocore"),
        "sagemaker": metadata.version("sagemaker"),
        "sagemaker-core": dist_version(SDK3, "sagemaker_core"),
        "sagemaker-train": dist_version(SDK3, "sagemaker_train"),
        "sagemaker-hyperpod": _one_file("sagemaker_hyperpod-*.whl").name.split("-")[1],
        "sagemaker-training": _one_file("sagemaker_training-*.tar.gz")
        .name.removeprefix("sagemaker_training-")
        .removesuffix(".tar.gz"),
    }


def generated_date(content: dict[str, Any]) -> str:
    """Keep the committed date while the content is unchanged, so regenerating is a no-op."""
    if OUTPUT.exists():
        previous = json.loads(OUTPUT.read_text())
        if previous.pop("generated", None) and json.loads(json.dumps(content)) == previous:
            return json.loads(OUTPUT.read_text())["generated"]
    return datetime.date.today().isoformat()


def render(data: dict[str, Any]) -> str:
    """JSON with short objects on one line and long ones one entry a line: compact, and a version
    bump or a new region reads as a short diff."""

    def block(value: Any, depth: int) -> str:
        inline = json.dumps(value, sort_keys=True)
        if len(inline) <= INLINE_WIDTH or not isinstance(value, dict | list):
            return inline
        pad = " " * (depth + 1)
        if isinstance(value, list):
            return "[\n" + ",\n".join(pad + block(item, depth + 1) for item in value) + "\n" + " " * depth + "]"
        items = [f"{pad}{json.dumps(key)}: {block(item, depth + 1)}" for key, item in sorted(value.items())]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"

    return block(data, 0) + "\n"


def _assigned_literal(source: str, name: str) -> Any:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == name for target in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{name} not found")


def _one_file(pattern: str) -> Path:
    return Path(_one([str(p) for p in SOURCES.glob(pattern)]))


def _one(values: Iterable[str]) -> str:
    (value,) = set(values)
    return value


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _instance_key(name: str) -> tuple[str, int, str]:
    _, family, size = name.split(".")
    digits = re.match(r"\d*", size).group()
    return family, int(digits or 0), size


if __name__ == "__main__":
    main()
