"""CreateTrainingJob's limits, each stated once (`limits`), and the rules that hold a spec to them:
run and warm pool time, hyperparameters, tags, environment variables, channel names. The request
builder's own check (request.validate_request) reads the same limits.

A limit botocore's SageMaker model carries is read from it (api_model.py) on first use, not at
import: loading the model takes a few tenths of a second that a Lambda's cold import should not pay.
The model states no longest run, and api_model reads structure members, not a map's keys and
values: those limits are the documented ones, typed in `limits`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache

from trainstack.api_model import member_metadata
from trainstack.identity import TAG_KEYS
from trainstack.instances import efa_environment
from trainstack.request import TRACKING_VARIABLES, TRAINSTACK_HYPERPARAMETERS
from trainstack.rules.problems import Problem
from trainstack.rules.resolution import Resolution
from trainstack.spec import JobSpec
from trainstack_contract import fault_hooks

DAY = 86400


@dataclass(frozen=True)
class Limits:
    """Counts are entries, lengths characters, times seconds; (least, most) where both ends are bounded."""

    hyperparameters: int
    hyperparameter_key: int
    hyperparameter_value: int
    environment: int
    environment_key: int
    environment_value: int
    tags: int
    tag_key: tuple[int, int]
    tag_value: tuple[int, int]
    channel_name: tuple[int, int]
    runtime: tuple[int, int]  # MaxRuntimeInSeconds; its most is also MaxWaitTimeInSeconds'
    warm_pool: tuple[int, int]  # KeepAlivePeriodInSeconds
    pending: tuple[int, int]  # MaxPendingTimeInSeconds
    instance_preferences: int


@cache
def limits() -> Limits:
    request = "CreateTrainingJobRequest"
    return Limits(
        hyperparameters=_bounds(request, "HyperParameters")[1],
        hyperparameter_key=256,  # typed, as are the environment's: the map's key and value shapes (see above)
        hyperparameter_value=2500,
        environment=_bounds(request, "Environment")[1],
        environment_key=512,
        environment_value=512,
        tags=_bounds(request, "Tags")[1],
        tag_key=_bounds("Tag", "Key"),
        tag_value=_bounds("Tag", "Value"),
        channel_name=_bounds("Channel", "ChannelName"),
        runtime=(member_metadata("StoppingCondition", "MaxRuntimeInSeconds")["min"], 28 * DAY),  # the model has no max
        warm_pool=_bounds("ResourceConfig", "KeepAlivePeriodInSeconds"),
        pending=_bounds("StoppingCondition", "MaxPendingTimeInSeconds"),
        instance_preferences=_bounds("ResourceConfig", "InstancePreferences")[1],
    )


def _bounds(shape: str, member: str) -> tuple[int, int]:
    metadata = member_metadata(shape, member)
    return metadata["min"], metadata["max"]


def environment_size_problems(spec: JobSpec, resolution: Resolution) -> list[Problem]:
    most = limits().environment
    tracking = dict.fromkeys(TRACKING_VARIABLES, "") if spec.tracking is not None else {}
    total = len({**efa_environment(resolution.instance), **spec.environment, **tracking})
    if total > most:
        added = "EFA and tracking" if tracking else "EFA"
        return [
            Problem(
                "environment",
                len(spec.environment),
                f"with trainstack's {added} variables the job has {total} environment variables; SageMaker takes {most}",
                "pass configuration as hyperparameters or a file in an input channel",
            )
        ]
    return []


def runtime_problems(spec: JobSpec) -> list[Problem]:
    least, most = limits().runtime
    if spec.max_runtime > most or spec.max_runtime < least:
        return [
            Problem(
                "max_runtime",
                spec.max_runtime,
                f"SageMaker allows {least} second to {most // DAY} days",
                f"use at most {most // DAY}d and checkpoint to continue in a new job",
            )
        ]
    return []


def warm_pool_problems(spec: JobSpec) -> list[Problem]:
    least, most = limits().warm_pool
    if spec.warm_pool is not None and not least <= spec.warm_pool <= most:
        hours = most // 3600
        return [
            Problem(
                "warm_pool",
                spec.warm_pool,
                f"warm pools keep instances at most {hours} hours ({most} s)",
                f"use at most {hours}h",
            )
        ]
    return []


def hyperparameter_problems(spec: JobSpec) -> list[Problem]:
    limit = limits()
    problems = []
    for key, value in spec.hyperparameters.items():
        if key.startswith("sagemaker_"):
            problems.append(
                Problem(
                    f"hyperparameters.{key}", value, "sagemaker_* names are set by trainstack from the distribution", "remove it"
                )
            )
        if len(key) > limit.hyperparameter_key:
            problems.append(
                Problem(
                    f"hyperparameters.{key[:40]}...",
                    len(key),
                    f"names are at most {limit.hyperparameter_key} characters",
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
        if len(encoded) > limit.hyperparameter_value:
            problems.append(
                Problem(
                    f"hyperparameters.{key}",
                    f"{encoded[:40]}...",
                    f"encoded value is {len(encoded)} characters, the limit is {limit.hyperparameter_value}",
                    "pass large configuration as an input channel",
                )
            )
    # The script and its source travel as hyperparameters too (sagemaker_program, sagemaker_submit_directory).
    for field, value in (("entry_point", spec.entry_point), ("source_dir", spec.source_dir)):
        encoded = json.dumps(value)
        if value is not None and len(encoded) > limit.hyperparameter_value:
            problems.append(
                Problem(
                    field,
                    f"{value[:40]}...",
                    f"it reaches the container as a hyperparameter whose encoded value is {len(encoded)} characters, "
                    f"the limit is {limit.hyperparameter_value}",
                    "use a shorter path",
                )
            )
    reserved = len(TRAINSTACK_HYPERPARAMETERS)
    if len(spec.hyperparameters) > limit.hyperparameters - reserved:
        problems.append(
            Problem(
                "hyperparameters",
                len(spec.hyperparameters),
                f"at most {limit.hyperparameters - reserved} leave room for the {reserved} trainstack sets",
                "pass configuration as a file in an input channel",
            )
        )
    return problems


def tag_problems(spec: JobSpec) -> list[Problem]:
    limit = limits()
    (key_least, key_most), (value_least, value_most) = limit.tag_key, limit.tag_value
    problems = []
    if len(spec.tags) > limit.tags - len(TAG_KEYS):
        problems.append(
            Problem(
                "tags",
                len(spec.tags),
                f"at most {limit.tags - len(TAG_KEYS)} user tags (trainstack adds its identity tags)",
                "drop some tags",
            )
        )
    for key, value in spec.tags.items():
        if key.lower().startswith("aws:"):
            problems.append(Problem(f"tags.{key}", value, "the aws: prefix is reserved", "rename the tag key"))
        elif not re.match(rf"^[\w\s.:/=+\-@]{{{key_least},{key_most}}}$", key):
            problems.append(
                Problem(
                    f"tags.{key}",
                    value,
                    f"tag keys are {key_least}-{key_most} letters, digits, spaces or _.:/=+-@ (case-sensitive)",
                    "rename the tag key",
                )
            )
        if not re.match(rf"^[\w\s.:/=+\-@]{{{value_least},{value_most}}}$", value):
            problems.append(
                Problem(
                    f"tags.{key}",
                    value,
                    f"tag values are {value_least}-{value_most} letters, digits, spaces or _.:/=+-@",
                    "change the value",
                )
            )
    return problems


def environment_problems(spec: JobSpec) -> list[Problem]:
    limit = limits()
    problems = []
    for key, value in spec.environment.items():
        if key.startswith(fault_hooks.PREFIX):
            problems.append(
                Problem(
                    f"environment.{key}",
                    value,
                    f"{fault_hooks.PREFIX}* variables are trainstack's test hooks, which only its local twin sets",
                    "remove the variable",
                )
            )
        if not re.match(rf"^[a-zA-Z_][a-zA-Z0-9_]{{0,{limit.environment_key - 1}}}$", key):
            problems.append(
                Problem(
                    f"environment.{key}",
                    value,
                    "variable names are letters, digits and _, not starting with a digit",
                    "rename the variable",
                )
            )
        if len(value) > limit.environment_value:
            problems.append(
                Problem(
                    f"environment.{key}",
                    f"{value[:40]}...",
                    f"values are at most {limit.environment_value} characters",
                    "shorten the value",
                )
            )
    return problems


def channel_name_problems(spec: JobSpec) -> list[Problem]:
    least, most = limits().channel_name
    return [
        Problem(f"inputs.{name}", name, f"channel names are {least}-{most} letters, digits or .-_", "rename the channel")
        for name in spec.inputs
        if not re.match(rf"^[A-Za-z0-9.\-_]{{{least},{most}}}$", name)
    ]
