"""Notifications: who may use the topic's key, and where undeliverable failure events go; the dashboard."""

from __future__ import annotations

import json
import re

from aws_cdk import App, Stack, aws_kms, aws_sqs, aws_stepfunctions
from aws_cdk.assertions import Template

from stacks.monitoring import TrainingMonitoring
from tests.synth import synthesize
from trainstack import run_report
from trainstack_contract.metric_lines import METRICS


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


def _dashboard_text(stack) -> str:
    """The dashboard body with the template's references written out as their logical ids."""
    (dashboard,) = stack.resources("AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else str(p.get("Ref")) for p in parts)


def test_the_dashboard_shows_runs_by_status_from_the_state_machines_own_metrics(default_stack):
    body = json.loads(_dashboard_text(default_stack))
    (machine,) = default_stack.resources("AWS::StepFunctions::StateMachine")
    runs = next(w for w in body["widgets"] if w["properties"]["title"] == "Runs (executions) by status")
    lines = runs["properties"]["metrics"]
    assert {line[1] for line in lines} == {f"Executions{s}" for s in ("Started", "Succeeded", "Failed", "Aborted", "TimedOut")}
    assert {line[3] for line in lines} == {machine}


def _expressions_by_title(stack) -> dict[str, str]:
    """Each widget's math expressions, joined, by the widget's title."""
    return {
        w["properties"]["title"]: " ".join(
            line[0]["expression"] for line in w["properties"]["metrics"] if "expression" in line[0]
        )
        for w in json.loads(_dashboard_text(stack))["widgets"]
    }


def _finds_every_declared_metric(expressions: str, line: str) -> bool:
    """Whether the expressions SEARCH for every metric an EMF line declares, under its dimension set."""
    (declared,) = json.loads(line)["_aws"]["CloudWatchMetrics"]
    schema = f"{{{declared['Namespace']},{','.join(declared['Dimensions'][0])}}}"
    return all(f'{schema} Prefix="trainstack" MetricName="{m["Name"]}"' in expressions for m in declared["Metrics"])


def test_the_dashboard_counts_ended_jobs_from_the_metric_lines_notify_prints(default_stack):
    expressions = " ".join(_expressions_by_title(default_stack).values())
    (line,) = run_report.metric_lines([{"job_name": "j", "status": "Failed"}], "trainstack", 0)
    assert _finds_every_declared_metric(expressions, line)


def test_the_dashboard_graphs_restarts_by_cause_and_their_lost_steps_and_cost_from_notifys_lines(default_stack):
    by_title = _expressions_by_title(default_stack)
    restarted = {
        "decision": "restart 1 of 3",
        "kind": "infrastructure",
        "steps_lost": 30,
        "lost_usd": 2.0,
        "spot_interruptions": 0,
    }
    trial = {"job_name": "j", "status": "Completed", "attempts": [restarted]}
    _, line = run_report.metric_lines([trial], "trainstack", 0)
    restarts = f'MetricName="{run_report.RESTARTS_METRIC}"'
    assert restarts in by_title["Restarts by cause"] and restarts not in by_title["Steps lost / cost of lost steps"]
    assert _finds_every_declared_metric(by_title["Restarts by cause"] + by_title["Steps lost / cost of lost steps"], line)


def test_the_dashboard_graphs_what_the_jobs_metric_definitions_publish_and_gpu_utilization(default_stack):
    text = _dashboard_text(default_stack)
    for name in ("train:loss", "train:tokens_per_sec", "train:mfu"):
        assert name in METRICS and f'{{/aws/sagemaker/TrainingJobs,Host}} trainstack MetricName=\\"{name}\\"' in text
    assert 'MetricName=\\"GPUUtilization\\"' in text


def test_the_dashboard_can_be_left_out():
    assert not synthesize(dashboard=False).resources("AWS::CloudWatch::Dashboard")


def _tokens(text: str) -> list[str]:
    """CloudWatch SEARCH's tokens of a name, as its documentation defines them: split at punctuation,
    at camel case and where digits start ("SDBFailure": SDB, Failure; "Project2-trial333": Project, 2,
    trial, 333)."""
    return re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+", text)


def _search_finds(term: str, value: str) -> bool:
    """Whether a partial-match term finds a dimension value: one token matches any token whatever its
    case; several match consecutive tokens of the value, case-sensitively (a composite token)."""
    wanted, found = _tokens(term), _tokens(value)
    if len(wanted) == 1:
        return wanted[0].lower() in {token.lower() for token in found}
    return any(found[i : i + len(wanted)] == wanted for i in range(len(found)))


def test_the_search_tokens_here_are_those_cloudwatch_documents():
    assert _tokens("CustomCount1") == ["Custom", "Count", "1"] and _tokens("SDBFailure") == ["SDB", "Failure"]
    assert _tokens("Project2-trial333") == ["Project", "2", "trial", "333"]
    assert _search_finds("COUNT", "CustomCount1") and _search_finds("CustomCount", "CustomCount1")
    assert not _search_finds("couNT", "CustomCount1") and not _search_finds("count1", "CustomCount1")


def _host_search_terms(stack) -> list[str]:
    """The terms the per-host graphs search SageMaker's Host dimension with."""
    (expression,) = set(re.findall(r"\{/aws/sagemaker/TrainingJobs,Host\} (.*?) MetricName", _dashboard_text(stack)))
    return expression.strip("()").split(" OR ")


def test_the_per_host_graphs_find_the_jobs_batch_creates_from_the_team_queue(queue_stack):
    direct = "trainstack-llama-0a1b2c3d4e5f-t0-ab12cd34/algo-1"
    batch = f"AWSBatch{direct.split('/')[0]}0123456789abcdef0123456789abcdef/algo-2"
    terms = _host_search_terms(queue_stack)
    assert all(any(_search_finds(term, host) for term in terms) for host in (direct, batch))
    assert not _search_finds("trainstack", batch)  # why the stack's prefix alone would not do


def test_without_the_queue_the_per_host_graphs_search_the_stacks_own_jobs(default_stack):
    assert _host_search_terms(default_stack) == ["trainstack"]


def _widget_metrics(stack, title: str) -> list[list]:
    """The metric and expression entries of the dashboard's widget with this title."""
    (widget,) = [w for w in json.loads(_dashboard_text(stack))["widgets"] if w["properties"].get("title") == title]
    return widget["properties"]["metrics"]


def test_the_dashboard_graphs_goodput_and_the_billed_hours_by_use_from_the_time_account_notify_prints(default_stack):
    attempt = {"decision": "", "kind": "", "steps_lost": 0, "lost_usd": 0.0, "spot_interruptions": 0, "account": {
        "billed": 100, "productive": 60, "retrained": 10, "startup": 10, "script": 15, "stops": 5, "waiting": 30,
    }}  # fmt: skip
    _, line = run_report.metric_lines([{"job_name": "j", "status": "Completed", "attempts": [attempt]}], "trainstack", 0)
    (declared,) = json.loads(line)["_aws"]["CloudWatchMetrics"]
    (dimensions,) = declared["Dimensions"]
    read = [
        entry[:4]
        for title in (
            "Goodput: productive step time / billed instance time (%)",
            "Billed instance-hours by use, and hours waited unbilled",
        )
        for entry in _widget_metrics(default_stack, title)
        if isinstance(entry[0], str)
    ]
    assert dimensions == ["Prefix"]
    assert all([declared["Namespace"], metric["Name"], "Prefix", "trainstack"] in read for metric in declared["Metrics"])
    (goodput,) = [
        e[0]
        for e in _widget_metrics(default_stack, "Goodput: productive step time / billed instance time (%)")
        if "expression" in e[0]
    ]
    assert goodput["expression"] == "100 * productive / billed"


def test_the_dashboard_totals_each_teams_billed_hours_and_cost_from_the_line_notify_prints_under_the_run_team(default_stack):
    by_title = _expressions_by_title(default_stack)
    trial = {"job_name": "j", "status": "Completed", "billable_seconds": 3600, "instance_count": 2, "cost_usd": 12.5}
    _, line = run_report.metric_lines([trial], "trainstack", 0, team="research")
    document = json.loads(line)

    assert (document["Team"], document["BillableInstanceSeconds"], document["EstimatedCostUSD"]) == ("research", 7200, 12.5)
    assert _finds_every_declared_metric(
        by_title["Billed instance-hours by team, last 30 days"] + by_title["Estimated cost (USD) by team, last 30 days"], line
    )
    for title in ("Billed instance-hours by team, last 30 days", "Estimated cost (USD) by team, last 30 days"):
        (widget,) = [w for w in json.loads(_dashboard_text(default_stack))["widgets"] if w["properties"].get("title") == title]
        assert (widget["properties"]["view"], widget["properties"]["setPeriodToTimeRange"]) == ("bar", True)


def test_a_run_without_a_team_prints_no_team_line():
    lines = run_report.metric_lines([{"job_name": "j", "status": "Completed", "cost_usd": 1.0}], "trainstack", 0)

    assert not any("Team" in json.loads(line) for line in lines)
