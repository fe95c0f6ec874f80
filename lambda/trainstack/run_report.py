"""What a run's end reports, besides its status: console links a person clicks, and the metric lines
the dashboard counts (CloudWatch's embedded metric format, which Lambda's log delivery turns into
metrics with no PutMetricData call and no extra permission). Pure: Notify prints and publishes them.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from trainstack.layout import TRAINING_JOB_LOG_GROUP

RUN_METRICS_NAMESPACE = "trainstack"
JOBS_METRIC = "TrainingJobs"  # one per training job that ended, by Status
BILLABLE_METRIC = "BillableInstanceSeconds"
METRIC_DIMENSIONS = ("Prefix", "Status")

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


def metric_lines(trials: list[dict[str, Any]], prefix: str, timestamp_ms: int) -> list[str]:
    """One embedded-metric-format line per trial that reached SageMaker: a count by status and the
    instance-seconds it was billed."""
    lines = []
    for trial in trials:
        if not trial.get("job_name"):
            continue
        document = {
            "_aws": {
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [
                    {
                        "Namespace": RUN_METRICS_NAMESPACE,
                        "Dimensions": [list(METRIC_DIMENSIONS)],
                        "Metrics": [{"Name": JOBS_METRIC, "Unit": "Count"}, {"Name": BILLABLE_METRIC, "Unit": "Seconds"}],
                    }
                ],
            },
            "Prefix": prefix,
            "Status": trial["status"],
            JOBS_METRIC: 1,
            BILLABLE_METRIC: trial.get("billable_seconds", 0) * trial.get("instance_count", 1),
        }
        lines.append(json.dumps(document, separators=(",", ":")))
    return lines
