"""What a run's end reports, besides its status: console links a person clicks, and the metric lines
the dashboard counts (CloudWatch's embedded metric format, which Lambda's log delivery turns into
metrics with no PutMetricData call and no extra permission). Pure: Notify prints and publishes them.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from trainstack.api_model import member_metadata
from trainstack.goodput import BILLED, WAITING, total
from trainstack.layout import TRAINING_JOB_LOG_GROUP
from trainstack.restarts import restarts_by_kind
from trainstack_contract.tracking import is_mlflow_app, resource_name

RUN_METRICS_NAMESPACE = "trainstack"
JOBS_METRIC = "TrainingJobs"  # one per training job that ended, by Status
BILLABLE_METRIC = "BillableInstanceSeconds"
METRIC_DIMENSIONS = ("Prefix", "Status")
# A trial's restarts by failure kind (restarts.restarts_by_kind): per stack and kind, never per run
# or job, so the metrics stay a handful (each is billed in a month it gets data)
RESTARTS_METRIC = "Restarts"
STEPS_LOST_METRIC = "StepsLost"  # trained again after a restart: trained after the newest checkpoint
LOST_STEPS_COST_METRIC = "LostStepsCostUSD"  # those steps' share of what their attempt billed
KIND_DIMENSION = "FailureKind"  # infrastructure, unknown, restarts.SPOT_INTERRUPTION or restarts.PREEMPTION
RESTART_DIMENSIONS = ("Prefix", KIND_DIMENSION)
# A trial's account of time (goodput.py), per stack only: each part of its billed instance-seconds,
# and those it waited unbilled. Goodput is ProductiveInstanceSeconds over BilledInstanceSeconds.
TIME_METRICS = {
    BILLED: "BilledInstanceSeconds",
    "productive": "ProductiveInstanceSeconds",
    "retrained": "RetrainedInstanceSeconds",
    "startup": "StartupInstanceSeconds",
    "script": "ScriptOverheadInstanceSeconds",
    "stops": "StoppingInstanceSeconds",
    WAITING: "WaitingInstanceSeconds",
}
TIME_DIMENSIONS = ("Prefix",)
# What each team's jobs were billed, for the dashboard's per-team totals (the trainstack:team tag is what
# Cost Explorer reads once activated; this is the stack's own figure, the catalog's on-demand price).
TEAM_DIMENSION = "Team"
TEAM_DIMENSIONS = ("Prefix", TEAM_DIMENSION)
TEAM_COST_METRIC = "EstimatedCostUSD"

_CONSOLES = {  # the console's host per partition
    "aws": "https://{region}.console.aws.amazon.com",
    "aws-cn": "https://{region}.console.amazonaws.cn",
    "aws-us-gov": "https://console.amazonaws-us-gov.com",
}


def _console(arn: str) -> tuple[str, str]:
    """The console base URL and region of a resource's ARN (arn:partition:service:region:...)."""
    _, partition, _, region, *_ = arn.split(":")
    return _CONSOLES.get(partition, _CONSOLES["aws"]).format(region=region), region


def execution_link(execution_arn: str) -> str:
    base, region = _console(execution_arn)
    return f"{base}/states/home?region={region}#/v2/executions/details/{execution_arn}"


def job_links(execution_arn: str, job_name: str) -> dict[str, str]:
    """The job's page and its log streams (`<job>/algo-N-<epoch>`), in the execution's region."""
    base, region = _console(execution_arn)
    group = quote(quote(TRAINING_JOB_LOG_GROUP, safe=""), safe="").replace("%", "$")
    return {
        "job": f"{base}/sagemaker/home?region={region}#/jobs/{job_name}",
        "logs": f"{base}/cloudwatch/home?region={region}#logsV2:log-groups/log-group/{group}$3FlogStreamNameFilter$3D{job_name}",
    }


def mlflow_run(description: dict[str, Any]) -> str:
    """Where a job's MLflow run is, from DescribeTrainingJob ("" without MlflowConfig): the tracking
    server, the experiment and the run's name, and the run's id once SageMaker reports it
    (MlflowDetails)."""
    config = description.get("MlflowConfig")
    if not config:
        return ""
    details = description.get("MlflowDetails") or {}
    run = config.get("MlflowRunName") or description.get("TrainingJobName", "")
    where = f"run {run}"
    if details.get("MlflowRunId"):
        where += f" (id {details['MlflowRunId']}, experiment id {details.get('MlflowExperimentId', '?')})"
    return f"{where} in experiment {config.get('MlflowExperimentName') or 'Default'} on {config['MlflowResourceArn']}"


def mlflow_ui_call(description: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The SageMaker call (boto3 method, arguments) that gives a signed-in link to the MLflow UI of a
    job's tracking server or MLflow App, valid as long as the API allows; None for an untracked job."""
    config = description.get("MlflowConfig")
    if not config:
        return None
    arn = config["MlflowResourceArn"]
    if is_mlflow_app(arn):
        longest = member_metadata("CreatePresignedMlflowAppUrlRequest", "ExpiresInSeconds")["max"]
        return "create_presigned_mlflow_app_url", {"Arn": arn, "ExpiresInSeconds": longest}
    longest = member_metadata("CreatePresignedMlflowTrackingServerUrlRequest", "ExpiresInSeconds")["max"]
    return "create_presigned_mlflow_tracking_server_url", {
        "TrackingServerName": resource_name(arn),
        "ExpiresInSeconds": longest,
    }


def trial_account(trial: dict[str, Any]) -> dict[str, int]:
    """A trial's account of time: its attempts' (goodput.attempt_account, in each attempt's record)."""
    return total([attempt["account"] for attempt in trial.get("attempts", []) if "account" in attempt])


def metric_lines(trials: list[dict[str, Any]], prefix: str, timestamp_ms: int, team: str = "") -> list[str]:
    """Embedded-metric-format lines for each trial that reached SageMaker: one with a count by status
    and the instance-seconds it was billed, one with its account of time (TIME_METRICS: what the
    dashboard's goodput is read from), and one per kind of failure its restarts followed
    (restarts.restarts_by_kind) with their count and, where known, the steps they lost and what
    those cost; with the run's `team`, one with the instance-seconds billed and their estimated cost
    under the team (an unknown cost is left out)."""
    lines = []
    for trial in trials:
        if not trial.get("job_name"):
            continue
        billed = trial.get("billable_seconds", 0) * trial.get("instance_count", 1)
        lines.append(
            _document(
                timestamp_ms,
                dict(zip(METRIC_DIMENSIONS, (prefix, trial["status"]), strict=True)),
                {JOBS_METRIC: (1, "Count"), BILLABLE_METRIC: (billed, "Seconds")},
            )
        )
        if team:
            billed_by_team = {BILLABLE_METRIC: (billed, "Seconds")}
            if trial.get("cost_usd") is not None:
                billed_by_team[TEAM_COST_METRIC] = (trial["cost_usd"], "None")  # CloudWatch has no currency unit
            lines.append(_document(timestamp_ms, dict(zip(TEAM_DIMENSIONS, (prefix, team), strict=True)), billed_by_team))
        if any("account" in attempt for attempt in trial.get("attempts", [])):
            account = trial_account(trial)
            times = {TIME_METRICS[part]: (seconds, "Seconds") for part, seconds in account.items()}
            lines.append(_document(timestamp_ms, dict(zip(TIME_DIMENSIONS, (prefix,), strict=True)), times))
        # A trial without restarts adds no line, not a zero: a zero would need a kind to be filed
        # under, and each metric that gets data is billed for that month; a Sum graph reads no data as none.
        for kind, restarts in restarts_by_kind(trial.get("attempts", [])).items():
            measured = {
                RESTARTS_METRIC: (restarts.restarts, "Count"),
                STEPS_LOST_METRIC: (restarts.steps_lost, "Count"),
                LOST_STEPS_COST_METRIC: (restarts.lost_usd, "None"),  # CloudWatch has no currency unit
            }
            # an unknown is left out: reported as zero it would read as nothing lost
            known = {name: (value, unit) for name, (value, unit) in measured.items() if value is not None}
            lines.append(_document(timestamp_ms, dict(zip(RESTART_DIMENSIONS, (prefix, kind), strict=True)), known))
    return lines


def _document(timestamp_ms: int, dimensions: dict[str, str], metrics: dict[str, tuple[float, str]]) -> str:
    """One EMF line: the dimensions' and metrics' values at the top level, where CloudWatch reads
    them, and the metrics declared with their dimension set (CloudWatch extracts only what is
    declared)."""
    document = {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": RUN_METRICS_NAMESPACE,
                    "Dimensions": [list(dimensions)],
                    "Metrics": [{"Name": name, "Unit": unit} for name, (_, unit) in metrics.items()],
                }
            ],
        },
        **dimensions,
        **{name: value for name, (value, _) in metrics.items()},
    }
    return json.dumps(document, separators=(",", ":"))
