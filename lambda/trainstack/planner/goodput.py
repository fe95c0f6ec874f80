"""What failures cost a run: how many to expect over its training, what each loses, the share of the
time that trains (goodput, "effective training time ratio" in Kokolis et al.) and what the rest bills.

Failures strike while the job trains, at the rate of its mean time to failure (MTTF: the spec's
`mttf`, else the per-GPU rate of trainstack_contract.checkpoint_cadence over the option's GPUs).
A failure loses the work done since the last complete checkpoint, then the restart: Describe finding
the job failed (half its poll interval, which is at its 30-minute cap once a job has run an hour),
the pipeline's wait before the restart (1, 2, 4 ... minutes: the mean over the restarts expected),
instances (none assumed to be waited for: a restart that finds no capacity waits 5, 10, 20 minutes
more per re-creation), the new job's start-up (cost.STARTUP_SECONDS) and the checkpoint's load (its
write time as the read time). A checkpoint costs its save time.

Exact for failures that come as a Poisson process (Daly 2006's renewal argument, with no failure
during a restart): a stretch of `interval` seconds of training between checkpoints fails
e^(interval/MTTF) - 1 times on average before it completes, each failure losing the work since the
stretch began, on average MTTF - interval / (e^(interval/MTTF) - 1). While the interval is short
against the MTTF these are the first-order figures: run time / MTTF failures, interval / 2 lost
work each, and (interval / 2 + restart) / MTTF of the time lost.

A stop that saves first (SIGTERM: a spot reclaim) loses no work, only its save and its restart;
the plan counts none (no published rate).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from trainstack.instances import CATALOG
from trainstack.planner.checkpoint import CheckpointWrite, checkpoint_write
from trainstack.planner.cost import STARTUP_SECONDS
from trainstack.planner.parallelism import Layout, layout_of
from trainstack.planner.workload import NotPlannableError, Workload, builtin_config, workload_of
from trainstack.spec import JobSpec
from trainstack.workflow import FIRST_POLL_SECONDS, MAX_POLL_SECONDS, restart_wait_seconds
from trainstack_contract.checkpoint_cadence import AUTO, checkpoint_interval_seconds, job_mttf_seconds


@dataclass(frozen=True)
class RestartPath:
    """Seconds from a failure to training again, by part."""

    detection: float  # until Describe reads the job as failed
    backoff: float  # the pipeline's wait before it creates the job again
    capacity_wait: float  # for instances
    start_up: float  # the new job's provisioning, image and data, as far as its first step
    checkpoint_load: float  # reading the checkpoint it resumes from

    @property
    def seconds(self) -> float:
        return self.detection + self.backoff + self.capacity_wait + self.start_up + self.checkpoint_load

    @property
    def billed_seconds(self) -> float:
        """The part the new job bills: nothing runs while the failure is found and the restart waits."""
        return self.start_up + self.checkpoint_load


def pipeline_restart(
    expected_restarts: float,
    checkpoint_load: float,
    start_up: float = STARTUP_SECONDS,
    first_poll_seconds: int = FIRST_POLL_SECONDS,
    max_poll_seconds: int = MAX_POLL_SECONDS,
) -> RestartPath:
    """A restart through the pipeline (Describe's poll loop and the restart's wait, as
    trainstack.workflow times them; the twin runs them at its own poll settings)."""
    waits = [restart_wait_seconds(done, first_poll_seconds) for done in range(max(1, math.ceil(expected_restarts)))]
    return RestartPath(
        detection=max_poll_seconds / 2,
        backoff=statistics.fmean(waits),
        capacity_wait=0.0,
        start_up=start_up,
        checkpoint_load=checkpoint_load,
    )


@dataclass(frozen=True)
class FailureKind:
    """A kind of failure: its share of all failures, its restart, and whether it saves first (a stop
    on SIGTERM saves at the next step and so loses no work)."""

    share: float
    restart_seconds: float
    saves_first: bool = False


@dataclass(frozen=True)
class Goodput:
    """A run's expected failures and the time they and its checkpoints take, per second of training."""

    interval_seconds: float  # training between checkpoints
    save_seconds: float  # one checkpoint's save
    failures: float  # per second of training
    work_lost_per_failure: float  # seconds of training since the last checkpoint, for a failure that loses work
    saving: float  # seconds of saves per second of training
    restarting: float  # seconds of restarts (and of the saves of stops that save first) per second of training
    retraining: float  # seconds of work trained again per second of training

    @property
    def effective_fraction(self) -> float:
        """The share of the run's time that trains."""
        return 1 / (1 + self.saving + self.restarting + self.retraining)

    def wall_seconds(self, training_seconds: float) -> float:
        return training_seconds / self.effective_fraction


def expected_goodput(
    interval_seconds: float, save_seconds: float, mttf_seconds: float, kinds: tuple[FailureKind, ...]
) -> Goodput:
    """Failures as a Poisson process at 1/MTTF over the time the job trains, each of one of `kinds` by
    its share. An interval of 0 is the limit of checkpoints that cost nothing, taken continuously."""
    losing = [kind for kind in kinds if not kind.saves_first]
    stopping = [kind for kind in kinds if kind.saves_first]
    losing_rate = sum(kind.share for kind in losing) / mttf_seconds
    stopping_rate = sum(kind.share for kind in stopping) / mttf_seconds
    if interval_seconds == 0:
        losing_failures, work_lost = losing_rate, 0.0
        saving = 0.0
    else:
        # per second of training: failures before each interval completes, and the work each loses
        losing_failures = math.expm1(losing_rate * interval_seconds) / interval_seconds
        work_lost = 1 / losing_rate - 1 / losing_failures if losing_rate else 0.0
        saving = save_seconds / interval_seconds
    retraining = losing_failures * work_lost
    stops = stopping_rate * (1 + retraining)  # stops come while the job trains, again or not
    return Goodput(
        interval_seconds=interval_seconds,
        save_seconds=save_seconds,
        failures=losing_failures + stops,
        work_lost_per_failure=work_lost,
        saving=saving,
        restarting=losing_failures * _mean_restart(losing) + stops * (_mean_restart(stopping) + save_seconds),
        retraining=retraining,
    )


def _mean_restart(kinds: list[FailureKind]) -> float:
    total = sum(kind.share for kind in kinds)
    return sum(kind.share * kind.restart_seconds for kind in kinds) / total if total else 0.0


@dataclass(frozen=True)
class PlannedGoodput:
    """One capacity option's goodput as the plan states it."""

    mttf_seconds: float
    mttf_from_spec: bool  # the spec's `mttf`; else the per-GPU rate over `gpus`
    gpus: int
    cadence: str  # how the job's checkpoint interval is set, in the spec's words
    save_seconds: float | None  # one checkpoint's write; None where unknown (counted as nothing: an upper bound)
    restart: RestartPath
    goodput: Goodput
    training_seconds: float | None  # the run's training without failures; None where its steps are not known

    @property
    def expected_failures(self) -> float | None:
        return None if self.training_seconds is None else self.goodput.failures * self.training_seconds

    @property
    def save_overhead_seconds(self) -> float | None:
        return None if self.training_seconds is None else self.goodput.saving * self.training_seconds

    @property
    def lost_seconds(self) -> float | None:
        """Work trained again and restarts, over the run."""
        if self.training_seconds is None:
            return None
        return (self.goodput.retraining + self.goodput.restarting) * self.training_seconds

    @property
    def billed_extra_seconds(self) -> float | None:
        """What failures and checkpoints add to the billed time of one trial: saves, work trained
        again, and each restarted job's start-up and load (finding the failure and waiting bill nothing)."""
        failures = self.expected_failures
        if self.training_seconds is None or failures is None:
            return None
        return (self.goodput.saving + self.goodput.retraining) * self.training_seconds + failures * self.restart.billed_seconds


def plan_goodput(
    spec: JobSpec, workload: Workload, layout: Layout, step_seconds: float, write: CheckpointWrite, training_seconds: float | None
) -> PlannedGoodput:
    """The option's goodput: its MTTF, its checkpoint interval (`auto`'s, or its steps at the planned
    step time), its restarts through the pipeline."""
    mttf = float(spec.mttf) if spec.mttf else job_mttf_seconds(layout.world)
    save = write.seconds
    if workload.checkpoint_every is None:
        interval, cadence = checkpoint_interval_seconds(save or 0.0, mttf), "auto"
        if not spec.uses_builtin_script:
            cadence = "auto's, as if your script checkpointed at it"
    else:
        interval, cadence = workload.checkpoint_every * step_seconds, f"every {workload.checkpoint_every} steps"
    if workload.checkpoint_interval_seconds:
        interval = min(interval, workload.checkpoint_interval_seconds)
        cadence += f" or {workload.checkpoint_interval_seconds:g} s"
    restarts = 1.0 if training_seconds is None else training_seconds / mttf
    restart = pipeline_restart(restarts, checkpoint_load=save or 0.0)
    goodput = expected_goodput(interval, save or 0.0, mttf, (FailureKind(1.0, restart.seconds),))
    return PlannedGoodput(mttf, spec.mttf is not None, layout.world, cadence, save, restart, goodput, training_seconds)


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
