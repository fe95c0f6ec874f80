"""`tracking`: the spec names the stack's MLflow tracking server (or its ARN), Validate refuses any
other with one line naming the field, and the request carries MlflowConfig and the MLflow client's
variables, one run per training job named as the job."""

from __future__ import annotations

import dataclasses

import pytest

from tests.core.specs import DDP, STACK
from trainstack.identity import Run
from trainstack.request import DISABLE_TELEMETRY, PRESIGNED_UPLOAD, build_request, validate_request
from trainstack.rules import checked
from trainstack.spec import json_schema, parse_spec
from trainstack.stack_context import StackContext
from trainstack_contract.tracking import EXPERIMENT_NAME, TRACKING_URI

SERVER = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/research"
TRACKED_STACK = dataclasses.replace(STACK, mlflow_tracking_server_arn=SERVER)
TRIAL = Run("s3://trainstack-trigger/jobs/gpt-small.yaml#v1").trial()


def tracked(tracking: dict, **changes) -> dict:
    return {**DDP, "tracking": tracking, **changes}


def problems(data: dict, stack: StackContext | None = TRACKED_STACK, region: str | None = None) -> list[str]:
    found, _ = checked(parse_spec(data), lambda uri: 64, region, stack)
    return [str(problem) for problem in found]


def request(data: dict, stack: StackContext = TRACKED_STACK) -> dict:
    spec = parse_spec(data)
    found, resolution = checked(spec, lambda uri: 64, None, stack)
    assert found == [] and resolution is not None
    built = build_request(spec, resolution, stack, trial=TRIAL)
    validate_request(built)
    return built


def test_the_request_logs_to_the_stacks_server_in_an_experiment_named_as_the_spec():
    config = request(tracked({"mlflow": "stack"}))["MlflowConfig"]
    assert (config["MlflowResourceArn"], config["MlflowExperimentName"]) == (SERVER, "gpt-small")


def test_the_mlflow_run_is_named_as_the_training_job():
    built = request(tracked({}))
    assert built["MlflowConfig"]["MlflowRunName"] == built["TrainingJobName"]


def test_the_job_gets_the_mlflow_clients_variables_presigned_uploads_and_no_telemetry():
    environment = request(tracked({"mlflow": SERVER, "experiment": "scaling-laws"}))["Environment"]
    assert {name: environment[name] for name in (TRACKING_URI, EXPERIMENT_NAME, PRESIGNED_UPLOAD, DISABLE_TELEMETRY)} == {
        TRACKING_URI: SERVER,
        EXPERIMENT_NAME: "scaling-laws",
        PRESIGNED_UPLOAD: "true",
        DISABLE_TELEMETRY: "true",
    }


def test_a_spec_without_tracking_has_no_mlflow_config_or_variables():
    built = request(DDP)
    assert "MlflowConfig" not in built
    assert not {TRACKING_URI, EXPERIMENT_NAME} & set(built.get("Environment", {}))


def test_an_arn_of_another_shape_is_one_line_naming_tracking_mlflow():
    (line,) = problems(tracked({"mlflow": "arn:aws:sagemaker:us-east-1:123456789012:training-job/research"}))
    assert line.startswith("tracking.mlflow = ") and "not a SageMaker managed MLflow ARN" in line


def test_a_server_in_another_region_is_one_line_naming_tracking_mlflow():
    elsewhere = SERVER.replace("us-east-1", "eu-west-1")
    (line,) = problems(tracked({"mlflow": elsewhere}), stack=None, region="us-east-1")
    assert line.startswith("tracking.mlflow = ") and "is in eu-west-1" in line


def test_stack_without_a_configured_server_is_one_line_naming_tracking_mlflow():
    (line,) = problems(tracked({"mlflow": "stack"}), stack=STACK)
    assert line.startswith('tracking.mlflow = "stack"') and "-c mlflow_tracking_server_arn=" in line


def test_a_server_other_than_the_stacks_is_one_line_naming_tracking_mlflow():
    (line,) = problems(tracked({"mlflow": SERVER.replace("research", "other")}))
    assert line.startswith("tracking.mlflow = ") and "only to the stack's tracking server" in line


def test_an_experiment_name_longer_than_mlflow_config_takes_is_one_line_naming_tracking_experiment():
    (line,) = problems(tracked({"experiment": "x" * 257}))
    assert line.startswith("tracking.experiment = ") and "1 to 256 characters" in line


def test_without_the_stack_a_well_formed_arn_in_the_jobs_region_passes():
    assert problems(tracked({"mlflow": SERVER}), stack=None, region="us-east-1") == []
    assert problems(tracked({"mlflow": "stack"}), stack=None, region="us-east-1") == []


def test_a_fallback_capacity_option_does_not_repeat_the_tracking_problem():
    data = tracked(
        {"mlflow": "not-an-arn"}, spot={"enabled": False}, warm_pool=None, instance_types=["ml.p4d.24xlarge", "ml.p4de.24xlarge"]
    )
    data.pop("instance_type", None)
    assert len([line for line in problems(data) if "tracking.mlflow" in line]) == 1


def test_a_variable_tracking_sets_may_not_be_set_in_environment_too():
    (line,) = problems(tracked({}, environment={TRACKING_URI: "http://localhost:5000"}))
    assert line.startswith(f"environment.{TRACKING_URI} = ")


def test_tracking_with_network_isolation_is_refused():
    (line,) = problems(tracked({}, network_isolation=True))
    assert line.startswith("network_isolation = true")


def test_the_environment_limit_counts_the_tracking_variables():
    environment = {f"VARIABLE_{index}": "x" for index in range(94)}  # with the 3 EFA variables: 97 of 100
    assert problems({**DDP, "environment": environment}) == []
    (line,) = problems(tracked({}, environment=environment))
    assert line.startswith("environment = 94") and "101 environment variables" in line


def test_the_stacks_server_travels_in_its_outputs_and_lambda_environment():
    assert StackContext.from_outputs(TRACKED_STACK.to_outputs(), STACK.region) == TRACKED_STACK
    assert StackContext.from_variables({**TRACKED_STACK.to_variables(), "AWS_REGION": STACK.region}) == TRACKED_STACK


def test_a_stack_without_a_server_publishes_no_empty_output_or_variable_for_it():
    assert "MlflowTrackingServerArn" not in STACK.to_outputs()
    assert "MLFLOW_TRACKING_SERVER_ARN" not in STACK.to_variables()


def test_the_schema_describes_tracking_for_editors():
    schema = json_schema()
    assert set(schema["$defs"]["Tracking"]["properties"]) == {"mlflow", "experiment"}
    assert schema["$defs"]["Tracking"]["properties"]["mlflow"]["default"] == "stack"


@pytest.mark.parametrize("data", [tracked({}), tracked({"mlflow": SERVER, "experiment": "e"})])
def test_validates_output_spec_parses_back_with_its_tracking(data):
    spec = parse_spec(data)
    assert parse_spec(spec.model_dump(mode="json")).tracking == spec.tracking
