"""Instances and capacity: the instance types, the capacity fallback list (InstancePreferences),
training plans, the pending-time limit, the EFA-only settings, and managed spot."""

from __future__ import annotations

import difflib

from trainstack import facts
from trainstack.api_model import matches_pattern
from trainstack.instances import CATALOG, lookup
from trainstack.rules.api_limits import DAY, limits
from trainstack.rules.problems import Problem
from trainstack.rules.resolution import Resolution
from trainstack.spec import JobSpec

EFA_ONLY_VARIABLES = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA")


def option_problems(spec: JobSpec) -> list[Problem]:
    """Each capacity option must be a training instance type trainstack knows."""
    problems = []
    for index, name in enumerate(spec.capacity_options):
        field = f"instance_types[{index}]" if spec.instance_types else "instance_type"
        problems += [Problem(field, p.value, p.rule, p.fix) for p in _instance_problems(name)]
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
        hint = f"did you mean {', '.join(close)}?" if close else "see docs/support-matrix.md for the types trainstack knows"
        return [Problem("instance_type", name, "not a SageMaker training instance type", hint)]
    if instance.sdk_refusal:
        return [
            Problem("instance_type", name, instance.sdk_refusal, "choose a current GPU type, e.g. ml.g5, ml.g6, ml.p4d or ml.p5")
        ]
    return []


def capacity_problems(spec: JobSpec) -> list[Problem]:
    """Capacity fallback (InstancePreferences), training plans and the pending-time limit, as the
    CreateTrainingJob API documents them. `check` runs it only once every option is in CATALOG and
    `distribution` has passed (so it has no instance_groups, which are refused)."""
    problems = []
    if spec.instance_types:
        options = spec.instance_types
        most = limits().instance_preferences
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
        least, most = limits().pending
        if not least <= spec.max_pending <= most:
            problems.append(
                Problem(
                    "max_pending",
                    spec.max_pending,
                    f"SageMaker allows {least} to {most} seconds of pending",
                    f"use between {least // 60}m and {most // DAY}d",
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


def efa_variable_problems(spec: JobSpec, resolution: Resolution) -> list[Problem]:
    if resolution.instance.efa:
        return []
    return [
        Problem(
            f"environment.{key}",
            spec.environment[key],
            f"{resolution.instance.name} has no EFA",
            "remove it, or choose an EFA instance (p4d, p5, trn1)",
        )
        for key in EFA_ONLY_VARIABLES
        if key in spec.environment
    ]


def spot_problems(spec: JobSpec) -> list[Problem]:
    if not spec.spot.enabled:
        return []
    problems = []
    if spec.spot.max_wait is not None and spec.spot.max_wait < spec.max_runtime:
        problems.append(
            Problem(
                "spot.max_wait",
                spec.spot.max_wait,
                f"must be at least max_runtime ({spec.max_runtime} s)",
                "raise spot.max_wait or lower max_runtime",
            )
        )
    most = limits().runtime[1]
    if spec.spot.max_wait is not None and spec.spot.max_wait > most:
        problems.append(
            Problem(
                "spot.max_wait", spec.spot.max_wait, f"SageMaker allows at most {most // DAY} days", f"use at most {most // DAY}d"
            )
        )
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
