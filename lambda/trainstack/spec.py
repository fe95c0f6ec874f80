"""The job spec: the one document users write. Pure data and parsing; rules live in rules.py.

Accepts YAML or JSON. `distribution` takes the SageMaker Python SDK's dict unchanged (the same
keys the estimator takes); `strategy` is the shorthand. Durations are human strings.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainstack.durations import parse_duration

Strategy = Literal["ddp", "smddp", "smp", "fsdp"]
HyperparameterValue = str | int | float | bool | list[Any] | dict[str, Any]
SPEC_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$")


class SpecError(ValueError):
    """The spec is not valid; `problems` holds one message per field."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Channel(_Strict):
    s3_uri: str = Field(description="s3://bucket/prefix/ of the channel's objects")
    mode: Literal["File", "FastFile", "Pipe"] = "FastFile"
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = "FullyReplicated"

    @field_validator("s3_uri")
    @classmethod
    def _s3(cls, value: str) -> str:
        if not re.match(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", value):
            raise ValueError("must be an s3://bucket/prefix URI")
        return value


class Spot(_Strict):
    enabled: bool = False
    max_wait: int | None = Field(default=None, description="duration, e.g. 48h; at least max_runtime")

    _duration = field_validator("max_wait", mode="before")(lambda cls, v: None if v is None else parse_duration(v))


class Sweep(_Strict):
    max_concurrency: int = Field(default=4, ge=1, le=100)
    grid: dict[str, list[HyperparameterValue]] | None = None
    trials: list[dict[str, HyperparameterValue]] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Sweep:
        if (self.grid is None) == (self.trials is None):
            raise ValueError("give exactly one of grid (every combination) or trials (a list of hyperparameter sets)")
        return self


class JobSpec(_Strict):
    name: str = Field(min_length=1, max_length=32, description="prefix of the training job name")
    entry_point: str = "train.py"
    source_dir: str | None = Field(default=None, description="s3:// URI of a sourcedir.tar.gz; default: the stack's training/")
    framework_version: str | None = Field(
        default=None, description='PyTorch version or the SDK\'s alias ("2.1"); default: the newest the strategy supports'
    )
    py_version: str | None = Field(default=None, description="default: the Python the framework image is built with")
    image: str | None = Field(default=None, description="a full image URI instead of the framework image")
    instance_type: str
    instance_count: int = Field(default=1, ge=1, le=512)
    volume_size_gb: int = Field(default=100, ge=1, le=16384)
    distribution: dict[str, Any] | None = None
    strategy: Strategy | None = None
    hyperparameters: dict[str, HyperparameterValue] = Field(default_factory=dict)
    inputs: dict[str, Channel] = Field(default_factory=dict)
    spot: Spot = Field(default_factory=Spot)
    checkpoints: bool = True
    warm_pool: int | None = Field(default=None, description="keep-alive duration after the job, e.g. 30m")
    max_runtime: int = Field(default=86400, description="duration, e.g. 24h")
    retry_attempts: int = Field(default=0, ge=0, le=30, description="SageMaker retries (InternalServerError only)")
    environment: dict[str, str] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)
    network_isolation: bool = False
    inter_container_encryption: bool | None = Field(default=None, description="default: the stack's setting")
    tensorboard: bool = True
    profiler: bool = False
    sweep: Sweep | None = None

    _durations = field_validator("warm_pool", "max_runtime", mode="before")(
        lambda cls, v: None if v is None else parse_duration(v)
    )

    @field_validator("framework_version", mode="before")
    @classmethod
    def _quoted_version(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise ValueError(f'quote it ("{value}"): YAML reads an unquoted version as a number, and 2.10 as 2.1')
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SPEC_NAME.match(value):
            raise ValueError("letters, digits and hyphens, starting and ending with a letter or digit")
        return value

    @model_validator(mode="after")
    def _strategy_or_distribution(self) -> JobSpec:
        if self.strategy is not None and self.distribution is not None:
            raise ValueError("give either strategy (shorthand) or distribution (the SDK dict), not both")
        return self


def load_spec(text: str, source: str = "spec") -> JobSpec:
    """Parse YAML or JSON text into a JobSpec, or raise SpecError naming each bad field."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SpecError([f"{source}: not valid YAML or JSON ({error})"]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{source}: a job spec is a mapping of fields, got {type(data).__name__}"])
    return parse_spec(data)


def parse_spec(data: dict[str, Any]) -> JobSpec:
    try:
        return JobSpec.model_validate(data)
    except ValidationError as error:
        raise SpecError([_describe(problem) for problem in error.errors()]) from None


def _describe(problem: dict[str, Any]) -> str:
    field = ".".join(str(part) for part in problem["loc"]) or "spec"
    if problem["type"] == "extra_forbidden":
        return f"{field}: unknown field; see `trainstack schema` for the fields a job spec takes"
    if problem["type"] == "missing":
        return f"{field}: required"
    value = json.dumps(problem.get("input"), default=str)
    message = problem["msg"].removeprefix("Value error, ")
    return f"{field} = {value}: {message}"


def json_schema() -> dict[str, Any]:
    return JobSpec.model_json_schema()
