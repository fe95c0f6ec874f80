"""`trainstack smoke`: one real run through the stack, a few minutes long, on the cheapest CPU training
instance the catalog prices: submitted, watched, stopped at a step, resumed from its checkpoint to the
end, its model read back; then the same through the team queue where the stack has one. Its worst case
(the plan's, for every run it starts) is printed and confirmed before anything starts.

It reports what passed, what it cost (billable seconds x the catalog's price) and what it left: nothing
but the runs' own outputs (the model, the checkpoints, the logs, the jobs SageMaker keeps), listed.
Through the queue it also reports what only a real account shows: the name Batch gave the training
job, and whether Batch created it with the stack's KMS key.
"""

from __future__ import annotations

import io
import re
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from trainstack import facts
from trainstack.polling import poll_until
from trainstack.preflight import preflight
from trainstack.rules import SpecRejectedError
from trainstack.spec import SpecError, parse_spec
from trainstack_cli.logs import follow_logs, streams
from trainstack_cli.run_reading import read_run
from trainstack_cli.runs import RunView, TrialView
from trainstack_cli.stack import EXIT_BAD_INPUT, CliError, Stack
from trainstack_cli.stop import stop
from trainstack_cli.submit import resume, submit
from trainstack_contract.job_names import BATCH_TRAINING_JOB_PREFIX
from trainstack_contract.metric_lines import CHECKPOINT_STEP, STEP

STEPS = 1000  # the run's length: a few seconds of gpt-tiny on a CPU, and long enough to be stopped midway
CHECKPOINT_EVERY = 50
MAX_RUNTIME = "20m"  # each job's limit, which bounds the worst case
FIRST_CHECKPOINT_WITHIN_SECONDS = 3600  # provisioning, the image pull, a wait in the team queue, the first steps
RESUMED_FROM = re.compile(r"resumed from (\S+) at step (\d+)")
SAGEMAKER_NAME_LIMIT = 63  # characters in a training job's name


def cheapest_cpu_type() -> str:
    """The CPU training instance type with the lowest on-demand price in the catalog."""
    priced = [(i.price_per_hour, name) for name, i in facts.instances().items() if i.kind == "cpu" and i.price_per_hour]
    return min(priced)[1]


def smoke_spec(name: str, instance_type: str, queued: bool) -> dict[str, Any]:
    """The built-in script's GPT on its shipped sample data, checkpointing often."""
    spec: dict[str, Any] = {
        "name": name,
        "instance_type": instance_type,
        "strategy": "ddp",
        "hyperparameters": {"model": "gpt-tiny", "max_steps": STEPS, "log_every": 10, "checkpoint_every": CHECKPOINT_EVERY},
        "max_runtime": MAX_RUNTIME,
    }
    if queued:
        spec["queue"] = {}  # the stack's default share
    return spec


@dataclass(frozen=True)
class Step:
    what: str
    passed: bool
    detail: str


@dataclass
class Leg:
    """One way through the stack (direct, or the team queue): its steps, its runs as they ended, and
    what it observed that only a real account can tell."""

    name: str
    spec: dict[str, Any]
    steps: list[Step] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    observed: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.steps) and all(step.passed for step in self.steps)


@dataclass
class SmokeReport:
    instance_type: str
    price_per_hour: float
    worst_case_usd: float
    legs: list[Leg]
    billable_seconds: int = 0
    cost_usd: float = 0.0
    left: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(leg.passed for leg in self.legs)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def plan_smoke(stack: Stack, instance_type: str | None) -> SmokeReport:
    """The legs this stack gets, and their worst case: each leg's two runs (the stopped one and its
    resume), at the plan's worst case each, as Validate computes it."""
    chosen = instance_type or cheapest_cpu_type()
    instance = facts.instance(chosen)
    if instance is None or instance.kind != "cpu" or not instance.price_per_hour:
        raise CliError(
            f"--instance-type {chosen}: give a CPU training instance type the catalog prices, e.g. ml.m5.large", EXIT_BAD_INPUT
        )
    legs = [Leg("direct", smoke_spec("smoke", chosen, queued=False))]
    if stack.context.job_queue_arn:
        legs.append(Leg("team queue", smoke_spec("smoke-queue", chosen, queued=True)))
    worst = 0.0
    for leg in legs:
        try:
            plan = preflight(parse_spec(leg.spec), None, stack.region, stack.context).plan
        except (SpecError, SpecRejectedError) as error:  # e.g. a region without the CPU image
            raise CliError(f"the {leg.name} smoke run would be refused: {error.problems[0]}", EXIT_BAD_INPUT) from None
        worst += 2 * (plan.worst_case_usd or 0.0)
    return SmokeReport(chosen, instance.price_per_hour, round(worst, 4), legs)


def run_smoke(stack: Stack, report: SmokeReport, show: Callable[[str], None]) -> SmokeReport:
    """Each leg in turn (a leg that fails stops there, and its runs are stopped); then the cost and what is left."""
    for leg in report.legs:
        try:
            _run_leg(stack, leg, show)
        finally:
            for run in leg.runs:  # a leg cut short (a failed step, Ctrl-C) leaves nothing training
                if read_run(stack, run, with_metrics=False).status == "RUNNING":
                    stop(stack, run)
    views = [read_run(stack, run, with_metrics=False) for leg in report.legs for run in leg.runs]
    report.billable_seconds = sum(view.billable_seconds for view in views)
    report.cost_usd = round(sum(view.cost_usd or 0.0 for view in views), 4)
    report.left = left_behind(stack, views)
    return report


def _run_leg(stack: Stack, leg: Leg, show: Callable[[str], None]) -> None:
    def step(what: str, passed: bool, detail: str) -> bool:
        leg.steps.append(Step(what, passed, detail))
        show(f"{'✓' if passed else '✗'} {leg.name}: {what}: {detail}")
        return passed

    with tempfile.TemporaryDirectory(prefix="trainstack-smoke-") as scratch:
        path = Path(scratch) / f"{leg.spec['name']}.yaml"
        path.write_text(yaml.safe_dump(leg.spec))
        first = submit(stack, path, inline=True)
    leg.runs.append(first)
    step("submit", True, f"run {first} started (1 x {leg.spec['instance_type']}, {STEPS} steps)")

    try:
        view = poll_until(
            lambda: read_run(stack, first),
            lambda view: view.status != "RUNNING" or _checkpoint(view) is not None,
            timeout=FIRST_CHECKPOINT_WITHIN_SECONDS,
            interval=2,
            what=f"run {first}'s first checkpoint",
        )
    except TimeoutError:
        step("checkpoint", False, f"run {first} logged no checkpoint within {FIRST_CHECKPOINT_WITHIN_SECONDS // 60} minutes")
        return
    if view.status != "RUNNING":
        step("checkpoint", False, f"run {first} ended {view.status} before its first checkpoint: {view.cause or '-'}")
        return
    trial = view.trials[-1]
    at = int(trial.metrics.get(STEP, 0))
    stopped = stop(stack, first).run
    saved = _checkpoint(read_run(stack, first))
    ended = stopped.trials[-1] if stopped.trials else trial
    if not step(
        "stop at a step",
        ended.status == "Stopped" and saved is not None,
        f"{ended.job_name} asked to stop after step {at}: {ended.status}, its newest checkpoint at step {saved}",
    ):
        return

    second = resume(stack, first)
    leg.runs.append(second)
    show(f"  {leg.name}: run {second} resumes run {first}")
    final = poll_until(
        lambda: read_run(stack, second), lambda view: view.status != "RUNNING", timeout=float("inf"), interval=2, what=second
    )
    logged = (RESUMED_FROM.search(line.message) for line in follow_logs(stack, second, None, "algo-1", False))
    resumed = next((match for match in logged if match), None)
    if not step(
        "resume",
        resumed is not None and int(resumed[2]) == saved,
        f"run {second} resumed at step {resumed[2]} from {resumed[1]}" if resumed else f"run {second} logged no resume",
    ):
        return
    last = final.trials[-1] if final.trials else None
    reached = int(last.metrics.get(STEP, 0)) if last else 0
    if not step(
        "complete",
        final.status == "SUCCEEDED" and reached == STEPS,
        f"run {second} {final.status} at step {reached} of {STEPS}" + (f": {final.cause}" if final.cause else ""),
    ):
        return
    assert last is not None
    model = read_model(stack, last.model_artifacts)
    step("model", bool(model), f"{last.model_artifacts}: {model or 'empty'}")
    if "queue" in leg.spec:
        leg.observed += observed_through_queue(stack, last)


def _checkpoint(view: RunView) -> int | None:
    """The newest complete checkpoint the run's latest job has logged."""
    if not view.trials or CHECKPOINT_STEP not in view.trials[-1].metrics:
        return None
    return int(view.trials[-1].metrics[CHECKPOINT_STEP])


def read_model(stack: Stack, uri: str) -> str:
    """model.tar.gz read back from S3: its size and the files it holds ("" where it holds none)."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    body = stack.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as archive:
        names = [member.name for member in archive.getmembers() if member.isfile()]
    return f"{len(body):,} bytes, {', '.join(names)}" if names else ""


def observed_through_queue(stack: Stack, trial: TrialView) -> list[str]:
    """What the queued job shows of Batch that the twin could only assume: how Batch named and cased the
    training job, and whether it created one that uses the stack's KMS key (its service-linked role
    holds no KMS permission of its own)."""
    name, job = trial.training_job_name, trial.job_name
    kept = name.startswith(BATCH_TRAINING_JOB_PREFIX + job)
    naming = (
        f"Batch named the training job {name} ({len(name)} characters"
        + (f", past SageMaker's {SAGEMAKER_NAME_LIMIT}" if len(name) > SAGEMAKER_NAME_LIMIT else "")
        + ("; trainstack's name kept whole, in its case)" if kept else f"; not {BATCH_TRAINING_JOB_PREFIX}{job}<hex> as assumed)")
    )
    description = stack.client("sagemaker").describe_training_job(TrainingJobName=name)
    keys = {description.get("OutputDataConfig", {}).get("KmsKeyId"), description.get("ResourceConfig", {}).get("VolumeKmsKeyId")}
    uses_key = stack.context.key_arn in keys
    key = (
        f"Batch created it with the stack's key ({stack.context.key_arn}) and it {description['TrainingJobStatus']}: "
        "Batch's service-linked role needed no grant of the key"
        if uses_key
        else "the training job names no KMS key of the stack's: whether Batch's role needs a grant is not shown"
    )
    return [naming, key]


def left_behind(stack: Stack, views: list[RunView]) -> list[str]:
    """The runs' own outputs, which stay: under each training job's output, checkpoint and TensorBoard
    prefixes in S3, its log streams, the jobs and the executions themselves."""
    sagemaker, s3 = stack.client("sagemaker"), stack.client("s3")
    prefixes: list[str] = []
    jobs = [trial.training_job_name for view in views for trial in view.trials if trial.training_job_name]
    for job in jobs:
        description = sagemaker.describe_training_job(TrainingJobName=job)
        output = description.get("OutputDataConfig", {}).get("S3OutputPath", "")
        prefixes += [
            f"{output.rstrip('/')}/{job}/" if output else "",
            description.get("CheckpointConfig", {}).get("S3Uri", ""),
            description.get("TensorBoardOutputConfig", {}).get("S3OutputPath", ""),
        ]
    left = []
    for prefix in dict.fromkeys(p for p in prefixes if p):
        bucket, _, key = prefix.removeprefix("s3://").partition("/")
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key)
        objects = [item for page in pages for item in page.get("Contents", [])]
        if objects:
            left.append(f"{prefix}: objects {len(objects)}, {sum(item['Size'] for item in objects):,} bytes")
    for job in jobs:
        left += [f"log stream /aws/sagemaker/TrainingJobs {stream}" for stream in streams(stack, job)]
    left.append(f"training jobs {', '.join(jobs)} (SageMaker keeps every job's record; it costs nothing)")
    left.append(f"executions {', '.join(view.name for view in views)} of {stack.state_machine_arn.rsplit(':', 1)[1]}")
    return left


def confirmed(report: SmokeReport, yes: bool, out: TextIO) -> bool:
    """The worst case, stated on `out`; started only on --yes or a `y` typed here."""
    runs = 2 * len(report.legs)
    print(
        f"trainstack smoke: {runs} runs ({' and '.join(leg.name for leg in report.legs)}: one stopped at a step, one "
        f"resuming it) of 1 x {report.instance_type} at ${report.price_per_hour}/h, {STEPS} steps, max_runtime "
        f"{MAX_RUNTIME} each; worst case ${report.worst_case_usd:.2f} (the plan's, every job each run may create "
        "billed for its max_runtime); a few cents expected",
        file=out,
        flush=True,
    )
    if yes:
        return True
    print("start it? [y/N] ", end="", file=out, flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")
