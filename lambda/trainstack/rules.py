"""The rules a job spec must pass before anything is billed. Pure functions over the spec.

Each rule returns `Problem`s naming the field, the value, the rule broken and the fix. The outside
facts a rule needs are passed in: how many objects a ShardedByS3Key channel holds (a function, so
the Lambda supplies the S3 call) and the region the job would run in (images differ per region).
Framework facts (versions, images, launcher lists, SMP keys, instances) come from the facts file.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainstack import facts, images
from trainstack.api_model import matches_pattern, member_metadata
from trainstack.facts import ImageKind, ImageUnavailableError
from trainstack.identity import TAG_KEYS
from trainstack.images import MPI, SMDATAPARALLEL, TORCH_DISTRIBUTED, Resolution
from trainstack.instances import CATALOG, InstanceType, efa_environment, lookup
from trainstack.spec import JobSpec

MAX_RUNTIME_SECONDS = 28 * 86400
MAX_WARM_POOL_SECONDS = 21600
MAX_HYPERPARAMETERS = 100
MAX_HYPERPARAMETER_KEY = 256
MAX_HYPERPARAMETER_VALUE = 2500
MAX_ENVIRONMENT = 100  # CreateTrainingJob's TrainingEnvironmentMap (botocore: max 100 entries)
MAX_TAGS = 50
TAG_KEY = re.compile(r"^[\w\s.:/=+\-@]{1,128}$", re.UNICODE)
TAG_VALUE = re.compile(r"^[\w\s.:/=+\-@]{0,256}$", re.UNICODE)
RESERVED_ENVIRONMENT_PREFIX = "TRAINSTACK_"  # the training script's test hooks (trainstack_training/faults.py)
ENVIRONMENT_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,511}$")
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
EFA_ONLY_VARIABLES = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA")

# The keys the SageMaker SDK 2.x PyTorch estimator reads from `distribution`, and from each launcher.
LAUNCHER_KEYS: Mapping[str, frozenset[str]] = {
    "torch_distributed": frozenset({"enabled"}),
    "mpi": frozenset({"enabled", "processes_per_host", "custom_mpi_options"}),
    "pytorchddp": frozenset({"enabled", "custom_mpi_options"}),  # the SDK rewrites it to smdistributed.dataparallel
    "pytorchxla": frozenset({"enabled"}),
    "smdistributed.dataparallel": frozenset({"enabled", "custom_mpi_options"}),
    "smdistributed.modelparallel": frozenset({"enabled", "parameters"}),
}
DISTRIBUTION_KEYS = ("torch_distributed", "smdistributed", "mpi", "pytorchddp", "pytorchxla", "instance_groups")

# What an SMP v1 parameter became in SMP v2, for the message that refuses it. The v1 keys the SDK
# validates come from the facts file (a test checks each has an entry here); the rest are SMP v1
# documentation keys the SDK passes through unchecked.
NO_PIPELINE = "pipeline parallelism is not in SMP v2; shard with hybrid_shard_degree and split layers with tensor_parallel_degree"
SMP_V1_EQUIVALENTS: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "partitions",
            "pipeline",
            "microbatches",
            "active_microbatches",
            "auto_partition",
            "default_partition",
            "contiguous",
            "memory_weight",
            "partition_file",
            "load_partition",
            "placement_strategy",
        ),
        NO_PIPELINE,
    ),
    **dict.fromkeys(
        ("ddp", "ddp_port", "ddp_dist_backend", "horovod"),
        "SMP v2 always runs PyTorch FSDP under torchrun; set hybrid_shard_degree for its data-parallel sharding",
    ),
    "optimize": "SMP v2 has no speed/memory switch; use sm_activation_offloading and activation_loading_horizon",
    "deterministic_server": "not in SMP v2; set random_seed for reproducible tensor/expert-parallel modules",
    "sharded_data_parallel_degree": "SMP v2 calls it hybrid_shard_degree",
    "offload_activations": "SMP v2 calls it sm_activation_offloading",
    "shard_optimizer_state": "SMP v2 shards optimizer state with FSDP; set hybrid_shard_degree",
    "delayed_parameter_initialization": "SMP v2 has no such key; create the model on the meta device in the script",
    **dict.fromkeys(
        ("fp16", "bf16", "fp16_params"),
        "SMP v2 has no precision key; set precision in the script (FSDP mixed precision)",
    ),
}


@dataclass(frozen=True)
class Problem:
    field: str
    value: Any
    rule: str
    fix: str

    def __str__(self) -> str:
        if self.value is None:  # the rule names the value itself
            return f"{self.field}: {self.rule}; {self.fix}"
        return f"{self.field} = {json.dumps(self.value, default=str)}: {self.rule}; {self.fix}"


class SpecRejectedError(ValueError):
    """The spec breaks one or more rules; nothing was launched."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class Plan:
    """What the spec resolves to: the strategy, the SDK distribution dict, the world size, the image."""

    strategy: str
    distribution: dict[str, Any]  # the SDK dict with only the enabled launchers, pytorchddp rewritten as the SDK does
    instance: InstanceType
    world_size: int
    smp_parameters: dict[str, Any]
    image_kind: ImageKind
    framework: Resolution | None  # None with a user's own `image`, or when no supported version matches
    py_version: str | None

    @property
    def launchers(self) -> frozenset[str]:
        return _launchers(self.distribution)

    @property
    def framework_version(self) -> str | None:
        return self.framework.version if self.framework else None


def resolve(spec: JobSpec) -> Plan:
    """Normalise `strategy` / `distribution` and the framework version into one plan (call after `check`)."""
    instance = CATALOG[spec.instance_type]
    strategy, distribution = _strategy_and_distribution(spec)
    launchers = _launchers(distribution)
    kind = images.image_kind(strategy, instance)
    per_host = distribution.get("mpi", {}).get("processes_per_host") or max(instance.accelerators, 1)
    smp = distribution.get("smdistributed", {}).get("modelparallel", {}).get("parameters", {}) if strategy == "smp" else {}
    framework, py_version = None, None
    if not spec.image:
        framework = images.resolve(kind, launchers, spec.framework_version)
        if framework is not None:
            py_version = spec.py_version or facts.default_py_version(kind, framework.version)
    return Plan(strategy, distribution, instance, spec.instance_count * per_host, dict(smp), kind, framework, py_version)


def check(spec: JobSpec, count_objects: Callable[[str], int] | None = None, region: str | None = None) -> list[Problem]:
    """Every problem with the spec; an empty list means it may launch. With `region`, also whether
    its framework image exists there."""
    problems = _option_problems(spec) or _distribution_problems(spec)
    if problems:
        return problems
    problems += _capacity(spec)
    for index, name in enumerate(spec.capacity_options[1:], start=1):  # each fallback must work as well
        alternative = spec.model_copy(update={"instance_type": name, "instance_types": None, "max_pending": None})
        problems += [
            Problem(f"instance_types[{index}] ({name}): {p.field}", p.value, p.rule, p.fix)
            for p in check(alternative, None, region)
        ]
    plan = resolve(spec)
    rules = (
        _strategy_fits,
        _trainium,
        _versions,
        _smp_parameters,
        _degrees,
        _efa_settings,
        _stopping,
        _warm_pool,
        _hyperparameters,
        _names,
    )
    for rule in rules:
        problems += rule(spec, plan)
    if region is not None:
        problems += _image_in_region(spec, plan, region)
    if count_objects is not None:
        problems += _sharded_inputs(spec, count_objects)
    return problems


def check_or_raise(spec: JobSpec, count_objects: Callable[[str], int] | None = None, region: str | None = None) -> Plan:
    problems = check(spec, count_objects, region)
    if problems:
        raise SpecRejectedError(problems)
    return resolve(spec)


def _option_problems(spec: JobSpec) -> list[Problem]:
    problems = []
    for index, name in enumerate(spec.capacity_options):
        field = f"instance_types[{index}]" if spec.instance_types else "instance_type"
        problems += [Problem(field, p.value, p.rule, p.fix) for p in _instance_problems(name)]
    return problems


def _capacity(spec: JobSpec) -> list[Problem]:
    """Capacity fallback (InstancePreferences), training plans and the pending-time limit, as the
    CreateTrainingJob API documents them. `check` runs it only once every option is in CATALOG and
    `distribution` has passed (so it has no instance_groups, which are refused)."""
    problems = []
    if spec.instance_types:
        options = spec.instance_types
        most = member_metadata("ResourceConfig", "InstancePreferences")["max"]
        if len(options) > most:
            problems.append(
                Problem("instance_types", len(options), f"SageMaker takes at most {most} preferences", "keep the best five")
            )
        repeated = sorted({name for name in options if options.count(name) > 1})
        if repeated:
            problems.append(
                Problem("instance_types", repeated, "an instance type can appear only once in the list", "remove the repeats")
            )
        if spec.spot.enabled:
            problems.append(
                Problem(
                    "instance_types",
                    options,
                    "a capacity fallback list (InstancePreferences) takes only on-demand or flexible training plan "
                    "capacity; SageMaker refuses it with managed spot training",
                    "give one instance_type for spot, or turn spot off",
                )
            )
        kinds = {(CATALOG[n].efa, CATALOG[n].rdma) for n in options}
        if len(kinds) > 1:
            problems.append(
                Problem(
                    "instance_types",
                    options,
                    "the job's EFA settings (FI_PROVIDER, GPUDirect RDMA) are fixed at creation, and these types differ "
                    "in EFA support: a fallback would start with settings that break NCCL or libfabric",
                    "list only types that all have EFA with RDMA, or all lack it",
                )
            )
    if spec.training_plan_arn is not None and not matches_pattern("ResourceConfig", "TrainingPlanArn", spec.training_plan_arn):
        problems.append(
            Problem(
                "training_plan_arn",
                spec.training_plan_arn,
                "not a training plan ARN",
                "copy it from `aws sagemaker list-training-plans` (arn:aws:sagemaker:<region>:<account>:training-plan/<name>)",
            )
        )
    if spec.max_pending is not None:
        limits = member_metadata("StoppingCondition", "MaxPendingTimeInSeconds")
        if not limits["min"] <= spec.max_pending <= limits["max"]:
            problems.append(
                Problem(
                    "max_pending",
                    spec.max_pending,
                    f"SageMaker allows {limits['min']} to {limits['max']} seconds of pending",
                    "use between 30m and 28d",
                )
            )
        cpu_only = [n for n in spec.capacity_options if CATALOG[n].kind == "cpu"]
        if cpu_only:
            problems.append(
                Problem(
                    "max_pending",
                    spec.max_pending,
                    f"MaxPendingTimeInSeconds has no effect on CPU-only types ({', '.join(cpu_only)})",
                    "remove max_pending, or use an accelerated type (ml.p, ml.g, ml.trn)",
                )
            )
    return problems


def _instance_problems(name: str) -> list[Problem]:
    if name in facts.load().unsourced_instances:
        return [
            Problem(
                "instance_type",
                name,
                "SageMaker offers it, but no source trainstack reads gives its accelerator count and memory",
                "choose another type, or add its facts to tools/facts/hand_facts.py with their source and run make facts",
            )
        ]
    instance = lookup(name)
    if instance is None:
        close = difflib.get_close_matches(name, list(CATALOG), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see the README's support matrix for the types trainstack knows"
        return [Problem("instance_type", name, "not a SageMaker training instance type", hint)]
    if instance.sdk_refusal:
        return [
            Problem("instance_type", name, instance.sdk_refusal, "choose a current GPU type, e.g. ml.g5, ml.g6, ml.p4d or ml.p5")
        ]
    return []


def _launchers(distribution: Mapping[str, Any]) -> frozenset[str]:
    enabled = {TORCH_DISTRIBUTED, MPI} & set(distribution)
    if "dataparallel" in distribution.get("smdistributed", {}):
        enabled.add(SMDATAPARALLEL)
    return frozenset(enabled)


def _strategy_and_distribution(spec: JobSpec) -> tuple[str, dict[str, Any]]:
    torch_distributed = {TORCH_DISTRIBUTED: {"enabled": True}}
    if spec.strategy is not None:
        return spec.strategy, {
            "ddp": torch_distributed,
            "fsdp": torch_distributed,
            "smddp": {"smdistributed": {"dataparallel": {"enabled": True}}},
            "smp": {**torch_distributed, "smdistributed": {"modelparallel": {"enabled": True, "parameters": {}}}},
        }[spec.strategy]
    distribution = _enabled(spec.distribution or {})
    if not distribution:  # nothing enabled: the default launcher, as with no distribution at all
        distribution = torch_distributed
    smdistributed = distribution.get("smdistributed", {})
    if "modelparallel" in smdistributed:
        return "smp", distribution
    if "dataparallel" in smdistributed:
        return "smddp", distribution
    chosen = str(spec.hyperparameters.get("strategy", "ddp"))
    return ("fsdp" if chosen == "fsdp" else "ddp"), distribution


def _enabled(distribution: Mapping[str, Any]) -> dict[str, Any]:
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


def _did_you_mean(key: str, candidates: list[str]) -> str | None:
    def normal(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    normals = {normal(candidate): candidate for candidate in candidates}
    close = difflib.get_close_matches(normal(key), list(normals), n=1, cutoff=0.75)
    return normals[close[0]] if close else None


def _means_pytorch_ddp(key: str) -> bool:
    """A key that names PyTorch's own data parallelism (pytorchx, torch_ddp, torchrun, pytorch) rather
    than XLA's: spelling alone sends `pytorchx` to pytorchxla, which is for XLA devices."""
    text = re.sub(r"[^a-z0-9]", "", key.lower())
    return "xla" not in text and (text.startswith(("pytorch", "torch")) or "ddp" in text)


def _spelled(path: str) -> str:
    """How a (dotted) distribution key is written in a spec."""
    head, _, tail = path.partition(".")
    return f"{head}: {{{tail}: {{enabled: true}}}}" if tail else f"{head}: {{enabled: true}}"


def _distribution_problems(spec: JobSpec) -> list[Problem]:
    distribution = spec.distribution or {}
    problems: list[Problem] = []
    for key, value in distribution.items():
        field = f"distribution.{key}"
        if key == "instance_groups":
            problems.append(
                Problem(field, value, "heterogeneous clusters are not supported yet", "use one instance_type with instance_count")
            )
        elif key not in DISTRIBUTION_KEYS:
            guess = _did_you_mean(key, [*DISTRIBUTION_KEYS, *LAUNCHER_KEYS])
            rule = "not a key of the SageMaker SDK's distribution" + (f"; did you mean {guess}?" if guess else "")
            fix = f"write {_spelled(guess)}" if guess else f"use the SDK's keys: {', '.join(DISTRIBUTION_KEYS[:5])}"
            if _means_pytorch_ddp(key) and guess != TORCH_DISTRIBUTED:
                rule = "not a key of the SageMaker SDK's distribution; for PyTorch DDP the key is torch_distributed" + (
                    f" ({guess} is another launcher)" if guess else ""
                )
                fix = f"write {_spelled(TORCH_DISTRIBUTED)}, or strategy: ddp"
            problems.append(Problem(field, value, rule, fix))
        elif not isinstance(value, dict):
            problems.append(Problem(field, value, "must be a mapping", f"write {_spelled(key)}"))
        elif key == "smdistributed":
            for name, launcher in value.items():
                path = f"smdistributed.{name}"
                if path not in LAUNCHER_KEYS:
                    guess = _did_you_mean(name, ["dataparallel", "modelparallel"])
                    rule = "smdistributed takes dataparallel (SMDDP) or modelparallel (SMP v2)"
                    problems.append(
                        Problem(
                            f"{field}.{name}",
                            launcher,
                            rule,
                            f"write {_spelled(f'smdistributed.{guess}')}" if guess else "use one of them",
                        )
                    )
                else:
                    problems += _launcher_problems(path, launcher)
        else:
            problems += _launcher_problems(key, value)
    return problems or _combination_problems(distribution)


def _launcher_problems(path: str, launcher: Any) -> list[Problem]:
    field = f"distribution.{path}"
    if not isinstance(launcher, dict):
        return [Problem(field, launcher, "must be a mapping", f"write {_spelled(path)}")]
    allowed = LAUNCHER_KEYS[path]
    problems = []
    for key, value in launcher.items():
        if key not in allowed:
            guess = _did_you_mean(key, sorted(allowed))
            rule = f"the SDK reads only {', '.join(sorted(allowed))} here" + (f"; did you mean {guess}?" if guess else "")
            problems.append(Problem(f"{field}.{key}", value, rule, f"rename it to {guess}" if guess else "remove it"))
    enabled = launcher.get("enabled")
    if not isinstance(enabled, bool):
        problems.append(
            Problem(
                f"{field}.enabled",
                enabled,
                "must be true or false (the SDK reads a missing enabled as false, a silent no-op)",
                "write enabled: true, or enabled: false to leave this launcher off",
            )
        )
    options = launcher.get("custom_mpi_options", "")
    if not isinstance(options, str):
        problems.append(
            Problem(f"{field}.custom_mpi_options", options, "must be a string of mpirun options", 'e.g. "-x NCCL_DEBUG=INFO"')
        )
    processes = launcher.get("processes_per_host", 1)
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        problems.append(
            Problem(f"{field}.processes_per_host", processes, "must be a positive integer", "e.g. 8 (one process per GPU)")
        )
    parameters = launcher.get("parameters", {})
    if not isinstance(parameters, dict):
        problems.append(
            Problem(f"{field}.parameters", parameters, "must be a mapping of SMP v2 parameters", "e.g. {hybrid_shard_degree: 8}")
        )
    return problems


def _combination_problems(distribution: Mapping[str, Any]) -> list[Problem]:
    """Launcher combinations the SDK refuses or silently drops. Runs on well-formed entries only."""
    if distribution.get("pytorchxla", {}).get("enabled"):
        return [
            Problem(
                "distribution.pytorchxla",
                distribution["pytorchxla"],
                "the SDK runs PyTorch/XLA only with SageMaker Training Compiler, which trainstack does not configure",
                "use torch_distributed, or enabled: false",
            )
        ]
    smdistributed_enabled = any(launcher.get("enabled") is True for launcher in distribution.get("smdistributed", {}).values())
    if distribution.get("pytorchddp", {}).get("enabled") is True and smdistributed_enabled:
        return [
            Problem(
                "distribution.pytorchddp",
                distribution["pytorchddp"],
                "the SDK refuses pytorchddp (its old name for smdistributed.dataparallel) together with smdistributed",
                "keep one of them",
            )
        ]
    enabled = _enabled(distribution)
    smdistributed = enabled.get("smdistributed", {})
    if len(smdistributed) > 1:
        return [
            Problem(
                "distribution.smdistributed",
                distribution["smdistributed"],
                "SMDDP and SMP v2 cannot both be enabled (the SDK takes one smdistributed strategy)",
                "enable one of dataparallel or modelparallel",
            )
        ]
    if "modelparallel" in smdistributed and TORCH_DISTRIBUTED not in enabled:
        return [
            Problem(
                "distribution.smdistributed.modelparallel",
                distribution["smdistributed"]["modelparallel"],
                "SMP v2 runs under torchrun; without torch_distributed the SDK picks the plain DLC and SMP v1's mpirun",
                "add torch_distributed: {enabled: true}",
            )
        ]
    if MPI in enabled and (TORCH_DISTRIBUTED in enabled or smdistributed):
        other = TORCH_DISTRIBUTED if TORCH_DISTRIBUTED in enabled else f"smdistributed.{next(iter(smdistributed))}"
        return [
            Problem(
                "distribution.mpi",
                distribution["mpi"],
                f"mpi and {other} are two launchers; the SDK drops one of them without a word",
                f"keep mpi or {other}",
            )
        ]
    return []


def _strategy_fits(spec: JobSpec, plan: Plan) -> list[Problem]:
    instance, field = plan.instance, "strategy" if spec.strategy else "distribution"
    problems = []
    if plan.strategy in ("smddp", "smp") and instance.kind != "gpu":
        problems.append(
            Problem(
                field,
                plan.strategy,
                f"{plan.strategy} needs NVIDIA GPUs; {instance.name} has none",
                "choose a ml.p4d/p5-class instance or strategy ddp",
            )
        )
    elif plan.strategy == "smddp" and instance.name not in facts.smddp_instance_types():
        supported = ", ".join(facts.smddp_instance_types())
        problems.append(
            Problem(
                field,
                "smddp",
                f"SMDDP does not support {instance.name}",
                f"use {supported}, or strategy ddp / fsdp (NCCL over EFA) on {instance.name}",
            )
        )
    if plan.strategy == "smp" and spec.image and images.repository("smp") not in spec.image:
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


def _trainium(spec: JobSpec, plan: Plan) -> list[Problem]:
    if not plan.instance.neuron:
        return []
    allowed = facts.trainium_distributions()
    if set(plan.distribution) - set(allowed):
        return [
            Problem(
                "strategy" if spec.strategy else "distribution",
                spec.strategy or spec.distribution,
                f"Trainium runs only {', '.join(allowed)} (the SDK's Trainium launchers)",
                "use torch_distributed: {enabled: true} with a Neuron (torch-neuronx) script",
            )
        ]
    if spec.source_dir is None and spec.image is None:
        return [
            Problem(
                "instance_type",
                spec.instance_type,
                "trainstack's built-in training/ entry point runs on CUDA GPUs or CPUs, not on Neuron devices: "
                "the job would be billed and find nothing to train on",
                "give source_dir with a Neuron (torch-neuronx) script, or your own image",
            )
        ]
    return []


def _launcher_name(plan: Plan) -> str:
    if plan.image_kind == "neuron":
        return "Trainium (Neuron)"
    if plan.image_kind == "smp":
        return "SMP v2"
    return {SMDATAPARALLEL: "SMDDP", MPI: "mpi"}.get(next(iter(plan.launchers - {TORCH_DISTRIBUTED}), ""), "torch_distributed")


def _versions(spec: JobSpec, plan: Plan) -> list[Problem]:
    if spec.image:
        return []
    supported = images.supported_versions(plan.image_kind, plan.launchers)
    name, written = _launcher_name(plan), spec.framework_version
    if plan.framework is None:
        exact = facts.resolve_version(plan.image_kind, written) if written else None
        if exact is None:
            rule = f"{name} has no image for PyTorch {written}" if supported else f"{name} has no image for any version"
        else:  # an image exists, but the SDK's launcher list leaves the version out
            alias = f' ("{written}" is the SDK\'s alias for it)' if exact != written else ""
            rule = f"PyTorch {exact}{alias} is not in the SDK's {name} versions"
        fix = f"use one of {', '.join(supported)}" if supported else "choose another instance type or strategy"
        return [Problem("framework_version", written, rule, fix)]
    entry = facts.image_version(plan.image_kind, plan.framework.version)
    if spec.py_version is not None and spec.py_version not in entry.py_versions:
        valid = " or ".join(entry.py_versions)
        return [
            Problem(
                "py_version",
                spec.py_version,
                f"the {images.repository(plan.image_kind)} image for PyTorch {plan.framework.version} is built for {valid}",
                f"write py_version: {valid}, or leave it out",
            )
        ]
    return []


def _image_in_region(spec: JobSpec, plan: Plan, region: str) -> list[Problem]:
    if spec.image or plan.framework is None or plan.py_version is None:
        return []
    try:
        images.image_uri(plan.image_kind, plan.framework.version, plan.py_version, region, plan.instance)
    except ImageUnavailableError as error:
        if region not in facts.load().regions:
            fix = "run in a region the README's support matrix lists, or give image"
        else:
            fix = f"run in one of {', '.join(error.choices)}" + (
                ", or use strategy ddp / fsdp" if plan.image_kind == "smp" else ""
            )
        return [Problem("region", region, error.reason, fix)]
    return []


def _smp_parameters(spec: JobSpec, plan: Plan) -> list[Problem]:
    """SMP v2 reads its parameters in `torch.sagemaker.init()`, after the cluster is billed: check them first."""
    prefix = "distribution.smdistributed.modelparallel.parameters"
    known = facts.smp_parameters()
    problems = []
    for key, value in plan.smp_parameters.items():
        if key in SMP_V1_EQUIVALENTS or key in facts.smp_v1_parameters():
            equivalent = SMP_V1_EQUIVALENTS.get(key, NO_PIPELINE)
            problems.append(Problem(f"{prefix}.{key}", value, "an SMP v1 parameter, which SMP v2 does not read", equivalent))
        elif key not in known:
            problems.append(
                Problem(f"{prefix}.{key}", value, "not an SMP v2 parameter", f"SMP v2 takes {', '.join(sorted(known))}")
            )
        elif known[key] == "bool" and not isinstance(value, bool):
            problems.append(Problem(f"{prefix}.{key}", value, "must be true or false", f"write {key}: true"))
        elif known[key] == "int" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            problems.append(Problem(f"{prefix}.{key}", value, "must be a positive integer", f"e.g. {key}: 2"))
    return problems


def _degree(plan: Plan, name: str, default: int) -> int:
    value = plan.smp_parameters.get(name, default)
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )  # bad types: _smp_parameters


def _degrees(spec: JobSpec, plan: Plan) -> list[Problem]:
    problems = []
    hybrid = _degree(plan, "hybrid_shard_degree", 0)
    tensor = _degree(plan, "tensor_parallel_degree", 1)
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
    problems = []
    if not plan.instance.efa:
        problems += [
            Problem(
                f"environment.{key}",
                spec.environment[key],
                f"{plan.instance.name} has no EFA",
                "remove it, or choose an EFA instance (p4d, p5, trn1)",
            )
            for key in EFA_ONLY_VARIABLES
            if key in spec.environment
        ]
    total = len({**efa_environment(plan.instance), **spec.environment})
    if total > MAX_ENVIRONMENT:
        problems.append(
            Problem(
                "environment",
                len(spec.environment),
                f"with trainstack's EFA variables the job has {total} environment variables; SageMaker takes {MAX_ENVIRONMENT}",
                "pass configuration as hyperparameters or a file in an input channel",
            )
        )
    return problems


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
                    len(key),
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
    if len(spec.tags) > MAX_TAGS - len(TAG_KEYS):
        problems.append(
            Problem(
                "tags",
                len(spec.tags),
                f"at most {MAX_TAGS - len(TAG_KEYS)} user tags (trainstack adds its identity tags)",
                "drop some tags",
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
        if key.startswith(RESERVED_ENVIRONMENT_PREFIX):
            problems.append(
                Problem(
                    f"environment.{key}",
                    value,
                    f"{RESERVED_ENVIRONMENT_PREFIX}* variables are trainstack's test hooks, which only its local twin sets",
                    "remove the variable",
                )
            )
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
