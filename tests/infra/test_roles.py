"""The SageMaker execution role: only what a training job needs, scoped wherever AWS allows."""

from __future__ import annotations

import pytest

from stacks.roles import IMAGE_PULL_ACTIONS, VPC_MODE_ACTIONS
from tests.infra.policy_evaluation import allowed, bucket_arn, resolved

# The only actions AWS offers no resource scoping for, so the only ones allowed on "*".
ACTIONS_THAT_NEED_RESOURCE_STAR = {"ecr:GetAuthorizationToken", "cloudwatch:PutMetricData", *VPC_MODE_ACTIONS}


def _statements(stack):
    for logical_id, policy in {**stack.resources("AWS::IAM::Policy"), **stack.resources("AWS::IAM::ManagedPolicy")}.items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            yield logical_id, statement


def _as_list(value):
    return value if isinstance(value, list) else [value]


def _execution_statements(stack):
    return [s for logical_id, s in _statements(stack) if logical_id.startswith("RolesSageMakerExecution")]


def _execution_role(stack) -> tuple[str, dict]:
    return next((k, r) for k, r in stack.resources("AWS::IAM::Role").items() if k.startswith("RolesSageMakerExecution"))


def test_execution_role_is_assumed_only_by_sagemaker(default_stack):
    _, role = _execution_role(default_stack)
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert "ManagedPolicyArns" not in role["Properties"]


def test_execution_role_is_assumed_only_for_this_stacks_training_jobs_in_its_account_and_region(all_options_stack):
    _, role = _execution_role(all_options_stack)
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Condition"] == {
        "ArnLike": {"aws:SourceArn": ["arn:aws:sagemaker:us-east-1:123456789012:training-job/trainstack-*"]},
        "StringEquals": {"aws:SourceAccount": "123456789012"},
    }


def test_execution_role_permissions_are_one_customer_managed_policy_attached_to_it_alone(default_stack):
    logical_id, role = _execution_role(default_stack)
    assert "Policies" not in role["Properties"]
    assert not [k for k in default_stack.resources("AWS::IAM::Policy") if k.startswith("RolesSageMakerExecution")]
    (policy,) = [
        p for k, p in default_stack.resources("AWS::IAM::ManagedPolicy").items() if k.startswith("RolesSageMakerExecution")
    ]
    assert policy["Properties"]["Roles"] == [{"Ref": logical_id}]


def test_no_policy_in_the_stack_grants_every_action_of_a_service(all_options_stack):
    for logical_id, statement in _statements(all_options_stack):
        for action in _as_list(statement["Action"]):
            assert action != "*" and not action.endswith(":*"), (logical_id, action)


def test_resource_star_only_for_actions_aws_cannot_scope(default_stack):
    for statement in _execution_statements(default_stack):
        if "*" in _as_list(statement["Resource"]):
            assert set(_as_list(statement["Action"])) <= ACTIONS_THAT_NEED_RESOURCE_STAR, statement


def test_metrics_are_limited_to_the_training_jobs_namespace(default_stack):
    statement = next(s for s in _execution_statements(default_stack) if s["Action"] == "cloudwatch:PutMetricData")
    assert statement["Condition"] == {"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TrainingJobs"}}


def test_vpc_mode_network_interface_actions_are_granted(default_stack):
    granted = {a for s in _execution_statements(default_stack) for a in _as_list(s["Action"])}
    assert set(VPC_MODE_ACTIONS) <= granted


def _pull_statement(stack):
    return next(s for s in _execution_statements(stack) if set(_as_list(s["Action"])) == set(IMAGE_PULL_ACTIONS))


def test_an_explicit_region_pulls_framework_images_from_exactly_that_regions_repositories(all_options_stack):
    assert sorted(_pull_statement(all_options_stack)["Resource"]) == [
        "arn:aws:ecr:us-east-1:658645717510:repository/smdistributed-modelparallel",
        "arn:aws:ecr:us-east-1:763104351884:repository/pytorch-training",
        "arn:aws:ecr:us-east-1:763104351884:repository/pytorch-training-neuron",
    ]


@pytest.mark.parametrize(
    ("region", "expected"),
    [
        ("af-south-1", {"arn:aws:ecr:af-south-1:626614931356:repository/pytorch-training"}),
        ("cn-north-1", {"arn:aws-cn:ecr:cn-north-1:727897471807:repository/pytorch-training"}),
        ("us-gov-west-1", {"arn:aws-us-gov:ecr:us-gov-west-1:442386744353:repository/pytorch-training"}),
        (
            "eu-west-1",
            {
                "arn:aws:ecr:eu-west-1:763104351884:repository/pytorch-training",
                "arn:aws:ecr:eu-west-1:763104351884:repository/pytorch-training-neuron",
                "arn:aws:ecr:eu-west-1:658645717510:repository/smdistributed-modelparallel",
            },
        ),
    ],
)
def test_an_environment_agnostic_stack_looks_up_its_regions_image_accounts(default_stack, region, expected):
    split = _pull_statement(default_stack)["Resource"]["Fn::Split"]
    mapping_name, looked_up, key = split[1]["Fn::FindInMap"]
    assert looked_up == {"Ref": "AWS::Region"}
    assert set(default_stack.json["Mappings"][mapping_name][region][key].split(split[0])) == expected


def test_the_volume_key_grant_is_only_for_aws_services(default_stack):
    (statement,) = [s for s in _execution_statements(default_stack) if s["Action"] == "kms:CreateGrant"]
    assert statement["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
    assert statement["Resource"] == {"Fn::GetAtt": [_key_logical_id(default_stack), "Arn"]}


def _key_logical_id(stack):
    (logical_id,) = stack.resources("AWS::KMS::Key")
    return logical_id


def test_jobs_write_only_models_checkpoints_and_tensorboard_prefixes(default_stack):
    writes = [s for s in _execution_statements(default_stack) if "s3:PutObject" in _as_list(s["Action"])]
    object_resources = [r for s in writes for r in _as_list(s["Resource"]) if "Fn::Join" in r]
    prefixes = {part for r in object_resources for part in r["Fn::Join"][1] if isinstance(part, str)}
    assert prefixes == {"/models/default/*", "/checkpoints/default/*", "/tensorboard/default/*"}  # the team's own


def test_jobs_read_their_teams_datasets_but_not_job_specs_from_the_trigger_bucket(default_stack):
    reads = [s for s in _execution_statements(default_stack) if "s3:GetObject*" in _as_list(s["Action"])]
    rendered = str([s["Resource"] for s in reads])
    assert "/datasets/default/*" in rendered
    assert "/jobs/" not in rendered


def test_built_image_setting_grants_pull_on_the_project_image_repository():
    from tests.synth import ALL_OPTIONS, synthesize

    stack = synthesize(**ALL_OPTIONS, build_training_image=True)
    statements = [s for logical_id, s in _statements(stack) if logical_id.startswith("RolesSageMakerExecution")]
    pulls = [s for s in statements if "ecr:BatchGetImage" in _as_list(s["Action"])]
    assert any("container-assets" in str(s["Resource"]) for s in pulls)
    assert "TrainingImageUri" in stack.json["Outputs"]


def test_built_image_is_what_image_project_names_in_every_functions_environment():
    from tests.synth import ALL_OPTIONS, synthesize

    stack = synthesize(**ALL_OPTIONS, build_training_image=True)
    published = stack.json["Outputs"]["TrainingImageUri"]["Value"]
    for function in stack.resources("AWS::Lambda::Function").values():
        if function["Properties"].get("Handler", "").startswith("trainstack.handlers."):
            assert function["Properties"]["Environment"]["Variables"]["PROJECT_IMAGE_URI"] == published


def _team_requests(template: dict) -> tuple[str, str]:
    return bucket_arn(template, "Trigger"), bucket_arn(template, "Artifacts")


@pytest.mark.parametrize(
    ("action", "bucket", "key"),
    [
        ("s3:GetObject", "artifacts", "checkpoints/{team}/gpt/0123456789abcdef/step_00000010/.metadata"),
        ("s3:PutObject", "artifacts", "models/{team}/trainstack-gpt-0123456789ab/output/model.tar.gz"),
        ("s3:PutObject", "artifacts", "checkpoints/{team}/gpt/0123456789abcdef/step_00000010/.metadata"),
        ("s3:GetObject", "trigger", "datasets/{team}/owt/shard_00000.bin"),
        ("s3:GetObject", "artifacts", "sources/{team}/0123/sourcedir.tar.gz"),
    ],
    ids=["read-checkpoints", "write-models", "write-checkpoints", "read-datasets", "read-code"],
)
def test_a_teams_jobs_reach_its_own_folders_and_none_of_another_teams(queue_stack, action, bucket, key):
    template = queue_stack.json
    trigger, artifacts = _team_requests(template)
    arn = f"{trigger if bucket == 'trigger' else artifacts}/"
    research_role, prod_role = "RolesSageMakerExecutionPolicy", "RolesSageMakerExecutionProdPolicy"
    assert allowed(template, prod_role, action, arn + key.format(team="prod"))
    assert not allowed(template, prod_role, action, arn + key.format(team="research"))
    assert allowed(template, research_role, action, arn + key.format(team="research"))
    assert not allowed(template, research_role, action, arn + key.format(team="prod"))


def test_a_principal_with_a_teams_policy_uploads_under_its_folders_and_not_another_teams(queue_stack):
    template = queue_stack.json
    trigger, artifacts = _team_requests(template)
    assert allowed(template, "RolesTeamAccessResearch", "s3:PutObject", f"{trigger}/jobs/research/llama.yaml")
    assert allowed(template, "RolesTeamAccessResearch", "s3:PutObject", f"{trigger}/datasets/research/owt/_SUCCESS")
    assert not allowed(template, "RolesTeamAccessResearch", "s3:PutObject", f"{trigger}/jobs/prod/llama.yaml")
    assert not allowed(template, "RolesTeamAccessResearch", "s3:PutObject", f"{trigger}/jobs/llama.yaml")  # the default team's
    assert allowed(template, "RolesTeamAccessResearch", "s3:GetObject", f"{artifacts}/models/research/j/output/model.tar.gz")
    assert not allowed(template, "RolesTeamAccessResearch", "s3:GetObject", f"{artifacts}/models/prod/j/output/model.tar.gz")
    assert not allowed(template, "RolesTeamAccessResearch", "states:StartExecution", "*")  # the platform's own


def test_each_team_has_an_execution_role_and_an_access_policy_in_the_outputs(queue_stack):
    outputs = queue_stack.json["Outputs"]
    assert {"TeamAccessPolicyResearch", "TeamAccessPolicyProd", "TeamExecutionRoleArns"} <= set(outputs)
    pairs = resolved(outputs["TeamExecutionRoleArns"]["Value"], queue_stack.json)
    assert [pair.split("=")[0] for pair in pairs.split(",")] == ["research", "prod"]
