"""The training run's typed configuration: parsed once, validated, logged once as JSON.

Torch-free on purpose: the pipeline's Validate step parses a job's hyperparameters with this very
module (shipped in the Lambda asset) before anything is billed.

Hyperparameters arrive as `--name value` arguments (SageMaker script mode passes every
hyperparameter that way, as strings) and as the JSON object in `SM_HPS`; arguments win. Canonical
names use underscores; `--micro-batch-size` is accepted as a spelling of `--micro_batch_size`.
"""

from __future__ import annotations

import json
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from trainstack_contract.checkpoint_cadence import AUTO
from trainstack_contract.health_rules import RuleSetting, parse_health
from trainstack_contract.model_sizes import HF_PREFIX, MODEL_NAMES, is_hf_model, is_known_model

STRATEGIES = ("ddp", "smddp", "smp", "fsdp")
PRECISIONS = ("fp32", "bf16", "fp16")
# A channel's S3DistributionType: every host gets every object, or each host about 1/N of them.
DATA_DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")


class ConfigError(ValueError):
    """A hyperparameter is unknown, malformed or inconsistent; the message names it and the fix."""


@dataclass(frozen=True)
class TrainConfig:
    """Every knob of a training run. Paths default to the SageMaker container layout."""

    strategy: str = "ddp"
    model: str = "gpt-tiny"
    max_steps: int = 100
    seed: int = 0
    micro_batch_size: int = 8
    grad_accum: int = 1
    seq_len: int = 0  # 0: the model's own context length
    lr: float = 3e-4
    min_lr: float = 3e-5
    warmup_steps: int = 10
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    precision: str = "fp32"
    activation_checkpointing: bool = False
    activation_offloading: bool = False
    zero1: bool = False
    compile: bool = False  # torch.compile each transformer block (off by default: compiling on CPU costs more than it saves)
    # AdamW's fused kernel (one launch per step instead of one per tensor; it also skips a nonfinite
    # step on the device, so the gradient norm needs no host read per step). None: on CUDA only.
    fused_adamw: bool | None = None
    # DDP knobs
    bucket_cap_mb: int = 25
    gradient_as_bucket_view: bool = True
    static_graph: bool = False
    # FSDP2 knobs
    cpu_offload: bool = False
    reshard_after_forward: bool = True
    # Gradient accumulation with sharded gradients (FSDP2, SMP): false keeps each micro-step's
    # unsharded gradients and reduce-scatters once per step (faster, a full gradient copy per GPU);
    # true reduce-scatters every micro-step (grad_accum times the traffic, sharded gradients only).
    # The planner sets it when only the memory it saves makes the job fit.
    reduce_every_micro_step: bool = False
    # SMP v2: the JSON the SageMaker SDK passes as the `mp_parameters` hyperparameter
    mp_parameters: str = "{}"
    # Steps between checkpoints, or "auto": the interval that loses least to saves and failures
    # (trainstack_contract/checkpoint_cadence.py), from `mttf` and the save time the job measures.
    # parse_config's default: auto on several hosts, 50 steps on one.
    checkpoint_every: int | str = 50
    # For auto: the job's mean time to failure in seconds (0: its GPUs at the published per-GPU rate),
    # and the plan's estimate of one save until the job has timed its own (0: none, an early save times it).
    mttf: float = 0.0
    planned_save_seconds: float = 0.0
    # Seconds of wall clock between checkpoints as well (0: steps only): a failure then loses at most
    # this much training whatever the step time; rank 0's clock decides, every rank saves at one step.
    checkpoint_interval: float = 0.0
    keep_checkpoints: int = 2
    # Save in the background (DCP's async_save): the step loop stalls only for the copy to host memory.
    # Images older than runtime_requirements.ASYNC_CHECKPOINT save synchronously, and the log says so.
    async_checkpoint: bool = True
    log_every: int = 10
    checkpoint_dir: str = "/opt/ml/checkpoints"
    model_dir: str = field(default_factory=lambda: os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    data_dir: str = field(default_factory=lambda: os.environ.get("SM_CHANNEL_TRAIN", ""))
    # From the toolkit's input data config for data_dir's channel (parse_config); ShardedByS3Key
    # also suits any data_dir that holds different files on each node.
    data_distribution: str = "FullyReplicated"
    output_dir: str = field(default_factory=lambda: os.environ.get("SM_OUTPUT_DIR", "/opt/ml/output"))
    tensorboard_dir: str = ""
    # The watchdog (watchdog.py): a stalled job fails, naming the ranks it waits for, instead of billing.
    step_timeout: float = 0.0  # seconds without an optimizer step; 0: derived from the median step time
    startup_timeout: float = 1800.0  # seconds to the first step (compilation, resume), and for each save
    # On EFA hosts (FI_PROVIDER=efa) across several nodes, fail unless NCCL uses libfabric with the efa provider.
    require_efa_transport: bool = True
    # Health rules (health_rules.py) as JSON: every rule at its defaults unless changed or turned off.
    health: str = "{}"
    histogram_every: int = 0  # steps between weight and gradient histograms in TensorBoard; 0: none

    def __post_init__(self) -> None:
        _one_of("strategy", self.strategy, STRATEGIES)
        if not is_known_model(self.model):
            raise ConfigError(
                f"hyperparameter 'model' = {self.model!r}: choose one of {', '.join(MODEL_NAMES)}, "
                f"or {HF_PREFIX}<folder or config.json> for a Hugging Face causal LM"
            )
        _one_of("precision", self.precision, PRECISIONS)
        _one_of("data_distribution", self.data_distribution, DATA_DISTRIBUTIONS)
        for name in ("max_steps", "micro_batch_size", "grad_accum", "log_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ConfigError(f"hyperparameter '{name}' = {getattr(self, name)}: must be at least 1")
        if self.checkpoint_every != AUTO and not (isinstance(self.checkpoint_every, int) and self.checkpoint_every >= 1):
            raise ConfigError(
                f"hyperparameter 'checkpoint_every' = {self.checkpoint_every!r}: steps (at least 1), or {AUTO} for the "
                "interval that loses least to saves and failures"
            )
        for name in ("mttf", "planned_save_seconds"):
            if getattr(self, name) < 0:
                raise ConfigError(f"hyperparameter '{name}' = {getattr(self, name)}: seconds, or 0 to leave it to the job")
        if self.checkpoint_interval < 0:
            raise ConfigError(
                f"hyperparameter 'checkpoint_interval' = {self.checkpoint_interval}: seconds, or 0 to checkpoint by steps only"
            )
        if self.step_timeout < 0:
            raise ConfigError(f"hyperparameter 'step_timeout' = {self.step_timeout}: seconds, or 0 to derive it from step times")
        if self.startup_timeout <= 0:
            raise ConfigError(f"hyperparameter 'startup_timeout' = {self.startup_timeout}: must be positive (seconds)")
        if self.seq_len < 0:
            raise ConfigError(f"hyperparameter 'seq_len' = {self.seq_len}: must be 0 (the model's context) or positive")
        if self.zero1 and self.strategy not in ("ddp", "smddp"):
            raise ConfigError(
                f"hyperparameter 'zero1' is for ddp/smddp; strategy '{self.strategy}' already shards optimizer state"
            )
        if self.cpu_offload and self.strategy != "fsdp":
            raise ConfigError("hyperparameter 'cpu_offload' needs strategy 'fsdp' (FSDP2 CPUOffloadPolicy)")
        if self.reduce_every_micro_step and self.strategy not in ("fsdp", "smp"):
            raise ConfigError(
                f"hyperparameter 'reduce_every_micro_step' is for fsdp/smp; strategy '{self.strategy}' keeps whole gradients"
            )
        if int(self.smp_parameters.get("tensor_parallel_degree", 1) or 1) > 1 and not is_hf_model(self.model):
            raise ConfigError(
                f"mp_parameters tensor_parallel_degree > 1: SMP's tsm.transform parallelizes Hugging Face models only, "
                f"not {self.model!r}; use model '{HF_PREFIX}<folder>' (Llama, Mistral, Mixtral, GPT-NeoX) "
                "or tensor_parallel_degree 1"
            )
        if self.histogram_every < 0:
            raise ConfigError(f"hyperparameter 'histogram_every' = {self.histogram_every}: steps, or 0 for none")
        self.health_rules  # noqa: B018 - parsed here so a bad rule fails before training starts

    @property
    def smp_parameters(self) -> dict[str, typing.Any]:
        return parse_mp_parameters(self.mp_parameters)

    @property
    def health_rules(self) -> tuple[RuleSetting, ...]:
        try:
            return parse_health(self.health)
        except ValueError as error:
            raise ConfigError(f"hyperparameter 'health': {error}") from None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def parse_mp_parameters(text: str) -> dict[str, typing.Any]:
    """SMP parameters as JSON (SM_HP_MP_PARAMETERS) or as the toolkit renders a dict on the command
    line: `hybrid_shard_degree=2,tensor_parallel_degree=1`."""
    text = text.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
        raise ConfigError(f"hyperparameter 'mp_parameters' = {text!r}: not a JSON object or key=value list")
    parameters: dict[str, typing.Any] = {}
    for item in filter(None, text.split(",")):
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ConfigError(f"hyperparameter 'mp_parameters' = {text!r}: not a JSON object or key=value list")
        try:
            parameters[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            parameters[key.strip()] = value.strip()
    return parameters


def parse_config(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Build the config from `SM_HPS`, then `--name value` arguments, over the defaults."""
    environ = os.environ if environ is None else environ
    raw: dict[str, str] = {}
    for name, value in json.loads(environ.get("SM_HPS", "{}") or "{}").items():
        raw[_canonical(name)] = value if isinstance(value, str) else json.dumps(value)
    raw.update(_arguments(argv))
    raw.setdefault("strategy", default_strategy(environ))
    raw.setdefault("checkpoint_every", AUTO if host_count(environ) > 1 else "50")
    raw.setdefault("data_distribution", channel_distribution(raw.get("data_dir", environ.get("SM_CHANNEL_TRAIN", "")), environ))
    known = {f.name: f for f in fields(TrainConfig)}
    values: dict[str, typing.Any] = {}
    for name, text in raw.items():
        if name not in known:
            raise ConfigError(f"unknown hyperparameter '{name}'; known: {', '.join(sorted(known))}")
        values[name] = _coerce(name, text, known[name].type)
    return TrainConfig(**values)


def requested_output_dir(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> str:
    """Where to report a failure even when the config itself failed to parse."""
    environ = os.environ if environ is None else environ
    try:
        return _arguments(argv).get("output_dir") or environ.get("SM_OUTPUT_DIR", "/opt/ml/output")
    except ConfigError:
        return environ.get("SM_OUTPUT_DIR", "/opt/ml/output")


def default_strategy(environ: Mapping[str, str]) -> str:
    """The strategy implied by how SageMaker launched the container (its `distribution`)."""
    mp_parameters = environ.get("SM_HP_MP_PARAMETERS", "")
    if mp_parameters and mp_parameters != "{}":
        return "smp"
    framework = json.loads(environ.get("SM_TRAINING_ENV", "{}") or "{}").get("additional_framework_parameters", {})
    if framework.get("sagemaker_distributed_dataparallel_enabled") in (True, "true"):
        return "smddp"
    return "ddp"


def host_count(environ: Mapping[str, str]) -> int:
    """The job's hosts: the toolkit's `SM_HOSTS`, else `resourceconfig.json`; one without either."""
    text = environ.get("SM_HOSTS")
    if text is None:
        path = Path(environ.get("SM_INPUT_CONFIG_DIR", "/opt/ml/input/config")) / "resourceconfig.json"
        text = json.dumps(json.loads(path.read_text()).get("hosts", [])) if path.is_file() else "[]"
    return max(1, len(json.loads(text)))


def channel_distribution(data_dir: str, environ: Mapping[str, str]) -> str:
    """The S3DistributionType of the SageMaker channel whose folder data_dir is.

    The toolkit passes the input data config as `SM_INPUT_DATA_CONFIG` and each channel's folder as
    `SM_CHANNEL_<NAME>`; without the toolkit they are `inputdataconfig.json` and
    `/opt/ml/input/data/<name>`. A data_dir that is no channel (or the shipped sample data) is the
    same on every host.
    """
    text = environ.get("SM_INPUT_DATA_CONFIG")
    if text is None:
        path = Path(environ.get("SM_INPUT_CONFIG_DIR", "/opt/ml/input/config")) / "inputdataconfig.json"
        text = path.read_text() if path.is_file() else "{}"
    for name, channel in json.loads(text or "{}").items():
        folder = environ.get(f"SM_CHANNEL_{name.upper()}", f"/opt/ml/input/data/{name}")
        if data_dir and os.path.normpath(folder) == os.path.normpath(data_dir):
            return channel.get("S3DistributionType", "FullyReplicated")
    return "FullyReplicated"


def _canonical(name: str) -> str:
    return name.lstrip("-").replace("-", "_")


def _arguments(argv: Sequence[str]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    items = list(argv)
    index = 0
    while index < len(items):
        token = items[index]
        if not token.startswith("--"):
            raise ConfigError(f"unexpected argument {token!r}: hyperparameters are passed as --name value")
        if "=" in token:
            name, value = token.split("=", 1)
            index += 1
        elif index + 1 < len(items) and not items[index + 1].startswith("--"):
            name, value = token, items[index + 1]
            index += 2
        else:
            name, value = token, "true"  # a bare flag
            index += 1
        parsed[_canonical(name)] = value
    return parsed


def _coerce(name: str, text: str, annotation: str) -> typing.Any:
    if annotation == "int | str":  # a count, or a word the config checks (checkpoint_every's auto)
        try:
            return _coerce(name, text, "int")
        except ConfigError:
            return text.strip()
    # A field's type is its annotation's text here (`from __future__ import annotations`), so an optional
    # one reads "bool | None": left as text, "false" was a truthy string (fused_adamw false ran fused).
    kind = {"int": int, "float": float, "bool": bool, "str": str}.get(annotation.removesuffix(" | None"), annotation)
    try:
        if kind is bool:
            lowered = text.strip().lower()
            if lowered not in ("true", "false", "1", "0"):
                raise ValueError
            return lowered in ("true", "1")
        if kind is int:
            return int(float(text)) if float(text).is_integer() else int(text)
        if kind is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"hyperparameter '{name}' = {text!r}: expected {kind.__name__}") from None
    return text


def _one_of(name: str, value: str, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ConfigError(f"hyperparameter '{name}' = {value!r}: choose one of {', '.join(allowed)}")
