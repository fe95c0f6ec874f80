"""The built-in training script's contract, checked before launch: a job that runs trainstack's own
code (no `image`, no `source_dir`) must pass hyperparameters the script's typed config accepts, for
every trial of a sweep, and give it inputs it can read.

The hyperparameters go through the script's own parser (trainstack_contract.config, shipped beside
the core in the Lambda asset), so the check and the script can never disagree.
"""

from __future__ import annotations

from trainstack import facts, images
from trainstack.entrypoint import INPUT_DATA_ROOT
from trainstack.facts import ImageKind, Runtime
from trainstack.instances import lookup
from trainstack.planner.workload import builtin_config
from trainstack.rules import Problem, Resolution
from trainstack.spec import JobSpec
from trainstack.workflow import trials
from trainstack_contract.config import ConfigError
from trainstack_contract.model_sizes import hf_source, is_hf_model
from trainstack_contract.runtime_requirements import Need, meets, needs

# The script reads its data as files: a Pipe channel is a FIFO of concatenated records it cannot parse.
READABLE_MODES = ("File", "FastFile")


def contract_problems(spec: JobSpec, resolution: Resolution) -> list[Problem]:
    """Every way the built-in script would refuse this spec once its instances are up, its image's
    runtime included."""
    strategy = resolution.strategy
    if not spec.uses_builtin_script:
        if spec.health is not None:
            return [
                Problem(
                    "health",
                    None,
                    "the health rules run inside trainstack's built-in training script, not in your own",
                    "remove the health block, or run the built-in script (no image, no source_dir)",
                )
            ]
        return []
    problems = [
        Problem(
            f"inputs.{name}.mode",
            channel.mode,
            "the built-in training script reads files; Pipe streams records through a FIFO it cannot read",
            "use FastFile (streams from S3 on demand) or File",
        )
        for name, channel in spec.inputs.items()
        if channel.mode not in READABLE_MODES
    ]
    seen: set[str] = set()
    models: set[tuple[str, int]] = set()
    offloads = False  # some trial offloads to the host
    for index, overrides in enumerate(trials(spec)):
        try:
            config = builtin_config(spec, strategy, overrides)
        except ConfigError as error:
            if str(error) in seen:  # the same bad base hyperparameter fails every trial alike
                continue
            seen.add(str(error))
            where = (
                f"sweep trial {index} ({_describe(overrides)})"
                if overrides and _from_trial(error, overrides)
                else "hyperparameters"
            )
            fix = "see the hyperparameters the built-in script takes in docs/training.md"
            problems.append(Problem(where, None, str(error), fix))
            continue
        if (config.model, config.seq_len) not in models:  # a sweep over other hyperparameters repeats them
            if config.model not in {model for model, _ in models}:
                problems += _runtime_problems(spec, resolution, config.model)
            models.add((config.model, config.seq_len))
            problems += _hf_seq_len_problems(spec, config.model, config.seq_len) + _model_channel_problems(spec, config.model)
        offloads = offloads or config.cpu_offload
    return problems + (_cpu_offload_problems(spec) if offloads else [])


def _runtime_problems(spec: JobSpec, resolution: Resolution, model: str) -> list[Problem]:
    """The framework image's torch and packages against what the script needs for this strategy and
    model (trainstack_contract.runtime_requirements): a job on an image that cannot run it would be
    billed for its start-up and die at import."""
    if resolution.framework is None:  # your own image (not seen here), or no version: other rules speak
        return []
    kind, version = resolution.image_kind, resolution.framework.version
    runtime = facts.image_version(kind, version).runtime
    problems = []
    for need in needs(resolution.strategy, model):
        if need.package and not _has(runtime, need):
            problems.append(
                Problem(
                    "hyperparameters.model" if need.what.startswith("model") else "image",
                    model,
                    f"{need.why}; the {images.repository(kind)} image for PyTorch {version} has none",
                    "write `image: project`: the stack's project image installs the pinned transformers "
                    "(`-c build_training_image=true`; the local twin's stack has it)",
                )
            )
        elif not meets(runtime.torch, need):
            problems.append(
                Problem(
                    "framework_version",
                    spec.framework_version or version,
                    f"{need.what} needs torch {need.torch} or newer ({need.why}); "
                    f"the {images.repository(kind)} image for PyTorch {version} has torch {runtime.torch}",
                    _version_fix(resolution, model),
                )
            )
    return problems


def _has(runtime: Runtime, need: Need) -> bool:
    """Whether the image has the package, at the major release the need names (an unknown is no)."""
    if not need.package_major:
        return bool(runtime.has(need.package))
    installed = runtime.packages.get(need.package)
    return isinstance(installed, str) and int(installed.split(".")[0]) >= need.package_major


# The image family and launcher each of the built-in script's strategies resolves to on a GPU type
# (rules.resolve; mpi runs the script too, on any version the DLC has).
STRATEGY_IMAGES: dict[str, tuple[ImageKind, str]] = {
    "ddp": ("dlc", images.TORCH_DISTRIBUTED),
    "fsdp": ("dlc", images.TORCH_DISTRIBUTED),
    "smddp": ("dlc", images.SMDATAPARALLEL),
    "smp": ("smp", images.TORCH_DISTRIBUTED),
}


def runnable_versions(kind: ImageKind, launchers: frozenset[str], strategy: str, model: str) -> list[str]:
    """The versions the launchers take whose image's torch runs the built-in script for this
    strategy and model, oldest first (what the tests run each strategy on: the first and the last)."""
    return [
        version
        for version in images.supported_versions(kind, launchers)
        if all(meets(facts.image_version(kind, version).runtime.torch, need) for need in needs(strategy, model))
    ]


def _version_fix(resolution: Resolution, model: str) -> str:
    """The oldest version the launcher takes whose image runs the script for this job."""
    runnable = runnable_versions(resolution.image_kind, resolution.launchers, resolution.strategy, model)
    if not runnable:
        return f"no {images.repository(resolution.image_kind)} image this launcher takes runs it: choose another strategy"
    return f"use framework_version {runnable[0]} or newer ({', '.join(runnable)}), or leave it out for {runnable[-1]}"


def _cpu_offload_problems(spec: JobSpec) -> list[Problem]:
    """FSDP2 offloads the sharded states to pinned host memory, and pinning needs a GPU: on a CPU
    instance the script fails in fully_shard, after the instances are billed."""
    cpu_only = [name for name in spec.capacity_options if (instance := lookup(name)) is not None and instance.kind != "gpu"]
    if not cpu_only:
        return []
    return [
        Problem(
            "hyperparameters.cpu_offload",
            True,
            f"FSDP2 offloads to pinned host memory, which needs a GPU; {', '.join(cpu_only)} has none",
            "set cpu_offload false, or choose GPU instances",
        )
    ]


def _hf_seq_len_problems(spec: JobSpec, model: str, seq_len: int) -> list[Problem]:
    """The plan reads an `hf:` model's shape from the spec's model block, the container its
    config.json: without the seq_len hyperparameter the container trains at the config's
    max_position_embeddings, which the plan cannot see. So the two must state the same length."""
    if not is_hf_model(model) or spec.model is None or seq_len == spec.model.seq_len:
        return []
    trained = f"{seq_len}" if seq_len else "its config's max_position_embeddings (seq_len unset)"
    return [
        Problem(
            "hyperparameters.seq_len",
            seq_len or None,
            f"{model} would train at {trained}, but the plan is for model.seq_len {spec.model.seq_len}",
            f"set the hyperparameter seq_len to {spec.model.seq_len}, or model.seq_len to the length you train at",
        )
    ]


def _model_channel_problems(spec: JobSpec, model: str) -> list[Problem]:
    """An `hf:` model read from an input channel needs that channel, whole on every host: every rank
    loads the same weights (FSDP2: rank 0 alone, wherever it runs; ShardedByS3Key would give each
    host part of the files)."""
    if not is_hf_model(model) or not hf_source(model).startswith(f"{INPUT_DATA_ROOT}/"):
        return []
    name = hf_source(model).removeprefix(f"{INPUT_DATA_ROOT}/").split("/", 1)[0]
    channel = spec.inputs.get(name)
    if channel is None:
        known = ", ".join(sorted(spec.inputs)) or "none"
        return [
            Problem(
                "hyperparameters.model",
                model,
                f"reads the input channel {name!r}, which the spec does not give (its inputs: {known})",
                f"add inputs.{name} with the model's folder (config.json and *.safetensors)",
            )
        ]
    if channel.distribution == "ShardedByS3Key":
        return [
            Problem(
                f"inputs.{name}.distribution",
                channel.distribution,
                "the model's weights would be split between the hosts; every rank needs all of them",
                "use FullyReplicated for the model's channel",
            )
        ]
    return []


def _from_trial(error: ConfigError, overrides: dict) -> bool:
    return any(f"'{name}'" in str(error) for name in overrides)


def _describe(overrides: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in overrides.items())
