"""The rules a job spec must pass before anything is billed. Pure functions over the spec.

Each rule returns `Problem`s naming the field, the value, the rule broken and the fix. The only
outside fact a rule needs (how many objects a ShardedByS3Key channel holds) is passed in as a
function, so the rules stay testable offline and the Lambda supplies the S3 call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainstack.instances import CATALOG, InstanceType, lookup
from trainstack.spec import JobSpec

MAX_RUNTIME_SECONDS = 28 * 86400
MAX_WARM_POOL_SECONDS = 21600
MAX_HYPERPARAMETERS = 100
MAX_HYPERPARAMETER_KEY = 256
MAX_HYPERPARAMETER_VALUE = 2500
MAX_TAGS = 50
TAG_KEY = re.compile(r"^[\w\s.:/=+\-@]{1,128}$", re.UNICODE)
TAG_VALUE = re.compile(r"^[\w\s.:/=+\-@]{0,256}$", re.UNICODE)
ENVIRONMENT_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,511}$")
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
EXACT_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
EFA_ONLY_VARIABLES = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA")

# Version windows the SageMaker Python SDK 2.257 enforces (shared/reference §2).
TORCH_DISTRIBUTED_VERSIONS = ((1, 13, 1), (2, 8, 0))
SMDDP_VERSIONS = ((1, 10, 0), (2, 2, 0))
SMP_V2_VERSIONS = ((2, 0, 0), (2, 5, 1))


@dataclass(frozen=True)
class Problem:
    field: str
    value: Any
    rule: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field} = {json.dumps(self.value, default=str)}: {self.rule}; {self.fix}"


class SpecRejectedError(ValueError):
    """The spec breaks one or more rules; nothing was launched."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class Plan:
    """What the spec resolves to: the strategy, the SDK distribution dict, the world size."""

    strategy: str
    distribution: dict[str, Any]
    instance: InstanceType
    world_size: int
    smp_parameters: dict[str, Any]


def resolve(spec: JobSpec) -> Plan:
    """Normalise `strategy` / `distribution` into one plan (call after `check`)."""
    instance = CATALOG[spec.instance_type]
    world_size = spec.instance_count * max(instance.accelerators, 1)
    strategy, distribution = _strategy_and_distribution(spec)
    smp = distribution.get("smdistributed", {}).get("modelparallel", {}).get("parameters", {}) if strategy == "smp" else {}
    return Plan(strategy, distribution, instance, world_size, dict(smp))


def check(spec: JobSpec, count_objects: Callable[[str], int] | None = None) -> list[Problem]:
    """Every problem with the spec; an empty list means it may launch."""
    instance = lookup(spec.instance_type)
    if instance is None:
        known = ", ".join(sorted(CATALOG))
        return [Problem("instance_type", spec.instance_type, "unknown training instance type", f"use one of {known}")]
    problems = _distribution_problems(spec)
    if problems:
        return problems
    plan = resolve(spec)
    for rule in (_strategy_fits, _versions, _degrees, _efa_settings, _stopping, _warm_pool, _hyperparameters, _names):
        problems += rule(spec, plan)
    if count_objects is not None:
        problems += _sharded_inputs(spec, count_objects)
    return problems


def check_or_raise(spec: JobSpec, count_objects: Callable[[str], int] | None = None) -> Plan:
    problems = check(spec, count_objects)
    if problems:
        raise SpecRejectedError(problems)
    return resolve(spec)


def _strategy_and_distribution(spec: JobSpec) -> tuple[str, dict[str, Any]]:
    torch_distributed = {"torch_distributed": {"enabled": True}}
    if spec.strategy is not None:
        return spec.strategy, {
            "ddp": torch_distributed,
            "fsdp": torch_distributed,
            "smddp": {"smdistributed": {"dataparallel": {"enabled": True}}},
            "smp": {**torch_distributed, "smdistributed": {"modelparallel": {"enabled": True, "parameters": {}}}},
        }[spec.strategy]
    distribution = spec.distribution or torch_distributed
    smdistributed = distribution.get("smdistributed", {})
    if smdistributed.get("modelparallel", {}).get("enabled"):
        return "smp", distribution
    if smdistributed.get("dataparallel", {}).get("enabled") or distribution.get("pytorchddp", {}).get("enabled"):
        return "smddp", {"smdistributed": {"dataparallel": {"enabled": True}}}
    chosen = str(spec.hyperparameters.get("strategy", "ddp"))
    return ("fsdp" if chosen == "fsdp" else "ddp"), distribution


def _distribution_problems(spec: JobSpec) -> list[Problem]:
    distribution = spec.distribution or {}
    if "mpi" in distribution and not distribution.get("smdistributed"):
        return [
            Problem(
                "distribution.mpi",
                distribution["mpi"],
                "train.py runs under torchrun, not mpirun",
                'use {"torch_distributed": {"enabled": true}} or strategy: ddp',
            )
        ]
    if "instance_groups" in distribution:
        return [
            Problem(
                "distribution.instance_groups",
                distribution["instance_groups"],
                "heterogeneous clusters are not supported yet",
                "use one instance_type with instance_count",
            )
        ]
    known = {"torch_distributed", "smdistributed", "pytorchddp", "mpi"}
    return [
        Problem(f"distribution.{key}", value, "unknown distribution key", f"use the SageMaker SDK keys {sorted(known)}")
        for key, value in distribution.items()
        if key not in known
    ]


def _strategy_fits(spec: JobSpec, plan: Plan) -> list[Problem]:
    instance, field = plan.instance, "strategy" if spec.strategy else "distribution"
    problems = []
    if plan.strategy in ("smddp", "smp") and (instance.accelerators == 0 or instance.neuron):
        problems.append(
            Problem(
                field,
                plan.strategy,
                f"{plan.strategy} needs NVIDIA GPUs; {instance.name} has none",
                "choose a ml.p4d/p5-class instance or strategy ddp",
            )
        )
    elif plan.strategy == "smddp" and not instance.smddp:
        supported = ", ".join(sorted(n for n, t in CATALOG.items() if t.smddp))
        problems.append(
            Problem(
                field,
                "smddp",
                f"SMDDP does not support {instance.name}",
                f"use {supported}, or strategy ddp / fsdp (NCCL over EFA) on {instance.name}",
            )
        )
    if plan.strategy == "smp" and spec.image and "smdistributed-modelparallel" not in spec.image:
        problems.append(
            Problem(
                "image",
                spec.image,
                "SMP v2 needs the SMP image; the plain DLC lacks torch.sagemaker",
                "omit image to use the SMP image for framework_version",
            )
        )
    if plan.strategy in ("smddp", "smp") and plan.world_size < 2:
        problems.append(
            Problem(field, plan.strategy, "needs at least 2 GPUs in the job", "use a multi-GPU instance or instance_count >= 2")
        )
    return problems


def _versions(spec: JobSpec, plan: Plan) -> list[Problem]:
    if spec.image:
        return []
    if not EXACT_VERSION.match(spec.framework_version):
        return [Problem("framework_version", spec.framework_version, "needs an exact version", 'write it as x.y.z, e.g. "2.3.1"')]
    version = tuple(int(part) for part in spec.framework_version.split("."))
    window = {"smddp": SMDDP_VERSIONS, "smp": SMP_V2_VERSIONS}.get(plan.strategy, TORCH_DISTRIBUTED_VERSIONS)
    low, high = window
    if not low <= version <= high:
        span = f"{'.'.join(map(str, low))} to {'.'.join(map(str, high))}"
        return [
            Problem(
                "framework_version",
                spec.framework_version,
                f"{plan.strategy} supports PyTorch {span}",
                f"pick a version in {span}",
            )
        ]
    return []


def _degrees(spec: JobSpec, plan: Plan) -> list[Problem]:
    problems = []
    hybrid = int(plan.smp_parameters.get("hybrid_shard_degree", 0) or 0)
    tensor = int(plan.smp_parameters.get("tensor_parallel_degree", 1) or 1)
    for name, degree in (("hybrid_shard_degree", hybrid), ("tensor_parallel_degree", tensor)):
        if degree and plan.world_size % degree:
            field = f"distribution.smdistributed.modelparallel.parameters.{name}"
            problems.append(
                Problem(
                    field,
                    degree,
                    f"does not divide the world size {plan.world_size} "
                    f"({spec.instance_count} x {plan.instance.accelerators} GPUs)",
                    "choose a divisor of the world size",
                )
            )
    if not problems and hybrid and tensor > 1 and plan.world_size % (hybrid * tensor):
        problems.append(
            Problem(
                "distribution.smdistributed.modelparallel.parameters",
                plan.smp_parameters,
                f"hybrid_shard_degree x tensor_parallel_degree does not divide {plan.world_size}",
                "make their product divide the world size",
            )
        )
    return problems


def _efa_settings(spec: JobSpec, plan: Plan) -> list[Problem]:
    if plan.instance.efa:
        return []
    return [
        Problem(
            f"environment.{key}",
            spec.environment[key],
            f"{plan.instance.name} has no EFA",
            "remove it, or choose an EFA instance (p4d, p5, trn1)",
        )
        for key in EFA_ONLY_VARIABLES
        if key in spec.environment
    ]


def _stopping(spec: JobSpec, plan: Plan) -> list[Problem]:
    problems = []
    if spec.max_runtime > MAX_RUNTIME_SECONDS or spec.max_runtime < 1:
        problems.append(
            Problem(
                "max_runtime",
                spec.max_runtime,
                "SageMaker allows 1 second to 28 days",
                "use at most 28d and checkpoint to continue in a new job",
            )
        )
    if spec.spot.enabled:
        if spec.spot.max_wait is not None and spec.spot.max_wait < spec.max_runtime:
            problems.append(
                Problem(
                    "spot.max_wait",
                    spec.spot.max_wait,
                    f"must be at least max_runtime ({spec.max_runtime} s)",
                    "raise spot.max_wait or lower max_runtime",
                )
            )
        if spec.spot.max_wait is not None and spec.spot.max_wait > MAX_RUNTIME_SECONDS:
            problems.append(Problem("spot.max_wait", spec.spot.max_wait, "SageMaker allows at most 28 days", "use at most 28d"))
        if not spec.checkpoints:
            problems.append(
                Problem(
                    "checkpoints",
                    False,
                    "a spot job without checkpoints restarts from scratch after every interruption",
                    "set checkpoints: true",
                )
            )
    return problems


def _warm_pool(spec: JobSpec, plan: Plan) -> list[Problem]:
    if spec.warm_pool is not None and not 0 <= spec.warm_pool <= MAX_WARM_POOL_SECONDS:
        return [Problem("warm_pool", spec.warm_pool, "warm pools keep instances at most 6 hours (21600 s)", "use at most 6h")]
    return []


def _hyperparameters(spec: JobSpec, plan: Plan) -> list[Problem]:
    problems = []
    for key, value in spec.hyperparameters.items():
        if key.startswith("sagemaker_"):
            problems.append(
                Problem(
                    f"hyperparameters.{key}", value, "sagemaker_* names are set by trainstack from the distribution", "remove it"
                )
            )
        if len(key) > MAX_HYPERPARAMETER_KEY:
            problems.append(
                Problem(
                    f"hyperparameters.{key[:40]}...",
                    None,
                    f"names are at most {MAX_HYPERPARAMETER_KEY} characters",
                    "shorten the name",
                )
            )
        try:
            encoded = json.dumps(value, allow_nan=False)
        except ValueError:
            problems.append(
                Problem(
                    f"hyperparameters.{key}",
                    str(value),
                    "not JSON-encodable (NaN or infinity)",
                    "use a finite number or a string",
                )
            )
            continue
        if len(encoded) > MAX_HYPERPARAMETER_VALUE:
            problems.append(
                Problem(
                    f"hyperparameters.{key}",
                    f"{encoded[:40]}...",
                    f"encoded value is {len(encoded)} characters, the limit is {MAX_HYPERPARAMETER_VALUE}",
                    "pass large configuration as an input channel",
                )
            )
    if len(spec.hyperparameters) > MAX_HYPERPARAMETERS - 12:  # room for the sagemaker_* entries
        problems.append(
            Problem(
                "hyperparameters",
                len(spec.hyperparameters),
                f"at most {MAX_HYPERPARAMETERS - 12} leave room for the {12} trainstack sets",
                "pass configuration as a file in an input channel",
            )
        )
    return problems


def _names(spec: JobSpec, plan: Plan) -> list[Problem]:
    problems = []
    if len(spec.tags) > MAX_TAGS - 5:
        problems.append(
            Problem(
                "tags", len(spec.tags), f"at most {MAX_TAGS - 5} user tags (trainstack adds its lineage tags)", "drop some tags"
            )
        )
    for key, value in spec.tags.items():
        if key.lower().startswith("aws:"):
            problems.append(Problem(f"tags.{key}", value, "the aws: prefix is reserved", "rename the tag key"))
        elif not TAG_KEY.match(key):
            problems.append(
                Problem(
                    f"tags.{key}",
                    value,
                    "tag keys are 1-128 letters, digits, spaces or _.:/=+-@ (case-sensitive)",
                    "rename the tag key",
                )
            )
        if not TAG_VALUE.match(value):
            problems.append(
                Problem(f"tags.{key}", value, "tag values are 0-256 letters, digits, spaces or _.:/=+-@", "change the value")
            )
    for key, value in spec.environment.items():
        if not ENVIRONMENT_KEY.match(key):
            problems.append(
                Problem(
                    f"environment.{key}",
                    value,
                    "variable names are letters, digits and _, not starting with a digit",
                    "rename the variable",
                )
            )
        if len(value) > 512:
            problems.append(
                Problem(f"environment.{key}", f"{value[:40]}...", "values are at most 512 characters", "shorten the value")
            )
    for name in spec.inputs:
        if not CHANNEL_NAME.match(name):
            problems.append(
                Problem(f"inputs.{name}", name, "channel names are 1-64 letters, digits or .-_", "rename the channel")
            )
    return problems


def _sharded_inputs(spec: JobSpec, count_objects: Callable[[str], int]) -> list[Problem]:
    problems = []
    for name, channel in spec.inputs.items():
        if channel.distribution == "ShardedByS3Key":
            objects = count_objects(channel.s3_uri)
            if objects < spec.instance_count:
                problems.append(
                    Problem(
                        f"inputs.{name}.distribution",
                        "ShardedByS3Key",
                        f"{channel.s3_uri} holds {objects} objects for {spec.instance_count} instances: some would get no data",
                        f"split the data into at least {spec.instance_count} objects, or use FullyReplicated",
                    )
                )
    return problems
