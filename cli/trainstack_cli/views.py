"""How runs and the team queue look in a terminal (rich); `--json` prints their to_json() instead."""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from trainstack.billing import cost_basis
from trainstack.budgets import TeamMonth
from trainstack.goodput import goodput, words
from trainstack.run_report import job_links
from trainstack.service_jobs import CAPACITY_UNIT, RUNNABLE
from trainstack.workflow import NOT_STARTED
from trainstack_cli.doctor import FAILED, NOT_APPLICABLE, PASSED, CheckResult
from trainstack_cli.runs import QUEUED_STATUS, RunView, StopView, TrialView
from trainstack_cli.smoke import SmokeReport
from trainstack_cli.team_queue import QueueView, ServiceJobView
from trainstack_contract.metric_lines import CHECKPOINT_STEP, LOSS, STEP, TOKENS_PER_SEC

STATUS_STYLES = {
    "SUCCEEDED": "green",
    "Completed": "green",
    "FAILED": "red",
    "Failed": "red",
    "ABORTED": "yellow",
    "Stopped": "yellow",
    NOT_STARTED: "yellow",
    QUEUED_STATUS: "magenta",
}


# Off a terminal (piped to a file or a program) rich would fit tables into 80 columns and cut every
# value short ("train…"); there the width is unbounded, so every value is printed whole.
UNBOUNDED_WIDTH = 100_000


def console(file: TextIO | None = None) -> Console:
    """The CLI's console: a terminal's width on a terminal, whole values elsewhere; a long line (a
    path, a job name) stays one line."""
    stream = file or sys.stdout
    return Console(file=stream, soft_wrap=True, width=None if stream.isatty() else UNBOUNDED_WIDTH)


def usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def runs_table(runs: list[RunView]) -> Table:
    table = Table(
        "run",
        "status",
        "state",
        "trials",
        "started",
        "duration",
        "billable s",
        "est. cost",
        "goodput",
        title="runs, newest first",
        caption=cost_basis(),
    )
    for run in runs:
        trials = ", ".join(trial_text(t) for t in run.trials) or "-"
        table.add_row(
            run.name,
            _styled(run.status),
            run.position,
            trials,
            run.started,
            duration(run.duration_seconds),
            str(run.billable_seconds),
            usd(run.cost_usd),
            percent(goodput(run.account)),
        )
    return table


def team_runs_view(runs: list[RunView], month: TeamMonth) -> Group:
    """`runs --team`: the team's runs, then what its jobs of the month came to."""
    unpriced = f" (no price for {', '.join(month.unpriced)}: their hours, not their cost)" if month.unpriced else ""
    summary = (
        f"team {month.team}, {month.month}: {month.jobs} jobs ({month.in_progress} in progress), "
        f"{month.instance_hours:,.2f} instance-hours, est. {usd(month.cost_usd)}{unpriced}"
    )
    return Group(runs_table(runs), summary)


def percent(share: float | None) -> str:
    """A share in whole percent; "-" before anything was billed."""
    return "-" if share is None else f"{share:.0%}"


def trial_text(trial: TrialView) -> str:
    """A trial in a few words: its status; for a queued job, where it stands in the team queue and how
    often Batch preempted it."""
    if not trial.queue:
        return trial.status
    return f"{trial.status} ({queue_text(trial.queue)}{preempted_text(trial)})"


def preempted_text(trial: TrialView) -> str:
    return f", preempted {trial.preemptions}x" if trial.preemptions else ""


def queue_text(job: ServiceJobView) -> str:
    """Where a job stands in the team queue, in a few words: Batch's status, share, priority, and
    its position while it waits there."""
    place = f", position {job.place}" if job.status == RUNNABLE else ""
    return f"{job.status}, share {job.share}, priority {job.priority}{place}"


def status_view(run: RunView) -> RenderableType:
    header = Text.assemble(
        (run.name, "bold"), "  ", _styled(run.status), f"  at {run.position or '-'}", f"  {duration(run.duration_seconds)}"
    )
    parts: list[RenderableType] = [header]
    if run.cause:
        parts.append(Text(run.cause, style="red"))
    if run.waiting:
        parts.append(Text(run.waiting, style="yellow"))
    queued = any(trial.queue for trial in run.trials)
    columns = ["trial", "attempt", "job", "status", *(["team queue"] if queued else []), "instances"]
    table = Table(*columns, "step", "loss", "tokens/s", "billable s", "est. cost so far")
    for trial in run.trials:
        queue_cell = [queue_text(trial.queue) + preempted_text(trial) if trial.queue else "-"] if queued else []
        table.add_row(
            str(trial.trial),
            str(trial.attempt),
            trial.job_name,
            Text.assemble(_styled(trial.status), f" ({trial.secondary_status})"),
            *queue_cell,
            f"{trial.instance_count} x {trial.instance_type}",
            _metric(trial, STEP, "{:.0f}"),
            _metric(trial, LOSS, "{:.4f}"),
            _metric(trial, TOKENS_PER_SEC, "{:,.0f}"),
            str(trial.billable_seconds * trial.instance_count),
            usd(trial.cost_usd),
        )
    parts.append(table)
    for trial in run.trials:
        if trial.queue and trial.training_job_name != trial.job_name:
            training = trial.training_job_name or "none yet: Batch creates it when it dispatches the job"
            parts.append(Text(f"{trial.job_name}: service job {trial.queue.service_job_id}, training job {training}"))
        if trial.queue and trial.status == QUEUED_STATUS and trial.queue.reason:
            parts.append(Text(f"{trial.job_name}: waiting: {trial.queue.reason}", style="yellow"))
        if trial.preemptions:
            parts.append(
                Text(
                    f"{trial.job_name}: preempted {trial.preemptions}x by Batch: no failure and no restart spent; "
                    "each time back in the queue, then resumed from its newest checkpoint"
                )
            )
        if trial.training_job_name:  # the training job's history: none while a job waits in the team queue
            history = Table("time", "secondary status", "message", title=f"{trial.job_name}: history", title_justify="left")
            for transition in trial.transitions:
                history.add_row(transition.start, transition.status, transition.message)
            parts.append(history)
        if trial.failure_reason:
            parts.append(Text(f"{trial.job_name}: {trial.failure_reason}", style="red"))
        if trial.failure:
            saved = _metric(trial, CHECKPOINT_STEP, "{:.0f}")
            parts.append(
                Text(f"{trial.job_name}: {trial.failure} failure; newest checkpoint step {saved}, {trial.steps_lost} steps lost")
            )
        if trial.model_artifacts:
            parts.append(Text(f"{trial.job_name}: model {trial.model_artifacts}"))
        if trial.training_job_name:
            for name, link in job_links(run.execution_arn, trial.training_job_name).items():
                parts.append(Text(f"{trial.job_name}: {name} {link}", style="dim"))
        if trial.mlflow:
            parts.append(Text(f"{trial.job_name}: MLflow {trial.mlflow}", style="dim"))
        if trial.mlflow_ui:
            parts.append(Text(f"{trial.job_name}: MLflow UI, signed in for 5 minutes: {trial.mlflow_ui}", style="dim"))
    parts.append(Text(words(run.account)))
    parts.append(
        Text(
            f"billable {run.billable_seconds} instance-seconds, estimated cost so far {usd(run.cost_usd)} ({cost_basis()})",
            style="dim",
        )
    )
    return Group(*parts)


def stopped_view(stopped: StopView) -> RenderableType:
    run = stopped.run
    lines = [
        Text(f"terminated {job.job_name} in the team queue (service job {job.service_job_id}, was {queue_text(job)})")
        for job in stopped.terminated
    ]
    lines += [Text(f"{trial.job_name}: {trial.status} ({trial.secondary_status})") for trial in run.trials]
    lines.append(
        Text(f"run {run.name}: {run.status}; its checkpoints stay in S3 (`trainstack resume {run.name}` continues them)")
    )
    return Group(*lines)


def queue_table(queue: QueueView) -> RenderableType:
    """The team queue by share: each share's active jobs in dispatch order, and what it uses."""
    cap = f", at most {queue.max_instances} instances" if queue.max_instances else ""
    parts: list[RenderableType] = [
        Text.assemble(
            (f"queue {queue.name}", "bold"),
            f"  in use: {capacity_text(queue.capacity_in_use)}{cap}",
            f"  active shares: {queue.active_shares}",
            f"  (snapshot {queue.snapshot_at or '-'})",
        )
    ]
    for share in queue.shares:
        title = f"share {share.share}: {capacity_text(share.capacity_in_use)} in use"
        if not share.jobs:
            parts.append(Text(f"{title}, no active jobs"))
            continue
        table = Table("job", "status", "priority", "instances", "position", "age", title=title, title_justify="left")
        for job in share.jobs:
            table.add_row(
                job.job_name,
                _styled(job.status),
                str(job.priority),
                f"{job.instances} x {job.instance_type}",
                job.place,
                duration(job.age_seconds),
            )
        parts.append(table)
    return Group(*parts)


def capacity_text(usage: dict[str, float]) -> str:
    """Batch's capacity usage, per unit: NUM_INSTANCES reads as instances, an instance type as itself."""
    if not usage:
        return "nothing"
    return ", ".join(f"{quantity:g} {_unit(unit, quantity)}" for unit, quantity in usage.items())


def _unit(unit: str, quantity: float) -> str:
    if unit != CAPACITY_UNIT:
        return unit
    return "instance" if quantity == 1 else "instances"


def live_line(run: RunView) -> Text:
    """One line a `--wait` shows and refreshes: state, job, step, loss, tokens/s; for a job waiting in
    the team queue, where it stands there."""
    trial = run.trials[-1] if run.trials else None
    if trial is None:
        return Text.assemble(_styled(run.status), f"  {run.position}  ({run.waiting or 'no training job yet'})")
    if trial.status == QUEUED_STATUS and trial.queue:
        return Text.assemble(_styled(run.status), f"  {run.position}  {trial.job_name} {trial.status}: {queue_text(trial.queue)}")
    return Text.assemble(
        _styled(run.status),
        f"  {run.position}  {trial.job_name} {trial.status}/{trial.secondary_status}",
        f"  step {_metric(trial, STEP, '{:.0f}')}  loss {_metric(trial, LOSS, '{:.4f}')}",
        f"  tokens/s {_metric(trial, TOKENS_PER_SEC, '{:,.0f}')}  {duration(run.duration_seconds)}",
    )


def _metric(trial: TrialView, name: str, form: str) -> str:
    value = trial.metrics.get(name)
    return "-" if value is None else form.format(value)


def _styled(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, "cyan"))


CHECK_MARKS = {PASSED: ("✓", "green"), FAILED: ("✗", "red"), NOT_APPLICABLE: ("-", "dim")}


def doctor_view(results: list[CheckResult]) -> RenderableType:
    """One line per check: ✓ and what it saw, ✗ and the fix, - where it does not apply; then the count."""
    lines = []
    for result in results:
        mark, style = CHECK_MARKS[result.status]
        line = Text.assemble((mark, style), f" {result.check}: {result.detail}")
        if result.fix:
            line.append(f"; fix: {result.fix}", style="yellow")
        lines.append(line)
    counts = {status: sum(r.status == status for r in results) for status in CHECK_MARKS}
    lines.append(Text(f"doctor: {counts[PASSED]} passed, {counts[FAILED]} failed, {counts[NOT_APPLICABLE]} not applicable"))
    return Group(*lines)


def smoke_view(report: SmokeReport) -> RenderableType:
    """What passed, what it cost, what only a real account shows, and what the runs left."""
    verdict = Text("passed", style="green") if report.passed else Text("FAILED", style="red")
    lines = [Text.assemble("smoke: ", verdict, f" on 1 x {report.instance_type}")]
    for leg in report.legs:
        steps = ", ".join(f"{step.what} {'✓' if step.passed else '✗'}" for step in leg.steps)
        lines.append(Text(f"  {leg.name}: {steps} (runs {', '.join(leg.runs)})"))
    lines.append(
        Text(
            f"cost: {report.billable_seconds} billable instance-seconds x ${report.price_per_hour}/h = "
            f"${report.cost_usd:.4f} (worst case {usd(report.worst_case_usd)}; {cost_basis()})"
        )
    )
    observed = [line for leg in report.legs for line in leg.observed]
    if observed:
        lines.append(Text("observed (what the twin could only assume):"))
        lines += [Text(f"  {line}") for line in observed]
    lines.append(Text("left (the runs' own outputs; nothing else):"))
    lines += [Text(f"  {line}", style="dim") for line in report.left]
    return Group(*lines)
