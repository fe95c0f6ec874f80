"""Where moto stops short of AWS, the small patches that make it behave as the deployed stack does
(shared/reference/toolchain.md, "Running AWS locally"). Pinned moto internals, patched for the
duration of `moto_bridges()` only:

- Lambda: moto without Docker only echoes payloads; here the function's own `Handler` is imported
  and called in-process with the function's environment, and an exception is reported the way
  Lambda reports it, so the state machine's Retry/Catch match the exception class name.
- EventBridge: moto matches rules but cannot deliver to Step Functions or (here) Lambda; a matched
  rule starts the execution with the event as input, or invokes the function asynchronously.
- Step Functions: StopExecution emits the "Step Functions Execution Status Change" event (ABORTED)
  that the stack's rule sends to the Stop function.
- SageMaker: CreateTrainingJob refuses a duplicate name and an image missing from the region, as
  the real API does, keeps the request's Environment (moto drops it) and hands the job to the
  twin; StopTrainingJob (moto has none) asks the twin to stop it.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3

from trainstack_local.registry import ImageNotFoundError
from trainstack_local.sagemaker_twin import SageMakerTwin

_INVOKE_LOCK = threading.Lock()  # one handler at a time: each sees only its own environment


@contextmanager
def moto_bridges(twin: SageMakerTwin, region: str, account: str) -> Iterator[None]:
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.core.responses import EmptyResult
    from moto.events.models import Rule, events_backends
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.responses import SageMakerResponse
    from moto.stepfunctions.models import StepFunctionBackend

    originals = {
        (LambdaSimpleBackend, "invoke"): LambdaSimpleBackend.invoke,
        (Rule, "send_to_targets"): Rule.send_to_targets,
        (SageMakerResponse, "create_training_job"): SageMakerResponse.create_training_job,
        (StepFunctionBackend, "stop_execution"): StepFunctionBackend.stop_execution,
    }
    create_training_job = SageMakerResponse.create_training_job
    stop_execution = StepFunctionBackend.stop_execution

    def invoke(self: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any) -> bytes:
        function = self.get_function(function_name, qualifier)
        module_name, _, attribute = function.handler.rpartition(".")
        handler = getattr(__import__(module_name, fromlist=[attribute]), attribute)
        with _INVOKE_LOCK, _function_environment(function.environment_vars):
            try:
                return json.dumps(handler(json.loads(body or "{}"), None), default=str).encode()
            except Exception as error:  # reported as Lambda reports an unhandled exception
                response_headers["x-amz-function-error"] = "Unhandled"
                trace = traceback.format_exc().splitlines()
                return json.dumps({"errorMessage": str(error), "errorType": type(error).__name__, "stackTrace": trace}).encode()

    def send_to_targets(self: Any, original_event: dict[str, Any], transform_input: bool = True) -> None:
        if not self.event_pattern.matches_event(original_event):
            return
        payload = json.dumps(original_event, default=str)
        for target in self.targets:
            if ":states:" in target["Arn"]:
                name = f"s3-{int(time.time() * 1000)}-{abs(hash(payload)) % 10**8}"
                boto3.client("stepfunctions", region_name=region).start_execution(
                    stateMachineArn=target["Arn"], name=name, input=payload
                )
            elif ":lambda:" in target["Arn"]:  # EventBridge invokes functions asynchronously
                threading.Thread(
                    target=lambda arn=target["Arn"]: boto3.client("lambda", region_name=region).invoke(
                        FunctionName=arn, Payload=payload.encode()
                    ),
                    daemon=True,
                ).start()

    def create(self: Any) -> Any:
        name = self._get_param("TrainingJobName")
        if name in self.sagemaker_backend.training_jobs:  # the real API refuses a second job with a name
            raise ValidationError(
                "Training job names must be unique within an AWS account and region, "
                f"and a training job with this name already exists ({name})"
            )
        try:
            image = twin.check_image(self._get_param("AlgorithmSpecification")["TrainingImage"])
        except ImageNotFoundError as error:
            raise ValidationError(str(error)) from None
        result = create_training_job(self)
        job = self.sagemaker_backend.training_jobs[name]
        job.environment = self._get_param("Environment")
        job.retry_strategy = self._get_param("RetryStrategy")
        twin.start(job, image)
        return result

    def stop_training_job(self: Any) -> Any:
        name = self._get_param("TrainingJobName")
        job = self.sagemaker_backend.training_jobs.get(name)
        if job is None:
            raise ValidationError(f"Requested resource not found: training job {name}")
        if job.training_job_status != "InProgress":
            raise ValidationError(f"The request was rejected because the training job is in status {job.training_job_status}.")
        twin.stop(name)
        return EmptyResult()

    def stop(self: Any, execution_arn: str) -> Any:
        execution = stop_execution(self, execution_arn)
        detail = {
            "executionArn": execution_arn,
            "stateMachineArn": execution.state_machine_arn,
            "name": execution.name,
            "status": "ABORTED",
            "input": execution.execution_input,
        }
        events_backends[account][region].put_events(
            [{"Source": "aws.states", "DetailType": "Step Functions Execution Status Change", "Detail": json.dumps(detail)}]
        )
        return execution

    LambdaSimpleBackend.invoke = invoke
    Rule.send_to_targets = send_to_targets
    SageMakerResponse.create_training_job = create
    SageMakerResponse.stop_training_job = stop_training_job
    StepFunctionBackend.stop_execution = stop
    try:
        yield
    finally:
        for (owner, attribute), original in originals.items():
            setattr(owner, attribute, original)
        del SageMakerResponse.stop_training_job


@contextmanager
def _function_environment(variables: dict[str, str]) -> Iterator[None]:
    """The function's configured environment for the call, as Lambda provides it. Only its own
    variables are set and restored: twin threads read the environment (credentials) at any
    moment, so it must never be cleared."""
    from trainstack.handlers.environment import use_client_factory

    previous = {key: os.environ.get(key) for key in variables}
    os.environ.update(variables)
    use_client_factory(None)  # the handlers cache their environment per process, like a warm Lambda
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        use_client_factory(None)
