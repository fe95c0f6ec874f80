"""Notifications and alarms: one KMS-encrypted topic for run outcomes, failed executions and
failed training jobs."""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.event_delivery import delivery
from trainstack.naming import training_job_name_prefix

ALARM_PERIOD = Duration.minutes(5)


def notify_on_first(
    scope: Construct, construct_id: str, *, description: str, metric: cloudwatch.IMetric, topic: sns.ITopic
) -> cloudwatch.Alarm:
    """An alarm that publishes to the topic as soon as `metric` reaches 1 in a period; no data is fine."""
    alarm = cloudwatch.Alarm(
        scope,
        construct_id,
        alarm_description=description,
        metric=metric.with_(period=ALARM_PERIOD),
        threshold=1,
        evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    alarm.add_alarm_action(actions.SnsAction(topic))
    return alarm


class TrainingMonitoring(Construct):
    """Exposes `topic`; `watch(state_machine)` adds the alarms."""

    def __init__(self, scope: Construct, construct_id: str, *, key: kms.IKey, name_prefix: str) -> None:
        super().__init__(scope, construct_id)
        self.name_prefix = name_prefix
        self.topic = sns.Topic(self, "Topic", display_name=f"{name_prefix} training runs", master_key=key, enforce_ssl=True)
        # CloudWatch alarms publish to the encrypted topic only if they may use the key; aws:SourceAccount
        # keeps another account's alarms from using it through CloudWatch (the confused deputy).
        # EventBridge's use of the key comes from the SnsTopic target's grant, without source conditions
        # on purpose: SNS does not support aws:SourceAccount/aws:SourceArn in a key policy for
        # EventBridge-to-encrypted-topic delivery, and with them every event would be dropped silently.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowAlarmDeliveryToTheTopic",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            )
        )

    def watch(self, state_machine: sfn.IStateMachine, *, dead_letter_queue: sqs.IQueue | None = None) -> None:
        """Alarms on the state machine's failed and timed-out executions, and a rule for failed training
        jobs; `dead_letter_queue` keeps the failure events EventBridge could not deliver to the topic."""
        for name, metric in (("Failed", state_machine.metric_failed()), ("TimedOut", state_machine.metric_timed_out())):
            notify_on_first(
                self,
                f"Executions{name}",
                description=f"A {self.name_prefix} pipeline execution {name.lower()}",
                metric=metric.with_(statistic="Sum"),
                topic=self.topic,
            )
        events.Rule(
            self,
            "TrainingJobFailed",
            description=f"Any {self.name_prefix} training job that fails, however it was started",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker Training Job State Change"],
                detail={
                    "TrainingJobStatus": ["Failed"],
                    "TrainingJobName": [{"prefix": training_job_name_prefix(self.name_prefix)}],
                },
            ),
            targets=[targets.SnsTopic(self.topic, **delivery(dead_letter_queue))],
        )
