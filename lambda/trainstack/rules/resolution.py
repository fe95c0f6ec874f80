"""What a spec resolves to once its rules pass: `strategy` or `distribution` normalised into one
strategy and the SDK distribution dict, the instance, the world size and the framework image."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainstack import facts, images
from trainstack.facts import ImageKind
from trainstack.images import MPI, SMDATAPARALLEL, TORCH_DISTRIBUTED, FrameworkVersion
from trainstack.instances import CATALOG, InstanceType
from trainstack.spec import JobSpec


@dataclass(frozen=True)
class Resolution:
    """What the spec resolves to: the strategy, the SDK distribution dict, the instance, the world size, the image."""

    strategy: str
    distribution: dict[str, Any]  # the SDK dict with only the enabled launchers, pytorchddp rewritten as the SDK does
    instance: InstanceType
    world_size: int
    smp_parameters: dict[str, Any]
    image_kind: ImageKind
    framework: FrameworkVersion | None  # None with a user's own `image`, or when no supported version matches
    py_version: str | None

    @property
    def launchers(self) -> frozenset[str]:
        return _launchers(self.distribution)

    @property
    def framework_version(self) -> str | None:
        return self.framework.version if self.framework else None

    def to_json(self) -> dict[str, Any]:
        """How the state machine carries it from Validate, which resolves the spec, to Create."""
        return {
            "strategy": self.strategy,
            "distribution": self.distribution,
            "instance_type": self.instance.name,
            "world_size": self.world_size,
            "smp_parameters": self.smp_parameters,
            "image_kind": self.image_kind,
            "framework": None
            if self.framework is None
            else {"version": self.framework.version, "written": self.framework.written},
            "py_version": self.py_version,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Resolution:
        framework = data["framework"]
        return cls(
            strategy=data["strategy"],
            distribution=data["distribution"],
            instance=CATALOG[data["instance_type"]],
            world_size=data["world_size"],
            smp_parameters=data["smp_parameters"],
            image_kind=data["image_kind"],
            framework=None if framework is None else FrameworkVersion(framework["version"], framework["written"]),
            py_version=data["py_version"],
        )


def resolve(spec: JobSpec) -> Resolution:
    """Normalise `strategy` / `distribution` and the framework version into one resolution (call after `check`)."""
    instance = CATALOG[spec.instance_type]
    strategy, distribution = _strategy_and_distribution(spec)
    kind = images.image_kind(strategy, instance)
    per_host = distribution.get("mpi", {}).get("processes_per_host") or max(instance.accelerators, 1)
    smp = distribution.get("smdistributed", {}).get("modelparallel", {}).get("parameters", {}) if strategy == "smp" else {}
    framework, py_version = None, None
    if not spec.image:
        framework = images.resolve(kind, _launchers(distribution), spec.framework_version)
        if framework is not None:
            py_version = spec.py_version or facts.default_py_version(kind, framework.version)
    return Resolution(strategy, distribution, instance, spec.instance_count * per_host, dict(smp), kind, framework, py_version)


def _launchers(distribution: Mapping[str, Any]) -> frozenset[str]:
    """The launchers an enabled-only distribution runs, named as the SDK's version lists name them."""
    enabled = {TORCH_DISTRIBUTED, MPI} & set(distribution)
    if "dataparallel" in distribution.get("smdistributed", {}):
        enabled.add(SMDATAPARALLEL)
    return frozenset(enabled)


def enabled_only(distribution: Mapping[str, Any]) -> dict[str, Any]:
    """Only the launchers with `enabled: true`; `pytorchddp` becomes smdistributed.dataparallel, as
    the SDK's estimator rewrites it."""
    kept: dict[str, Any] = {}
    for key, value in distribution.items():
        if key == "smdistributed":
            inner = {name: launcher for name, launcher in value.items() if launcher.get("enabled") is True}
            if inner:
                kept["smdistributed"] = {**kept.get("smdistributed", {}), **inner}
        elif key == "pytorchddp" and value.get("enabled") is True:
            kept["smdistributed"] = {**kept.get("smdistributed", {}), "dataparallel": dict(value)}
        elif value.get("enabled") is True:
            kept[key] = dict(value)
    return kept


def _strategy_and_distribution(spec: JobSpec) -> tuple[str, dict[str, Any]]:
    torch_distributed = {TORCH_DISTRIBUTED: {"enabled": True}}
    if spec.strategy is not None:
        return spec.strategy, {
            "ddp": torch_distributed,
            "fsdp": torch_distributed,
            "smddp": {"smdistributed": {"dataparallel": {"enabled": True}}},
            "smp": {**torch_distributed, "smdistributed": {"modelparallel": {"enabled": True, "parameters": {}}}},
        }[spec.strategy]
    distribution = enabled_only(spec.distribution or {})
    if not distribution:  # nothing enabled: the default launcher, as with no distribution at all
        distribution = torch_distributed
    smdistributed = distribution.get("smdistributed", {})
    if "modelparallel" in smdistributed:
        return "smp", distribution
    if "dataparallel" in smdistributed:
        return "smddp", distribution
    chosen = str(spec.hyperparameters.get("strategy", "ddp"))
    return ("fsdp" if chosen == "fsdp" else "ddp"), distribution
