"""How runs look in a terminal (rich); `--json` prints RunView.to_json() instead."""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from trainstack.billing import cost_basis
from trainstack.run_report import job_links
from trainstack_cli.runs import RunView, TrialView
from trainstack_contract.metric_lines import CHECKPOINT_STEP, LOSS, STEP, TOKENS_PER_SEC

STATUS_STYLES = {
    "SUCCEEDED": "green",
    "Completed": "green",
    "FAILED": "red",
    "Failed": "red",
    "ABORTED": "yellow",
    "Stopped": "yellow",
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
        title="runs, newest first",
        caption=cost_basis(),
    )
    for run in runs:
        trials = ", ".join(f"{t.status}" for t in run.trials) or "-"
        table.add_row(
            run.name,
            _styled(run.status),
            run.position,
            trials,
            run.started,
            duration(run.duration_seconds),
            str(run.billable_seconds),
            usd(run.cost_usd),
        )
    return table


def status_view(run: RunView) -> RenderableType:
    header = Text.assemble(
        (run.name, "bold"), "  ", _styled(run.status), f"  at {run.position or '-'}", f"  {duration(run.duration_seconds)}"
    )
    parts: list[RenderableType] = [header]
    if run.cause:
        parts.append(Text(run.cause, style="red"))
    table = Table("trial", "attempt", "job", "status", "instances", "step", "loss", "tokens/s", "billable s", "est. cost so far")
    for trial in run.trials:
        table.add_row(
            str(trial.trial),
            str(trial.attempt),
            trial.job_name,
            Text.assemble(_styled(trial.status), f" ({trial.secondary_status})"),
            f"{trial.instance_count} x {trial.instance_type}",
            _metric(trial, STEP, "{:.0f}"),
            _metric(trial, LOSS, "{:.4f}"),
            _metric(trial, TOKENS_PER_SEC, "{:,.0f}"),
            str(trial.billable_seconds * trial.instance_count),
            usd(trial.cost_usd),
        )
    parts.append(table)
    for trial in run.trials:
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
        for name, link in job_links(run.execution_arn, trial.job_name).items():
            parts.append(Text(f"{trial.job_name}: {name} {link}", style="dim"))
        if trial.mlflow:
            parts.append(Text(f"{trial.job_name}: MLflow {trial.mlflow}", style="dim"))
        if trial.mlflow_ui:
            parts.append(Text(f"{trial.job_name}: MLflow UI, signed in for 5 minutes: {trial.mlflow_ui}", style="dim"))
    parts.append(
        Text(
            f"billable {run.billable_seconds} instance-seconds, estimated cost so far {usd(run.cost_usd)} ({cost_basis()})",
            style="dim",
        )
    )
    return Group(*parts)


def stopped_view(run: RunView) -> RenderableType:
    lines = [Text(f"{trial.job_name}: {trial.status} ({trial.secondary_status})") for trial in run.trials]
    lines.append(
        Text(f"run {run.name}: {run.status}; its checkpoints stay in S3 (`trainstack resume {run.name}` continues them)")
    )
    return Group(*lines)


def live_line(run: RunView) -> Text:
    """One line a `--wait` shows and refreshes: state, job, step, loss, tokens/s."""
    trial = run.trials[-1] if run.trials else None
    if trial is None:
        return Text.assemble(_styled(run.status), f"  {run.position}  (no training job yet)")
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
