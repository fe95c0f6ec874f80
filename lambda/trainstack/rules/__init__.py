"""The rules a job spec must pass before anything is billed. Pure functions over the spec.

Each rule returns `Problem`s naming the field, the value, the rule broken and the fix. The outside
facts a rule needs are passed in: how many objects a ShardedByS3Key channel holds (a function, so
the Lambda supplies the S3 call) and the region the job would run in (images differ per region).
Framework facts (versions, images, launcher lists, SMP keys, instances) come from the facts file.

The rules live by family: capacity (instances, fallbacks, training plans, pending, EFA, spot),
distribution (the SDK's distribution dict and its launchers), frameworks (strategy fit, Trainium,
versions, images), smp (SMP v2's parameters and degrees), api_limits (CreateTrainingJob's limits),
inputs (sharded channels), tracking (the MLflow server), queue (the team queue). A spec that passes resolves to a
`Resolution` (resolution.py). The deployed stack's values (`stack`), where the caller knows them,
tell which tracking server its jobs may log to and which team queue they may wait in.
"""

from __future__ import annotations

from collections.abc import Callable

from trainstack.rules import api_limits, capacity, distribution, frameworks, inputs, queue, smp, tracking
from trainstack.rules.problems import Problem, SpecRejectedError
from trainstack.rules.resolution import Resolution, resolve
from trainstack.spec import JobSpec
from trainstack.stack_context import StackContext

__all__ = ["Problem", "Resolution", "SpecRejectedError", "check", "check_or_raise", "checked", "resolve"]


def check(
    spec: JobSpec,
    count_objects: Callable[[str], int] | None = None,
    region: str | None = None,
    stack: StackContext | None = None,
) -> list[Problem]:
    """Every problem with the spec; an empty list means it may launch. With `region`, also whether
    its framework image exists there; with `stack`, whether the stack has the tracking server it
    names."""
    return checked(spec, count_objects, region, stack)[0]


def checked(
    spec: JobSpec,
    count_objects: Callable[[str], int] | None = None,
    region: str | None = None,
    stack: StackContext | None = None,
    team: str | None = None,
) -> tuple[list[Problem], Resolution | None]:
    """Every problem with the spec, and its resolution (computed once, for the rules and the caller);
    None where the spec is too broken to resolve."""
    problems = capacity.option_problems(spec) or distribution.distribution_problems(spec)
    if problems:  # the rest read the catalog's instance and the resolved distribution
        return problems, None
    problems += capacity.capacity_problems(spec)
    problems += _fallback_problems(spec, region)
    resolution = resolve(spec)
    problems += frameworks.strategy_problems(spec, resolution)
    problems += frameworks.trainium_problems(spec, resolution)
    problems += frameworks.version_problems(spec, resolution)
    problems += smp.parameter_problems(resolution)
    problems += smp.degree_problems(spec, resolution)
    problems += capacity.efa_variable_problems(spec, resolution)
    problems += api_limits.environment_size_problems(spec, resolution)
    problems += api_limits.runtime_problems(spec)
    problems += capacity.spot_problems(spec)
    problems += api_limits.warm_pool_problems(spec)
    problems += api_limits.hyperparameter_problems(spec)
    problems += api_limits.tag_problems(spec)
    problems += api_limits.environment_problems(spec)
    problems += api_limits.channel_name_problems(spec)
    problems += tracking.tracking_problems(spec, stack, region)
    problems += frameworks.project_image_problems(spec, stack)
    problems += queue.queue_problems(spec, stack)
    problems += queue.team_problems(spec, stack, team)
    if region is not None:
        problems += frameworks.image_in_region_problems(spec, resolution, region)
    if count_objects is not None:
        problems += inputs.sharded_input_problems(spec, count_objects)
    return problems, resolution


def check_or_raise(
    spec: JobSpec,
    count_objects: Callable[[str], int] | None = None,
    region: str | None = None,
    stack: StackContext | None = None,
) -> Resolution:
    problems, resolution = checked(spec, count_objects, region, stack)
    if problems or resolution is None:
        raise SpecRejectedError(problems)
    return resolution


def _fallback_problems(spec: JobSpec, region: str | None) -> list[Problem]:
    """Each fallback capacity option must pass the rules as the job's only type. Tracking and the queue
    do not depend on the type: the spec's own check reports them, once."""
    problems = []
    for index, name in enumerate(spec.capacity_options[1:], start=1):
        update = {"instance_type": name, "instance_types": None, "max_pending": None, "tracking": None, "queue": None}
        alternative = spec.model_copy(update=update)
        problems += [
            Problem(f"instance_types[{index}] ({name}): {p.field}", p.value, p.rule, p.fix)
            for p in check(alternative, None, region)
        ]
    return problems
