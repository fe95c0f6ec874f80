"""Create: build the request and create the training job, idempotently."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from trainstack.errors import THROTTLING, CapacityUnavailableError, ThrottledError
from trainstack.handlers.environment import client, environment
from trainstack.identity import Run
from trainstack.workflow import next_poll_seconds


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    # Imported on the call, not with the module: the spec model (pydantic), the rules and the
    # request builder are most of this package's import time (tools/bench_lambda.py); the module's
    # cold import leaves them to the first call.
    from trainstack.request import build_request, validate_request
    from trainstack.rules import Resolution, check_or_raise
    from trainstack.spec import parse_spec

    stack = environment().stack
    spec = parse_spec(event["spec"])
    # Validate resolved the spec and checked every rule; an execution started before the deploy that
    # added `resolution` to the payload is checked again here.
    resolution = Resolution.from_json(event["resolution"]) if "resolution" in event else check_or_raise(spec, stack=stack)
    trial = event["trial"]
    identity = Run(**event["run"]).trial(trial["index"] if event["trial_count"] > 1 else None)
    attempt = event.get("attempt", 0)  # > 0: re-created after a capacity failure, same checkpoints
    request = build_request(
        spec,
        resolution,
        stack,
        trial=identity,
        overrides=trial["hyperparameters"],
        attempt=attempt,
        execution=event.get("execution"),
    )
    validate_request(request)
    job_name = request["TrainingJobName"]
    created = True
    try:
        client("sagemaker").create_training_job(**request)
    except ClientError as error:
        code, message = error.response["Error"]["Code"], error.response["Error"].get("Message", "")
        if code == "ResourceInUse" or "already exists" in message:
            created = False  # a redelivered event or a redriven execution: poll the job we made
        elif code == "ResourceLimitExceeded":
            raise CapacityUnavailableError(
                f"{job_name}: {message} Request a quota increase for {spec.instance_count} x {spec.instance_type} "
                "training (Service Quotas, SageMaker), or choose another instance type or region."
            ) from None
        elif code in THROTTLING:
            raise ThrottledError(f"{job_name}: {message}") from None
        else:
            raise
    env = environment()
    return {
        "job_name": job_name,
        "created": created,
        "poll_seconds": next_poll_seconds(None, env.first_poll_seconds, env.max_poll_seconds),
    }
