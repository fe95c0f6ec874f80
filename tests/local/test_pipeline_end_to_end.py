"""The whole pipeline offline: uploads and starts go through the synthesized state machine, its
real handlers, and training jobs that really run (docs/concepts.md, "The pipeline")."""

from __future__ import annotations

import json
import re
import time
from types import SimpleNamespace

import boto3
import pytest
import yaml
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

from tests.local.twin_runs import function_log, notifications
from trainstack import facts
from trainstack.layout import TRAINING_JOB_LOG_GROUP
from trainstack.polling import poll_until
from trainstack.stack_context import DEAD_LETTER_OUTPUT
from trainstack_cli import main as cli
from trainstack_local.emulator import REGION, LocalStack, local_aws, training_files
from trainstack_local.pipeline import executions, finish, training_jobs, upload_sample_data
from trainstack_local.sagemaker_twin import TwinSettings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def job(**overrides) -> dict:
    spec = {
        "name": "e2e",
        "instance_type": "ml.g5.12xlarge",
        "strategy": "ddp",
        "framework_version": "2.10.0",
        "hyperparameters": {"model": "gpt-tiny", "max_steps": 4, "log_every": 2},
        "inputs": {"train": {"s3_uri": "s3://trainstack-local-trigger/datasets/default/sample/", "mode": "File"}},
        "max_runtime": "1h",
    }
    return {**spec, **overrides}


@pytest.fixture
def pipeline(default_stack, tmp_path):
    with local_aws(default_stack.json, tmp_path, files=training_files(tmp_path)) as (stack, twin):
        upload_sample_data(stack)
        yield stack, twin
        twin.wait()
        for name, run in twin.runs.items():  # pytest shows this only for a failed test: why a job failed
            print(f"--- {name}: the end of its hosts' logs\n{run.log()[-4000:]}")


def wait_for_new_executions(stack: LocalStack, known: int, count: int = 1, timeout: float = 30) -> list[str]:
    found = poll_until(
        lambda: executions(stack), lambda found: len(found) >= known + count, timeout=timeout, what=f"{count} new execution(s)"
    )
    return [e["executionArn"] for e in sorted(found, key=lambda e: e["startDate"])][known:]


def put(stack, key: str, body: bytes | dict) -> None:
    data = yaml.safe_dump(body).encode() if isinstance(body, dict) else body
    boto3.client("s3", region_name=REGION).put_object(Bucket=stack.trigger_bucket, Key=key, Body=data)


def assert_run_failed_with(stack, reason: str) -> None:
    """The one run fails with the job's reason as its Cause and in its notification."""
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    assert run.status == "FAILED" and reason in run.cause
    (message,) = notifications(stack)
    assert message["status"] == "Failed" and reason in message["trials"][0]["reason"]


def test_an_uploaded_spec_runs_to_completion_and_delivers_model_checkpoints_logs_and_its_report(pipeline):
    stack, _ = pipeline
    put(stack, "jobs/default/e2e.yaml", job())  # the default team's folder
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    assert (run.status, run.output["status"]) == ("SUCCEEDED", "Completed")
    (training_job,) = training_jobs()
    name = training_job["TrainingJobName"]
    assert name.startswith("trainstack-e2e-")
    s3 = boto3.client("s3", region_name=REGION)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=stack.artifacts_bucket)["Contents"]]
    assert f"models/default/{name}/output/model.tar.gz" in keys
    assert any(k.startswith("checkpoints/default/e2e/") and k.endswith("manifest.json") for k in keys)
    (message,) = notifications(stack)
    assert message["status"] == "Completed" and message["links"]["execution"]
    (trial,) = message["trials"]
    assert trial["model_artifacts"] == f"s3://{stack.artifacts_bucket}/models/default/{name}/output/model.tar.gz"
    assert trial["final_metrics"]["train:step"] == 4 and trial["cost_usd"] > 0
    printed = function_log("trainstack-notify")  # the emulated stack's function
    lines = [json.loads(line) for line in printed if line.startswith('{"_aws"')]  # for the dashboard
    (counted,) = [line for line in lines if "Status" in line]  # the job by its status (the others: time, team)
    logs = boto3.client("logs", region_name=REGION)
    assert (counted["Status"], counted["TrainingJobs"]) == ("Completed", 1)
    assert [line["Team"] for line in lines if "Team" in line] == ["default"]  # the run's team, from Validate
    (stream,) = logs.describe_log_streams(logGroupName=TRAINING_JOB_LOG_GROUP, logStreamNamePrefix=name)["logStreams"]
    assert re.fullmatch(rf"{name}/algo-1-\d{{10}}", stream["logStreamName"])  # as SageMaker names them
    events = logs.get_log_events(logGroupName=TRAINING_JOB_LOG_GROUP, logStreamName=stream["logStreamName"])["events"]
    assert any(e["message"].startswith("step=4 loss=") for e in events)
    # the job ran on the software of its image, framework_version's, not on this machine's
    image = facts.image_version("dlc", job()["framework_version"]).runtime
    (ran_on,) = [m.groups() for e in events if (m := re.search(r"algo-1\): runtime torch (\S+), Python (\S+)$", e["message"]))]
    assert (ran_on[0].split("+")[0], ran_on[1].rsplit(".", 1)[0]) == (image.torch, image.python)


def test_a_redelivered_event_does_not_launch_a_second_job(pipeline):
    stack, _ = pipeline
    put(stack, "jobs/e2e.yaml", job())
    (first,) = wait_for_new_executions(stack, known=0)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    event = sfn.describe_execution(executionArn=first)["input"]
    second = sfn.start_execution(stateMachineArn=stack.state_machine_arn, name="redelivered", input=event)["executionArn"]
    assert finish(first).status == "SUCCEEDED"
    assert finish(second).status == "SUCCEEDED"  # it found the job and polled it
    assert len(training_jobs()) == 1


def test_a_bad_spec_is_rejected_with_its_reason_before_anything_launches(pipeline):
    stack, _ = pipeline
    put(stack, "jobs/bad.yaml", job(instance_type="ml.p5.48xlarge", strategy="smddp", framework_version="2.2.0"))
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    assert run.status == "FAILED"
    assert "SMDDP does not support ml.p5.48xlarge" in run.cause
    assert training_jobs() == []
    (message,) = notifications(stack)
    assert message["status"] == "Rejected"


def test_a_data_drop_starts_one_run_per_marker_with_its_prefix_as_the_train_channel(pipeline):
    stack, _ = pipeline
    upload_sample_data(stack, "owt")  # the default team's datasets/default/owt/
    spec = job()
    del spec["inputs"]
    put(stack, "datasets/default/owt/job.yaml", spec)
    assert executions(stack) == []  # data objects and the spec alone start nothing
    put(stack, "datasets/default/owt/_SUCCESS", b"")
    (execution,) = wait_for_new_executions(stack, known=0)
    assert finish(execution).status == "SUCCEEDED"
    (training_job,) = training_jobs()
    description = boto3.client("sagemaker", region_name=REGION).describe_training_job(
        TrainingJobName=training_job["TrainingJobName"]
    )
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in description["InputDataConfig"]}
    assert channels["train"] == f"s3://{stack.trigger_bucket}/datasets/default/owt/"
    assert len(executions(stack)) == 1


def test_a_direct_start_with_the_spec_inline_runs(pipeline):
    stack, _ = pipeline
    sfn = boto3.client("stepfunctions", region_name=REGION)
    execution = sfn.start_execution(stateMachineArn=stack.state_machine_arn, name="direct-1", input=json.dumps({"spec": job()}))
    assert finish(execution["executionArn"]).status == "SUCCEEDED"


def test_a_sweep_runs_every_trial_with_its_hyperparameters(pipeline):
    stack, _ = pipeline
    put(stack, "jobs/sweep.json", json.dumps(job(sweep={"max_concurrency": 2, "grid": {"lr": [0.001, 0.0003]}})).encode())
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    assert run.status == "SUCCEEDED"
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    names = sorted(j["TrainingJobName"] for j in training_jobs())
    assert [n[-3:] for n in names] == ["-t0", "-t1"]
    assert {sagemaker.describe_training_job(TrainingJobName=n)["HyperParameters"]["lr"] for n in names} == {"0.001", "0.0003"}


def test_a_failing_training_job_fails_the_execution_with_its_failure_reason(pipeline):
    stack, _ = pipeline
    put(stack, "datasets/default/notes/readme.txt", b"not token shards")  # what only the running script can find out
    put(
        stack,
        "jobs/broken.yaml",
        job(inputs={"train": {"s3_uri": f"s3://{stack.trigger_bucket}/datasets/default/notes/", "mode": "File"}}),
    )
    assert_run_failed_with(stack, "no token shards")


def test_a_hyperparameter_the_builtin_script_would_refuse_is_refused_before_any_job(pipeline):
    stack, _ = pipeline
    put(stack, "jobs/typo.yaml", job(hyperparameters={"model": "gpt-tiny", "max_step": 3}))
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    assert run.status == "FAILED"
    assert "unknown hyperparameter 'max_step'" in run.cause
    assert training_jobs() == []


def test_a_capacity_fallback_runs_the_job_on_the_next_type_with_capacity(pipeline):
    stack, twin = pipeline
    twin.refuse_capacity("ml.g5.12xlarge", times=-1)
    spec = job(instance_types=["ml.g5.12xlarge", "ml.g6.12xlarge"])
    del spec["instance_type"]
    put(stack, "jobs/fallback.yaml", spec)
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    assert run.status == "SUCCEEDED"
    (training_job,) = training_jobs()  # one job: SageMaker chose the type, nothing was re-created
    described = boto3.client("sagemaker", region_name=REGION).describe_training_job(
        TrainingJobName=training_job["TrainingJobName"]
    )
    assert described["ResourceConfig"]["SelectedInstanceType"] == "ml.g6.12xlarge"
    assert [p["InstanceType"] for p in described["ResourceConfig"]["InstancePreferences"]] == ["ml.g5.12xlarge", "ml.g6.12xlarge"]


def test_a_job_that_finds_no_capacity_is_created_again(pipeline):
    stack, twin = pipeline
    twin.refuse_capacity("ml.g5.12xlarge", times=1)
    put(stack, "jobs/e2e.yaml", job())
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    twin.wait()
    assert run.status == "SUCCEEDED"
    statuses = {j["TrainingJobName"][-3:]: j["TrainingJobStatus"] for j in training_jobs()}
    assert statuses == {"-a1": "Completed", **{k: v for k, v in statuses.items() if k != "-a1"}}
    assert sorted(statuses.values()) == ["Completed", "Failed"]


@pytest.fixture
def retry_waits(monkeypatch) -> list[float]:
    """The waits moto's Step Functions interpreter spends in Retry blocks, recorded and compressed
    100-fold: the retries, their number and their order are the interpreter's own; only the clock runs fast."""
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds / 100)

    monkeypatch.setattr(retrier_decl, "time", SimpleNamespace(sleep=sleep))
    return waits


def test_a_job_whose_description_is_refused_is_stopped_and_its_run_fails(pipeline, retry_waits):
    stack, twin = pipeline
    message = "not authorized to describe"
    stack.faults.inject("sagemaker", "DescribeTrainingJob", "AccessDeniedException", message)
    put(stack, "jobs/e2e.yaml", job(hyperparameters={"model": "gpt-tiny", "max_steps": 100000, "log_every": 500}))
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    assert run.status == "FAILED"
    assert "Unwatched: could not be described" in run.cause and message in run.cause
    assert retry_waits == []  # a refusal of the request says something of it: the trial ends at once
    stack.faults.clear()
    (training_job,) = training_jobs()
    twin.wait()  # the failed execution's Stop rule stopped the job: nothing trains on unwatched
    status = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=training_job["TrainingJobName"])
    assert status["TrainingJobStatus"] == "Stopped"


def test_describe_failing_for_a_while_leaves_a_healthy_job_training_to_completion(pipeline):
    code = "InternalFailure"  # an HTTP 500; ServiceUnavailable (503) is rehearsed on the served twin
    stack, twin = pipeline
    put(stack, "jobs/e2e.yaml", job(hyperparameters={"model": "gpt-tiny", "max_steps": 40, "log_every": 10}))
    (execution,) = wait_for_new_executions(stack, known=0)
    poll_until(
        lambda: [r for r in twin.runs.values() if r.job.secondary_status == "Training"], bool, timeout=300, what="training"
    )
    # As on AWS for a while: every DescribeTrainingJob fails on SageMaker's side (an HTTP 5xx).
    stack.faults.inject("sagemaker", "DescribeTrainingJob", code, "We encountered an internal error. Try again.", seconds=12)
    run = finish(execution)
    assert (run.status, run.output["status"]) == ("SUCCEEDED", "Completed")
    assert stack.faults.answered("sagemaker", "DescribeTrainingJob") >= 3  # the loop kept asking through it
    (training_job,) = training_jobs()  # trained once: neither stopped nor created again
    assert training_job["TrainingJobStatus"] == "Completed"


def test_a_notification_that_sns_refuses_does_not_change_the_runs_outcome(pipeline):
    stack, _ = pipeline
    stack.faults.inject("sns", "Publish", "InvalidParameter", "Invalid parameter: Subject")
    put(stack, "jobs/e2e.yaml", job())
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    assert (run.status, run.output) == ("SUCCEEDED", {"status": "Completed", "reason": "all trials completed", "notified": False})
    assert notifications(stack) == []


def test_a_failing_trial_fails_the_run_while_the_other_trials_complete(pipeline):
    stack, _ = pipeline
    trials = [{"max_steps": 4}, {"max_steps": 4, "data_dir": "/opt/ml/input/data/missing"}]  # the second reads no data
    put(stack, "jobs/sweep.json", json.dumps(job(sweep={"max_concurrency": 2, "trials": trials})).encode())
    (execution,) = wait_for_new_executions(stack, known=0)
    run = finish(execution)
    assert run.status == "FAILED"
    statuses = {j["TrainingJobName"][-3:]: j["TrainingJobStatus"] for j in training_jobs()}
    assert statuses == {"-t0": "Completed", "-t1": "Failed"}
    assert "-t1: Failed: " in run.cause and "no token shards" in run.cause
    assert "-t0" not in run.cause


def test_an_upload_whose_run_cannot_start_waits_in_the_dead_letter_queue_until_redriven(pipeline, tmp_path, capsys):
    stack, _ = pipeline
    stack.faults.inject("stepfunctions", "StartExecution", "ExecutionLimitExceeded", "too many executions")
    put(stack, "jobs/e2e.yaml", job())
    sqs = boto3.client("sqs", region_name=REGION)
    queue = stack.outputs[DEAD_LETTER_OUTPUT]
    poll_until(lambda: _queued(sqs, queue) == 1, timeout=30, what="the event in the dead-letter queue")
    assert executions(stack) == []
    stack.faults.clear()
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps({"trainstack": stack.outputs}))
    assert cli.main(["redrive", "--outputs", str(outputs)]) == 0
    assert "1 event(s) delivered, 0 kept" in capsys.readouterr().out
    (execution,) = wait_for_new_executions(stack, known=0)
    assert finish(execution).status == "SUCCEEDED"
    assert _queued(sqs, queue) == 0 and len(training_jobs()) == 1


def _queued(sqs, queue_url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def test_a_job_ended_by_a_health_rule_fails_the_run_with_the_rules_reason(default_stack, tmp_path):
    settings = TwinSettings(fault_hooks=(("TRAINSTACK_INJECT_NAN", "0:3"),))  # rank 0's loss is NaN at step 3
    with local_aws(default_stack.json, tmp_path, files=training_files(tmp_path), settings=settings) as (stack, twin):
        upload_sample_data(stack)
        put(stack, "jobs/nan.yaml", job())
        assert_run_failed_with(stack, "health rule nonfinite tripped at step 3: grad_norm=nan")
        twin.wait()
        s3 = boto3.client("s3", region_name=REGION)
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=stack.artifacts_bucket, Prefix="checkpoints/")["Contents"]]
        assert any("step_00000003" in key and key.endswith("manifest.json") for key in keys)  # checkpoint_and_stop saved it
