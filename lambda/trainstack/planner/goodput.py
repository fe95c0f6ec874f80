"""What the request tells the built-in script's `checkpoint_every: auto` (trainstack_contract.checkpoint_cadence):
the job's mean time to failure and the plan's estimate of one save, from the planner's own figures.
"""

from __future__ import annotations

from typing import Any

from trainstack.instances import CATALOG
from trainstack.planner.checkpoint import checkpoint_write
from trainstack.planner.parallelism import layout_of
from trainstack.planner.workload import NotPlannableError, builtin_config, workload_of
from trainstack.spec import JobSpec
from trainstack_contract.checkpoint_cadence import AUTO, job_mttf_seconds


def cadence_hyperparameters(
    spec: JobSpec, strategy: str, smp_parameters: dict[str, Any], overrides: dict[str, Any]
) -> dict[str, float]:
    """What a trial of the built-in script with `checkpoint_every: auto` is told: the job's MTTF (the
    spec's, else the per-GPU rate over the GPUs of its largest option: the shortest MTTF) and the
    plan's save time (the longest any option states), which it uses until it has timed a save of its own."""
    if not spec.uses_builtin_script or builtin_config(spec, strategy, overrides).checkpoint_every != AUTO:
        return {}
    gpus = max(CATALOG[name].accelerators for name in spec.capacity_options) * spec.instance_count
    values: dict[str, float] = {}
    if spec.mttf or gpus:
        values["mttf"] = spec.mttf or round(job_mttf_seconds(gpus))
    try:
        workload = workload_of(spec, strategy, overrides)
    except NotPlannableError:
        return values
    saves = [
        checkpoint_write(
            workload, layout_of(strategy, CATALOG[name], spec.instance_count, smp_parameters, workload.zero1), spec.volume_size_gb
        ).seconds
        for name in spec.capacity_options
        if CATALOG[name].kind == "gpu"
    ]
    known = [seconds for seconds in saves if seconds is not None]
    if known:
        values["planned_save_seconds"] = round(max(known), 1)
    return values
