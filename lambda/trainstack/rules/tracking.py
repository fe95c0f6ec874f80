"""Experiment tracking (`tracking`): the MLflow server a job logs to must be a SageMaker managed MLflow
ARN, in the region the job runs in (its isolated subnets reach MLflow only through that region's VPC
endpoint), and the stack's own server, the only one its execution role may log to (least privilege:
the role is granted the documented actions on that one ARN, stacks/roles.py).

Where the stack is not known (the CLI validating offline), the ARN's shape and region are checked,
and which server it is waits for Validate, which knows the stack.
"""

from __future__ import annotations

from trainstack.api_model import matches_pattern, member_metadata
from trainstack.request import TRACKING_VARIABLES, tracking_server_arn
from trainstack.rules.problems import Problem
from trainstack.spec import STACK_TRACKING_SERVER, JobSpec
from trainstack.stack_context import StackContext
from trainstack_contract.tracking import MLFLOW_APP, MLFLOW_TRACKING_SERVER, resource_type

STACK_SETTING = "mlflow_tracking_server_arn"  # the stack setting (-c) that names the stack's server


def is_mlflow_arn(arn: str) -> bool:
    """A tracking server's or MLflow App's ARN: MlflowConfig's own pattern, which admits any
    `mlflow-*/` resource, narrowed to the two kinds there are (the stack grants per kind)."""
    most = member_metadata("MlflowConfig", "MlflowResourceArn")["max"]
    if len(arn) > most or not matches_pattern("MlflowConfig", "MlflowResourceArn", arn):
        return False
    return resource_type(arn) in (MLFLOW_APP, MLFLOW_TRACKING_SERVER)


def arn_region(arn: str) -> str:
    return arn.split(":")[3]


def tracking_problems(spec: JobSpec, stack: StackContext | None = None, region: str | None = None) -> list[Problem]:
    """With `stack`, the server must be the stack's; without it, only the ARN's shape and its region
    (the stack's, else `region`) are checked."""
    if spec.tracking is None:
        return []
    problems = _experiment_problems(spec) + _environment_problems(spec)
    if spec.network_isolation:
        problems.append(
            Problem(
                "network_isolation",
                True,
                "an isolated container makes no network call, so its job could not log to MLflow",
                "turn network_isolation off, or remove tracking",
            )
        )
    return problems + _server_problems(spec, stack, stack.region if stack is not None else region)


def _server_problems(spec: JobSpec, stack: StackContext | None, job_region: str | None) -> list[Problem]:
    assert spec.tracking is not None
    named = spec.tracking.mlflow
    if named == STACK_TRACKING_SERVER:
        if stack is None:
            return []
        server = tracking_server_arn(spec, stack)
        if not server:
            return [
                Problem(
                    "tracking.mlflow",
                    named,
                    "the stack has no MLflow tracking server",
                    f"redeploy it with -c {STACK_SETTING}=<the server's ARN>, or remove tracking",
                )
            ]
        if job_region and arn_region(server) != job_region:
            return [
                Problem(
                    "tracking.mlflow",
                    named,
                    f"the stack's tracking server ({server}) is in {arn_region(server)}, and its jobs run in {job_region}, "
                    "whose VPC endpoint is the only way they reach MLflow",
                    f"redeploy the stack with -c {STACK_SETTING}=<a server in {job_region}>",
                )
            ]
        return []
    if not is_mlflow_arn(named):
        return [
            Problem(
                "tracking.mlflow",
                named,
                "not a SageMaker managed MLflow ARN (arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name> "
                f"or ...:{MLFLOW_APP}/<id>)",
                f'write "{STACK_TRACKING_SERVER}" for the stack\'s tracking server, or copy its ARN',
            )
        ]
    if job_region and arn_region(named) != job_region:
        return [
            Problem(
                "tracking.mlflow",
                named,
                f"the server is in {arn_region(named) or 'no region'}, and the job runs in {job_region}, whose VPC endpoint "
                "is the only way it reaches MLflow",
                f'use a tracking server in {job_region}: the stack\'s ("{STACK_TRACKING_SERVER}"), the one its jobs may log to',
            )
        ]
    if stack is not None and named != stack.mlflow_tracking_server_arn:
        theirs = f" ({stack.mlflow_tracking_server_arn})" if stack.mlflow_tracking_server_arn else ", and the stack has none"
        return [
            Problem(
                "tracking.mlflow",
                named,
                f"the execution role may log only to the stack's tracking server{theirs}",
                f'write "{STACK_TRACKING_SERVER}", or redeploy the stack with -c {STACK_SETTING}=<this ARN>',
            )
        ]
    return []


def _experiment_problems(spec: JobSpec) -> list[Problem]:
    assert spec.tracking is not None
    experiment = spec.tracking.experiment
    metadata = member_metadata("MlflowConfig", "MlflowExperimentName")
    least, most = metadata["min"], metadata["max"]
    if experiment is None or least <= len(experiment) <= most:
        return []
    shown = experiment if len(experiment) <= 40 else f"{experiment[:40]}..."
    return [
        Problem(
            "tracking.experiment",
            shown,
            f"MlflowConfig takes experiment names of {least} to {most} characters, this one has {len(experiment)}",
            "shorten it, or leave it out for the spec's name",
        )
    ]


def _environment_problems(spec: JobSpec) -> list[Problem]:
    """tracking sets these variables; one the spec sets too would be overwritten without a word."""
    return [
        Problem(
            f"environment.{name}",
            spec.environment[name],
            "tracking sets it for the job",
            "remove it: tracking.mlflow and tracking.experiment say where the job's runs go",
        )
        for name in TRACKING_VARIABLES
        if name in spec.environment
    ]
