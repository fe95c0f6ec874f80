"""Build the complete CreateTrainingJob request for a checked spec. Pure: no AWS calls.

The script-mode hyperparameters follow the contract the framework containers' toolkit reads
(docs/sagemaker-contract.md §1): every value a string holding JSON.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from trainstack import images
from trainstack.entrypoint import ENTRY_CHANNEL, INPUT_DATA_ROOT, container_entrypoint
from trainstack.identity import Trial
from trainstack.instances import CATALOG, efa_environment
from trainstack.launchers import launcher_hyperparameters
from trainstack.layout import MODELS_PREFIX, TENSORBOARD_PREFIX, team_folder
from trainstack.planner.goodput import cadence_hyperparameters
from trainstack.spec import PROJECT_IMAGE, STACK_TRACKING_SERVER, JobSpec
from trainstack.stack_context import StackContext
from trainstack_contract.job_names import TRAINING_JOB_NAME_PATTERN
from trainstack_contract.metric_lines import metric_definitions
from trainstack_contract.tracking import EXPERIMENT_NAME, TRACKING_URI

if TYPE_CHECKING:  # for the type only: the rules import this module (api_limits reads TRAINSTACK_HYPERPARAMETERS)
    from trainstack.rules import Resolution

CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
TENSORBOARD_LOCAL_PATH = "/opt/ml/output/tensorboard"
CODE_CHANNEL = "code"
# Every hyperparameter the builder sets beside the spec's own, on the job that gets the most: the
# built-in script's settings and the toolkit's sagemaker_* entries (script_mode_hyperparameters), and
# SMP v2's launcher entries (launchers.py; no other distribution the rules pass gets more than these
# four). The rules keep room for all of them under the API's limit (rules/api_limits.py). The health
# block's two entries and checkpoint_every auto's two (mttf, planned_save_seconds) need none: only the
# built-in script takes them, and it refuses any hyperparameter it does not know, so its jobs stay far
# below the limit.
TRAINSTACK_HYPERPARAMETERS = (
    "strategy",
    "checkpoint_dir",
    "tensorboard_dir",
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_region",
    "sagemaker_container_log_level",
    "sagemaker_job_name",
    "mp_parameters",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_instance_type",
    "sagemaker_torch_distributed_enabled",
)


# What a tracked job's environment gets beside the MLflow client's own two variables (the tracking
# URI is the server's ARN, which the sagemaker-mlflow plugin resolves and signs for):
# - artifacts go up by presigned URLs the tracking server hands out (the plugin's S3 artifact
#   repository), so the execution role needs no write access to the server's artifact bucket, a
#   bucket the stack does not know and would otherwise have to grant s3:PutObject on (the upload
#   still crosses the VPC's S3 gateway endpoint, whose policy admits only the project's buckets);
# - no usage events: mlflow 3 sends them unless told not to, and a job in isolated subnets would
#   only wait for each attempt to time out.
PRESIGNED_UPLOAD = "SAGEMAKER_PRESIGNED_URL_UPLOAD_ENABLED"
DISABLE_TELEMETRY = "MLFLOW_DISABLE_TELEMETRY"
TRACKING_VARIABLES = (TRACKING_URI, EXPERIMENT_NAME, PRESIGNED_UPLOAD, DISABLE_TELEMETRY)


def tracking_server_arn(spec: JobSpec, stack: StackContext) -> str | None:
    """The MLflow tracking server (or App) the job logs to: the spec's ARN, or the stack's for
    `mlflow: stack` ("" where the stack has none, which the rules refuse); None without tracking."""
    if spec.tracking is None:
        return None
    if spec.tracking.mlflow == STACK_TRACKING_SERVER:
        return stack.mlflow_tracking_server_arn
    return spec.tracking.mlflow


def tracking_environment(server_arn: str, experiment: str) -> dict[str, str]:
    """The variables a tracked job gets, in the order of TRACKING_VARIABLES."""
    return dict(zip(TRACKING_VARIABLES, (server_arn, experiment, "true", "true"), strict=True))


def image_uri(spec: JobSpec, resolution: Resolution, stack: StackContext) -> str:
    """The spec's own image (`project`: the stack's project image), else the framework image."""
    if spec.image == PROJECT_IMAGE:
        return stack.project_image_uri
    if spec.image:
        return spec.image
    return images.image_uri(
        resolution.image_kind, resolution.framework_version, resolution.py_version, stack.region, resolution.instance
    )


def script_mode_hyperparameters(
    spec: JobSpec, resolution: Resolution, stack: StackContext, job_name: str, overrides: dict[str, Any]
) -> dict[str, str]:
    source = spec.source_dir or stack.source_s3_uri
    # With network isolation the code arrives as a channel; a channel keeps each object's base name.
    submit = f"{INPUT_DATA_ROOT}/{CODE_CHANNEL}/{source.rsplit('/', 1)[-1]}" if spec.network_isolation else source
    # `checkpoint_every: auto` is told the job's MTTF and the plan's save time; the spec's own values win.
    cadence = cadence_hyperparameters(spec, resolution.strategy, resolution.smp_parameters, overrides)
    values: dict[str, Any] = {**cadence, **spec.script_hyperparameters, **overrides, "strategy": resolution.strategy}
    if spec.checkpoints:
        values["checkpoint_dir"] = CHECKPOINT_LOCAL_PATH
    if spec.tensorboard:
        values["tensorboard_dir"] = TENSORBOARD_LOCAL_PATH
    encoded = {key: json.dumps(value) for key, value in values.items()}
    encoded.update(
        sagemaker_program=json.dumps(spec.entry_point),
        sagemaker_submit_directory=json.dumps(submit),
        sagemaker_region=json.dumps(stack.region),
        sagemaker_container_log_level="20",
        sagemaker_job_name=json.dumps(job_name),
    )
    encoded.update(launcher_hyperparameters(resolution.distribution, spec.instance_type))
    return encoded


def build_request(
    spec: JobSpec,
    resolution: Resolution,
    stack: StackContext,
    *,
    trial: Trial,
    overrides: dict[str, Any] | None = None,
    attempt: int = 0,
    execution: str | None = None,
    team: str | None = None,
) -> dict[str, Any]:
    """The CreateTrainingJob request for one attempt of one trial. The trial's identity names the
    job and its checkpoint location: its attempts share checkpoints and resume, other trials never
    see them. `overrides` are the trial's hyperparameters; `execution` names the state-machine
    execution that creates the job (a tag, so that its Stop stops only its own jobs); `team` (the
    stack's default team unless given) runs it as its own execution role, in its own folders."""
    team = team or stack.default_team
    job_name = trial.job_name(stack.name_prefix, spec.name, attempt)
    artifacts = f"s3://{stack.artifacts_bucket}"
    inputs = [_channel(name, channel.s3_uri, channel.mode, channel.distribution) for name, channel in spec.inputs.items()]
    if spec.network_isolation:  # no outbound calls at all: the code travels as an input channel
        inputs.append(_channel(CODE_CHANNEL, spec.source_dir or stack.source_s3_uri))
    resource: dict[str, Any] = {"InstanceCount": spec.instance_count, "VolumeSizeInGB": spec.volume_size_gb}
    if spec.instance_types:  # SageMaker takes the first type with capacity (DescribeTrainingJob: SelectedInstanceType)
        resource["InstancePreferences"] = [{"InstanceType": name} for name in spec.instance_types]
    else:
        resource["InstanceType"] = spec.instance_type
    if not any(CATALOG[name].local_nvme for name in spec.capacity_options):  # rejected where storage is local NVMe
        resource["VolumeKmsKeyId"] = stack.key_arn
    if spec.training_plan_arn:
        resource["TrainingPlanArn"] = spec.training_plan_arn
    if spec.warm_pool:
        resource["KeepAlivePeriodInSeconds"] = spec.warm_pool
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": spec.max_runtime}
    if spec.spot.enabled:
        stopping["MaxWaitTimeInSeconds"] = spec.spot.max_wait or spec.max_runtime
    if spec.max_pending:
        stopping["MaxPendingTimeInSeconds"] = spec.max_pending
    environment = {**efa_environment(resolution.instance), **spec.environment}
    tracking = _mlflow_config(spec, stack, job_name)
    if tracking is not None:
        environment.update(tracking_environment(tracking["MlflowResourceArn"], tracking["MlflowExperimentName"]))
    request: dict[str, Any] = {
        "TrainingJobName": job_name,
        "AlgorithmSpecification": {
            "TrainingImage": image_uri(spec, resolution, stack),
            "TrainingInputMode": "File",
            "MetricDefinitions": metric_definitions(),
            "EnableSageMakerMetricsTimeSeries": True,
        },
        "RoleArn": stack.role_for(team),
        "HyperParameters": script_mode_hyperparameters(spec, resolution, stack, job_name, overrides or {}),
        "OutputDataConfig": {"S3OutputPath": f"{artifacts}/{team_folder(MODELS_PREFIX, team)}", "KmsKeyId": stack.key_arn},
        "ResourceConfig": resource,
        "VpcConfig": {"SecurityGroupIds": list(stack.security_group_ids), "Subnets": list(stack.subnet_ids)},
        "StoppingCondition": stopping,
        "EnableNetworkIsolation": spec.network_isolation,
        "EnableInterContainerTrafficEncryption": stack.inter_container_encryption
        if spec.inter_container_encryption is None
        else spec.inter_container_encryption,
        "EnableManagedSpotTraining": spec.spot.enabled,
        "Tags": [{"Key": k, "Value": v} for k, v in spec.tags.items()]
        + trial.tags(spec.name, resolution.strategy, team, execution),
    }
    if stack.entry_s3_uri and not spec.image:  # script mode in a framework image: PID 1 forwards SIGTERM
        request["AlgorithmSpecification"]["ContainerEntrypoint"] = container_entrypoint(stack.entry_s3_uri)
        inputs.append(_channel(ENTRY_CHANNEL, stack.entry_s3_uri))
    if inputs:
        request["InputDataConfig"] = inputs
    if environment:
        request["Environment"] = environment
    if tracking is not None:
        request["MlflowConfig"] = tracking
    if spec.checkpoints:
        request["CheckpointConfig"] = {
            "S3Uri": f"{artifacts}/{trial.checkpoint_prefix(spec.name, team)}",
            "LocalPath": CHECKPOINT_LOCAL_PATH,
        }
    if spec.tensorboard:
        request["TensorBoardOutputConfig"] = {
            "LocalPath": TENSORBOARD_LOCAL_PATH,
            "S3OutputPath": f"{artifacts}/{team_folder(TENSORBOARD_PREFIX, team)}{job_name}/",
        }
    if spec.retry_attempts:
        request["RetryStrategy"] = {"MaximumRetryAttempts": spec.retry_attempts}
    if infra_check(spec):
        request["InfraCheckConfig"] = {"EnableInfraCheck": True}
    if not spec.profiler:  # the profiler's rules launch processing jobs with their own quota
        request["ProfilerConfig"] = {"DisableProfiler": True}
    return request


def _mlflow_config(spec: JobSpec, stack: StackContext, job_name: str) -> dict[str, str] | None:
    """MlflowConfig: one MLflow run per training job, named as the job (trainstack_contract/tracking.py)."""
    server = tracking_server_arn(spec, stack)
    experiment = spec.tracking_experiment
    if server is None or experiment is None:
        return None
    if not server:
        raise InvalidRequestError(
            "tracking.mlflow is stack, but the stack has no tracking server; the rules refuse this spec when they are "
            "given the stack (rules/tracking.py)"
        )
    return {"MlflowResourceArn": server, "MlflowExperimentName": experiment, "MlflowRunName": job_name}


def infra_check(spec: JobSpec) -> bool:
    """SageMaker's pre-training check of instance hardware and cluster network: on by default where a
    bad GPU or link wastes the most (several accelerated instances), unless the spec says otherwise.
    A job the check fails is a failure of the infrastructure, and restarts (trainstack/failures.py)."""
    if spec.infra_check is not None:
        return spec.infra_check
    return spec.instance_count > 1 and all(CATALOG[name].accelerators > 0 for name in spec.capacity_options)


def _channel(name: str, uri: str, mode: str = "File", distribution: str = "FullyReplicated") -> dict[str, Any]:
    source = {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": distribution}
    return {"ChannelName": name, "InputMode": mode, "DataSource": {"S3DataSource": source}}


class InvalidRequestError(ValueError):
    """The built request would be rejected by the API; a bug in the builder, never the user's."""


def validate_request(request: dict[str, Any]) -> None:
    """botocore's own CreateTrainingJob model (types, required keys, minimums), plus the checks it
    skips: the name pattern, maximum lengths and hyperparameter limits."""
    from botocore.validate import ParamValidator

    from trainstack.rules.api_limits import limits  # on the call: the rules import this module

    limit = limits()
    report = ParamValidator().validate(request, _create_training_job_input())
    problems = [report.generate_report()] if report.has_errors() else []
    if not TRAINING_JOB_NAME_PATTERN.match(request["TrainingJobName"]):
        problems.append(f"TrainingJobName {request['TrainingJobName']!r} breaks {TRAINING_JOB_NAME_PATTERN.pattern}")
    hyperparameters = request.get("HyperParameters", {})
    if len(hyperparameters) > limit.hyperparameters:
        problems.append(f"{len(hyperparameters)} hyperparameters; the limit is {limit.hyperparameters}")
    if len(request.get("Environment", {})) > limit.environment:
        problems.append(f"{len(request['Environment'])} environment variables; the limit is {limit.environment}")
    problems += [f"hyperparameter {k!r} is not a string" for k, v in hyperparameters.items() if not isinstance(v, str)]
    key_most, value_most = limit.hyperparameter_key, limit.hyperparameter_value
    too_long = [k for k, v in hyperparameters.items() if len(k) > key_most or (isinstance(v, str) and len(v) > value_most)]
    problems += [f"hyperparameter {k!r} is longer than the API allows (key {key_most}, value {value_most})" for k in too_long]
    if problems:
        raise InvalidRequestError("; ".join(problems))


@functools.cache
def _create_training_job_input() -> Any:
    """botocore's CreateTrainingJob input shape, loaded once per process (about 85 ms): a warm Create
    checks every request against it. On the call, not with the module: Validate's cold start needs none."""
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape
