"""Notifications, alarms and the dashboard: one KMS-encrypted topic for run outcomes, failed
executions and failed training jobs; one CloudWatch dashboard per stack."""

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
from trainstack.goodput import BILLED, PART_WORDS, PARTS, WAITING
from trainstack.layout import TRAINING_JOB_METRICS_NAMESPACE
from trainstack.run_report import (
    BILLABLE_METRIC,
    JOBS_METRIC,
    KIND_DIMENSION,
    LOST_STEPS_COST_METRIC,
    METRIC_DIMENSIONS,
    RESTART_DIMENSIONS,
    RESTARTS_METRIC,
    RUN_METRICS_NAMESPACE,
    STEPS_LOST_METRIC,
    TEAM_COST_METRIC,
    TEAM_DIMENSION,
    TEAM_DIMENSIONS,
    TIME_DIMENSIONS,
    TIME_METRICS,
)
from trainstack.service_jobs import batch_training_job_prefix
from trainstack_contract.job_names import training_job_name_prefix
from trainstack_contract.metric_lines import LOSS, MFU, TOKENS_PER_SEC

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

    def __init__(self, scope: Construct, construct_id: str, *, key: kms.IKey, name_prefix: str, queue: bool = False) -> None:
        super().__init__(scope, construct_id)
        self.name_prefix = name_prefix
        # Training job names to watch: the stack's own, and with the team queue Batch's, which it
        # names AWSBatch<job name><attempt>.
        self.job_prefixes = [training_job_name_prefix(name_prefix)] + ([batch_training_job_prefix(name_prefix)] if queue else [])
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
                    "TrainingJobName": [{"prefix": prefix} for prefix in self.job_prefixes],
                },
            ),
            targets=[targets.SnsTopic(self.topic, **delivery(dead_letter_queue))],
        )

    def dashboard(self, state_machine: sfn.IStateMachine) -> cloudwatch.Dashboard:
        """One page per stack: runs and jobs by status, billed instance-hours, the goodput of what was
        billed and where the rest went, restarts by the kind of failure they followed with the steps
        and cost they lost, the training metrics the jobs' MetricDefinitions publish, and SageMaker's
        instance utilization per host."""
        hourly = Duration.hours(1)
        executions = [
            metric.with_(statistic="Sum", period=hourly, label=label)
            for label, metric in (
                ("started", state_machine.metric_started()),
                ("succeeded", state_machine.metric_succeeded()),
                ("failed", state_machine.metric_failed()),
                ("aborted", state_machine.metric_aborted()),
                ("timed out", state_machine.metric_timed_out()),
            )
        ]
        run_metric = f'{{{RUN_METRICS_NAMESPACE},{",".join(METRIC_DIMENSIONS)}}} Prefix="{self.name_prefix}"'
        restart_metric = f'{{{RUN_METRICS_NAMESPACE},{",".join(RESTART_DIMENSIONS)}}} Prefix="{self.name_prefix}"'
        kind = f"${{PROP('Dim.{KIND_DIMENSION}')}}"  # a dynamic label: each line names its kind of failure
        # SageMaker's Host dimension is <job>/algo-N. SEARCH matches tokens split at camel case and at
        # punctuation, so `trainstack` is no token of Batch's `AWSBatchtrainstack-...`: each job prefix is
        # searched as the composite token it is.
        jobs = " OR ".join(prefix.rstrip("-") for prefix in self.job_prefixes)
        training = f"{{{TRAINING_JOB_METRICS_NAMESPACE},Host}} {f'({jobs})' if len(self.job_prefixes) > 1 else jobs}"
        widgets = [
            [
                cloudwatch.GraphWidget(title="Runs (executions) by status", left=executions, width=8),
                _search_graph("Training jobs ended, by status", f'{run_metric} MetricName="{JOBS_METRIC}"', "Sum", hourly),
                _search_graph(
                    "Billed instance-hours", f'{run_metric} MetricName="{BILLABLE_METRIC}"', "Sum", hourly, scale=1 / 3600
                ),
            ],
            self._goodput_widgets(hourly),
            self._team_widgets(),
            [
                cloudwatch.GraphWidget(
                    title="Restarts by cause",
                    left=[_search(f'{restart_metric} MetricName="{RESTARTS_METRIC}"', "Sum", hourly, label=kind)],
                    width=12,
                ),
                cloudwatch.GraphWidget(
                    title="Steps lost / cost of lost steps",
                    left=[_search(f'{restart_metric} MetricName="{STEPS_LOST_METRIC}"', "Sum", hourly, label=f"steps: {kind}")],
                    right=[
                        _search(f'{restart_metric} MetricName="{LOST_STEPS_COST_METRIC}"', "Sum", hourly, label=f"USD: {kind}")
                    ],
                    left_y_axis=cloudwatch.YAxisProps(label="steps", show_units=False),
                    right_y_axis=cloudwatch.YAxisProps(label="USD", show_units=False),
                    width=12,
                ),
            ],
            [
                _search_graph(f"{title} per host", f'{training} MetricName="{name}"', "Average", Duration.minutes(5))
                for title, name in (("Loss", LOSS), ("Tokens/s", TOKENS_PER_SEC), ("MFU", MFU))
            ],
            [
                _search_graph(f"{name} per host", f'{training} MetricName="{name}"', "Average", Duration.minutes(5))
                for name in ("GPUUtilization", "GPUMemoryUtilization", "CPUUtilization")
            ],
        ]
        return cloudwatch.Dashboard(self, "Dashboard", dashboard_name=f"{self.name_prefix}-training", widgets=widgets)

    def _team_widgets(self) -> list[cloudwatch.IWidget]:
        """Each team's billed instance-hours and estimated cost over the last 30 days, one bar per team
        (from the line Notify prints per trial under the run's team). CloudWatch has no calendar month;
        `trainstack runs --team` gives this month's."""
        team_metric = f'{{{RUN_METRICS_NAMESPACE},{",".join(TEAM_DIMENSIONS)}}} Prefix="{self.name_prefix}"'
        team = f"${{PROP('Dim.{TEAM_DIMENSION}')}}"
        window = Duration.days(30)

        def totals(title: str, metric: str, scale: float) -> cloudwatch.GraphWidget:
            return cloudwatch.GraphWidget(
                title=title,
                left=[_search(f'{team_metric} MetricName="{metric}"', "Sum", window, scale=scale, label=team)],
                view=cloudwatch.GraphWidgetView.BAR,
                set_period_to_time_range=True,
                start="-P30D",
                width=12,
            )

        return [
            totals("Billed instance-hours by team, last 30 days", BILLABLE_METRIC, 1 / 3600),
            totals("Estimated cost (USD) by team, last 30 days", TEAM_COST_METRIC, 1.0),
        ]

    def _goodput_widgets(self, period: Duration) -> list[cloudwatch.IWidget]:
        """Goodput (productive over billed instance-seconds, from the time-account line Notify prints
        per trial) and the billed instance-hours by what they went to, with the hours waited unbilled."""
        metrics = {
            part: cloudwatch.Metric(
                namespace=RUN_METRICS_NAMESPACE,
                metric_name=TIME_METRICS[part],
                dimensions_map=dict(zip(TIME_DIMENSIONS, (self.name_prefix,), strict=True)),
                statistic="Sum",
                period=period,
            )
            for part in TIME_METRICS
        }
        goodput = cloudwatch.MathExpression(
            expression="100 * productive / billed",
            using_metrics={"productive": metrics["productive"], "billed": metrics[BILLED]},
            label="goodput %",
            period=period,
        )
        hours = [
            cloudwatch.MathExpression(
                expression=f"{part} / 3600", using_metrics={part: metrics[part]}, label=PART_WORDS[part], period=period
            )
            for part in (*PARTS, WAITING)
        ]
        return [
            cloudwatch.GraphWidget(
                title="Goodput: productive step time / billed instance time (%)",
                left=[goodput],
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100, show_units=False),
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Billed instance-hours by use, and hours waited unbilled",
                left=hours,
                stacked=True,
                left_y_axis=cloudwatch.YAxisProps(label="instance-hours", show_units=False),
                width=16,
            ),
        ]


def _search(search: str, statistic: str, period: Duration, *, scale: float = 1.0, label: str = "") -> cloudwatch.MathExpression:
    """Every metric a CloudWatch SEARCH finds: one line per job, host, status or kind."""
    expression = f"SEARCH('{search}', '{statistic}', {int(period.to_seconds())})"
    if scale != 1.0:
        expression = f"{expression} * {scale!r}"
    return cloudwatch.MathExpression(expression=expression, using_metrics={}, label=label, period=period)


def _search_graph(title: str, search: str, statistic: str, period: Duration, scale: float = 1.0) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=[_search(search, statistic, period, scale=scale)], width=8)
