"""Notifications: who may use the topic's key, and where undeliverable failure events go."""

from __future__ import annotations

from aws_cdk import App, Stack, aws_kms, aws_sqs, aws_stepfunctions
from aws_cdk.assertions import Template

from stacks.monitoring import TrainingMonitoring


def _key_statements(stack, service):
    (key,) = stack.resources("AWS::KMS::Key").values()
    return [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s["Principal"].get("Service") == service]


def test_alarms_may_use_the_topic_key_only_on_behalf_of_this_account(default_stack):
    (statement,) = _key_statements(default_stack, "cloudwatch.amazonaws.com")
    assert set(statement["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


def test_eventbridge_may_use_the_topic_key_without_the_source_conditions_sns_does_not_support(default_stack):
    statements = _key_statements(default_stack, "events.amazonaws.com")
    assert any("kms:GenerateDataKey*" in s["Action"] for s in statements)
    assert not any("aws:Source" in str(s.get("Condition")) for s in statements)


def test_failed_training_job_events_that_cannot_reach_the_topic_go_to_the_dead_letter_queue():
    stack = Stack(App(), "Monitored")
    monitoring = TrainingMonitoring(stack, "Monitoring", key=aws_kms.Key(stack, "Key"), name_prefix="trainstack")
    queue = aws_sqs.Queue(stack, "DeadLetters")
    state_machine = aws_stepfunctions.StateMachine(
        stack, "Runs", definition_body=aws_stepfunctions.DefinitionBody.from_chainable(aws_stepfunctions.Pass(stack, "Run"))
    )
    monitoring.watch(state_machine, dead_letter_queue=queue)
    (rule,) = Template.from_stack(stack).find_resources("AWS::Events::Rule").values()
    (target,) = rule["Properties"]["Targets"]
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": [stack.get_logical_id(queue.node.default_child), "Arn"]}}
