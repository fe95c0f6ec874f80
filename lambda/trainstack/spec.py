"""The job spec: the one document users write. Pure data and parsing; rules live in the rules package.

Accepts YAML or JSON. `distribution` takes the SageMaker Python SDK's dict unchanged (the same
keys the estimator takes); `strategy` is the shorthand. Durations are human strings. SDK 3.x
ModelTrainer's names (`compute`, `distributed`...) are read as these fields (model_trainer_names.py).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainstack.durations import parse_duration
from trainstack.model_trainer_names import estimator_names
from trainstack.service_jobs import PRIORITY_MAX, PRIORITY_MIN, SHARE_IDENTIFIER, SHARE_IDENTIFIER_MAX
from trainstack_contract.health_rules import ACTIONS, RULES, parse_health

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
    # Empty collections are refused here: a sweep of no trials has nothing to run or plan.
    grid: dict[str, Annotated[list[HyperparameterValue], Field(min_length=1)]] | None = Field(default=None, min_length=1)
    trials: list[dict[str, HyperparameterValue]] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_source(self) -> Sweep:
        if (self.grid is None) == (self.trials is None):
            raise ValueError("give exactly one of grid (every combination) or trials (a list of hyperparameter sets)")
        return self


class ModelShape(_Strict):
    """For a job running its own script: what the planner needs to know of the model and its batch.
    The built-in script's hyperparameters say it (`model`, `micro_batch_size`...), but for a Hugging
    Face model (`hf:`), whose config.json only the container reads: then its shape is given here, and
    Validate requires the `seq_len` hyperparameter to equal this seq_len (the container would
    otherwise train at the config's max_position_embeddings)."""

    layers: int = Field(ge=1, description="transformer layers")
    hidden: int = Field(ge=1, description="model width (d_model)")
    heads: int | None = Field(default=None, ge=1, description="attention heads; default hidden / 128")
    kv_heads: int | None = Field(default=None, ge=1, description="key/value heads (grouped-query attention); default heads")
    vocab: int = Field(default=32000, ge=1)
    ffn_hidden: int | None = Field(default=None, ge=1, description="MLP width; default 4 x hidden (gelu) or 8/3 x hidden (gated)")
    gated_mlp: bool = Field(default=True, description="SwiGLU-style MLP (Llama, Mistral) rather than GELU (GPT)")
    tied_embeddings: bool = False
    parameters: float | None = Field(
        default=None, gt=0, description="the exact parameter count, when it differs from the shape's"
    )
    seq_len: int = Field(ge=1, description="tokens per sequence")
    micro_batch_size: int = Field(default=1, ge=1, description="sequences per GPU per forward pass")
    grad_accum: int = Field(default=1, ge=1)
    precision: Literal["fp32", "bf16", "fp16"] = "bf16"
    activation_checkpointing: bool = False
    activation_offloading: bool = False
    optimizer: Literal["adamw", "sgd"] = "adamw"
    zero1: bool = Field(default=False, description="ddp/smddp: optimizer state sharded across data-parallel ranks")
    reduce_every_micro_step: bool = Field(
        default=False, description="fsdp/smp with grad_accum > 1: gradients reduce-scattered every micro-step (no full copy kept)"
    )
    steps: int | None = Field(default=None, ge=1, description="optimizer steps of the run, for its expected duration and cost")


def _rule_summary() -> str:
    return "; ".join(
        f"{rule.name} ({', '.join(f'{k}={v:g}' for k, v in rule.parameters.items()) or 'no parameters'}; {rule.action}): "
        f"trips when {rule.trips_when}"
        for rule in RULES.values()
    )


class Health(_Strict):
    """The built-in training script's health rules (training/trainstack_contract/health_rules.py)."""

    rules: dict[str, dict[str, Any] | bool] = Field(
        default_factory=dict,
        description=f"per rule: parameters and action ({', '.join(ACTIONS)}), or false to turn it off. {_rule_summary()}",
    )
    histogram_every: int = Field(default=0, ge=0, description="steps between weight and gradient histograms in TensorBoard")

    @field_validator("rules")
    @classmethod
    def _known(cls, value: dict[str, Any]) -> dict[str, Any]:
        parse_health(json.dumps(value))  # its ValueError names the rule, the key and the fix
        return value


class Restarts(_Strict):
    """Re-creating a trial's job after a failure that is not the user's (trainstack/failures.py): the
    same checkpoint location, so the new job resumes from the newest complete checkpoint."""

    max: int = Field(default=3, ge=0, le=20, description="restarts per trial; 0 turns them off")
    on: list[Literal["infrastructure", "unknown"]] = Field(
        default_factory=lambda: ["infrastructure"],
        description="which failures restart: infrastructure (hangs, NCCL/EFA, GPU, SageMaker internal or instance "
        "health), and unknown (matched by no rule); the user's own (config, code, out of memory, a health rule) never",
    )
    exit_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(
        default_factory=list, description="your script's exit codes that mean 'transient, restart me' (they spend max too)"
    )
    within: int = Field(default=48 * 3600, description="duration from the run's start in which a restart may begin, e.g. 48h")

    _duration = field_validator("within", mode="before")(lambda cls, v: parse_duration(v))


# `tracking.mlflow: stack`: the tracking server the stack was deployed with (-c mlflow_tracking_server_arn).
STACK_TRACKING_SERVER = "stack"
# `image: project`: the stack's project image (training/Dockerfile on the region's newest PyTorch
# training image, `-c build_training_image=true`), whose URI the stack knows and the spec need not.
PROJECT_IMAGE = "project"


class Tracking(_Strict):
    """Experiment tracking in SageMaker managed MLflow (CreateTrainingJob's MlflowConfig): one MLflow
    run per training job, named as the job (trainstack_contract/tracking.py)."""

    mlflow: str = Field(
        default=STACK_TRACKING_SERVER,
        description="\"stack\" (the stack's tracking server, -c mlflow_tracking_server_arn) or that server's ARN "
        "(an mlflow-tracking-server/ or mlflow-app/ ARN): the one server the execution role may log to",
    )
    experiment: str | None = Field(default=None, description="the MLflow experiment; default: the spec's name")


class Queue(_Strict):
    """Submit the job through the stack's team queue (AWS Batch service jobs for SageMaker Training,
    `-c queue=true`) instead of creating it directly: the queue holds it until its team's share of the
    instance cap is free, ordering teams by fair share and a team's jobs by priority."""

    share: str | None = Field(
        default=None, max_length=SHARE_IDENTIFIER_MAX, description="the team (a fair-share identifier of the stack's queue); "
        "default: the stack's default share"
    )  # fmt: skip
    priority: int = Field(
        default=0, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="0-9999: within the share, higher priorities start first"
    )
    max_wait: int = Field(
        default=72 * 3600, description="duration, e.g. 3d, that the run's deadline allows each attempt to wait in the "
        "queue (nothing in AWS bounds a wait behind other jobs); a run still going past its deadline fails and its "
        "service jobs are terminated"
    )  # fmt: skip

    _duration = field_validator("max_wait", mode="before")(lambda cls, v: parse_duration(v))

    @field_validator("share")
    @classmethod
    def _share(cls, value: str | None) -> str | None:
        if value is not None and not SHARE_IDENTIFIER.match(value):
            raise ValueError("letters and digits only (a fair-share identifier)")
        return value


class Budget(_Strict):
    max_usd: float = Field(gt=0, description="refuse a run whose worst case (every retry, every trial) costs more")


class JobSpec(_Strict):
    name: str = Field(min_length=1, max_length=32, description="prefix of the training job name")
    entry_point: str = "train.py"
    source_dir: str | None = Field(default=None, description="s3:// URI of a sourcedir.tar.gz; default: the stack's training/")
    framework_version: str | None = Field(
        default=None, description='PyTorch version or the SDK\'s alias ("2.1"); default: the newest the strategy supports'
    )
    py_version: str | None = Field(default=None, description="default: the Python the framework image is built with")
    image: str | None = Field(
        default=None, description="a full image URI instead of the framework image, or `project`: the stack's project image"
    )
    instance_type: str = Field(default="", description="the instance type; or give instance_types")
    instance_types: list[str] | None = Field(
        default=None,
        min_length=1,
        description="capacity fallback in priority order (ResourceConfig.InstancePreferences, on-demand or training plan only)",
    )
    training_plan_arn: str | None = Field(default=None, description="a SageMaker training plan's ARN: its reserved capacity")
    max_pending: int | None = Field(default=None, description="duration the job may wait for capacity, e.g. 2h (30m to 28d)")
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
    restarts: Restarts = Field(default_factory=Restarts)
    mttf: int | None = Field(
        default=None,
        description="duration, e.g. 72h: the job's mean time to failure, for the built-in script's checkpoint_every "
        "auto and the plan's goodput; default: the published per-GPU failure rate over the job's GPUs (trainstack plan)",
    )
    infra_check: bool | None = Field(
        default=None,
        description="SageMaker's check of instance hardware and cluster network before training (InfraCheckConfig); "
        "default: on for jobs of more than one accelerated instance",
    )
    environment: dict[str, str] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)
    network_isolation: bool = False
    inter_container_encryption: bool | None = Field(default=None, description="default: the stack's setting")
    tensorboard: bool = True
    profiler: bool = False
    sweep: Sweep | None = None
    model: ModelShape | None = Field(
        default=None,
        description="your own script's model, for the plan; with the built-in script, the shape of its hf: model "
        "(its batch and memory options come from the hyperparameters)",
    )
    budget: Budget | None = None
    health: Health | None = Field(
        default=None, description="training health rules of the built-in script (every rule at its defaults)"
    )
    tracking: Tracking | None = Field(
        default=None, description="log each training job as an MLflow run in SageMaker managed MLflow (MlflowConfig)"
    )
    queue: Queue | None = Field(
        default=None, description="submit through the stack's team queue (AWS Batch) instead of creating the job directly"
    )
    force: bool = Field(default=False, description="launch even when the plan says it does not fit or is over budget")

    _durations = field_validator("warm_pool", "max_runtime", "max_pending", "mttf", mode="before")(
        lambda cls, v: None if v is None else parse_duration(v)
    )

    @field_validator("mttf")
    @classmethod
    def _positive_mttf(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError("a mean time to failure is a positive duration, e.g. 72h")
        return value

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

    @model_validator(mode="before")
    @classmethod
    def _first_preference(cls, data: Any) -> Any:
        """With instance_types, instance_type is the first preference (what rules and plans resolve)."""
        if isinstance(data, dict) and data.get("instance_types") and isinstance(data["instance_types"], list):
            first = data["instance_types"][0]
            if data.get("instance_type") not in (None, "", first):
                raise ValueError("give instance_type (one type) or instance_types (a fallback list), not both")
            return {**data, "instance_type": first}
        return data

    # Defined after _first_preference so that pydantic, which runs the last-defined "before" validator
    # first, reads ModelTrainer's compute.instance_preferences as instance_types before it.
    @model_validator(mode="before")
    @classmethod
    def _model_trainer_names(cls, data: Any) -> Any:
        """SDK 3.x ModelTrainer's names (source_code, compute, distributed, stopping_condition,
        input_data_config, checkpoint_config) as the spec's own fields (trainstack/model_trainer_names.py)."""
        return estimator_names(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _strategy_or_distribution(self) -> JobSpec:
        if self.strategy is not None and self.distribution is not None:
            raise ValueError("give either strategy (shorthand) or distribution (the SDK dict), not both")
        if not self.instance_type:
            raise ValueError("instance_type: required (or instance_types, a fallback list in priority order)")
        return self

    @property
    def capacity_options(self) -> list[str]:
        """The instance types the job may run on, in priority order."""
        return list(self.instance_types or [self.instance_type])

    @property
    def script_hyperparameters(self) -> dict[str, HyperparameterValue]:
        """What the script receives besides trainstack's own: the spec's hyperparameters and the
        health block, in the names the built-in script's config reads."""
        values: dict[str, HyperparameterValue] = dict(self.hyperparameters)
        if self.health is not None:
            values["health"] = json.dumps(self.health.rules, sort_keys=True)
            if self.health.histogram_every:
                values["histogram_every"] = self.health.histogram_every
        return values

    @property
    def tracking_experiment(self) -> str | None:
        """The MLflow experiment the job's runs go to; None without tracking."""
        if self.tracking is None:
            return None
        return self.name if self.tracking.experiment is None else self.tracking.experiment

    @property
    def uses_builtin_script(self) -> bool:
        """trainstack's own training code runs: the stack's training/ source (no source_dir), on a
        framework image or on an image of your own (the project image from `make image`); its
        contract is checked either way, the image's runtime only where the facts know it."""
        return self.source_dir is None


def load_spec(text: str | bytes, source: str = "spec") -> JobSpec:
    """Parse YAML or JSON text into a JobSpec, or raise SpecError naming each bad field."""
    return parse_spec(spec_data(text, source))


def spec_data(text: str | bytes, source: str = "spec") -> dict[str, Any]:
    """The fields a spec's YAML or JSON text holds, or SpecError in one line naming `source`. Every
    reader of spec text (the CLI, the Validate step) reads it here, as YAML 1.2 (trainstack/yaml12.py)."""
    # Imported on the call: Create (and Validate with an inline spec) parse dicts, and never pay PyYAML's import.
    from trainstack import yaml12

    try:
        data = yaml12.load(text)
    except yaml12.YamlError as error:
        raise SpecError([f"{source}: not valid YAML or JSON ({error})"]) from None
    if not isinstance(data, dict):
        got = "nothing" if data is None else type(data).__name__
        raise SpecError([f"{source}: a job spec is a mapping of fields (name: ..., instance_type: ...), got {got}"])
    return data


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
    if problem["type"] == "too_short" and problem["loc"] and problem["loc"][0] == "sweep":
        value = json.dumps(problem.get("input"), default=str)
        return f"{field} = {value}: a sweep needs at least one trial and every grid entry one value; give them, or remove sweep"
    message = problem["msg"].removeprefix("Value error, ")
    if not problem["loc"]:  # a rule across fields names them itself; the whole spec is no help
        return message
    value = json.dumps(problem.get("input"), default=str)
    return f"{field} = {value}: {message}"


def json_schema() -> dict[str, Any]:
    return JobSpec.model_json_schema()
