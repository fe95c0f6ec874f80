"""The CreateTrainingJob request: exactly right per strategy, and always valid for the API."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.core.specs import DDP, SMP, SPECS, STACK
from trainstack.identity import Run
from trainstack.request import TRAINSTACK_HYPERPARAMETERS, InvalidRequestError, build_request, validate_request
from trainstack.rules import SpecRejectedError, check_or_raise
from trainstack.rules.api_limits import limits
from trainstack.spec import parse_spec
from trainstack_contract.config import TrainConfig

GOLDEN = Path(__file__).resolve().parent / "golden"


def build(strategy: str, raw: dict | None = None, **overrides) -> dict:
    spec = parse_spec(raw or SPECS[strategy])
    plan = check_or_raise(spec, lambda uri: 64)
    trial = Run(f"s3://trainstack-trigger/jobs/{strategy}.yaml#v1").trial()
    return build_request(spec, plan, STACK, trial=trial, overrides=overrides)


@pytest.mark.parametrize("strategy", sorted(SPECS))
def test_request_matches_the_reviewed_golden_request(strategy):
    assert build(strategy) == json.loads((GOLDEN / f"{strategy}.json").read_text())


@pytest.mark.parametrize("strategy", sorted(SPECS))
def test_request_passes_botocores_create_training_job_model(strategy):
    validate_request(build(strategy))


@pytest.mark.parametrize("strategy", sorted(SPECS))
def test_the_rules_keep_room_for_every_hyperparameter_the_builder_adds(strategy):
    spec = parse_spec({**SPECS[strategy], "checkpoints": True, "tensorboard": True})
    added = set(build(strategy, spec.model_dump(mode="json"))["HyperParameters"]) - set(spec.script_hyperparameters)
    # checkpoint_every auto's two go only to the built-in script, whose jobs need no room (the test below)
    assert len(added - {"mttf", "planned_save_seconds"}) <= len(TRAINSTACK_HYPERPARAMETERS), sorted(added)


@pytest.mark.parametrize("strategy", sorted(SPECS))
def test_a_builtin_script_job_is_within_the_limit_whatever_the_builder_adds(strategy):
    """The script refuses a hyperparameter it does not know: its job carries its config's fields and the
    toolkit's sagemaker_* entries, fewer than the API takes."""
    names = set(build(strategy)["HyperParameters"])
    config_fields = {field.name for field in dataclasses.fields(TrainConfig)}
    assert {"mttf"} <= names and all(name.startswith("sagemaker_") for name in names - config_fields), sorted(names)
    assert len(names - config_fields) <= len(TRAINSTACK_HYPERPARAMETERS)
    assert len(config_fields) + len(TRAINSTACK_HYPERPARAMETERS) <= limits().hyperparameters


def test_validator_catches_what_botocore_does_not():
    request = build("ddp")
    with pytest.raises(InvalidRequestError, match="TrainingJobName"):
        validate_request({**request, "TrainingJobName": "bad_name"})
    with pytest.raises(InvalidRequestError, match="Invalid type"):
        validate_request({**request, "HyperParameters": {"lr": 0.1}})


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("ddp", {"sagemaker_torch_distributed_enabled": "true", "strategy": '"ddp"'}),
        ("fsdp", {"sagemaker_torch_distributed_enabled": "true", "strategy": '"fsdp"'}),
        (
            "smddp",
            {"sagemaker_distributed_dataparallel_enabled": "true", "sagemaker_distributed_dataparallel_custom_mpi_options": '""'},
        ),
        (
            "smp",
            {
                "sagemaker_torch_distributed_enabled": "true",
                "sagemaker_distributed_dataparallel_enabled": "false",
                "mp_parameters": '{"hybrid_shard_degree": 8, "tensor_parallel_degree": 2}',
            },
        ),
    ],
)
def test_each_distribution_sets_the_hyperparameters_the_container_toolkit_reads(strategy, expected):
    hyperparameters = build(strategy)["HyperParameters"]
    assert expected.items() <= hyperparameters.items()
    assert hyperparameters["sagemaker_program"] == '"train.py"'
    assert hyperparameters["sagemaker_instance_type"] == json.dumps(SPECS[strategy]["instance_type"])
    assert all(isinstance(v, str) and json.loads(v) is not None for v in hyperparameters.values())


def test_smp_uses_the_smp_image_and_others_the_pytorch_dlc():
    assert build("smp")["AlgorithmSpecification"]["TrainingImage"].startswith(
        "658645717510.dkr.ecr.us-east-1.amazonaws.com/smdistributed-modelparallel:2.3.1-gpu-py311"
    )
    assert (
        build("ddp")["AlgorithmSpecification"]["TrainingImage"]
        == "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311"
    )


def test_local_nvme_instances_omit_the_volume_key_and_others_use_it():
    assert "VolumeKmsKeyId" not in build("ddp")["ResourceConfig"]  # p4d: local NVMe
    ebs = build("ddp", {**DDP, "instance_type": "ml.p3.16xlarge"})
    assert ebs["ResourceConfig"]["VolumeKmsKeyId"] == STACK.key_arn


def test_every_efa_type_sets_the_efa_variables_whatever_toolkit_its_image_has():
    rdma = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1"}
    assert build("fsdp")["Environment"] == rdma  # p5e: in no toolkit's list before 5.1
    assert build("ddp")["Environment"] == rdma  # p4d: the toolkit sets them too; twice is harmless
    assert build("ddp", {**DDP, "instance_type": "ml.g5.48xlarge"})["Environment"] == {"FI_PROVIDER": "efa"}  # EFA without RDMA
    assert "Environment" not in build("ddp", {**DDP, "instance_type": "ml.p3.16xlarge"})  # no EFA


def test_a_re_created_attempt_is_a_new_job_that_resumes_from_its_trials_checkpoints():
    spec = parse_spec(SPECS["ddp"])
    plan = check_or_raise(spec, lambda uri: 64)
    trial = Run("s3://trainstack-trigger/jobs/ddp.yaml#v1").trial()
    first, again = (build_request(spec, plan, STACK, trial=trial, attempt=attempt) for attempt in (0, 2))
    assert first["TrainingJobName"] != again["TrainingJobName"]
    assert first["CheckpointConfig"] == again["CheckpointConfig"]
    assert first["CheckpointConfig"]["S3Uri"].startswith("s3://trainstack-artifacts/checkpoints/default/gpt-small/")


def test_each_trial_of_a_sweep_has_a_checkpoint_location_of_its_own():
    spec = parse_spec(SPECS["ddp"])
    plan = check_or_raise(spec, lambda uri: 64)
    run = Run("s3://trainstack-trigger/jobs/ddp.yaml#v1")
    locations = {build_request(spec, plan, STACK, trial=run.trial(i))["CheckpointConfig"]["S3Uri"] for i in range(3)}
    assert len(locations) == 3


def test_spot_sets_managed_spot_training_and_its_maximum_wait():
    request = build("ddp")
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800}
    assert request["EnableManagedSpotTraining"] is True


def test_network_isolation_ships_the_code_as_an_input_channel_named_as_the_channel_names_it():
    request = build("ddp", {**DDP, "network_isolation": True})
    assert request["EnableNetworkIsolation"] is True
    # a channel keeps the object's base name: the stack's tarball asset is <hash>.tar.gz
    assert request["HyperParameters"]["sagemaker_submit_directory"] == '"/opt/ml/input/data/code/abc.tar.gz"'
    code = next(c for c in request["InputDataConfig"] if c["ChannelName"] == "code")
    assert code["DataSource"]["S3DataSource"]["S3Uri"] == STACK.source_s3_uri


def test_framework_images_start_through_the_container_entry_that_forwards_sigterm():
    request = build("ddp")
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == [
        "python3",
        "/opt/ml/input/data/trainstack_entry/0123abcd.py",
        "bash",
        "-m",
        "start_with_right_hostname.sh",
        "train",
    ]
    entry = next(c for c in request["InputDataConfig"] if c["ChannelName"] == "trainstack_entry")
    assert entry["InputMode"] == "File"  # on disk before PID 1 starts
    assert entry["DataSource"]["S3DataSource"]["S3Uri"] == STACK.entry_s3_uri


def test_a_users_own_image_keeps_its_own_entry():
    request = build("ddp", {**DDP, "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1"})
    assert "ContainerEntrypoint" not in request["AlgorithmSpecification"]
    assert all(c["ChannelName"] != "trainstack_entry" for c in request["InputDataConfig"])


def test_image_project_is_the_stacks_project_image_with_its_own_entry():
    built = "123456789012.dkr.ecr.us-east-1.amazonaws.com/cdk-hnb659fds-container-assets-123456789012-us-east-1:0a1b"
    spec = parse_spec({**DDP, "image": "project"})
    stack = dataclasses.replace(STACK, project_image_uri=built)
    request = build_request(spec, check_or_raise(spec, lambda uri: 64, stack=stack), stack, trial=Run("s3://b/k#v").trial())
    assert request["AlgorithmSpecification"]["TrainingImage"] == built
    assert "ContainerEntrypoint" not in request["AlgorithmSpecification"]


def test_image_project_on_a_stack_without_a_project_image_is_refused_naming_the_setting():
    with pytest.raises(
        SpecRejectedError,
        match=r"image = \"project\": the stack has no project image; deploy it with .*build_training_image=true",
    ):
        check_or_raise(parse_spec({**DDP, "image": "project"}), lambda uri: 64, stack=STACK)


def test_profiler_is_disabled_unless_asked_and_retries_and_trials_pass_through():
    assert build("ddp")["ProfilerConfig"] == {"DisableProfiler": True}
    request = build("ddp", {**DDP, "profiler": True, "retry_attempts": 3}, lr=0.001)
    assert "ProfilerConfig" not in request
    assert request["RetryStrategy"] == {"MaximumRetryAttempts": 3}
    assert request["HyperParameters"]["lr"] == "0.001"


def test_user_tags_come_first_then_the_run_identity_tags():
    keys = [t["Key"] for t in build("smp", {**SMP, "tags": {"team": "ml"}})["Tags"]]
    assert keys == ["team", "trainstack:spec", "trainstack:lineage", "trainstack:team", "trainstack:strategy"]


def test_checkpoints_live_under_the_trials_own_prefix():
    request = build("ddp")
    trial = Run("s3://trainstack-trigger/jobs/ddp.yaml#v1").trial()
    assert request["CheckpointConfig"]["S3Uri"] == f"s3://trainstack-artifacts/{trial.checkpoint_prefix('gpt-small', 'default')}"


def test_a_teams_job_runs_as_its_teams_role_and_writes_only_into_its_teams_folders():
    roles = ("research=arn:aws:iam::123456789012:role/research", "prod=arn:aws:iam::123456789012:role/prod")
    stack = dataclasses.replace(STACK, team_role_arns=roles)
    spec = parse_spec(SPECS["ddp"])
    request = build_request(spec, check_or_raise(spec, lambda uri: 64), stack, trial=Run("s3://b/k#v").trial(), team="prod")
    assert request["RoleArn"] == "arn:aws:iam::123456789012:role/prod"
    written = [
        request["OutputDataConfig"]["S3OutputPath"],
        request["CheckpointConfig"]["S3Uri"],
        request["TensorBoardOutputConfig"]["S3OutputPath"],
    ]
    assert [uri.split("/")[4] for uri in written] == ["prod"] * 3  # s3://bucket/<prefix>/<team>/...
    assert {"Key": "trainstack:team", "Value": "prod"} in request["Tags"]
