"""`-c queue=true`: the team queue (AWS Batch service jobs for SageMaker Training), what the stack
publishes of it, the pipeline's permissions on it and the execution role's trust in the jobs Batch
creates; cdk-nag and the checkers stay clean and the queue costs nothing idle. Without the setting,
none of it exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.synth import Synthesized
from tools.idle_cost import DEFAULT_PRICES, idle_cost
from trainstack.service_jobs import TIME_LIMIT_REASONS
from trainstack.stack_context import FIELDS

ROOT = Path(__file__).resolve().parents[2]
QUEUE_OUTPUTS = ("JobQueueArn", "QueueShares", "QueueDefaultShare", "QueueMaxInstances")
QUEUE_VARIABLES = ("JOB_QUEUE_ARN", "QUEUE_SHARES", "QUEUE_DEFAULT_SHARE", "QUEUE_MAX_INSTANCES")


def _one(stack: Synthesized, resource_type: str) -> tuple[str, dict[str, Any]]:
    ((logical_id, resource),) = stack.resources(resource_type).items()
    return logical_id, resource["Properties"]


def _arn(resource: str) -> dict[str, Any]:
    """An ARN of this environment-agnostic stack, as CDK's format_arn renders it."""
    service, _, path = resource.partition(":")
    return {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                f":{service}:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                f":{path}",
            ],
        ]
    }


SERVICE_JOBS = _arn("batch:service-job/*")
BATCH_TRAINING_JOBS = _arn("sagemaker:training-job/AWSBatchtrainstack-*")
BATCH_TRAINING_JOBS_LOWER = _arn("sagemaker:training-job/awsbatchtrainstack-*")  # as SageMaker may case the ARN
STACK_TRAINING_JOBS = _arn("sagemaker:training-job/trainstack-*")


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _grants(stack: Synthesized, role: str) -> list[tuple[str, str]]:
    """(action, resource as JSON) for every Allow in the pipeline role's managed policy."""
    (policy,) = [
        p for logical_id, p in stack.resources("AWS::IAM::ManagedPolicy").items() if logical_id.startswith(f"Pipeline{role}Role")
    ]
    return [
        (action, json.dumps(resource, sort_keys=True))
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Allow"
        for action in _as_list(statement["Action"])
        for resource in _as_list(statement["Resource"])
    ]


def _resources_of(stack: Synthesized, role: str, action: str) -> list[Any]:
    return sorted((json.loads(resource) for granted, resource in _grants(stack, role) if granted == action), key=json.dumps)


def _key(value: Any) -> list[Any]:
    return sorted(value, key=json.dumps)


def test_the_service_environment_caps_the_instances_the_queue_runs_at_once(queue_stack):
    _, environment = _one(queue_stack, "AWS::Batch::ServiceEnvironment")
    assert environment["ServiceEnvironmentType"] == "SAGEMAKER_TRAINING"
    assert environment["ServiceEnvironmentName"] == "trainstack-training"
    assert environment["CapacityLimits"] == [{"CapacityUnit": "NUM_INSTANCES", "MaxCapacity": 16}]


def test_the_scheduling_policy_is_fair_share_with_one_weighted_share_per_team(queue_stack):
    _, policy = _one(queue_stack, "AWS::Batch::SchedulingPolicy")
    assert policy["Name"] == "trainstack-fairshare"
    assert policy["FairsharePolicy"]["ShareDistribution"] == [
        {"ShareIdentifier": "research", "WeightFactor": 1},
        {"ShareIdentifier": "prod", "WeightFactor": 0.5},
    ]


def test_the_job_queue_holds_sagemaker_training_jobs_on_the_environment_under_the_policy(queue_stack):
    environment_id, _ = _one(queue_stack, "AWS::Batch::ServiceEnvironment")
    policy_id, _ = _one(queue_stack, "AWS::Batch::SchedulingPolicy")
    _, queue = _one(queue_stack, "AWS::Batch::JobQueue")
    assert (queue["JobQueueName"], queue["JobQueueType"]) == ("trainstack-queue", "SAGEMAKER_TRAINING")
    assert queue["ServiceEnvironmentOrder"] == [
        {"Order": 1, "ServiceEnvironment": {"Fn::GetAtt": [environment_id, "ServiceEnvironmentArn"]}}
    ]
    assert queue["SchedulingPolicyArn"] == {"Fn::GetAtt": [policy_id, "Arn"]}


def test_a_job_at_the_head_is_terminated_after_the_capacity_wait_for_either_reason(queue_stack):
    _, queue = _one(queue_stack, "AWS::Batch::JobQueue")
    assert queue["JobStateTimeLimitActions"] == [
        {"Action": "TERMINATE", "State": "RUNNABLE", "Reason": reason, "MaxTimeSeconds": 7200} for reason in TIME_LIMIT_REASONS
    ]


def test_the_stack_leaves_the_service_linked_role_to_batch(queue_stack):
    # Batch creates AWSServiceRoleForAWSBatchWithSagemaker with the first service environment; a
    # template that created it would fail in every account that already has it.
    assert queue_stack.resources("AWS::IAM::ServiceLinkedRole") == {}


def test_the_outputs_publish_the_queue_its_shares_default_share_and_cap(queue_stack):
    queue_id, _ = _one(queue_stack, "AWS::Batch::JobQueue")
    outputs = {name: queue_stack.json["Outputs"][name]["Value"] for name in QUEUE_OUTPUTS}
    assert outputs == {
        "JobQueueArn": {"Fn::GetAtt": [queue_id, "JobQueueArn"]},
        "QueueShares": "research,prod",
        "QueueDefaultShare": "research",
        "QueueMaxInstances": "16",
    }


def test_with_the_queue_the_stack_outputs_every_value_but_the_tracking_servers_and_the_project_images(queue_stack):
    expected = {spec.output for spec in FIELDS if spec.name not in ("mlflow_tracking_server_arn", "project_image_uri")}
    assert expected <= set(queue_stack.json["Outputs"])


def test_every_pipeline_lambda_knows_the_queue(queue_stack):
    queue_id, _ = _one(queue_stack, "AWS::Batch::JobQueue")
    functions = [
        f
        for f in queue_stack.resources("AWS::Lambda::Function").values()
        if f["Properties"].get("Handler", "").startswith("trainstack.handlers.")
    ]
    assert len(functions) == 5
    for function in functions:
        variables = function["Properties"]["Environment"]["Variables"]
        assert {name: variables[name] for name in QUEUE_VARIABLES} == {
            "JOB_QUEUE_ARN": {"Fn::GetAtt": [queue_id, "JobQueueArn"]},
            "QUEUE_SHARES": "research,prod",
            "QUEUE_DEFAULT_SHARE": "research",
            "QUEUE_MAX_INSTANCES": "16",
        }


def test_create_may_submit_tagged_service_jobs_to_this_queue_only_and_find_them_by_name(queue_stack):
    queue_id, _ = _one(queue_stack, "AWS::Batch::JobQueue")
    assert _resources_of(queue_stack, "Create", "batch:SubmitServiceJob") == _key(
        [{"Fn::GetAtt": [queue_id, "JobQueueArn"]}, SERVICE_JOBS]
    )
    assert _resources_of(queue_stack, "Create", "batch:TagResource") == [SERVICE_JOBS]
    assert _resources_of(queue_stack, "Create", "batch:ListServiceJobs") == ["*"]  # supports no resource type


def test_create_passes_only_the_teams_execution_roles_and_only_to_sagemaker(queue_stack):
    # SubmitServiceJob's dependent iam:PassRole is for sagemaker.amazonaws.com, as CreateTrainingJob's is.
    (statement,) = [
        s
        for p in queue_stack.resources("AWS::IAM::ManagedPolicy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "iam:PassRole" in _as_list(s["Action"])
    ]
    assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
    passed = sorted(resource["Fn::GetAtt"][0] for resource in statement["Resource"])
    assert len(passed) == 2 and all(logical_id.startswith("RolesSageMakerExecution") for logical_id in passed)  # research, prod


def test_describe_may_read_service_jobs_and_the_training_jobs_batch_creates_for_this_stack(queue_stack):
    assert _resources_of(queue_stack, "Describe", "batch:DescribeServiceJob") == ["*"]  # supports no resource type
    assert _resources_of(queue_stack, "Describe", "sagemaker:DescribeTrainingJob") == _key(
        [STACK_TRAINING_JOBS, BATCH_TRAINING_JOBS, BATCH_TRAINING_JOBS_LOWER]
    )


def test_stop_may_find_and_terminate_service_jobs(queue_stack):
    assert _resources_of(queue_stack, "Stop", "batch:ListServiceJobs") == ["*"]
    assert _resources_of(queue_stack, "Stop", "batch:DescribeServiceJob") == ["*"]
    assert _resources_of(queue_stack, "Stop", "batch:TerminateServiceJob") == [SERVICE_JOBS]


def test_with_team_budgets_validate_may_read_the_queues_jobs_and_each_training_jobs_tags(queue_stack):
    assert _resources_of(queue_stack, "Validate", "batch:ListServiceJobs") == ["*"]  # supports no resource type
    assert _resources_of(queue_stack, "Validate", "batch:DescribeServiceJob") == ["*"]
    assert _resources_of(queue_stack, "Validate", "sagemaker:ListTags") == [_arn("sagemaker:training-job/*")]


def test_without_team_budgets_validate_reads_no_tags(default_stack):
    assert _resources_of(default_stack, "Validate", "sagemaker:ListTags") == []


def test_the_outputs_publish_each_teams_monthly_budget(queue_stack):
    assert queue_stack.json["Outputs"]["TeamMonthlyBudgets"]["Value"] == "research=500"


def test_only_create_describe_and_stop_may_call_batch_and_validate_read_it_for_budgets(queue_stack):
    callers = {
        logical_id
        for logical_id, policy in queue_stack.resources("AWS::IAM::ManagedPolicy").items()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if any(action.startswith("batch:") for action in _as_list(statement["Action"]))
        and not logical_id.startswith("RolesTeamAccess")  # a team's people may end its own queued jobs (test_roles.py)
    }
    assert sorted(logical_id.removeprefix("Pipeline").split("Role")[0] for logical_id in callers) == [
        "Create",
        "Describe",
        "Stop",
        "Validate",
    ]


def test_sagemaker_may_assume_each_teams_role_for_the_stacks_jobs_and_those_batch_creates_in_either_case(queue_stack):
    roles = [
        r for logical_id, r in queue_stack.resources("AWS::IAM::Role").items() if logical_id.startswith("RolesSageMakerExecution")
    ]
    assert len(roles) == 2  # research, prod
    for role in roles:
        (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
        lower_stack = _arn("sagemaker:training-job/trainstack-*")  # already lower case: listed once
        assert statement["Condition"]["ArnLike"] == {
            "aws:SourceArn": [lower_stack, BATCH_TRAINING_JOBS, BATCH_TRAINING_JOBS_LOWER]
        }
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}


def test_without_the_queue_there_is_no_batch_resource_output_variable_or_permission(default_stack):
    template = json.dumps(default_stack.json)
    assert not any(resource["Type"].startswith("AWS::Batch::") for resource in default_stack.json["Resources"].values())
    assert not set(QUEUE_OUTPUTS) & set(default_stack.json["Outputs"])
    assert not any(name in template for name in QUEUE_VARIABLES)
    assert '"batch:' not in template and "AWSBatch" not in template  # no grant, no trust in Batch's jobs


def test_every_nag_pack_reports_no_unacknowledged_finding_with_the_queue(queue_stack):
    # synthesize() raises on an unacknowledged finding; the report of a clean synth lists none.
    report = json.loads((queue_stack.directory / "validation-report.json").read_text())
    assert [r["violations"] for r in report["pluginReports"] if r["violations"]] == []


def test_the_queue_costs_nothing_while_idle(queue_stack, default_stack):
    prices = json.loads(DEFAULT_PRICES.read_text())
    assert idle_cost(queue_stack.json, prices) == idle_cost(default_stack.json, prices)


def test_the_failed_job_alarm_watches_the_training_jobs_batch_creates_too(queue_stack):
    (rule,) = [
        r for r in queue_stack.resources("AWS::Events::Rule").values() if "SageMaker Training Job State Change" in json.dumps(r)
    ]
    prefixes = [entry["prefix"] for entry in rule["Properties"]["EventPattern"]["detail"]["TrainingJobName"]]
    assert prefixes == ["trainstack-", "AWSBatchtrainstack-"]


def test_stop_may_terminate_only_service_jobs_tagged_with_a_trainstack_lineage(queue_stack):
    (policy,) = [p for i, p in queue_stack.resources("AWS::IAM::ManagedPolicy").items() if i.startswith("PipelineStopRole")]
    (statement,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "batch:TerminateServiceJob"]
    assert statement["Condition"] == {"Null": {"aws:ResourceTag/trainstack:lineage": "false"}}
