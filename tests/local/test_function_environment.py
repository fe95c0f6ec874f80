"""Each emulated function runs with its own configured variables, as Lambda runs it: never with the
process's environment, which every stack the process opens (and every thread) shares. Which test
files share a pytest worker must not decide what a function sees."""

from __future__ import annotations

import json
import os

import boto3
import pytest

from tests.core.specs import DDP
from trainstack.identity import Run
from trainstack.request import build_request
from trainstack.rules import check_or_raise
from trainstack.service_jobs import submit_arguments
from trainstack.spec import parse_spec
from trainstack.workflow import trigger_of
from trainstack_local.emulator import LOCAL_ENVIRONMENT, REGION, local_aws, training_files

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LEAKED_QUEUE = "arn:aws:batch:us-east-1:123456789012:job-queue/another-stacks-queue"


SPEC = {**DDP, "inputs": {}}
RUN_INPUT = {"spec": SPEC}


def stop_a_failed_run(execution: str) -> dict:
    """The Stop function's answer to a run of its stack (started with SPEC inline) that failed."""
    detail = {"input": json.dumps(RUN_INPUT), "name": execution, "status": "FAILED"}
    answer = boto3.client("lambda", region_name=REGION).invoke(
        FunctionName="trainstack-stop", Payload=json.dumps({"detail": detail}).encode()
    )
    return {"error": answer.get("FunctionError"), **json.loads(answer["Payload"].read())}


def queue_a_job_of(stack, execution: str) -> str:
    """What Create submits for the run `execution` into the stack's team queue, held there (its service
    environment DISABLED, so nothing dispatches it); returns the service job's name."""
    batch = boto3.client("batch", region_name=REGION)
    (environment,) = batch.describe_service_environments()["serviceEnvironments"]
    batch.update_service_environment(serviceEnvironment=environment["serviceEnvironmentArn"], state="DISABLED")
    spec = parse_spec(SPEC)
    run = Run(trigger_of(RUN_INPUT, execution).lineage)
    request = build_request(
        spec, check_or_raise(spec, stack=stack.context), stack.context, trial=run.trial(), execution=execution
    )
    share = stack.context.queue_default_share
    batch.submit_service_job(**submit_arguments(request, stack.context.job_queue_arn, share, 0))
    return request["TrainingJobName"]


def test_a_variable_in_the_process_environment_never_reaches_a_function(default_stack, tmp_path, monkeypatch):
    monkeypatch.setenv("JOB_QUEUE_ARN", LEAKED_QUEUE)  # as a stack with a queue once left it
    with local_aws(default_stack.json, tmp_path, files=training_files(tmp_path)):
        answer = stop_a_failed_run("no-queue-here")
        assert answer["error"] is None, answer  # it did not look for service jobs in a queue it lacks
        assert answer["stopped"] == []


def test_a_function_leaves_the_process_environment_as_it_was(default_stack, tmp_path):
    before = dict(os.environ)
    with local_aws(default_stack.json, tmp_path, files=training_files(tmp_path)):
        stop_a_failed_run("leaves-nothing")
        changed = {key for key, value in os.environ.items() if before.get(key) != value}
        assert changed <= set(LOCAL_ENVIRONMENT)  # the emulated account's keys, none of the functions' variables


@pytest.mark.parametrize("order", [("queue", "plain"), ("plain", "queue")])
def test_a_queue_stack_and_a_stack_without_one_in_one_process_each_see_only_their_own(
    order, default_stack, queue_stack, tmp_path
):
    templates = {"queue": queue_stack.json, "plain": default_stack.json}
    for name in order:
        workdir = tmp_path / name
        with local_aws(templates[name], workdir, files=training_files(workdir)) as (stack, _):
            execution = f"run-on-{name}"
            queued = [queue_a_job_of(stack, execution)] if name == "queue" else []
            answer = stop_a_failed_run(execution)
            assert answer["error"] is None, answer
            assert answer["stopped"] == queued  # the queue stack's Stop finds its run's job in its own queue
