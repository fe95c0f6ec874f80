"""Redrive: each dead letter goes back to the target it missed, and leaves the queue only once taken."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from trainstack_cli.redrive import redrive

REGION = "us-east-1"
STOP = f"arn:aws:lambda:{REGION}:123456789012:function:trainstack-stop"
EVENT = {"detail": {"bucket": {"name": "trigger"}, "object": {"key": "jobs/a.yaml", "version-id": "v1"}}}


@pytest.fixture
def aws(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield


def _queue_with(*messages: tuple[str, dict[str, str]]) -> str:
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="dead-letters")["QueueUrl"]
    for body, attributes in messages:
        sqs.send_message(
            QueueUrl=url,
            MessageBody=body,
            MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
        )
    return url


def _state_machine() -> str:
    definition = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return sfn.create_state_machine(name="m", definition=definition, roleArn="arn:aws:iam::123456789012:role/r")[
        "stateMachineArn"
    ]


def test_an_undelivered_trigger_starts_the_state_machine_with_the_event_as_input(aws):
    machine = _state_machine()
    url = _queue_with((json.dumps(EVENT), {"TARGET_ARN": machine, "ERROR_CODE": "ExecutionLimitExceeded"}))
    result = redrive(url, lambda service: boto3.client(service, region_name=REGION))
    assert (result.delivered, result.kept) == ([machine], [])
    (execution,) = boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=machine)["executions"]
    described = boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=execution["executionArn"])
    assert json.loads(described["input"]) == EVENT
    assert boto3.client("sqs", region_name=REGION).receive_message(QueueUrl=url).get("Messages") is None


def test_a_stop_functions_own_dead_letter_invokes_the_stop_function_again_asynchronously(aws):
    body = json.dumps({"detail": {"status": "FAILED", "name": "e", "input": "{}"}})
    url = _queue_with((body, {"RequestID": "r-1", "ErrorCode": "200", "ErrorMessage": "Task timed out"}))
    lambda_client = boto3.client("lambda", region_name=REGION)
    with Stubber(lambda_client) as stubbed:
        stubbed.add_response(
            "invoke", {"StatusCode": 202}, {"FunctionName": STOP, "InvocationType": "Event", "Payload": body.encode()}
        )
        clients = {"lambda": lambda_client}
        result = redrive(url, lambda service: clients.get(service) or boto3.client(service, region_name=REGION), STOP)
        stubbed.assert_no_pending_responses()
    assert result.delivered == [STOP]


def test_an_event_its_target_still_refuses_stays_in_the_queue_named(aws):
    gone = f"arn:aws:states:{REGION}:123456789012:stateMachine:deleted"
    url = _queue_with((json.dumps(EVENT), {"TARGET_ARN": gone}))
    result = redrive(url, lambda service: boto3.client(service, region_name=REGION))
    assert result.delivered == [] and len(result.kept) == 1 and gone in result.kept[0]
    attributes = boto3.client("sqs", region_name=REGION).get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    assert int(attributes["Attributes"]["ApproximateNumberOfMessagesNotVisible"]) == 1  # back after its timeout
