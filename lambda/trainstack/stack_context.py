"""What a deployed stack gives every training job, and the one table of where each value travels.

The same values reach the code four ways: the CDK stack publishes them as CloudFormation outputs
and writes them into the Lambdas' environment; the CLI reads them back from `cdk deploy
--outputs-file` (or DescribeStacks); the local twin publishes its emulated stack's outputs the same
way. Each field's output name and environment variable are written once, in `FIELDS`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainstack.layout import DEFAULT_TEAM
from trainstack.naming import DEFAULT_NAME_PREFIX


@dataclass(frozen=True)
class StackContext:
    """The deployed stack's values a CreateTrainingJob request needs."""

    region: str
    role_arn: str
    artifacts_bucket: str
    key_arn: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    source_s3_uri: str
    entry_s3_uri: str = ""  # the container entry (PID 1) that forwards stop signals; "" for none
    inter_container_encryption: bool = False
    name_prefix: str = DEFAULT_NAME_PREFIX
    mlflow_tracking_server_arn: str = ""  # the MLflow tracking server (or App) jobs may log to; "" for none
    # The team queue (AWS Batch service jobs for SageMaker Training), for specs with `queue`; "" for none.
    job_queue_arn: str = ""
    queue_shares: tuple[str, ...] = ()  # its fair-share identifiers (the teams)
    queue_default_share: str = ""  # a spec's share when it names none
    queue_max_instances: int = 0  # the service environment's cap, in instances
    # The project image (training/Dockerfile built on the region's newest PyTorch training image) that
    # `image: project` names; "" for a stack without one (-c build_training_image=true builds it).
    project_image_uri: str = ""
    # Each team's execution role, "team=arn" (layout.py: a team is a boundary); the first is the default
    # team's. A stack from before teams has none: its one role is the default team's.
    team_role_arns: tuple[str, ...] = ()
    team_budgets: tuple[str, ...] = ()  # "team=usd": a team's monthly budget (-c queue_budgets); none for most

    def budget_of(self, team: str) -> float | None:
        """The team's monthly budget in USD; None where it has none."""
        budgets = dict(pair.split("=", 1) for pair in self.team_budgets)
        return float(budgets[team]) if team in budgets else None

    @property
    def roles_by_team(self) -> dict[str, str]:
        if not self.team_role_arns:  # a stack from before teams: every share (or the one team) runs as its one role
            return dict.fromkeys(self.queue_shares or (self.queue_default_share or DEFAULT_TEAM,), self.role_arn)
        return dict(pair.split("=", 1) for pair in self.team_role_arns)

    @property
    def teams(self) -> tuple[str, ...]:
        return tuple(self.roles_by_team)

    @property
    def default_team(self) -> str:
        """The team of a spec uploaded directly under jobs/ (and of a direct start naming none)."""
        return self.queue_default_share or self.teams[0]

    def role_for(self, team: str) -> str:
        """The execution role of the team's jobs."""
        return self.roles_by_team[team]

    def to_outputs(self) -> dict[str, str]:
        """CloudFormation output name -> value (values may be CDK tokens at synth time)."""
        return {spec.output: text for spec, text in self._written()}

    def to_variables(self) -> dict[str, str]:
        """The Lambda environment's stack variables (Lambda sets AWS_REGION itself)."""
        return {spec.variable: text for spec, text in self._written()}

    def _written(self) -> list[tuple[_Field, str]]:
        """Each field as text, but an optional one left empty is left out (reading it back gives the
        same default): a stack without a tracking server publishes no empty output or variable for it."""
        written = [(spec, spec.encode(getattr(self, spec.name))) for spec in FIELDS]
        return [(spec, text) for spec, text in written if text or spec.required]

    @classmethod
    def from_outputs(cls, outputs: Mapping[str, str], region: str) -> StackContext:
        """From a stack's outputs; an output missing from an older stack takes the field's default."""
        return cls._decode(region, {spec.name: outputs.get(spec.output) for spec in FIELDS})

    @classmethod
    def from_variables(cls, variables: Mapping[str, str]) -> StackContext:
        return cls._decode(variables["AWS_REGION"], {spec.name: variables.get(spec.variable) for spec in FIELDS})

    @classmethod
    def from_outputs_file(cls, path: Path, region: str, stack_name: str | None = None) -> StackContext:
        """Read the file `cdk deploy --outputs-file` writes: {stack name: {output: value}}."""
        return cls.from_outputs(read_outputs_file(path, stack_name), region)

    @classmethod
    def _decode(cls, region: str, raw: Mapping[str, str | None]) -> StackContext:
        values: dict[str, object] = {"region": region}
        for spec in FIELDS:
            text = raw[spec.name]
            if text is None:
                if spec.required:
                    raise KeyError(f"stack value {spec.output} ({spec.variable}) is missing")
                continue
            values[spec.name] = spec.decode(text)
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Field:
    """One StackContext field: its output name, its environment variable, how it is written as text."""

    name: str
    output: str
    variable: str
    kind: str = "text"  # text | list (comma-separated) | flag ("true"/"false") | int
    required: bool = True

    def encode(self, value: object) -> str:
        if self.kind == "list":
            return ",".join(value)  # type: ignore[arg-type]
        if self.kind == "flag":
            return str(value).lower()
        if self.kind == "int":
            return str(value) if value else ""  # 0: unset, so left out as an empty text is
        return str(value)

    def decode(self, text: str) -> object:
        if self.kind == "list":
            return tuple(part for part in text.split(",") if part)
        if self.kind == "flag":
            return text.strip().lower() == "true"
        if self.kind == "int":
            return int(text)
        return text


FIELDS = (
    _Field("role_arn", "ExecutionRoleArn", "EXECUTION_ROLE_ARN"),
    _Field("artifacts_bucket", "ArtifactsBucketName", "ARTIFACTS_BUCKET"),
    _Field("key_arn", "KeyArn", "KEY_ARN"),
    _Field("subnet_ids", "TrainingSubnetIds", "SUBNET_IDS", kind="list"),
    _Field("security_group_ids", "SecurityGroupId", "SECURITY_GROUP_ID", kind="list"),
    _Field("source_s3_uri", "SourceS3Uri", "SOURCE_S3_URI"),
    _Field("entry_s3_uri", "ContainerEntryS3Uri", "CONTAINER_ENTRY_S3_URI", required=False),
    _Field("inter_container_encryption", "InterContainerEncryption", "INTER_CONTAINER_ENCRYPTION", kind="flag", required=False),
    _Field("name_prefix", "NamePrefix", "NAME_PREFIX", required=False),
    _Field("mlflow_tracking_server_arn", "MlflowTrackingServerArn", "MLFLOW_TRACKING_SERVER_ARN", required=False),
    _Field("job_queue_arn", "JobQueueArn", "JOB_QUEUE_ARN", required=False),
    _Field("queue_shares", "QueueShares", "QUEUE_SHARES", kind="list", required=False),
    _Field("queue_default_share", "QueueDefaultShare", "QUEUE_DEFAULT_SHARE", required=False),
    _Field("queue_max_instances", "QueueMaxInstances", "QUEUE_MAX_INSTANCES", kind="int", required=False),
    _Field("project_image_uri", "TrainingImageUri", "PROJECT_IMAGE_URI", required=False),
    _Field("team_role_arns", "TeamExecutionRoleArns", "TEAM_ROLE_ARNS", kind="list", required=False),
    _Field("team_budgets", "TeamMonthlyBudgets", "TEAM_BUDGETS", kind="list", required=False),
)


# Stack outputs beside the job context's: the dead-letter queue that `trainstack redrive` drains, and
# the Stop function its Lambda dead letters go back to.
DEAD_LETTER_OUTPUT = "TriggerDeadLetterQueueUrl"
STOP_FUNCTION_OUTPUT = "StopFunctionArn"


def read_outputs_file(path: Path, stack_name: str | None = None) -> dict[str, str]:
    """One stack's outputs from the file `cdk deploy --outputs-file` writes: {stack name: {output: value}}.
    OSError where the file cannot be read; ValueError, naming the file and the fix, where it holds no such outputs."""
    fix = "pass the file `cdk deploy --outputs-file` wrote"
    try:
        stacks = json.loads(path.read_bytes())
    except ValueError as error:  # not JSON, or not text
        raise ValueError(f"{path}: not JSON ({error}); {fix}") from None
    if not (isinstance(stacks, dict) and stacks and all(_outputs(values) for values in stacks.values())):
        raise ValueError(f"{path}: not the outputs of a stack ({{stack name: {{output name: value}}}}); {fix}")
    if stack_name is None and len(stacks) != 1:
        raise ValueError(f"{path} holds the outputs of {', '.join(sorted(stacks))}; name the stack (--stack)")
    if stack_name is not None and stack_name not in stacks:
        raise ValueError(f"{path} holds no stack {stack_name}, only {', '.join(sorted(stacks))}; name one of them (--stack)")
    return stacks[stack_name] if stack_name else next(iter(stacks.values()))


def _outputs(values: object) -> bool:
    return isinstance(values, dict) and all(isinstance(value, str) for value in values.values())
