"""`trainstack queue`: the team queue read from Batch (the AWS calls; team_queue.py shapes the answer)."""

from __future__ import annotations

from datetime import UTC, datetime

from trainstack.service_jobs import ACTIVE
from trainstack_cli.stack import EXIT_NO_STACK, CliError, Stack, aws_errors
from trainstack_cli.team_queue import QueueView, queue_view


def read_queue(stack: Stack) -> QueueView:
    """The team queue's active jobs by share, where each stands, and the capacity each share uses."""
    queue_arn = stack.context.job_queue_arn
    if not queue_arn:
        raise CliError(
            f"stack {stack.name} has no team queue; deploy it with `cdk deploy -c queue=true` "
            "(shares: -c queue_shares=research:1,prod:0.5) for specs with `queue:` to wait in one",
            EXIT_NO_STACK,
        )
    with aws_errors(f"stack {stack.name}"):
        batch = stack.client("batch")
        pages = batch.get_paginator("list_service_jobs")
        # Without a status ListServiceJobs lists only RUNNING jobs, so each active status is asked for;
        # a job that moved on between two pages is listed twice, and described once.
        listed = dict.fromkeys(
            summary["jobId"]
            for status in ACTIVE
            for page in pages.paginate(jobQueue=queue_arn, jobStatus=status)
            for summary in page["jobSummaryList"]
        )
        # Only DescribeServiceJob says a job's priority and the instances its request asks for.
        described = [batch.describe_service_job(jobId=job_id) for job_id in listed]
        snapshot = batch.get_job_queue_snapshot(jobQueue=queue_arn)
    context = stack.context
    active = [job for job in described if job["status"] in ACTIVE]  # not one that ended since it was listed
    return queue_view(queue_arn, context.queue_shares, context.queue_max_instances, active, snapshot, datetime.now(UTC))
