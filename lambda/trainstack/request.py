"""Build the complete CreateTrainingJob request for a checked spec. Pure: no AWS calls.

The script-mode hyperparameters follow the contract the framework containers' toolkit reads
(shared/reference/sagemaker-contract.md §1): every value a string holding JSON.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from trainstack.images import PYTORCH_TRAINING, SMP_TRAINING
from trainstack.instances import efa_environment
from trainstack.layout import CHECKPOINTS_PREFIX, MODELS_PREFIX, TENSORBOARD_PREFIX
from trainstack.metric_definitions import metric_definitions
from trainstack.naming import DEFAULT_NAME_PREFIX, TRAINING_JOB_NAME_PATTERN, training_job_name_prefix
from trainstack.rules import Plan
from trainstack.spec import JobSpec

CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
TENSORBOARD_LOCAL_PATH = "/opt/ml/output/tensorboard"
CODE_CHANNEL = "code"
# CUDA suffix of the SMP v2 image per PyTorch version (from the SageMaker SDK's image config).
SMP_CUDA = {"2.0.1": "cu121", "2.1.2": "cu121", "2.2.0": "cu121", "2.3.1": "cu121", "2.4.1": "cu121", "2.5.1": "cu124"}


@dataclass(frozen=True)
class StackContext:
    """What the deployed stack provides every job (its CloudFormation outputs)."""

    region: str
    role_arn: str
    artifacts_bucket: str
    key_arn: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    source_s3_uri: str
    inter_container_encryption: bool = False
    name_prefix: str = DEFAULT_NAME_PREFIX


def lineage_digest(lineage: str) -> str:
    """12 hex characters naming a run in job names; also how its jobs are found to stop them."""
    return hashlib.sha256(lineage.encode()).hexdigest()[:12]


def training_job_name(name_prefix: str, spec_name: str, lineage: str, trial: int | None = None, attempt: int = 0) -> str:
    """Deterministic: the same trigger (object key + version, or execution name) gives the same
    name, so a redelivered event or a redriven execution cannot create a second job. Trials of a
    sweep add their index; re-creations after a capacity failure add their attempt."""
    suffix = lineage_digest(lineage) + (f"-t{trial}" if trial is not None else "") + (f"-a{attempt}" if attempt else "")
    head = f"{training_job_name_prefix(name_prefix)}{spec_name}"[: 63 - len(suffix) - 1].rstrip("-")
    return f"{head}-{suffix}"


def image_uri(spec: JobSpec, plan: Plan, region: str) -> str:
    if spec.image:
        return spec.image
    if plan.strategy == "smp":
        cuda = SMP_CUDA.get(spec.framework_version, "cu121")
        tag = f"{spec.framework_version}-gpu-{spec.py_version}-{cuda}"
        return f"{SMP_TRAINING.account}.dkr.ecr.{region}.amazonaws.com/{SMP_TRAINING.name}:{tag}"
    device = "gpu" if plan.instance.accelerators else "cpu"
    tag = f"{spec.framework_version}-{device}-{spec.py_version}"
    return f"{PYTORCH_TRAINING.account}.dkr.ecr.{region}.amazonaws.com/{PYTORCH_TRAINING.name}:{tag}"


def script_mode_hyperparameters(
    spec: JobSpec, plan: Plan, stack: StackContext, job_name: str, trial: dict[str, Any]
) -> dict[str, str]:
    submit = (
        f"/opt/ml/input/data/{CODE_CHANNEL}/sourcedir.tar.gz"
        if spec.network_isolation
        else (spec.source_dir or stack.source_s3_uri)
    )
    values: dict[str, Any] = {**spec.hyperparameters, **trial, "strategy": plan.strategy}
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
        sagemaker_instance_type=json.dumps(spec.instance_type),
    )
    if plan.strategy == "smddp":
        encoded.update(
            sagemaker_distributed_dataparallel_enabled="true", sagemaker_distributed_dataparallel_custom_mpi_options='""'
        )
    else:
        encoded["sagemaker_torch_distributed_enabled"] = "true"
    if plan.strategy == "smp":
        encoded["sagemaker_distributed_dataparallel_enabled"] = "false"
        encoded["mp_parameters"] = json.dumps(plan.smp_parameters)
    return encoded


def build_request(
    spec: JobSpec, plan: Plan, stack: StackContext, *, job_name: str, lineage: str, trial: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The CreateTrainingJob request. `lineage` names the job's checkpoint lineage: retries and
    restarts of the same trigger share it, so they resume instead of starting over."""
    trial = trial or {}
    lineage_id = hashlib.sha256(lineage.encode()).hexdigest()[:16]
    artifacts = f"s3://{stack.artifacts_bucket}"
    inputs = [
        {
            "ChannelName": name,
            "InputMode": channel.mode,
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": channel.s3_uri,
                    "S3DataDistributionType": channel.distribution,
                }
            },
        }
        for name, channel in spec.inputs.items()
    ]
    if spec.network_isolation:  # no outbound calls at all: the code travels as an input channel
        source = spec.source_dir or stack.source_s3_uri
        inputs.append(
            {
                "ChannelName": CODE_CHANNEL,
                "InputMode": "File",
                "DataSource": {
                    "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": source, "S3DataDistributionType": "FullyReplicated"}
                },
            }
        )
    resource: dict[str, Any] = {
        "InstanceType": spec.instance_type,
        "InstanceCount": spec.instance_count,
        "VolumeSizeInGB": spec.volume_size_gb,
    }
    if not plan.instance.local_nvme:  # rejected for instances whose storage is local NVMe
        resource["VolumeKmsKeyId"] = stack.key_arn
    if spec.warm_pool:
        resource["KeepAlivePeriodInSeconds"] = spec.warm_pool
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": spec.max_runtime}
    if spec.spot.enabled:
        stopping["MaxWaitTimeInSeconds"] = spec.spot.max_wait or spec.max_runtime
    environment = {**efa_environment(plan.instance), **spec.environment}
    request: dict[str, Any] = {
        "TrainingJobName": job_name,
        "AlgorithmSpecification": {
            "TrainingImage": image_uri(spec, plan, stack.region),
            "TrainingInputMode": "File",
            "MetricDefinitions": metric_definitions(),
            "EnableSageMakerMetricsTimeSeries": True,
        },
        "RoleArn": stack.role_arn,
        "HyperParameters": script_mode_hyperparameters(spec, plan, stack, job_name, trial),
        "OutputDataConfig": {"S3OutputPath": f"{artifacts}/{MODELS_PREFIX}", "KmsKeyId": stack.key_arn},
        "ResourceConfig": resource,
        "VpcConfig": {"SecurityGroupIds": list(stack.security_group_ids), "Subnets": list(stack.subnet_ids)},
        "StoppingCondition": stopping,
        "EnableNetworkIsolation": spec.network_isolation,
        "EnableInterContainerTrafficEncryption": stack.inter_container_encryption
        if spec.inter_container_encryption is None
        else spec.inter_container_encryption,
        "EnableManagedSpotTraining": spec.spot.enabled,
        "Tags": [{"Key": k, "Value": v} for k, v in spec.tags.items()]
        + [
            {"Key": "trainstack:spec", "Value": spec.name},
            {"Key": "trainstack:lineage", "Value": lineage_id},
            {"Key": "trainstack:strategy", "Value": plan.strategy},
        ],
    }
    if inputs:
        request["InputDataConfig"] = inputs
    if environment:
        request["Environment"] = environment
    if spec.checkpoints:
        request["CheckpointConfig"] = {
            "S3Uri": f"{artifacts}/{CHECKPOINTS_PREFIX}{spec.name}/{lineage_id}/",
            "LocalPath": CHECKPOINT_LOCAL_PATH,
        }
    if spec.tensorboard:
        request["TensorBoardOutputConfig"] = {
            "LocalPath": TENSORBOARD_LOCAL_PATH,
            "S3OutputPath": f"{artifacts}/{TENSORBOARD_PREFIX}{job_name}/",
        }
    if spec.retry_attempts:
        request["RetryStrategy"] = {"MaximumRetryAttempts": spec.retry_attempts}
    if not spec.profiler:  # the profiler's rules launch processing jobs with their own quota
        request["ProfilerConfig"] = {"DisableProfiler": True}
    return request


class InvalidRequestError(ValueError):
    """The built request would be rejected by the API; a bug in the builder, never the user's."""


def validate_request(request: dict[str, Any]) -> None:
    """botocore's own CreateTrainingJob model (types, required keys, minimums), plus the checks it
    skips: the name pattern, maximum lengths and hyperparameter limits."""
    import botocore.session
    from botocore.validate import ParamValidator

    service = botocore.session.get_session().get_service_model("sagemaker")
    report = ParamValidator().validate(request, service.operation_model("CreateTrainingJob").input_shape)
    problems = [report.generate_report()] if report.has_errors() else []
    if not TRAINING_JOB_NAME_PATTERN.match(request["TrainingJobName"]):
        problems.append(f"TrainingJobName {request['TrainingJobName']!r} breaks {TRAINING_JOB_NAME_PATTERN.pattern}")
    hyperparameters = request.get("HyperParameters", {})
    if len(hyperparameters) > 100:
        problems.append(f"{len(hyperparameters)} hyperparameters; the limit is 100")
    problems += [f"hyperparameter {k!r} is not a string" for k, v in hyperparameters.items() if not isinstance(v, str)]
    too_long = [k for k, v in hyperparameters.items() if len(k) > 256 or (isinstance(v, str) and len(v) > 2500)]
    problems += [f"hyperparameter {k!r} is longer than the API allows (key 256, value 2500)" for k in too_long]
    if problems:
        raise InvalidRequestError("; ".join(problems))
