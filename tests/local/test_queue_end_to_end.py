"""The team queue end to end (docs/team-queue.md): runs go through the synthesized state machine
and its real handlers into the Batch twin's queue, capped at 2 instances and shared by two teams of
equal weight, and their jobs really train once the queue dispatches them."""

from __future__ import annotations

from datetime import datetime

import boto3
import pytest

from tests.local.twin_runs import function_log, job_run, notifications, printed_steps, start_inline, wait_for_step
from tests.synth import synthesize
from trainstack.polling import poll_until
from trainstack.service_jobs import BATCH_TRAINING_JOB_PREFIX, training_job_name
from trainstack_local.emulator import REGION, local_aws, training_files
from trainstack_local.pipeline import finish, training_jobs, upload_sample_data

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SHARES = ("research", "prod")


def job(name: str, **queue) -> dict:
    team = queue.get("share") or SHARES[0]  # a direct start's team: the share it names, else the stack's default
    return {
        "name": name,
        "instance_type": "ml.g5.xlarge",
        "strategy": "ddp",
        "framework_version": "2.10.0",
        "hyperparameters": {"model": "gpt-tiny", "max_steps": 2, "log_every": 1},
        "inputs": {"train": {"s3_uri": f"s3://trainstack-local-trigger/datasets/{team}/sample/", "mode": "File"}},
        "max_runtime": "1h",
        **({"queue": queue} if queue else {}),
    }


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    """One emulated stack with a team queue (2 instances, two teams of equal weight) for the module."""
    template = synthesize(queue=True, queue_max_instances=2, queue_shares=",".join(f"{s}:1" for s in SHARES)).json
    workdir = tmp_path_factory.mktemp("queued")
    with local_aws(template, workdir, files=training_files(workdir)) as (stack, twin):
        upload_sample_data(stack)
        yield stack, twin


def batch():
    return boto3.client("batch", region_name=REGION)


def service_jobs(stack, status: str | None = None) -> list[dict]:
    """The queue's service jobs (in one status, or in every status)."""
    statuses = (
        [status] if status else ["SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED", "FAILED"]
    )
    queue = stack.context.job_queue_arn
    return [j for s in statuses for j in batch().list_service_jobs(jobQueue=queue, jobStatus=s)["jobSummaryList"]]


def set_environment(stack, state: str) -> None:
    """Hold the queue (DISABLED: Batch dispatches nothing from it) or let it go."""
    (environment,) = batch().describe_service_environments()["serviceEnvironments"]
    batch().update_service_environment(serviceEnvironment=environment["serviceEnvironmentArn"], state=state)


def dispatched(name_part: str) -> list[dict]:
    """The training jobs Batch created for specs whose name holds `name_part`, in the order created."""
    jobs = [
        boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=j["TrainingJobName"])
        for j in training_jobs()
    ]
    return sorted((j for j in jobs if name_part in j["TrainingJobName"]), key=lambda j: j["CreationTime"])


def share_of(training_job: dict) -> str:
    return next(share for share in SHARES if f"-{share}" in training_job["TrainingJobName"])


def most_at_once(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals that overlap at any moment."""
    moments = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals], key=lambda m: (m[0], m[1]))
    running = peak = 0
    for _, change in moments:
        running += change
        peak = max(peak, running)
    return peak


def test_two_teams_three_jobs_each_under_a_cap_of_two_take_turns_and_all_complete(queued):
    stack, _ = queued
    # Held until all six wait in the queue, so the order is the queue's, not the order in which the
    # executions happen to reach Create.
    set_environment(stack, "DISABLED")
    executions = [
        start_inline(stack, job(f"turns-{share}-{n}", share=share), f"turns-{share}-{n}") for n in range(3) for share in SHARES
    ]
    poll_until(lambda: len(service_jobs(stack, "RUNNABLE")) == 6, timeout=120, what="six service jobs to wait in the queue")
    set_environment(stack, "ENABLED")
    assert [finish(execution).status for execution in executions] == ["SUCCEEDED"] * 6
    jobs = dispatched("turns-")
    assert len(jobs) == 6 and all(j["TrainingJobStatus"] == "Completed" for j in jobs)
    # An instance is held from the training job's creation (Batch's dispatch) to its end.
    assert most_at_once([(j["CreationTime"], j["TrainingEndTime"]) for j in jobs]) == 2
    # The teams take turns. What each share used in the last decay window (another test of this module may
    # have run jobs) decides who goes first, and the lighter share may go several times until they are even;
    # from then on, while both still have jobs waiting, neither gets more than one job ahead of the other.
    shares = [share_of(j) for j in jobs]
    lead = [shares[:n].count("research") - shares[:n].count("prod") for n in range(1, 7)]
    even = next((n for n, ahead in enumerate(lead) if ahead == 0), len(lead))
    for n in range(even, len(lead)):
        if all(shares[: n + 1].count(share) < 3 for share in SHARES):
            assert abs(lead[n]) <= 1, shares


def test_a_priority_9000_job_submitted_last_starts_next(queued):
    stack, _ = queued
    early = [start_inline(stack, job(f"prio-early-{n}", share="research"), f"prio-early-{n}") for n in range(4)]
    poll_until(lambda: len(dispatched("prio-early")) == 2, timeout=120, what="two jobs to take the queue's two instances")
    # Held from here (the two keep training), so the urgent job is still waiting behind the other two
    # when it reaches the queue however long its execution takes to get there.
    set_environment(stack, "DISABLED")
    try:
        poll_until(lambda: len(service_jobs(stack, "RUNNABLE")) == 2, timeout=60, what="two jobs to wait behind them")
        urgent = start_inline(stack, job("prio-urgent", share="research", priority=9000), "prio-urgent")
        poll_until(lambda: len(service_jobs(stack, "RUNNABLE")) == 3, timeout=60, what="the urgent job to wait in the queue")
        front = batch().get_job_queue_snapshot(jobQueue=stack.context.job_queue_arn)["frontOfQueue"]["jobs"]
    finally:
        set_environment(stack, "ENABLED")
    urgent_job = next(j for j in service_jobs(stack) if j["jobName"].startswith("trainstack-prio-urgent"))
    assert front[0]["jobArn"] == urgent_job["jobArn"]
    assert [finish(execution).status for execution in [*early, urgent]] == ["SUCCEEDED"] * 5
    order = [j["TrainingJobName"] for j in dispatched("prio-")]
    assert order[2].startswith(f"{BATCH_TRAINING_JOB_PREFIX}trainstack-prio-urgent"), order


def test_a_spec_without_queue_on_a_stack_with_one_creates_its_training_job_directly(queued):
    stack, _ = queued
    before = len(service_jobs(stack))
    execution = start_inline(stack, job("direct"), "direct")
    assert finish(execution).status == "SUCCEEDED"
    (created,) = [j["TrainingJobName"] for j in training_jobs() if "direct" in j["TrainingJobName"]]
    assert created.startswith("trainstack-direct-") and len(service_jobs(stack)) == before


def test_a_queued_runs_training_job_is_the_one_its_service_job_names(queued):
    stack, _ = queued
    execution = start_inline(stack, job("named", share="prod"), "named")
    assert finish(execution).status == "SUCCEEDED"
    (summary,) = [j for j in service_jobs(stack, "SUCCEEDED") if j["jobName"].startswith("trainstack-named-")]
    described = batch().describe_service_job(jobId=summary["jobId"])
    (created,) = [j["TrainingJobName"] for j in training_jobs() if "named" in j["TrainingJobName"]]
    assert created == training_job_name(described) and created.startswith(f"{BATCH_TRAINING_JOB_PREFIX}{summary['jobName']}")


def test_a_queued_run_whose_execution_is_stopped_ends_aborted_and_the_stop_rule_terminates_its_waiting_job(queued):
    stack, _ = queued
    set_environment(stack, "DISABLED")  # nothing is dispatched: the job waits in the queue
    try:
        execution = start_inline(stack, job("halted", share="prod"), "halted")
        (waiting,) = poll_until(
            lambda: [j for j in service_jobs(stack, "RUNNABLE") if j["jobName"].startswith("trainstack-halted-")],
            timeout=60,
            what="the run's job to wait in the queue",
        )
        boto3.client("stepfunctions", region_name=REGION).stop_execution(executionArn=execution)
        assert finish(execution).status == "ABORTED"
        ended = poll_until(
            lambda: batch().describe_service_job(jobId=waiting["jobId"]),
            lambda found: found.get("isTerminated"),
            timeout=60,
            what="the Stop rule to terminate the waiting job",
        )
    finally:
        set_environment(stack, "ENABLED")
    assert ended["status"] == "FAILED" and "latestAttempt" not in ended
    assert any(line.startswith(f"halted ABORTED: terminated {waiting['jobName']}") for line in function_log("trainstack-stop"))
    stack.batch.wait_for_passes(10)  # with the queue enabled again: any of them would have dispatched it
    assert not [j for j in training_jobs() if "halted" in j["TrainingJobName"]]


def test_describe_service_job_failing_for_a_while_leaves_a_queued_job_training_to_completion(queued):
    stack, _ = queued
    execution = start_inline(
        stack, job("outage", share="prod") | {"hyperparameters": {"model": "gpt-tiny", "max_steps": 40}}, "outage"
    )
    poll_until(
        lambda: [j for j in service_jobs(stack, "RUNNING") if j["jobName"].startswith("trainstack-outage-")],
        timeout=300,
        what="the run's job to run",
    )
    stack.faults.inject("batch", "DescribeServiceJob", "ServiceUnavailable", "Service unavailable. Try again.", seconds=12)
    try:
        run = finish(execution)
    finally:
        stack.faults.clear()
    assert run.status == "SUCCEEDED"
    assert stack.faults.answered("batch", "DescribeServiceJob") >= 3
    (trained,) = [j for j in training_jobs() if "outage" in j["TrainingJobName"]]  # neither stopped nor created again
    assert trained["TrainingJobStatus"] == "Completed"


def run_of(stack, name: str) -> list[dict]:
    """The service jobs of a run started as `name` (start_inline's execution name)."""
    return [j for j in service_jobs(stack) if j["jobName"].startswith(f"trainstack-{name}-")]


def notification(stack, execution: str) -> dict:
    (message,) = [m for m in notifications(stack) if m.get("execution_arn") == execution]
    return message


def test_a_preempted_queued_job_resumes_at_its_checkpoint_and_its_run_reports_one_preemption_and_no_failure(queued):
    stack, twin = queued
    resumable = {"model": "gpt-tiny", "max_steps": 400, "log_every": 10, "checkpoint_every": 20}
    execution = start_inline(stack, job("preempted", share="prod") | {"hyperparameters": resumable}, "preempted")
    (running,) = poll_until(
        lambda: [j for j in run_of(stack, "preempted") if j["status"] == "RUNNING"], timeout=300, what="the run's job to run"
    )
    first = training_job_name(batch().describe_service_job(jobId=running["jobId"]))
    wait_for_step(job_run(twin, first), 40)
    stack.batch.preempt(running["jobId"], "a job of quota share research needed its instances")
    assert finish(execution).status == "SUCCEEDED"

    (trial,) = notification(stack, execution)["trials"]
    assert (trial["status"], trial["preemptions"], trial["restarts"]) == ("Completed", 1, 0)
    preempted, resumed = trial["attempts"]
    assert (preempted["training_job_name"], preempted["kind"], preempted["status"]) == (first, "batch preemption", "Stopped")
    assert resumed["kind"] == "" and resumed["job_name"] == preempted["job_name"] and resumed["training_job_name"] != first
    checkpoint = preempted["checkpoint_step"]  # the stop's own save, at the step SIGTERM found it
    assert checkpoint >= 40 and preempted["steps_lost"] == preempted["trained_to_step"] - checkpoint >= 0
    again = job_run(twin, resumed["training_job_name"])
    assert f"at step {checkpoint}, example position" in again.log("algo-1") and printed_steps(again)[0] > checkpoint
    assert trial["goodput"]["instance_seconds"]["billed"] > 0 and 0 < trial["goodput"]["goodput"] < 1
