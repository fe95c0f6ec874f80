"""Plan a job before anything is billed: for each capacity option, memory per GPU, speed and cost,
whether it fits, and when it does not, the cheapest change that does.

The order of the changes follows what practitioners are taught (Hugging Face's "Efficient training
on many GPUs", the SageMaker distributed-training guide): fill one instance first; replicate (data
parallel) when the model fits and speed is the issue; shard the optimizer state, then the whole
model, when it does not fit; trade compute for memory (activation checkpointing) before buying more
memory. Among the changes that fit, the cheapest per trained token wins.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any

from annotated_types import Le

from trainstack.facts import Instance
from trainstack.instances import CATALOG
from trainstack.planner.checkpoint import (
    MIB,
    NVME_WRITE_TIME_UNKNOWN,
    SIGTERM_GRACE_SECONDS,
    CheckpointWrite,
    checkpoint_write,
)
from trainstack.planner.cost import Cost, run_cost
from trainstack.planner.goodput import PlannedGoodput, plan_goodput
from trainstack.planner.memory import GIB, MemoryBreakdown, checkpoint_bytes, memory_per_gpu
from trainstack.planner.parallelism import Layout, layout_of
from trainstack.planner.speed import PRECISION_PEAK, Speed, speed
from trainstack.planner.workload import NotPlannableError, Workload, workload_of
from trainstack.spec import JobSpec, Restarts
from trainstack.workflow import trials
from trainstack_contract.checkpoint_cadence import GPU_HOURS_BETWEEN_FAILURES

MAX_SUGGESTED_NODES = 64
RESTARTS_LIMIT = next(rule.le for rule in Restarts.model_fields["max"].metadata if isinstance(rule, Le))


@dataclass(frozen=True)
class Change:
    """A change to the spec, in the words the user writes it, and what it does to the plan."""

    description: str
    memory: MemoryBreakdown
    speed: Speed
    hourly_usd: float | None

    @property
    def usd_per_million_tokens(self) -> float | None:
        if self.hourly_usd is None or not self.speed.tokens_per_second:
            return None
        return self.hourly_usd / 3600 / self.speed.tokens_per_second * 1e6


@dataclass(frozen=True)
class OptionPlan:
    instance_type: str
    field: str  # where the spec names this option: instance_type, or instance_types[i]
    layout: Layout | None
    memory: MemoryBreakdown | None
    speed: Speed | None
    scaling_efficiency: float | None
    cost: Cost
    suggestion: Change | None
    note: str | None = None  # why nothing was planned (a CPU or Trainium type, a classifier)
    checkpoint: CheckpointWrite | None = None
    account: str = ""  # the account's quota for it and what is in use (rules/account.py); "" where not read
    account_warnings: tuple[str, ...] = ()
    goodput: PlannedGoodput | None = None
    restarts_allowed: int = 0  # the spec's restarts.max, which the expected failures are held against

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the plan warns of without refusing the job."""
        warnings = [self.checkpoint.warning if self.checkpoint else None, self._restarts_warning()]
        return tuple(warning for warning in warnings if warning) + self.account_warnings

    def _restarts_warning(self) -> str | None:
        failures = self.goodput.expected_failures if self.goodput else None
        if failures is None or failures <= self.restarts_allowed:
            return None
        # Failures come as a Poisson count: its mean plus three standard deviations is rarely exceeded.
        enough = math.ceil(failures + 3 * math.sqrt(failures))
        warning = (
            f"{failures:.1f} failures are expected over the run, more than restarts.max ({self.restarts_allowed}): "
            "the run likely fails before it ends; "
        )
        if enough <= RESTARTS_LIMIT:
            return warning + f"raise restarts.max to {enough}"
        return (
            warning
            + f"restarts.max can be at most {RESTARTS_LIMIT}: run it in parts that each resume from the last (trainstack resume)"
        )

    @property
    def fits(self) -> bool:
        return self.memory is None or self.memory.fits


@dataclass(frozen=True)
class JobPlan:
    workload: Workload | None
    options: tuple[OptionPlan, ...]
    budget_usd: float | None
    force: bool

    @property
    def fits(self) -> bool:
        return all(option.fits for option in self.options)

    @property
    def worst_case_usd(self) -> float | None:
        """The most the run can cost: on the dearest option SageMaker may choose."""
        costs = [option.cost.worst_case_usd for option in self.options]
        return None if any(c is None for c in costs) else max(c for c in costs if c is not None)

    @property
    def within_budget(self) -> bool:
        if self.budget_usd is None:
            return True
        worst = self.worst_case_usd
        return worst is not None and worst <= self.budget_usd

    @property
    def launchable(self) -> bool:
        return self.force or (self.fits and self.within_budget)

    def to_json(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "within_budget": self.within_budget,
            "launchable": self.launchable,
            "force": self.force,
            "budget_usd": self.budget_usd,
            "worst_case_usd": _round(self.worst_case_usd),
            "model": None if self.workload is None else _workload_json(self.workload),
            "options": [_option_json(option) for option in self.options],
        }


def plan_job(spec: JobSpec, strategy: str, smp_parameters: dict[str, Any]) -> JobPlan:
    """Plan every capacity option of a spec that passed the rules (rules.check). `strategy` and
    `smp_parameters` are what the rules resolved the spec's distribution to."""
    runs = trials(spec)
    try:
        workloads = [workload_of(spec, strategy, overrides) for overrides in runs]
    except NotPlannableError as reason:
        options = tuple(
            OptionPlan(t, _field(spec, i), None, None, None, None, run_cost(spec, CATALOG[t], len(runs), None), None, str(reason))
            for i, t in enumerate(spec.capacity_options)
        )
        return JobPlan(None, options, spec.budget.max_usd if spec.budget else None, spec.force)
    options = []
    for index, name in enumerate(spec.capacity_options):
        options.append(_plan_option(spec, index, CATALOG[name], strategy, smp_parameters, workloads, len(runs)))
    heaviest = max(workloads, key=lambda w: (w.micro_batch_size * w.seq_len, not w.activation_checkpointing))
    return JobPlan(heaviest, tuple(options), spec.budget.max_usd if spec.budget else None, spec.force)


def _plan_option(
    spec: JobSpec, index: int, instance: Instance, strategy: str, smp: dict[str, Any], workloads: list[Workload], trial_count: int
) -> OptionPlan:
    field = _field(spec, index)
    if instance.kind != "gpu":
        note = f"{instance.name} has no GPUs (or Trainium's NeuronCores, which the planner does not model): not checked"
        return OptionPlan(instance.name, field, None, None, None, None, run_cost(spec, instance, trial_count, None), None, note)
    planned = []
    for workload in workloads:
        layout = layout_of(strategy, instance, spec.instance_count, smp, workload.zero1)
        planned.append((memory_per_gpu(workload, layout).total, workload, layout))
    _, workload, layout = max(planned, key=lambda item: item[0])  # the trial that needs the most memory
    memory = memory_per_gpu(workload, layout)
    pace, efficiency, run_seconds = None, None, None
    if instance.peak_tflops.get(_matmul(workload.precision)):  # speed needs the GPU's peak for this precision
        pace = speed(workload, layout)
        single = dataclasses.replace(layout, nodes=1, shard=min(layout.shard, layout.gpus_per_node))
        efficiency = (
            pace.tokens_per_second_per_gpu / speed(workload, single).tokens_per_second_per_gpu if layout.nodes > 1 else 1.0
        )
        run_seconds = pace.step_seconds * workload.steps if workload.steps else None
    cost = run_cost(spec, instance, trial_count, run_seconds)
    suggestion = None if memory.fits else cheapest_change(spec, workload, layout, smp)
    checkpoint = checkpoint_write(workload, layout, spec.volume_size_gb)
    goodput = None if pace is None else plan_goodput(spec, workload, layout, pace.step_seconds, checkpoint, run_seconds)
    return OptionPlan(
        instance.name, field, layout, memory, pace, efficiency, cost, suggestion,
        checkpoint=checkpoint, goodput=goodput, restarts_allowed=spec.restarts.max,
    )  # fmt: skip


def cheapest_change(spec: JobSpec, workload: Workload, layout: Layout, smp: dict[str, Any]) -> Change | None:
    """The change that makes the job fit, in the order practitioners are taught: on the cluster as it
    is (sharding, activation checkpointing), then more of the same nodes, then other GPUs; within a
    stage, the one whose tokens cost least."""
    fitting = []
    for stage, description, candidate_workload, candidate_layout in _candidates(spec, workload, layout, smp):
        memory = memory_per_gpu(candidate_workload, candidate_layout)
        if memory.fits:
            price = candidate_layout.instance.price_per_hour
            hourly = None if price is None else price * candidate_layout.nodes
            fitting.append((stage, Change(description, memory, speed(candidate_workload, candidate_layout), hourly)))
    if not fitting:
        return None
    _, change = min(
        fitting, key=lambda item: (item[0], item[1].usd_per_million_tokens is None, item[1].usd_per_million_tokens or 0.0)
    )
    return change


def _candidates(spec: JobSpec, workload: Workload, layout: Layout, smp: dict[str, Any]):
    """(stage, what to write in the spec, the workload, the layout) for each change worth trying: sharding
    (ZeRO-1, FSDP2, SMP's whole-world shard group), activation checkpointing, reducing gradients every
    micro-step, more nodes, GPUs with more memory, and their combinations."""
    knob = "hyperparameters." if spec.uses_builtin_script else "model."
    # (words, strategy, zero1, SMP parameters)
    shardings: list[tuple[list[str], str, bool, dict[str, Any]]] = [([], layout.strategy, workload.zero1, smp)]
    if layout.strategy in ("ddp", "smddp"):
        if not workload.zero1:
            shardings.append(([f"{knob}zero1: true"], layout.strategy, True, smp))
        shardings.append((["strategy: fsdp"], "fsdp", False, smp))
    full_shard = layout.strategy == "smp" and bool(smp.get("hybrid_shard_degree"))
    checkpointing_options = [workload.activation_checkpointing] + ([] if workload.activation_checkpointing else [True])
    # With accumulation on sharded strategies: reduce-scatter every micro-step instead of keeping a full gradient.
    accumulates = workload.grad_accum > 1 and not workload.reduce_every_micro_step
    reduce_options = [workload.reduce_every_micro_step] + ([True] if accumulates else [])
    bigger = sorted((i for i in CATALOG.values() if _bigger(i, layout.instance)), key=lambda i: i.price_per_hour or float("inf"))
    node_counts = sorted({layout.nodes, *(n for n in (2, 4, 8, 16, 32, MAX_SUGGESTED_NODES) if n > layout.nodes)})
    for instance in [layout.instance, *bigger]:
        for nodes in node_counts:
            options = list(shardings)
            if full_shard:  # SMP's shard group across every GPU the job has
                world = nodes * layout.gpus_per_node // layout.tensor
                options.append(([f"hybrid_shard_degree: {world}"], "smp", False, {**smp, "hybrid_shard_degree": world}))
            for (sharding, strategy, zero1, parameters), checkpointing, reduce_every in itertools.product(
                options, checkpointing_options, reduce_options
            ):
                if reduce_every and strategy not in ("fsdp", "smp"):
                    continue
                words = list(sharding)
                if instance is not layout.instance:
                    words.insert(0, f"instance_type: {instance.name}")
                if nodes != layout.nodes:
                    words.insert(0, f"instance_count: {nodes}")
                if checkpointing != workload.activation_checkpointing:
                    words.append(f"{knob}activation_checkpointing: true")
                if reduce_every != workload.reduce_every_micro_step:
                    words.append(f"{knob}reduce_every_micro_step: true")
                if not words:
                    continue
                changed = dataclasses.replace(
                    workload, zero1=zero1, activation_checkpointing=checkpointing, reduce_every_micro_step=reduce_every
                )
                stage = 2 if instance is not layout.instance else 1 if nodes != layout.nodes else 0
                yield stage, ", ".join(words), changed, layout_of(strategy, instance, nodes, parameters, zero1)


def _matmul(precision: str) -> str:
    return PRECISION_PEAK[precision]


def _bigger(instance: Instance, than: Instance) -> bool:
    return (
        instance.kind == "gpu"
        and bool(instance.peak_tflops)
        and instance.price_per_hour is not None
        and instance.accelerator_memory_gib > than.accelerator_memory_gib
        and instance.accelerators >= than.accelerators
    )


def _field(spec: JobSpec, index: int) -> str:
    return f"instance_types[{index}]" if spec.instance_types else "instance_type"


def _workload_json(workload: Workload) -> dict[str, Any]:
    return {
        "name": workload.model,
        "parameters": workload.parameters,
        "layers": workload.architecture.layers,
        "hidden": workload.architecture.hidden,
        "seq_len": workload.seq_len,
        "micro_batch_size": workload.micro_batch_size,
        "grad_accum": workload.grad_accum,
        "precision": workload.precision,
        "activation_checkpointing": workload.activation_checkpointing,
        "optimizer": workload.optimizer,
        "steps": workload.steps,
        "checkpoint_gib": round(checkpoint_bytes(workload) / GIB, 2),  # one checkpoint, all hosts together
    }


def _option_json(option: OptionPlan) -> dict[str, Any]:
    result: dict[str, Any] = {"instance_type": option.instance_type, "field": option.field, "fits": option.fits}
    if option.note:
        result["note"] = option.note
    if option.account:
        result["account"] = option.account
    if option.layout:
        layout = option.layout
        result["layout"] = {
            "strategy": layout.strategy,
            "nodes": layout.nodes,
            "gpus": layout.world,
            "shard": layout.shard,
            "tensor": layout.tensor,
            "replicas": layout.replicas,
        }
    if option.memory:
        result["memory_gib"] = {
            **{name: round(value / GIB, 2) for name, value in option.memory.categories().items()},
            "total": round(option.memory.total / GIB, 2),
            "usable": round(option.memory.usable / GIB, 2),
            "capacity": round(option.memory.capacity / GIB, 2),
        }
    if option.speed:
        pace = option.speed
        result["speed"] = {
            "step_seconds": round(pace.step_seconds, 4),
            "compute_seconds": round(pace.compute_seconds, 4),
            "exposed_communication_seconds": round(pace.exposed_communication_seconds, 4),
            "tokens_per_second": round(pace.tokens_per_second),
            "mfu": round(pace.mfu, 3),
            "scaling_efficiency": None if option.scaling_efficiency is None else round(option.scaling_efficiency, 3),
        }
    cost = option.cost
    result["cost_usd"] = {
        "price_per_hour": cost.price_per_hour,
        "instances": cost.instances,
        "expected": _round(cost.expected_usd),
        "expected_spot": _round(cost.expected_spot_usd),
        "worst_case": _round(cost.worst_case_usd),
        "worst_case_spot": _round(cost.worst_case_spot_usd),
        "billable_hours_per_job": round(cost.billable_hours_per_job, 2),
        "jobs_per_trial": cost.jobs_per_trial,
        "trials": cost.trials,
    }
    if option.checkpoint:
        result["checkpoint"] = _checkpoint_json(option.checkpoint)
    if option.goodput:
        result["goodput"] = _goodput_json(option.goodput, cost)
    if option.warnings:
        result["warnings"] = list(option.warnings)
    if option.suggestion:
        result["suggestion"] = {
            "change": option.suggestion.description,
            "memory_gib": round(option.suggestion.memory.total / GIB, 2),
            "tokens_per_second": round(option.suggestion.speed.tokens_per_second),
        }
    return result


def _checkpoint_json(write: CheckpointWrite) -> dict[str, Any]:
    result: dict[str, Any] = {
        "gib_per_host": round(write.bytes_per_host / GIB, 2),  # the busiest host's share
        "storage": "local_nvme" if write.volume_size_gb is None else "gp2",
        "volume_size_gb": write.volume_size_gb,
        "throughput_mib_per_second": None if write.throughput is None else write.throughput / MIB,
        "write_seconds": None if write.seconds is None else round(write.seconds, 1),
        "sigterm_grace_seconds": SIGTERM_GRACE_SECONDS,
        "exceeds_sigterm_grace": None if write.seconds is None else write.exceeds_sigterm_grace,
    }
    if write.seconds is None:
        result["write_seconds_unknown"] = NVME_WRITE_TIME_UNKNOWN
    return result


def _goodput_json(planned: PlannedGoodput, cost: Cost) -> dict[str, Any]:
    restart = planned.restart
    extra = planned.billed_extra_seconds
    return {
        "mttf_hours": round(planned.mttf_seconds / 3600, 2),
        "mttf_source": "spec"
        if planned.mttf_from_spec
        else f"{GPU_HOURS_BETWEEN_FAILURES:,.0f} GPU-hours per failure / {planned.gpus} GPUs",
        "checkpoint_cadence": planned.cadence,
        # auto's interval follows the save time the job measures, where the plan knows none
        "checkpoint_interval_seconds": round(planned.goodput.interval_seconds, 1) if planned.goodput.interval_seconds else None,
        "save_seconds": None if planned.save_seconds is None else round(planned.save_seconds, 1),
        "expected_failures": None if planned.expected_failures is None else round(planned.expected_failures, 3),
        "work_lost_per_failure_seconds": round(planned.goodput.work_lost_per_failure, 1),
        "restart_seconds": {
            "detection": restart.detection,
            "backoff": round(restart.backoff, 1),
            "capacity_wait": restart.capacity_wait,
            "start_up": restart.start_up,
            "checkpoint_load": round(restart.checkpoint_load, 1),
            "total": round(restart.seconds, 1),
        },
        "save_overhead_seconds": _round(planned.save_overhead_seconds),
        "lost_seconds": _round(planned.lost_seconds),
        "effective_training_fraction": round(planned.goodput.effective_fraction, 4),
        # an unknown save time is counted as nothing: the fraction is then the most the job can reach
        "upper_bound": planned.save_seconds is None,
        "extra_usd": None if extra is None or cost.hourly is None else round(cost.hourly * extra / 3600 * cost.trials, 2),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
