"""Redrive: deliver again the events EventBridge put into the trigger dead-letter queue.

EventBridge gives up on a target after its retries (24 hours) and leaves the event in the queue
with the target's ARN as a message attribute. Each event goes back to that target as EventBridge
would have delivered it: the state machine's StartExecution with the event as input, the Stop
function invoked asynchronously, the topic published to. A message is deleted only after its
target took it, so a redrive that fails part-way leaves the rest queued. Redriving twice is safe:
a run's job names derive from the uploaded object's key and version, so a second execution of the
same event finds the first one's jobs and launches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TARGET_ARN = "TARGET_ARN"  # the message attribute EventBridge sets on dead letters
LAMBDA_ERROR = "ErrorCode"  # ... and one that Lambda sets on an asynchronous invocation's dead letter
BATCH = 10  # SQS's largest receive


@dataclass
class Redriven:
    delivered: list[str] = field(default_factory=list)  # target ARNs, one per event
    kept: list[str] = field(default_factory=list)  # why an event stayed in the queue


def redrive(queue_url: str, clients: Any, stop_function: str = "") -> Redriven:
    """Deliver every queued event to its target; `clients(service)` gives a boto3 client, and
    `stop_function` is the Stop function's ARN (for the Lambda dead letters, which do not name it)."""
    sqs = clients("sqs")
    result = Redriven()
    while True:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=BATCH, MessageAttributeNames=["All"], VisibilityTimeout=60
        ).get("Messages", [])
        if not messages:
            return result
        for message in messages:
            attributes = message.get("MessageAttributes", {})
            # EventBridge names the target; Lambda's own dead letters (the stop function, invoked
            # asynchronously) carry only RequestID/ErrorCode/ErrorMessage: they were stop events.
            target = attributes.get(TARGET_ARN, {}).get("StringValue", "")
            if not target and LAMBDA_ERROR in attributes:
                target = stop_function
            try:
                _deliver(target, message["Body"], clients)
            except Exception as error:
                result.kept.append(f"{message['MessageId']}: {target or 'no target'}: {error}")
                continue
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            result.delivered.append(target)
        if result.kept:  # what stays would come back after its visibility timeout: stop here
            return result


def _deliver(target: str, body: str, clients: Any) -> None:
    service = target.split(":")[2] if target.count(":") >= 5 else ""
    if service == "states":
        clients("stepfunctions").start_execution(stateMachineArn=target, input=body)
    elif service == "lambda":
        clients("lambda").invoke(FunctionName=target, InvocationType="Event", Payload=body.encode())
    elif service == "sns":
        clients("sns").publish(TopicArn=target, Message=body)
    else:
        raise ValueError("not a target trainstack's rules have (states, lambda or sns)")
