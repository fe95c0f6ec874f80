"""`-c mlflow_tracking_server_arn`: the execution role may log to that one server with the documented
actions, the isolated subnets reach it through an interface endpoint, the Lambdas know it, and
cdk-nag stays clean; without the setting, none of it exists."""

from __future__ import annotations

import json

import pytest

from stacks.roles import MLFLOW_APP_ACTIONS, MLFLOW_TRACKING_SERVER_ACTIONS, mlflow_actions
from stacks.settings import SettingsError, StackSettings
from tests.synth import TRACKING_SERVER_ARN as SERVER
from tests.synth import Synthesized

APP = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/app-GBU5I6LYU4G7"


def _execution_statements(stack: Synthesized) -> list[dict]:
    return [
        statement
        for logical_id, policy in stack.resources("AWS::IAM::ManagedPolicy").items()
        if logical_id.startswith("RolesSageMakerExecution")
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _mlflow_statements(stack: Synthesized) -> list[dict]:
    return [
        statement
        for statement in _execution_statements(stack)
        if any(action.startswith(("sagemaker-mlflow:", "sagemaker:CallMlflowAppApi")) for action in _as_list(statement["Action"]))
    ]


def _experiments_endpoints(stack: Synthesized) -> list[dict]:
    return [r for r in stack.resources("AWS::EC2::VPCEndpoint").values() if "experiments" in json.dumps(r["Properties"])]


def test_the_execution_role_may_call_exactly_the_documented_actions_on_the_servers_arn(tracking_stack):
    (statement,) = _mlflow_statements(tracking_stack)
    assert sorted(_as_list(statement["Action"])) == sorted(MLFLOW_TRACKING_SERVER_ACTIONS)
    assert statement["Resource"] == SERVER


def test_without_the_setting_the_execution_role_has_no_mlflow_permission(default_stack):
    assert _mlflow_statements(default_stack) == []


def test_an_mlflow_app_gets_its_data_plane_action_not_the_tracking_servers():
    assert mlflow_actions(APP) == MLFLOW_APP_ACTIONS
    assert mlflow_actions(SERVER) == MLFLOW_TRACKING_SERVER_ACTIONS


def test_training_jobs_reach_mlflow_through_a_private_interface_endpoint(tracking_stack):
    (endpoint,) = _experiments_endpoints(tracking_stack)
    assert endpoint["Properties"]["VpcEndpointType"] == "Interface" and endpoint["Properties"]["PrivateDnsEnabled"]
    (group,) = endpoint["Properties"]["SecurityGroupIds"]
    ingress = [r["Properties"] for r in tracking_stack.resources("AWS::EC2::SecurityGroupIngress").values()]
    assert any(rule["GroupId"] == group and rule["FromPort"] == 443 and "SourceSecurityGroupId" in rule for rule in ingress)


def test_without_the_setting_there_is_no_mlflow_endpoint(default_stack):
    assert _experiments_endpoints(default_stack) == []


def _pipeline_functions(stack: Synthesized) -> list[dict]:
    functions = stack.resources("AWS::Lambda::Function").values()
    return [f for f in functions if f["Properties"].get("Handler", "").startswith("trainstack.handlers.")]


def test_the_lambdas_and_the_outputs_carry_the_server(tracking_stack):
    functions = _pipeline_functions(tracking_stack)
    assert len(functions) == 5
    assert {f["Properties"]["Environment"]["Variables"]["MLFLOW_TRACKING_SERVER_ARN"] for f in functions} == {SERVER}
    assert tracking_stack.json["Outputs"]["MlflowTrackingServerArn"]["Value"] == SERVER


def test_without_the_setting_no_lambda_or_output_names_a_server(default_stack):
    functions = _pipeline_functions(default_stack)
    assert functions and not any("MLFLOW_TRACKING_SERVER_ARN" in f["Properties"]["Environment"]["Variables"] for f in functions)
    assert "MlflowTrackingServerArn" not in default_stack.json["Outputs"]


def test_every_nag_pack_reports_no_unacknowledged_finding_with_a_server(tracking_stack):
    report = json.loads((tracking_stack.directory / "validation-report.json").read_text())
    assert [r["violations"] for r in report["pluginReports"] if r["violations"]] == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"mlflow_tracking_server_arn": "research"}, "expected a SageMaker MLflow ARN"),
        ({"mlflow_tracking_server_arn": SERVER.replace("mlflow-tracking-server", "mlflow-thing")}, "expected a SageMaker"),
        (
            {"mlflow_tracking_server_arn": SERVER, "account": "123456789012", "region": "eu-west-1"},
            "in the stack's region \\(eu-west-1\\)",
        ),
    ],
)
def test_a_bad_server_setting_is_refused_naming_it(raw, message):
    with pytest.raises(SettingsError, match=message) as raised:
        StackSettings.parse(raw)
    assert raised.value.setting == "mlflow_tracking_server_arn"


def _gateway_statements(stack: Synthesized) -> list[dict]:
    (endpoint,) = [
        r for r in stack.resources("AWS::EC2::VPCEndpoint").values() if r["Properties"]["VpcEndpointType"] == "Gateway"
    ]
    return endpoint["Properties"]["PolicyDocument"]["Statement"]


def test_jobs_may_upload_through_the_s3_gateway_to_the_servers_artifact_store_read_at_deploy_time(tracking_stack):
    (store,) = [s for s in _gateway_statements(tracking_stack) if s.get("Sid") == "MlflowArtifactStore"]
    assert sorted(_as_list(store["Action"])) == ["s3:AbortMultipartUpload", "s3:ListMultipartUploadParts", "s3:PutObject"]
    assert "ArtifactStoreUri" in json.dumps(store["Resource"])  # the bucket of DescribeMlflowTrackingServer's answer
    (lookup,) = [r for r in tracking_stack.resources("Custom::AWS").values() if "MlflowTrackingServer" in json.dumps(r)]
    assert '\\"TrackingServerName\\":\\"research\\"' in json.dumps(lookup["Properties"]["Create"])
    describe = [
        statement
        for policy in tracking_stack.resources("AWS::IAM::ManagedPolicy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "sagemaker:DescribeMlflowTrackingServer" in _as_list(statement["Action"])
    ]
    assert [statement["Resource"] for statement in describe] == [SERVER]


def test_without_the_setting_the_s3_gateway_admits_no_other_bucket(default_stack):
    assert [s.get("Sid") for s in _gateway_statements(default_stack)] == ["OnlyTheProjectBuckets"]
